"""LSTM layers (format 1.5) in whole models: nn.LSTM over the rows of the digits as 8 steps of 8
values, a Linear over the flattened steps.

The model is trained for a moment in PyTorch and converted. Its int8 outputs in the real
``micropython`` (native and pure-Python kernels) must equal the numpy oracle's bit for bit and
its top-1 must agree with PyTorch's; the layers after it train bit-exact against the reference.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from microtrain_tools.mtm import Op
from support import model_suite as ms


class LSTMNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 24, batch_first=True)
        self.fc = nn.Linear(8 * 24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x.squeeze(1))  # (N, 1, 8, 8): 8 steps of the 8 values of a row
        return self.fc(torch.flatten(out, 1))


@pytest.fixture(scope="module")
def lstm(tmp_path_factory: pytest.TempPathFactory) -> ms.Suite:
    return ms.build("lstm", LSTMNet, tmp_path_factory.mktemp("lstm"))


def test_converts_to_an_lstm_layer(lstm: ms.Suite) -> None:
    s, _, _ = lstm
    assert [ly.op for ly in s.m.layers] == [Op.LSTM, Op.LINEAR]
    assert s.m.layers[0].params[:3] == [8, 8, 24]  # T, D, H
    assert s.path.read_bytes()[6] == 5  # version 1.5


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
def test_bitexact_in_micropython(lstm: ms.Suite, pure: bool, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ms.check_bitexact(lstm[0], pure, 20, tmp_path, monkeypatch)


def test_agrees_with_pytorch(lstm: ms.Suite) -> None:
    ms.check_agrees_with_pytorch(lstm)


@pytest.mark.parametrize("mode,batch", [("int8", 2), ("mixed", 1)])
def test_head_training_bitexact_vs_reference(lstm: ms.Suite, tmp_path: Path, mode: str, batch: int) -> None:
    """The layers after a frozen LSTM train on the device as the reference does, bit for bit."""
    ms.check_training_bitexact(lstm[0], tmp_path, "last:1", mode, batch)


def test_to_torch_round_trip(lstm: ms.Suite) -> None:
    """The file's LSTM back in PyTorch: the same module with the file's (dequantised) weights agrees
    with the file's int8 outputs, each weight within half an int8 step of the original."""
    import copy

    import numpy as np

    from evals.accuracy import parity as par
    from microtrain_tools import to_torch

    s, net, xe = lstm
    back = copy.deepcopy(net)
    sd, _ = to_torch.to_state_dict(s.m, back)
    back.load_state_dict(sd)
    got = par.run_oracle(s.m, s.xe, progress=False).argmax(1)
    with torch.no_grad():
        ref = back(xe).argmax(1).numpy()
        diff = max(float((getattr(back.lstm, k) - getattr(net.lstm, k)).abs().max())
                   for k in ("weight_ih_l0", "weight_hh_l0"))
        top = max(float(getattr(net.lstm, k).abs().max()) for k in ("weight_ih_l0", "weight_hh_l0"))
        bsum = back.lstm.bias_ih_l0 + back.lstm.bias_hh_l0
        bref = net.lstm.bias_ih_l0 + net.lstm.bias_hh_l0
    assert float(np.mean(got == ref)) >= 0.98
    assert diff <= top / 254 * 1.0001  # each weight within half an int8 step of its row's scale
    assert float((bsum - bref).abs().max()) <= 1e-3 * max(1.0, float(bref.abs().max()))


def test_memory_counts_the_kept_gates(lstm: ms.Suite) -> None:
    """`microtrain info` and the Trainer's memory check count the T x 6H bytes an LSTM keeps (its
    gates, cell and tanh(cell)); the device's forward keeps exactly that many."""
    from microtrain_tools import info
    from support.kernel_harness import run_micropython

    s = lstm[0]
    t_n, _, h_n = s.m.layers[0].params[:3]
    assert info.seq_bytes(s.m) == 6 * t_n * h_n
    assert info.train_ram(s.m, 1)["seq"] == 6 * t_n * h_n
    code = (f"import microtrain as mt\nfrom microtrain import memplan\nm = mt.load({str(s.path)!r})\n"
            "print(dict(memplan.need(m, [1], 'int8', 0, None)).get('sequence buffers'))\n"
            f"m.forward(bytes({s.m.tensors[s.m.input].numel}))\nprint(len(m.layers[0].dtable))\n")
    p = run_micropython(code, heapsize="256k")
    assert p.returncode == 0, p.stderr
    need, kept = p.stdout.split()
    assert int(kept) == 6 * t_n * h_n and int(need) >= 6 * t_n * h_n


@pytest.mark.parametrize("train,mode,batch", [("all", "int8", 2), ("all", "mixed", 1), ("lstm", "int8", 1)])
def test_training_bitexact_vs_reference(lstm: ms.Suite, tmp_path: Path, train: str, mode: str,
                                        batch: int) -> None:
    """The LSTM itself trains on the device as the reference does, bit for bit: backward through
    time, its gradient sums, the update of its 4H rows and their 8H multipliers."""
    ms.check_training_bitexact(lstm[0], tmp_path, train, mode, batch)


