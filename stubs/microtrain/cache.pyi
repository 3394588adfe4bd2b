# microtrain.cache: the frozen-prefix feature cache of Trainer.fit.
from typing import Literal

from microtrain._types import Samples
from microtrain.model import Model

BLOCK: int  # bytes per RAM block of records (4096)
FILE: str  # the file of fit(cache="auto") when RAM does not fit ("mt_cache.bin")

def boundary(model: Model, first: int) -> list[int]: ...
def record_size(model: Model, first: int) -> int: ...
def ram_budget() -> int: ...

class FeatureCache:
    model: Model
    first: int  # the first layer that runs after load()
    n: int  # samples
    path: str | None  # the file, or None in RAM
    record: int  # bytes per sample (label + boundary tensors)
    def __init__(self, model: Model, first: int, samples: Samples, path: str | None = None) -> None: ...
    @property
    def nbytes(self) -> int: ...
    def load(self, i: int) -> int: ...
    def close(self) -> None: ...

def make(model: Model, first: int, samples: Samples, epochs: int,
         spec: Literal["auto", "ram"] | str | bool | None = "auto",
         verbose: bool = False) -> FeatureCache | None: ...
