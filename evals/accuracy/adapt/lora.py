"""LoRA part of `make adapt-eval`: rank-r adapters on the Fashion-MNIST -> MNIST transfer.

Device: evals/accuracy/adapt/lora_device.py in the real host micropython (python_lib + the x64 natmod):
``LoRA(model, rank, layers="last:3")`` on the transfer CNN (pointwise conv, fc1, fc2), trained by
the Trainer with train_eval's transfer protocol, then saved (adapter file) and merged.
PyTorch float32: the same adapters (y = W x + B A x, A from the device's init, B = 0, biases on
A and B as on the device) on the float model, the same protocol (torch_finetune).
``run(seeds)`` returns {"lora_gap": PyTorch minus device accuracy in points (mean over the seeds),
"lora_params": trainable values} and prints trainable parameters and the training's heap next to
last:N fine-tuning (same protocol, seed 1).
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from evals.accuracy import train_eval as te
from evals.accuracy.adapt import common
from evals.lib import experiments as ex
from evals.lib import transfer_model as tm
from microtrain_tools import mtm, paths
from microtrain_tools.reference import lora_ref

WORK = paths.ROOT / "build" / "adapt_eval" / "lora"
SCRIPT = Path(__file__).resolve().parent / "lora_device.py"
RANK = 4
LAYERS = "last:3"  # pw (1x1 conv + relu), fc1 (linear + relu), fc2 (logits)
MODE = "float32"  # master copies of the adapters: small, since the adapters are
CALIB = 64  # training samples for the scale of A's output
# train-eval's transfer protocol as LoRA was measured with it (docs/lora.md): lr 0.02, momentum
# 0.9, batch 16, 5 epochs, cosine (train-eval itself now runs at lr 0.01)
PROTOCOL = dataclasses.replace(te.TRANSFER, lr=0.02)
COMPARE = (("last:1", "mixed"), ("last:2", "mixed"), ("last:3", "mixed"))


def device(cfg: dict[str, Any], tag: str, echo: bool = False) -> dict[str, Any]:
    """lora_device.py with cfg in micropython; its RESULT dict."""
    return common.device(cfg, tag, echo, script=SCRIPT, work=WORK)


def _a_torch(m: mtm.Model, name: str, a: np.ndarray, scale: np.ndarray, rank: int) -> torch.Tensor:
    """The device's initial A (int8 levels x scale, float32) in the PyTorch module's layout."""
    ly = m.layer(name)
    w = a.astype(np.float32).reshape(rank, -1) * scale.astype(np.float32)[:, None]
    if ly.op == mtm.Op.CONV2D:  # OHWI -> OIHW
        p = ly.params
        return torch.from_numpy(w.reshape(rank, p[6], p[7], p[2]).transpose(0, 3, 1, 2).copy())
    shp = m.tensors[ly.inputs[0]].shape
    if len(shp) == 3:  # NHWC flatten on the device, NCHW in PyTorch
        h, wd, c = shp
        w = w.reshape(rank, h, wd, c).transpose(0, 3, 1, 2).reshape(rank, -1)
    return torch.from_numpy(w.copy())


class LoraTransfer(nn.Module):
    """The transfer CNN with adapters on pw (after its folded BatchNorm, before the ReLU), fc1 and
    fc2: each output gets + B(A(x)) of the layer's input."""

    def __init__(self, base: nn.Module, a_init: dict[str, torch.Tensor], rank: int) -> None:
        super().__init__()
        self.base = copy.deepcopy(base)
        self.pw_A, self.pw_B = nn.Conv2d(32, rank, 1), nn.Conv2d(rank, 32, 1)
        self.fc1_A, self.fc1_B = nn.Linear(288, rank), nn.Linear(rank, 32)
        self.fc2_A, self.fc2_B = nn.Linear(32, rank), nn.Linear(rank, 10)
        with torch.no_grad():
            for n in ("pw", "fc1", "fc2"):
                a, b = getattr(self, f"{n}_A"), getattr(self, f"{n}_B")
                a.weight.copy_(a_init[n])
                a.bias.zero_()
                b.weight.zero_()
                b.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.base
        x = m.pool(F.relu(m.bn1(m.conv1(x))))
        x = m.pool(F.relu(m.bn2(m.conv2(x))))
        x = F.relu(m.bn3(m.dw(x)))
        x = m.pool(F.relu(m.bn4(m.pw(x)) + self.pw_B(self.pw_A(x))))
        x = torch.flatten(x, 1)
        x = F.relu(m.fc1(x) + self.fc1_B(self.fc1_A(x)))
        return m.fc2(x) + self.fc2_B(self.fc2_A(x))


