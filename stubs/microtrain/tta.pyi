# microtrain.tta: test-time adaptation without labels (docs/adapt.md, "Adapting with less").
from microtrain._types import Int8In, TrainSpec
from microtrain.model import Layer, Model

def entropy(out: Int8In, scale: float, zp: int) -> tuple[float, float, int]:
    """(prediction entropy in nats, max probability, argmax) of int8 logits."""

class TTA:
    model: Model
    lr: float
    eps: float  # perturbation, relative to each parameter's sigma
    queries: int  # perturbations per batch
    batch: int  # samples per step
    window: int  # samples per guard check
    floor: float  # the guard's bound on the predictions' diversity
    beta: float  # decay of the curvature estimate
    rng: int  # xorshift32 state
    layers: list[Layer]  # the adapted layers
    n_params: int  # a scale and a shift per output channel
    p: object  # array('f'): scale - 1 per channel, then shift (output quanta)
    h: object  # array('f'): the running diagonal curvature
    base_div: float | None  # the unadapted model's diversity (first window)
    div: float | None  # the last window's
    stopped: bool  # the guard fired
    steps: int
    last: float | None  # the last batch's entropy before its step
    def __init__(self, model: Model, layers: TrainSpec = "first:1", lr: float = 0.5, eps: float = 0.05,
                 queries: int = 4, batch: int = 16, window: int = 64, floor: float = 0.6, beta: float = 0.9,
                 seed: int = 1) -> None: ...
    def predict(self, x: Int8In) -> int: ...
    def add(self, x: Int8In) -> int: ...
    def rollback(self) -> None: ...
    def reset(self) -> None: ...
