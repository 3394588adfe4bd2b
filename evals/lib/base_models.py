"""`make models`: retrain the shipped float base models from their recipes and compare.

The evaluations (`make parity`, `make train-eval`, `make demo`) start from float models
shipped in ``evals/models/``, so that their results do not depend on a pretraining run of
the machine they run on. This script is how those files are made: each model is trained
from its recipe (seeded, one PyTorch thread) into ``build/models-regen/`` and compared to
the shipped one; ``--update`` (`make models-update`) replaces the shipped files.

Ends with ``models: <name>=identical|differs(max_abs=...)`` for each model. Bit-identical
weights are expected on machines of the same kind (same PyTorch build and CPU features);
a differing model is reported with its float accuracy next to the shipped one.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from evals.lib import refmodels as rm
from evals.lib import transfer_model as tm
from microtrain_tools import paths

MODELS: dict[str, Callable[..., rm.RefModel]] = {
    "fmnist_cnn": rm.get_fmnist_model,
    "har_rescnn": rm.get_har_model,
    tm.NAME: tm.get_model,
}


def _max_abs_diff(a: Path, b: Path) -> float:
    sa = torch.load(a, map_location="cpu", weights_only=True)
    sb = torch.load(b, map_location="cpu", weights_only=True)
    if sa.keys() != sb.keys():
        return float("inf")
    return max((float((sa[k].double() - sb[k].double()).abs().max()) if sa[k].numel() else 0.0)
               for k in sa)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.lib.base_models", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=list(MODELS), help=f"models (default: all of {list(MODELS)})")
    ap.add_argument("--update", action="store_true", help="replace the shipped files with the retrained ones")
    ap.add_argument("--out", type=Path, default=paths.BUILD / "models-regen", help="where to train")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    args = ap.parse_args(argv)
    verdicts = []
    for name in args.names:
        if name not in MODELS:
            ap.error(f"unknown model {name!r} (choose from {', '.join(MODELS)})")
        new = MODELS[name](cache_dir=args.out, retrain=True, progress=not args.quiet)
        shipped_pt, shipped_json = rm.SHIPPED_DIR / f"{name}.pt", rm.SHIPPED_DIR / f"{name}.json"
        acc_key = next((k for k in new.info if k.startswith("float_") and k.endswith("_acc")), "")
        if shipped_pt.is_file():
            diff = _max_abs_diff(shipped_pt, new.pt)
            old = rm._read_json(shipped_json)
            verdict = "identical" if diff == 0.0 else f"differs(max_abs={diff:.3g})"
            print(f"{name}: {verdict}; float accuracy shipped {old.get(acc_key)}, "
                  f"retrained {new.info.get(acc_key)}")
        else:
            verdict = "new"
            print(f"{name}: nothing shipped yet; float accuracy {new.info.get(acc_key)}")
        verdicts.append(f"{name}={verdict}")
        if args.update:
            rm.SHIPPED_DIR.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(new.pt, shipped_pt)
            info = {k: v for k, v in new.info.items() if k not in ("calib", "train_seconds")}
            rm._write_json(shipped_json, info)
            print(f"{name}: shipped {shipped_pt.relative_to(paths.ROOT)} ({shipped_pt.stat().st_size} bytes)")
    print("models: " + " ".join(verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
