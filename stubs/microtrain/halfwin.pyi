# microtrain.halfwin: backward.IntoMomentum's float32 window over a bfloat16 momentum (Trainer
# sums=False with SGD(state='bf16')), apart from stepwise so that this mode loads only it.
from collections.abc import Callable
from typing import Any

from microtrain.model import Layer
from microtrain.optim import SGD

HALF_WINDOW: int  # floats of HalfWindow's window

def floats(layers: list[Layer], window: int) -> int: ...
def half_floats(layers: list[Layer]) -> int: ...

class HalfWindow:
    """backward.IntoMomentum's float32 window over a bfloat16 momentum (Trainer sums=False with
    SGD(state='bf16')): a few output channels' rows at a time."""

    opt: SGD  # its state(ly) is v
    a: float  # the next fold's decay
    tiles: dict[int, tuple[int, bytearray | None]]  # layer index -> (channels per window, window mask)
    raw: memoryview | None  # the window's bytes when it lives in idle forward buffers
    gw: Any  # array('f') or a retyped view: the window's weight rows
    gb: Any
    zero: memoryview
    zf: memoryview
    ones: memoryview
    def __init__(self, layers: list[Layer], raw: memoryview | None, opt: SGD,
                 window: int = HALF_WINDOW) -> None: ...
    def __call__(self, ly: Layer, gwk: Callable[..., None], p: Any, x: Any, e: Any, mask: Any, sw: float,
                 s: float) -> None: ...
    def step(self, ly: Layer, a: float, t: bytearray | None, lr: float, r: int, row: Any) -> int: ...
