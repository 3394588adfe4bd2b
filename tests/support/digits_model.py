"""A small real model for the packaging tests (test_dist.py, test_firmware.py).

A conv-relu-maxpool-conv-relu-linear network trained for a couple of seconds on
scikit-learn's handwritten digits (8x8), converted to .mtm; the reference
outputs of the test images come from the numpy oracle (``convert.run_mtm``),
independently of any MicroPython code.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn as nn
from numpy.typing import NDArray

from microtrain_tools import convert as cv
from microtrain_tools import mtm


class SmallCnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 8, 3, padding=1), nn.ReLU(),
        )
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))


@dataclass(frozen=True)
class DigitsModel:
    mtm: bytes  # the converted model file
    x: NDArray[np.int8]  # (n, 64) quantised test inputs, NHWC
    labels: NDArray[np.int64]  # (n,) true digits
    expected: NDArray[np.int8]  # (n, 10) oracle outputs


@lru_cache(maxsize=1)
def digits_model(n_test: int = 16) -> DigitsModel:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images / 16.0, dtype=torch.float32)[:, None]
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    torch.manual_seed(0)
    model = SmallCnn()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(4):
        for idx in torch.randperm(1400).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    model.eval()
    data = mtm.write(cv.convert(model, x[:256], progress=False))
    xt = x[1400:1400 + n_test]
    q = cv.quantize_input(data, xt)
    return DigitsModel(mtm=bytes(data), x=q, labels=y[1400:1400 + n_test].numpy(),
                       expected=cv.run_mtm(data, q))
