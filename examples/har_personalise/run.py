"""Personalisation on the device: a 1-D residual CNN pretrained on 8 subjects of the smartwatch
activity set is adapted inside MicroPython with the first windows of a held-out subject and
tested on that subject's remaining windows, next to the same adaptation in PyTorch float32.

    .venv/bin/python examples/har_personalise/run.py
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
    c = te.personalise(echo=not args.quiet, seeds=te.SEEDS)
    rows = []
    for subj, r in c["subjects"].items():
        before = r["device"][0]["acc_before"]
        accs = [d["acc"] for d in r["device"]]
        rows.append([subj, f"{100 * before:.2f}", te.spread(accs), te.spread([a - before for a in accs]),
                     te.spread(r["torch"])])
    print(ex.table(rows, ["subject", "frozen %", "adapted on device %", "gain (pts)", "torch adapted %"]))
    print(f"(mean +- standard deviation [min..max] over seeds {list(te.SEEDS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
