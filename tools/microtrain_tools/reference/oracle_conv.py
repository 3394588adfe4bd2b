"""Oracle of the conv2d and linear kernels (docs/numerics.md): forward, grad input, grad weight.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from microtrain_tools.reference.oracle_base import (
    F32,
    I8,
    I32,
    I64,
    INT32_MAX,
    _conv_desc,
    _ConvDesc,
    _f32,
    _fail,
    _i32,
    _linear_desc,
    _mask,
    _s8,
    dyn_requant,
    requant,
)
from microtrain_tools.reference.oracle_shape import _act_bounds_check, _act_mask

# --------------------------------------------------------------------------
# conv2d


def _conv_forward(cd: _ConvDesc, x: I64, w: I64, bias: I64, mult: I64, shift: I64) -> I8:
    g = cd.geom
    cols = g.cols(x - cd.in_zp).reshape(g.out_h * g.out_w, g.k_h, g.k_w, g.groups, g.cpg)
    wg = w.reshape(g.groups, g.opg, g.k_h, g.k_w, g.cpg)
    acc = np.einsum("pyxgc,goyxc->pgo", cols, wg).reshape(-1, g.out_c) + bias
    y = requant(acc, mult, shift) + cd.out_zp
    return np.clip(y, cd.act_min, cd.act_max).astype(np.int8).reshape(-1)


def conv2d_s8_forward(desc: Sequence[int], x: ArrayLike, w: ArrayLike, bias: ArrayLike,
                      mult: ArrayLike, shift: ArrayLike) -> I8:
    """conv2d forward -> y (int8, out_h*out_w*out_c)."""
    return _conv_fwd_common("conv2d_s8_forward", _conv_desc(desc, "conv2d_s8_forward"),
                            x, w, bias, mult, shift)


def _conv_fwd_common(fn: str, cd: _ConvDesc, x: ArrayLike, w: ArrayLike, bias: ArrayLike,
                     mult: ArrayLike, shift: ArrayLike) -> I8:
    g = cd.geom
    xa = _s8(x, fn, "x", g.in_size)
    wa = _s8(w, fn, "w", g.w_size)
    ba = _i32(bias, fn, "bias", g.out_c)
    ma = _i32(mult, fn, "mult", g.out_c)
    sa = _i32(shift, fn, "shift", g.out_c)
    if np.any(np.abs(ba) > 2**30):
        raise _fail(fn, "bias", "|bias| > 2^30")
    if np.any(ma < 0):
        raise _fail(fn, "mult", "negative multiplier")
    if np.any((sa < -31) | (sa > 31)):
        raise _fail(fn, "shift", "shift outside [-31, 31]")
    return _conv_forward(cd, xa, wa, ba, ma, sa)


def _conv_grad_input(fn: str, cd: _ConvDesc, e: ArrayLike, w: ArrayLike, wr: ArrayLike,
                     mask: ArrayLike | None) -> tuple[I8, int, I32]:
    g = cd.geom
    ea = _s8(e, fn, "e", g.out_size).reshape(-1, g.out_c)
    wa = _s8(w, fn, "w", g.w_size)
    ra = _i32(wr, fn, "wr", g.out_c)
    keep = _mask(mask, g.out_c, fn)
    if np.any(ra < 0):
        raise _fail(fn, "wr", "negative weight ratio")
    if int(ra.max()) * g.k_h * g.k_w * g.opg * 16384 > INT32_MAX:
        raise _fail(fn, "wr", "max(wr) * k_h * k_w * out_c/groups * 16384 > 2^31 - 1")
    ew = (ea * ra * keep).reshape(-1, g.groups, g.opg)
    wg = wa.reshape(g.groups, g.opg, g.k_h, g.k_w, g.cpg)
    contrib = np.einsum("pgo,goyxc->pyxgc", ew, wg)
    acc = g.scatter(contrib.reshape(g.out_h, g.out_w, g.k_h, g.k_w, g.in_c)).reshape(-1)
    ein, sh = dyn_requant(acc)
    return ein, sh, acc.astype(np.int32)


def _grad_input_act(fn: str, res: tuple[I8, int, I32], y: ArrayLike | None, lo: int | None,
                    hi: int | None) -> tuple[I8, int, I32]:
    """The conv2d / linear grad input's optional activation mask: without lo / hi the grad
    input itself; with them (and y, the producer's activation that the kernel's ein holds on
    entry) the grad input then relu_s8_backward / relu6_s8_backward on y, the same shift."""
    ein, sh, acc = res
    if lo is None and hi is None:
        return res
    if lo is None or hi is None or y is None:
        raise _fail(fn, "hi", "lo and hi go together (and need y)")
    _act_bounds_check(fn, lo, hi)
    _s8(y, fn, "ein", acc.size)
    return _act_mask(y, lo, hi, ein, fn), sh, acc


def conv2d_s8_grad_input(desc: Sequence[int], e: ArrayLike, w: ArrayLike, wr: ArrayLike,
                         mask: ArrayLike | None, y: ArrayLike | None = None, lo: int | None = None,
                         hi: int | None = None) -> tuple[I8, int, I32]:
    """conv2d grad input -> (ein int8, shift, acc int32 raw accumulator), in_h*in_w*in_c.
    With lo, hi: ein masked by the producer's activation y (lo < y < hi), see _grad_input_act."""
    fn = "conv2d_s8_grad_input"
    return _grad_input_act(fn, _conv_grad_input(fn, _conv_desc(desc, fn), e, w, wr, mask), y, lo, hi)


