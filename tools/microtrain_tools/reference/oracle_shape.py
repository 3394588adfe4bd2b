"""Oracle of the element-wise and shape kernels (docs/numerics.md): relu / relu6, concat,
upsample, lookup-table activations.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from microtrain_tools.reference.oracle_base import I8, _check_act, _fail, _i32, _s8, dyn_requant, requant
from microtrain_tools.reference.oracle_host import LUT_DMAX, quantize_multiplier

# --------------------------------------------------------------------------
# relu / relu6


def _check_zp(fn: str, **zps: int) -> None:
    for name, z in zps.items():
        if not -128 <= int(z) <= 127:
            raise _fail(fn, name, "outside [-128, 127]")


def relu_s8_forward(x: ArrayLike, zp: int) -> I8:
    """y = max(x, zp)."""
    _check_zp("relu_s8_forward", zp=zp)
    return np.maximum(_s8(x, "relu_s8_forward", "x"), int(zp)).astype(np.int8)


def relu6_s8_forward(x: ArrayLike, zp: int, q6: int) -> I8:
    """y = min(max(x, zp), q6)."""
    _check_zp("relu6_s8_forward", zp=zp, q6=q6)
    xa = _s8(x, "relu6_s8_forward", "x")
    return np.minimum(np.maximum(xa, int(zp)), int(q6)).astype(np.int8)


def relu_s8_backward(y: ArrayLike, zp: int, e: ArrayLike) -> I8:
    """New e: e where y > zp, else 0."""
    fn = "relu_s8_backward"
    _check_zp(fn, zp=zp)
    ya = _s8(y, fn, "y")
    ea = _s8(e, fn, "e", ya.size)
    return np.where(ya > int(zp), ea, 0).astype(np.int8)


def relu6_s8_backward(y: ArrayLike, zp: int, q6: int, e: ArrayLike) -> I8:
    """New e: e where zp < y < q6, else 0."""
    fn = "relu6_s8_backward"
    _check_zp(fn, zp=zp, q6=q6)
    ya = _s8(y, fn, "y")
    ea = _s8(e, fn, "e", ya.size)
    return np.where((ya > int(zp)) & (ya < int(q6)), ea, 0).astype(np.int8)


# --------------------------------------------------------------------------
# channel concatenation and nearest / zero-insertion upsampling


def _concat_desc(desc: Sequence[int], fn: str) -> list[int]:
    d = [int(v) for v in desc]
    if len(d) != 10:
        raise _fail(fn, "desc", f"length {len(d)}, expected 10")
    hw, c1, c2, z1, z2, zo, m1, sh1, m2, sh2 = d
    if not 1 <= hw <= 2**26 or c1 < 1 or c2 < 1 or c1 + c2 > 65535 or hw * (c1 + c2) > 2**26:
        raise _fail(fn, "desc", "sizes outside the limits")
    _check_act(-128, 127, (z1, z2, zo), fn)
    if m1 < 0 or m2 < 0 or not (-31 <= sh1 <= 7 and -31 <= sh2 <= 7):
        raise _fail(fn, "desc", "multiplier < 0 or shift outside [-31, 7]")
    return d


def concat_s8_forward(desc: Sequence[int], x1: ArrayLike, x2: ArrayLike) -> I8:
    """Channel concatenation, each input requantised to the output -> y (int8, hw*(c1+c2))."""
    fn = "concat_s8_forward"
    hw, c1, c2, z1, z2, zo, m1, sh1, m2, sh2 = _concat_desc(desc, fn)
    a = requant((_s8(x1, fn, "x1", hw * c1) - z1) << 16, m1, sh1) + zo
    b = requant((_s8(x2, fn, "x2", hw * c2) - z2) << 16, m2, sh2) + zo
    y = np.concatenate([a.reshape(hw, c1), b.reshape(hw, c2)], axis=1)
    return np.clip(y, -128, 127).astype(np.int8).reshape(-1)


def concat_s8_grad_input(desc: Sequence[int], e: ArrayLike, part: int) -> I8:
    """The slice of the output error that belongs to input ``part`` (exact, same scale)."""
    fn = "concat_s8_grad_input"
    hw, c1, c2 = _concat_desc(desc, fn)[:3]
    if int(part) not in (0, 1):
        raise _fail(fn, "part", "must be 0 or 1")
    ea = _s8(e, fn, "e", hw * (c1 + c2)).reshape(hw, c1 + c2)
    sl = ea[:, :c1] if int(part) == 0 else ea[:, c1:]
    return sl.astype(np.int8).reshape(-1)


def concat_params(s1: float, z1: int, s2: float, z2: int, s_out: float, z_out: int,
                  hw: int, c1: int, c2: int) -> list[int]:
    """The 10-int concat descriptor for the given scales and zero points (float32 scales, as stored)."""
    m1, sh1 = quantize_multiplier(float(np.float32(s1)) / float(np.float32(s_out)) * 2.0**-16)
    m2, sh2 = quantize_multiplier(float(np.float32(s2)) / float(np.float32(s_out)) * 2.0**-16)
    return [int(hw), int(c1), int(c2), int(z1), int(z2), int(z_out), m1, sh1, m2, sh2]


def _upsample_desc(desc: Sequence[int], fn: str) -> list[int]:
    d = [int(v) for v in desc]
    if len(d) != 9:
        raise _fail(fn, "desc", f"length {len(d)}, expected 9")
    in_h, in_w, c, out_h, out_w, f_h, f_w, mode, zp = d
    if not all(1 <= v <= 65535 for v in (in_h, in_w, c, out_h, out_w)):
        raise _fail(fn, "desc", "sizes outside 1..65535")
    if not (1 <= f_h <= 255 and 1 <= f_w <= 255) or mode not in (0, 1):
        raise _fail(fn, "desc", "factor outside 1..255 or mode not 0/1")
    if not ((in_h - 1) * f_h + 1 <= out_h <= in_h * f_h and (in_w - 1) * f_w + 1 <= out_w <= in_w * f_w):
        raise _fail(fn, "desc", "out size does not match the factor")
    if in_h * in_w * c > 2**26 or out_h * out_w * c > 2**26:
        raise _fail(fn, "desc", "tensor too large")
    _check_act(-128, 127, (zp,), fn)
    return d


def upsample_s8_forward(desc: Sequence[int], x: ArrayLike) -> I8:
    """Nearest (mode 0) or zero-insertion (mode 1) upsampling -> y (int8, out_h*out_w*c)."""
    fn = "upsample_s8_forward"
    in_h, in_w, c, out_h, out_w, f_h, f_w, mode, zp = _upsample_desc(desc, fn)
    xa = _s8(x, fn, "x", in_h * in_w * c).reshape(in_h, in_w, c)
    oy = np.arange(out_h)
    ox = np.arange(out_w)
    y = xa[oy // f_h][:, ox // f_w]
    if mode == 1:
        hit = ((oy % f_h) == 0)[:, None] & ((ox % f_w) == 0)[None, :]
        y = np.where(hit[..., None], y, zp)
    return y.astype(np.int8).reshape(-1)


def upsample_s8_grad_input(desc: Sequence[int], e: ArrayLike) -> tuple[I8, int]:
    """Sum of the errors of the positions each input fed -> (ein, shift), base scale s_e."""
    fn = "upsample_s8_grad_input"
    in_h, in_w, c, out_h, out_w, f_h, f_w, mode, _ = _upsample_desc(desc, fn)
    ea = _s8(e, fn, "e", out_h * out_w * c).reshape(out_h, out_w, c)
    acc = np.zeros((in_h, in_w, c), dtype=np.int64)
    oy = np.arange(out_h)
    ox = np.arange(out_w)
    if mode == 1:
        ea = np.where((((oy % f_h) == 0)[:, None] & ((ox % f_w) == 0)[None, :])[..., None], ea, 0)
    np.add.at(acc, (np.repeat(oy // f_h, out_w), np.tile(ox // f_w, out_h)), ea.reshape(-1, c))
    return dyn_requant(acc)


# --------------------------------------------------------------------------
# lookup-table activations


def lut_s8_forward(x: ArrayLike, table: ArrayLike) -> I8:
    """y = table[x + 128]."""
    fn = "lut_s8_forward"
    xa = _s8(x, fn, "x")
    t = _s8(table, fn, "table", 256)
    return t[xa + 128].astype(np.int8)


def lut_s8_grad_input(x: ArrayLike, e: ArrayLike, dtable: ArrayLike) -> tuple[I8, int]:
    """ein, shift = dyn_requant(e * dtable[x + 128])."""
    fn = "lut_s8_grad_input"
    xa = _s8(x, fn, "x")
    ea = _s8(e, fn, "e", xa.size)
    d = _i32(dtable, fn, "dtable", 256)
    if np.any(np.abs(d) > LUT_DMAX):
        raise _fail(fn, "dtable", "entries outside -16777215..16777215")
    return dyn_requant(ea * d[xa + 128])



def _act_bounds_check(fn: str, lo: int, hi: int) -> None:
    """An activation mask's bounds (the _act pools, the conv2d / linear grad input)."""
    if not -129 <= int(lo) <= 127:
        raise _fail(fn, "lo", "outside [-129, 127]")
    if not -128 <= int(hi) <= 128:
        raise _fail(fn, "hi", "outside [-128, 128]")
    if int(hi) < int(lo):
        raise _fail(fn, "hi", "below lo")


def _act_mask(t: ArrayLike, lo: int, hi: int, ein: I8, fn: str) -> I8:
    """The backward of the activation that produced t: relu (lo = zp, hi = 128), relu6
    (lo = zp, hi = q6) or none (-129, 128) on the pool's grad input; e kept where lo < t < hi."""
    lo, hi = int(lo), int(hi)
    if lo == -129 and hi == 128:
        return ein
    if hi == 128:
        return relu_s8_backward(t, lo, ein)
    if lo >= -128:
        return relu6_s8_backward(t, lo, hi, ein)
    return np.where(_s8(t, fn, "t") < hi, ein, 0).astype(np.int8)  # an upper bound only
