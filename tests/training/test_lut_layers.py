"""Lookup-table activations in whole models: convert, run, agree, train.

A digits CNN with every LUT activation (Hardswish, LeakyReLU, SiLU, Hardsigmoid, Sigmoid,
Tanh, GELU) is trained for a moment in PyTorch and converted. Its int8 outputs in the real
``micropython`` (native and pure-Python kernels) must equal the numpy oracle's bit for bit,
its top-1 must agree with PyTorch's on held-out digits, on-device training must equal the
training reference bit for bit (backward through the LUT layers), and ``last:2`` training
must lower the loss.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from evals import parity as par
from microtrain_tools import convert as cv
from microtrain_tools import mtm
from microtrain_tools.mtm import Op
from microtrain_tools.reference import oracle
from support import training_cases as tc
from support.harness import ensure_natmod
from support.torch_models import train_quick


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
def lut(tmp_path_factory: pytest.TempPathFactory) -> tuple[tc.Setup, nn.Module, torch.Tensor]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images / 16.0, dtype=torch.float32)[:, None]
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(1)
        net = train_quick(LutNet(), x[:1000], y[:1000], epochs=12)
    finally:
        torch.set_num_threads(threads)
    work = tmp_path_factory.mktemp("lut")
    path = work / "lut.mtm"
    cv.convert_to_file(net, x[:256], path, progress=False)
    m = mtm.load(path)
    xs = cv.quantize_input(m, x[1000:1400])
    xe = cv.quantize_input(m, x[1400:])
    s, e = work / "lut-train.bin", work / "lut-eval.bin"
    xs.tofile(s)
    xe.tofile(e)
    setup = tc.Setup("lut", path, m, xs, y[1000:1400].numpy(), xe, y[1400:].numpy(), s, e)
    return setup, net, x[1400:]


def test_converts_to_lut_layers(lut: tuple[tc.Setup, nn.Module, torch.Tensor]) -> None:
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
def test_bitexact_in_micropython(lut: tuple[tc.Setup, nn.Module, torch.Tensor], pure: bool,
                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s, _, _ = lut
    ensure_natmod()
    q = s.xe if not pure else s.xe[:40]
    if pure:
        monkeypatch.setenv("MICROTRAIN_PURE", "1")
    # the pure kernels compiled from source need more than the default 256 KB heap (not a memory test)
    got, _ = par.run_device(s.path, q, tmp_path, progress=False, heapsize="2m" if pure else "256k")
    want = par.run_oracle(s.m, q, progress=False)
    assert np.array_equal(got, want), f"{int(np.sum(np.any(got != want, axis=1)))} samples differ"


def test_to_torch_round_trip(lut: tuple[tc.Setup, nn.Module, torch.Tensor]) -> None:
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


def test_agrees_with_pytorch(lut: tuple[tc.Setup, nn.Module, torch.Tensor]) -> None:
    s, net, xe = lut
    with torch.no_grad():
        ref = net(xe).argmax(1).numpy()
    got = par.run_oracle(s.m, s.xe, progress=False).argmax(1)
    agree = float(np.mean(got == ref))
    assert agree >= 0.98, f"top-1 agreement with PyTorch {agree:.4f}"
    assert float(np.mean(ref == s.ye)) >= 0.9  # the float model learned the task


@pytest.mark.parametrize("train,mode,batch", [("all", "int8", 2), ("last:2", "mixed", 1)])
def test_training_bitexact_vs_reference(lut: tuple[tc.Setup, nn.Module, torch.Tensor], tmp_path: Path,
                                        train: str, mode: str, batch: int) -> None:
    s, _, _ = lut
    ensure_natmod()
    order = list(range(24))
    labels = tc.labels_of(s)
    dev = tc.device(s, tmp_path, "lut", order=order, labels=labels, train=train, mode=mode, opt=tc.SGDM,
                    batch=batch)
    ref = tc.reference(s, order=order, labels=labels, train=train, mode=mode, opt=tc.SGDM, batch=batch)
    assert not tc.differences(ref.arrays(), tc.state_of(dev))
    assert np.array_equal(np.asarray(ref.losses), dev["loss"])
    if train == "all":  # the LUT backward ran: the first conv's weights moved
        assert not np.array_equal(dev["L0.w"], s.m.data(s.m.layers[0].weight).reshape(-1))


def test_last2_training_lowers_the_loss(lut: tuple[tc.Setup, nn.Module, torch.Tensor],
                                        tmp_path: Path) -> None:
    s, _, _ = lut
    ensure_natmod()
    # a shifted task (labels rotated by one): the converted model starts far from it
    labels = (s.ys + 1) % 10
    dev = tc.device(s, tmp_path, "lut-fit", order=list(range(200)), labels=labels, train="last:2",
                    mode="mixed", opt={"kind": "sgd", "lr": 0.05, "momentum": 0.9}, batch=4,
                    fit={"epochs": 3, "shuffle": True, "seed": 3})
    loss = dev["loss"]
    assert loss[-1] < 0.7 * loss[0], f"per-epoch losses {loss}"
    assert os.path.exists(s.path)
