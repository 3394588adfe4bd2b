# microtrain.optim: optimisers (fully quantised update) and learning-rate schedules.
from collections.abc import Callable
from typing import Any

from microtrain.model import Layer, Model

class Constant:
    """lr stays at its initial value."""

    def __call__(self, lr0: float, epoch: int, epochs: int) -> float: ...

class StepLR:
    """lr0 * gamma ** (epoch // step)."""

    step: int
    gamma: float
    def __init__(self, step: int = 10, gamma: float = 0.1) -> None: ...
    def __call__(self, lr0: float, epoch: int, epochs: int) -> float: ...

class Cosine:
    """Cosine decay from lr0 (first epoch) to lr_min (last epoch)."""

    lr_min: float
    def __init__(self, lr_min: float = 0.0) -> None: ...
    def __call__(self, lr0: float, epoch: int, epochs: int) -> float: ...

def schedule(spec: str | Callable[[float, int, int], float] | None) -> Callable[[float, int, int], float]: ...

class _Optimizer:
    lr: float
    weight_decay: float
    standardize: bool
    rounding: str  # "auto", "nearest" or "stochastic"
    rng: int  # xorshift16 state of stochastic rounding
    steps: int  # updates applied (Adam's t)
    def __init__(self, lr: float, weight_decay: float, standardize: bool, rounding: str = "auto") -> None: ...
    def state(self, ly: Layer) -> list[Any] | None: ...
    def step(self, layers: Model | list[Layer] | tuple[Layer, ...], n: int = 1,
             lr: float | None = None) -> None: ...

class SGD(_Optimizer):
    momentum: float
    def __init__(self, lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0,
                 standardize: bool = False, rounding: str = "auto") -> None: ...

class Adam(_Optimizer):
    beta1: float
    beta2: float
    eps: float
    def __init__(self, lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.0, standardize: bool = False, rounding: str = "auto") -> None: ...

def make_master(ly: Layer) -> None: ...
def xorshift16_skip(r: int, n: int) -> int: ...