def test_truncated_training_bitexact_vs_reference(lstm: ms.Suite, tmp_path: Path) -> None:
    """Backward through the last k = 3 of the 8 steps only (the layer's k): still bit for bit."""
    import copy
    import dataclasses

    from microtrain_tools import mtm

    s = lstm[0]
    m = copy.deepcopy(s.m)
    m.layers[0].params[6] = 3
    path = tmp_path / "lstm_k3.mtm"
    mtm.save(m, path)
    ms.check_training_bitexact(dataclasses.replace(s, path=path, m=m), tmp_path, "all", "int8", 1)


def test_last2_training_lowers_the_loss(lstm: ms.Suite, tmp_path: Path) -> None:
    """last:2 is the LSTM and the Linear: fine-tuning both on the device lowers the loss."""
    ms.check_last2_lowers_the_loss(lstm[0], tmp_path)


def test_trained_lstm_refuses_what_it_does_not_support(lstm: ms.Suite) -> None:
    """A trained LSTM keeps the gradient sums: sums=False and a sparse policy are refused by name."""
    from support.kernel_harness import run_micropython

    code = (f"import microtrain as mt\nm = mt.load({str(lstm[0].path)!r})\n"
            "for kw in ({'sums': False}, {'weight_decay': 0.01}):\n"
            "    try:\n"
            "        o = mt.SGD(lr=0.01, momentum=0.9, weight_decay=kw.get('weight_decay', 0))\n"
            "        mt.Trainer(m, train='all', optimizer=o, sums=kw.get('sums'))\n"
            "        print('accepted')\n"
            "    except ValueError as e:\n"
            "        print(e)\n")
    p = run_micropython(code, heapsize="256k")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    msg = "GRU or LSTM layer trains with the gradient sums"
    assert len(lines) == 2 and all(msg in ln for ln in lines), lines


def test_memory_counts_a_trained_lstms_scratch(lstm: ms.Suite) -> None:
    """Trained, the LSTM's backward scratch (int32 gw of 4H x (D + H), gb, acc of 6H, shifts, a spare
    input error, dtanh) is counted by `microtrain info` and by the Trainer's memory check."""
    from microtrain_tools import info
    from support.kernel_harness import run_micropython

    s = lstm[0]
    t_n, d_n, h_n = s.m.layers[0].params[:3]
    least = 4 * 4 * h_n * (d_n + h_n) + 16 * h_n + 24 * h_n + 4 * t_n + t_n * d_n + 1024
    assert info.train_ram(s.m, 2)["seq"] - info.train_ram(s.m, 1)["seq"] >= least
    # the report shows the kept gates and that scratch on lines of their own, summing to "seq"
    tr = info.train_ram(s.m, 2)
    rows = {ln.split(" B")[0].rsplit(None, 1)[0].strip(): int(ln.split(" B")[0].rsplit(None, 1)[1])
            for ln in info.format_report(info.report(s.path, s.m, 2)).splitlines()
            if "GRU / LSTM" in ln}
    assert rows == {"GRU / LSTM gates kept per step (4H / 6H)": 6 * t_n * h_n,
                    "GRU / LSTM backward-through-time scratch": tr["seq"] - 6 * t_n * h_n}, rows
    code = (f"import microtrain as mt\nfrom microtrain import memplan\nm = mt.load({str(s.path)!r})\n"
            "print(dict(memplan.need(m, [1], 'int8', 0, None)).get('sequence buffers'))\n"
            "print(dict(memplan.need(m, [0, 1], 'int8', 0, None)).get('sequence buffers'))\n")
    p = run_micropython(code, heapsize="256k")
    assert p.returncode == 0, p.stderr
    frozen, trained = (int(v) for v in p.stdout.split())
    assert trained - frozen >= least


def test_trained_lstm_checkpoint_round_trip(lstm: ms.Suite, tmp_path: Path) -> None:
    """A model whose LSTM moved on the device saves and loads back with the same outputs (its rows,
    biases and 8H multipliers in the checkpoint)."""
    from support.kernel_harness import run_micropython

    s = lstm[0]
    n = s.m.tensors[s.m.input].numel
    out = tmp_path / "trained.mtm"
    code = (f"import microtrain as mt\nm = mt.load({str(s.path)!r})\n"
            "t = mt.Trainer(m, train='lstm', optimizer=mt.SGD(lr=0.05, momentum=0.9), batch=2)\n"
            f"xs = [bytes((i * 37 + j * 11) & 0x7F for j in range({n})) for i in range(8)]\n"
            "for i, x in enumerate(xs):\n    t.step(x, i % 10)\n"
            "a = [bytes(m.forward(x)) for x in xs]\n"
            f"m.save({str(out)!r})\nm2 = mt.load({str(out)!r})\n"
            "b = [bytes(m2.forward(x)) for x in xs]\n"
            f"f = mt.load({str(s.path)!r})\nc = [bytes(f.forward(x)) for x in xs]\n"
            "print(a == b, a != c)\n")
    p = run_micropython(code, heapsize="4m")  # (three models at once)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "True"]
