"""Bit-exact numpy oracle of the microtrain kernels (written from docs/numerics.md).

Every kernel of the ``_microtrain`` binding has a function of the same name and
the same positional arguments, minus the output / scratch buffers, which are
returned instead. Integer kernels compute in int64 and are exact; the int32
wrap / unsigned rules of the spec are emulated where they can matter.
Argument errors raise ``ValueError`` like the binding.

Host-side helpers (multipliers, LUTs, weight ratios, loss) live at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

I8 = NDArray[np.int8]
I32 = NDArray[np.int32]
I64 = NDArray[np.int64]
F32 = NDArray[np.float32]
U8 = NDArray[np.uint8]

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
_MAXPOOL_PAD = -(2**20)  # below any int8: padding taps are never selected

__all__ = [
    "add_params",
    "add_s8_forward",
    "add_s8_grad_merge",
    "avgpool_s8_forward",
    "concat_params",
    "concat_s8_forward",
    "concat_s8_grad_input",
    "avgpool_s8_grad_input",
    "avgpool_s8_grad_input_act",
    "conv2d_add_s8_forward",
    "conv2d_s8_forward",
    "conv2d_s8_grad_input",
    "conv2d_s8_grad_weight",
    "conv2d_s8_grad_weight_f32",
    "dyn_requant",
    "dyn_requant_s8",
    "f32_axpy_i32",
    "global_avgpool_s8_forward",
    "global_avgpool_s8_grad_input",
    "l1_norm_s8",
    "linear_s8_forward",
    "linear_s8_grad_input",
    "linear_s8_grad_weight",
    "linear_s8_grad_weight_f32",
    "LUT_FUNCTIONS",
    "lut_function",
    "lut_s8_forward",
    "lut_s8_grad_input",
    "lut_tables",
    "make_softmax_lut",
    "maxpool_s8_forward",
    "maxpool_s8_grad_input",
    "maxpool_s8_grad_input_act",
    "merge_ratios",
    "quantize_multiplier",
    "relu6_q6",
    "relu6_s8_backward",
    "relu6_s8_forward",
    "relu_s8_backward",
    "relu_s8_forward",
    "requant",
    "rounding_divide_by_pot",
    "softmax_xent_s8",
    "topk_mask",
    "trim_softmax_lut",
    "update_f32_adam",
    "update_f32_axpby",
    "update_f32_check",
    "update_f32_decay",
    "update_f32_momentum",
    "update_f32_ratios",
    "update_f32_scale",
    "update_f32_standardize",
    "update_quantize_multiplier",
    "update_s8_apply",
    "update_s8_apply_keep",
    "update_u8_touch",
    "upsample_s8_forward",
    "upsample_s8_grad_input",
    "weight_ratios",
    "wrap32",
    "xent_loss",
    "xorshift32",
    "zo_perturb_h_s8",
    "zo_perturb_s8",
    "zo_signs",
    "zo_update_s8",
]


# --------------------------------------------------------------------------
# argument coercion


def _fail(fn: str, arg: str, why: str) -> ValueError:
    return ValueError(f"{fn}: {arg}: {why}")


def _s8(a: ArrayLike, fn: str, arg: str, n: int | None = None) -> I64:
    """An int8 tensor (int8/uint8 bytes reinterpreted as signed) as int64."""
    if isinstance(a, (bytes, bytearray, memoryview)):
        arr = np.frombuffer(bytes(a), dtype=np.int8)
    else:
        arr = np.asarray(a).reshape(-1)
        if arr.dtype == np.uint8:
            arr = arr.view(np.int8)
        elif arr.dtype != np.int8:
            if arr.size and (arr.min() < -128 or arr.max() > 127):
                raise _fail(fn, arg, "values outside int8")
    if n is not None and arr.size != n:
        raise _fail(fn, arg, f"length {arr.size}, expected {n}")
    return arr.astype(np.int64)


def _i32(a: ArrayLike, fn: str, arg: str, n: int | None = None) -> I64:
    """An int32 array as int64 (values are checked to fit int32)."""
    arr = np.asarray(a).reshape(-1)
    if arr.size and (arr.min() < INT32_MIN or arr.max() > INT32_MAX):
        raise _fail(fn, arg, "values outside int32")
    if n is not None and arr.size != n:
        raise _fail(fn, arg, f"length {arr.size}, expected {n}")
    return arr.astype(np.int64)


def _f32(a: ArrayLike, fn: str, arg: str, n: int) -> F32:
    arr = np.array(a, dtype=np.float32).reshape(-1)
    if arr.size != n:
        raise _fail(fn, arg, f"length {arr.size}, expected {n}")
    return arr


def _mask(mask: ArrayLike | None, n: int, fn: str) -> NDArray[np.bool_]:
    """Channel mask as bool (None = all ones)."""
    if mask is None:
        return np.ones(n, dtype=bool)
    if isinstance(mask, (bytes, bytearray, memoryview)):
        arr = np.frombuffer(bytes(mask), dtype=np.uint8)
    else:
        arr = np.asarray(mask).reshape(-1)
    if arr.size != n:
        raise _fail(fn, "mask", f"length {arr.size}, expected {n}")
    return arr != 0


# --------------------------------------------------------------------------
# integer helpers


def wrap32(v: ArrayLike) -> I64:
    """Two's complement wrap of int64 values to the int32 range."""
    v = np.asarray(v, dtype=np.int64)
    return ((v + 2**31) & (2**32 - 1)) - 2**31


