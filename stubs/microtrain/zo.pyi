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
    sched: QScheduler | None  # the query count's scheduler ("weights")
    passes: int  # forward passes of a sample so far ("weights")
    def __init__(self, model: Model, train: TrainSpec = "last:2", lr: float | None = None, eps: int = 2,
                 bp: TrainSpec = None, optimizer: SGD | Adam | None = None, mode: str = "int8", seed: int = 1,
                 loss: str = "xent", queries: int | QScheduler | None = None,
                 perturb: str = "weights") -> None: ...
    def step(self, batch: list[tuple[Int8In, Any]]) -> tuple[float, float]: ...
    def fit(self, samples: Samples, epochs: int = 1, batch: int = 16,
            order: Sequence[int] | None = None) -> list[float]: ...
    def evaluate(self, samples: Samples) -> float: ...

class QScheduler:
    q: int  # the current query count
    q0: int
    q_max: int
    share: bool  # the queries of a step share it (each at lr q0 / q)
    patience: int  # batches without progress before q grows
    tol: float  # the relative fall of the running loss that counts as progress
    beta: float  # decay of the running loss
    grow: int  # q's factor on a stall
    ema: float | None  # the running loss
    best: float | None
    wait: int
    n: int  # batches seen
    changes: list[tuple[int, int]]  # (batch, new q)
    def __init__(self, q0: int = 1, q_max: int = 64, patience: int = 8, tol: float = 0.02, beta: float = 0.9,
                 grow: int = 2, share: bool = False) -> None: ...
    def update(self, loss: float) -> int: ...
