"""`make train-eval`: on-device training results on real data, next to PyTorch float32.

Runs, each as the device would (the real host `micropython`, python_lib + the native module)
and with the same protocol in PyTorch float32:

a. transfer: Fashion-MNIST CNN fine-tuned on MNIST (4,000 / 1,000), last 1 and last 2 layers,
   modes int8 and mixed;
b. scratch: a small CNN trained from random init on scikit-learn digits;
c. personalisation: the smartwatch HAR CNN adapted on a held-out subject's first windows;
d. sparse: DynamicSparse lambda_min 0.5 and 0.1 against dense on (a), backward time side by side;
plus (a) last-2 inside `micropython -X heapsize=256k`.
e. (opt-in, `--fold`, only this): (a) with all layers, mixed, batch 16: the gradient sums against
   the batch folded into the momentum (Trainer sums=False), float32 and bfloat16 momentum, seeds 1-3.
f. (opt-in, `--state`, only this): (a), (b) and (c) with the float32 and the bfloat16 optimiser
   state (SGD(state='bf16')), 5 seeds, the gaps to PyTorch side by side (docs/memory.md).

Ends with one line:
`train-eval: seeds=5 transfer_int8_gap=G1 transfer_mixed_gap=G2 scratch_gap=G3 har_gain=H
sparse01_kept=K heap256k=ok` (on one line): gaps in accuracy points, PyTorch minus device,
mean over the seeds (the largest over the configurations); the tables show each mean with
its standard deviation and range. The line holds no time, so it is the same on every
machine of this kind (models shipped in evals/models, PyTorch on one thread).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from evals.lib import datasets as ds
from evals.lib import experiments as ex
from evals.lib import refmodels as rm
from evals.lib import transfer_model as tm
from microtrain_tools import convert as cv
from microtrain_tools.mtd import write_mtd

WORK = ex.ROOT / "build" / "train_eval"

# (a) transfer protocol, shared by device and PyTorch; the step size is PyTorch's, from a sweep of
# the PyTorch side alone (5 seeds each, last:2 and last:1, over 0.005 / 0.01 / 0.02).
# At 0.02 (used before) momentum SGD kills most of fc1's ReLU units in PyTorch itself, so
# last:2 results there hinge on which units die and vary widely with the sample order.
# 0.01 is the best for last:1 and stable for last:2.
TRANSFER = ex.Protocol(lr=0.01, momentum=0.9, batch=16, epochs=5, schedule="cosine", seed=1)
# Every configuration runs once per seed (device: shuffle order and stochastic rounding; PyTorch:
# shuffle order; scratch: also the random init); results are means, with the spread over seeds.
SEEDS = (1, 2, 3, 4, 5)


def _pct(v: float) -> str:
    return f"{100 * v:.2f}"


def spread(vals: list[float]) -> str:
    """Mean +- sample standard deviation [min..max] of accuracies, in points."""
    a = 100 * np.asarray(vals, dtype=np.float64)
    sd = float(a.std(ddof=1)) if len(a) > 1 else 0.0
    return f"{a.mean():.2f} +- {sd:.2f} [{a.min():.2f}..{a.max():.2f}]"


class Data:
    """The MNIST transfer data as float arrays and .mtd files for a model's input quantisation."""

    def __init__(self, model_file: Path, work: Path, n_train: int | None = None,
                 n_test: int | None = None) -> None:
        xtr, ytr, xte, yte = ds.mnist5k_split(seed=0)
        if n_train:
            xtr, ytr = xtr[:n_train], ytr[:n_train]
        if n_test:
            xte, yte = xte[:n_test], yte[:n_test]
        self.xtr, self.ytr, self.xte, self.yte = xtr, ytr, xte, yte
        work.mkdir(parents=True, exist_ok=True)
        self.train = work / "mnist_train.mtd"
        self.test = work / "mnist_test.mtd"
        write_mtd(self.train, ex.quantize(model_file, xtr), ytr)
        write_mtd(self.test, ex.quantize(model_file, xte), yte)


