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
    """The 12 ints with heads (1 when an 11-int descriptor leaves it out)."""
    d = [int(v) for v in desc]
    if len(d) not in (11, 12):
        raise _fail(fn, "desc", f"length {len(d)}, expected 11")
    d += [1] * (12 - len(d))
    rows, inner, cols, tb, za, zb, zo, mult, sh, act_min, act_max, nh = d
    if not (1 <= rows <= 65535 and 1 <= cols <= 65535 and 1 <= inner <= 32768):
        raise _fail(fn, "desc", "bad rows, inner, cols")
    if not 1 <= nh <= 256:
        raise _fail(fn, "desc", "heads must be in 1..256")
    if nh * max(rows * inner, inner * cols, rows * cols) > _MAX_ELEMS:
        raise _fail(fn, "desc", "tensor too large")
    if tb not in (0, 1):
        raise _fail(fn, "desc", "tb must be 0 or 1")
    _check_act(act_min, act_max, (za, zb, zo), fn)
    if not (0 <= mult <= INT32_MAX and -31 <= sh <= 31):
        raise _fail(fn, "desc", "multiplier outside [0, 2^31) or shift outside [-31, 31]")
    return d


# Head layouts (numerics.md, "matmul"): with tb 1, a and b are tokens whose values split into
# the heads (rows x heads x inner, cols x heads x inner) and y stacks the heads (heads x rows x
# cols); with tb 0, a is stacked (heads x rows x inner) and b, y split their columns (inner x
# heads x cols, rows x heads x cols). One head: the plain matrices.
def _a_heads(d: list[int], a: np.ndarray) -> np.ndarray:
    """a as heads x rows x inner."""
    rows, inner, _, tb, nh = *d[:4], d[11]
    return a.reshape(rows, nh, inner).transpose(1, 0, 2) if tb else a.reshape(nh, rows, inner)


def _b_heads(d: list[int], b: np.ndarray) -> np.ndarray:
    """b as heads x inner x cols (the matrices of the product)."""
    inner, cols, tb, nh = *d[1:4], d[11]
    if tb:
        return b.reshape(cols, nh, inner).transpose(1, 2, 0)
    return b.reshape(inner, nh, cols).transpose(1, 0, 2)


def _y_flat(d: list[int], y: np.ndarray) -> np.ndarray:
    """heads x rows x cols laid out as y."""
    return (y if d[3] else y.transpose(1, 0, 2)).reshape(-1)


def _y_heads(d: list[int], y: np.ndarray) -> np.ndarray:
    """y (or its error) as heads x rows x cols."""
    rows, cols, nh = d[0], d[2], d[11]
    return y.reshape(nh, rows, cols) if d[3] else y.reshape(rows, nh, cols).transpose(1, 0, 2)


def matmul_s8_forward(desc: Sequence[int], a: ArrayLike, b: ArrayLike) -> I8:
    """y = clamp(requant((A - a_zp) (B - b_zp), mult, sh) + out_zp) (int8, heads * rows * cols)."""
    fn = "matmul_s8_forward"
    d = _matmul_desc(desc, fn)
    rows, inner, cols, nh = *d[:3], d[11]
    am = _a_heads(d, _s8(a, fn, "a", nh * rows * inner)) - d[4]
    bm = _b_heads(d, _s8(b, fn, "b", nh * inner * cols)) - d[5]
    y = requant(am @ bm, d[7], d[8]) + d[6]
    return _y_flat(d, np.clip(y, d[9], d[10]).astype(np.int8))


def matmul_s8_grad_a(desc: Sequence[int], e: ArrayLike, b: ArrayLike) -> tuple[I8, int, I32]:
    """(ein, shift, acc): the error of a, E (B - b_zp)^T, laid out as a; base scale s_e * s_b."""
    fn = "matmul_s8_grad_a"
    d = _matmul_desc(desc, fn)
    rows, inner, cols, nh = *d[:3], d[11]
    em = _y_heads(d, _s8(e, fn, "e", nh * rows * cols))
    g = em @ (_b_heads(d, _s8(b, fn, "b", nh * inner * cols)) - d[5]).transpose(0, 2, 1)  # h x rows x inner
    acc = (g.transpose(1, 0, 2) if d[3] else g).reshape(-1)
    ein, sh = dyn_requant(acc)
    return ein, sh, acc.astype(np.int32)


def matmul_s8_grad_b(desc: Sequence[int], e: ArrayLike, a: ArrayLike) -> tuple[I8, int, I32]:
    """(ein, shift, acc): the error of b, (A - a_zp)^T E, laid out as b; base scale s_e * s_a."""
    fn = "matmul_s8_grad_b"
    d = _matmul_desc(desc, fn)
    rows, inner, cols, nh = *d[:3], d[11]
    em = _y_heads(d, _s8(e, fn, "e", nh * rows * cols))
    g = (_a_heads(d, _s8(a, fn, "a", nh * rows * inner)) - d[4]).transpose(0, 2, 1) @ em  # h x inner x cols
    acc = (g.transpose(2, 0, 1) if d[3] else g.transpose(1, 0, 2)).reshape(-1)
    ein, sh = dyn_requant(acc)
    return ein, sh, acc.astype(np.int32)


def matmul_params(s_a: float, z_a: int, s_b: float, z_b: int, s_out: float, z_out: int, rows: int, inner: int,
                  cols: int, tb: int, act_min: int = -128, act_max: int = 127, heads: int = 1) -> list[int]:
    """The matmul_s8 descriptor, (mult, sh) from s_a * s_b / s_out: 11 ints, or 12 with heads > 1."""
    m, sh = quantize_multiplier(float(s_a) * float(s_b) / float(s_out))
    return [int(rows), int(inner), int(cols), int(tb), int(z_a), int(z_b), int(z_out), m, sh, int(act_min),
            int(act_max)] + ([int(heads)] if heads > 1 else [])


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
