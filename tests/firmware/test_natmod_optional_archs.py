"""`make natmod ARCH=xtensawin|rv32imc`: where the toolchain (xtensa-esp32-elf-gcc) or a MicroPython
core with rv32imc natmod support is present it builds a natmod whose header carries the arch;
where not, it stops before compiling anything, with one plain message saying what is missing."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from microtrain_tools import dist
from support.harness import ROOT

MPY_DIR = ROOT / "build" / "mpy_cross_v6_3-1.1.1" / "micropython"


def _has(arch: str) -> bool:
    if arch == "xtensawin":
        return shutil.which("xtensa-esp32-elf-gcc") is not None
    return "rv32imc" in (MPY_DIR / "py" / "dynruntime.mk").read_text()


@pytest.mark.parametrize(("arch", "needle"), [("xtensawin", "xtensa-esp32-elf-gcc is not on PATH"),
                                              ("rv32imc", "rv32imc")])
def test_optional_arch_builds_or_says_what_is_missing(arch: str, needle: str) -> None:
    out = ROOT / "build" / "natmod" / arch / "_microtrain.mpy"
    p = subprocess.run(["make", "-C", str(ROOT), "--no-print-directory", "natmod", f"ARCH={arch}"],
                       capture_output=True, text=True, timeout=600, check=False)
    if _has(arch):
        assert p.returncode == 0, p.stdout + p.stderr
        dist.check_header(out, arch, native=True)
        return
    assert p.returncode != 0
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("natmod") and f"ARCH={arch}" in ln]
    assert len(lines) == 1 and needle in lines[0], p.stderr
    assert "docs/firmware.md" in lines[0] and (arch == "xtensawin" or "MPY_DIR" in lines[0])
    # nothing compiled: the check runs before the build
    assert not (ROOT / "build" / "natmod" / arch / "obj").exists() and not out.exists()
    assert "natmod-all: ok" not in p.stdout
    # the make rule names the same tool the doc's recipe does
    doc = (ROOT / "docs" / "firmware.md").read_text()
    assert ("xtensa-esp32-elf-gcc" if arch == "xtensawin" else "rv32imc") in doc
