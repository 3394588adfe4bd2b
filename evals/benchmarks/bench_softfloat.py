"""Instructions per float32 operation on Cortex-M0 (QEMU micro:bit, exact counts).

Builds evals/benchmarks/softfloat/ops.c for Cortex-M0 twice: with usermod/microtrain/softfloat.c
(the armv6m natmod's routines, at the natmod's -Os) and with libgcc's (what the M0
firmware's own Python floats use), runs each under QEMU with the project's counting
plugin (evals/benchmarks/qemu_plugin) and prints, per operation, the instructions of one call
(the loop's own cost subtracted) on operands typical of training: normal numbers in
+-[2^-12, 2^4), int8-product integers, zero operands, and the update's int8 path
(int8 level times a scale, trunc(x + 128 + offset) with |x| < 128).

    .venv/bin/python -m evals.benchmarks.bench_softfloat
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from evals.benchmarks.bench_mcu import PLUGIN, PLUGIN_DIR

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "evals" / "benchmarks" / "softfloat"
BUILD = ROOT / "build" / "softfloat-bench"
N_CALLS = 1024
OPS = ["fadd", "fsub", "fmul", "fdiv", "i2f", "f2iz", "fcmplt", "fadd0", "fmul0", "mul_i8",
       "add_trunc"]  # marker order in ops.c, after the empty loop
# the table's first column: ABI routines, the zero-operand cases, the update's fused routines
# (libgcc: the calls the C code makes instead)
LABELS = {"fadd0": "`__aeabi_fadd(x, 0)`", "fmul0": "`__aeabi_fmul(x, 0)`",
          "mul_i8": "`mt_f32_mul_i8(w, s)` (libgcc: `i2f` + `fmul`)",
          "add_trunc": "`mt_f32_add_trunc(x, u)` (libgcc: `fadd` + `f2iz`)"}
CFLAGS = ["-mcpu=cortex-m0", "-mthumb", "-Os", "-std=c99", "-Wall", "-Wextra", "-Werror", "-ffreestanding",
          "-nostdlib", "-T", str(SRC / "m0.ld")]


def build(name: str, ours: bool) -> Path:
    BUILD.mkdir(parents=True, exist_ok=True)
    elf = BUILD / f"{name}.elf"
    if ours:  # the natmod's flags for softfloat.c (usermod/microtrain/Makefile)
        tail = ["-DMT_SOFT_FLOAT", "-DMT_SOFT_FLOAT_AEABI", f"-I{ROOT / 'usermod' / 'microtrain'}",
                str(SRC / "ops.c"), str(ROOT / "usermod" / "microtrain" / "softfloat.c")]
    else:
        tail = [str(SRC / "ops.c"), "-lgcc"]
    subprocess.run(["arm-none-eabi-gcc", *CFLAGS, "-o", str(elf), *tail], check=True)
    return elf


def per_call(elf: Path) -> dict[str, float]:
    """Instructions per call of each operation (inclusive of its helpers)."""
    nm = subprocess.run(["arm-none-eabi-nm", "--defined-only", str(elf)], check=True, capture_output=True,
                        text=True).stdout
    mark = next(int(ln.split()[0], 16) & ~1 for ln in nm.splitlines() if ln.endswith(" mt_mark"))
    mp = BUILD / f"{elf.stem}.map"
    mp.write_text("")  # one category: everything unmapped
    out = BUILD / f"{elf.stem}.counts"
    plugin = f"{PLUGIN},map={mp},mark={mark:#x},out={out}"
    subprocess.run(["qemu-system-arm", "-M", "microbit", "-nographic", "-semihosting", "-icount", "shift=0",
                    "-kernel", str(elf), "-plugin", plugin, "-d", "plugin"],
                   check=True, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    lines = out.read_text().splitlines()
    snaps = [sum(int(v) for v in ln.split()[2:]) for ln in lines if ln.startswith("M ")]
    loops = [b - a for a, b in zip(snaps, snaps[1:], strict=False)]
    if len(loops) != len(OPS) + 1:
        raise RuntimeError(f"{elf.name}: {len(snaps)} markers, expected {len(OPS) + 2}")
    empty = loops[0]
    return {op: (n - empty) / N_CALLS for op, n in zip(OPS, loops[1:], strict=True)}


def measure() -> tuple[dict[str, float], dict[str, float]]:
    """(softfloat.c, libgcc): instructions per call of each operation on Cortex-M0."""
    if not PLUGIN.is_file():
        subprocess.run(["make", "-s", "-C", str(PLUGIN_DIR), "all"], check=True)
    return per_call(build("ours", True)), per_call(build("libgcc", False))


def table(ours: dict[str, float], gcc: dict[str, float]) -> list[str]:
    return (["| operation | softfloat.c (armv6m natmod) | libgcc (M0 firmware) |", "|---|---:|---:|"]
            + [f"| {LABELS.get(op, f'`__aeabi_{op}`')} | {ours[op]:.1f} | {gcc[op]:.1f} |" for op in OPS])


def main() -> int:
    ours, gcc = measure()
    print("\n".join(table(ours, gcc)))
    print("softfloat-m0: " + " ".join(f"{op}={ours[op]:.1f}" for op in OPS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
