"""`make adapt-eval`: the adaptation methods of docs/adapt.md on real data, mean of 3 seeds,
each next to the same method on the host (issue 15).

- LoRA adapters: evals/adapt/lora.py when present (another branch); else lora_gap=na.
- Prototype head, 5-shot: MNIST digits from the frozen Fashion-MNIST body; device vs the
  numpy reference (adapt_ref.ProtoRef on the oracle's embeddings) and PyTorch float32.
- Replay: smartwatch subject 9 then 10; subject 9's accuracy after 10, with minus without.
- Zeroth-order: SPSA on the last two layers (and the hybrid), device vs PyTorch doing the
  same SPSA, and backprop at the same sample budget.

Ends with ``adapt-eval: lora_gap=G lora_params=P ncm_5shot=A ncm_gap=G2 replay_keep=R zo_gap=G3``
(gaps in percentage points; ncm_gap against the numpy reference, zo_gap against PyTorch's SPSA).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from evals import experiments as ex
from evals.adapt import common, ncm, replay, zo

SEEDS = [1, 2, 3]


def _pct(v: float) -> str:
    return f"{100 * v:.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.adapt_eval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quiet", action="store_true", help="do not echo the device's progress lines")
    ap.add_argument("--out", default=str(common.WORK / "results.json"), help="all numbers (JSON)")
    ap.add_argument("--hybrid", action="store_true",
                    help="also the hybrid (SPSA body, backprop head): about 5 more minutes")
    args = ap.parse_args(argv)
    echo = not args.quiet
    t_start = time.perf_counter()
    out: dict[str, Any] = {}

    print("== LoRA adapters (evals/adapt/lora.py)", flush=True)
    try:
        from evals.adapt import lora  # type: ignore[attr-defined]
    except ImportError:
        lora = None
        print("evals/adapt/lora.py is not here (yet): lora_gap=na lora_params=na")
    if lora is not None:
        out["lora"] = lora.run(SEEDS)
        print(json.dumps(out["lora"]))
    lora_gap = f"{out['lora']['lora_gap']:.2f}" if lora is not None else "na"
    lora_params = str(out["lora"]["lora_params"]) if lora is not None else "na"

    print("\n== prototype head, 5-shot MNIST digits on the Fashion-MNIST body (cosine, int8 prototypes)",
          flush=True)
    n = ncm.run(SEEDS, echo=echo)
    out["ncm"] = n
    rows = [[str(s), _pct(r["device"]), _pct(r["numpy"]), _pct(r["torch"]), str(r["same_predictions"])]
            for s, r in n["seeds"].items()]
    rows.append(["mean", _pct(n["acc"]), _pct(n["numpy"]), _pct(n["torch"]), ""])
    print(ex.table(rows, ["seed", "device %", "numpy ref %", "torch fp32 %", "same predictions"]))
    s0 = next(iter(n["seeds"].values()))
    print(f"head: {s0['head_bytes']} bytes (10 classes), predict {s0['predict_ms']:.2f} ms/sample "
          f"(model forward included, host micropython)")
    n10 = ncm.run(SEEDS, shots=10, echo=echo)
    out["ncm10"] = n10
    same10 = all(r["same_predictions"] for r in n10["seeds"].values())
    print(f"10-shot: device {_pct(n10['acc'])} %, numpy {_pct(n10['numpy'])} %, "
          f"torch fp32 {_pct(n10['torch'])} %, same predictions {same10}")
    ncm_gap = abs(n["acc"] - n["numpy"]) * 100
    ncm_torch_gap = abs(n["acc"] - n["torch"]) * 100

    print(f"\n== replay: smartwatch subject {replay.FIRST} then {replay.SECOND}", flush=True)
    r = replay.run(SEEDS, echo=echo)
    out["replay"] = r
    print(ex.table([["device", _pct(r["without_before"]), _pct(r["without"]), _pct(r["with"]),
                     _pct(r["keep"])],
                    ["torch fp32", "", _pct(r["torch_without"]), _pct(r["torch_with"]),
                     _pct(r["torch_keep"])]],
                   ["", f"s{replay.FIRST} after s{replay.FIRST} %", f"after s{replay.SECOND}, no replay %",
                    "with replay %", "keep (pts)"]))
    print(f"replay buffer: {r['replay_bytes']} bytes ({replay.REPLAY['capacity']} samples of the first "
          f"trained layer's input)")

    print("\n== zeroth-order (SPSA) on the last two layers, Fashion-MNIST -> MNIST", flush=True)
    z = zo.run(SEEDS, ("zo", "hybrid") if args.hybrid else ("zo",), echo=echo)
    out["zo"] = z
    rows = [[name, _pct(m["device"]), _pct(m["torch"]), f"{m['gap']:.2f}", _pct(z["backprop"]),
             f"{m['bp_gap']:.2f}", str(m["state_bytes"])] for name, m in z["modes"].items()]
    print(ex.table(rows, ["mode", "device %", "torch SPSA %", "gap (pts)", "torch backprop %",
                          "vs backprop (pts)",
                          "training state bytes"]))
    print(f"budget: {z['epochs']} epochs of {z['n_train']} images, batch {z['batch']}")

    minutes = (time.perf_counter() - t_start) / 60
    out["minutes"] = minutes
    common.WORK.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, default=str)
    hyb = f"; hybrid zo_gap {z['modes']['hybrid']['gap']:.2f} pts" if args.hybrid else ""
    print(f"\nncm vs PyTorch float32: {ncm_torch_gap:.2f} pts{hyb}; time {minutes:.1f} min; "
          f"numbers in {args.out}")
    print(f"adapt-eval: lora_gap={lora_gap} lora_params={lora_params} ncm_5shot={_pct(n['acc'])} "
          f"ncm_gap={ncm_gap:.2f} replay_keep={_pct(r['keep'])} zo_gap={z['modes']['zo']['gap']:.2f}")
    ok = ncm_gap <= 0.5 and r["keep"] > 0 and z["modes"]["zo"]["gap"] <= 3.0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
