"""Forward-only (zeroth-order) training on the Fashion-MNIST -> MNIST transfer (the last 2
layers, against backprop at the same sample budget, and the RAM it saves).

Every method sees the same samples: per seed, ``N_TRAIN`` MNIST training images (drawn by the
seed), ``EPOCHS`` passes in the same order, batches of ``BATCH``. A zeroth-order *query* is one
perturbation (two forward passes of the batch); more queries per batch cost forward passes, not
samples.

- "zo": both layers (fc1, fc2: 9.5k weights) by SPSA on the device (microtrain.zo, ``queries``
  updates per batch, a per-epoch lr schedule), next to PyTorch float32 doing the same SPSA (the same
  xorshift32 sign stream, perturbations of eps quanta (eps * the channel's int8 scale), the same step
  lr * (L+ - L-) / (2 eps) quanta along -z, the weights kept within +-127 quanta, without rounding).
- "hybrid" (ElasticZO): fc1 by SPSA, fc2 by backprop on the gradients of both perturbed passes: a
  forward-only *body*, not a forward-only method.
- backprop of both layers at the same budget: on the device (Trainer, int8, SGD 0.005 momentum 0.9;
  also the RAM reference) and in PyTorch float32 (the same optimiser).

``gap`` of a method = backprop minus the method on the device (pp, mean of the seeds; backprop
the better of the device's and PyTorch's means): the headline measure. ``parity`` = |device -
PyTorch doing the same method|. RAM: the heap the training
adds after one batch (model buffers excluded), method vs device backprop."""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import NDArray

from evals.accuracy.adapt.common import device, mtd
from evals.accuracy.adapt.ncm import torch_embed
from evals.lib import datasets as ds
from evals.lib import experiments as ex
from evals.lib import transfer_model as tm
from microtrain_tools import mtm
from microtrain_tools.reference import adapt_ref as ar
from microtrain_tools.reference import oracle

N_TRAIN = 2000  # MNIST-5k training images used (the sample budget: EPOCHS passes over them)
EPOCHS = 2
BATCH = 16
EPS = 4  # weight quanta: +-1 quantum is lost in the int8 forward's rounding
# backprop's SGD step: the best of a sweep over 0.002-0.05 for PyTorch on these seeds (larger
# steps diverge on some seeds), so that the methods are compared with a well-tuned backprop
BP = {"bp_lr": 0.005, "momentum": 0.9}
MODES: dict[str, dict[str, Any]] = {
    # activity perturbation (ZO(perturb="outputs")): fc1's 32 and fc2's 10 outputs along all 64
    # Hadamard rows per sample (128 forward passes of fc1-fc2 per sample), the estimate exact up to
    # the finite difference; the update is backprop's optimiser (SGD 0.005, momentum 0.9)
    "zo": {"train": "last:2", "bp": None, "perturb": "outputs", "queries": 64, "bp_lr": BP["bp_lr"],
           "momentum": BP["momentum"]},
    # 64 queries a batch (query averaging as in MeZO / DeepZero, here as sequential updates on the
    # batch) and a step size that drops by 3 after the first epoch: the best of a small sweep
    # (docs/adapt.md has its results: accuracy grows with the queries)
    "spsa": {"train": "last:2", "bp": None, "lr": 100.0, "queries": 64, "lr_sched": [150.0, 50.0]},
    "hybrid": {"train": "last:2", "bp": "last:1", "lr": 100.0, "queries": 1, "bp_lr": 0.02, "momentum": 0.9},
}


def _signs(n: int, r: int) -> tuple[NDArray[np.float32], int]:
    z, r = oracle.zo_signs(n, r)
    return z.astype(np.float32), r