def torch_lora(ref: Any, data: te.Data, seed: int) -> float:
    """PyTorch float32 LoRA with the device's initial A for this seed: test accuracy."""
    m = mtm.load(ref.mtm)
    at = lora_ref.attach(m, RANK, LAYERS, None, seed)
    vals = lora_ref.values(at)
    a_init = {n: _a_torch(m, n, v[1], v[2], RANK) for n, v in vals.items()}
    net = LoraTransfer(ref.model, a_init, RANK)
    names = [f"{n}_{ab}" for n in ("pw", "fc1", "fc2") for ab in "AB"]
    p = ex.Protocol(**{**PROTOCOL.__dict__, "seed": seed})
    return float(ex.torch_finetune(net, names, data.xtr, data.ytr, data.xte, data.yte, p)["acc"])


def run(seeds: list[int], echo: bool = True) -> dict[str, Any]:
    """Device and PyTorch LoRA over the seeds; {"lora_gap", "lora_params", ...}."""
    ref = tm.get_model()
    data = te.Data(ref.mtm, WORK)
    dev, tor = [], []
    res: dict[str, Any] = {}
    for seed in seeds:
        cfg = PROTOCOL.device_cfg(ref.mtm, data.train, data.test, rank=RANK, layers=LAYERS, mode=MODE,
                                  calib=CALIB, seed=seed, adapters=str(WORK / f"adapters_s{seed}.mtl"))
        r = device(cfg, f"lora_s{seed}", echo=echo)
        t = torch_lora(ref, data, seed)
        dev.append(r["acc"])
        tor.append(t)
        res = r
        if echo:
            print(f"lora seed {seed}: device {100 * r['acc']:.2f} % (merged {100 * r['merged_acc']:.2f} %), "
                  f"PyTorch {100 * t:.2f} %, adapter file {r['file_bytes']} bytes", flush=True)
    gap = 100 * (float(np.mean(tor)) - float(np.mean(dev)))
    rows = [[f"LoRA r={RANK} {LAYERS} ({MODE})", str(res["params"]), f"{res['heap_train'] / 1024:.1f}",
             te.spread(dev), te.spread(tor)]]
    for spec, mode in COMPARE:
        cfg = PROTOCOL.device_cfg(ref.mtm, data.train, data.test, method="finetune", layers=spec, mode=mode,
                                  seed=seeds[0])
        d = device(cfg, f"ft_{spec.replace(':', '')}_{mode}", echo=False)
        rows.append([f"fine-tune {spec} ({mode}), seed {seeds[0]}", str(d["params"]),
                     f"{d['heap_train'] / 1024:.1f}", f"{100 * d['acc']:.2f}", ""])
    print(ex.table(rows, ["method", "trainable params", "training heap KB", "device acc %", "PyTorch acc %"]))
    print("training heap: the largest live heap at an epoch end minus the loaded model and data "
          "(no feature cache), host micropython (64-bit objects)")
    print(f"lora: device {te.spread(dev)}, PyTorch LoRA {te.spread(tor)}, gap {gap:.2f} pp", flush=True)
    return {"lora_gap": gap, "lora_params": int(res["params"]), "lora_device": dev, "lora_torch": tor,
            "lora_heap_train": int(res["heap_train"]), "lora_file_bytes": int(res["file_bytes"]),
            "table": rows}


if __name__ == "__main__":
    out = run([int(s) for s in sys.argv[1:]] or [1, 2, 3])
    print(f"lora: lora_gap={out['lora_gap']:.2f} lora_params={out['lora_params']}")
