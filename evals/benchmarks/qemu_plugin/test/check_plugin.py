"""Self-test of the mtcount plugin on a bare-metal Cortex-M7 image, or with the argument
``rv32`` an RV32IMC one (qemu-system-riscv32 -M virt).

loop<N>.elf (rv32loop<N>.elf) runs mt_mark(); mt_loop() (1 + 2N + 1 instructions); mt_mark().
Checks: the count inside mt_loop is exactly 2N + 2; the counts between the two
markers differ by exactly 2 * (3000 - 1000) between the two builds; a second
run gives the same output byte for byte.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# per target: the image's name prefix, nm, and the QEMU command before -kernel
TARGETS = {
    "arm": ("loop", "arm-none-eabi-nm",
            ["qemu-system-arm", "-M", "mps2-an500", "-nographic", "-semihosting"]),
    "rv32": ("rv32loop", "riscv64-unknown-elf-nm",
             ["qemu-system-riscv32", "-M", "virt", "-bios", "none", "-nographic",
              "-semihosting-config", "enable=on,target=native"]),
}


def symbols(elf: Path, nm: str) -> dict[str, tuple[int, int]]:
    out = subprocess.run([nm, "-S", "--defined-only", str(elf)],
                         check=True, capture_output=True, text=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tT":
            syms[parts[3]] = (int(parts[0], 16) & ~1, int(parts[1], 16))
    return syms


def run(build: Path, n: int, target: str) -> tuple[list[list[int]], str]:
    prefix, nm, qemu = TARGETS[target]
    elf = build / f"{prefix}{n}.elf"
    syms = symbols(elf, nm)
    mp = build / f"{prefix}{n}.map"
    # mt_loop alone in category 1, every other function in category 0; nothing unmapped
    lines, end = [], 0
    for name, (a, s) in sorted(syms.items(), key=lambda kv: kv[1]):
        if s and a >= end:  # libc aliases share an address: keep the first
            lines.append(f"{a:x} {a + s:x} {1 if name == 'mt_loop' else 0}\n")
            end = a + s
    mp.write_text("".join(lines))
    out = build / f"{prefix}{n}.counts"
    mark = syms["mt_mark"][0]
    subprocess.run([*qemu, "-kernel", str(elf),
                    "-plugin", f"{build / 'mtcount.so'},map={mp},mark={mark:#x},out={out}", "-d", "plugin"],
                   check=True, capture_output=True, timeout=60)
    text = out.read_text()
    rows = [[int(v) for v in line.split()[2:]] for line in text.splitlines() if line.startswith("M ")]
    return rows, text


def main() -> int:
    build = Path(sys.argv[1])
    target = sys.argv[2] if len(sys.argv) > 2 else "arm"
    between = {}
    for n in (1000, 3000):
        rows, text = run(build, n, target)
        rows2, text2 = run(build, n, target)
        assert text == text2, "two runs differ"
        assert len(rows) == 2, rows
        delta = [b - a for a, b in zip(rows[0], rows[1], strict=True)]
        assert delta[1] == 2 * n + 2, f"mt_loop counted {delta[1]}, expected {2 * n + 2}"
        assert delta[2] == 0, "unmapped instructions in a fully mapped image"
        between[n] = sum(delta)
        print(f"{target} loop N={n}: mt_loop {delta[1]} (= 2N+2), between markers {between[n]}, "
              "two runs identical")
    assert between[3000] - between[1000] == 4000
    print(f"plugin check {target}: ok (exact and repeatable)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