def torch_spsa(module: torch.nn.Module, m: mtm.Model, mode: dict[str, Any], f: NDArray[np.float32],
               y: NDArray[np.int64], seed: int) -> torch.nn.Module:
    """The device's SPSA in float32 on the frozen body's features ``f``: zeroth-order on fc1 (and
    fc2 without bp), SGD on fc2 with bp; ``queries`` updates per batch, lr per epoch."""
    torch.set_num_threads(1)
    model = copy.deepcopy(module).float().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    names = {ly.name: ly for ly in m.layers}
    zo_names = ["fc1"] if mode["bp"] else ["fc1", "fc2"]
    scales = {n: torch.from_numpy(m.data(m.tensors[names[n].weight].qscales).astype(np.float32))[:, None]
              for n in zo_names}
    mods = dict(model.named_modules())

    def clamp(n: str, w: torch.Tensor) -> torch.Tensor:
        # the int8 weights' range (+-127 quanta of the channel): part of the method, which
        # stores the weights in int8 (without it the float weights run away at this lr)
        return torch.clamp(w, -127.0 * scales[n], 127.0 * scales[n])

    def head(x: torch.Tensor) -> torch.Tensor:
        return mods["fc2"](F.relu(mods["fc1"](x)))

    opt = None
    if mode["bp"]:
        for p in mods["fc2"].parameters():
            p.requires_grad_(True)
        opt = torch.optim.SGD(mods["fc2"].parameters(), lr=mode["bp_lr"], momentum=mode["momentum"])
    r = ar.seed_state(seed)
    xt, yt = torch.from_numpy(f), torch.from_numpy(y)
    for ep in range(EPOCHS):
        lr = mode["lr_sched"][ep] if mode.get("lr_sched") else mode["lr"]
        for s in range(0, len(y), BATCH):
            xb, yb = xt[s:s + BATCH], yt[s:s + BATCH]
            for _ in range(mode.get("queries", 1)):
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
                        mods[n].weight.copy_(clamp(n, base[n] + sign * EPS * scales[n] * zs[n]))
                    loss = F.cross_entropy(head(xb), yb)
                    if opt is not None:
                        (loss / 2).backward()
                    losses.append(float(loss.detach()))
                delta = lr * (losses[0] - losses[1]) / (2 * EPS)
                for n in zo_names:
                    mods[n].weight.copy_(clamp(n, base[n] - delta * scales[n] * zs[n]))
                if opt is not None:
                    opt.step()
                r = ar.xorshift32(r)  # keeps the sign stream independent of the rounding draws
    return model


def hadamard(rows: int, cols: int) -> NDArray[np.float32]:
    """h[k, i] = (-1)^popcount(k & i) (oracle.hadamard_signs)."""
    return np.stack([oracle.hadamard_signs(k, 0, cols) for k in range(rows)]).astype(np.float32)


def torch_outputs(module: torch.nn.Module, m: mtm.Model, mode: dict[str, Any], f: NDArray[np.float32],
                  y: NDArray[np.int64], seed: int) -> torch.nn.Module:
    """The device's activity perturbation in float32 on the frozen body's features ``f``: per
    sample, fc1's and fc2's outputs moved by +-eps quanta (eps * the output's int8 scale) along
    ``queries`` Hadamard rows times the sample's signs (the device's xorshift32 stream), the
    estimate (1 / q) sum_k (L+ - L-) / (2 eps) h_k z masked by fc1's ReLU, each layer's gradient
    the estimate times its input, SGD (the backprop settings)."""
    torch.set_num_threads(1)
    model = copy.deepcopy(module).float().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    names = {ly.name: ly for ly in m.layers}
    s1 = float(m.tensors[names["fc1"].output].scale)
    s2 = float(m.tensors[names["fc2"].output].scale)
    fc1, fc2 = model.fc1, model.fc2
    n1, n2 = fc1.out_features, fc2.out_features
    q = mode["queries"]
    rows = 1
    while rows < n1 + n2:
        rows <<= 1
    h = torch.from_numpy(hadamard(rows, n1 + n2)[:q])  # (q, 42)
    params = [fc1.weight, fc1.bias, fc2.weight, fc2.bias]
    opt = torch.optim.SGD(params, lr=mode["bp_lr"], momentum=mode["momentum"])
    r = ar.seed_state(seed)
    xt, yt = torch.from_numpy(f), torch.from_numpy(y)
    for _ in range(EPOCHS):
        for s in range(0, len(y), BATCH):
            xb, yb = xt[s:s + BATCH], yt[s:s + BATCH]
            b = len(yb)
            z = np.empty((b, n1 + n2), dtype=np.float32)
            for i in range(b):  # the device's order: per sample, fc1's signs then fc2's
                z[i, :n1], r = _signs(n1, r)
                z[i, n1:], r = _signs(n2, r)
            u = h[:, None, :] * torch.from_numpy(z)[None]  # (q, b, 42)
            pre = fc1(xb)
            a = F.relu(pre)
            losses = []
            for sg in (1.0, -1.0):
                lo = fc2(a[None] + sg * EPS * s1 * u[..., :n1]) + sg * EPS * s2 * u[..., n1:]
                ce = F.cross_entropy(lo.reshape(-1, n2), yb.repeat(q), reduction="none")
                losses.append(ce.reshape(q, b))
            c = (losses[0] - losses[1]) / (2 * EPS)
            g = (c[..., None] * u).sum(0) / q  # dL per output quantum, (b, 42)
            ga = g[:, :n1] / s1 * (pre > 0).float()
            gl = g[:, n1:] / s2
            fc1.weight.grad, fc1.bias.grad = ga.T @ xb / b, ga.mean(0)
            fc2.weight.grad, fc2.bias.grad = gl.T @ a / b, gl.mean(0)
            opt.step()
    return model


