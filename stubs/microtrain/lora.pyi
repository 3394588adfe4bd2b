# microtrain.lora: rank-r LoRA adapters on a loaded model (docs/lora.md).
from typing import Any

from microtrain._types import Samples, TrainSpec
from microtrain.model import Model

MAGIC: bytes  # adapter file magic, b"MTLA"
VERSION: int  # adapter file version this reads and writes

class LoRA:
    model: Model
    rank: int
    seed: int
    headroom: int | float
    memory_floor: bool  # MemFLoRA: A frozen, B trained alone with its scale matched to the output
    adapters: list[Any]  # one per adapted layer: the base layer, A, B and the add
    def __init__(self, model: Model, rank: int = 4, layers: TrainSpec = "last:3",
                 calib: Samples | None = None, seed: int = 1, headroom: int | float = 4,
                 memory_floor: bool = False, _data: dict[str, Any] | None = None) -> None: ...
    def detach(self) -> None: ...
    def attach(self) -> None: ...
    def calibrate(self, samples: Samples, passes: int = 4) -> None: ...
    @property
    def train(self) -> list[str]: ...
    @property
    def n_params(self) -> int: ...
    def save(self, path: str) -> None: ...
    def merge(self) -> None: ...

def load(model: Model, path: str, memory_floor: bool = False) -> LoRA: ...
