"""Oracle of the LSTM over a sequence (docs/numerics.md, "LSTM over a sequence"): the
forward with what backward keeps, backward through time with truncation, and the host's
descriptor and tables from the scales. Written from the contract, independent of the C."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from microtrain_tools.reference.oracle_base import (
    I8,
    I32,
    INT32_MAX,
    _fail,
    _i32,
    _s8,
    dyn_requant,
    requant,
    rounding_divide_by_pot,
)
from microtrain_tools.reference.oracle_host import lut_tables, quantize_multiplier, weight_ratios
from microtrain_tools.reference.oracle_rnn import _dhm, _s8c, _sat, _shl_sat, gru_dtanh

LSTM_NPARAMS = 13


def _lstm_desc(desc: Sequence[int], fn: str) -> list[int]:
    d = [int(v) for v in desc]
    if len(d) != LSTM_NPARAMS:
        raise _fail(fn, "desc", f"length {len(d)}, expected {LSTM_NPARAMS}")
    t, dd, h, xzp, m_ig, sh_ig, k, m_h, sh_h, m_c, sh_c, m_w, sh_w = d
    if not (1 <= t <= 32768 and 1 <= dd <= 32768 and 1 <= h and dd + h <= 65535):
        raise _fail(fn, "desc", "T, D, H must be >= 1 with T <= 32768, D <= 32768 and D + H <= 65535")
    if t * max(dd, 6 * h) > 1 << 26 or 4 * h * (dd + h) > 1 << 26:
        raise _fail(fn, "desc", "a tensor over 2^26 elements")
    if not -128 <= xzp <= 127:
        raise _fail(fn, "desc", "x_zp must be in -128..127")
    if k < 0:
        raise _fail(fn, "desc", "k must be >= 0")
    if min(m_ig, m_h, m_c, m_w) < 0:
        raise _fail(fn, "desc", "multipliers must be >= 0 (Q31)")
    if not -31 <= sh_ig <= 15:
        raise _fail(fn, "desc", "sh_ig must be in -31..15")
    if not (-31 <= sh_h <= 0 and -31 <= sh_c <= 0 and -31 <= sh_w <= 0):
        raise _fail(fn, "desc", "sh_h, sh_c, sh_w must be in -31..0")
    return d


def lstm_s8_forward(desc: Sequence[int], x: ArrayLike, w: ArrayLike, bias: ArrayLike, mult: ArrayLike,
                    shift: ArrayLike, lut: ArrayLike) -> tuple[I8, I8]:
    """(y, keep): the hidden states (T x H) and each step's i, f, g, o, c, tanh(c) (T x 6H)."""
    fn = "lstm_s8_forward"
    d = _lstm_desc(desc, fn)
    t_n, dd, h, xzp, m_ig, sh_ig = d[:6]
    xs = _s8(x, fn, "x", t_n * dd).reshape(t_n, dd) - xzp
    ws = _s8(w, fn, "w", 4 * h * (dd + h)).reshape(4 * h, dd + h)
    b = _i32(bias, fn, "bias", 4 * h)
    if np.abs(b).max() > 1 << 30:
        raise _fail(fn, "bias", "bias must be in -2^30..2^30")
    m = _i32(mult, fn, "mult", 8 * h)
    s = _i32(shift, fn, "shift", 8 * h)
    if m.min() < 0 or s.min() < -31 or s.max() > 31:
        raise _fail(fn, "shift", "mult must be >= 0, shift in -31..31")
    tab = _s8(lut, fn, "lut", 1280).reshape(5, 256)
    wi, wh = ws[:, :dd], ws[:, dd:]
    hp = np.zeros(h, dtype=np.int64)
    cp = np.zeros(h, dtype=np.int64)
    y = np.zeros((t_n, h), dtype=np.int64)
    keep = np.zeros((t_n, 6 * h), dtype=np.int64)
    for t in range(t_n):
        pre = _s8c(requant(b + wi @ xs[t], m[:4 * h], s[:4 * h]) + requant(wh @ hp, m[4 * h:], s[4 * h:]))
        gates = [tab[q][pre[q * h:(q + 1) * h] + 128] for q in range(4)]
        ig, fg, gg, og = gates
        cp = _s8c(rounding_divide_by_pot((fg + 128) * cp, 8) + requant((ig + 128) * gg, m_ig, sh_ig))
        tc = tab[4][cp + 128]
        hp = rounding_divide_by_pot((og + 128) * tc, 8)
        y[t] = hp
        keep[t] = np.concatenate([ig, fg, gg, og, cp, tc])
    return y.astype(np.int8).reshape(-1), keep.astype(np.int8).reshape(-1)


