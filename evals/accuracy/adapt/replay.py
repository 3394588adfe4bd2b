"""Replay against forgetting on the smartwatch data: the HAR CNN (pretrained on subjects 1-8)
learns subject 9, then subject 10 (each from its first windows, as `make train-eval`'s
personalisation), with and without a replay buffer of the inputs of the first trained layer.
Reported: subject 9's accuracy on its other windows after learning 10. PyTorch float32 does
the same sequence with the same kind of buffer (reservoir over the samples seen, k replayed
samples after each one)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from evals.accuracy.adapt.common import device, mtd
from evals.lib import datasets as ds
from evals.lib import experiments as ex
from evals.lib import refmodels as rm

FIRST, SECOND = 9, 10
WINDOWS = 40  # windows of each subject learnt (the personalisation protocol's)
CFG = {"layers": "last:2", "mode": "mixed", "lr": 0.05, "momentum": 0.9, "batch": 8, "epochs": 15,
       "schedule": "cosine"}
REPLAY = {"capacity": 40, "policy": "reservoir", "k": 1}


def _cosine(lr0: float, ep: int, n: int) -> float:
    return 0.5 * lr0 * (1.0 + float(np.cos(np.pi * ep / (n - 1)))) if n > 1 else lr0


def torch_run(module: torch.nn.Module, phases: list[tuple[np.ndarray, np.ndarray]], xt: np.ndarray,
              yt: np.ndarray, seed: int, replay: bool) -> list[float]:
    """The same sequence in PyTorch float32: SGD on the last two weighted layers (eval-mode BN);
    with replay, each sample is followed by k samples drawn from a reservoir buffer, all in the
    same mean-of-batch update (batch counted in samples, replayed ones included, as the device)."""
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = copy.deepcopy(module).float().eval()
    names = ex.trained_names(rm.get_har_model(progress=False).mtm, CFG["layers"])
    mods = dict(model.named_modules())
    for p in model.parameters():
        p.requires_grad_(False)
    params = [p for n in names for p in mods[n].parameters(recurse=False)]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.SGD(params, lr=CFG["lr"], momentum=CFG["momentum"])
    rng = np.random.default_rng(seed)
    buf: list[tuple[np.ndarray, int]] = []
    seen = 0
    accs = []
    for x, y in phases:
        for ep in range(CFG["epochs"]):
            for g in opt.param_groups:
                g["lr"] = _cosine(CFG["lr"], ep, CFG["epochs"])
            pending = 0
            opt.zero_grad()
            for i in rng.permutation(len(y)):
                items = [(x[i], int(y[i]))]
                if replay:
                    had = len(buf)
                    seen += 1
                    if had < REPLAY["capacity"]:
                        buf.append(items[0])
                    else:
                        j = int(rng.integers(seen))
                        if j < REPLAY["capacity"]:
                            buf[j] = items[0]
                    if had:
                        items += [buf[int(rng.integers(len(buf)))] for _ in range(REPLAY["k"])]
                for xi, yi in items:
                    loss = F.cross_entropy(model(torch.from_numpy(xi[None])), torch.tensor([yi]))
                    loss.backward()
                    pending += 1
                    if pending >= CFG["batch"]:
                        for p in params:
                            assert p.grad is not None
                            p.grad /= pending
                        opt.step()
                        opt.zero_grad()
                        pending = 0
            if pending:
                for p in params:
                    assert p.grad is not None
                    p.grad /= pending
                opt.step()
                opt.zero_grad()
        accs.append(ex.float_acc(model, xt, yt))
    return accs


def run(seeds: list[int], echo: bool = False) -> dict[str, Any]:
    ref = rm.get_har_model(progress=False)
    w = ds.watch_windows()
    _, held = ds.watch_split(w)
    parts = {}
    for subj in (FIRST, SECOND):
        idx = held[w.subject[held] == subj]
        idx = idx[np.argsort(w.order[idx])]
        parts[subj] = (idx[:WINDOWS], idx[WINDOWS:])
    files = [mtd(f"replay_s{s}", ex.quantize(ref.mtm, w.x[parts[s][0]]), w.y[parts[s][0]])
             for s in (FIRST, SECOND)]
    rest = parts[FIRST][1]
    test = mtd(f"replay_s{FIRST}_rest", ex.quantize(ref.mtm, w.x[rest]), w.y[rest])
    res: dict[str, Any] = {"seeds": {}}
    for seed in seeds:
        r: dict[str, Any] = {}
        for tag, rp in (("without", None), ("with", {**REPLAY, "seed": seed})):
            cfg = {"kind": "replay", "model": str(ref.mtm), **CFG, "seed": seed,
                   "phases": [str(f) for f in files],
                   "test": str(test), "replay": rp}
            d = device(cfg, f"replay_{tag}_s{seed}", echo)
            t = torch_run(ref.model, [(w.x[parts[s][0]], w.y[parts[s][0]]) for s in (FIRST, SECOND)],
                          w.x[rest], w.y[rest], seed, rp is not None)
            r[tag] = {"device": d["acc_after"], "torch": t, "replay_bytes": d["replay_bytes"]}
        r["keep"] = r["with"]["device"][1] - r["without"]["device"][1]
        r["torch_keep"] = r["with"]["torch"][1] - r["without"]["torch"][1]
        res["seeds"][seed] = r
        if echo:
            print(f"  replay seed {seed}: subject {FIRST} after {FIRST}/{SECOND}: without "
                  f"{r['without']['device']} with {r['with']['device']} "
                  f"(torch without {r['without']['torch']} "
                  f"with {r['with']['torch']})", flush=True)
    s = list(res["seeds"].values())
    for k in ("keep", "torch_keep"):
        res[k] = float(np.mean([v[k] for v in s]))
    for tag in ("without", "with"):
        res[tag] = float(np.mean([v[tag]["device"][1] for v in s]))
        res[f"torch_{tag}"] = float(np.mean([v[tag]["torch"][1] for v in s]))
        res[f"{tag}_before"] = float(np.mean([v[tag]["device"][0] for v in s]))
    res["replay_bytes"] = s[0]["with"]["replay_bytes"]
    return res
