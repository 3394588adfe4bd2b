# microtrain.backward: Model.backward's pass, one function per op (BACKWARD, next to
# Model._step's forward kernels), and the plan of backward's buffers (Model.set_trained).
# Loaded by the first set_trained. Also the update modes Sums and IntoMomentum (Model.update;
# stepwise.StepInBackward is the third).
from collections.abc import Callable
from typing import Any

from microtrain._types import Float32, Int8Out, Policy
from microtrain.model import Layer, Model
from microtrain.optim import Param, _Optimizer

class BackwardPlan:
    """The buffers of backward (set_trained): error buffers per tensor, the int32 scratch views,
    the activations taking their own error, the gradient window, the update row."""

    first: int  # the first trained layer
    region: set[int]  # the tensors whose error is propagated
    bufs: dict[int, Any]  # the forward buffers kept for backward
    ebuf: dict[int, Any]  # each tensor's int8 error buffer
    esecond: dict[int, Any]  # a tensor read by two layers: the second error to arrive
    emerge: dict[int, Any]  # ... and the two merged
    acc_views: dict[int, Any]  # layer index -> its view of the int32 grad-input scratch
    inplace: dict[int, Layer]  # activations whose error is written over them -> their producer
    window: memoryview | None  # the float32 gradient window's bytes (StepInBackward; IntoMomentum's copy)
    frow: Any  # the scratch as float32: the optimiser's update row (or None)
    redo: tuple[int, int] | None  # (pool index, producer index): the forward run again there
    grad_weight: tuple[Callable[..., None], Callable[..., None]]  # float32 grad-weight kernels [conv]
    def __init__(self, first: int, region: set[int], bufs: dict[int, Any], ebuf: dict[int, Any],
                 esecond: dict[int, Any], emerge: dict[int, Any], acc_views: dict[int, Any],
                 inplace: dict[int, Layer], window: memoryview | None, frow: Any,
                 redo: tuple[int, int] | None) -> None: ...

def act_keep(ly: Layer) -> tuple[int, int]:
    """(lo, hi): the outputs whose error ly's fused activation keeps, lo < y < hi."""

def run(m: Model, err: Int8Out, err_scale: float, policy: Policy | None) -> None:
    """Model.backward's pass."""

_OpBackward = Callable[[Model, BackwardPlan, dict[int, Any], dict[int, float], Layer, int, Any, float,
                        Any], None]

def conv2d(m: Model, bw: BackwardPlan, cur: dict[int, Any], scale: dict[int, float], ly: Layer, j: int,
           e: Any, s: float, policy: Any) -> None: ...
linear: _OpBackward  # conv2d's
def lut(m: Model, bw: BackwardPlan, cur: dict[int, Any], scale: dict[int, float], ly: Layer, j: int,
        e: Any, s: float, policy: Any) -> None: ...
def relu(m: Model, bw: BackwardPlan, cur: dict[int, Any], scale: dict[int, float], ly: Layer, j: int,
         e: Any, s: float, policy: Any) -> None: ...
relu6: _OpBackward  # relu's
def maxpool(m: Model, bw: BackwardPlan, cur: dict[int, Any], scale: dict[int, float], ly: Layer, j: int,
            e: Any, s: float, policy: Any) -> None: ...
def avgpool(m: Model, bw: BackwardPlan, cur: dict[int, Any], scale: dict[int, float], ly: Layer, j: int,
            e: Any, s: float, policy: Any) -> None: ...
def global_avgpool(m: Model, bw: BackwardPlan, cur: dict[int, Any], scale: dict[int, float], ly: Layer,
                   j: int, e: Any, s: float, policy: Any) -> None: ...
def add(m: Model, bw: BackwardPlan, cur: dict[int, Any], scale: dict[int, float], ly: Layer, j: int,
        e: Any, s: float, policy: Any) -> None: ...
def concat(m: Model, bw: BackwardPlan, cur: dict[int, Any], scale: dict[int, float], ly: Layer, j: int,
           e: Any, s: float, policy: Any) -> None: ...
def upsample(m: Model, bw: BackwardPlan, cur: dict[int, Any], scale: dict[int, float], ly: Layer, j: int,
             e: Any, s: float, policy: Any) -> None: ...
def mul(m: Model, bw: BackwardPlan, cur: dict[int, Any], scale: dict[int, float], ly: Layer, j: int,
        e: Any, s: float, policy: Any) -> None: ...
def layernorm(m: Model, bw: BackwardPlan, cur: dict[int, Any], scale: dict[int, float], ly: Layer, j: int,
              e: Any, s: float, policy: Any) -> None: ...
def softmax(m: Model, bw: BackwardPlan, cur: dict[int, Any], scale: dict[int, float], ly: Layer, j: int,
            e: Any, s: float, policy: Any) -> None: ...
def matmul(m: Model, bw: BackwardPlan, cur: dict[int, Any], scale: dict[int, float], ly: Layer, j: int,
           e: Any, s: float, policy: Any) -> None: ...

BACKWARD: list[_OpBackward | None]  # indexed by op code: its backward

class Sums:
    """Update mode (Model.update), the default: float32 gradient sums per trained layer."""

    late: bool
    views: dict[int, tuple[Param, Param, float, float]]
    def __init__(self) -> None: ...
    def grad(self, ly: Layer, gwk: Callable[..., None], p: Any, x: Any, e: Any, mask: Any, sw: float,
             s: float) -> None: ...
    def step(self, opt: _Optimizer, layers: list[Layer], n: int, lr: float | None) -> None: ...
    def row(self, ly: Layer, n: int) -> int: ...
    def apply(self, opt: _Optimizer, ly: Layer, n: int, lr: float, r: int, row: Float32) -> int: ...
    def failed(self, opt: _Optimizer, layers: list[Layer], fresh: bool) -> None: ...
    def forget(self, ly: Layer) -> None: ...
    def release(self) -> None: ...

class IntoMomentum:
    """Update mode of SGD momentum without gradient sums: gw / gb are the momentum."""

    late: bool
    m: float  # the momentum
    n: int  # the batch: each gradient enters the momentum / n
    limit: float  # the gradient-scale bound that keeps the momentum finite
    low: float  # -limit
    layers: list[Layer]
    folded: set[int]  # layers whose momentum is scaled since the last update
    copy: dict[int, tuple[memoryview, memoryview]] | None  # layer index -> the copy of its momentum
    def __init__(self, momentum: float, batch: int, layers: list[Layer], opt: _Optimizer,
                 raw: memoryview | None, copy: bool) -> None: ...
    def grad(self, ly: Layer, gwk: Callable[..., None], p: Any, x: Any, e: Any, mask: Any, sw: float,
             s: float) -> None: ...
    def step(self, opt: _Optimizer, layers: list[Layer], n: int, lr: float | None) -> None: ...
    def row(self, ly: Layer, n: int) -> int: ...
    def apply(self, opt: _Optimizer, ly: Layer, n: int, lr: float, r: int, row: Float32) -> int: ...
    def failed(self, opt: _Optimizer, layers: list[Layer], fresh: bool) -> None: ...
    def forget(self, ly: Layer) -> None: ...
    def release(self) -> None: ...
