"""Configuration of the training reference (docs/training.md): optimisers, sparse-update
policies, trained-layer selection, shuffling, learning-rate schedules, and the float helpers
that follow the device's single-precision quantisation helpers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from microtrain_tools import mtm
from microtrain_tools.reference import oracle as o
from microtrain_tools.reference.mpfloat import DOUBLE, Floats

F32 = NDArray[np.float32]
F64 = NDArray[np.float64]
I64 = NDArray[np.int64]
BIAS_LIMIT = 2**30
MODES = ("int8", "mixed", "float32")
FLOATS = ("double", "float32")


# --------------------------------------------------------------------------
# configuration


@dataclass
class SGD:
    lr: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0
    standardize: bool = False
    rounding: str = "auto"  # "nearest", "stochastic", or "auto" (stochastic for layers without a master)
    state: str = "f32"  # or "bf16": the state rounded to bfloat16 when stored (docs/numerics.md)


@dataclass
class Adam:
    lr: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    standardize: bool = False
    rounding: str = "auto"
    state: str = "f32"


class DynamicSparse:
    """rate from the loss relative to the largest loss seen (docs/training.md, Sparse policies).

    ``dense_output=True`` leaves the layer that produces the model output dense (the fix
    proposed for the collapse of sparse training; the device does not do it yet)."""

    def __init__(self, lambda_min: float = 0.1, lambda_max: float = 1.0, form: str = "text",
                 dense_output: bool = True) -> None:
        if not 0.0 < lambda_min <= lambda_max <= 1.0:
            raise ValueError("DynamicSparse: need 0 < lambda_min <= lambda_max <= 1")
        if form not in ("text", "linear"):
            raise ValueError("DynamicSparse: form must be 'text' or 'linear'")
        self.lambda_min, self.lambda_max, self.form = lambda_min, lambda_max, form
        self.dense_output = dense_output
        self.max_loss = 0.0
        self.rate = lambda_max

    def observe(self, loss: float, fl: Floats = DOUBLE) -> None:
        if loss > self.max_loss:
            self.max_loss = loss
        r = loss / self.max_loss if self.max_loss > 0.0 else fl.lit("1.0")
        lo, hi = fl.param(self.lambda_min), fl.param(self.lambda_max)
        if self.form == "linear":
            r = lo + (hi - lo) * r
        self.rate = min(max(r, lo), hi)

    def mask(self, name: str, e: NDArray[np.int8], c: int,
             is_output: bool = False, fl: Floats = DOUBLE) -> NDArray[np.uint8] | None:
        k = math.ceil(self.rate * c)
        if k >= c or (is_output and self.dense_output):
            return None
        return o.topk_mask(o.l1_norm_s8(e, c), k)


class StaticSparse:
    """The first ceil(ratio * C) channels (ratio per layer name with a dict; others dense)."""

    def __init__(self, ratio: float | dict[str, float] = 0.5, dense_output: bool = True) -> None:
        self.ratio = ratio
        self.dense_output = dense_output

    def observe(self, loss: float, fl: Floats = DOUBLE) -> None:
        pass

    def mask(self, name: str, e: NDArray[np.int8], c: int,
             is_output: bool = False, fl: Floats = DOUBLE) -> NDArray[np.uint8] | None:
        r = self.ratio.get(name, 1.0) if isinstance(self.ratio, dict) else self.ratio
        k = math.ceil(fl.param(r) * c)
        if k >= c or (is_output and self.dense_output):
            return None
        m = np.zeros(c, dtype=np.uint8)
        m[:k] = 1
        return m


Policy = DynamicSparse | StaticSparse


# --------------------------------------------------------------------------
# helpers


def select(m: mtm.Model, spec: str | int | Sequence[str | int] | None) -> list[int]:
    """Trained layer indices for ``train``: "last:N", "all", a name / index, or a list of them."""
    rnn = (mtm.Op.GRU, mtm.Op.LSTM)
    weighted = [j for j, ly in enumerate(m.layers) if ly.op in mtm.WEIGHTED or ly.op in rnn]
    if spec is None or spec == "all":
        return weighted
    if isinstance(spec, str) and spec.startswith("last:"):
        n = int(spec[5:])
        if not 1 <= n <= len(weighted):
            raise ValueError(f"train={spec!r}: the model has {len(weighted)} layers with parameters")
        return weighted[-n:]
    items: Sequence[str | int] = [spec] if isinstance(spec, (str, int)) else spec
    out: set[int] = set()
    for s in items:
        j = s if isinstance(s, int) else [ly.name for ly in m.layers].index(s)
        if m.layers[j].op not in mtm.WEIGHTED and m.layers[j].op not in (mtm.Op.GRU, mtm.Op.LSTM):
            raise ValueError(f"layer {m.layers[j].name} has no parameters to train")
        out.add(j)
    return sorted(out)


def softmax_lut(scale: float, fl: Floats = DOUBLE) -> NDArray[np.uint32]:
    """lut[d] = floor(2^16 * exp(-scale * d) + 0.5) with the device's exp (the C library's for doubles),
    up to its last nonzero entry, as the device's quant.softmax_lut (the kernel reads the rest as 0)."""
    sc, c, half = fl(scale), fl.lit("65536.0"), fl.lit("0.5")
    return o.trim_softmax_lut([math.floor(c * fl.exp(-sc * d) + half) for d in range(256)])


