"""Prototype head on the smartwatch data: a held-out activity learnt on the device from k windows
by a HAR CNN trained without it (a new class added after deployment).

The base model: the HAR reference recipe (evals/lib/refmodels.py, HAR_CONFIG) trained on the
pretraining subjects' windows of every activity but ``NEW`` (its logit is never a target),
calibrated on those windows only, so the model never saw the activity. Per seed: the 6 old
activities' prototypes from ``OLD_SHOTS`` pretraining windows each, the new one's from k windows
of the held-out subjects (9, 10), all drawn by the seed; tested on every other window of subjects
9 and 10: accuracy on the old and on the new activity. The embedding is the global-average-pool
output (48 values). The same method runs on the device, in numpy on the oracle's int8 embeddings
(adapt_ref.ProtoRef) and in PyTorch float32 on the float model's pooled features."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import NDArray

from evals.accuracy.adapt.common import device, mtd
from evals.accuracy.adapt.ncm import torch_ncm
from evals.lib import datasets as ds
from evals.lib import experiments as ex
from evals.lib import refmodels as rm
from microtrain_tools import mtm
from microtrain_tools.reference import adapt_ref as ar
from microtrain_tools.reference import train_ref as tr

NEW = ds.WATCH_CLASSES.index("ROW")  # the held-out activity
OLD_SHOTS = 20  # pretraining windows per old activity (the prototypes shipped with the model)


def base_model(progress: bool = False) -> rm.RefModel:
    """The HAR CNN trained and calibrated without activity NEW (cached in build/models)."""
    cfg = replace(rm.HAR_CONFIG, recipe=f"{rm.HAR_CONFIG.recipe}-without-{ds.WATCH_CLASSES[NEW]}")
    w = ds.watch_windows()
    pre, _ = ds.watch_split(w)
    keep = pre[w.y[pre] != NEW]

    def train(model: torch.nn.Module) -> dict[str, Any]:
        losses = rm.train_classifier(model, w.x[keep], w.y[keep], cfg, "train har without " +
                                     ds.WATCH_CLASSES[NEW], augment=rm._window_jitter, progress=progress)
        return {"epoch_loss": [round(v, 4) for v in losses], "held_out_activity": ds.WATCH_CLASSES[NEW]}

    return rm.cached_model(f"har_rescnn_without_{ds.WATCH_CLASSES[NEW].lower()}", cfg, rm.HAR_CALIB,
                           rm.HarResCNN, train, lambda c: w.x[keep], rm.MODELS_DIR, False, progress)


def torch_embed(module: torch.nn.Module, x: NDArray[np.float32]) -> NDArray[np.float32]:
    """The float HAR CNN's (eval mode) global-average-pool output."""
    m = module.eval()
    with torch.no_grad():
        t = m.pool1(F.relu(m.conv1(torch.from_numpy(x))))
        f = F.relu(m.rbn1(m.res1(t)))
        f = m.rbn2(m.res2(f))
        t = m.pool2(F.relu(t + f))
        t = F.relu(m.bn3(m.conv3(t)))
        return torch.flatten(m.gap(t), 1).numpy()


def run(seeds: list[int], shots: int = 5, metric: str = "cosine", dtype: str = "int8",
        echo: bool = False) -> dict[str, Any]:
    ref = base_model()
    w = ds.watch_windows()
    pre, held = ds.watch_split(w)
    m = mtm.load(ref.mtm)
    layer_i = len(m.layers) - 2  # the global average pool, before the classifier
    layer_name = m.layers[layer_i].name
    out_t = m.layers[layer_i].output
    zp = m.tensors[out_t].zero_point
    oracle = tr.RefTrainer(m, "last:1")
    q = ex.quantize(ref.mtm, w.x)
    emb: dict[int, NDArray[np.int8]] = {}

    def embed(i: int) -> NDArray[np.int8]:
        if i not in emb:
            emb[i] = oracle.forward(q[i])[out_t]
        return emb[i]

    f_all = torch_embed(ref.model, w.x)
    res: dict[str, Any] = {"seeds": {}, "layer": layer_name, "new": ds.WATCH_CLASSES[NEW], "shots": shots}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        idx = [rng.choice(pre[w.y[pre] == c], OLD_SHOTS, replace=False) for c in range(7) if c != NEW]
        new_pool = held[w.y[held] == NEW]
        idx.append(rng.choice(new_pool, shots, replace=False))
        shot_idx = np.concatenate(idx)
        test_idx = np.setdiff1d(held, shot_idx)
        ys = w.y[shot_idx]
        yt = w.y[test_idx]
        shot_file = mtd(f"ncmw_shots{shots}_s{seed}", q[shot_idx], ys)
        test_file = mtd(f"ncmw_test{shots}_s{seed}", q[test_idx], yt)
        dev = device({"kind": "ncm", "model": str(ref.mtm), "layer": layer_name, "metric": metric,
                      "dtype": dtype, "shots": str(shot_file), "test": str(test_file)},
                     f"ncmw{shots}_s{seed}", echo)
        pr = ar.ProtoRef(zp, metric, dtype)
        for c in sorted(set(int(v) for v in ys)):
            pr.add_class(str(c), np.stack([embed(int(i)) for i in shot_idx[ys == c]]))
        ref_pred = np.array([int(pr.predict(embed(int(i)))) for i in test_idx])
        t_pred = torch_ncm(f_all[shot_idx], ys, f_all[test_idx], metric)
        d_pred = np.array(dev["preds"])
        new_t = yt == NEW
        r: dict[str, Any] = {}
        for name, p in (("device", d_pred), ("numpy", ref_pred), ("torch", t_pred)):
            ok = p == yt
            r[name], r[name + "_old"], r[name + "_new"] = (float(ok.mean()), float(ok[~new_t].mean()),
                                                           float(ok[new_t].mean()))
        r["same_predictions"] = bool((d_pred == ref_pred).all())
        r["n_test"] = len(yt)
        r["n_test_new"] = int(new_t.sum())
        res["seeds"][seed] = r
        if echo:
            print(f"  smartwatch ncm {shots}-shot seed {seed}: device {r['device']:.4f} "
                  f"(old {r['device_old']:.4f}, new {r['device_new']:.4f}), numpy {r['numpy']:.4f}, "
                  f"torch {r['torch']:.4f} (new {r['torch_new']:.4f}), same predictions "
                  f"{r['same_predictions']}", flush=True)
    s = list(res["seeds"].values())
    for k in ("device", "numpy", "torch"):
        for suf in ("", "_old", "_new"):
            res[k + suf] = float(np.mean([v[k + suf] for v in s]))
    res["same_predictions"] = all(v["same_predictions"] for v in s)
    return res