def _conv_grad_weight(fn: str, cd: _ConvDesc, x: ArrayLike, e: ArrayLike,
                      mask: ArrayLike | None) -> tuple[I64, I64, NDArray[np.bool_]]:
    g = cd.geom
    xa = _s8(x, fn, "x", g.in_size)
    ea = _s8(e, fn, "e", g.out_size).reshape(-1, g.out_c)
    keep = _mask(mask, g.out_c, fn)
    ea = ea * keep
    cols = g.cols(xa - cd.in_zp).reshape(-1, g.k_h, g.k_w, g.groups, g.cpg)
    gw = np.einsum("pgo,pyxgc->goyxc", ea.reshape(-1, g.groups, g.opg), cols)
    return gw.reshape(g.out_c, -1), ea.sum(axis=0), keep


def conv2d_s8_grad_weight(desc: Sequence[int], x: ArrayLike, e: ArrayLike,
                          mask: ArrayLike | None) -> tuple[I32, I32]:
    """conv2d grad weight -> (gw int32 OHWI, gb int32 out_c); masked rows are 0."""
    fn = "conv2d_s8_grad_weight"
    gw, gb, _ = _conv_grad_weight(fn, _conv_desc(desc, fn), x, e, mask)
    return gw.reshape(-1).astype(np.int32), gb.astype(np.int32)


def _accumulate_f32(gw: I64, gb: I64, keep: NDArray[np.bool_], w_scale: float, b_scale: float,
                    gw_in: F32, gb_in: F32) -> tuple[F32, F32]:
    gw_f = gw_in.reshape(gw.shape).copy()
    gb_f = gb_in.copy()
    gw_f[keep] = gw_f[keep] + np.float32(w_scale) * gw[keep].astype(np.int32).astype(np.float32)
    gb_f[keep] = gb_f[keep] + np.float32(b_scale) * gb[keep].astype(np.int32).astype(np.float32)
    return gw_f.reshape(-1), gb_f


