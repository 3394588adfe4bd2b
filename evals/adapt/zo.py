"""Forward-only (zeroth-order) training on the Fashion-MNIST -> MNIST transfer: the int8 SPSA
of microtrain.zo on the device, next to PyTorch float32 doing the same SPSA (the same
xorshift32 sign stream, perturbations of eps weight quanta (eps * the layer's per-channel
int8 scale), the same step lr * (L+ - L-) / (2 eps) quanta along -z, without rounding), and
to backprop (PyTorch, the same layers and sample budget).

Modes: "zo" (both of the last two layers by SPSA) and "hybrid" (ElasticZO: fc1 by SPSA,
fc2 by backprop, on the gradients of both perturbed passes)."""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import NDArray

from evals import datasets as ds
from evals import experiments as ex
from evals import transfer_model as tm
from evals.adapt.common import device, mtd
from microtrain_tools import mtm
from microtrain_tools.reference import adapt_ref as ar
from microtrain_tools.reference import oracle

N_TRAIN = 2000  # MNIST-5k training images used (the sample budget: EPOCHS passes over them)
EPOCHS = 2
BATCH = 16
EPS = 4  # weight quanta: +-1 quantum is lost in the int8 forward's rounding
MODES: dict[str, dict[str, Any]] = {
    "zo": {"train": "last:2", "bp": None, "lr": 50.0},
    "hybrid": {"train": "last:2", "bp": "last:1", "lr": 100.0, "bp_lr": 0.02, "momentum": 0.9},
}


def _signs(n: int, r: int) -> tuple[NDArray[np.float32], int]:
    z, r = oracle.zo_signs(n, r)
    return z.astype(np.float32), r


def torch_spsa(module: torch.nn.Module, m: mtm.Model, mode: dict[str, Any], x: NDArray[np.float32],
               y: NDArray[np.int64], seed: int) -> torch.nn.Module:
    """The device's SPSA in float32: zeroth-order on fc1 (and fc2 without bp), SGD on fc2 with bp."""
    torch.set_num_threads(1)
    model = copy.deepcopy(module).float().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    names = {ly.name: ly for ly in m.layers}
    zo_names = ["fc1"] if mode["bp"] else ["fc1", "fc2"]
    scales = {n: torch.from_numpy(m.data(m.tensors[names[n].weight].qscales).astype(np.float32))[:, None]
              for n in zo_names}
    mods = dict(model.named_modules())
    opt = None
    if mode["bp"]:
        head = mods["fc2"]
        for p in head.parameters():
            p.requires_grad_(True)
        opt = torch.optim.SGD(head.parameters(), lr=mode["bp_lr"], momentum=mode["momentum"])
    r = ar.seed_state(seed)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(EPOCHS):
        for s in range(0, len(y), BATCH):
            xb, yb = xt[s:s + BATCH], yt[s:s + BATCH]
            base = {n: mods[n].weight.detach().clone() for n in zo_names}
            zs = {}
            for n in zo_names:
                w = mods[n].weight
                z, r = _signs(w.numel(), r)
                zs[n] = torch.from_numpy(z).reshape(w.shape)
            losses = []
            if opt is not None:
                opt.zero_grad()
            for sign in (1.0, -1.0):
                for n in zo_names:
                    mods[n].weight.copy_(base[n] + sign * EPS * scales[n] * zs[n])
                loss = F.cross_entropy(model(xb), yb)
                if opt is not None:
                    (loss / 2).backward()
                losses.append(float(loss.detach()))
            delta = mode["lr"] * (losses[0] - losses[1]) / (2 * EPS)
            for n in zo_names:
                mods[n].weight.copy_(base[n] - delta * scales[n] * zs[n])
            if opt is not None:
                opt.step()
            r = ar.xorshift32(r)  # keeps the sign stream independent of the rounding draws
    return model


def torch_backprop(module: torch.nn.Module, x: NDArray[np.float32], y: NDArray[np.int64], seed: int
                   ) -> torch.nn.Module:
    """Backprop on fc1 and fc2 with the same samples, order and batch: SGD(0.02, momentum 0.9)."""
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = copy.deepcopy(module).float().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    mods = dict(model.named_modules())
    params = [p for n in ("fc1", "fc2") for p in mods[n].parameters()]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.SGD(params, lr=0.02, momentum=0.9)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(EPOCHS):
        for s in range(0, len(y), BATCH):
            opt.zero_grad()
            F.cross_entropy(model(xt[s:s + BATCH]), yt[s:s + BATCH]).backward()
            opt.step()
    return model


def run(seeds: list[int], modes: tuple[str, ...] = ("zo", "hybrid"), echo: bool = False) -> dict[str, Any]:
    ref = tm.get_model(progress=False)
    xtr, ytr, xte, yte = ds.mnist5k_split(seed=0)
    m = mtm.load(ref.mtm)
    test = mtd("zo_test", ex.quantize(ref.mtm, xte), yte)
    res: dict[str, Any] = {"modes": {}, "n_train": N_TRAIN, "epochs": EPOCHS, "batch": BATCH}
    bp = []
    for seed in seeds:
        # each seed: its own draw of the training images (order = the draw)
        idx = np.random.default_rng(seed).permutation(len(ytr))[:N_TRAIN]
        train = mtd(f"zo_train_s{seed}", ex.quantize(ref.mtm, xtr[idx]), ytr[idx])
        bp.append(ex.float_acc(torch_backprop(ref.model, xtr[idx], ytr[idx], seed), xte, yte))
        for name in modes:
            mode = MODES[name]
            t0 = time.perf_counter()
            d = device({"kind": "zo", "model": str(ref.mtm), **mode, "eps": EPS, "seed": seed, "batch": BATCH,
                        "epochs": EPOCHS, "train_mtd": str(train), "test": str(test), "mode": "mixed",
                        "bp_lr": mode.get("bp_lr", 0.0), "momentum": mode.get("momentum", 0.0)},
                       f"zo_{name}_s{seed}", echo)
            t = ex.float_acc(torch_spsa(ref.model, m, mode, xtr[idx], ytr[idx], seed), xte, yte)
            r = res["modes"].setdefault(name, {"seeds": {}})
            r["seeds"][seed] = {"device": d["acc"], "torch": t, "before": d["acc_before"],
                                "state_bytes": d["state_bytes"], "device_s": time.perf_counter() - t0}
            if echo:
                print(f"  zo {name} seed {seed}: device {d['acc_before']:.4f} -> {d['acc']:.4f}, "
                      f"torch SPSA {t:.4f}, "
                      f"torch backprop {bp[-1]:.4f}", flush=True)
    res["backprop"] = float(np.mean(bp))
    for r in res["modes"].values():
        s = list(r["seeds"].values())
        r["device"] = float(np.mean([v["device"] for v in s]))
        r["torch"] = float(np.mean([v["torch"] for v in s]))
        r["gap"] = abs(r["device"] - r["torch"]) * 100
        r["bp_gap"] = (res["backprop"] - r["device"]) * 100
        r["state_bytes"] = s[0]["state_bytes"]
    return res
