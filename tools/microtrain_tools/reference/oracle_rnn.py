"""Oracle of the GRU over a sequence (docs/numerics.md, "GRU over a sequence"): the
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

GRU_NPARAMS = 13
_B = 1 << 22  # the running error's saturation bound
_F = 8  # fractional bits of the running error (units s_e 2^-8)


def _gru_desc(desc: Sequence[int], fn: str) -> list[int]:
    d = [int(v) for v in desc]
    if len(d) != GRU_NPARAMS:
        raise _fail(fn, "desc", f"length {len(d)}, expected {GRU_NPARAMS}")
    t, dd, h, xzp, m_rn, sh_rn, k, m_h, sh_h, m_hn, sh_hn, m_w, sh_w = d
    if not (1 <= t <= 32768 and 1 <= dd <= 32768 and 1 <= h and dd + h <= 65535):
        raise _fail(fn, "desc", "T, D, H must be >= 1 with T <= 32768, D <= 32768 and D + H <= 65535")
    if t * max(dd, 4 * h) > 1 << 26 or 3 * h * (dd + h) > 1 << 26:
        raise _fail(fn, "desc", "a tensor over 2^26 elements")
    if not -128 <= xzp <= 127:
        raise _fail(fn, "desc", "x_zp must be in -128..127")
    if k < 0:
        raise _fail(fn, "desc", "k must be >= 0")
    if min(m_rn, m_h, m_hn, m_w) < 0:
        raise _fail(fn, "desc", "multipliers must be >= 0 (Q31)")
    if not -31 <= sh_rn <= 15:
        raise _fail(fn, "desc", "sh_rn must be in -31..15")
    if not (-31 <= sh_h <= 0 and -31 <= sh_hn <= 0 and -31 <= sh_w <= 0):
        raise _fail(fn, "desc", "sh_h, sh_hn, sh_w must be in -31..0")
    return d


def _sat(v: np.ndarray) -> np.ndarray:
    return np.clip(v, -_B, _B)


def _dhm(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    return (np.asarray(a, dtype=np.int64) * np.asarray(b, dtype=np.int64) + (1 << 30)) >> 31


def _s8c(v: np.ndarray) -> np.ndarray:
    return np.clip(v, -128, 127)


def gru_s8_forward(desc: Sequence[int], x: ArrayLike, w: ArrayLike, bias: ArrayLike, mult: ArrayLike,
                   shift: ArrayLike, lut: ArrayLike) -> tuple[I8, I8]:
    """(y, keep): the hidden states (T x H) and each step's r, z, n, hn (T x 4H)."""
    fn = "gru_s8_forward"
    d = _gru_desc(desc, fn)
    t_n, dd, h, xzp, m_rn, sh_rn = d[:6]
    xs = _s8(x, fn, "x", t_n * dd).reshape(t_n, dd) - xzp
    ws = _s8(w, fn, "w", 3 * h * (dd + h)).reshape(3 * h, dd + h)
    b = _i32(bias, fn, "bias", 4 * h)
    m = _i32(mult, fn, "mult", 6 * h)
    s = _i32(shift, fn, "shift", 6 * h)
    tab = _s8(lut, fn, "lut", 768).reshape(3, 256)
    wi, wh = ws[:, :dd], ws[:, dd:]
    hp = np.zeros(h, dtype=np.int64)
    y = np.zeros((t_n, h), dtype=np.int64)
    keep = np.zeros((t_n, 4 * h), dtype=np.int64)
    for t in range(t_n):
        ax = b[:3 * h] + wi @ xs[t]
        ah = wh @ hp
        ah[2 * h:] += b[3 * h:]
        px = requant(ax, m[:3 * h], s[:3 * h])
        ph = requant(ah, m[3 * h:], s[3 * h:])
        r = tab[0][_s8c(px[:h] + ph[:h]) + 128]
        z = tab[1][_s8c(px[h:2 * h] + ph[h:2 * h]) + 128]
        hn = _s8c(ph[2 * h:])
        n = tab[2][_s8c(px[2 * h:] + requant((r + 128) * hn, m_rn, sh_rn)) + 128]
        hp = rounding_divide_by_pot((128 - z) * n + (z + 128) * hp, 8)
        y[t] = hp
        keep[t] = np.concatenate([r, z, n, hn])
    return y.astype(np.int8).reshape(-1), keep.astype(np.int8).reshape(-1)


def _shl_sat(v: np.ndarray, a: int) -> np.ndarray:
    return _sat(np.asarray(v, dtype=np.int64) << a)


