"""The mt_ prefix rule for the module's C symbols (every defined global starts with mt_)."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["ENTRY_POINTS", "foreign_globals"]

ENTRY_POINTS = {"mpy_init"}  # the natmod's entry point; firmware mode has none (mt_user_cmodule)


def foreign_globals(objs: list[Path], nm: str = "nm", allowed: set[str] = ENTRY_POINTS) -> list[str]:
    """'object: symbol' for each defined global symbol that lacks the mt_ prefix."""
    assert objs, "no objects to check"
    proc = subprocess.run([nm, "-g", "--defined-only", "--print-file-name", *map(str, objs)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    bad = []
    for line in proc.stdout.splitlines():  # "<object>:<value> <type> <name>"
        obj, _, rest = line.rpartition(".o:")
        name = rest.split()[-1]
        if not name.startswith("mt_") and name not in allowed:
            bad.append(f"{Path(obj).name}.o: {name}")
    return bad
