"""The Cortex-M0 software float (usermod/microtrain/softfloat.c) against the host FPU.

tests/c/softfloat_driver.c calls the routines under their mt_ names on millions of
operand pairs (uniform bit patterns, close exponents, underflow / overflow edges,
subnormals, short significands for ties, an edge table crossed with everything) and
compares each result with x64 SSE float32 (round to nearest-even, no flush to zero):
bit for bit, NaN bits by the Arm FPU's rules (what the boards compute). Built with
ASan + UBSan, at -O2, and at -O2 with the compiler's count-leading-zeros (the armv7m
build's path). A copy with the tie-to-even step removed must fail, so the comparison
can see a rounding error. And the same driver, bare-metal on a QEMU Cortex-M4F, checks
the routines compiled for Cortex-M0 against that FPU, NaN bits included.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from support.kernel_harness import BUILD_TEST, KERNEL_DIR, ROOT, SANITIZE_FLAGS, SANITIZER_ENV

DRIVER = ROOT / "tests" / "c" / "softfloat_driver.c"
CFLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off", "-DMT_SOFT_FLOAT_TEST"]


def build(name: str, src_dir: Path, flags: list[str]) -> Path:
    BUILD_TEST.mkdir(parents=True, exist_ok=True)
    exe = BUILD_TEST / name
    cmd = ["gcc", *CFLAGS, *flags, f"-I{src_dir}", str(DRIVER), str(src_dir / "softfloat.c"), "-lm", "-o",
           str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return exe


def run(exe: Path, pairs: int, seed: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(exe), str(pairs), str(seed)], capture_output=True, text=True, timeout=600,
                          env=SANITIZER_ENV, check=False)


@pytest.mark.parametrize("kind,flags,pairs", [("asan", ["-O1", "-g", *SANITIZE_FLAGS], 300_000),
                                              ("o2", ["-O2"], 2_000_000),
                                              # the armv7m build's path: a count-leading-zeros instruction
                                              ("o2-clz", ["-O2", "-DMT_SOFT_FLOAT_TEST_CLZ"], 500_000),
                                              # RISC-V's: libgcc's names, __mulsf3, the comparisons
                                              ("o2-libgcc", ["-O2", "-DMT_SOFT_FLOAT_LIBGCC"], 500_000)])
def test_softfloat_matches_host_fpu(kind: str, flags: list[str], pairs: int) -> None:
    exe = build(f"softfloat_driver-{kind}", KERNEL_DIR, flags)
    p = run(exe, pairs, seed=11)
    assert p.returncode == 0 and not p.stderr.strip(), p.stdout[-3000:] + p.stderr[-3000:]
    assert p.stdout.strip().startswith("softfloat: ok"), p.stdout
    # edges squared + 5 generators x pairs, as the driver counts them
    assert int(p.stdout.split("pairs=")[1].split()[0]) >= 5 * pairs


def test_softfloat_driver_sees_a_rounding_error(tmp_path: Path) -> None:
    src = (KERNEL_DIR / "softfloat.c").read_text()
    tie = "        sig &= ~1u;  // tie: to even\n"
    assert tie in src
    (tmp_path / "softfloat.c").write_text(src.replace(tie, ""))
    shutil.copy(KERNEL_DIR / "mt_softfloat.h", tmp_path)
    shutil.copy(KERNEL_DIR / "mt_quant.h", tmp_path)  # included by mt_softfloat.h
    exe = build("softfloat_driver-broken", tmp_path, ["-O2"])
    p = run(exe, 50_000, seed=12)
    assert p.returncode == 1 and "MISMATCH" in p.stdout, p.stdout[-2000:]


def test_softfloat_m0_code_matches_the_m4_fpu() -> None:
    """The routines compiled for Cortex-M0 (Thumb-1, the natmod's flags) run on a QEMU Cortex-M4F
    next to its FPU: every result equal, NaN bits included (the FPU's own NaNs must also match the
    driver's Arm model)."""
    for tool in ("arm-none-eabi-gcc", "qemu-system-arm"):
        assert shutil.which(tool), f"{tool} missing: run `make setup` (tools/setup.sh installs it)"
    out = BUILD_TEST / "softfloat-m4"
    out.mkdir(parents=True, exist_ok=True)
    obj = out / "softfloat_m0.o"
    cc = ["arm-none-eabi-gcc", "-std=c99", "-Wall", "-Wextra", "-Werror"]
    subprocess.run([*cc, "-mcpu=cortex-m0", "-mthumb", "-Os", "-fpic", "-fno-common", "-ffp-contract=off",
                    "-fno-builtin", "-DMT_SOFT_FLOAT", "-DMT_SOFT_FLOAT_TEST", f"-I{KERNEL_DIR}", "-c",
                    str(KERNEL_DIR / "softfloat.c"), "-o", str(obj)], check=True)
    # integer arguments only: the soft- and hard-float ABIs pass them alike, so the
    # attribute check that would refuse mixing them can go
    subprocess.run(["arm-none-eabi-objcopy", "--remove-section", ".ARM.attributes", str(obj)], check=True)
    startup = ROOT / "evals" / "benchmarks" / "qemu_plugin" / "test"
    elf = out / "softfloat_m4.elf"
    subprocess.run([*cc, "-mcpu=cortex-m4", "-mthumb", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard", "-O1",
                    "-ffp-contract=off", "--specs=rdimon.specs", "-T", str(startup / "mps2.ld"),
                    "-nostartfiles", "-DMT_SF_BAREMETAL=100000", f"-I{KERNEL_DIR}", "-o", str(elf),
                    str(startup / "startup.c"), str(DRIVER), str(obj), "-lm", "-lc", "-lrdimon"], check=True)
    qemu = ["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-semihosting", "-kernel", str(elf)]
    p = subprocess.run(qemu, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
                       check=False)
    assert p.returncode == 0 and "softfloat: ok" in p.stdout, p.stdout[-3000:] + p.stderr[-2000:]