def gru_s8_backward(desc: Sequence[int], x: ArrayLike, w: ArrayLike, wr: ArrayLike, dtanh: ArrayLike,
                    y: ArrayLike, keep: ArrayLike, e: ArrayLike) -> tuple[int, I8, I32, I32, I32, I32, I8]:
    """(shift, keep, shifts, acc, gw, gb, ein): backward through time over the last k steps;
    keep comes back holding the step errors on 2^max(shifts), acc the running error past the
    last trained step and that step's gate errors, as the kernel leaves them."""
    fn = "gru_s8_backward"
    d = _gru_desc(desc, fn)
    t_n, dd, h, xzp = d[:4]
    k, m_h, sh_h, m_hn, sh_hn, m_w, sh_w = d[6:]
    xs = _s8(x, fn, "x", t_n * dd).reshape(t_n, dd) - xzp
    ws = _s8(w, fn, "w", 3 * h * (dd + h)).reshape(3 * h, dd + h)
    wrs = _i32(wr, fn, "wr", 3 * h)
    dt = _i32(dtanh, fn, "dtanh", 256)
    ys = _s8(y, fn, "y", t_n * h).reshape(t_n, h)
    kp = _s8(keep, fn, "keep", t_n * 4 * h).reshape(t_n, 4 * h).copy()
    es = _s8(e, fn, "e", t_n * h).reshape(t_n, h)
    if int(wrs.min()) < 0 or int(wrs.max()) * 3 * h * 16384 > INT32_MAX:
        raise _fail(fn, "wr", "must be >= 0 with max(wr) * 3H * 16384 <= 2^31 - 1")
    if int(dt.min()) < 0:
        raise _fail(fn, "dtanh", "must be >= 0 (Q31)")
    t0 = t_n - k if 0 < k < t_n else 0
    wh = ws[:, dd:]
    # the h-part weights of the rows that meet dpr, dpz (rows 0..2H) and dhn (rows 2H..3H)
    whw = wh * wrs[:, None]
    dh = np.zeros(h, dtype=np.int64)
    shifts = np.zeros(t_n, dtype=np.int64)
    g = np.zeros(4 * h, dtype=np.int64)
    for t in range(t_n - 1, t0 - 1, -1):
        r, z, n, hn = (kp[t, i * h:(i + 1) * h] for i in range(4))
        hp = ys[t - 1] if t > 0 else np.zeros(h, dtype=np.int64)
        dh = _sat(256 * es[t] + dh)
        u, v = z + 128, r + 128
        dn = rounding_divide_by_pot(dh * (256 - u), 8)
        dz = _sat(requant(dh * (hp - n), m_h, sh_h))
        dpn = _dhm(dn, dt[n + 128])
        dpz = _dhm(dz, u * (256 - u) * (1 << 15))
        dhn = _dhm(dpn, v << 23)
        dr = _sat(requant(dpn * hn, m_hn, sh_hn))
        dpr = _dhm(dr, v * (256 - v) * (1 << 15))
        dh = rounding_divide_by_pot(dh * u, 8)
        g = np.concatenate([dpr, dpz, dpn, dhn])
        d8, a = dyn_requant(g)
        d8 = d8.astype(np.int64)
        kp[t] = d8
        shifts[t] = a
        dd8 = np.concatenate([d8[:2 * h], d8[3 * h:]])
        sj = whw.T @ dd8
        dh = _sat(dh + _shl_sat(requant(sj, m_w, sh_w), a))
    big = int(shifts.max())
    tr = slice(t0, t_n)
    for t in range(t0, t_n):
        kp[t] = rounding_divide_by_pot(kp[t], big - int(shifts[t]))
    dk = kp[tr]
    gw = np.zeros((3 * h, dd + h), dtype=np.int64)
    gw[:, :dd] = dk[:, :3 * h].T @ xs[tr]
    hprev = np.vstack([np.zeros((1, h), dtype=np.int64), ys[:-1]])[tr]
    dprime = np.concatenate([dk[:, :2 * h], dk[:, 3 * h:]], axis=1)
    gw[:, dd:] = dprime.T @ hprev
    gb = dk.sum(axis=0)
    acc = np.zeros((t_n, dd), dtype=np.int64)
    acc[tr] = (dk[:, :3 * h] * wrs[None, :]) @ ws[:, :dd]
    ein, sh = dyn_requant(acc.reshape(-1))
    scratch = np.concatenate([dh, g]).astype(np.int32)
    return (sh, kp.astype(np.int8).reshape(-1), shifts.astype(np.int32), scratch,
            gw.astype(np.int32).reshape(-1), gb.astype(np.int32), ein)


def gru_dtanh(s_h: float) -> I32:
    """tanh's derivative from its int8 output at scale s_h, in Q31 (indexed by n + 128)."""
    n = np.arange(-128, 128, dtype=np.float64) * float(s_h)
    v = np.floor((1.0 - n * n) * 2.0**31 + 0.5)
    return np.clip(v, 0, INT32_MAX).astype(np.int32)


def gru_params(t: int, d: int, h: int, s_x: float, x_zp: int, s_w: ArrayLike, s_r: float, s_z: float,
               s_n: float, s_hn: float, s_h: float, k: int = 0
               ) -> tuple[list[int], I32, I32, I8, I32, I32]:
    """(desc, mult, shift, lut, wr, dtanh) of a GRU layer from its scales (s_w: 3H per-row)."""
    sw = np.asarray(s_w, dtype=np.float64).reshape(-1)
    gate = np.repeat(np.array([s_r, s_z, s_n], dtype=np.float64), h)
    hgate = np.repeat(np.array([s_r, s_z, s_hn], dtype=np.float64), h)
    reals = np.concatenate([float(s_x) * sw / gate, float(s_h) * sw / hgate])
    ms = [quantize_multiplier(float(v)) for v in reals]
    mult = np.array([a for a, _ in ms], dtype=np.int32)
    shift = np.array([b for _, b in ms], dtype=np.int32)
    lut = np.concatenate([lut_tables("sigmoid", s_r, 0, 1 / 256, -128)[0],
                          lut_tables("sigmoid", s_z, 0, 1 / 256, -128)[0],
                          lut_tables("tanh", s_n, 0, s_h, 0)[0]]).astype(np.int8)
    wr, big_r = weight_ratios(sw, 3 * h)
    m_rn, sh_rn = quantize_multiplier(float(s_hn) / (256.0 * float(s_n)))
    m_h, sh_h = quantize_multiplier(float(s_h))
    m_hn, sh_hn = quantize_multiplier(float(s_hn))
    m_w, sh_w = quantize_multiplier(float(sw.max()) * 2.0**-big_r)
    desc = [int(t), int(d), int(h), int(x_zp), m_rn, sh_rn, int(k), m_h, sh_h, m_hn, sh_hn, m_w, sh_w]
    return desc, mult, shift, lut, wr, gru_dtanh(s_h)