def transfer(configs: list[tuple[str, str]], work: Path = WORK, epochs: int | None = None,
             n_train: int | None = None, n_test: int | None = None, echo: bool = True,
             sparse: list[float] | None = None, seeds: tuple[int, ...] = (1,),
             schedule: str | None = None, state: str = "f32", torch_too: bool = True) -> dict[str, Any]:
    """(a) and (d). configs: [(layers spec, mode)]; sparse: lambda_min values run on configs[0]
    (seed 1). Each configuration runs once per seed (the shuffle order on the device, the
    shuffle and init order in PyTorch); accuracies are the means over the seeds. epochs and
    schedule replace the protocol's (on both sides); state: the device optimiser's state type
    (torch_too False: no PyTorch runs)."""
    ref = tm.get_model()
    data = Data(ref.mtm, work, n_train, n_test)
    p = ex.Protocol(**{**TRANSFER.__dict__, "epochs": epochs or TRANSFER.epochs,
                       "schedule": schedule or TRANSFER.schedule})
    out: dict[str, Any] = {"device": {}, "torch": {}, "sparse": {}, "seeds": list(seeds)}
    out["frozen_float_acc"] = ex.float_acc(ref.model, data.xte, data.yte)
    for spec, mode in configs:
        runs = []
        for seed in seeds:
            tag = f"transfer_{spec.replace(':', '')}_{mode}_s{seed}" + ("" if state == "f32" else f"_{state}")
            cfg = p.device_cfg(ref.mtm, data.train, data.test, layers=spec, mode=mode, seed=seed,
                               log=str(work / f"{tag}.jsonl"), **({} if state == "f32" else {"state": state}))
            runs.append(ex.run_device(cfg, work, tag, echo=echo))
        d = dict(runs[0])
        d["accs"] = [r["acc"] for r in runs]
        d["acc"] = float(np.mean(d["accs"]))
        out["device"][(spec, mode)] = d
        if torch_too and spec not in out["torch"]:
            names = ex.trained_names(ref.mtm, spec)
            accs = [ex.torch_finetune(ref.model, names, data.xtr, data.ytr, data.xte, data.yte,
                                      ex.Protocol(**{**p.__dict__, "seed": seed}))["acc"] for seed in seeds]
            out["torch"][spec] = {"acc": float(np.mean(accs)), "accs": accs}
    for lam in sparse or []:
        spec, mode = configs[0]
        tag = f"sparse_{lam:g}"
        cfg = p.device_cfg(ref.mtm, data.train, data.test, layers=spec, mode=mode, seed=seeds[0],
                           sparse={"kind": "dynamic", "lambda_min": lam, "lambda_max": 1.0})
        out["sparse"][lam] = ex.run_device(cfg, work, tag, echo=echo)
    return out


def sparse_deeper(work: Path = WORK, echo: bool = True) -> dict[str, dict[str, Any]]:
    """(d) on last:3 int8: dense, lambda_min 0.5 and 0.1 (seed 1)."""
    ref = tm.get_model()
    data = Data(ref.mtm, work)
    out = {}
    for label, sp in (("dense", None), ("lambda_min=0.5", 0.5), ("lambda_min=0.1", 0.1)):
        cfg = TRANSFER.device_cfg(ref.mtm, data.train, data.test, layers="last:3", mode="int8",
                                  sparse=None if sp is None else {"kind": "dynamic", "lambda_min": sp,
                                                                  "lambda_max": 1.0})
        out[label] = ex.run_device(cfg, work, f"sparse3_{label.replace('=', '')}", echo=echo)
    return out


def fold(work: Path = WORK, echo: bool = True, seeds: tuple[int, ...] = (1, 2, 3)) -> dict[str, list[float]]:
    """(e, opt-in: --fold) The transfer CNN, all layers, mixed, SGD momentum, batch 16 ((a)'s
    protocol): the gradient sums (sums=True) against the batch folded into the momentum
    (sums=False: each gradient / 16 into v, no sums; docs/memory.md), and the same fold into a
    bfloat16 momentum (SGD(state='bf16'), sums=False: each sample's sum rounded to bfloat16;
    docs/numerics.md), the same samples and orders per seed. Held-out accuracy per seed."""
    ref = tm.get_model()
    data = Data(ref.mtm, work)
    out: dict[str, list[float]] = {}
    for key, sums, state in (("sums", True, "f32"), ("fold", False, "f32"), ("fold_bf16", False, "bf16")):
        accs = []
        for seed in seeds:
            tag = f"fold_all_mixed_sums{int(sums)}_s{seed}" + ("" if state == "f32" else f"_{state}")
            cfg = TRANSFER.device_cfg(ref.mtm, data.train, data.test, layers="all", mode="mixed", seed=seed,
                                      sums=sums, **({} if state == "f32" else {"state": state}))
            accs.append(ex.run_device(cfg, work, tag, echo=echo)["acc"])
        out[key] = accs
    return out


