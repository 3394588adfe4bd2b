# microtrain.sparse: sparse-update policies (which output channels get a gradient).
from array import array

from microtrain._types import Int8In
from microtrain.model import Layer

class DynamicSparse:
    lambda_min: float
    lambda_max: float
    form: str  # "text" or "linear"
    max_loss: float
    rate: float
    kept: int  # channels kept / seen (for reports; reset them yourself)
    seen: int
    def __init__(self, lambda_min: float = 0.1, lambda_max: float = 1.0, form: str = "text") -> None: ...
    def observe(self, loss: float) -> float: ...
    def undo(self) -> None:
        """The state before the last observe() (a failed training step)."""
    def pool_norms(self, ly: Layer) -> array[int] | None:
        """(Model.backward) ly's int32 channel L1 norms for the max-pool backward over its output to
        fill, when this sample ranks ly's channels; else None."""
    def __call__(self, ly: Layer, e: Int8In) -> bytearray | None: ...

class StaticSparse:
    ratio: float | dict[str, float]
    kept: int
    seen: int
    def __init__(self, ratio: float | dict[str, float] = 0.5) -> None: ...
    def observe(self, loss: float) -> None: ...
    def undo(self) -> None:
        """The counters before the last observe() (a failed training step)."""
    def __call__(self, ly: Layer, e: Int8In) -> bytearray | None: ...
