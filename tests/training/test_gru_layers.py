"""GRU layers (format 1.5) in whole models: nn.GRU over the rows of the digits as 8 steps of 8
values, a Linear over the flattened steps.

The model is trained for a moment in PyTorch and converted. Its int8 outputs in the real
``micropython`` (native and pure-Python kernels) must equal the numpy oracle's bit for bit, its
top-1 must agree with PyTorch's, training on the device (the GRU with backward through time, all
steps and the last k; the head alone) must equal the training reference bit for bit and lower the
loss, and to_torch must give the GRU back.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from microtrain_tools.mtm import Op
from support import model_suite as ms


class GRUNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(8, 24, batch_first=True)
        self.fc = nn.Linear(8 * 24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x.squeeze(1))  # (N, 1, 8, 8): 8 steps of the 8 values of a row
        return self.fc(torch.flatten(out, 1))


@pytest.fixture(scope="module")
def gru(tmp_path_factory: pytest.TempPathFactory) -> ms.Suite:
    return ms.build("gru", GRUNet, tmp_path_factory.mktemp("gru"))


def test_converts_to_a_gru_layer(gru: ms.Suite) -> None:
    s, _, _ = gru
    assert [ly.op for ly in s.m.layers] == [Op.GRU, Op.LINEAR]
    assert s.m.layers[0].params[:3] == [8, 8, 24]  # T, D, H
    assert s.path.read_bytes()[6] == 5  # version 1.5


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
def test_bitexact_in_micropython(gru: ms.Suite, pure: bool, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ms.check_bitexact(gru[0], pure, 20, tmp_path, monkeypatch)


def test_agrees_with_pytorch(gru: ms.Suite) -> None:
    ms.check_agrees_with_pytorch(gru)


@pytest.mark.parametrize("mode,batch", [("int8", 2), ("mixed", 1)])
def test_head_training_bitexact_vs_reference(gru: ms.Suite, tmp_path: Path, mode: str, batch: int) -> None:
    """The layers after a frozen GRU train on the device as the reference does, bit for bit."""
    ms.check_training_bitexact(gru[0], tmp_path, "last:1", mode, batch)


def test_to_torch_round_trip(gru: ms.Suite) -> None:
    """The file's GRU back in PyTorch: the same module with the file's (dequantised) weights agrees
    with the file's int8 outputs at least as well as the original float model does."""
    import copy

    import numpy as np

    from evals.accuracy import parity as par
    from microtrain_tools import to_torch

    s, net, xe = gru
    back = copy.deepcopy(net)
    sd, _ = to_torch.to_state_dict(s.m, back)
    back.load_state_dict(sd)
    got = par.run_oracle(s.m, s.xe, progress=False).argmax(1)
    with torch.no_grad():
        ref = back(xe).argmax(1).numpy()
        diff = max(float((getattr(back.gru, k) - getattr(net.gru, k)).abs().max())
                   for k in ("weight_ih_l0", "weight_hh_l0"))
        top = max(float(getattr(net.gru, k).abs().max()) for k in ("weight_ih_l0", "weight_hh_l0"))
    assert float(np.mean(got == ref)) >= 0.98
    assert diff <= top / 254 * 1.0001  # each weight within half an int8 step of its row's scale


def test_memory_counts_the_kept_gates(gru: ms.Suite) -> None:
    """`microtrain info` and the Trainer's memory check count the T x 4H bytes of gates a GRU keeps;
    the device's forward keeps exactly that many."""
    from microtrain_tools import info
    from support.kernel_harness import run_micropython

    s = gru[0]
    t_n, _, h_n = s.m.layers[0].params[:3]
    assert info.seq_bytes(s.m) == 4 * t_n * h_n
    assert info.train_ram(s.m, 1)["seq"] == 4 * t_n * h_n
    code = (f"import microtrain as mt\nfrom microtrain import memplan\nm = mt.load({str(s.path)!r})\n"
            "print(dict(memplan.need(m, [1], 'int8', 0, None)).get('sequence buffers'))\n"
            f"m.forward(bytes({s.m.tensors[s.m.input].numel}))\nprint(len(m.layers[0].dtable))\n")
    p = run_micropython(code, heapsize="256k")
    assert p.returncode == 0, p.stderr
    need, kept = p.stdout.split()
    assert int(kept) == 4 * t_n * h_n and int(need) >= 4 * t_n * h_n


@pytest.mark.parametrize("train,mode,batch", [("all", "int8", 2), ("all", "mixed", 1), ("gru", "int8", 1)])
def test_training_bitexact_vs_reference(gru: ms.Suite, tmp_path: Path, train: str, mode: str,
                                        batch: int) -> None:
    """The GRU itself trains on the device as the reference does, bit for bit: backward through time,
    its gradient sums, the update of its rows, multipliers and b_hn."""
    ms.check_training_bitexact(gru[0], tmp_path, train, mode, batch)


def test_truncated_training_bitexact_vs_reference(gru: ms.Suite, tmp_path: Path) -> None:
    """Backward through the last k = 3 of the 8 steps only (the layer's k): still bit for bit."""
    import copy
    import dataclasses

    from microtrain_tools import mtm

    s = gru[0]
    m = copy.deepcopy(s.m)
    m.layers[0].params[6] = 3
    path = tmp_path / "gru_k3.mtm"
    mtm.save(m, path)
    ms.check_training_bitexact(dataclasses.replace(s, path=path, m=m), tmp_path, "all", "int8", 1)


def test_last2_training_lowers_the_loss(gru: ms.Suite, tmp_path: Path) -> None:
    """last:2 is the GRU and the Linear: fine-tuning both on the device lowers the loss."""
    ms.check_last2_lowers_the_loss(gru[0], tmp_path)
