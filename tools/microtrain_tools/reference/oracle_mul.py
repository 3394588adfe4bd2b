"""Oracle of the element-wise mul of two activations (docs/numerics.md, "element-wise
mul"): forward with x2 broadcast over positions and / or channels, the grads of both
inputs, and the host's descriptor from the scales."""

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


def _mul_desc(desc: Sequence[int], fn: str) -> list[int]:
    d = [int(v) for v in desc]
    if len(d) != 11:
        raise _fail(fn, "desc", f"length {len(d)}, expected 11")
    hw, c, hw2, c2, z1, z2, zo, m, sh, act_min, act_max = d
    if not (1 <= hw and 1 <= c <= 65535 and hw * c <= _MAX_ELEMS):
        raise _fail(fn, "desc", "bad hw, c")
    if hw2 not in (1, hw) or c2 not in (1, c):
        raise _fail(fn, "desc", "x2 must be broadcastable")
    if (hw // hw2) * (c // c2) > 65535:
        raise _fail(fn, "desc", "more than 65535 elements per x2 value")
    _check_act(act_min, act_max, (z1, z2, zo), fn)
    if not (0 <= m <= INT32_MAX and -31 <= sh <= 15):
        raise _fail(fn, "desc", "multiplier outside [0, 2^31) or shift outside [-31, 15]")
    return d


def _x2_full(d: list[int], x2: np.ndarray) -> np.ndarray:
    """x2 (hw2 x c2) broadcast to x1's hw x c."""
    hw, c, hw2, c2 = d[:4]
    return np.broadcast_to(x2.reshape(hw2, c2), (hw, c))


def mul_s8_forward(desc: Sequence[int], x1: ArrayLike, x2: ArrayLike) -> I8:
    """y = clamp(requant((x1 - z1) * (x2 - z2), m, sh) + zo, act_min, act_max) (int8, hw * c)."""
    fn = "mul_s8_forward"
    d = _mul_desc(desc, fn)
    hw, c, hw2, c2, z1, z2, zo, m, sh, act_min, act_max = d
    a = _s8(x1, fn, "x1", hw * c).reshape(hw, c) - z1
    b = _x2_full(d, _s8(x2, fn, "x2", hw2 * c2)) - z2
    y = requant(a * b, m, sh) + zo
    return np.clip(y, act_min, act_max).astype(np.int8).reshape(-1)


def mul_s8_grad_x1(desc: Sequence[int], e: ArrayLike, x2: ArrayLike) -> tuple[I8, int]:
    """(ein, shift): the error of x1, dyn_requant(e * (x2 - z2)); base scale s_e * s_2."""
    fn = "mul_s8_grad_x1"
    d = _mul_desc(desc, fn)
    hw, c, hw2, c2 = d[:4]
    ee = _s8(e, fn, "e", hw * c).reshape(hw, c)
    b = _x2_full(d, _s8(x2, fn, "x2", hw2 * c2)) - d[5]
    return dyn_requant((ee * b).reshape(-1))


def mul_s8_grad_x2(desc: Sequence[int], e: ArrayLike, x1: ArrayLike) -> tuple[I8, int, I32]:
    """(ein, shift, acc): the error of x2, the products e * (x1 - z1) summed over the
    elements that read each x2 value; base scale s_e * s_1."""
    fn = "mul_s8_grad_x2"
    d = _mul_desc(desc, fn)
    hw, c, hw2, c2 = d[:4]
    p = _s8(e, fn, "e", hw * c).reshape(hw, c) * (_s8(x1, fn, "x1", hw * c).reshape(hw, c) - d[4])
    acc = p.sum(axis=0, keepdims=True) if hw2 < hw else p
    acc = acc.sum(axis=1, keepdims=True) if c2 < c else acc
    acc = acc.reshape(-1)
    ein, sh = dyn_requant(acc)
    return ein, sh, acc.astype(np.int32)


def mul_params(s1: float, z1: int, s2: float, z2: int, s_out: float, z_out: int, hw: int, c: int,
               hw2: int, c2: int, act_min: int = -128, act_max: int = 127) -> list[int]:
    """The 11-int mul_s8 descriptor: (m, sh) from s1 * s2 / s_out (quantize_multiplier)."""
    m, sh = quantize_multiplier(float(s1) * float(s2) / float(s_out))
    return [int(hw), int(c), int(hw2), int(c2), int(z1), int(z2), int(z_out), m, sh, int(act_min),
            int(act_max)]
