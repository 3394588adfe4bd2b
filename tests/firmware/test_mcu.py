"""microtrain on the project's QEMU firmware (ports/qemu: Cortex-M0/M3/M4F/M7; ports/qemu/rv32: RV32IMC
with microtrain built in) and its float32 host twin.

The subset of ``make test-mcu`` (tests/support/check_mcu.py) that fits in ``make test``:

- each board boots, runs a script from the host folder, reports its core and a
  single-precision float, and exits with the script's code;
- kernel cases bit-exact against the numpy oracle through the board's .mpy
  (armv6m on M0, armv7m on M3, armv7emsp on M4, armv7emdp and armv6m on M7) or, on m0fw (the M0
  firmware with microtrain built in as the user C module, as an RP2040 firmware is built) and
  rv32, its built-in module; the M0, m0fw, M3 and rv32 run the float kernels natively (software
  float), and equal the M4/M7 FPUs at the float32 edges; every board's Python float operations
  equal numpy float32 there;
- the .mtm mutation set's first files: accept / ValueError only, the host reader's verdicts;
- one training run per mode (int8, mixed, float32): checkpoint and trained arrays byte-identical
  to the float32 host twin's (ports/host, FLOAT=single) -- and the twin's checkpoint
  differs from the double-float host's for at least one mode, or the comparison would
  not show that the twin models the boards' floats.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from support import check_mcu
from support.check_mcu import ROOT, qemu_run

BOARDS = check_mcu.BOARDS



@pytest.fixture(scope="module", autouse=True)
def _toolchain() -> None:
    """make setup installs both: a missing one is a broken setup, not a reason to skip."""
    for tool in ("qemu-system-arm", "arm-none-eabi-gcc", "qemu-system-riscv32", "riscv64-unknown-elf-gcc"):
        assert shutil.which(tool), f"{tool} missing: run `make setup` (tools/setup.sh installs it)"


@pytest.fixture(scope="module")
def built() -> None:
    for arch in ("armv6m", "armv7m", "armv7emsp", "armv7emdp"):
        if not (ROOT / "build" / "natmod" / arch / "_microtrain.mpy").exists():
            subprocess.run(["make", "natmod", f"ARCH={arch}"], cwd=ROOT, check=True, capture_output=True)
    check_mcu.build_all(BOARDS)


@pytest.mark.parametrize("board", BOARDS)
def test_boots_and_runs_a_host_script(built: None, board: str, tmp_path: Path) -> None:
    (tmp_path / "hello.py").write_text(
        "import sys\n"
        "print(sys.implementation._machine)\n"
        "print(sys.argv[1:], repr(1.0 / 3.0))\n"
        "with open('out.txt', 'w') as f:\n"
        "    f.write('written on the board')\n"
        "sys.exit(5)\n")
    p = qemu_run.run(board, "hello.py", ["a", "b"], cwd=tmp_path, timeout=60)
    assert p.returncode == 5, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == f"microtrain-qemu-{board} with {qemu_run.BOARDS[board].cpu}"
    assert lines[1] == "['a', 'b'] 0.3333333"  # single-precision floats, as on boards
    assert (tmp_path / "out.txt").read_text() == "written on the board"


@pytest.mark.parametrize("board,arch", check_mcu.KERNEL_RUNS)
def test_kernel_cases_bitexact(built: None, board: str, arch: str) -> None:
    ok, n, bad = check_mcu.check_kernels(board, arch, per_op=2, seed=77)
    assert n > 40 and ok == n, "\n".join(bad[:8])


def test_m0_float_kernels_native(built: None) -> None:
    """The armv6m module has the float kernels on the M0 (software float) and leaves them out on the
    hard-float M7, whose float ABI it does not share; the M0 cases include float ones. So do the
    armv7m module on the M3 and the M0 firmware's built-in module (m0fw, no extra define)."""
    work = check_mcu.WORK / "probe-float"
    work.mkdir(parents=True, exist_ok=True)
    f32_ops = {op for op in check_mcu.kernel_cases.ALL_OPS if "f32" in op}
    assert not f32_ops & check_mcu.module_functions("m7", "armv6m", work)
    for board, arch in check_mcu.SOFT_FLOAT_RUNS:
        assert f32_ops <= check_mcu.module_functions(board, arch, work), board
        cases = check_mcu.kernel_cases_for(board, arch, 2, 77, work)
        assert {c.op for c in cases} >= f32_ops, board


