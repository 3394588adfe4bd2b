# microtrain.model: the loaded .mtm model, its forward and backward passes.
from array import array
from collections.abc import Callable
from typing import Any

from microtrain._types import Float32, Int8In, Int8Out, Int32, Mask, Policy, TrainSpec
from microtrain.backward import BackwardPlan, IntoMomentum, Sums
from microtrain.lora import LoRA
from microtrain.stepwise import StepInBackward
from microtrain.trainer import Trainer

# The format constants (OP_*, DT_*, KIND_*, FLAG_*, OP_NAMES, ...) live in microtrain.fmt;
# model.py imports the ones it uses.

class Tensor:
    """One tensor of the file (docs/format.md, tensor table)."""

    index: int
    dtype: int  # 1 int8, 2 int32, 3 float32, 4 uint8
    kind: int  # 0 activation, 1 const, 2 state
    quant: int  # 0 none, 1 per-tensor, 2 per-channel, 3 bias
    flags: int  # bit 0: 1-D signal
    shape: tuple[int, ...]  # NHWC without the batch dimension
    data_off: int
    data_len: int
    scale: float  # activations: real = scale * (q - zero_point); else 0.0
    zero_point: int
    qscales: int  # per-channel weights: index of the float32 scales tensor, else -1
    numel: int
    data: memoryview | array[Any] | None
    """CONST / STATE values: int8 and int32 are zero-copy views of the model bytes
    (int32 copied when loaded from a bytes object), float32 are copies; a trained
    layer's tensors are replaced by its private mutable copies. None for activations."""

    def __init__(self, index: int, row: Int32, scale: float) -> None: ...

class Layer:
    """One layer of the model. ``op`` is the op code (int), ``kind`` its name."""

    model: Model
    index: int
    op: int  # OP_CONV2D .. OP_ADD
    act: int  # fused activation: 0 none, 1 relu, 2 relu6
    flags: int  # bit 0: TRAINED in the file
    name: str
    fused: str  # comma-separated source modules folded into this layer
    inputs: tuple[int, ...]  # input tensor indices (two for add)
    output: int  # output tensor index
    state_t: tuple[int, int, int, int]  # checkpoint state tensors (-1 = none)
    params: Int32  # the kernel descriptor (zero-copy view)
    trained: bool
    modified: bool  # parameters were updated on the device (TRAINED flag when saved)
    grad: tuple[Float32, Float32] | None  # (gw, gb) once trainable
    w: Int8In | None  # int8 weights, OHWI / (out, in)
    b: Int32 | None  # int32 bias
    mult: Int32 | None  # requantisation multipliers (Q31), one per output channel
    shift: Int32 | None  # requantisation shifts
    w_scale: Float32 | None  # per-output-channel weight scales
    table: Int8In | None  # lut layers: the 256-entry forward table (index x + 128)
    dtable: Int32 | None  # lut layers: the 256-entry derivative table (numerics.md)
    gw: Float32 | None  # float32 gradient sums of the pending batch
    gb: Float32 | None
    master_w: Float32 | None  # float32 master copies (modes "mixed" / "float32")
    master_b: Float32 | None
    touched: bytearray | None  # sparse training: channels with a gradient since the last update
    wr: Int32 | None  # grad-input weight ratios (internal)
    ein_r: int | None  # internal: R of the grad-input scale (None until refresh_ratios)
    def __init__(self, model: Model, index: int, row: Int32) -> None: ...
    @property
    def ein_top(self) -> float:
        """internal: max weight scale (made on first use after an update)."""
    @property
    def kind(self) -> str: ...
    @property
    def n_params(self) -> int: ...
    @property
    def out_c(self) -> int: ...
    @property
    def in_scale(self) -> float: ...
    @property
    def out_scale(self) -> float: ...
    def make_trainable(self, sums: bool = True) -> None: ...
    def tensor_ids(self) -> tuple[int, int, int, int]:
        """(weight, bias, mult, shift) tensor indices, -1 where none (read from the layer table)."""
    def refresh_ratios(self) -> None: ...
    def touch(self, mask: Mask) -> None:
        """Sparse training: mark mask's channels as having a gradient since the last update."""
    def rewire(self, params: Int32, shift: Int32, output: int, act: int) -> None:
        """Another descriptor, shifts, output tensor and fused activation (LoRA)."""

class Model:
    """A loaded, validated .mtm model (see ``load``)."""

    flags: int  # header flags: bit 0 TRAINED (a checkpoint), bit 1 HAS_STATE
    train_steps: int  # optimiser updates recorded in the file (+ those of a Trainer since)
    size: int  # file size in bytes
    tensors: list[Tensor | None]  # None: a layer's constant (the layer holds its data; tensor(i))
    layers: list[Layer]
    input: Tensor
    output: Tensor
    trained_layers: list[Layer]  # set by set_trained (AttributeError before)
    buf: Int8In  # the whole model file (validated), used in place
    update: Sums | IntoMomentum | StepInBackward | None  # the update mode (set_trained, Trainer)
    backward_plan: BackwardPlan | None  # the buffers backward uses (set_trained)
    lora: LoRA | None  # the attached adapters
    ce_bufs: tuple[array[int], array[int]] | None  # cross_entropy's (err, stats)
    loss_bufs: tuple[array[int], array[int]] | None  # mse / bce's (err, int32 scratch)
    last_out: Any  # the output buffer of the last forward
    def __init__(self, buf: Int8In, words: array[int] | None) -> None: ...
    def layer(self, name: str) -> Layer: ...
    def tensor(self, i: int) -> Tensor: ...
    def select(self, spec: TrainSpec) -> list[int]: ...
    def forward(self, x: Int8In, keep_from: int | None = None, start: int = 0) -> array[int]: ...
    def activation(self, t: int, keep_from: int | None = None) -> array[int]: ...
    def predict(self, x: Int8In) -> int: ...
    def quantize_input(self, values: Any, out: Int8Out | None = None) -> bytearray: ...
    def dequantize_output(self, q: Int8In | None = None) -> list[float]: ...
    def set_trained(self, spec: TrainSpec, sums: bool = True, window: int = 0,
                    redo: bool | int = False) -> list[Layer]: ...
    def plan(self, keep_from: int | None) -> tuple[dict[int, Any], list[Any]]:
        """The forward plan keeping from keep_from (made on first use): (buffers, steps)."""
    def owners(self, keep_from: int | None) -> dict[int, Any]: ...
    def has_plan(self, keep_from: int | None) -> bool: ...
    def forget_plans(self) -> None: ...
    def drop_plans(self, keep: int | None) -> None: ...
    def rebind(self) -> None:
        """Rebuild the forward call tables after a layer's parameter arrays were replaced
        (make_trainable; the optimisers call it after each update)."""
    def backward(self, err: Int8Out, err_scale: float,
                 policy: Policy | Callable[[Layer, Int8In], Mask | None] | None = None) -> None: ...
    def lut(self) -> array[int]: ...
    def ram(self, keep_from: int | None = None) -> int: ...
    def summary(self) -> None: ...
    def save(self, path: str, trainer: Trainer | None = None) -> None: ...

def load(src: str | bytes | bytearray | memoryview) -> Model:
    """Load and validate a .mtm model from a path or a bytes-like object (docs/api.md);
    a memoryview (e.g. over flash or ROMFS) is used in place like bytes."""
