# microtrain.pyk: the pure-Python kernels, one module per C file of usermod/microtrain
# (conv2d, linear, activation, pool, add, softmax_xent, sparse, quant, accumulate,
# mtm_loader; checks holds the argument checks). Used through microtrain.kern.
from collections.abc import Callable
from typing import Any

HAS_FLOAT: bool  # True: the float32 kernels are always there
WHERE: dict[str, str]  # kernel name -> module of this package

def kernel(name: str) -> Callable[..., Any]:
    """The pure-Python kernel `name` (imports only the module that holds it)."""