def shuffle_state(seed: int) -> int:
    """The device's initial shuffle-generator state for ``Trainer(seed=...)``."""
    return (seed * 2654435761 + 12345) & 0xFFFFFFFF or 1  # device: a zero state becomes 1


def epoch_state(base: int, epoch: int) -> int:
    """The generator state the shuffle of ``epoch`` starts from: a function of the seed state and
    the epoch number only, so a fit split anywhere (or resumed from a checkpoint) sees the same
    orders as one uninterrupted fit."""
    return (base ^ ((epoch * 0x9E3779B9) & 0xFFFFFFFF)) or 1  # device: a zero state becomes 1


def shuffle_epoch(base: int, epoch: int, n: int) -> list[int]:
    """The sample order of one epoch of ``Trainer.fit(shuffle=True)``: xorshift32 Fisher-Yates
    from the end over the identity order."""
    r = epoch_state(base, epoch)
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        r ^= (r << 13) & 0xFFFFFFFF
        r ^= r >> 17
        r ^= (r << 5) & 0xFFFFFFFF
        j = r % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def shuffle_order(n: int, epochs: int, seed: int = 1, first: int = 0) -> list[list[int]]:
    """Per-epoch sample orders of ``Trainer.fit(shuffle=True)`` for epochs first .. first + epochs - 1."""
    return [shuffle_epoch(shuffle_state(seed), e, n) for e in range(first, first + epochs)]


Schedule = Callable[[float, int, int], float]


def schedule_lr(schedule: str | Schedule | None, lr0: float, epoch: int, epochs: int,
                fl: Floats = DOUBLE) -> float:
    """The learning rate of an epoch: ``optim.schedule``'s named schedules ("constant", "step" =
    ``StepLR()``, "cosine" = ``Cosine()``) as the device computes them in the platform's floats,
    or a callable's value (evaluated in double, then taken as the device takes a hyperparameter)."""
    lr = fl.param(lr0)
    if schedule is None or schedule == "constant":
        return lr
    if schedule == "step":  # lr0 * gamma ** (epoch // step), StepLR(step=10, gamma=0.1)
        return lr * fl.pow(fl.lit("0.1"), epoch // 10)
    if schedule == "cosine":  # Cosine(lr_min=0.0); epoch / (epochs - 1): both ints become floats
        t = fl(epoch) / fl(epochs - 1) if epochs > 1 else fl.lit("0.0")
        lo = fl.lit("0.0")
        return lo + fl.lit("0.5") * (lr - lo) * (fl.lit("1.0") + fl.cos(fl.pi * t))
    if callable(schedule):
        return fl.param(schedule(lr0, epoch, epochs))
    raise ValueError(f"schedule: expected 'constant', 'step', 'cosine' or a callable, got {schedule!r}")


def _f32(v: ArrayLike) -> F32:
    return np.asarray(v, dtype=np.float32)


def _wide(v: ArrayLike) -> F64:
    return np.asarray(v, dtype=np.float64)



# python_lib/microtrain/quant.py's helpers with single-precision floats (the double versions are
# the oracle's, equal to the device's on a double-float build)



def _weight_ratios(s_w: F32, terms: int, fl: Floats) -> tuple[NDArray[np.int32], int]:
    """The device's update_f32_ratios (float32 on every build)."""
    top = np.float32(np.max(s_w))
    if not top > 0.0:
        raise ValueError("weight_ratios: scales must have max > 0")
    r = 15
    while r > 0 and (1 << r) * terms * 16384 > o.INT32_MAX:
        r -= 1
    wr = np.floor((np.float32(1 << r) * np.asarray(s_w, np.float32)) / top + np.float32(0.5))
    return wr.astype(np.int32), r


def _merge_ratios(s_a: float, s_b: float, fl: Floats) -> tuple[int, int]:
    if not fl.single:
        return o.merge_ratios(s_a, s_b)
    top = s_a if s_a > s_b else s_b
    if not top > 0.0:
        return 32768, 32768
    c, half = fl.lit("32768.0"), fl.lit("0.5")
    return math.floor(c * s_a / top + half), math.floor(c * s_b / top + half)