def test_m0fw_float_abi_is_microtrains(built: None) -> None:
    """In the m0fw firmware every float ABI routine it links (its Python floats' too) is
    softfloat.c's: each name is a weak alias at the address of its mt_ routine (mt_softfloat.h
    pairs them), so no libgcc member took one over (--gc-sections drops the unused ones)."""
    from support.symbols import SOFTFLOAT_ABI, softfloat_abi_routines

    pairs = {mt: abi for abi, mt in softfloat_abi_routines(ROOT / "usermod" / "microtrain").items()}
    assert set(pairs.values()) == SOFTFLOAT_ABI
    nm = subprocess.run(["arm-none-eabi-nm", str(qemu_run.firmware("m0fw"))], capture_output=True,
                        text=True, check=True).stdout.split()
    syms = {name: (addr, kind) for addr, kind, name in zip(nm[0::3], nm[1::3], nm[2::3], strict=True)}
    linked = {mt: abi for mt, abi in pairs.items() if abi in syms}
    assert len(linked) >= len(pairs) - 2, sorted(set(pairs.values()) - set(linked.values()))
    for mt, abi in linked.items():
        assert syms[abi] == (syms[mt][0], "W") and syms[mt][1] == "T", (abi, syms[abi], mt, syms.get(mt))


def test_f32_edges_m0_equals_fpu_boards(built: None) -> None:
    n, bad = check_mcu.check_f32_edges(BOARDS, seed=99, n_random=512)
    assert n > 10000 and not bad, "\n".join(bad[:10])


def test_f32_python_ops_equal_numpy(built: None) -> None:
    n, bad = check_mcu.check_f32_ops(BOARDS)
    assert n > 1000 and not bad, "\n".join(bad[:10])


@pytest.fixture(scope="module")
def corpus() -> tuple[list[bytes], list[bool]]:
    return check_mcu.mutation_corpus(60)


@pytest.mark.parametrize("board", BOARDS)
def test_mtm_mutations_never_crash(built: None, board: str, corpus: tuple[list[bytes], list[bool]]) -> None:
    files, verdicts = corpus
    m = check_mcu.check_mutations(board, files, verdicts)
    assert not m.crashes, m.crashes[:5]
    assert not m.disagreements, m.disagreements[:5]
    assert 0 < m.accepted < m.files


@pytest.fixture(scope="module")
def twin_runs(built: None) -> tuple[Path, dict[int, tuple[bytes, bytes]]]:
    work = check_mcu.training_setup()
    return work, check_mcu.twin_training(work, 3, steps=8)


@pytest.mark.parametrize("board", BOARDS)
def test_training_equals_the_twin(twin_runs: tuple[Path, dict[int, tuple[bytes, bytes]]], board: str) -> None:
    work, twin = twin_runs
    ok, n, bad = check_mcu.check_training(board, work, twin, steps=8)
    assert n == 3 and ok == n, "\n".join(bad)


def test_twin_differs_from_double_host(twin_runs: tuple[Path, dict[int, tuple[bytes, bytes]]]) -> None:
    """Every training config on the twin and on the double-float build of the same port: some
    checkpoint must differ, else the board == twin comparison above could not tell single from
    double floats. All configs, not only the quick ones: whether a given config's few float
    roundings change a checkpoint depends on the model, which torch trains slightly differently
    on different CPUs."""
    work, _ = twin_runs
    # the build folder of tests/firmware/test_firmware.py's double-float port (same sources and flags):
    # no second build when that test ran first
    build = ROOT / "build" / "fwport" / "double"
    proc = subprocess.run(["make", "-j2", "-C", str(ROOT / "ports" / "host"), "FLOAT=double",
                           f"BUILD={build}"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    n = len(check_mcu.TRAIN_CONFIGS)
    single = check_mcu.twin_training(work, n, steps=8, prefix="single")
    double = check_mcu.twin_training(work, n, steps=8, exe=build / "micropython-fw", prefix="double")
    assert any(single[i][0] != double[i][0] for i in range(n))
