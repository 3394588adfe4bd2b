"""The oracle's shared pieces (docs/numerics.md): argument coercion, the integer helpers
(requantisation, int32 wrap), window geometry and descriptor checks.
"""

from __future__ import annotations

from collections.abc import Sequence
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
