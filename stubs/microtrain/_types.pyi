# Buffer type aliases shared by the microtrain stubs (not a module of the package).
from array import array
from collections.abc import Callable
from typing import Any, Protocol, TypeAlias

from microtrain.model import Layer, Model

Int8In: TypeAlias = bytes | bytearray | memoryview | array[int]
"""An int8 tensor to read: bytes, bytearray, array('b') / array('B') or a memoryview of one."""
Int8Out: TypeAlias = bytearray | memoryview | array[int]
"""A writable 1-byte buffer."""
Int32: TypeAlias = array[int] | memoryview
"""array('i') or a memoryview of one (zero-copy views of the model file)."""
Float32: TypeAlias = array[float]
"""array('f')."""
Mask: TypeAlias = bytes | bytearray | memoryview | array[int]
"""One byte per output channel: 1 = keep (gradient + back-propagation), 0 = skip."""

TrainSpec: TypeAlias = str | int | list[str | int] | tuple[str | int, ...] | None
"""Which layers to train: "last:N", "all" (or None), a layer name or index, or a list of them."""

LossFn: TypeAlias = Callable[[Model, Any, Int8In], tuple[float, Any, float]]
"""A loss: (model, target, int8 output) -> (loss, int8 error of the output, its real scale)."""

class Policy(Protocol):
    """A sparse-update policy: DynamicSparse, StaticSparse or your own object with these two methods."""

    def observe(self, loss: float) -> float | None: ...
    def __call__(self, ly: Layer, e: Int8In) -> Mask | None: ...

class Samples(Protocol):
    """A sequence of (x, label) samples: a list, FileDataset, Subset, ..."""

    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> tuple[Int8In, int]: ...
