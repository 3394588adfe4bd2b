"""The Fashion-MNIST CNN that the transfer experiment (and `make demo`) fine-tunes on the device.

Its head is sized for a microcontroller: training its last two layers (288 -> 32 -> 10)
needs float32 gradient sums of ~9.5k weights (38 KB), so the whole fine-tune fits in a
256 KB MicroPython heap. (The parity model in :mod:`refmodels` has a 576 -> 64 head: ~150 KB
of gradient sums for its last two layers.) Trained once on the host (seeded, cached in
``build/models/fmnist_transfer.{pt,mtm,json}``).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from evals import datasets as ds
from evals import refmodels as rm
from microtrain_tools import convert as cv

NAME = "fmnist_transfer"


class FmnistTransferCNN(nn.Module):
    """28x28x1 -> 10: conv3x3(16)-bn-relu, pool, conv3x3(32)-bn-relu, pool, depthwise3x3(32)-bn-relu,
    pointwise(32)-bn-relu, pool, flatten 3x3x32, fc1 32, relu, fc2 10 (16k parameters)."""

    def __init__(self, n_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False)
        self.bn3 = nn.BatchNorm2d(32)
        self.pw = nn.Conv2d(32, 32, 1, bias=False)
        self.bn4 = nn.BatchNorm2d(32)
        self.pool = nn.MaxPool2d(2)
        self.drop = nn.Dropout(0.2)
        self.fc1 = nn.Linear(3 * 3 * 32, 32)
        self.fc2 = nn.Linear(32, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.pool(F.relu(self.bn2(self.conv2(x))))
        x = F.relu(self.bn3(self.dw(x)))
        x = self.pool(F.relu(self.bn4(self.pw(x))))
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(self.drop(x))))


@dataclass(frozen=True)
class Recipe:
    version: str = "fmnist-transfer-2"  # bump to invalidate caches
    epochs: int = 8
    batch: int = 128
    lr: float = 3e-3
    weight_decay: float = 1e-4
    seed: int = 0
    calib_n: int = 2000


@dataclass
class TransferModel:
    model: nn.Module
    pt: Path
    mtm: Path
    info: dict


def get_model(cache_dir: Path = rm.MODELS_DIR, progress: bool = True) -> TransferModel:
    """The pretrained transfer CNN: trained on all 60k Fashion-MNIST images on first use, then cached."""
    torch.set_num_threads(1)
    r = Recipe()
    cache_dir.mkdir(parents=True, exist_ok=True)
    pt, mtm_path, meta = (cache_dir / f"{NAME}.{ext}" for ext in ("pt", "mtm", "json"))
    model = FmnistTransferCNN()
    info: dict = {}
    if pt.is_file() and meta.is_file():
        try:
            info = json.loads(meta.read_text())
        except (OSError, ValueError):
            info = {}
    if info.get("recipe") == asdict(r):
        model.load_state_dict(torch.load(pt, map_location="cpu", weights_only=True))
        model.eval()
    else:
        print(f"pretraining the Fashion-MNIST CNN on the host ({r.epochs} epochs, cached in {cache_dir})",
              flush=True)
        x, y = ds.fashion_mnist("train")
        cfg = rm.TrainConfig(recipe=r.version, epochs=r.epochs, batch=r.batch, lr=r.lr,
                             weight_decay=r.weight_decay, seed=r.seed)
        t0 = time.perf_counter()
        rm.train_classifier(model, x, y, cfg, "pretrain fmnist", augment=rm._flip_shift, progress=progress)
        xt, yt = ds.fashion_mnist("test")
        acc = float((rm.predict(model, xt).argmax(1) == yt).mean())
        info = {"recipe": asdict(r), "float_test_acc": acc, "params": rm.n_params(model),
                "train_seconds": round(time.perf_counter() - t0, 1)}
        tmp = pt.with_suffix(".pt.tmp")
        torch.save(model.state_dict(), tmp)
        tmp.replace(pt)
        mtm_path.unlink(missing_ok=True)
        meta.write_text(json.dumps(info, indent=1) + "\n")
    if not mtm_path.is_file():
        x, _ = ds.fashion_mnist("train")
        idx = np.sort(np.random.default_rng(1).choice(len(x), size=r.calib_n, replace=False))
        cv.convert_to_file(model, x[idx], mtm_path, progress=progress)
    return TransferModel(model, pt, mtm_path, info)
