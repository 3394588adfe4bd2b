"""Training from scratch on the device: a small CNN (random init) trained on every layer inside
MicroPython on scikit-learn's 8x8 digits, next to the same training in PyTorch float32.

    .venv/bin/python examples/scratch_digits/run.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: evals/ runs the protocol

from evals.accuracy import train_eval as te  # noqa: E402
from evals.lib import experiments as ex  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quiet", action="store_true", help="do not echo the device's progress")
    args = ap.parse_args()
    r = te.scratch(echo=not args.quiet, seeds=te.SEEDS)
    d, t = [v["acc"] for v in r["device"]], [v["acc"] for v in r["torch"]]
    row = ["all layers, float32 master", te.spread(d), te.spread(t),
           te.spread([a - b for a, b in zip(t, d, strict=True)])]
    print(ex.table([row], ["training", "device acc %", "torch fp32 acc %", "gap (pts)"]))
    print(f"(mean +- standard deviation [min..max] over seeds {list(te.SEEDS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
