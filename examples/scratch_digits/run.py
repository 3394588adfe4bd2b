"""Training from scratch on the device: a small CNN (random init) trained on every layer inside
MicroPython on scikit-learn's 8x8 digits, next to the same training in PyTorch float32.

    .venv/bin/python examples/scratch_digits/run.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from evals import experiments as ex  # noqa: E402
from evals import train_eval as te  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quiet", action="store_true", help="do not echo the device's progress")
    args = ap.parse_args()
    r = te.scratch(echo=not args.quiet)
    d, t = r["device"]["acc"], r["torch"]["acc"]
    row = ["all layers, float32 master", f"{100 * d:.2f}", f"{100 * t:.2f}", f"{100 * (t - d):+.2f}"]
    print(ex.table([row],
                   ["training", "device acc %", "torch fp32 acc %", "gap (pts)"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
