"""The `microtrain` command: host-side tools around the device library.

Subcommands: convert, to-torch, info, run, deploy, flash, plot, lab, fleet, build
(``microtrain COMMAND --help`` explains each, with an example). Errors are one line on
stderr, ``microtrain COMMAND: error: ...``, with exit code 2; ``run`` passes the
script's exit code through.
"""

from __future__ import annotations

import argparse
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from microtrain_tools import paths

ROOT = paths.ROOT
ARCHS = ("x64", "armv6m", "armv7m", "armv7emsp", "armv7emdp")
_RAW = argparse.RawDescriptionHelpFormatter


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2, no usage dump)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _one_line(e: BaseException) -> str:
    msg = " ".join(str(e).split()) or type(e).__name__
    if isinstance(e, OSError) and e.filename and str(e.filename) not in msg:
        msg = f"{e.filename}: {msg}"
    return msg


# --------------------------------------------------------------------------
# commands


def _cmd_build(args: argparse.Namespace) -> int:
    archs = ARCHS if args.arch == "all" else (args.arch,)
    for arch in archs:
        rc = subprocess.call(["make", "-C", str(ROOT), "--no-print-directory", "natmod", f"ARCH={arch}"])
        if rc:
            print(f"microtrain build: natmod for {arch} failed", file=sys.stderr)
            return rc
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    from microtrain_tools import convert

    rc = int(convert.main(args=args) or 0)
    return 2 if rc == 1 else rc  # convert.main prints its one-line error and returns 2


def _cmd_to_torch(args: argparse.Namespace) -> int:
    from microtrain_tools import to_torch

    return to_torch.main(args=args)


def _cmd_info(args: argparse.Namespace) -> int:
    from microtrain_tools import info

    return info.main(args=args)


def _cmd_run(args: argparse.Namespace) -> int:
    from microtrain_tools import board

    cmd, env = board.run_command(args.script, list(args.args), args.heapsize, args.arch, native=not args.pure,
                                 source=args.source, ops=args.ops)
    if args.source and args.heapsize:
        print("microtrain run: --source compiles the package from .py inside the heap, which leaves "
              "it in pieces: a board with the .mpy package (or frozen) has larger free blocks than "
              "this run", file=sys.stderr)
    rc = subprocess.call(cmd, env=env)
    return rc if rc >= 0 else 128 - rc


def _cmd_deploy(args: argparse.Namespace) -> int:
    from microtrain_tools import board

    cmds = board.deploy_commands(args.port, args.arch, args.model, args.script, args.dist, args.lib,
                                 args.root, verify=not args.no_verify, builtin=args.builtin, ops=args.ops)
    return board.run_commands(cmds, args.dry_run, "deploy")


def _cmd_flash(args: argparse.Namespace) -> int:
    from microtrain_tools import board

    cmds = board.flash_commands(args.chip, args.firmware, args.port, args.baud, args.erase, args.drive)
    return board.run_commands(cmds, args.dry_run, "flash")


def _cmd_plot(args: argparse.Namespace) -> int:
    from microtrain_tools import plot

    log = plot.read_log(args.log)
    for p in (args.output, args.confusion):
        if p is not None and not Path(p).resolve().parent.is_dir():
            raise FileNotFoundError(f"{p}: the folder does not exist")
    if args.confusion:  # checked before anything is written
        plot.plot_confusion(log, args.confusion)
    plot.plot_curves(log, args.output, args.title)
    if not args.quiet:
        made = [args.output] + ([args.confusion] if args.confusion else [])
        print(f"{args.log}: {len(log.steps)} steps, {len(log.epochs)} epochs, {len(log.evals)} evals "
              f"-> {', '.join(made)}")
    return 0


# --------------------------------------------------------------------------
# parser


def _sub(sub: Any, name: str, help: str, description: str, example: str,
         func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help=help, description=description,
                                                epilog="example:\n" + example, formatter_class=_RAW)
    p.set_defaults(func=func)
    return p


