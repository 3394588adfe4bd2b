"""The from-scratch case: an untrained network converted with
calibrated activation ranges, trained on the device from scratch (SGD momentum 0.9, float32
mode, batch 1), held-out accuracy (optionally next to PyTorch's on the same weights, data and
order). The lr the case was first run at (ISSUE_LR) diverges in PyTorch too on this network and
data (chance level); at lr 0.005 PyTorch learns but oscillates and never reaches 0.95 held out,
so the case runs LR for EPOCHS epochs, where PyTorch
converges. With Trainer(adapt_ranges=True) (the default here) the device learns like PyTorch;
without it, the fixed calibrated ranges saturate and it stays near chance (the health record
and its warnings say so)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from microtrain_tools import convert as cv
from microtrain_tools import mtm
from microtrain_tools.mtd import write_mtd
from microtrain_tools.reference.train_ref import shuffle_order
from support.digits_model import SmallCnn
from support.reliability import BUILD, run_mp

N_TRAIN = 1400
EPOCHS = 3
LR = 0.002
ISSUE_LR = 0.02  # the lr the case was first run at: diverges here, so health must warn


@dataclass
class ScratchResult:
    acc: float
    torch_acc: float | None
    first_scale: float
    steps: int
    health: dict[str, Any]
    first: dict[str, Any]  # the first epoch's health record


def run(epochs: int = EPOCHS, lr: float = LR, with_torch: bool = False,
        adapt: bool | None = True) -> ScratchResult:
    """adapt: Trainer(health=True, adapt_ranges=adapt); None: the Trainer's defaults."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images / 16.0, dtype=torch.float32)[:, None]
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    torch.manual_seed(1)
    torch.set_num_threads(1)  # batch-1 steps on a shared machine: one thread is much faster
    net = SmallCnn().eval()  # untrained
    data = mtm.write(cv.convert(net, x[:256], progress=False))
    out = BUILD / "scratch"
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.mtm").write_bytes(data)
    write_mtd(out / "train.mtd", cv.quantize_input(data, x[:N_TRAIN]), y[:N_TRAIN].numpy())
    write_mtd(out / "test.mtd", cv.quantize_input(data, x[N_TRAIN:]), y[N_TRAIN:].numpy())
    p = run_mp("rel_train.py", ["scratch", str(out / "model.mtm"), str(out / "train.mtd"),
                                str(out / "test.mtd"), str(epochs), repr(lr),
                                "default" if adapt is None else "1" if adapt else "0"],
                timeout=7200)
    vals = dict(ln.split(None, 1) for ln in p.stdout.splitlines() if ln[:3] in ("ACC", "SCA", "HEA", "FIR"))
    if "ACC" not in vals:
        raise RuntimeError(f"scratch run failed: {p.stdout[-500:]} {p.stderr[-2000:]}")
    acc, scale = float(vals["ACC"]), float(vals.get("SCALE", "nan"))
    health = json.loads(vals.get("HEALTH", "{}"))
    first = json.loads(vals.get("FIRST", "{}"))
    if not with_torch:
        return ScratchResult(acc, None, scale, epochs * N_TRAIN, health, first)
    # PyTorch float32, same initial weights, same samples in the device's shuffle order
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    for order in shuffle_order(N_TRAIN, epochs, 1):
        for i in order:
            opt.zero_grad()
            nn.functional.cross_entropy(net(x[i:i + 1]), y[i:i + 1]).backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        torch_acc = float((net(x[N_TRAIN:]).argmax(1) == y[N_TRAIN:]).float().mean())
    return ScratchResult(acc, torch_acc, scale, epochs * N_TRAIN, health, first)


if __name__ == "__main__":
    print(run(with_torch=True))