def lstm_s8_backward(desc: Sequence[int], x: ArrayLike, w: ArrayLike, wr: ArrayLike, dtanh: ArrayLike,
                     y: ArrayLike, keep: ArrayLike, e: ArrayLike) -> tuple[int, I8, I32, I32, I32, I32, I8]:
    """(shift, keep, shifts, acc, gw, gb, ein): backward through time over the last k steps;
    keep's gate bytes come back holding the step errors on 2^max(shifts), acc the running
    errors of h and c past the last trained step and that step's gate errors."""
    fn = "lstm_s8_backward"
    d = _lstm_desc(desc, fn)
    t_n, dd, h, xzp = d[:4]
    k, m_h, sh_h, m_c, sh_c, m_w, sh_w = d[6:]
    xs = _s8(x, fn, "x", t_n * dd).reshape(t_n, dd) - xzp
    ws = _s8(w, fn, "w", 4 * h * (dd + h)).reshape(4 * h, dd + h)
    wrs = _i32(wr, fn, "wr", 4 * h)
    dt = _i32(dtanh, fn, "dtanh", 256)
    ys = _s8(y, fn, "y", t_n * h).reshape(t_n, h)
    kp = _s8(keep, fn, "keep", t_n * 6 * h).reshape(t_n, 6 * h).copy()
    es = _s8(e, fn, "e", t_n * h).reshape(t_n, h)
    if int(wrs.min()) < 0 or int(wrs.max()) * 4 * h * 16384 > INT32_MAX:
        raise _fail(fn, "wr", "must be >= 0 with max(wr) * 4H * 16384 <= 2^31 - 1")
    if int(dt.min()) < 0:
        raise _fail(fn, "dtanh", "must be >= 0 (Q31)")
    t0 = t_n - k if 0 < k < t_n else 0
    whw = ws[:, dd:] * wrs[:, None]
    dh = np.zeros(h, dtype=np.int64)
    dc = np.zeros(h, dtype=np.int64)
    shifts = np.zeros(t_n, dtype=np.int64)
    g = np.zeros(4 * h, dtype=np.int64)
    for t in range(t_n - 1, t0 - 1, -1):
        ig, fg, gg, og, _, tc = (kp[t, q * h:(q + 1) * h] for q in range(6))
        cprev = kp[t - 1, 4 * h:5 * h] if t > 0 else np.zeros(h, dtype=np.int64)
        ui, uf, uo = ig + 128, fg + 128, og + 128
        dy = _sat(256 * es[t] + dh)
        dout = _sat(requant(dy * tc, m_h, sh_h))
        dcc = _sat(dc + _dhm(rounding_divide_by_pot(dy * uo, 8), dt[tc + 128]))
        di = _sat(requant(dcc * gg, m_h, sh_h))
        df = _sat(requant(dcc * cprev, m_c, sh_c))
        dg = rounding_divide_by_pot(dcc * ui, 8)
        g = np.concatenate([_dhm(di, ui * (256 - ui) * (1 << 15)), _dhm(df, uf * (256 - uf) * (1 << 15)),
                            _dhm(dg, dt[gg + 128]), _dhm(dout, uo * (256 - uo) * (1 << 15))])
        dc = rounding_divide_by_pot(dcc * uf, 8)
        d8, a = dyn_requant(g)
        d8 = d8.astype(np.int64)
        kp[t, :4 * h] = d8
        shifts[t] = a
        dh = _shl_sat(requant(whw.T @ d8, m_w, sh_w), a)
    big = int(shifts.max())
    tr = slice(t0, t_n)
    for t in range(t0, t_n):
        kp[t, :4 * h] = rounding_divide_by_pot(kp[t, :4 * h], big - int(shifts[t]))
    dk = kp[tr, :4 * h]
    gw = np.zeros((4 * h, dd + h), dtype=np.int64)
    gw[:, :dd] = dk.T @ xs[tr]
    hprev = np.vstack([np.zeros((1, h), dtype=np.int64), ys[:-1]])[tr]
    gw[:, dd:] = dk.T @ hprev
    gb = dk.sum(axis=0)
    acc = np.zeros((t_n, dd), dtype=np.int64)
    acc[tr] = (dk * wrs[None, :]) @ ws[:, :dd]
    ein, sh = dyn_requant(acc.reshape(-1))
    scratch = np.concatenate([dh, dc, g]).astype(np.int32)
    return (sh, kp.astype(np.int8).reshape(-1), shifts.astype(np.int32), scratch,
            gw.astype(np.int32).reshape(-1), gb.astype(np.int32), ein)


def lstm_params(t: int, d: int, h: int, s_x: float, x_zp: int, s_w: ArrayLike, s_i: float, s_f: float,
                s_g: float, s_o: float, s_c: float, s_h: float, k: int = 0
                ) -> tuple[list[int], I32, I32, I8, I32, I32]:
    """(desc, mult, shift, lut, wr, dtanh) of an LSTM layer from its scales (s_w: 4H per-row;
    s_i .. s_o the gates' pre-activations, s_c the cell state, s_h tanh's outputs and h)."""
    sw = np.asarray(s_w, dtype=np.float64).reshape(-1)
    gate = np.repeat(np.array([s_i, s_f, s_g, s_o], dtype=np.float64), h)
    reals = np.concatenate([float(s_x) * sw / gate, float(s_h) * sw / gate])
    ms = [quantize_multiplier(float(v)) for v in reals]
    mult = np.array([a for a, _ in ms], dtype=np.int32)
    shift = np.array([b for _, b in ms], dtype=np.int32)
    lut = np.concatenate([lut_tables("sigmoid", s_i, 0, 1 / 256, -128)[0],
                          lut_tables("sigmoid", s_f, 0, 1 / 256, -128)[0],
                          lut_tables("tanh", s_g, 0, s_h, 0)[0],
                          lut_tables("sigmoid", s_o, 0, 1 / 256, -128)[0],
                          lut_tables("tanh", s_c, 0, s_h, 0)[0]]).astype(np.int8)
    wr, big_r = weight_ratios(sw, 4 * h)
    m_ig, sh_ig = quantize_multiplier(float(s_h) / (256.0 * float(s_c)))
    m_h, sh_h = quantize_multiplier(float(s_h))
    m_c, sh_c = quantize_multiplier(float(s_c))
    m_w, sh_w = quantize_multiplier(float(sw.max()) * 2.0**-big_r)
    desc = [int(t), int(d), int(h), int(x_zp), m_ig, sh_ig, int(k), m_h, sh_h, m_c, sh_c, m_w, sh_w]
    return desc, mult, shift, lut, wr, gru_dtanh(s_h)
