# microtrain.kern: kernel selection (native _microtrain, else the pure-Python kernels).
from collections.abc import Callable
from types import ModuleType
from typing import Any

import _microtrain as K  # noqa: F401 - the kernel module in use (this or pykernels)

NATIVE: bool  # True when _microtrain (natmod or firmware) is used

def py() -> ModuleType: ...
def f32(name: str) -> Callable[..., Any]: ...