def transfer_table(res: dict[str, Any]) -> str:
    rows = []
    for (spec, mode), d in res["device"].items():
        t = res["torch"][spec]
        gaps = [ta - da for ta, da in zip(t["accs"], d["accs"], strict=True)]
        rows.append([spec, mode, spread(d["accs"]), spread(t["accs"]), spread(gaps),
                     f"{d['train_s']:.0f}", f"{d['heap_peak'] // 1024}"])
    return ex.table(rows, ["layers", "mode", "device acc % (mean +- sd [min..max])", "torch fp32 acc %",
                           "gap (pts, per seed)", "device s/run", "live heap KiB"])


class ScratchCNN(nn.Module):
    """8x8 digits -> 10: conv3x3(8)-relu, conv3x3/2(16)-relu, flatten 4x4x16, linear 10."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(4 * 4 * 16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.fc(torch.flatten(x, 1))


SCRATCH = ex.Protocol(layers="all", mode="float32", lr=0.02, momentum=0.9, batch=8, epochs=10,
                      schedule="cosine", seed=1)


def scratch(work: Path = WORK, echo: bool = True, epochs: int | None = None,
            seeds: tuple[int, ...] = (1,), state: str = "f32", torch_too: bool = True) -> dict[str, Any]:
    """(b): random-init CNN trained fully on the device vs the same init trained in PyTorch, once per
    seed (seed s: torch init seed s - 1, shuffle seed s on both sides)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    y = d.target.astype(np.int64)
    perm = np.random.default_rng(0).permutation(len(y))
    x, y = x[perm], y[perm]
    xtr, ytr, xte, yte = x[:1400], y[:1400], x[1400:], y[1400:]
    work.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"device": [], "torch": []}
    for seed in seeds:
        torch.manual_seed(seed - 1)
        init = ScratchCNN().eval()
        mfile = work / f"scratch_init_s{seed}.mtm"
        # activation scales stay fixed on the device: calibrate the random init with headroom to grow
        # and give the logits the range a trained classifier needs
        cv.convert_to_file(init, xtr[:512], mfile, progress=False, headroom=8.0, ranges={"fc": (-16.0, 16.0)})
        tr, te = work / f"digits_train_s{seed}.mtd", work / f"digits_test_s{seed}.mtd"
        write_mtd(tr, ex.quantize(mfile, xtr), ytr)
        write_mtd(te, ex.quantize(mfile, xte), yte)
        p = ex.Protocol(**{**SCRATCH.__dict__, "seed": seed, **({"epochs": epochs} if epochs else {})})
        tag = f"scratch_s{seed}" + ("" if state == "f32" else f"_{state}")
        cfg = p.device_cfg(mfile, tr, te, log=str(work / f"{tag}.jsonl"),
                           **({} if state == "f32" else {"state": state}))
        out["device"].append(ex.run_device(cfg, work, tag, echo=echo))
        if torch_too:
            names = ex.trained_names(mfile, "all")
            out["torch"].append(ex.torch_finetune(init, names, xtr, ytr, xte, yte, p))
    return out


HAR_ADAPT = ex.Protocol(layers="last:2", mode="mixed", lr=0.05, momentum=0.9, batch=8, epochs=15,
                        schedule="cosine", seed=1)
HAR_ADAPT_WINDOWS = 40  # first windows of the held-out subject used for adaptation


