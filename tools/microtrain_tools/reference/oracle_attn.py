"""Oracle of the product of two activations (docs/numerics.md, "matmul"): attention
scores Q K^T (tb 1) and weighted values A V (tb 0), forward and the grads of both
operands, and the host's descriptor from the scales."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from microtrain_tools.reference.oracle_base import (
    I8,
    I32,
    INT32_MAX,
    _check_act,
    _fail,
    _s8,
    dyn_requant,
    requant,
)
from microtrain_tools.reference.oracle_host import quantize_multiplier

_MAX_ELEMS = 1 << 26


def _matmul_desc(desc: Sequence[int], fn: str) -> list[int]:
    d = [int(v) for v in desc]
    if len(d) != 11:
        raise _fail(fn, "desc", f"length {len(d)}, expected 11")
    rows, inner, cols, tb, za, zb, zo, mult, sh, act_min, act_max = d
    if not (1 <= rows <= 65535 and 1 <= cols <= 65535 and 1 <= inner <= 32768):
        raise _fail(fn, "desc", "bad rows, inner, cols")
    if max(rows * inner, inner * cols, rows * cols) > _MAX_ELEMS:
        raise _fail(fn, "desc", "tensor too large")
    if tb not in (0, 1):
        raise _fail(fn, "desc", "tb must be 0 or 1")
    _check_act(act_min, act_max, (za, zb, zo), fn)
    if not (0 <= mult <= INT32_MAX and -31 <= sh <= 31):
        raise _fail(fn, "desc", "multiplier outside [0, 2^31) or shift outside [-31, 31]")
    return d


def _b_mat(d: list[int], b: np.ndarray) -> np.ndarray:
    """b as the inner x cols matrix of the product."""
    inner, cols, tb = d[1], d[2], d[3]
    return b.reshape(cols, inner).T if tb else b.reshape(inner, cols)


def matmul_s8_forward(desc: Sequence[int], a: ArrayLike, b: ArrayLike) -> I8:
    """y = clamp(requant((A - a_zp) (B - b_zp), mult, sh) + out_zp) (int8, rows * cols)."""
    fn = "matmul_s8_forward"
    d = _matmul_desc(desc, fn)
    rows, inner, cols = d[:3]
    am = _s8(a, fn, "a", rows * inner).reshape(rows, inner) - d[4]
    bm = _b_mat(d, _s8(b, fn, "b", inner * cols)) - d[5]
    y = requant(am @ bm, d[7], d[8]) + d[6]
    return np.clip(y, d[9], d[10]).astype(np.int8).reshape(-1)


def matmul_s8_grad_a(desc: Sequence[int], e: ArrayLike, b: ArrayLike) -> tuple[I8, int, I32]:
    """(ein, shift, acc): the error of a, E (B - b_zp)^T (rows x inner); base scale s_e * s_b."""
    fn = "matmul_s8_grad_a"
    d = _matmul_desc(desc, fn)
    rows, inner, cols = d[:3]
    em = _s8(e, fn, "e", rows * cols).reshape(rows, cols)
    acc = (em @ (_b_mat(d, _s8(b, fn, "b", inner * cols)) - d[5]).T).reshape(-1)
    ein, sh = dyn_requant(acc)
    return ein, sh, acc.astype(np.int32)


def matmul_s8_grad_b(desc: Sequence[int], e: ArrayLike, a: ArrayLike) -> tuple[I8, int, I32]:
    """(ein, shift, acc): the error of b, (A - a_zp)^T E, laid out as b; base scale s_e * s_a."""
    fn = "matmul_s8_grad_b"
    d = _matmul_desc(desc, fn)
    rows, inner, cols = d[:3]
    em = _s8(e, fn, "e", rows * cols).reshape(rows, cols)
    g = (_s8(a, fn, "a", rows * inner).reshape(rows, inner) - d[4]).T @ em  # inner x cols
    acc = (g.T if d[3] else g).reshape(-1)
    ein, sh = dyn_requant(acc)
    return ein, sh, acc.astype(np.int32)


def matmul_params(s_a: float, z_a: int, s_b: float, z_b: int, s_out: float, z_out: int, rows: int, inner: int,
                  cols: int, tb: int, act_min: int = -128, act_max: int = 127) -> list[int]:
    """The 11-int matmul_s8 descriptor: (mult, sh) from s_a * s_b / s_out."""
    m, sh = quantize_multiplier(float(s_a) * float(s_b) / float(s_out))
    return [int(rows), int(inner), int(cols), int(tb), int(z_a), int(z_b), int(z_out), m, sh, int(act_min),
            int(act_max)]


def _softmax_desc(desc: Sequence[int], fn: str) -> list[int]:
    d = [int(v) for v in desc]
    if len(d) != 3:
        raise _fail(fn, "desc", f"length {len(d)}, expected 3")
    outer, n, inner = d
    if not (1 <= n <= 256 and outer >= 1 and inner >= 1 and outer * n * inner <= _MAX_ELEMS):
        raise _fail(fn, "desc", "need 1 <= n <= 256, outer, inner >= 1, outer * n * inner <= 2^26")
    return d


def _rows(d: list[int], v: np.ndarray) -> np.ndarray:
    """outer x n x inner as (outer * inner) rows of n."""
    outer, n, inner = d
    return v.reshape(outer, n, inner).transpose(0, 2, 1).reshape(outer * inner, n)


def _unrows(d: list[int], r: np.ndarray) -> np.ndarray:
    outer, n, inner = d
    return r.reshape(outer, inner, n).transpose(0, 2, 1).reshape(-1)


def softmax_s8_forward(desc: Sequence[int], x: ArrayLike, lut: ArrayLike) -> I8:
    """Softmax over the n of outer x n x inner -> y (int8, scale 1/256, zero point -128):
    y = min(floor((lut[d] * 2^8 + S // 2) / S), 255) - 128, d = max - x, S = sum of lut[d]
    over the row (entries past the table read 0)."""
    fn = "softmax_s8_forward"
    d = _softmax_desc(desc, fn)
    q = _rows(d, _s8(x, fn, "x", d[0] * d[1] * d[2]))
    t = np.asarray(lut, dtype=np.int64).reshape(-1)
    if not (1 <= t.size <= 256 and t[0] == 65536 and np.all(np.diff(t) <= 0) and t.min() >= 0):
        raise _fail(fn, "lut", "need 1..256 non-increasing entries from 65536")
    dist = q.max(axis=1, keepdims=True) - q
    v = np.where(dist < t.size, t[np.minimum(dist, t.size - 1)], 0)
    s = v.sum(axis=1, keepdims=True)
    u = np.minimum(((v << 8) + (s >> 1)) // s, 255)
    return _unrows(d, u - 128).astype(np.int8)


def softmax_s8_grad_input(desc: Sequence[int], y: ArrayLike, e: ArrayLike) -> tuple[I8, int]:
    """(ein, shift) from the stored output y: with u = y + 128 (the probability in 1/256),
    acc = u * (256 e - sum_row u e) = 2^16 p (e - p.e); base scale s_e / 2^16."""
    fn = "softmax_s8_grad_input"
    d = _softmax_desc(desc, fn)
    n_all = d[0] * d[1] * d[2]
    u = _rows(d, _s8(y, fn, "y", n_all)) + 128
    ee = _rows(d, _s8(e, fn, "e", n_all))
    acc = u * (256 * ee - (u * ee).sum(axis=1, keepdims=True))
    return dyn_requant(_unrows(d, acc))
