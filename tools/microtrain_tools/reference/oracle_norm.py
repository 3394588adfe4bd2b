"""Oracle of LayerNorm's integer normalisation (docs/numerics.md, "LayerNorm"): forward,
grad input, and the host's descriptor from the scales and eps."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from microtrain_tools.reference.oracle_base import I8, INT32_MAX, _fail, _s8, dyn_requant, requant
from microtrain_tools.reference.oracle_host import quantize_multiplier


def _ln_desc(desc: Sequence[int], fn: str) -> list[int]:
    d = [int(v) for v in desc]
    if len(d) != 7:
        raise _fail(fn, "desc", f"length {len(d)}, expected 7")
    rows, c, zi, zo, eps_q, m, sh = d
    if not (1 <= c <= 256 and rows >= 1 and rows * c <= 1 << 26):
        raise _fail(fn, "desc", "need 1 <= c <= 256, rows >= 1, rows * c <= 2^26")
    if not (-128 <= zi <= 127 and -128 <= zo <= 127):
        raise _fail(fn, "desc", "zero point outside [-128, 127]")
    if not (1 <= eps_q <= INT32_MAX and 0 <= m <= INT32_MAX and -31 <= sh <= 31):
        raise _fail(fn, "desc", "eps_q, m or sh out of range")
    return d


def _normalised(d: list[int], x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: t = (C a - S1) * inv (the normalised value in Q26), d = C a - S1, inv."""
    rows, c, zi, _, eps_q = d[:5]
    a = x.reshape(rows, c) - zi
    s1 = a.sum(axis=1, keepdims=True)
    q = c * (a * a).sum(axis=1, keepdims=True) - s1 * s1  # C^2 * variance, exact
    qe = np.minimum(q + eps_q, 2**32 - 1)
    r = np.array([[math.isqrt(int(v))] for v in qe.reshape(-1)], dtype=np.int64)
    inv = (1 << 26) // r
    dd = c * a - s1
    return dd * inv, dd, inv


def layernorm_s8_forward(desc: Sequence[int], x: ArrayLike) -> I8:
    """y = clamp(requant((C a - S1) * floor(2^26 / isqrt(C^2 var + eps_q)), m, sh) + out_zp)."""
    fn = "layernorm_s8_forward"
    d = _ln_desc(desc, fn)
    t, _, _ = _normalised(d, _s8(x, fn, "x", d[0] * d[1]))
    y = requant(t, d[5], d[6]) + d[3]
    return np.clip(y, -128, 127).astype(np.int8).reshape(-1)


def _dhm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """floor((a * b + 2^30) / 2^31), exact (Python integers)."""
    f = np.frompyfunc(lambda u, v: (int(u) * int(v) + (1 << 30)) >> 31, 2, 1)
    return np.asarray(f(a, b), dtype=np.int64)


def layernorm_s8_grad_input(desc: Sequence[int], x: ArrayLike, e: ArrayLike) -> tuple[I8, int]:
    """(ein, shift): dx = (C e - sum e - yhat sum(e yhat)) / R with yhat = t / 2^26,
    in the integer steps of the contract; base scale s_e / (s_x * 2^8)."""
    fn = "layernorm_s8_grad_input"
    d = _ln_desc(desc, fn)
    rows, c = d[:2]
    t, _, inv = _normalised(d, _s8(x, fn, "x", rows * c))
    ee = _s8(e, fn, "e", rows * c).reshape(rows, c)
    g14 = (ee * (t >> 12)).sum(axis=1, keepdims=True)
    v9 = (c * ee - ee.sum(axis=1, keepdims=True)) * 512 - _dhm(t, np.broadcast_to(g14, t.shape))
    acc = _dhm(v9, np.broadcast_to(inv << 4, t.shape))
    return dyn_requant(acc.reshape(-1))


def layernorm_params(s_x: float, z_x: int, s_y: float, z_y: int, c: int, rows: int,
                     eps: float = 1e-5) -> list[int]:
    """The 7-int layernorm_s8 descriptor: eps_q = round(eps * C^2 / s_x^2) (at least 1, at
    most 2^31 - 1), (m, sh) from 2^-26 / s_y."""
    eps_q = min(max(math.floor(float(eps) * c * c / (float(s_x) ** 2) + 0.5), 1), INT32_MAX)
    m, sh = quantize_multiplier(2.0**-26 / float(s_y))
    return [int(rows), int(c), int(z_x), int(z_y), eps_q, m, sh]
