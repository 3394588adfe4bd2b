# microtrain.loss: the losses of the int8 output (softmax cross-entropy, mean squared error,
# binary cross-entropy with logits), each -> (loss, err, err_scale) for Model.backward; argmax.
from array import array
from collections.abc import Sequence

from microtrain._types import Int8In, LossFn
from microtrain.model import Model

LOSSES: dict[str, LossFn]  # "xent", "mse", "bce"

def cross_entropy(model: Model, label: int, out: Int8In | None = None) -> tuple[float, array[int], float]:
    """(loss, err, err_scale): err is the model's reused int8 error buffer of the output."""

def mse(model: Model, target: Sequence[float] | Int8In, out: Int8In | None = None
        ) -> tuple[float, array[int], float]:
    """Mean squared error against real targets (or int8 targets in the output's quantisation)."""

def bce(model: Model, target: Sequence[float] | Int8In, out: Int8In | None = None
        ) -> tuple[float, array[int], float]:
    """Binary cross-entropy of the output logits against targets in 0..1 (mean over outputs)."""

def loss_buffers(model: Model, n: int) -> tuple[array[int], array[int]]:
    """The model's reused (int8 error, int32 scratch) buffers of n values for a loss."""

def pot_requant(d: Sequence[float], n: int, err: array[int]) -> int:
    """Real errors -> int8 err with the unit 2^k (k returned), rounded half away from zero."""

def argmax(out: Int8In) -> int: ...
