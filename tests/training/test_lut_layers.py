"""Lookup-table activations in whole models: convert, run, agree, train.

A digits CNN with every LUT activation (Hardswish, LeakyReLU, SiLU, Hardsigmoid, Sigmoid,
Tanh, GELU) is trained for a moment in PyTorch and converted. Its int8 outputs in the real
``micropython`` (native and pure-Python kernels) must equal the numpy oracle's bit for bit,
its top-1 must agree with PyTorch's on held-out digits, on-device training must equal the
training reference bit for bit (backward through the LUT layers), and ``last:2`` training
must lower the loss.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from microtrain_tools.mtm import Op
from microtrain_tools.reference import oracle
from support import model_suite as ms


class LutNet(nn.Module):
    """Every LUT activation, as modules and as functions."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.act1 = nn.Hardswish()
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.act2 = nn.LeakyReLU(0.1)
        self.conv3 = nn.Conv2d(16, 16, 1)
        self.conv4 = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.fc1 = nn.Linear(16 * 4 * 4, 32)
        self.act3 = nn.Sigmoid()
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 24)
        self.act4 = nn.GELU()
        self.fc4 = nn.Linear(24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act2(self.conv2(self.act1(self.bn1(self.conv1(x)))))
        x = F.hardsigmoid(self.conv4(F.silu(self.conv3(x))))
        x = self.act3(self.fc1(torch.flatten(x, 1)))
        x = self.act4(self.fc3(torch.tanh(self.fc2(x))))
        return self.fc4(x)


@pytest.fixture(scope="module")
def lut(tmp_path_factory: pytest.TempPathFactory) -> ms.Suite:
    return ms.build("lut", LutNet, tmp_path_factory.mktemp("lut"))


def test_converts_to_lut_layers(lut: ms.Suite) -> None:
    s, _, _ = lut
    fns = [ly.fused for ly in s.m.layers if ly.op == Op.LUT]
    assert sorted(fns) == sorted(oracle.LUT_FUNCTIONS), fns
    assert s.path.read_bytes()[6] == 1  # version 1.1: the file has LUT layers
    slope = [ly for ly in s.m.layers if ly.fused == "leaky_relu"][0]
    x, y = s.m.tensors[slope.inputs[0]], s.m.tensors[slope.output]
    # the table was made with the module's negative_slope (0.1), not the default
    t, _, _ = oracle.lut_tables("leaky_relu", x.scale, x.zero_point, y.scale, y.zero_point, 0.1)
    assert np.array_equal(s.m.data(slope.weight), t)


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
def test_bitexact_in_micropython(lut: ms.Suite, pure: bool, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ms.check_bitexact(lut[0], pure, 40, tmp_path, monkeypatch)


def test_to_torch_round_trip(lut: ms.Suite) -> None:
    from microtrain_tools.to_torch import ToTorchError, to_state_dict

    s, net, xe = lut
    fresh = LutNet()
    sd, _ = to_state_dict(s.m, fresh)
    fresh.load_state_dict(sd, strict=True)
    fresh.eval()
    with torch.no_grad():
        agree = float((fresh(xe).argmax(1) == net(xe).argmax(1)).float().mean())
    assert agree >= 0.95, agree  # the dequantised weights compute what the trained ones do
    wrong = LutNet()
    wrong.act3 = nn.Tanh()  # the file has a Sigmoid there
    with pytest.raises(ToTorchError, match="act3.*'sigmoid'"):
        to_state_dict(s.m, wrong)


def test_agrees_with_pytorch(lut: ms.Suite) -> None:
    ms.check_agrees_with_pytorch(lut)


@pytest.mark.parametrize("train,mode,batch", [("all", "int8", 2), ("last:2", "mixed", 1)])
def test_training_bitexact_vs_reference(lut: ms.Suite, tmp_path: Path, train: str, mode: str,
                                        batch: int) -> None:
    ms.check_training_bitexact(lut[0], tmp_path, train, mode, batch)


def test_last2_training_lowers_the_loss(lut: ms.Suite, tmp_path: Path) -> None:
    ms.check_last2_lowers_the_loss(lut[0], tmp_path)
