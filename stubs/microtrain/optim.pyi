# microtrain.optim: optimisers (fully quantised update); schedules in microtrain.schedule.
from collections.abc import Callable
from typing import Any

from microtrain._types import Float32
from microtrain.model import Layer, Model

def schedule(spec: str | Callable[[float, int, int], float] | None) -> Callable[[float, int, int], float]: ...

class _F32:
    """The float32 update primitives of _microtrain (docs/numerics.md, "Update"): native where
    the build has an FPU, else microtrain.pyk.update's (same bits)."""

    def __getattr__(self, name: str) -> Callable[..., Any]: ...

F: _F32

class Param:
    """One trained tensor of a layer as the update primitives take it."""

    g: Float32  # gradient sum; the direction is built in it
    k: int  # values per output channel (1 for the bias)
    touched: bytearray | None  # channels to update (None: all)
    q: Any  # int8 weights or int32 bias (real values without a master copy)
    scale: Float32  # per-channel weight scales
    f: float  # 1.0 for weights, s_in for the bias
    master: Float32 | None  # float32 master copy
    i: int  # 0 weights, 1 bias: index into the optimiser state
    def __init__(self, ly: Layer, bias: bool) -> None: ...

class _Optimizer:
    n_state: int  # state arrays per tensor (SGD momentum 1, Adam 2)
    half: bool  # state="bf16": 2 bytes a state value (bfloat16 bytearrays)
    lr: float  # the configured rate (a schedule's lr0), checked > 0
    rate: float  # the rate of the next update (set_rate; Trainer.lr)
    weight_decay: float
    standardize: bool
    rounding: str  # "auto", "nearest" or "stochastic"
    rng: int  # xorshift16 state of stochastic rounding
    steps: int  # updates applied (Adam's t)
    def __init__(self, lr: float, weight_decay: float, standardize: bool, rounding: str = "auto",
                 state: str = "f32") -> None: ...
    def state(self, ly: Layer) -> list[Any] | None:
        """The state arrays of layer ly (made on first use): SGD momentum [w, b], Adam [m_w, m_b,
        v_w, v_b]; None for plain SGD. array('f'), or bytearrays of bfloat16 with state="bf16"."""
    def state_tensors(self, ly: Layer, raw: bool = False) -> list[Any] | None:
        """What a checkpoint stores for ly (STATE slots 2 to 5): [w, b] SGD momentum or
        Adam's [m_w, m_b, v_w, v_b], float32 (a bfloat16 state widened); None when there is none."""
    def load_state(self, ly: Layer, w_state: Float32, b_state: Float32, v_w: Float32 | None = None,
                   v_b: Float32 | None = None) -> None:
        """Continue from a checkpoint's state for ly (used in place; ignored without momentum;
        without v_w, v_b (a file older than 1.3) Adam's second moments restart at zero)."""
    def resume_bias_correction(self, bits: tuple[int, int]) -> None:
        """Continue a checkpoint's bias correction (Adam: beta1^t, beta2^t as float32 bits)."""
    def prepare(self, p: Param, n: int) -> None:
        """The common start of a direction: g / n, standardised, plus weight decay."""
    def direction(self, p: Param, st: list[Any] | None, n: int) -> None:
        """Turn p.g (the sum of n samples' gradients) into the step direction, in place."""
    def begin(self, t: int) -> None:
        """Called once per step (t = the new step count) before any layer."""
    def set_rate(self, v: float, who: str = "lr") -> None:
        """Set `rate`: a finite number >= 0 (the one check of a rate)."""
    def step(self, layers: Model | list[Layer] | tuple[Layer, ...], n: int = 1,
             lr: float | None = None) -> None: ...
    def apply(self, layers: list[Layer] | tuple[Layer, ...], n: int, lr: float | None,
              upd: Any) -> None:
        """The update of `layers` from what the update mode holds (its step calls this)."""

class SGD(_Optimizer):
    momentum: float
    def __init__(self, lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0,
                 standardize: bool = False, rounding: str = "auto", state: str = "f32") -> None: ...

def make_master(ly: Layer) -> None: ...
def xorshift16_skip(r: int, n: int) -> int: ...
