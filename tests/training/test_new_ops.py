"""Channel concatenation, nearest upsampling, transposed and dilated convs in whole models.

A small U-Net-like digits CNN (a strided conv down, back up by ``nn.Upsample``,
``F.interpolate`` (after a dilated conv) and ``nn.ConvTranspose2d``, joined to the skip
with a four-way ``torch.cat``) is trained for a moment in PyTorch and converted (format 1.2: CONCAT
and UPSAMPLE layers; the transposed conv is a zero-inserting UPSAMPLE and a conv). Its
int8 outputs in the real ``micropython`` (native and pure-Python kernels) must equal the
numpy oracle's bit for bit, its top-1 must agree with PyTorch's, on-device training
(backward through every new op, the transposed and the dilated convs trained) must equal the training
reference bit for bit, and ``last:2`` training must lower the loss.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from microtrain_tools.mtm import Op
from support import model_suite as ms


class OpsNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.down = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.up = nn.Upsample(scale_factor=2)
        self.convt = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.side = nn.Conv2d(8, 4, 3, padding=2, dilation=2)
        self.conv2 = nn.Conv2d(24, 12, 3, stride=2, padding=1)
        self.fc1 = nn.Linear(12 * 4 * 4, 16)
        self.fc2 = nn.Linear(16 + 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = F.relu(self.conv1(x))
        d = F.relu(self.down(a))
        s = F.interpolate(self.side(d), scale_factor=2, mode="nearest")
        y = torch.cat([a, self.up(d), F.relu(self.convt(d)), s], dim=1)
        h = F.relu(self.fc1(torch.flatten(F.relu(self.conv2(y)), 1)))
        g = torch.flatten(F.adaptive_avg_pool2d(d, 1), 1)
        return self.fc2(torch.cat([h, g], 1))


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory) -> ms.Suite:
    return ms.build("ops", OpsNet, tmp_path_factory.mktemp("ops"))


def test_converts_to_new_layers(ops: ms.Suite) -> None:
    s, _, _ = ops
    kinds = [(ly.op, ly.name) for ly in s.m.layers]
    assert [n for op, n in kinds if op == Op.CONCAT] == ["cat:1", "cat:2", "cat", "cat_1"]
    ups = {n: ly.params[7] for ly in s.m.layers if ly.op == Op.UPSAMPLE for n in [ly.name]}
    assert ups == {"up": 0, "interpolate": 0, "convt:zeros": 1}
    convt = s.m.layers[[n for _, n in kinds].index("convt")]
    assert convt.op == Op.CONV2D and convt.fused.startswith("conv_transpose")
    side = s.m.layers[[n for _, n in kinds].index("side")]
    assert side.params[17:] == [2, 2]  # a dilated conv: dil_h, dil_w after the 17 conv params
    assert s.path.read_bytes()[6] == 2  # version 1.2


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
def test_bitexact_in_micropython(ops: ms.Suite, pure: bool, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ms.check_bitexact(ops[0], pure, 30, tmp_path, monkeypatch)


def test_to_torch_round_trip(ops: ms.Suite) -> None:
    from microtrain_tools.to_torch import to_state_dict

    s, net, xe = ops
    fresh = OpsNet()
    sd, _ = to_state_dict(s.m, fresh)
    fresh.load_state_dict(sd, strict=True)
    fresh.eval()
    with torch.no_grad():  # the transposed conv's weights went back unflipped and untransposed
        assert float(torch.cosine_similarity(fresh.convt.weight.flatten(), net.convt.weight.flatten(),
                                             dim=0)) > 0.99
        agree = float((fresh(xe).argmax(1) == net(xe).argmax(1)).float().mean())
    assert agree >= 0.95, agree


def test_agrees_with_pytorch(ops: ms.Suite) -> None:
    ms.check_agrees_with_pytorch(ops)


@pytest.mark.parametrize("train,mode,batch", [("all", "int8", 2), ("last:2", "mixed", 1)])
def test_training_bitexact_vs_reference(ops: ms.Suite, tmp_path: Path, train: str, mode: str,
                                        batch: int) -> None:
    ms.check_training_bitexact(ops[0], tmp_path, train, mode, batch)


def test_last2_training_lowers_the_loss(ops: ms.Suite, tmp_path: Path) -> None:
    ms.check_last2_lowers_the_loss(ops[0], tmp_path)
