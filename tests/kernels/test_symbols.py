"""Every global symbol the kernels define starts with ``mt_``.

Firmware links usermod/microtrain next to ESP-IDF, pico-sdk and other user C
modules; an unprefixed global (``topk_mask``, ``relu_s8_forward``) can collide
with theirs. Here ``nm`` reads the objects of the natmod build for every
supported arch (built by ``make natmod ARCH=...``, the same objects mpy_ld.py
links) and fails on any defined global other than the natmod entry point
``mpy_init`` (and, on the soft-float arches, the float ABI names softfloat.c
provides). tests/firmware/test_firmware.py applies the same rule to the firmware-mode
objects (host fwport build and the Cortex-M compiles).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from support.harness import KERNEL_DIR, ROOT
from support.symbols import ENTRY_POINTS, SOFTFLOAT_ABI, foreign_globals

NATMOD_ARCHS = ("x64", "armv6m", "armv7m", "armv7emsp", "armv7emdp")
# A soft-float natmod cannot link libgcc, so softfloat.c defines the float ABI names there
# (SOFTFLOAT_ABI); tests/firmware/test_firmware.py checks the firmware-mode objects.
SOFT_FLOAT_ARCHS = ("armv6m", "armv7m")


def test_check_catches_unprefixed_global(tmp_path: Path) -> None:
    """The nm scan itself sees a plain global function and a global table, and passes statics."""
    src = tmp_path / "t.c"
    src.write_text("const int table[2] = {1, 2};\nstatic int helper(int v) { return v + table[v & 1]; }\n"
                   "int foo(int v) { return helper(v); }\nint mt_ok(int v) { return foo(v); }\n")
    obj = tmp_path / "t.o"
    subprocess.run(["gcc", "-c", "-O1", "-o", str(obj), str(src)], check=True)
    assert sorted(foreign_globals([obj])) == ["t.o: foo", "t.o: table"]


@pytest.mark.parametrize("arch", NATMOD_ARCHS)
def test_natmod_globals_prefixed(arch: str) -> None:
    nm = "nm" if arch == "x64" else "arm-none-eabi-nm"
    assert shutil.which(nm), f"{nm} is not installed (tools/setup.sh installs it)"
    proc = subprocess.run(["make", "--no-print-directory", "natmod", f"ARCH={arch}"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    objdir = ROOT / "build" / "natmod" / arch / "obj"
    objs = sorted(objdir.glob("*.o"))
    # one object per C source: a stale or missing object would hide a symbol
    assert sorted(p.stem for p in objs) == sorted(p.stem for p in KERNEL_DIR.glob("*.c"))
    soft = arch in SOFT_FLOAT_ARCHS
    bad = foreign_globals(objs, nm, ENTRY_POINTS | SOFTFLOAT_ABI if soft else ENTRY_POINTS)
    assert not bad, f"{arch}: globals without the mt_ prefix: {bad}"
    # the allowed ABI names: all of them, and only from softfloat.o (else none at all)
    abi = foreign_globals(objs, nm, ENTRY_POINTS)
    assert sorted(abi) == sorted(f"softfloat.o: {n}" for n in (SOFTFLOAT_ABI if soft else ()))
