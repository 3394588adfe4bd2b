# microtrain.loss: softmax cross-entropy on int8 logits, argmax.
from array import array

from microtrain._types import Int8In
from microtrain.model import Model

def cross_entropy(model: Model, label: int, out: Int8In | None = None) -> tuple[float, array[int], float]:
    """(loss, err, err_scale): err is the model's reused int8 error buffer of the output."""

def argmax(out: Int8In) -> int: ...
