"""Personalisation on the device: a 1-D residual CNN pretrained on 8 subjects of the smartwatch
activity set is adapted inside MicroPython with the first windows of a held-out subject and
tested on that subject's remaining windows, next to the same adaptation in PyTorch float32.

    .venv/bin/python examples/har_personalise/run.py
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
    c = te.personalise(echo=not args.quiet)
    rows = []
    for subj, r in c["subjects"].items():
        d = r["device"]
        rows.append([subj, f"{100 * d['acc_before']:.2f}", f"{100 * d['acc']:.2f}",
                     f"{100 * (d['acc'] - d['acc_before']):+.2f}", f"{100 * r['torch']:.2f}"])
    print(ex.table(rows, ["subject", "frozen %", "adapted on device %", "gain (pts)", "torch adapted %"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
