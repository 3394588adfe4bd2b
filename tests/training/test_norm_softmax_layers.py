"""LayerNorm and softmax inside whole models (LAYERNORM and SOFTMAX layers, format 1.4).

A digits model with a softmax over the positions of a conv's map (an attention-like weighting:
``a * softmax(conv1x1(a), dim=-1)``), an ``nn.LayerNorm`` over a Linear's features (a LAYERNORM
layer, then its weight and bias as a depthwise 1x1 conv with the ReLU after it fused), a softmax
over features gating another Linear's output, and a functional ``F.layer_norm`` without affine
before the classifier is trained for a moment in PyTorch and converted. Its int8 outputs in the
real ``micropython`` (native and pure-Python kernels) must equal the numpy oracle's bit for bit,
its top-1 must agree with PyTorch's, on-device training (backward through every LAYERNORM and
SOFTMAX) must equal the training reference bit for bit, and ``last:2`` training must lower the loss.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from microtrain_tools import mtm
from microtrain_tools.mtm import Op
from support import model_suite as ms


class NormNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.att = nn.Conv2d(8, 8, 1)
        self.fc1 = nn.Linear(8 * 4 * 4, 32)
        self.ln = nn.LayerNorm(32)
        self.fc2 = nn.Linear(32, 16)
        self.fc3 = nn.Linear(32, 16)
        self.fc4 = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = F.relu(self.conv1(x))
        a = a * F.softmax(self.att(a), dim=-1)  # over the positions of each row
        h = F.relu(self.ln(self.fc1(torch.flatten(F.max_pool2d(a, 2), 1))))
        h2 = self.fc3(h) * F.softmax(self.fc2(h), dim=1)  # a softmax over features, inside
        return self.fc4(F.layer_norm(h2, (16,)))


@pytest.fixture(scope="module")
def norm(tmp_path_factory: pytest.TempPathFactory) -> ms.Suite:
    return ms.build("norm", NormNet, tmp_path_factory.mktemp("norm"))


def test_converts_to_layernorm_and_softmax_layers(norm: ms.Suite) -> None:
    s, _, _ = norm
    ops = {ly.name: ly for ly in s.m.layers}
    sm = [ly for ly in s.m.layers if ly.op == Op.SOFTMAX]
    # outer, n, inner: over the W of (H, W, C), then over the features
    assert [ly.params for ly in sm] == [[8, 8, 8], [1, 16, 1]]
    for ly in sm:
        y = s.m.tensors[ly.output]
        assert (y.scale, y.zero_point) == (mtm.SOFTMAX_SCALE, mtm.SOFTMAX_ZP)
    lns = [ly for ly in s.m.layers if ly.op == Op.LAYERNORM]
    assert [ly.name for ly in lns] == ["ln:norm", "layer_norm"]
    affine = ops["ln"]  # the weight and bias: a depthwise 1x1 conv (groups = features), ReLU fused
    assert affine.op == Op.CONV2D and affine.params[12] == 32 and affine.act == mtm.Act.RELU
    assert s.path.read_bytes()[6] == 4  # version 1.4


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
def test_bitexact_in_micropython(norm: ms.Suite, pure: bool, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ms.check_bitexact(norm[0], pure, 30, tmp_path, monkeypatch)


def test_agrees_with_pytorch(norm: ms.Suite) -> None:
    ms.check_agrees_with_pytorch(norm)


@pytest.mark.parametrize("train,mode,batch", [("all", "int8", 2), ("last:2", "mixed", 1)])
def test_training_bitexact_vs_reference(norm: ms.Suite, tmp_path: Path, train: str, mode: str,
                                        batch: int) -> None:
    ms.check_training_bitexact(norm[0], tmp_path, train, mode, batch)


def test_last2_training_lowers_the_loss(norm: ms.Suite, tmp_path: Path) -> None:
    ms.check_last2_lowers_the_loss(norm[0], tmp_path)
