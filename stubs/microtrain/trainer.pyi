# microtrain.trainer: the training loop.
from collections.abc import Callable
from typing import Any

from microtrain._types import Int8In, LossFn, Policy, Samples, TrainSpec
from microtrain.adam import Adam
from microtrain.model import Layer, Model
from microtrain.optim import SGD
from microtrain.replay import Replay

MODES: tuple[str, ...]  # ("int8", "mixed", "float32")

class Trainer:
    model: Model
    mode: str
    opt: SGD | Adam
    sparse: Policy | None
    batch: int
    schedule: Callable[[float, int, int], float]
    layers: list[Layer]  # the trained layers, in model order
    first: int  # index of the first trained layer
    lr: float  # the rate of the next update: the optimiser's rate (set_rate)
    shuffle_state: int  # xorshift32 seed state of fit's shuffle (saved in checkpoints)
    pending: int  # samples whose gradients are not applied yet
    steps: int  # samples seen by step()
    epoch: int  # epochs fit completed (during fit: the current one); saved in checkpoints
    log_path: str | None
    log_every: int
    bwd_us: int  # microseconds spent in backward (sparse speed-up reports)
    heap_live: int  # largest live heap at an epoch end (bytes)
    correct: int  # running accuracy / loss of the current epoch
    seen: int
    loss_sum: float
    replay: Replay | None  # mixes replayed samples into step() (docs/adapt.md)
    loss_fn: LossFn  # the loss: cross_entropy, mse, bce or the user's callable
    classes: bool  # loss "xent": accuracy and confusion are counted
    health: dict[str, Any] | None  # the last epoch's health record (fit)
    def __init__(self, model: Model, train: TrainSpec = "last:1",
                 mode: str = "int8", optimizer: SGD | Adam | None = None, sparse: Policy | None = None,
                 batch: int = 1, schedule: str | Callable[[float, int, int], float] | None = None,
                 log: str | None = None, log_every: int = 100, seed: int | None = None,
                 loss: str | LossFn = "xent", replay: Replay | None = None, health: bool | None = None,
                 adapt_ranges: bool = False, sums: bool | None = None, recompute: bool = False) -> None: ...
    def step(self, x: Int8In, label: Any) -> float: ...
    def flush(self) -> None: ...
    def fit(self, samples: Samples, epochs: int = 1, shuffle: bool = True,
            eval_samples: Samples | None = None, verbose: bool = True,
            cache: str | bool | None = "auto", total: int | None = None) -> list[dict[str, Any]]: ...
    def evaluate(self, samples: Samples, confusion: bool = True) -> dict[str, Any]: ...
    def save(self, path: str, state: bool = True) -> None: ...
