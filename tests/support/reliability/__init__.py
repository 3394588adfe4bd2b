"""The reliability campaigns (``make reliability`` runs the long versions, the
tests in tests/reliability/ short ones): libFuzzer on the loader and the kernels, abusive
calls to the native module and the pure-Python kernels, kill -9 during checkpoint saves, a
small-heap sweep, a soak, bad inputs, and the from-scratch training case.

Each module is one campaign with a ``run(...)`` returning its counts; ``__main__`` prints
the summary line. Everything MicroPython runs lives in tests/mp/rel_*.py.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from support.harness import MICROPYTHON, NATMOD_X64, PYTHON_LIB, ROOT

BUILD = ROOT / "build" / "reliability"
MP_DIR = ROOT / "tests" / "mp"


def workdir(name: str) -> Path:
    """A directory of its own for one campaign run (runs may go on side by side)."""
    d = BUILD / f"{name}-{os.getpid()}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def mp_env(pure: bool = False) -> dict[str, str]:
    """MICROPYPATH: the natmod (unless pure) and the device package."""
    path = str(PYTHON_LIB) if pure else f"{NATMOD_X64}:{PYTHON_LIB}"
    return dict(os.environ, MICROPYPATH=path)


def run_mp(script: str, args: Sequence[str], heapsize: str = "16M", timeout: float = 3600.0,
           cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run tests/mp/<script> in the real micropython (never raises on a non-zero exit)."""
    return subprocess.run([str(MICROPYTHON), "-X", f"heapsize={heapsize}", str(MP_DIR / script), *args],
                          capture_output=True, text=True, timeout=timeout, env=mp_env(), cwd=cwd, check=False)
