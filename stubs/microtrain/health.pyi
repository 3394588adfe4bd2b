# microtrain.health: training health (saturation counters) and activation-range adaptation
# (docs/training.md, "Health and range adaptation"); made by Trainer(health=..., adapt_ranges=...).
from typing import Any

from microtrain.model import Layer, Model

SCALE_MAX: float  # 2^40: the validator's activation-scale limit

def chain(model: Model, ly: Layer) -> tuple[list[int], list[Layer]] | None: ...

class Health:
    model: Model
    adapt: bool  # range adaptation on
    groups: list[Any]  # one per trained layer: its table and counters
    cnt: Any  # array('i') of 1: the count of the last native call
    win: int  # samples since the last update
    ep: int  # samples since the epoch started
    def __init__(self, model: Model, layers: list[Layer], adapt: bool) -> None: ...
    def count(self, bufs: dict[int, Any]) -> None: ...
    def update(self) -> int: ...
    def running(self) -> tuple[float | None, float | None]: ...
    def epoch(self, loss: float, classes: int, acc: float | None = None) -> dict[str, Any]: ...
