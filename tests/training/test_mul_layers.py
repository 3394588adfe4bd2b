"""Element-wise products of two activations in whole models (MUL layers, format 1.4).

A digits CNN with a squeeze-and-excitation block (``x * sigmoid(fc(relu(fc(mean(x)))))``: the
second operand broadcast over the positions), a spatial gate (``x * sigmoid(conv1x1(x))``:
broadcast over the channels) and a gated unit of two maps of the same shape is trained for a
moment in PyTorch and converted. Its int8 outputs in the real ``micropython`` (native and
pure-Python kernels) must equal the numpy oracle's bit for bit, its top-1 must agree with
PyTorch's, on-device training (the errors of both inputs of every MUL) must equal the training
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


class SENet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.se1 = nn.Linear(16, 4)
        self.se2 = nn.Linear(4, 16)
        self.gate = nn.Conv2d(16, 1, 1)
        self.conv2 = nn.Conv2d(16, 8, 3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(16, 8, 3, stride=2, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = F.relu(self.conv1(x))
        s = torch.sigmoid(self.se2(F.relu(self.se1(a.mean((2, 3))))))
        a = a * s.view(-1, 16, 1, 1)  # squeeze-and-excitation: one factor per channel
        a = a * torch.sigmoid(self.gate(a))  # a spatial gate: one factor per position
        h = torch.tanh(self.conv2(a)) * torch.sigmoid(self.conv3(a))  # a gated unit: same shapes
        return self.fc(torch.flatten(h, 1))


@pytest.fixture(scope="module")
def se(tmp_path_factory: pytest.TempPathFactory) -> ms.Suite:
    return ms.build("se", SENet, tmp_path_factory.mktemp("se"))


def test_converts_to_mul_layers(se: ms.Suite) -> None:
    s, _, _ = se
    muls = [ly for ly in s.m.layers if ly.op == Op.MUL]
    # (hw2, c2) of each: per channel, per position, the same shape
    assert [tuple(ly.params[2:4]) for ly in muls] == [(1, 16), (64, 1), (16, 8)]
    assert s.path.read_bytes()[6] == 4  # version 1.4


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
def test_bitexact_in_micropython(se: ms.Suite, pure: bool, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ms.check_bitexact(se[0], pure, 30, tmp_path, monkeypatch)


def test_agrees_with_pytorch(se: ms.Suite) -> None:
    ms.check_agrees_with_pytorch(se)


@pytest.mark.parametrize("train,mode,batch", [("all", "int8", 2), ("last:2", "mixed", 1)])
def test_training_bitexact_vs_reference(se: ms.Suite, tmp_path: Path, train: str, mode: str,
                                        batch: int) -> None:
    ms.check_training_bitexact(se[0], tmp_path, train, mode, batch)


def test_last2_training_lowers_the_loss(se: ms.Suite, tmp_path: Path) -> None:
    ms.check_last2_lowers_the_loss(se[0], tmp_path)


def test_checkpoint_of_a_mul_model_loads_on_the_host(se: ms.Suite, tmp_path: Path) -> None:
    """A checkpoint saved on the device after a training step is a valid 1.4 file with the MUL layers."""
    from microtrain_tools import mtm
    from support.harness import ensure_natmod
    from support.kernel_harness import run_micropython

    ensure_natmod()
    s = se[0]
    out = tmp_path / "se-trained.mtm"
    code = (f"import microtrain as mt\nm = mt.load({str(s.path)!r})\n"
            f"t = mt.Trainer(m, train='all', optimizer=mt.SGD(lr=0.05))\n"
            f"x = open({str(s.samples)!r}, 'rb').read({s.m.tensors[s.m.input].numel})\n"
            f"t.step(x, 3)\nt.flush()\nm.save({str(out)!r})\n")
    r = run_micropython(code, heapsize="512k")
    assert r.returncode == 0, r.stdout + r.stderr
    raw = out.read_bytes()
    back = mtm.load(out)
    assert raw[6] == 4 and back.trained
    assert [ly.op for ly in back.layers] == [ly.op for ly in s.m.layers]
    first = s.m.layers[0]
    assert not (back.data(back.layers[0].weight) == s.m.data(first.weight)).all()  # trained through the MULs
