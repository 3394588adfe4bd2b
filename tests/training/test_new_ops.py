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

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from evals import parity as par
from microtrain_tools import convert as cv
from microtrain_tools import mtm
from microtrain_tools.mtm import Op
from support import training_cases as tc
from support.harness import ensure_natmod
from support.torch_models import train_quick


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
def ops(tmp_path_factory: pytest.TempPathFactory) -> tuple[tc.Setup, nn.Module, torch.Tensor]:
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
        net = train_quick(OpsNet(), x[:1000], y[:1000], epochs=12)
    finally:
        torch.set_num_threads(threads)
    work = tmp_path_factory.mktemp("ops")
    path = work / "ops.mtm"
    cv.convert_to_file(net, x[:256], path, progress=False)
    m = mtm.load(path)
    xs = cv.quantize_input(m, x[1000:1400])
    xe = cv.quantize_input(m, x[1400:])
    s, e = work / "ops-train.bin", work / "ops-eval.bin"
    xs.tofile(s)
    xe.tofile(e)
    setup = tc.Setup("ops", path, m, xs, y[1000:1400].numpy(), xe, y[1400:].numpy(), s, e)
    return setup, net, x[1400:]


def test_converts_to_new_layers(ops: tuple[tc.Setup, nn.Module, torch.Tensor]) -> None:
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
def test_bitexact_in_micropython(ops: tuple[tc.Setup, nn.Module, torch.Tensor], pure: bool,
                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s, _, _ = ops
    ensure_natmod()
    q = s.xe if not pure else s.xe[:30]
    if pure:
        monkeypatch.setenv("MICROTRAIN_PURE", "1")
    got, _ = par.run_device(s.path, q, tmp_path, progress=False, heapsize="2m" if pure else "256k")
    want = par.run_oracle(s.m, q, progress=False)
    assert np.array_equal(got, want), f"{int(np.sum(np.any(got != want, axis=1)))} samples differ"


def test_to_torch_round_trip(ops: tuple[tc.Setup, nn.Module, torch.Tensor]) -> None:
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


def test_agrees_with_pytorch(ops: tuple[tc.Setup, nn.Module, torch.Tensor]) -> None:
    s, net, xe = ops
    with torch.no_grad():
        ref = net(xe).argmax(1).numpy()
    got = par.run_oracle(s.m, s.xe, progress=False).argmax(1)
    agree = float(np.mean(got == ref))
    assert agree >= 0.98, f"top-1 agreement with PyTorch {agree:.4f}"
    assert float(np.mean(ref == s.ye)) >= 0.9  # the float model learned the task


@pytest.mark.parametrize("train,mode,batch", [("all", "int8", 2), ("last:2", "mixed", 1)])
def test_training_bitexact_vs_reference(ops: tuple[tc.Setup, nn.Module, torch.Tensor], tmp_path: Path,
                                        train: str, mode: str, batch: int) -> None:
    s, _, _ = ops
    ensure_natmod()
    order = list(range(24))
    labels = tc.labels_of(s)
    dev = tc.device(s, tmp_path, "ops", order=order, labels=labels, train=train, mode=mode, opt=tc.SGDM,
                    batch=batch)
    ref = tc.reference(s, order=order, labels=labels, train=train, mode=mode, opt=tc.SGDM, batch=batch)
    assert not tc.differences(ref.arrays(), tc.state_of(dev))
    assert np.array_equal(np.asarray(ref.losses), dev["loss"])
    if train == "all":  # backward ran through the concats and upsamplings: the first conv moved
        assert not np.array_equal(dev["L0.w"], s.m.data(s.m.layers[0].weight).reshape(-1))


def test_last2_training_lowers_the_loss(ops: tuple[tc.Setup, nn.Module, torch.Tensor],
                                        tmp_path: Path) -> None:
    s, _, _ = ops
    ensure_natmod()
    labels = (s.ys + 1) % 10  # a shifted task: the converted model starts far from it
    dev = tc.device(s, tmp_path, "ops-fit", order=list(range(200)), labels=labels, train="last:2",
                    mode="mixed", opt={"kind": "sgd", "lr": 0.05, "momentum": 0.9}, batch=4,
                    fit={"epochs": 3, "shuffle": True, "seed": 3})
    loss = dev["loss"]
    assert loss[-1] < 0.7 * loss[0], f"per-epoch losses {loss}"
