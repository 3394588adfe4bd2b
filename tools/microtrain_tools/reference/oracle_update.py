"""Oracle of the optimiser-update primitives (docs/numerics.md, "Update").
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from microtrain_tools.reference.oracle_base import F32, INT32_MAX, U8, _fail, _i32, _s8

# --------------------------------------------------------------------------
# optimiser-update primitives (docs/numerics.md, "Update"): float32, one
# rounding per operation (numpy float32 element-wise operations), sums in
# storage order


def _touched_rows(touched: ArrayLike | None, n_ch: int, fn: str) -> NDArray[np.intp]:
    if touched is None:
        return np.arange(n_ch)
    t = _s8(touched, fn, "touched")
    if t.size != n_ch:
        raise _fail(fn, "touched", f"length {t.size}, expected {n_ch}")
    return np.flatnonzero(t != 0)


def _upd_g(g_in: ArrayLike, k: int, fn: str, name: str = "g") -> tuple[F32, int]:
    g = np.array(g_in, dtype=np.float32).reshape(-1)
    if k < 1 or g.size % k:
        raise _fail(fn, "k", f"{k} does not divide len({name}) = {g.size}")
    return g.reshape(-1, k).copy(), g.size // k


def ftz(x: ArrayLike) -> F32:
    """float32 x with every subnormal replaced by a zero of its sign (the optimiser state's decay
    product, docs/numerics.md "Update")."""
    a = np.asarray(x, dtype=np.float32)
    u = a.view(np.uint32)
    return np.where((u & np.uint32(0x7F800000)) != 0, u, u & np.uint32(0x80000000)).astype(
        np.uint32).view(np.float32)


def update_u8_touch(touched: ArrayLike, mask: ArrayLike | None) -> U8:
    """touched | (mask != 0) (mask None: every channel) -> new touched (0 / 1)."""
    t = (_s8(touched, "update_u8_touch", "touched") & 0xFF).astype(np.uint8)
    if mask is None:
        return np.ones_like(t)
    m = _s8(mask, "update_u8_touch", "mask", t.size)
    return np.where(m != 0, np.uint8(1), t).astype(np.uint8)


def update_f32_check(x: ArrayLike) -> int:
    """Index of the first inf / NaN of x, or -1."""
    bad = np.flatnonzero(~np.isfinite(np.asarray(x, dtype=np.float32).reshape(-1)))
    return int(bad[0]) if bad.size else -1


def _real(c_rows: NDArray[np.intp], k: int, q: ArrayLike | None, scale: ArrayLike | None, f: float,
          master: ArrayLike | None) -> F32:
    """Real values of the given channels: master, or ((float)q * f) * scale[c]."""
    if master is not None:
        return np.asarray(master, dtype=np.float32).reshape(-1, k)[c_rows]
    assert q is not None and scale is not None
    qa = np.asarray(q).reshape(-1)
    if qa.dtype.itemsize == 1:
        qa = qa.view(np.int8)
    qf = qa.astype(np.int64).astype(np.float32).reshape(-1, k)[c_rows]  # int -> float32, nearest even
    sc = np.asarray(scale, dtype=np.float32).reshape(-1)[c_rows]
    return (qf * np.float32(f)) * sc[:, None]


def update_f32_decay(g_in: ArrayLike, k: int, touched: ArrayLike | None, n: int, wd: float,
                     q: ArrayLike | None, scale: ArrayLike | None, f: float, master: ArrayLike | None) -> F32:
    """g = g * (1 / n) + wd * real on the touched channels (the decay term only when wd != 0)."""
    g, n_ch = _upd_g(g_in, k, "update_f32_decay")
    rows = _touched_rows(touched, n_ch, "update_f32_decay")
    inv = np.float32(1.0) / np.float32(n)
    d = g[rows] * inv
    w = np.float32(wd)
    if w != 0:
        d = d + w * _real(rows, k, q, scale, f, master)
    g[rows] = d
    return g.reshape(-1)


def update_f32_standardize(g_in: ArrayLike, k: int, touched: ArrayLike | None, n: int) -> F32:
    """Over the touched elements: g' = g * (1 / n); (g' - mu) * (1 / (sigma + 1e-8)) with mu and
    sigma^2 the means of g' and (g' - mu)^2 (sequential float32 sums); fewer than 2: g' only."""
    g, n_ch = _upd_g(g_in, k, "update_f32_standardize")
    rows = _touched_rows(touched, n_ch, "update_f32_standardize")
    v = g[rows] * (np.float32(1.0) / np.float32(n))
    g[rows] = v
    flat = v.reshape(-1)
    if flat.size >= 2:
        cnt = np.float32(flat.size)
        mu = np.add.accumulate(flat)[-1] / cnt
        d = flat - mu
        var = np.add.accumulate(d * d)[-1] / cnt
        inv = np.float32(1.0) / (np.sqrt(var) + np.float32(1e-8))
        g[rows] = (v - mu) * inv
    return g.reshape(-1)


