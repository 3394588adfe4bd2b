"""Shared by the adapt-eval parts: the work folder, .mtd files, the device script."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from microtrain_tools import paths
from microtrain_tools.mtd import write_mtd

WORK = paths.ROOT / "build" / "adapt_eval"
SCRIPT = Path(__file__).resolve().parents[2] / "mp" / "adapt_device.py"


def mtd(name: str, xq: NDArray[np.int8], y: NDArray[np.integer]) -> Path:
    WORK.mkdir(parents=True, exist_ok=True)
    p = WORK / f"{name}.mtd"
    write_mtd(p, xq, y)
    return p


def device(cfg: dict[str, Any], tag: str, echo: bool = False, script: Path = SCRIPT,
           work: Path = WORK) -> dict[str, Any]:
    """Run `script` (evals/mp/adapt_device.py) with cfg in micropython (x64 natmod) in `work`;
    its RESULT dict."""
    work.mkdir(parents=True, exist_ok=True)
    cpath = work / f"{tag}.json"
    cpath.write_text(json.dumps(cfg))
    env = dict(os.environ)
    env["MICROPYPATH"] = f"{paths.natmod_dir('x64')}:{paths.PYTHON_LIB}"
    p = subprocess.run([paths.micropython(), str(script), str(cpath)], capture_output=True, text=True,
                       env=env, cwd=work, check=False)
    res = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
        elif echo:
            print(f"  [{tag}] {line}", flush=True)
    if p.returncode != 0 or res is None:
        raise RuntimeError(f"device run {tag} failed (exit {p.returncode}):\n{(p.stdout + p.stderr)[-2000:]}")
    return res