def personalise(work: Path = WORK, echo: bool = True, seeds: tuple[int, ...] = (1,), state: str = "f32",
                torch_too: bool = True) -> dict[str, Any]:
    """(c): HAR CNN pretrained on 8 subjects, adapted on each held-out subject's first windows
    (once per seed: the shuffle order on both sides)."""
    ref = rm.get_har_model()
    w = ds.watch_windows()
    _, held = ds.watch_split(w)
    res: dict[str, Any] = {"subjects": {}}
    for subj in sorted(set(int(s) for s in w.subject[held])):
        idx = held[w.subject[held] == subj]
        idx = idx[np.argsort(w.order[idx])]
        a, b = idx[:HAR_ADAPT_WINDOWS], idx[HAR_ADAPT_WINDOWS:]
        tr, te = work / f"har_s{subj}_adapt.mtd", work / f"har_s{subj}_rest.mtd"
        work.mkdir(parents=True, exist_ok=True)
        write_mtd(tr, ex.quantize(ref.mtm, w.x[a]), w.y[a])
        write_mtd(te, ex.quantize(ref.mtm, w.x[b]), w.y[b])
        names = ex.trained_names(ref.mtm, HAR_ADAPT.layers)
        devs, tchs = [], []
        for seed in seeds:
            p = ex.Protocol(**{**HAR_ADAPT.__dict__, "seed": seed})
            st = {} if state == "f32" else {"state": state}
            devs.append(ex.run_device(p.device_cfg(ref.mtm, tr, te, eval_before=True, **st), work,
                                      f"har_s{subj}_seed{seed}" + ("" if state == "f32" else f"_{state}"),
                                      echo=echo))
            if torch_too:
                tchs.append(ex.torch_finetune(ref.model, names, w.x[a], w.y[a], w.x[b], w.y[b], p)["acc"])
        res["subjects"][subj] = {"device": devs, "torch": tchs,
                                 "torch_frozen": ex.float_acc(ref.model, w.x[b], w.y[b]), "n_rest": len(b)}
    return res


