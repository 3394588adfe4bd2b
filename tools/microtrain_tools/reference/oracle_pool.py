"""Oracle of the pooling and residual-add kernels (docs/numerics.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from microtrain_tools.reference.oracle_base import (
    _MAXPOOL_PAD,
    I8,
    I32,
    I64,
    INT32_MAX,
    _check_act,
    _fail,
    _pool_geom,
    _s8,
    dyn_requant,
    requant,
)
from microtrain_tools.reference.oracle_conv import conv2d_s8_forward
from microtrain_tools.reference.oracle_shape import _act_bounds_check, _act_mask

# --------------------------------------------------------------------------
# pools


def maxpool_s8_forward(desc: Sequence[int], x: ArrayLike) -> I8:
    """Max over the valid taps -> y (int8, out_h*out_w*c)."""
    fn = "maxpool_s8_forward"
    g = _pool_geom(desc, fn)
    cols = g.cols(_s8(x, fn, "x", g.in_size), _MAXPOOL_PAD)
    return cols.max(axis=(2, 3)).astype(np.int8).reshape(-1)


def maxpool_s8_grad_input(desc: Sequence[int], x: ArrayLike, e: ArrayLike) -> tuple[I8, int, I32]:
    """Route each error to the window's first maximum -> (ein, shift, acc), base scale s_e.

    The kernel's acc may be None where windows do not overlap: the same ein and shift."""
    fn = "maxpool_s8_grad_input"
    g = _pool_geom(desc, fn)
    cols = g.cols(_s8(x, fn, "x", g.in_size), _MAXPOOL_PAD)
    ea = _s8(e, fn, "e", g.out_size).reshape(g.out_h, g.out_w, g.in_c)
    taps = cols.reshape(g.out_h, g.out_w, g.k_h * g.k_w, g.in_c)
    arg = taps.argmax(axis=2)  # first occurrence: ky-major, kx-minor
    pos, _ = g.taps()
    src = np.take_along_axis(pos.reshape(g.out_h, g.out_w, -1), arg, axis=2)
    acc = np.zeros((g.in_h * g.in_w, g.in_c), dtype=np.int64)
    chan = np.broadcast_to(np.arange(g.in_c), src.shape)
    np.add.at(acc, (src.reshape(-1), chan.reshape(-1)), ea.reshape(-1))
    acc = acc.reshape(-1)
    ein, sh = dyn_requant(acc)
    return ein, sh, acc.astype(np.int32)


