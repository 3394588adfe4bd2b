# microtrain.kern: kernel selection, per function (native _microtrain, else microtrain.pyk).
from collections.abc import Callable
from typing import Any

import _microtrain as K  # noqa: F401 - the native module, or a stand-in taking each kernel from microtrain.pyk

PURE: bool  # MICROTRAIN_PURE=1 was set (os.getenv): the pure-Python kernels even with _microtrain present
NATIVE: bool  # True when _microtrain (natmod or firmware) is used
NATIVE_ERROR: str | None  # why a _microtrain that is there was refused (ValueError), else None
FAST_FLOAT: bool  # the float32 kernels run on an FPU (native, not software float)

def py(name: str) -> Callable[..., Any]:
    """The pure-Python kernel `name` (imports only the microtrain.pyk module holding it)."""
def f32(name: str) -> Callable[..., Any]:
    """A float32 kernel: native where the build has an FPU (HAS_FLOAT), else the pure-Python one."""
def release(mod: str) -> None:
    """Forget the pure-Python kernel module microtrain.pyk.`mod` (no-op with native kernels)."""

def forget(name: str) -> None:
    """Drop the package's submodule microtrain.`name` so the GC can free its code."""
