"""Host-side helpers of the oracle: multipliers, softmax LUTs, weight ratios, loss, and the
lookup-table activations' float functions and tables (docs/numerics.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from microtrain_tools.reference.oracle_base import I8, I32, INT32_MAX, _s8

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
