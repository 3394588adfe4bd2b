"""The four MLPerf Tiny reference models (DS-CNN-S, ResNet-8, MobileNetV1 0.25, the FC autoencoder),
written in PyTorch at their published sizes, trained briefly on installed data, converted, run
bit-exact inside MicroPython and fine-tuned there (README.md says which data and why).

    .venv/bin/python examples/mlperf_tiny/run.py [--mode quick] [--only resnet8 ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: evals/ runs the protocol

from evals.accuracy import coverage as cov  # noqa: E402

NAMES = ("ds_cnn_s", "resnet8", "mobilenet_v1", "autoencoder")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("full", "quick", "smoke"), default="full",
                    help="quick: fewer samples and epochs; smoke: untrained (seeded init), 4 inputs")
    ap.add_argument("--only", nargs="*", choices=NAMES, default=list(NAMES))
    ap.add_argument("--work", type=Path, default=cov.WORKDIR / "mlperf_tiny")
    args = ap.parse_args()
    results = []
    for name in args.only:
        print(f"{name}: training in PyTorch ...", flush=True)
        (c,) = cov.mlperf_cases(args.mode, (name,), lambda s: print(f"  {s}", flush=True))
        n = sum(p.numel() for p in c.model.parameters())
        print(f"  {n} parameters; {c.info} ({c.train_s:.0f} s)")
        print("  converting, running and fine-tuning inside micropython ...", flush=True)
        r = cov.run_case(c, args.work)
        d = r.device
        print(f"  device: trained {d['layers']}, {d['fwd_ms']:.1f} ms per inference (unix port, x64), "
              f"fine-tuning {d['train_s']:.1f} s")
        print("  " + cov._line(r))
        results.append(r)
    for r in results:
        if r.torch_mse is not None and r.device_mse is not None:
            print(f"autoencoder: held-out reconstruction MSE after fine-tuning: device {r.device_mse:.4f}, "
                  f"PyTorch {r.torch_mse:.4f} ({100 * (r.device_mse / r.torch_mse - 1):+.1f} %)")
    # smoke: untrained models (seeded init), so only conversion and bit-exactness count
    ok = all(r.bitexact == r.n if args.mode == "smoke" else r.ok for r in results)
    print(f"mlperf_tiny: models={sum(r.ok for r in results)}/{len(results)} "
          f"agree_min={min(r.agree for r in results):.4f} "
          f"bitexact={sum(r.bitexact for r in results)}/{sum(r.n for r in results)} "
          f"train={sum(r.trained for r in results)}/{len(results)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
