"""The Fashion-MNIST CNN that the transfer experiment (and `make demo`) fine-tunes on the device.

Its head is sized for a microcontroller: training its last two layers (288 -> 32 -> 10)
needs float32 gradient sums of ~9.5k weights (38 KB), so the whole fine-tune fits in a
256 KB MicroPython heap. (The parity model in :mod:`refmodels` has a 576 -> 64 head: ~150 KB
of gradient sums for its last two layers.) Trained once on the host by `make models` (seeded,
one thread) and shipped in ``evals/models/fmnist_transfer.{pt,json}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from evals.lib import datasets as ds
from evals.lib import refmodels as rm

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


# 8 epochs of seeded AdamW on all 60k training images; conversion calibrated (min/max) on 2,000 of them.
CONFIG = rm.TrainConfig(recipe="fmnist-transfer-3", epochs=8, batch=128, lr=3e-3, weight_decay=1e-4, seed=0)
CALIB = rm.CalibConfig(n=2000, method="minmax", percentile=99.99)


def get_model(cache_dir: Path = rm.MODELS_DIR, retrain: bool = False, progress: bool = True) -> rm.RefModel:
    """The pretrained transfer CNN: the shipped float model (evals/models), converted to int8 once."""

    def train(model: nn.Module) -> dict[str, Any]:
        x, y = ds.fashion_mnist("train")
        losses = rm.train_classifier(model, x, y, CONFIG, "pretrain fmnist_transfer", augment=rm.flip_shift,
                                     progress=progress)
        xt, yt = ds.fashion_mnist("test")
        acc = float((rm.predict(model, xt).argmax(1) == yt).mean())
        return {"epoch_loss": [round(v, 4) for v in losses], "float_test_acc": acc}

    return rm.cached_model(NAME, CONFIG, CALIB, FmnistTransferCNN, train,
                           lambda c: rm.fmnist_calibration(c.n, c.seed), cache_dir, retrain, progress)
