# microtrain.stepwise: the update mode of batch-1 plain SGD, each trained layer steps during
# backward (Trainer; the interface of update modes: microtrain.optim).
from collections.abc import Callable
from typing import Any

from microtrain.model import Layer
from microtrain.optim import SGD, _Optimizer

WINDOW: int

def floats(layers: list[Layer], window: int = WINDOW) -> int: ...

class StepInBackward:
    """Steps trained layers when backward is through, a window of output channels at a time."""

    late: bool  # True: grad runs after the layer's grad input
    opt: SGD
    sparse: bool
    info: dict[int, tuple[int, bytearray | None, bool, list[int] | None]]
    total: list[int] | None
    gw: Any  # array('f') or a retyped view: the gradient window
    raw: memoryview | None  # its bytes when it lives in idle forward buffers (zeroed per step)
    gb: Any
    row: Any
    zero: bytes
    ones: bytes
    r: int | None
    done: list[Layer]
    now: bool  # step right after each grad input (recompute: an error's bytes may be reused)
    slots: list[list[Any]]  # the deferred steps' arguments, one per trained layer
    n_slots: int  # deferred steps pending
    def __init__(self, opt: SGD, layers: list[Layer], sparse: Any, window: int = WINDOW,
                 raw: memoryview | None = None) -> None: ...
    def grad(self, ly: Layer, gwk: Callable[..., None] | None, p: Any, x: Any, e: Any, mask: Any, sw: float,
             s: float) -> None: ...
    def after_backward(self) -> None: ...
    def apply_grad(self, ly: Layer, gwk: Callable[..., None] | None, p: Any, x: Any, e: Any, mask: Any,
                   sw: float, s: float) -> None: ...
    def step(self, opt: _Optimizer, layers: list[Layer], n: int, lr: float | None) -> None: ...
    def failed(self, opt: _Optimizer, layers: list[Layer], fresh: bool) -> None: ...
    def forget(self, ly: Layer) -> None: ...
    def release(self) -> None: ...
    def end(self, layers: list[Layer]) -> None: ...
    def abandon(self) -> None: ...
