"""The instruction-counting QEMU plugin (evals/benchmarks/qemu_plugin) counts exactly and repeatably.

A bare-metal Cortex-M7 image runs a loop of known length between two marker
calls (check_plugin.py asserts mt_loop's count is exactly 2N + 2, the difference
between N=1000 and N=3000 builds is exactly 4000, and two runs give the same
output byte for byte); here also: the plugin rejects a malformed map.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = ROOT / "evals" / "benchmarks" / "qemu_plugin"
BUILD = ROOT / "build" / "qemu-plugin"



@pytest.fixture(scope="module", autouse=True)
def _toolchain() -> None:
    """make setup installs both: a missing one is a broken setup, not a reason to skip."""
    for tool in ("qemu-system-arm", "arm-none-eabi-gcc", "qemu-system-riscv32", "riscv64-unknown-elf-gcc"):
        assert shutil.which(tool), f"{tool} missing: run `make setup` (tools/setup.sh installs it)"


def test_plugin_counts_a_known_loop_exactly() -> None:
    p = subprocess.run(["make", "-s", "-C", str(PLUGIN_DIR), "check", f"PY={sys.executable}"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "mt_loop 2002 (= 2N+2)" in p.stdout
    assert "mt_loop 6002 (= 2N+2)" in p.stdout
    assert "plugin check arm: ok" in p.stdout and "plugin check rv32: ok" in p.stdout


def test_plugin_rejects_overlapping_ranges(tmp_path: Path) -> None:
    subprocess.run(["make", "-s", "-C", str(PLUGIN_DIR), "all", f"BUILD={BUILD}"], check=True, timeout=120)
    bad = tmp_path / "bad.map"
    bad.write_text("0 100 0\n80 200 1\n")
    elf = BUILD / "loop1000.elf"
    if not elf.exists():
        subprocess.run(["make", "-s", "-C", str(PLUGIN_DIR), str(elf), f"BUILD={BUILD}"], check=True,
                       timeout=120)
    p = subprocess.run(["qemu-system-arm", "-M", "mps2-an500", "-nographic", "-semihosting",
                        "-kernel", str(elf), "-plugin", f"{BUILD / 'mtcount.so'},map={bad}", "-d", "plugin"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "overlapping ranges" in p.stderr + p.stdout