def _grad_weight_f32(fn: str, cd: _ConvDesc, x: ArrayLike, e: ArrayLike, mask: ArrayLike | None,
                     w_scale: float, b_scale: float, gw_in: ArrayLike, gb_in: ArrayLike,
                     c0: int | None) -> tuple[F32, F32]:
    """The float32 accumulation into every channel (c0 None) or into the rows of the window
    c0 .. c0 + len(gb_in) - 1, every channel outside it masked."""
    out_c, k = cd.geom.out_c, cd.geom.w_size // cd.geom.out_c
    if c0 is None:
        c0, n = 0, out_c
    else:
        n = np.asarray(gb_in).size
        if not 0 <= c0 < out_c:
            raise _fail(fn, "c0", f"must be in 0..{out_c - 1}, got {c0}")
        if not 1 <= n <= out_c - c0:
            raise _fail(fn, "gb", f"length {n}, expected 1..{out_c - c0}")
    gwf = _f32(gw_in, fn, "gw", n * k)
    gbf = _f32(gb_in, fn, "gb", n)
    gw, gb, keep = _conv_grad_weight(fn, cd, x, e, mask)
    inside = np.zeros(out_c, dtype=bool)
    inside[c0:c0 + n] = True
    if (c0, n) != (0, out_c) and (mask is None or bool(np.any(keep & ~inside))):
        raise _fail(fn, "mask", "must be given and 0 outside the window")
    w = slice(c0, c0 + n)
    return _accumulate_f32(gw[w], gb[w], keep[w], w_scale, b_scale, gwf, gbf)


def conv2d_s8_grad_weight_f32(desc: Sequence[int], x: ArrayLike, e: ArrayLike,
                              mask: ArrayLike | None, w_scale: float, b_scale: float,
                              gw_in: ArrayLike, gb_in: ArrayLike, c0: int | None = None) -> tuple[F32, F32]:
    """conv2d grad weight accumulated in float32 -> (gw, gb) new values; masked rows untouched.
    With c0, gw_in / gb_in hold channels c0 .. c0 + len(gb_in) - 1 (row r = channel c0 + r)."""
    fn = "conv2d_s8_grad_weight_f32"
    return _grad_weight_f32(fn, _conv_desc(desc, fn), x, e, mask, w_scale, b_scale, gw_in, gb_in, c0)


# --------------------------------------------------------------------------
# linear (conv2d with 1x1 everything)


def linear_s8_forward(desc: Sequence[int], x: ArrayLike, w: ArrayLike, bias: ArrayLike,
                      mult: ArrayLike, shift: ArrayLike) -> I8:
    """linear forward -> y (int8, out_n)."""
    fn = "linear_s8_forward"
    return _conv_fwd_common(fn, _conv_desc(_linear_desc(desc, fn), fn), x, w, bias, mult, shift)


def linear_s8_grad_input(desc: Sequence[int], e: ArrayLike, w: ArrayLike, wr: ArrayLike,
                         mask: ArrayLike | None, y: ArrayLike | None = None, lo: int | None = None,
                         hi: int | None = None) -> tuple[I8, int, I32]:
    """linear grad input -> (ein int8, shift, acc int32), in_n; lo, hi as conv2d's."""
    fn = "linear_s8_grad_input"
    res = _conv_grad_input(fn, _conv_desc(_linear_desc(desc, fn), fn), e, w, wr, mask)
    return _grad_input_act(fn, res, y, lo, hi)


def linear_s8_grad_weight(desc: Sequence[int], x: ArrayLike, e: ArrayLike,
                          mask: ArrayLike | None) -> tuple[I32, I32]:
    """linear grad weight -> (gw int32 out_n*in_n, gb int32 out_n)."""
    fn = "linear_s8_grad_weight"
    gw, gb, _ = _conv_grad_weight(fn, _conv_desc(_linear_desc(desc, fn), fn), x, e, mask)
    return gw.reshape(-1).astype(np.int32), gb.astype(np.int32)


def linear_s8_grad_weight_f32(desc: Sequence[int], x: ArrayLike, e: ArrayLike,
                              mask: ArrayLike | None, w_scale: float, b_scale: float,
                              gw_in: ArrayLike, gb_in: ArrayLike, c0: int | None = None) -> tuple[F32, F32]:
    """linear grad weight accumulated in float32 -> (gw, gb) new values; the window c0 as
    conv2d_s8_grad_weight_f32's."""
    fn = "linear_s8_grad_weight_f32"
    cd = _conv_desc(_linear_desc(desc, fn), fn)
    return _grad_weight_f32(fn, cd, x, e, mask, w_scale, b_scale, gw_in, gb_in, c0)
