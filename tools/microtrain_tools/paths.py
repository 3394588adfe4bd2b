"""Where things are: the one place that knows the repository layout.

The host tools run from a checkout (``pip install -e .``, as ``make setup``
does); commands that need the device package, the native modules or the
MicroPython binary find them here. ``MICROTRAIN_MICROPYTHON`` names another
MicroPython binary (for example a firmware build with ``_microtrain`` built
in); every tool and test that runs MicroPython uses :func:`micropython`.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

__all__ = ["ROOT", "BUILD", "NATMOD", "PYTHON_LIB", "MPY_DIR", "micropython", "natmod_dir", "require_root"]


def _find_root() -> Path:
    # tools/microtrain_tools/paths.py -> the checkout holding python_lib/ and usermod/
    for parent in Path(__file__).resolve().parents:
        if (parent / "python_lib" / "microtrain").is_dir() and (parent / "usermod").is_dir():
            return parent
    return Path.cwd()


ROOT = _find_root()
BUILD = ROOT / "build"
NATMOD = BUILD / "natmod"
PYTHON_LIB = ROOT / "python_lib"
MPY_DIR = BUILD / "mpy_cross_v6_3-1.1.1" / "micropython"  # MicroPython core unpacked by `make setup`


def require_root() -> Path:
    """The checkout, or a clear error when the tools run outside one."""
    if not (ROOT / "python_lib" / "microtrain").is_dir():
        raise FileNotFoundError(
            f"microtrain checkout not found (looked above {Path(__file__).resolve().parent}): "
            "install the host tools from a clone with `make setup` or `pip install -e .`")
    return ROOT


def micropython() -> str:
    """The MicroPython binary to run: ``$MICROTRAIN_MICROPYTHON``, else the venv's unix port, else PATH."""
    env = os.environ.get("MICROTRAIN_MICROPYTHON")
    if env:
        found = env if Path(env).is_file() else shutil.which(env)
        if not found:
            raise FileNotFoundError(f"MICROTRAIN_MICROPYTHON={env}: no such file")
        return str(Path(found).resolve())
    for cand in (Path(sys.executable).parent / "micropython", ROOT / ".venv" / "bin" / "micropython"):
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    found = shutil.which("micropython")
    if not found:
        raise FileNotFoundError("micropython not found next to this Python, in .venv or on PATH "
                                "(run `make setup`, or set MICROTRAIN_MICROPYTHON)")
    return found


def natmod_dir(arch: str = "x64") -> Path:
    """Folder holding the built ``_microtrain.mpy`` for ``arch`` (``make natmod ARCH=...``)."""
    return NATMOD / arch