def torch_backprop(module: torch.nn.Module, x: NDArray[np.float32], y: NDArray[np.int64], seed: int
                   ) -> torch.nn.Module:
    """Backprop on fc1 and fc2 with the same samples, order and batch: SGD (BP)."""
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = copy.deepcopy(module).float().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    mods = dict(model.named_modules())
    params = [p for n in ("fc1", "fc2") for p in mods[n].parameters()]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.SGD(params, lr=BP["bp_lr"], momentum=BP["momentum"])
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(EPOCHS):
        for s in range(0, len(y), BATCH):
            opt.zero_grad()
            F.cross_entropy(model(xt[s:s + BATCH]), yt[s:s + BATCH]).backward()
            opt.step()
    return model


def _head_acc(model: torch.nn.Module, f: NDArray[np.float32], y: NDArray[np.int64]) -> float:
    with torch.no_grad():
        out = model.fc2(F.relu(model.fc1(torch.from_numpy(f))))
    return float((out.argmax(1).numpy() == y).mean())


def run(seeds: list[int], modes: tuple[str, ...] = ("zo", "hybrid"), echo: bool = False) -> dict[str, Any]:
    ref = tm.get_model(progress=False)
    xtr, ytr, xte, yte = ds.mnist5k_split(seed=0)
    m = mtm.load(ref.mtm)
    test = mtd("zo_test", ex.quantize(ref.mtm, xte), yte)
    f_te = torch_embed(ref.model, xte, "pool#3")
    res: dict[str, Any] = {"modes": {}, "n_train": N_TRAIN, "epochs": EPOCHS, "batch": BATCH,
                           "cfg": {k: MODES[k] for k in modes}, "seeds": {}}
    for seed in seeds:
        # each seed: its own draw of the training images (order = the draw)
        idx = np.random.default_rng(seed).permutation(len(ytr))[:N_TRAIN]
        train = mtd(f"zo_train_s{seed}", ex.quantize(ref.mtm, xtr[idx]), ytr[idx])
        common = {"model": str(ref.mtm), "train_mtd": str(train), "test": str(test), "seed": seed,
                  "batch": BATCH, "epochs": EPOCHS}
        t0 = time.perf_counter()
        bp_dev = device({"kind": "bp", **common, "train": "last:2", "mode": "int8", **BP},
                        f"zo_bp_s{seed}", echo)
        bp_t = ex.float_acc(torch_backprop(ref.model, xtr[idx], ytr[idx], seed), xte, yte)
        res["seeds"][seed] = {"bp_device": bp_dev["acc"], "bp_torch": bp_t, "bp_heap": bp_dev["train_heap"],
                              "bp_s": time.perf_counter() - t0}
        f_tr = torch_embed(ref.model, xtr[idx], "pool#3")
        for name in modes:
            mode = MODES[name]
            t0 = time.perf_counter()
            d = device({"kind": "zo", **common, **mode, "eps": EPS, "mode": "mixed",
                        "bp_lr": mode.get("bp_lr", 0.0), "momentum": mode.get("momentum", 0.0)},
                       f"zo_{name}_s{seed}", echo)
            dt = time.perf_counter() - t0
            same = torch_outputs if mode.get("perturb") == "outputs" else torch_spsa
            t = _head_acc(same(ref.model, m, mode, f_tr, ytr[idx], seed), f_te, yte)
            r = res["modes"].setdefault(name, {"seeds": {}})
            r["seeds"][seed] = {"device": d["acc"], "torch": t, "before": d["acc_before"],
                                "state_bytes": d["state_bytes"], "train_heap": d["train_heap"],
                                "device_s": dt}
            if echo:
                print(f"  {name} seed {seed}: device {d['acc_before']:.4f} -> {d['acc']:.4f}, "
                      f"torch same method {t:.4f}; backprop device {bp_dev['acc']:.4f}, torch {bp_t:.4f}",
                      flush=True)
    sv = list(res["seeds"].values())
    res["backprop_device"] = float(np.mean([v["bp_device"] for v in sv]))
    res["backprop_torch"] = float(np.mean([v["bp_torch"] for v in sv]))
    res["backprop"] = max(res["backprop_device"], res["backprop_torch"])  # the stricter reference
    res["bp_heap"] = int(max(v["bp_heap"] for v in sv))
    for r in res["modes"].values():
        s = list(r["seeds"].values())
        r["device"] = float(np.mean([v["device"] for v in s]))
        r["torch"] = float(np.mean([v["torch"] for v in s]))
        r["before"] = float(np.mean([v["before"] for v in s]))
        r["parity"] = abs(r["device"] - r["torch"]) * 100
        r["gap"] = (res["backprop"] - r["device"]) * 100
        r["gap_device_bp"] = (res["backprop_device"] - r["device"]) * 100
        r["gap_torch_bp"] = (res["backprop_torch"] - r["device"]) * 100
        r["train_heap"] = int(max(v["train_heap"] for v in s))
        r["ram_saved"] = res["bp_heap"] - r["train_heap"]
        r["state_bytes"] = s[0]["state_bytes"]
    return res