def state_compare(echo: bool = True) -> int:
    """(f, opt-in: --state) The float32 and the bfloat16 optimiser state on (a), (b) and (c): each
    device configuration with both, 5 seeds, the gaps to PyTorch (the same runs) side by side."""
    print("== (f) optimiser state: float32 vs bfloat16 (SGD momentum, gradient sums)", flush=True)
    rows = []
    cfgs = [("last:2", "int8"), ("last:1", "int8"), ("last:1", "mixed"), ("last:2", "mixed")]
    f = transfer(cfgs, echo=echo, seeds=SEEDS)
    h = transfer(cfgs, echo=echo, seeds=SEEDS, state="bf16", torch_too=False)
    gaps: dict[str, list[float]] = {"f32": [], "bf16": []}
    for key in cfgs:
        t = f["torch"][key[0]]["accs"]
        row = [f"(a) transfer {key[0]} {key[1]}"]
        for name, res in (("f32", f), ("bf16", h)):
            d = res["device"][key]["accs"]
            g = [ta - da for ta, da in zip(t, d, strict=True)]
            gaps[name].append(100 * float(np.mean(g)))
            row += [spread(d), spread(g)]
        rows.append(row + [spread([a - b for a, b in zip(h["device"][key]["accs"], f["device"][key]["accs"],
                                                         strict=True)])])
    sf = scratch(echo=echo, seeds=SEEDS)
    sh = scratch(echo=echo, seeds=SEEDS, state="bf16", torch_too=False)
    t = [r["acc"] for r in sf["torch"]]
    row = ["(b) scratch all float32"]
    for name, res in (("f32", sf), ("bf16", sh)):
        d = [r["acc"] for r in res["device"]]
        g = [ta - da for ta, da in zip(t, d, strict=True)]
        gaps[name].append(100 * float(np.mean(g)))
        row += [spread(d), spread(g)]
    rows.append(row + [spread([a["acc"] - b["acc"] for a, b in zip(sh["device"], sf["device"],
                                                                    strict=True)])])
    cf = personalise(echo=echo, seeds=SEEDS)
    ch = personalise(echo=echo, seeds=SEEDS, state="bf16", torch_too=False)
    for subj, r in cf["subjects"].items():
        t = r["torch"]
        row = [f"(c) HAR subject {subj} last:2 mixed"]
        for name, res in (("f32", cf), ("bf16", ch)):
            d = [x["acc"] for x in res["subjects"][subj]["device"]]
            g = [ta - da for ta, da in zip(t, d, strict=True)]
            gaps[name].append(100 * float(np.mean(g)))
            row += [spread(d), spread(g)]
        rows.append(row + [spread([a["acc"] - b["acc"] for a, b in zip(ch["subjects"][subj]["device"],
                                                                       r["device"], strict=True)])])
    print(ex.table(rows, ["configuration", "device f32 %", "gap f32 (pts)", "device bf16 %", "gap bf16 (pts)",
                          "bf16 - f32 (pts)"]))
    print(f"train-eval state: seeds={len(SEEDS)} max_gap_f32={max(gaps['f32']):.2f} "
          f"max_gap_bf16={max(gaps['bf16']):.2f} "
          f"max_bf16_minus_f32={max(b - a for a, b in zip(gaps['f32'], gaps['bf16'], strict=True)):.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.accuracy.train_eval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quiet", action="store_true", help="do not echo the device's progress lines")
    ap.add_argument("--out", default=str(WORK / "results.json"), help="where to write all numbers (JSON)")
    ap.add_argument("--fold", action="store_true",
                    help="only (e): transfer all layers, mixed, batch 16, gradient sums against the batch "
                         "folded into the momentum (Trainer sums=False), float32 and bfloat16, seeds 1-3")
    ap.add_argument("--state", action="store_true",
                    help="only (f): (a), (b), (c) with the float32 and the bfloat16 optimiser state, 5 seeds")
    args = ap.parse_args(argv)
    echo = not args.quiet
    if args.state:
        return state_compare(echo)
    if args.fold:
        print("== (e) transfer all layers, mixed, SGD momentum, batch 16: sums=True vs False", flush=True)
        e = fold(echo=echo)
        print(ex.table([["sums=True (gradient sums)", spread(e["sums"])],
                        ["sums=False (batch folded into the momentum)", spread(e["fold"])],
                        ["sums=False, bf16 (folded into a bfloat16 momentum)", spread(e["fold_bf16"])],
                        ["difference (fold - sums, per seed)",
                         spread([f - s for f, s in zip(e["fold"], e["sums"], strict=True)])],
                        ["difference (fold bf16 - fold, per seed)",
                         spread([h - f for h, f in zip(e["fold_bf16"], e["fold"], strict=True)])]],
                       ["Trainer", "held-out acc % (mean +- sd [min..max])"]))
        trip = enumerate(zip(e["sums"], e["fold"], e["fold_bf16"], strict=True))
        print("train-eval fold: " + " ".join(f"sums_s{i + 1}={_pct(a)} fold_s{i + 1}={_pct(b)} "
                                             f"fold_bf16_s{i + 1}={_pct(c)}" for i, (a, b, c) in trip))
        return 0
    summary: dict[str, Any] = {}

    print("== (a) transfer Fashion-MNIST -> MNIST, and (d) sparse updates", flush=True)
    a = transfer([("last:2", "int8"), ("last:1", "int8"), ("last:1", "mixed"), ("last:2", "mixed")],
                 echo=echo, sparse=[0.5, 0.1], seeds=SEEDS)
    print(transfer_table(a))
    gaps_int8 = [100 * (a["torch"][s]["acc"] - d["acc"]) for (s, m), d in a["device"].items() if m == "int8"]
    gaps_mixed = [100 * (a["torch"][s]["acc"] - d["acc"])
                  for (s, m), d in a["device"].items() if m == "mixed"]
    dense = a["device"][("last:2", "int8")]
    rows = [["dense", _pct(dense["accs"][0]), f"{dense['bwd_us_per_sample']:.0f}", "1.00", "1.00"]]
    for lam, d in a["sparse"].items():
        rows.append([f"lambda_min={lam:g}", _pct(d["acc"]), f"{d['bwd_us_per_sample']:.0f}",
                     f"{dense['bwd_us_per_sample'] / d['bwd_us_per_sample']:.2f}",
                     f"{d.get('kept_frac', 1):.2f}"])
    print("\n(d) sparse updates on (a) last:2 int8 (backward time per sample, same run of this script)")
    print(ex.table(rows, ["update", "acc %", "backward us/sample", "speed-up", "channels kept"]))
    # the last two layers are small linears (their backward is mostly call overhead);
    # with the pointwise conv trained too (last:3) the skipped work is larger. These are wall
    # times of separate processes on a shared machine: shown, not judged (the judged sparse
    # figure is `make bench-mcu`'s sparse01_bwd, from exact instruction counts)
    deeper = sparse_deeper(echo=echo)
    rows = []
    for label, d in deeper.items():
        rows.append([label, _pct(d["acc"]), f"{d['bwd_us_per_sample']:.0f}",
                     f"{deeper['dense']['bwd_us_per_sample'] / d['bwd_us_per_sample']:.2f}",
                     f"{d.get('kept_frac', 1):.2f}"])
    print("\n(d) the same with last:3 int8 (pointwise conv + two linears), seed 1")
    print(ex.table(rows, ["update", "acc %", "backward us/sample", "speed-up", "channels kept"]))

    print("\n== (b) from scratch on scikit-learn digits", flush=True)
    b = scratch(echo=echo, seeds=SEEDS)
    dacc, tacc = [r["acc"] for r in b["device"]], [r["acc"] for r in b["torch"]]
    g3 = 100 * float(np.mean(tacc) - np.mean(dacc))
    print(ex.table([["all (float32 master)", spread(dacc), spread(tacc),
                     spread([ta - da for ta, da in zip(tacc, dacc, strict=True)])]],
                   ["layers", "device acc %", "torch fp32 acc %", "gap (pts, per seed)"]))

    print("\n== (c) personalisation on held-out smartwatch subjects", flush=True)
    c = personalise(echo=echo, seeds=SEEDS)
    rows = []
    gains = []
    for subj, r in c["subjects"].items():
        before = r["device"][0]["acc_before"]  # the frozen model: the same for every seed
        g = [d["acc"] - before for d in r["device"]]
        gains += g
        rows.append([subj, r["n_rest"], _pct(before), spread([d["acc"] for d in r["device"]]), spread(g),
                     _pct(r["torch_frozen"]), spread(r["torch"])])
    print(ex.table(rows, ["subject", "test windows", "frozen int8 %", "adapted device %", "gain (pts)",
                          "torch frozen %", "torch adapted %"]))
    har_gain = 100 * float(np.mean(gains))

    print("\n== (a) last:2 int8 inside micropython -X heapsize=256k", flush=True)
    ref = tm.get_model()
    data = Data(ref.mtm, WORK)
    # one epoch with plain SGD: momentum adds a float32 copy of the trained weights (another
    # 38 KB), which a 256 KB heap of the 64-bit host port cannot hold next to the rest
    cfg = TRANSFER.device_cfg(ref.mtm, data.train, data.test, layers="last:2", mode="int8", epochs=1,
                              momentum=0.0)
    try:
        h = ex.run_device(cfg, WORK, "heap256k", heapsize="256k", echo=echo)
        heap_ok = "ok"
        print(f"heap256k: last:2 int8, plain SGD, 1 epoch: acc {_pct(h['acc'])} %, "
              f"largest live heap {h['heap_peak']} bytes")
    except RuntimeError as e:
        heap_ok = "fail"
        print(f"heap256k: {e}")

    summary = {"transfer": {f"{s}/{m}": d for (s, m), d in a["device"].items()},
               "transfer_torch": {s: t["acc"] for s, t in a["torch"].items()},
               "sparse": {str(k): v for k, v in a["sparse"].items()},
               "sparse_last3": deeper,
               "scratch": {"device": b["device"], "torch": tacc},
               "har": {str(k): v for k, v in c["subjects"].items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1, default=str))
    g1, g2 = max(gaps_int8), max(gaps_mixed)
    kept01 = a["sparse"][0.1].get("kept_frac", 1.0)
    # deterministic on every machine of this kind: no times in this line (the sparse speed-up,
    # measured in seconds, is in the table above; `make bench-mcu` counts instructions)
    print(f"train-eval: seeds={len(SEEDS)} transfer_int8_gap={g1:.2f} transfer_mixed_gap={g2:.2f} "
          f"scratch_gap={g3:.2f} har_gain={har_gain:.2f} sparse01_kept={kept01:.3f} heap256k={heap_ok}")
    ok = g1 <= 2.0 and g2 <= 1.0 and g3 <= 2.0 and har_gain >= 5.0 and heap_ok == "ok"
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
