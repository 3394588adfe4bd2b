"""`make adapt-eval`: the adaptation methods of docs/adapt.md on real data, mean of 3 seeds,
each next to the same method on the host.

- LoRA adapters (evals/accuracy/adapt/lora.py).
- Prototype head, 5- and 10-shot: MNIST digits from the frozen Fashion-MNIST body, and a
  held-out smartwatch activity added to a HAR CNN trained without it (old and new activities);
  device vs the numpy reference (adapt_ref.ProtoRef on the oracle's embeddings) and PyTorch float32.
- Replay: smartwatch subject 9 then 10; subject 9's accuracy after 10, with minus without.
- Adapting with less (evals/accuracy/adapt/less.py): MemFLoRA, label-free test-time adaptation,
  QScheduler, the per-board order boundary.
- Forward-only: activity perturbation of the last two layers' outputs (ZO(perturb="outputs")),
  SPSA on their weights, and the hybrid (SPSA body, backprop head), against backprop of the same
  layers at the same sample budget, on the device and in PyTorch; PyTorch doing the same method
  for parity; the RAM each saves.

Ends with ``adapt-eval: lora_gap=G lora_params=P ncm_5shot=A ncm_gap=G2 replay_keep=R zo_gap=G3
zo_spsa_gap=G5 zo_hybrid_gap=G4`` (gaps in percentage points; ncm_5shot the MNIST one; ncm_gap the
largest |device - numpy reference| of the four prototype runs; zo_gap = backprop minus activity
perturbation on the device, the headline measure; zo_spsa_gap and zo_hybrid_gap the same for SPSA
on the weights and for the hybrid, whose head is trained by backprop), then ``memflora_gap=A
memflora_act_saving=S tta_gain=T tta_collapse=C qsched_gap=Q hybrid_budget_ok=H/N``
(evals/accuracy/adapt/less.py: fine-tuning minus MemFLoRA on HAR subject shift, pp; 1 - MemFLoRA's
saved activations over fine-tuning's; held-out accuracy gain of label-free adaptation on drifted
streams, pp, and the streams that ended below their start; best fixed q minus QScheduler at one
forward-pass budget, pp; RAM budgets the boundary trained within). memflora_gap and qsched_gap take
each seed as the mean of several data orders; the line before gives both from order 0 alone (one
run a seed). The "Adapting with less" tables
of docs/adapt.md are rewritten from the run.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from evals.accuracy.adapt import common, less, lora, ncm, ncm_watch, replay, zo
from evals.lib import experiments as ex

SEEDS = [1, 2, 3]


def _pct(v: float) -> str:
    return f"{100 * v:.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.accuracy.adapt_eval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quiet", action="store_true", help="do not echo the device's progress lines")
    ap.add_argument("--out", default=str(common.WORK / "results.json"), help="all numbers (JSON)")
    ap.add_argument("--no-hybrid", action="store_true",
                    help="skip the hybrid (SPSA body, backprop head): a few minutes less")
    args = ap.parse_args(argv)
    echo = not args.quiet
    t_start = time.perf_counter()
    out: dict[str, Any] = {}

    print("== LoRA adapters (evals/accuracy/adapt/lora.py)", flush=True)
    out["lora"] = lora.run(SEEDS)
    print(json.dumps(out["lora"]))
    lora_gap = f"{out['lora']['lora_gap']:.2f}"
    lora_params = str(out["lora"]["lora_params"])

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
    print(f"\n== prototype head on the smartwatch: activity {ncm_watch.ds.WATCH_CLASSES[ncm_watch.NEW]} "
          f"held out of the HAR CNN's training, learnt from k windows of subjects 9-10", flush=True)
    wrows = []
    for k in (5, 10):
        w = ncm_watch.run(SEEDS, shots=k, echo=echo)
        out[f"ncm_watch{k}"] = w
        for who in ("device", "numpy", "torch"):
            wrows.append([f"{k}-shot", who, _pct(w[who]), _pct(w[who + "_old"]), _pct(w[who + "_new"]),
                          str(w["same_predictions"]) if who == "device" else ""])
    print(ex.table(wrows, ["shots", "", "all %", "old activities %", "new activity %", "same predictions"]))
    print(f"old activities: {ncm_watch.OLD_SHOTS} pretraining windows each; test: the other windows of "
          f"subjects 9-10 ({out['ncm_watch5']['seeds'][SEEDS[0]]['n_test']}, "
          f"{out['ncm_watch5']['seeds'][SEEDS[0]]['n_test_new']} of the new activity)")
    gaps = [abs(n["acc"] - n["numpy"]), abs(n10["acc"] - n10["numpy"])]
    gaps += [abs(out[f"ncm_watch{k}"]["device"] - out[f"ncm_watch{k}"]["numpy"]) for k in (5, 10)]
    ncm_gap = max(gaps) * 100
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

    print("\n== forward-only training of the last two layers, Fashion-MNIST -> MNIST", flush=True)
    z = zo.run(SEEDS, ("zo", "spsa") if args.no_hybrid else ("zo", "spsa", "hybrid"), echo=echo)
    out["zo"] = z
    label = {"zo": "activity perturbation, both layers (forward only)",
             "spsa": "SPSA on the weights, both layers (forward only)",
             "hybrid": "hybrid: SPSA fc1, backprop fc2"}
    rows = [[label[name], _pct(m["device"]), _pct(m["torch"]), f"{m['parity']:.2f}", f"{m['gap']:.2f}",
             f"{m['gap_device_bp']:.2f}", f"{m['gap_torch_bp']:.2f}", str(m["train_heap"]),
             str(m["ram_saved"])] for name, m in z["modes"].items()]
    rows.append(["backprop, both layers", _pct(z["backprop_device"]), _pct(z["backprop_torch"]), "", "", "",
                 "", str(z["bp_heap"]), ""])
    print(ex.table(rows, ["method", "device %", "torch same method %", "parity (pts)", "gap (pts)",
                          "to device bp", "to torch bp", "train heap B", "RAM saved B"]))
    zc, sc = z["cfg"]["zo"], z["cfg"]["spsa"]
    print(f"budget: {z['epochs']} epochs of {z['n_train']} images, batch {z['batch']} (every method); "
          f"activity perturbation: {zc['queries']} Hadamard rows a sample, SGD {zc['bp_lr']} momentum "
          f"{zc['momentum']}, eps {zo.EPS} output quanta; SPSA: {sc['queries']} queries a batch, lr "
          f"{sc['lr_sched']} by epoch, eps {zo.EPS}; before training {_pct(z['modes']['zo']['before'])} %")

    print("\n== adapting with less: MemFLoRA, test-time adaptation, QScheduler, the order boundary",
          flush=True)
    mf = less.memflora(SEEDS, echo=echo)
    tt = less.tta(SEEDS, echo=echo)
    qs = less.qsched(SEEDS, echo=echo)
    hy = less.hybrid(SEEDS, echo=echo)
    out["less"] = {"memflora": mf, "tta": tt, "qsched": qs, "hybrid": hy}
    md = less.markdown(mf, tt, qs, hy, SEEDS)
    print(md)
    less.write_doc(md)

    minutes = (time.perf_counter() - t_start) / 60
    out["minutes"] = minutes
    common.WORK.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, default=str)
    hyb = z["modes"].get("hybrid")
    print(f"\nncm vs PyTorch float32: {ncm_torch_gap:.2f} pts; time {minutes:.1f} min; numbers in {args.out}")
    print(f"one run a seed (order 0 of {mf['orders']} and {qs['orders']}): "
          f"memflora_gap={mf['gap_first']:.2f} qsched_gap={qs['gap_first']:.2f}")
    print(f"adapt-eval: lora_gap={lora_gap} lora_params={lora_params} ncm_5shot={_pct(n['acc'])} "
          f"ncm_gap={ncm_gap:.2f} replay_keep={_pct(r['keep'])} zo_gap={z['modes']['zo']['gap']:.2f}"
          f" zo_spsa_gap={z['modes']['spsa']['gap']:.2f}"
          + (f" zo_hybrid_gap={hyb['gap']:.2f}" if hyb else "")
          + f" memflora_gap={mf['gap']:.2f} memflora_act_saving={mf['act_saving']:.2f}"
          f" tta_gain={tt['gain']:.2f} tta_collapse={tt['collapse']} qsched_gap={qs['gap']:.2f}"
          f" hybrid_budget_ok={hy['ok']}/{hy['n']}")
    ok = ncm_gap <= 0.5 and r["keep"] > 0 and z["modes"]["zo"]["gap"] <= 3.0
    ok = ok and tt["collapse"] == 0 and hy["ok"] == hy["n"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
