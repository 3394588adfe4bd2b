"""The bench-mcu instruction counter on the real M7 and RV32IMC firmware: regions of known kind
are attributed right (native code, the natmod on M7 or the built-in module on rv32, vs the
MicroPython interpreter), native counts scale with the work, and two runs give the same count
at every marker."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from support.harness import ROOT


@pytest.fixture(scope="module", autouse=True)
def _toolchain() -> None:
    """make setup installs both: a missing one is a broken setup, not a reason to skip."""
    for tool in ("qemu-system-arm", "arm-none-eabi-gcc", "qemu-system-riscv32", "riscv64-unknown-elf-gcc"):
        assert shutil.which(tool), f"{tool} missing: run `make setup` (tools/setup.sh installs it)"


@pytest.mark.parametrize("name", ["m7", "rv32"])
def test_attribution_and_repeatability(name: str) -> None:
    from evals.benchmarks import bench_mcu as bm

    if name == "m7":
        subprocess.run(["make", "-s", "-C", str(ROOT), "natmod", "ARCH=armv7emdp"], check=True, timeout=600)
    subprocess.run(["make", "-s", "-C", str(bm.PLUGIN_DIR), "all"], check=True, timeout=120)
    qr = bm._qemu_run()
    qr.build(name)  # type: ignore[attr-defined]
    board = bm.boards()[name]
    fmap = bm.firmware_map(board.firmware, bm.BUILD / f"{name}-selftest.map")
    runs = [bm.run_guest(board, fmap, "bench_selftest.py", [], heap_kb=256) for _ in range(2)]
    assert runs[0].counts == runs[1].counts and runs[0].total == runs[1].total
    reg = bm.regions(runs[0])
    interp, native = bm.CATS.index("interp"), bm.CATS.index("native")
    assert reg["empty"][0][native] == 0 and reg["empty"][0][interp] > 0
    loop = reg["py_loop"][0]
    assert loop[native] == 0 and loop[interp] > 1000 * 10  # bytecode of 1000 iterations
    f256, f512 = reg["fc256"][0][native], reg["fc512"][0][native]
    assert f256 > 16384  # at least one instruction per MAC
    # twice the MACs: 16,384 more cost at least one instruction each, and what does not scale
    # with the MACs (argument checks, one requant per output) is a small part of the call
    assert f512 - f256 > 16384
    assert 0 <= 2 * f256 - f512 < f256 // 4
    assert runs[0].results["py_sum"] == str(sum(range(1000)))
