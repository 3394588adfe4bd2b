"""The mt_ prefix rule for the module's C symbols (every defined global starts with mt_)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

__all__ = ["ENTRY_POINTS", "SOFTFLOAT_ABI", "foreign_globals", "softfloat_abi_routines"]

ENTRY_POINTS = {"mpy_init"}  # the natmod's entry point; firmware mode has none (mt_user_cmodule)
# The run-time ABI names gcc calls for float arithmetic where there is no FPU (armv6m, armv7m).
# softfloat.c defines exactly these there, natmod (which cannot link libgcc) and firmware alike
# (usermod/microtrain/mt_quant.h); in firmware as weak symbols (softfloat.c says why).
SOFTFLOAT_ABI = {"__aeabi_fadd", "__aeabi_fsub", "__aeabi_fmul", "__aeabi_fdiv", "__aeabi_i2f",
                 "__aeabi_ui2f", "__aeabi_f2iz", "__aeabi_f2uiz", "__aeabi_fcmpeq", "__aeabi_fcmplt",
                 "__aeabi_fcmple", "__aeabi_fcmpgt", "__aeabi_fcmpge", "__aeabi_fcmpun"}


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


def softfloat_abi_routines(kernel_dir: Path) -> dict[str, str]:
    """ABI name -> the softfloat.c routine (mt_ name) that serves it, from mt_softfloat.h."""
    header = (kernel_dir / "mt_softfloat.h").read_text()
    pairs = re.findall(r"#define (mt_f32_\w+) MT_SF_NAME\(\1, (__aeabi_\w+)\)", header)
    return {abi: mt for mt, abi in pairs}
