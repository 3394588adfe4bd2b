"""The natmod a deployment needs: only the op families of its models.

A board reads the whole ``_microtrain.mpy`` into its heap, so a natmod built with
``make natmod ARCH=<arch> OPS=<ops>`` (kernelspec.py's op families and profiles) leaves a
small board more heap. ``--ops`` of ``microtrain deploy`` / ``microtrain run`` and the
benchmarks name the set as families, profiles (``core``, ``all``) or ``.mtm`` files (their
layers' ops), comma-separated; the build lands in ``build/natmod/<arch>-<tag>/``
(``build/natmod/<arch>/`` for every op).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from microtrain_tools import mtm, paths
from microtrain_tools.kernelspec import OPS, ops_tag, parse_ops

NAME = "_microtrain.mpy"


def model_ops(path: str | Path) -> tuple[str, ...]:
    """The op families the layers of the .mtm at ``path`` run on (ValueError: not a model)."""
    m = mtm.load(str(path))
    return parse_ops(",".join(sorted({mtm.Op(ly.op).name.lower() for ly in m.layers})))


def resolve(spec: str) -> tuple[str, ...]:
    """The op families of ``spec``: families, profiles and .mtm files, comma-separated."""
    words = [w.strip() for w in spec.split(",") if w.strip()]
    ops: set[str] = set()
    for w in words:
        ops.update(model_ops(w) if w.endswith(".mtm") else parse_ops(w))
    return tuple(o for o in OPS if o in ops)


def folder(arch: str, ops: tuple[str, ...]) -> str:
    """The natmod's folder under build/natmod/ (make natmod's naming)."""
    return arch if set(ops) == set(OPS) else f"{arch}-{ops_tag(ops)}"


def build(arch: str, ops: tuple[str, ...]) -> Path:
    """``make natmod ARCH=arch OPS=...`` (a no-op when current); the .mpy's path. ValueError
    with make's last line when it fails."""
    out = paths.NATMOD / folder(arch, ops) / NAME
    tag = "all" if set(ops) == set(OPS) else ops_tag(ops)
    proc = subprocess.run(["make", "-C", str(paths.ROOT), "--no-print-directory", "natmod", f"ARCH={arch}",
                           f"OPS={tag}"], capture_output=True, text=True, check=False)
    if proc.returncode or not out.is_file():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        raise ValueError(f"make natmod ARCH={arch} OPS={tag} failed: {tail[0]}")
    return out