def _add_convert(sub: Any, full: bool) -> None:
    help = "convert a PyTorch model + checkpoint to an int8 .mtm file (calibrated on your data)"
    cv = sub.add_parser("convert", help=help, formatter_class=_RAW,
                        epilog="example:\n  microtrain convert mymodels:DigitsCNN --state-dict digits.pt "
                               "--calib calib.npz -o digits.mtm\n")
    if full:  # importing torch takes a second or two: only when convert is the command
        from microtrain_tools import convert

        convert.build_parser(cv)
        cv.description = textwrap.fill(cv.description or "", 88)
    cv.set_defaults(func=_cmd_convert)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    command = next((a for a in (argv or []) if not a.startswith("-")), None)
    p = _Parser(
        prog="microtrain",
        description="Host tools for microtrain: on-device int8 training of small neural networks for "
                    "MicroPython.\nConvert a PyTorch model, inspect it, run the same MicroPython code on "
                    "the host,\ndeploy it to a board, flash firmware, plot training logs and bring a "
                    "trained\ncheckpoint back to PyTorch.",
        epilog="example:\n  microtrain convert mymodels:DigitsCNN --state-dict digits.pt --calib calib.npz "
               "-o digits.mtm\n  microtrain info digits.mtm --train-last 2\n  microtrain run train.py\n"
               "run `microtrain COMMAND --help` for the options of each command.",
        formatter_class=_RAW,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_convert(sub, command == "convert")

    from microtrain_tools import info, to_torch

    tt = sub.add_parser("to-torch", help="write a PyTorch state_dict from a .mtm model or device checkpoint")
    to_torch.build_parser(tt)
    tt.set_defaults(func=_cmd_to_torch)

    inf = sub.add_parser("info", help="layers, tensors, file size and RAM (inference and training) of a .mtm")
    info.build_parser(inf)
    inf.set_defaults(func=_cmd_info)

    r = _sub(sub, "run", "run a MicroPython script in the host micropython with microtrain on its path",
             "Run SCRIPT.py in the host MicroPython (the unix port, .venv/bin/micropython, or\n"
             "$MICROTRAIN_MICROPYTHON) with the package on MICROPYPATH as a board installs it: the\n"
             "native module (built first if missing) and the microtrain package compiled to .mpy\n"
             "(`make dist`'s x64 folder, built under build/run/ when the sources change). The same\n"
             "code, and a heap in as few pieces, as on a board. Options of `microtrain run` come\n"
             "before SCRIPT.py; everything after it is passed to the script (sys.argv). The exit\n"
             "code is the script's.",
             "  microtrain run --heapsize 256k train.py --epochs 3   # your script, run as a board would\n",
             _cmd_run)
    r.add_argument("--heapsize", default=None, metavar="SIZE",
                   help="MicroPython GC heap, e.g. 256k (a board-sized heap; default: micropython's)")
    r.add_argument("--arch", default="x64", choices=("x64",), help="native module architecture (host: x64)")
    r.add_argument("--pure", action="store_true",
                   help="the package's pure-Python kernels: no native module on the path and "
                        "MICROTRAIN_PURE=1 (also overrides a _microtrain built into the binary; "
                        "an error if the binary cannot be switched)")
    r.add_argument("--source", action="store_true",
                   help="the package's .py sources (python_lib) and build/natmod/<arch> instead: "
                        "compiled inside the heap, which leaves a small heap in pieces (not as on a "
                        "board; says so with --heapsize)")
    r.add_argument("--ops", default=None, metavar="OPS",
                   help="a native module of only these op families, as a small board gets: families, "
                        "profiles (core, all) or .mtm files (their layers' ops), comma-separated")
    r.add_argument("script", metavar="SCRIPT.py", help="the MicroPython script")
    r.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the script")

    d = _sub(sub, "deploy", "copy the microtrain package, a model and a script to a board (mpremote)",
             "Copy the microtrain package for ARCH (dist/<arch>_6.3/ from `make dist`, built first\n"
             "when missing: _microtrain.mpy and microtrain/*.mpy) into the board's /lib, and the\n"
             "model and script into /, with mpremote; then import the package on the board to\n"
             "check it. --dry-run prints the exact command lines instead of running them.\n"
             "Architectures: armv6m (Cortex-M0+, RP2040), armv7m (Cortex-M3), armv7emsp (Cortex-M4F/M7\n"
             "single precision, STM32F4, RP2350), armv7emdp (Cortex-M7 double precision FPU).",
             "  microtrain deploy --port /dev/ttyACM0 --arch armv6m --model digits.mtm --script main.py\n",
             _cmd_deploy)
    d.add_argument("--port", default=None, help="serial port of the board, e.g. /dev/ttyACM0 (required)")
    d.add_argument("--arch", default="armv7emsp", choices=("armv6m", "armv7m", "armv7emsp", "armv7emdp"),
                   help="the board's native-module architecture (default armv7emsp)")
    d.add_argument("--model", default=None, metavar="MODEL.mtm", help="model file to copy to /")
    d.add_argument("--script", default=None, metavar="SCRIPT.py",
                   help="script to copy to / (main.py runs at boot)")
    d.add_argument("--dist", default=None, metavar="DIR",
                   help="use this dist folder instead of dist/<arch>_6.3")
    d.add_argument("--lib", default="/lib",
                   help="package folder on the board (default /lib; pyboard: /flash/lib)")
    d.add_argument("--root", default="/", help="folder on the board for model and script (default /)")
    d.add_argument("--builtin", action="store_true",
                   help="the firmware has microtrain built in (user C module, package frozen): copy "
                        "only the model and script (--arch is not used)")
    d.add_argument("--ops", default=None, metavar="OPS",
                   help="the op families the native module holds: families, profiles (core, all) or "
                        ".mtm files, comma-separated (default: the --model's ops; all without one)")
    d.add_argument("--no-verify", action="store_true",
                   help="do not import the package on the board afterwards")
    d.add_argument("--dry-run", action="store_true", help="print the commands, do not run them")

    f = _sub(sub, "flash", "flash MicroPython firmware onto a board (esptool, rp2 .uf2 copy, dfu-util)",
             "Flash a MicroPython firmware image.\n"
             "  ESP32 family (FIRMWARE.bin): esptool write-flash at the chip's offset: esp32 and\n"
             "    esp32s2 0x1000, esp32s3 / esp32c3 / esp32c6 0x0; --erase erases the flash first\n"
             "    (needed the first time).\n"
             "  rp2 (FIRMWARE.uf2): copied to the RPI-RP2 drive (--drive) that appears when the\n"
             "    board is plugged in with BOOTSEL held.\n"
             "  stm32 (FIRMWARE.dfu): dfu-util --alt 0 -D FIRMWARE.dfu with the board in DFU mode\n"
             "    (BOOT0 high at reset, or machine.bootloader()).\n"
             "--dry-run prints the exact command lines instead of running them.",
             "  microtrain flash --chip esp32s3 --port /dev/ttyACM0 --erase ESP32_GENERIC_S3.bin\n"
             "  microtrain flash --chip rp2 --drive /media/$USER/RPI-RP2 RPI_PICO.uf2\n", _cmd_flash)
    f.add_argument("firmware", metavar="FIRMWARE", help="firmware image (.bin, .uf2 or .dfu)")
    f.add_argument("--chip", required=True, choices=("esp32", "esp32s2", "esp32s3", "esp32c3", "esp32c6",
                                                     "rp2", "stm32"), help="target chip family")
    f.add_argument("--port", default=None, help="serial port (ESP32 family; required there)")
    f.add_argument("--baud", type=int, default=460800, help="esptool baud rate (default 460800)")
    f.add_argument("--erase", action="store_true", help="erase the whole flash first (ESP32 family)")
    f.add_argument("--drive", default=None, help="mounted RPI-RP2 drive (rp2; required there)")
    f.add_argument("--dry-run", action="store_true", help="print the commands, do not run them")

    pl = _sub(sub, "plot", "learning curves and confusion matrix PNGs from a training log (JSON lines)",
              "Plot a training log written by the device Trainer (JSON lines: config, step,\n"
              "epoch and eval records): training loss per step (with a moving average), train/eval\n"
              "loss per epoch and train/eval accuracy per epoch into one PNG; with --confusion also\n"
              "the confusion matrix of the last eval record (rows true, columns predicted).",
              "  microtrain plot train-log.jsonl -o curves.png --confusion confusion.png\n", _cmd_plot)
    pl.add_argument("log", metavar="LOG.jsonl", help="training log")
    pl.add_argument("-o", "--output", required=True, metavar="CURVES.png", help="learning curves PNG")
    pl.add_argument("--confusion", default=None, metavar="CM.png", help="confusion matrix PNG")
    pl.add_argument("--title", default=None, help="figure title")
    pl.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")

    from microtrain_tools import lab

    lb = _sub(sub, "lab", "serve the browser lab: MicroPython WebAssembly training a model in a web page",
              lab.DESCRIPTION, lab.EXAMPLE, lab.run)
    lab.add_arguments(lb)

    from microtrain_tools import fleet

    fl = _sub(sub, "fleet", "boards that learn together: Flower SuperLink, one SuperNode per board",
              "Federated fine-tuning on Flower's deployment engine (docs/fleet.md): a SuperLink and\n"
              "one SuperNode per board on 127.0.0.1 (TLS and SuperNode authentication unless\n"
              "--insecure), each board bridged by a ClientApp over the transport of `microtrain run`\n"
              "(local micropython) or `microtrain deploy` (--port: a serial board). Each round the\n"
              "boards get the trained part's global values, train on their own samples and send int8\n"
              "channel deltas; Flower's strategy aggregates. Everything is stopped by PID at the end.",
              "  microtrain fleet model.mtm --data a.mtd b.mtd c.mtd --test held.mtd --rounds 5\n"
              "  microtrain fleet model.mtm --data a.mtd b.mtd --port /dev/ttyACM0=armv7emsp --test t.mtd\n",
              fleet.main)
    fleet.add_arguments(fl)

    b = _sub(sub, "build", "build the native module (.mpy) for one or all architectures",
             "Build the native module build/natmod/<arch>/_microtrain.mpy with `make natmod`\n"
             "(x64 for the host micropython; armv6m, armv7m, armv7emsp, armv7emdp for boards).",
             "  microtrain build --arch all\n", _cmd_build)
    b.add_argument("--arch", default="x64", choices=(*ARCHS, "all"), help="target architecture (default x64)")

    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError, RuntimeError, ImportError, pickle.UnpicklingError) as e:
        print(f"microtrain {args.command}: error: {_one_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
