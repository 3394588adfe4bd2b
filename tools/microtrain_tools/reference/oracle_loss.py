"""Oracle of the loss, sparse-update selection and zeroth-order kernels (docs/numerics.md).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from microtrain_tools.reference.oracle_base import F32, I8, I32, I64, U8, _f32, _fail, _i32, _s8, dyn_requant

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
