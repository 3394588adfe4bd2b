# microtrain.replay: latent replay against forgetting (docs/adapt.md).
from typing import Literal

from microtrain.model import Model
from microtrain.trainer import Trainer

M32: int
POLICIES: tuple[str, ...]  # ("reservoir", "balanced")

class Replay:
    capacity: int
    policy: str
    k: int  # replayed samples after each training sample
    path: str | None  # the records' file, or None in RAM
    rng: int  # xorshift32 state
    n: int  # records held
    seen: int  # samples offered
    replayed: int
    labels: bytearray
    record: int  # bytes a sample (0 until first used)
    def __init__(self, capacity: int = 100, policy: Literal["reservoir", "balanced"] = "reservoir",
                 k: int = 1, seed: int = 1, path: str | None = None) -> None: ...
    @property
    def nbytes(self) -> int: ...
    def add(self, model: Model, first: int, label: int) -> None: ...
    def load(self, model: Model, first: int, i: int) -> int: ...
    def after_step(self, t: Trainer, label: int) -> None: ...
    def close(self) -> None: ...
