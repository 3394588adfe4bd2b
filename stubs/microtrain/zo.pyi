# microtrain.zo: forward-only (zeroth-order) training: SPSA, the hybrid and activity perturbation
# (docs/adapt.md).
from collections.abc import Sequence
from typing import Any

from microtrain._types import Int8In, LossFn, Samples, TrainSpec
from microtrain.adam import Adam
from microtrain.model import Layer, Model
from microtrain.optim import SGD
from microtrain.trainer import Trainer

M32: int
STEP_MAX: float  # weight quanta

class ZO:
    model: Model
    perturb: str  # "weights" (SPSA) or "outputs" (activity perturbation)
    lr: float  # weight quanta per unit of the gradient estimate ("outputs": 0, the optimiser's)
    eps: int  # perturbation, quanta of the weights / outputs
    queries: int  # SPSA updates per batch / Hadamard rows per sample
    rows: int  # "outputs": the Hadamard size (0 for "weights")
    first: int  # index of the first zeroth-order layer
    loss_fn: LossFn
    rng: int  # xorshift32 state
    layers: list[Layer]  # the zeroth-order layers
    trainer: Trainer | None  # the backprop layers' (hybrid), the update's ("outputs")
    steps: int
    last: tuple[float, float]  # (L+, L-) of the last step
    def __init__(self, model: Model, train: TrainSpec = "last:2", lr: float | None = None, eps: int = 2,
                 bp: TrainSpec = None, optimizer: SGD | Adam | None = None, mode: str = "int8", seed: int = 1,
                 loss: str = "xent", queries: int | None = None, perturb: str = "weights") -> None: ...
    def step(self, batch: list[tuple[Int8In, Any]]) -> tuple[float, float]: ...
    def fit(self, samples: Samples, epochs: int = 1, batch: int = 16,
            order: Sequence[int] | None = None) -> list[float]: ...
    def evaluate(self, samples: Samples) -> float: ...
