# microtrain.plan: the memory plan of training (the training plan's buffers, those idle during
# backward, where backward's buffers go), used by Model.plan, Model.set_trained, memplan and the
# host's `microtrain info` (which runs this file under CPython).
from typing import Any

from microtrain.backward import BackwardPlan
from microtrain.model import Layer, Model

def kept(m: Model, first: int) -> set[int]:
    """The tensors a training plan keeping from `first` never frees."""
def forward_fit(m: Model, keep: set[int]) -> tuple[dict[int, int], list[int], list[bool]]:
    """(tensor -> buffer id, bytes per buffer id, holds a kept tensor) of a whole-buffer plan."""
# redo_plan's: (h, its pool, [(layer, scratch bytes)], first)
_Bwd = tuple[int, int, list[tuple[int, int]], int]

def buffers(m: Model, first: int, place: Any, bwd: _Bwd | None = None) -> tuple[list[int], list[int]]:
    """(bytes of each buffer of the training plan (the arena, the output's); the idle gaps'
    lengths), counted by place.py's place with stand-ins."""
def pack(m: Model, first: int, region: set[int], inplace: dict[int, Any], scratch: int, sizes: list[int],
         window: int = 0) -> tuple[list[tuple[int, int, int]], dict[int, tuple[int, int]]]:
    """Backward's buffers in the idle buffers of lengths sizes: (items, {item: (buffer, offset)})."""
def inplace_errors(m: Model, first: int, region: set[int], over: bool = True) -> dict[int, Layer]:
    """{t: its producer}: activations whose int8 error is written over the activation itself."""
def recompute_host(m: Model, first: int, inplace: dict[int, Layer], need: list[Layer], n: int,
                   native: bool = True, split: int = -1) -> tuple[int, int, int] | None:
    """(t, producer index, reader index) of an activation that can hold the scratch, made again."""
def redo_plan(m: Model, first: int, region: set[int], inplace: dict[int, Layer], place: Any,
              native: bool = True) -> _Bwd | None:
    """The plan placed through backward (place.py's bwd) where recompute makes that arena smaller."""
def scratch_plan(m: Model, first: int, region: set[int], inplace: dict[int, Layer],
                 native: bool = True) -> tuple[list[Layer], int, int | None]:
    """(layers using the int32 scratch, its values, the tensor whose error buffer holds it)."""
def backward_plan(m: Model, first: int, window: int, redo: bool | int) -> BackwardPlan:
    """Model.set_trained: backward's error buffers and int32 scratch placed (the device only)."""
def idle(m: Model, first: int) -> list[Any]:
    """The gaps of the training plan's arena between its kept tensors (idle during backward)."""