def update_f32_axpby(y_in: ArrayLike, x: ArrayLike, k: int, touched: ArrayLike | None, a: float,
                     b: float) -> F32:
    """y = a * y + b * x on the touched channels."""
    y, n_ch = _upd_g(y_in, k, "update_f32_axpby", "y")
    xa = np.asarray(x, dtype=np.float32).reshape(-1, k)
    rows = _touched_rows(touched, n_ch, "update_f32_axpby")
    y[rows] = np.float32(a) * y[rows] + np.float32(b) * xa[rows]
    return y.reshape(-1)


def update_f32_momentum(g_in: ArrayLike, v_in: ArrayLike, k: int, touched: ArrayLike | None,
                        mom: float) -> tuple[F32, F32]:
    """v = ftz(mom * v) + g; g = v (touched channels) -> (g, v)."""
    g, n_ch = _upd_g(g_in, k, "update_f32_momentum")
    v = np.array(v_in, dtype=np.float32).reshape(-1, k)
    rows = _touched_rows(touched, n_ch, "update_f32_momentum")
    with np.errstate(under="ignore"):
        d = ftz(np.float32(mom) * v[rows]) + g[rows]
    v[rows] = d
    g[rows] = d
    return g.reshape(-1), v.reshape(-1)


def update_f32_scale(x_in: ArrayLike, k: int, touched: ArrayLike | None, a: float) -> F32:
    """x = ftz(a * x) on the touched channels (a finite)."""
    fn = "update_f32_scale"
    x, n_ch = _upd_g(x_in, k, fn, "x")
    rows = _touched_rows(touched, n_ch, fn)
    with np.errstate(over="ignore"):
        a32 = np.float32(a)  # a float32 once (a double beyond its range: inf)
    if not np.isfinite(a32):
        raise _fail(fn, "a", "must be finite")
    with np.errstate(over="ignore", under="ignore"):
        x[rows] = ftz(a32 * x[rows])
    return x.reshape(-1)


def update_f32_adam(g_in: ArrayLike, m_in: ArrayLike, v_in: ArrayLike, k: int, touched: ArrayLike | None,
                    b1: float, b2: float, b1t: float, b2t: float, eps: float) -> tuple[F32, F32, F32]:
    """Adam on the touched channels -> (g = direction, m, v)."""
    g, n_ch = _upd_g(g_in, k, "update_f32_adam")
    m = np.array(m_in, dtype=np.float32).reshape(-1, k)
    v = np.array(v_in, dtype=np.float32).reshape(-1, k)
    rows = _touched_rows(touched, n_ch, "update_f32_adam")
    one = np.float32(1.0)
    f1, f2 = np.float32(b1), np.float32(b2)
    d = g[rows]
    with np.errstate(under="ignore"):
        m1 = ftz(f1 * m[rows]) + (one - f1) * d
        m2 = ftz(f2 * v[rows]) + ((one - f2) * d) * d
    m[rows] = m1
    v[rows] = m2
    g[rows] = (m1 / (one - np.float32(b1t))) / (np.sqrt(m2 / (one - np.float32(b2t))) + np.float32(eps))
    return g.reshape(-1), m.reshape(-1), v.reshape(-1)