def rounding_divide_by_pot(x: ArrayLike, e: ArrayLike) -> I64:
    """``x / 2^e`` rounded half away from zero (spec's rounding_divide_by_pot)."""
    x = np.asarray(x, dtype=np.int64)
    e = np.asarray(e, dtype=np.int64)
    mask = (np.int64(1) << e) - 1
    rem = x & mask
    thr = (mask >> 1) + (x < 0)
    return (x >> e) + (rem > thr)


def requant(acc: ArrayLike, m: ArrayLike, shift: ArrayLike) -> I64:
    """Fixed-point multiply by ``m * 2^(shift - 31)`` (arm_nn_requantize); broadcasts."""
    acc = np.asarray(acc, dtype=np.int64)
    m = np.asarray(m, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    if np.any((acc < INT32_MIN) | (acc > INT32_MAX)):
        raise ValueError("requant: acc outside int32")
    if np.any((m < 0) | (m > INT32_MAX)):
        raise ValueError("requant: multiplier outside [0, 2^31)")
    if np.any((shift < -31) | (shift > 31)):
        raise ValueError("requant: shift outside [-31, 31]")
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    a = wrap32(acc << left)  # |acc| * 2^31 <= 2^62: exact in int64
    p = a * m  # |p| <= 2^62
    h = (p + 2**30) >> 31
    return rounding_divide_by_pot(h, right)


def dyn_requant(acc: ArrayLike) -> tuple[I8, int]:
    """Per-sample power-of-two requantisation of int32 accumulators to int8."""
    a = np.asarray(acc, dtype=np.int64).reshape(-1)
    if a.size and (a.min() < INT32_MIN or a.max() > INT32_MAX):
        raise ValueError("dyn_requant: acc outside int32")
    mag = np.abs(a)  # unsigned 32-bit |acc|: |INT32_MIN| = 2^31 fits
    big = int(mag.max()) if mag.size else 0
    shift = 0
    while (big + _half(shift)) >> shift > 127:
        shift += 1
    out = np.sign(a) * ((mag + _half(shift)) >> shift)
    return out.astype(np.int8), shift


def _half(s: int) -> int:
    return 1 << (s - 1) if s > 0 else 0


# --------------------------------------------------------------------------
# geometry shared by conv2d / linear / pools


@dataclass(frozen=True)
class _Geom:
    in_h: int
    in_w: int
    in_c: int
    out_h: int
    out_w: int
    out_c: int
    k_h: int
    k_w: int
    stride_h: int
    stride_w: int
    pad_top: int
    pad_left: int
    groups: int
    dil_h: int = 1
    dil_w: int = 1

    @property
    def cpg(self) -> int:
        return self.in_c // self.groups

    @property
    def opg(self) -> int:
        return self.out_c // self.groups

    @property
    def in_size(self) -> int:
        return self.in_h * self.in_w * self.in_c

    @property
    def out_size(self) -> int:
        return self.out_h * self.out_w * self.out_c

    @property
    def w_size(self) -> int:
        return self.out_c * self.k_h * self.k_w * self.cpg

    def taps(self) -> tuple[I64, NDArray[np.bool_]]:
        """Flat input position ``iy * in_w + ix`` and validity, both (OH, OW, KH, KW)."""
        iy = np.arange(self.out_h)[:, None] * self.stride_h - self.pad_top + np.arange(self.k_h) * self.dil_h
        ix = np.arange(self.out_w)[:, None] * self.stride_w - self.pad_left + np.arange(self.k_w) * self.dil_w
        vy = (iy >= 0) & (iy < self.in_h)
        vx = (ix >= 0) & (ix < self.in_w)
        iy = np.clip(iy, 0, self.in_h - 1)
        ix = np.clip(ix, 0, self.in_w - 1)
        pos = iy[:, None, :, None] * self.in_w + ix[None, :, None, :]
        valid = vy[:, None, :, None] & vx[None, :, None, :]
        return pos.astype(np.int64), valid

    def cols(self, x: I64, pad_value: int = 0) -> I64:
        """im2col: (OH, OW, KH, KW, in_c), padding taps set to ``pad_value``."""
        pos, valid = self.taps()
        g = x.reshape(self.in_h * self.in_w, self.in_c)[pos]
        return np.where(valid[..., None], g, pad_value)

    def scatter(self, contrib: I64) -> I64:
        """col2im: add (OH, OW, KH, KW, in_c) tap values into an (in_h*in_w, in_c) sum."""
        pos, valid = self.taps()
        acc = np.zeros((self.in_h * self.in_w, self.in_c), dtype=np.int64)
        np.add.at(acc, pos[valid], contrib[valid])
        return acc


def _check_geom(g: _Geom, fn: str) -> None:
    sizes = (g.in_h, g.in_w, g.in_c, g.out_h, g.out_w, g.out_c, g.k_h, g.k_w,
             g.stride_h, g.stride_w, g.groups)
    if min(sizes) < 1:
        raise _fail(fn, "desc", "all sizes must be >= 1")
    if g.in_c % g.groups or g.out_c % g.groups:
        raise _fail(fn, "desc", "in_c and out_c must be divisible by groups")
    if not (1 <= g.dil_h <= 255 and 1 <= g.dil_w <= 255):
        raise _fail(fn, "desc", "dilation outside 1..255")
    if not (0 <= g.pad_top < (g.k_h - 1) * g.dil_h + 1 and 0 <= g.pad_left < (g.k_w - 1) * g.dil_w + 1):
        raise _fail(fn, "desc", "padding must satisfy 0 <= pad < (k - 1) * dil + 1")
    if (g.out_h - 1) * g.stride_h - g.pad_top >= g.in_h:
        raise _fail(fn, "desc", "last window row starts outside the input")
    if (g.out_w - 1) * g.stride_w - g.pad_left >= g.in_w:
        raise _fail(fn, "desc", "last window column starts outside the input")


def _check_act(act_min: int, act_max: int, zps: Sequence[int], fn: str) -> None:
    if not -128 <= act_min <= act_max <= 127:
        raise _fail(fn, "desc", "need -128 <= act_min <= act_max <= 127")
    if any(not -128 <= z <= 127 for z in zps):
        raise _fail(fn, "desc", "zero point outside [-128, 127]")


@dataclass(frozen=True)
class _ConvDesc:
    geom: _Geom
    in_zp: int
    out_zp: int
    act_min: int
    act_max: int


def _conv_desc(desc: Sequence[int], fn: str) -> _ConvDesc:
    d = [int(v) for v in desc]
    if len(d) not in (17, 19):
        raise _fail(fn, "desc", f"length {len(d)}, expected 17 (or 19 with dil_h, dil_w)")
    g = _Geom(*d[:13], *d[17:19])
    _check_geom(g, fn)
    _check_act(d[15], d[16], (d[13], d[14]), fn)
    if g.k_h * g.k_w * g.cpg > 32768:
        raise _fail(fn, "desc", "k_h * k_w * in_c / groups > 32768")
    if g.out_h * g.out_w > 65536:
        raise _fail(fn, "desc", "out_h * out_w > 65536")
    return _ConvDesc(g, d[13], d[14], d[15], d[16])


def _linear_desc(desc: Sequence[int], fn: str) -> list[int]:
    d = [int(v) for v in desc]
    if len(d) != 6:
        raise _fail(fn, "desc", f"length {len(d)}, expected 6")
    in_n, out_n, in_zp, out_zp, act_min, act_max = d
    return [1, 1, in_n, 1, 1, out_n, 1, 1, 1, 1, 0, 0, 1, in_zp, out_zp, act_min, act_max]


def _pool_geom(desc: Sequence[int], fn: str) -> _Geom:
    d = [int(v) for v in desc]
    if len(d) != 11:
        raise _fail(fn, "desc", f"length {len(d)}, expected 11")
    in_h, in_w, c, out_h, out_w, k_h, k_w, s_h, s_w, p_t, p_l = d
    g = _Geom(in_h, in_w, c, out_h, out_w, c, k_h, k_w, s_h, s_w, p_t, p_l, c)
    _check_geom(g, fn)
    if k_h * k_w > 255:
        raise _fail(fn, "desc", "k_h * k_w > 255")
    return g


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


def maxpool_s8_grad_input_act(desc: Sequence[int], x: ArrayLike, e: ArrayLike, lo: int,
                              hi: int) -> tuple[I8, int]:
    """maxpool_s8_grad_input (acc None: disjoint windows only) then the activation mask of x
    (lo < x < hi, x as before the call) -> (ein, shift). The kernel's ein may be x itself."""
    fn = "maxpool_s8_grad_input_act"
    _pool_act_check(desc, fn, lo, hi)
    ein, sh, _ = maxpool_s8_grad_input(desc, x, e)
    return _act_mask(x, lo, hi, ein, fn), sh


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


# --------------------------------------------------------------------------
# softmax cross-entropy


def softmax_xent_s8(logits: ArrayLike, label: int, lut: ArrayLike) -> tuple[I8, int, I32]:
    """Q15 softmax minus one-hot -> (err int8, shift, stats int32 [shift, S, qmax])."""
    fn = "softmax_xent_s8"
    q = _s8(logits, fn, "logits")
    n = q.size
    if n < 1 or n * 2**16 >= 2**31:
        raise _fail(fn, "logits", "need 1 <= C and C * 2^16 < 2^31")
    label = int(label)
    if not 0 <= label < n:
        raise _fail(fn, "label", "outside [0, C)")
    table = np.asarray(lut).reshape(-1).astype(np.int64)
    if not 1 <= table.size <= 256:
        raise _fail(fn, "lut", f"length {table.size}, expected 1..256")
    if table.min() < 0 or table.max() > 2**16 or table[0] < 1:
        raise _fail(fn, "lut", "entries must be in [0, 2^16] with lut[0] > 0")
    qmax = int(q.max())
    # a trimmed table: lut[d] for d >= len(lut) is 0
    full = np.zeros(256, dtype=np.int64)
    full[:table.size] = table
    ld = full[qmax - q]
    s = int(ld.sum())
    p = (ld * 2**15 + s // 2) // s
    # Zero-sum errors: the smallest shift whose rounded non-label errors sum
    # to <= 127; the label's error is minus that sum (docs/numerics.md).
    others = np.delete(p, label)
    sh = 0
    while int(((others + ((1 << sh) >> 1)) >> sh).sum()) > 127:
        sh += 1
    err = ((p + ((1 << sh) >> 1)) >> sh).astype(np.int64)
    err[label] = -int(np.delete(err, label).sum())
    return err.astype(np.int8), sh, np.array([sh, s, qmax], dtype=np.int32)


# --------------------------------------------------------------------------
# sparse update and misc


def l1_norm_s8(e: ArrayLike, c: int) -> I32:
    """norms[k] = sum_p |e[p, k]| -> int32 (c)."""
    fn = "l1_norm_s8"
    c = int(c)
    ea = _s8(e, fn, "e")
    if c < 1 or ea.size % c:
        raise _fail(fn, "c", "len(e) must be a positive multiple of c")
    return np.abs(ea.reshape(-1, c)).sum(axis=0).astype(np.int32)


def topk_mask(norms: ArrayLike, k: int) -> U8:
    """uint8 mask of the k largest norms, ties to the lower index."""
    fn = "topk_mask"
    na = _i32(norms, fn, "norms")
    k = int(k)
    if not 0 <= k <= na.size:
        raise _fail(fn, "k", "outside [0, len(norms)]")
    order = np.argsort(-na, kind="stable")
    mask = np.zeros(na.size, dtype=np.uint8)
    mask[order[:k]] = 1
    return mask


def dyn_requant_s8(acc: ArrayLike) -> tuple[I8, int]:
    """The dynamic requantisation alone -> (out int8, shift)."""
    return dyn_requant(_i32(acc, "dyn_requant_s8", "acc"))


def f32_axpy_i32(x: ArrayLike, a: float, y_in: ArrayLike) -> F32:
    """y = y + (float)a * (float)x in float32 -> new y."""
    xa = _i32(x, "f32_axpy_i32", "x")
    y = _f32(y_in, "f32_axpy_i32", "y", xa.size)
    return y + np.float32(a) * xa.astype(np.int32).astype(np.float32)


# --------------------------------------------------------------------------
# zeroth-order (SPSA) primitives (docs/numerics.md, "Zeroth order")

ZO_STEP_MAX = 255 * 65536


def xorshift32(r: int) -> int:
    """One 13/17/5 xorshift32 step of a 32-bit state."""
    r &= 0xFFFFFFFF
    r ^= (r << 13) & 0xFFFFFFFF
    r ^= r >> 17
    r ^= (r << 5) & 0xFFFFFFFF
    return r


def zo_signs(n: int, r: int) -> tuple[I64, int]:
    """n signs (+1 / -1) from state r: bit i mod 32 (low first) of the (i div 32)-th
    next draw, a set bit -1 -> (signs int64, state after the ceil(n / 32) draws)."""
    words = []
    for _ in range((n + 31) // 32):
        r = xorshift32(r)
        words.append(r)
    bits = np.unpackbits(np.array(words, dtype="<u4").view(np.uint8), bitorder="little")[:n]
    return 1 - 2 * bits.astype(np.int64), r


def _zo_state(rng: ArrayLike, fn: str, n: int) -> list[int]:
    a = np.asarray(rng).reshape(-1)
    if a.size != n:
        raise _fail(fn, "rng", f"length {a.size}, expected {n}")
    return [int(v) & 0xFFFFFFFF for v in a.astype(np.int64)]


def zo_perturb_s8(base: ArrayLike, eps: int, rng: ArrayLike) -> tuple[I8, NDArray[np.uint32]]:
    """w = clamp(base + eps z, -127, 127), z = zo_signs(len(base), rng[0]) -> (w, new rng)."""
    fn = "zo_perturb_s8"
    b = _s8(base, fn, "base")
    eps = int(eps)
    if not -127 <= eps <= 127:
        raise _fail(fn, "eps", f"must be in -127..127, got {eps}")
    (r,) = _zo_state(rng, fn, 1)
    z, r = zo_signs(b.size, r)
    return np.clip(b + eps * z, -127, 127).astype(np.int8), np.array([r], dtype=np.uint32)


def hadamard_signs(row: int, i0: int, n: int) -> I64:
    """h[i] = -1 where popcount(row & (i0 + i)) is odd, else +1: entries i0.. of row ``row`` of
    the Sylvester Hadamard matrix (any size that is a power of two above both)."""
    idx = (np.arange(n, dtype=np.int64) + int(i0)) & int(row)
    par = np.zeros(n, dtype=np.int64)
    while idx.any():
        par ^= idx & 1
        idx >>= 1
    return 1 - 2 * par


def zo_perturb_h_s8(base: ArrayLike, eps: int, rng: ArrayLike, row: int, i0: int
                    ) -> tuple[I8, NDArray[np.uint32]]:
    """w = clamp(base + eps h z, -127, 127), h = hadamard_signs(row, i0, len(base)), z =
    zo_signs(len(base), rng[0]) -> (w, new rng). row 0 is zo_perturb_s8."""
    fn = "zo_perturb_h_s8"
    b = _s8(base, fn, "base")
    eps = int(eps)
    if not -127 <= eps <= 127:
        raise _fail(fn, "eps", f"must be in -127..127, got {eps}")
    (r,) = _zo_state(rng, fn, 1)
    for name, v in (("row", int(row)), ("i0", int(i0))):
        if not 0 <= v <= 16777215:
            raise _fail(fn, name, f"must be in 0..16777215, got {v}")
    z, r = zo_signs(b.size, r)
    h = hadamard_signs(int(row), int(i0), b.size)
    return np.clip(b + eps * h * z, -127, 127).astype(np.int8), np.array([r], dtype=np.uint32)


def zo_update_s8(base: ArrayLike, step: int, rng: ArrayLike) -> tuple[I8, NDArray[np.uint32]]:
    """w = clamp(base - sign(step) m z, -127, 127) with z = zo_signs(len(base), rng[0]) and
    m[i] = (|step| >> 16) + (1 if the low 16 bits of the i-th next draw from rng[1] are
    < |step| & 0xFFFF) -> (w, new rng)."""
    fn = "zo_update_s8"
    b = _s8(base, fn, "base")
    step = int(step)
    if not -ZO_STEP_MAX <= step <= ZO_STEP_MAX:
        raise _fail(fn, "step", f"must be in {-ZO_STEP_MAX}..{ZO_STEP_MAX}, got {step}")
    rz, r = _zo_state(rng, fn, 2)
    z, rz = zo_signs(b.size, rz)
    mag = abs(step)
    low = np.empty(b.size, dtype=np.int64)
    for i in range(b.size):  # one draw per weight, in order
        r = xorshift32(r)
        low[i] = r & 0xFFFF
    m = (mag >> 16) + (low < (mag & 0xFFFF)).astype(np.int64)
    w = np.clip(b - int(np.sign(step)) * m * z, -127, 127).astype(np.int8)
    return w, np.array([rz, r], dtype=np.uint32)


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
    """v = mom * v + g; g = v (touched channels) -> (g, v)."""
    g, n_ch = _upd_g(g_in, k, "update_f32_momentum")
    v = np.array(v_in, dtype=np.float32).reshape(-1, k)
    rows = _touched_rows(touched, n_ch, "update_f32_momentum")
    d = np.float32(mom) * v[rows] + g[rows]
    v[rows] = d
    g[rows] = d
    return g.reshape(-1), v.reshape(-1)


def update_f32_scale(x_in: ArrayLike, k: int, touched: ArrayLike | None, a: float) -> F32:
    """x = a * x on the touched channels (a finite)."""
    fn = "update_f32_scale"
    x, n_ch = _upd_g(x_in, k, fn, "x")
    rows = _touched_rows(touched, n_ch, fn)
    with np.errstate(over="ignore"):
        a32 = np.float32(a)  # a float32 once (a double beyond its range: inf)
    if not np.isfinite(a32):
        raise _fail(fn, "a", "must be finite")
    with np.errstate(over="ignore", under="ignore"):
        x[rows] = a32 * x[rows]
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
    m1 = f1 * m[rows] + (one - f1) * d
    m2 = f2 * v[rows] + ((one - f2) * d) * d
    m[rows] = m1
    v[rows] = m2
    g[rows] = (m1 / (one - np.float32(b1t))) / (np.sqrt(m2 / (one - np.float32(b2t))) + np.float32(eps))
    return g.reshape(-1), m.reshape(-1), v.reshape(-1)


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


# --------------------------------------------------------------------------
# host-side helpers


def quantize_multiplier(real: float) -> tuple[int, int]:
    """``real ~= m * 2^(shift - 31)``, m in [2^30, 2^31) (TFLite QuantizeMultiplier).

    real == 0 -> (0, 0). Reals below 2^-32 get shift = -31 and a denormal m
    (possibly (0, 0)); reals >= 2^31 saturate to (2^31 - 1, 31).
    """
    real = float(real)
    if not math.isfinite(real) or real < 0:
        raise ValueError("quantize_multiplier: real must be finite and >= 0")
    if real == 0:
        return 0, 0
    q, shift = math.frexp(real)
    m = math.floor(q * 2**31 + 0.5)  # std::round (half away from zero); exact in double
    if m == 2**31:
        m //= 2
        shift += 1
    if shift > 31:
        return INT32_MAX, 31
    if shift < -31:
        m = math.floor(math.ldexp(real, 62) + 0.5)
        return (m, -31) if m else (0, 0)
    return m, shift


def make_softmax_lut(scale: float) -> NDArray[np.uint32]:
    """lut[d] = round(2^16 * exp(-scale * d)), d = 0..255 (uint32): the full table."""
    if not scale > 0:
        raise ValueError("make_softmax_lut: scale must be > 0")
    d = np.arange(256, dtype=np.float64)
    return np.floor(65536.0 * np.exp(-float(scale) * d) + 0.5).astype(np.uint32)


def trim_softmax_lut(lut: ArrayLike) -> NDArray[np.uint32]:
    """The table up to its last nonzero entry (at least one): softmax_xent_s8 reads the rest as 0."""
    t = np.asarray(lut, dtype=np.uint32).reshape(-1)
    nz = np.flatnonzero(t)
    return t[:int(nz[-1]) + 1 if nz.size else 1].copy()


def xent_loss(logits: ArrayLike, label: int, scale: float, stats: ArrayLike) -> float:
    """loss = s * (qmax - q[label]) + log(S / 2^16) from softmax_xent_s8's stats."""
    q = _s8(logits, "xent_loss", "logits")
    st = np.asarray(stats).reshape(-1)
    s_sum, qmax = int(st[1]), int(st[2])
    return float(scale) * (qmax - int(q[int(label)])) + math.log(s_sum / 65536.0)


def weight_ratios(s_w: ArrayLike, terms: int) -> tuple[I32, int]:
    """Grad-input weight ratios: (wr int32, R), the largest R <= 15 with
    ``max(wr) * terms * 16384 <= 2^31 - 1``; ``terms`` = k_h*k_w*out_c/groups (or out_n).
    Base scale of ein is then ``s_e * max(s_w) * 2^-R``."""
    s = np.asarray(s_w, dtype=np.float64).reshape(-1)
    if s.size == 0 or np.any(s < 0) or not s.max() > 0 or not np.all(np.isfinite(s)):
        raise ValueError("weight_ratios: scales must be finite, >= 0, max > 0")
    if int(terms) < 1:
        raise ValueError("weight_ratios: terms must be >= 1")
    for r in range(15, -1, -1):
        wr = np.floor(2.0**r * s / s.max() + 0.5).astype(np.int64)
        if int(wr.max()) * int(terms) * 16384 <= INT32_MAX:
            return wr.astype(np.int32), r
    raise ValueError("weight_ratios: too many terms even for R = 0")


def merge_ratios(s_a: float, s_b: float) -> tuple[int, int]:
    """(ra, rb) = round(2^15 * s / max(s_a, s_b)) for add_s8_grad_merge."""
    top = max(float(s_a), float(s_b))
    if not top > 0 or min(s_a, s_b) < 0:
        raise ValueError("merge_ratios: scales must be >= 0 with max > 0")
    return math.floor(2**15 * s_a / top + 0.5), math.floor(2**15 * s_b / top + 0.5)


def relu6_q6(scale: float, zp: int) -> int:
    """Quantised 6.0: zp + round(6 / scale), clipped to 127."""
    return min(int(zp) + math.floor(6.0 / float(scale) + 0.5), 127)


def add_params(s1: float, z1: int, s2: float, z2: int, s_out: float, z_out: int,
               act_min: int, act_max: int, n: int, left_shift: int = 20) -> list[int]:
    """The 13-int add_s8_forward descriptor for the given scales and zero points."""
    twice_max = 2.0 * max(float(s1), float(s2))
    m1, sh1 = quantize_multiplier(s1 / twice_max)
    m2, sh2 = quantize_multiplier(s2 / twice_max)
    mo, sho = quantize_multiplier(twice_max / (2.0**left_shift * float(s_out)))
    return [int(n), int(z1), int(z2), int(z_out), m1, sh1, m2, sh2, mo, sho,
            int(left_shift), int(act_min), int(act_max)]


# --------------------------------------------------------------------------
# lookup-table activations: the float functions and their tables (numerics.md)

LUT_DMAX = 2**24 - 1
# name -> True when it takes a parameter (LeakyReLU's negative_slope)
LUT_FUNCTIONS: dict[str, bool] = {"sigmoid": False, "tanh": False, "hardswish": False,
                                  "hardsigmoid": False, "leaky_relu": True, "silu": False, "gelu": False}


def _sigmoid(r: NDArray[np.float64]) -> NDArray[np.float64]:
    return 0.5 * (1.0 + np.tanh(0.5 * r))  # no overflow for large |r|


RealFn = Callable[[NDArray[np.float64]], NDArray[np.float64]]


def lut_function(name: str, alpha: float = 0.01) -> tuple[RealFn, RealFn]:
    """(f, f') in float64 for an activation of LUT_FUNCTIONS; f' as PyTorch's autograd
    defines it at the kinks."""
    if name == "sigmoid":
        return _sigmoid, lambda r: _sigmoid(r) * (1.0 - _sigmoid(r))
    if name == "tanh":
        return np.tanh, lambda r: 1.0 - np.tanh(r) ** 2
    if name == "hardsigmoid":
        return (lambda r: np.clip(r + 3.0, 0.0, 6.0) / 6.0,
                lambda r: np.where((r > -3.0) & (r < 3.0), 1.0 / 6.0, 0.0))
    if name == "hardswish":
        return (lambda r: r * np.clip(r + 3.0, 0.0, 6.0) / 6.0,
                lambda r: np.where(r < -3.0, 0.0, np.where(r <= 3.0, r / 3.0 + 0.5, 1.0)))
    if name == "leaky_relu":
        a = float(alpha)
        return (lambda r: np.where(r > 0, r, a * r), lambda r: np.where(r > 0, 1.0, a))
    if name == "silu":
        return (lambda r: r * _sigmoid(r),
                lambda r: _sigmoid(r) * (1.0 + r * (1.0 - _sigmoid(r))))
    if name == "gelu":
        erf = np.vectorize(math.erf, otypes=[np.float64])
        return (lambda r: 0.5 * r * (1.0 + erf(r / math.sqrt(2.0))),
                lambda r: (0.5 * (1.0 + erf(r / math.sqrt(2.0)))
                           + r * np.exp(-0.5 * r * r) / math.sqrt(2.0 * math.pi)))
    raise ValueError(f"lut_function: unknown activation {name!r} (known: {', '.join(LUT_FUNCTIONS)})")


def lut_tables(name: str, s_in: float, z_in: int, s_out: float, z_out: int,
               alpha: float = 0.01) -> tuple[I8, I32, int]:
    """(table int8, dtable int32, d_shift) of numerics.md for activation ``name``
    between input (s_in, z_in) and output (s_out, z_out)."""
    f, df = lut_function(name, alpha)
    x = np.arange(-128, 128, dtype=np.float64)
    r = float(s_in) * (x - int(z_in))
    q = np.floor(f(r) / float(s_out) + 0.5) + int(z_out)
    inside = (q >= -128) & (q <= 127)
    table = np.clip(q, -128, 127).astype(np.int8)
    slope = df(r)
    top = float(np.max(np.abs(slope)))
    d_shift = 0
    while d_shift < 24 and math.floor(2.0 ** (d_shift + 1) * top + 0.5) <= 32767:
        d_shift += 1
    dtable = np.where(inside, np.floor(2.0**d_shift * slope + 0.5), 0).astype(np.int32)
    return table, dtable, d_shift
