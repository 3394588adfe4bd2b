"""`microtrain info --bf16`: the 16-bit optimiser state counts 2 B a value (SGD momentum: one state
array, Adam: two), the gradient sums stay by default (they are what its kernels add into); with
--no-sums an SGD momentum takes the gradients through a float32 window of a few output channels
(halfwin.HalfWindow) instead of the sums, and Adam is refused, as the Trainer refuses it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from microtrain_tools import convert as cv
from microtrain_tools import info


def _model() -> info.Model:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)).eval()
    x = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)
    return cv.convert(net, x, progress=False)


def test_bf16_state_counts_two_bytes_a_value() -> None:
    m = _model()
    n = 64 * 32 + 32 + 32 * 10 + 10
    for adam, momentum, k in ((False, True, 1), (True, False, 2)):
        f = info.train_ram(m, 2, momentum=momentum, adam=adam, batch=4)
        h = info.train_ram(m, 2, momentum=momentum, adam=adam, batch=4, bf16=True)
        assert f["optimizer_state"] == 4 * k * n and h["optimizer_state"] == 2 * k * n
        assert h["grads"] == f["grads"] == 4 * n
        assert f["total"] - h["total"] == 2 * k * n
        assert h["optimizer"].endswith("+bf16")
    # batch 1, SGD momentum: a float32 state takes the gradients (no sums: only the copy of the upper
    # layer's momentum); bf16 keeps the sums
    f = info.train_ram(m, 2, momentum=True)
    h = info.train_ram(m, 2, momentum=True, bf16=True)
    assert f["grads"] == 4 * (32 * 10 + 10) and h["grads"] == 4 * n and h["optimizer_state"] == 2 * n
    # --no-sums: no sums; the window holds 64 // 64 = 1 channel of the first layer's 64 weights,
    # 64 // 32 = 2 of the second's 32 (HALF_WINDOW floats at most), counted unless backward's idle
    # buffers host it
    assert info.device_const("halfwin", "HALF_WINDOW") == 64
    rest, win = info.half_window_bytes(m, [m.layers[j] for j in info.weighted_layers(m)])
    assert win == 4 * max(1 * 64, 2 * 32)
    for batch in (1, 4):
        z = info.train_ram(m, 2, momentum=True, sums=False, batch=batch, bf16=True)
        assert z["optimizer_state"] == 2 * n and z["grads"] in (rest, rest + win), (z, rest, win)
        assert z["total"] < h["total"] - 4 * n + rest + win + 1
    with pytest.raises(ValueError, match="bf16"):
        info.train_ram(m, 2, adam=True, sums=False, bf16=True)