def bf16_to_f32(v: ArrayLike) -> F32:
    """bfloat16 state bytes (two little-endian bytes a value) -> float32 values."""
    b = np.frombuffer(np.asarray(v).astype(np.uint8).tobytes(), dtype="<u2")
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(x: ArrayLike) -> NDArray[np.uint8]:
    """float32 -> bfloat16 bytes, rounded to nearest with ties to even (a NaN keeps its sign and
    upper bits, quietened)."""
    u = np.asarray(x, dtype=np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = np.where(nan, (u >> 16) | 0x40, (u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    return np.frombuffer(r.tobytes(), dtype=np.uint8).copy()


def update_bf16_momentum(g_in: ArrayLike, v_in: ArrayLike, k: int, touched: ArrayLike | None,
                         mom: float) -> tuple[F32, NDArray[np.uint8]]:
    """update_f32_momentum with a bfloat16 v: d = ftz(mom * v) + g; v = bf16(d); g = d (touched
    channels) -> (g, v bytes)."""
    g, n_ch = _upd_g(g_in, k, "update_bf16_momentum")
    vb = np.asarray(v_in).astype(np.uint8).reshape(-1).copy()
    v = bf16_to_f32(vb).reshape(-1, k)
    rows = _touched_rows(touched, n_ch, "update_bf16_momentum")
    with np.errstate(under="ignore", over="ignore", invalid="ignore"):
        d = ftz(np.float32(mom) * v[rows]) + g[rows]
    g[rows] = d
    vb = vb.reshape(n_ch, 2 * k)
    vb[rows] = f32_to_bf16(d).reshape(-1, 2 * k)
    return g.reshape(-1), vb.reshape(-1)


def update_bf16_adam(g_in: ArrayLike, m_in: ArrayLike, v_in: ArrayLike, k: int, touched: ArrayLike | None,
                     b1: float, b2: float, b1t: float, b2t: float,
                     eps: float) -> tuple[F32, NDArray[np.uint8], NDArray[np.uint8]]:
    """update_f32_adam with bfloat16 moments, each rounded when stored; the direction from the
    float32 values -> (g, m bytes, v bytes)."""
    g, n_ch = _upd_g(g_in, k, "update_bf16_adam")
    mb = np.asarray(m_in).astype(np.uint8).reshape(-1).copy()
    vb = np.asarray(v_in).astype(np.uint8).reshape(-1).copy()
    m = bf16_to_f32(mb).reshape(-1, k)
    v = bf16_to_f32(vb).reshape(-1, k)
    rows = _touched_rows(touched, n_ch, "update_bf16_adam")
    one = np.float32(1.0)
    f1, f2 = np.float32(b1), np.float32(b2)
    d = g[rows]
    with np.errstate(under="ignore", over="ignore", invalid="ignore", divide="ignore"):
        m1 = ftz(f1 * m[rows]) + (one - f1) * d
        m2 = ftz(f2 * v[rows]) + ((one - f2) * d) * d
        g[rows] = (m1 / (one - np.float32(b1t))) / (np.sqrt(m2 / (one - np.float32(b2t))) + np.float32(eps))
    mb, vb = mb.reshape(n_ch, 2 * k), vb.reshape(n_ch, 2 * k)
    mb[rows] = f32_to_bf16(m1).reshape(-1, 2 * k)
    vb[rows] = f32_to_bf16(m2).reshape(-1, 2 * k)
    return g.reshape(-1), mb.reshape(-1), vb.reshape(-1)


def update_f32_ratios(w_scale: ArrayLike, r: int) -> tuple[int, NDArray[np.int32]]:
    """Grad-input weight ratios in float32: floor((2^r * s) / max(s) + 0.5), with the index of
    the first maximum of s (the kernel's return value)."""
    s = np.asarray(w_scale, dtype=np.float32).reshape(-1)
    top = s.max()
    return int(np.argmax(s)), np.floor((np.float32(1 << r) * s) / top + np.float32(0.5)).astype(np.int32)


def update_quantize_multiplier(real: np.float32) -> tuple[int, int]:
    """quantize_multiplier of a float32 real > 0, exactly: m = q * 2^31 is an integer for a 24-bit
    significand; below 2^-32, m = round-half-up(real * 2^62) with shift -31 ((0, 0) when 0)."""
    r = float(np.float32(real))
    q, e = math.frexp(r)
    if e > 31:
        return INT32_MAX, 31
    if e >= -31:
        return int(q * 2.0**31), e
    m = math.floor(r * 2.0**62 + 0.5)
    return (m, -31) if m else (0, 0)


def update_s8_apply(w_in: ArrayLike, w_scale: ArrayLike, b_in: ArrayLike, mult_in: ArrayLike,
                    shift_in: ArrayLike, gw_in: ArrayLike, gb_in: ArrayLike, master_w: ArrayLike | None,
                    master_b: ArrayLike | None, touched: ArrayLike | None, lr: float, s_in: float,
                    s_out: float, rng: int, scratch: ArrayLike) -> tuple[int, list[NDArray[np.generic]]]:
    """The fully quantised step of one layer -> (new rng, [w, w_scale, b, mult, shift, gw, gb,
    master_w, master_b (when given), scratch]). Raises ValueError when a channel cannot be updated
    (the device then leaves the planned new values in gw / gb)."""
    rng, outs, _, _ = _s8_apply("update_s8_apply", w_in, w_scale, b_in, mult_in, shift_in, gw_in, gb_in,
                                master_w, master_b, touched, lr, s_in, s_out, rng, scratch)
    return rng, outs


def update_s8_apply_keep(w_in: ArrayLike, w_scale: ArrayLike, b_in: ArrayLike, mult_in: ArrayLike,
                         shift_in: ArrayLike, gw_in: ArrayLike, gb_in: ArrayLike, master_w: ArrayLike | None,
                         master_b: ArrayLike | None, touched: ArrayLike | None, lr: float, s_in: float,
                         s_out: float, rng: int, scratch: ArrayLike) -> tuple[int, list[NDArray[np.generic]]]:
    """update_s8_apply on copies of gw and gb -> (new rng, [w, w_scale, b, mult, shift, gw, gb
    (both unchanged), master_w, master_b (when given), scratch]); scratch holds 2 n_ch values:
    the new scales of the touched channels at [c], their new biases at [n_ch + c] (the others
    unchanged). Raises ValueError as update_s8_apply does (the device then has written nothing
    but scratch)."""
    fn = "update_s8_apply_keep"
    n_ch = np.asarray(w_scale).size
    scr = np.array(scratch, dtype=np.float32).reshape(-1)
    if scr.size < 2 * n_ch:
        raise _fail(fn, "scratch", f"length {scr.size}, expected at least {2 * n_ch}")
    gw = np.array(gw_in, dtype=np.float32).reshape(-1)
    gb = np.array(gb_in, dtype=np.float32).reshape(-1)
    rng, outs, rows, bf = _s8_apply(fn, w_in, w_scale, b_in, mult_in, shift_in, gw.copy(), gb.copy(),
                                    master_w, master_b, touched, lr, s_in, s_out, rng, scr[:n_ch])
    scr[:n_ch] = outs[-1]
    scr[n_ch + rows] = bf
    return rng, [*outs[:5], gw, gb, *outs[7:-1], scr]


def _s8_apply(fn: str, w_in: ArrayLike, w_scale: ArrayLike, b_in: ArrayLike, mult_in: ArrayLike,
              shift_in: ArrayLike, gw_in: ArrayLike, gb_in: ArrayLike, master_w: ArrayLike | None,
              master_b: ArrayLike | None, touched: ArrayLike | None, lr: float, s_in: float, s_out: float,
              rng: int, scratch: ArrayLike
              ) -> tuple[int, list[NDArray[np.generic]], NDArray[np.intp], F32]:
    """update_s8_apply -> (new rng, outputs, the touched channels, their new real biases)."""
    sw = np.array(w_scale, dtype=np.float32).reshape(-1)
    n_ch = sw.size
    w = _s8(w_in, fn, "w").reshape(n_ch, -1).copy()
    k = w.shape[1]
    b = _i32(b_in, fn, "b", n_ch).copy()
    mult = _i32(mult_in, fn, "mult", n_ch).copy()
    shift = _i32(shift_in, fn, "shift", n_ch).copy()
    gw = np.array(gw_in, dtype=np.float32).reshape(n_ch, k)
    gb = np.array(gb_in, dtype=np.float32).reshape(n_ch)
    mw = None if master_w is None else np.array(master_w, dtype=np.float32).reshape(n_ch, k)
    mb = None if master_b is None else np.array(master_b, dtype=np.float32).reshape(n_ch)
    scr = np.array(scratch, dtype=np.float32).reshape(-1)
    if scr.size < n_ch:  # at least n_ch: the kernel uses the first n_ch
        raise _fail(fn, "scratch", f"length {scr.size}, expected at least {n_ch}")
    rows = _touched_rows(touched, n_ch, fn)
    lr32, si, so = np.float32(lr), np.float32(s_in), np.float32(s_out)
    s_old = sw[rows]
    with np.errstate(over="ignore", invalid="ignore"):
        old = mw[rows] if mw is not None else w[rows].astype(np.float32) * s_old[:, None]
        vals = old - lr32 * gw[rows]
        top = np.abs(vals).max(axis=1) if k else np.zeros(rows.size, np.float32)
        t127 = top / np.float32(127.0)
        s = np.where((top > 0) & (t127 > 0), t127, s_old).astype(np.float32)
        bold = mb[rows] if mb is not None else (b[rows].astype(np.float32) * si) * s_old
        bf = bold - lr32 * gb[rows]
        den = si * s
        real = den / so
        inv = np.float32(1.0) / s
    bad = ~np.isfinite(inv) | ~np.isfinite(top) | ~np.isfinite(bf) | ~(den > 0) | ~np.isfinite(real)
    bad |= ~(real > 0)
    if bad.any():
        c = int(rows[np.flatnonzero(bad)[0]])
        raise _fail(fn, "gw", f"channel {c}: the step gives non-finite weights or a scale out of "
                    "float32 range")
    x = vals * inv[:, None]
    if rng >= 0:
        u = np.empty(rows.size * k, dtype=np.float32)
        r = rng
        for i in range(u.size):
            r ^= (r << 7) & 0xFFFF
            r ^= r >> 9
            r ^= (r << 8) & 0xFFFF
            u[i] = r
        y = x + (np.float32(128.0) + u * np.float32(2.0**-16)).reshape(rows.size, k)  # 128 + u: exact
        rng = r
    else:
        y = x + np.float32(128.5)
    # 0 < y < 256: the level is floor(y) - 128 (stochastic or nearest at 2^-16 resolution), >= -127
    w[rows] = np.maximum(np.floor(y).astype(np.int64) - 128, -127)
    qb = np.floor(bf / den + np.float32(0.5))
    b[rows] = np.clip(qb, -(2**30), 2**30).astype(np.int64)
    for j, c in enumerate(rows):
        mult[c], shift[c] = update_quantize_multiplier(real[j])
    if mw is not None:
        mw[rows] = vals
    if mb is not None:
        mb[rows] = bf
    sw[rows] = s
    scr[rows] = s
    gw[rows] = 0
    gb[rows] = 0
    outs: list[NDArray[np.generic]] = [w.reshape(-1).astype(np.int8), sw, b.astype(np.int32),
                                       mult.astype(np.int32), shift.astype(np.int32), gw.reshape(-1), gb]
    if mw is not None:
        outs.append(mw.reshape(-1))
    if mb is not None:
        outs.append(mb)
    outs.append(scr)
    return (rng if rng >= 0 else -1), outs, rows, bf.astype(np.float32)
