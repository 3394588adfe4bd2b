"""The `microtrain` command: host-side tools around the device library."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHS = ("x64", "armv6m", "armv7emsp", "armv7emdp")


def _cmd_build(args: argparse.Namespace) -> int:
    archs = ARCHS if args.arch == "all" else (args.arch,)
    for arch in archs:
        rc = subprocess.call(["make", "-C", str(ROOT), "--no-print-directory", "natmod", f"ARCH={arch}"])
        if rc:
            print(f"microtrain build: natmod for {arch} failed", file=sys.stderr)
            return rc
    return 0


def _cmd_check_kernels(args: argparse.Namespace) -> int:
    from microtrain_tools import check_kernels

    argv = ["--seed", str(args.seed)]
    if args.cases_per_op is not None:
        argv += ["--cases-per-op", str(args.cases_per_op)]
    return int(check_kernels.main(argv) or 0)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="microtrain",
        description="Host tools for microtrain: on-device int8 training for MicroPython.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from microtrain_tools import convert

    cv = sub.add_parser(
        "convert", help="convert a PyTorch model + checkpoint to an int8 .mtm file (calibrated on your data)"
    )
    convert.build_parser(cv)
    cv.set_defaults(func=lambda a: convert.main(args=a))
    b = sub.add_parser("build", help="build the native module (.mpy) for one or all architectures")
    b.add_argument("--arch", default="x64", choices=(*ARCHS, "all"), help="target architecture (default x64)")
    b.set_defaults(func=_cmd_build)
    c = sub.add_parser(
        "check-kernels", help="run random kernel cases in micropython and under ASan; compare to the oracle"
    )
    c.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    c.add_argument("--cases-per-op", type=int, default=None, help="cases per kernel (default: the tool's)")
    c.set_defaults(func=_cmd_check_kernels)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