def _avg_round(s: I64, n: ArrayLike) -> I64:
    n = np.asarray(n, dtype=np.int64)
    return np.sign(s) * ((np.abs(s) + n // 2) // n)


def avgpool_s8_forward(desc: Sequence[int], x: ArrayLike) -> I8:
    """Mean of the valid taps, rounded half away from zero -> y (int8)."""
    fn = "avgpool_s8_forward"
    g = _pool_geom(desc, fn)
    cols = g.cols(_s8(x, fn, "x", g.in_size))
    _, valid = g.taps()
    n = valid.sum(axis=(2, 3))[..., None]
    return _avg_round(cols.sum(axis=(2, 3)), n).astype(np.int8).reshape(-1)


def avgpool_s8_grad_input(desc: Sequence[int], e: ArrayLike) -> tuple[I8, int, I32]:
    """acc += e * recip(n) on every valid tap -> (ein, shift, acc), base scale s_e * 2^-16.

    The kernel's acc may be None where windows do not overlap: the same ein and shift."""
    fn = "avgpool_s8_grad_input"
    g = _pool_geom(desc, fn)
    ea = _s8(e, fn, "e", g.out_size).reshape(g.out_h, g.out_w, g.in_c)
    _, valid = g.taps()
    n = valid.sum(axis=(2, 3)).astype(np.int64)
    recip = (2**16 + n // 2) // n
    per = (ea * recip[..., None])[:, :, None, None, :]
    contrib = np.broadcast_to(per, (g.out_h, g.out_w, g.k_h, g.k_w, g.in_c))
    acc = g.scatter(contrib).reshape(-1)
    ein, sh = dyn_requant(acc)
    return ein, sh, acc.astype(np.int32)


def _pool_act_check(desc: Sequence[int], fn: str, lo: int, hi: int) -> None:
    g = _pool_geom(desc, fn)
    if g.stride_h < g.k_h or g.stride_w < g.k_w:
        raise _fail(fn, "desc", "windows must not overlap (stride_h >= k_h and stride_w >= k_w)")
    _act_bounds_check(fn, lo, hi)

def maxpool_s8_grad_input_act(desc: Sequence[int], x: ArrayLike, e: ArrayLike, lo: int,
                              hi: int) -> tuple[I8, int]:
    """maxpool_s8_grad_input (acc None: disjoint windows only) then the activation mask of x
    (lo < x < hi, x as before the call) -> (ein, shift). The kernel's ein may be x itself."""
    fn = "maxpool_s8_grad_input_act"
    _pool_act_check(desc, fn, lo, hi)
    ein, sh, _ = maxpool_s8_grad_input(desc, x, e)
    return _act_mask(x, lo, hi, ein, fn), sh


def maxpool_s8_grad_input_act_l1(desc: Sequence[int], x: ArrayLike, e: ArrayLike, lo: int,
                                 hi: int) -> tuple[I8, int, I32]:
    """maxpool_s8_grad_input_act then the L1 norm of each channel of its ein (l1_norm_s8)
    -> (ein, shift, norms)."""
    fn = "maxpool_s8_grad_input_act_l1"
    _pool_act_check(desc, fn, lo, hi)
    ein, sh = maxpool_s8_grad_input_act(desc, x, e, lo, hi)
    c = _pool_geom(desc, fn).in_c
    return ein, sh, np.abs(ein.astype(np.int64).reshape(-1, c)).sum(axis=0).astype(np.int32)


def avgpool_s8_grad_input_act(desc: Sequence[int], y: ArrayLike, e: ArrayLike, lo: int,
                              hi: int) -> tuple[I8, int]:
    """avgpool_s8_grad_input (acc None: disjoint windows only) then the activation mask of
    the pool's input y (lo < y < hi) -> (ein, shift). The kernel's ein may be y itself."""
    fn = "avgpool_s8_grad_input_act"
    _pool_act_check(desc, fn, lo, hi)
    g = _pool_geom(desc, fn)
    _s8(y, fn, "y", g.in_size)
    ein, sh, _ = avgpool_s8_grad_input(desc, e)
    return _act_mask(y, lo, hi, ein, fn), sh


def global_avgpool_s8_forward(x: ArrayLike, hw: int, c: int) -> I8:
    """Per-channel mean over hw positions, rounded half away from zero -> y (int8, c)."""
    fn = "global_avgpool_s8_forward"
    hw, c = int(hw), int(c)
    if hw < 1 or c < 1:
        raise _fail(fn, "hw/c", "must be >= 1")
    xa = _s8(x, fn, "x", hw * c).reshape(hw, c)
    return _avg_round(xa.sum(axis=0), hw).astype(np.int8)


def global_avgpool_s8_grad_input(e: ArrayLike, hw: int) -> I8:
    """ein[p, c] = e[c] for every position -> (hw*c) int8, real scale s_e / hw."""
    fn = "global_avgpool_s8_grad_input"
    if int(hw) < 1:
        raise _fail(fn, "hw", "must be >= 1")
    return np.tile(_s8(e, fn, "e"), int(hw)).astype(np.int8)


# --------------------------------------------------------------------------
# residual add


def add_s8_forward(desc: Sequence[int], x1: ArrayLike, x2: ArrayLike) -> I8:
    """TFLite elementwise add -> y (int8, n)."""
    fn = "add_s8_forward"
    d = [int(v) for v in desc]
    if len(d) != 13:
        raise _fail(fn, "desc", f"length {len(d)}, expected 13")
    n, z1, z2, zo, m1, sh1, m2, sh2, mo, sho, ls, act_min, act_max = d
    if n < 0:
        raise _fail(fn, "desc", "n < 0")
    _check_act(act_min, act_max, (z1, z2, zo), fn)
    if not 0 <= ls <= 22:
        raise _fail(fn, "desc", "left_shift outside [0, 22]")
    if sh1 > 0 or sh2 > 0:
        raise _fail(fn, "desc", "input shifts must be <= 0")
    for m, s in ((m1, sh1), (m2, sh2), (mo, sho)):
        if not (0 <= m <= INT32_MAX and -31 <= s <= 31):
            raise _fail(fn, "desc", "multiplier outside [0, 2^31) or shift outside [-31, 31]")
    a = requant((_s8(x1, fn, "x1", n) - z1) << ls, m1, sh1)
    b = requant((_s8(x2, fn, "x2", n) - z2) << ls, m2, sh2)
    y = requant(a + b, mo, sho) + zo
    return np.clip(y, act_min, act_max).astype(np.int8)


def conv2d_add_s8_forward(desc: Sequence[int], x: ArrayLike, w: ArrayLike, bias: ArrayLike, mult: ArrayLike,
                          shift: ArrayLike, add_desc: Sequence[int], side: int, skip: ArrayLike,
                          tile: object = None) -> I8:
    """A conv2d straight into a residual add over its other input -> the new skip (int8):
    add_s8_forward(add_desc, conv, skip) for side 0, (skip, conv) for side 1. The
    kernels make it a block of rows at a time through ``tile`` (scratch: its contents
    afterwards are not defined, so it is not an output here); by definition the same
    as the two calls."""
    fn = "conv2d_add_s8_forward"
    if side not in (0, 1):
        raise _fail(fn, "side", "must be 0 or 1")
    y = conv2d_s8_forward(desc, x, w, bias, mult, shift)
    if int(add_desc[0]) != y.size:
        raise _fail(fn, "add_desc", f"n is {int(add_desc[0])}, the conv output has {y.size} elements")
    return add_s8_forward(add_desc, y, skip) if side == 0 else add_s8_forward(add_desc, skip, y)


def add_s8_grad_merge(ea: ArrayLike, ra: int, eb: ArrayLike, rb: int) -> tuple[I8, int]:
    """Merge two errors: acc = ea*ra + eb*rb -> (out int8, shift), base max(s_a, s_b) * 2^-15."""
    fn = "add_s8_grad_merge"
    for name, r in (("ra", ra), ("rb", rb)):
        if not 0 <= int(r) <= 2**15:
            raise _fail(fn, name, "outside [0, 2^15]")
    a = _s8(ea, fn, "ea")
    b = _s8(eb, fn, "eb", a.size)
    return dyn_requant(a * int(ra) + b * int(rb))
