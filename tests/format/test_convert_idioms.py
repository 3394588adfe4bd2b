"""Everyday PyTorch idioms that the converter maps onto the existing kernels.

Each model of ``support.torch_models.IDIOM_MODELS`` is written with some of them
(functional pools, means as global pooling, clamp, squeeze / unsqueeze / view,
zero padding before a conv, standalone BatchNorms, Identity / Dropout, a final
softmax, 1-D signals). Each is trained for a moment on scikit-learn's digits,
converted, and then:

- the oracle's int8 outputs agree with PyTorch's top-1 on held-out digits;
- the real ``micropython`` runs the file bit for bit like the oracle;
- a ``last:2`` training run of the device Trainer equals the numpy training
  reference bit for bit, and lowers the loss on a relabelled problem.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from evals.accuracy import parity as par
from microtrain_tools import convert as cv
from microtrain_tools import mtm
from microtrain_tools.mtm import Act, Op
from support.harness import ensure_natmod
from support.torch_models import IDIOM_MODELS
from support.training_cases import SGDM, Setup, device, differences, reference, state_of

N_TRAIN, N_TEST = 1200, 300
FINAL = {"bn": "softmax", "sig1d": "softmax", "misc": "log_softmax"}  # stripped by the converter


def _view(name: str, x: torch.Tensor) -> torch.Tensor:
    return x[:, 0] if name == "sig1d" else x  # 1-D: 8 rows as channels, 8 columns as time


@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images / 16.0, dtype=torch.float32)[:, None]
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    return x[perm], y[perm]


def _train(name: str, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int = 8) -> nn.Module:
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(y)).split(64):
            opt.zero_grad()
            out = model(x[idx])
            if name in FINAL:
                log_p = out if FINAL[name] == "log_softmax" else out.clamp_min(1e-9).log()
                loss = F.nll_loss(log_p, y[idx])
            else:
                loss = F.cross_entropy(out, y[idx])
            loss.backward()
            opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def converted(digits, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """name -> (torch model, .mtm path, model, notes), trained on N_TRAIN digits."""
    ensure_natmod()
    x, y = digits
    work = tmp_path_factory.mktemp("idioms")
    out = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small nets on a shared machine
    try:
        for name, cls in IDIOM_MODELS.items():
            torch.manual_seed(1)
            xv = _view(name, x)
            net = _train(name, cls(), xv[:N_TRAIN], y[:N_TRAIN])
            m, notes = cv._convert(net, xv[:256], progress=False)
            path = work / f"{name}.mtm"
            mtm.save(m, path)
            out[name] = (net, path, mtm.load(path), notes)
    finally:
        torch.set_num_threads(threads)
    return out


def _ops(m: mtm.Model) -> list[str]:
    return [Op(ly.op).name + ("" if ly.act == Act.NONE else f"+{Act(ly.act).name}") for ly in m.layers]


def test_idioms_map_onto_the_existing_ops(converted) -> None:  # type: ignore[no-untyped-def]
    ops = {name: _ops(c[2]) for name, c in converted.items()}
    assert ops["funcpool"] == ["CONV2D+RELU", "MAXPOOL", "CONV2D+RELU", "AVGPOOL", "LINEAR+RELU", "LINEAR"]
    assert ops["meanpool"] == ["CONV2D+RELU6", "CONV2D+RELU6", "GLOBAL_AVGPOOL", "CONV2D+RELU",
                               "GLOBAL_AVGPOOL", "ADD", "LINEAR+RELU", "LINEAR"]
    assert ops["pad"] == ["CONV2D+RELU"] * 3 + ["MAXPOOL", "LINEAR"]
    assert ops["bn"] == ["CONV2D+RELU", "MAXPOOL", "CONV2D+RELU", "LINEAR+RELU", "LINEAR"]
    assert ops["misc"] == ["CONV2D+RELU6", "CONV2D", "ADD+RELU", "CONV2D+RELU", "GLOBAL_AVGPOOL", "MAXPOOL",
                           "ADD", "LINEAR+RELU", "LINEAR"]
    misc = converted["misc"][2]
    assert misc.layer("c1").params[10:12] == [1, 1] and misc.layers[-1].fused == "out"
    assert ops["sig1d"] == ["CONV2D+RELU", "CONV2D", "ADD+RELU", "MAXPOOL", "CONV2D", "ADD", "GLOBAL_AVGPOOL",
                            "LINEAR"]
    # zero padding lives in the conv descriptor: pad_top / pad_left, and bottom / right via out_h / out_w
    pad = converted["pad"][2]
    p1, p2, p3 = (pad.layer(n).params for n in ("c1", "c2", "c3"))
    assert p1[:6] == [8, 8, 1, 4, 4, 8] and p1[10:12] == [0, 0]  # ZeroPad2d((0, 1, 0, 1)): bottom/right only
    assert p2[:6] == [4, 4, 8, 4, 4, 16] and p2[10:12] == [1, 1]
    assert p3[:6] == [4, 4, 16, 4, 4, 16] and p3[10:12] == [1, 1]  # F.pad((1, 0, 1, 0)): top/left only
    assert pad.layer("c1").fused == "pad,relu" and pad.layer("c2").fused == "pad_1,relu_1"
    assert pad.layers[3].params[5:7] == [4, 4]  # the global max pool is a 4 x 4 MAXPOOL
    # BatchNorms before a layer are named with '>'; the final softmax is recorded and reported
    bn = converted["bn"][2]
    assert [ly.fused for ly in bn.layers] == ["bn0>,relu", "", "bn1>,relu_1", "bn2>,relu_2", "bn3>,softmax"]
    assert any("softmax 'softmax' is stripped" in n for n in converted["bn"][3])
    assert converted["sig1d"][2].layers[-1].fused == "softmax" and not converted["funcpool"][3]
    assert converted["sig1d"][2].tensors[converted["sig1d"][2].input].signal_1d


@pytest.mark.parametrize("name", list(IDIOM_MODELS))
def test_idiom_agrees_with_torch_and_device_is_bitexact(name: str, converted, digits,  # type: ignore[no-untyped-def]
                                                        tmp_path: Path) -> None:
    net, path, m, _ = converted[name]
    x, y = digits
    xt, yt = _view(name, x[N_TRAIN:N_TRAIN + N_TEST]), y[N_TRAIN:N_TRAIN + N_TEST].numpy()
    with torch.no_grad():
        ref = net(xt).numpy().astype(np.float64)
    q = cv.quantize_input(m, xt)
    ora = cv.run_mtm(m, q)
    deq = cv.dequantize_output(m, ora)
    if name in FINAL:  # the file outputs the logits under the stripped softmax
        deq = getattr(torch, FINAL[name])(torch.from_numpy(deq), 1).numpy()
    agree = float((deq.argmax(1) == ref.argmax(1)).mean())
    acc = float((ref.argmax(1) == yt).mean())
    err = float(np.abs(deq - ref).mean() / np.abs(ref).mean())
    print(f"{name}: float acc {acc:.3f}, int8 top-1 agreement {agree:.3f}, mean rel err {err:.4f}")
    assert acc > 0.6, "the float model did not train (chance is 0.1)"
    assert agree >= 0.97 and err < 0.08
    dev, _ = par.run_device(path, q, tmp_path, name, progress=False)
    assert np.array_equal(dev, ora), f"{int((dev != ora).any(1).sum())} of {len(q)} samples differ"


@pytest.mark.parametrize("name", list(IDIOM_MODELS))
def test_idiom_trains_last2_on_device(name: str, converted, digits, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, path, m, _ = converted[name]
    x, y = digits
    xs = cv.quantize_input(m, _view(name, x[N_TRAIN:N_TRAIN + 96]))
    ys = ((y[N_TRAIN:N_TRAIN + 96] + 1) % 10).numpy()  # relabelled: the last layers must learn it
    samples = tmp_path / "samples.bin"
    xs.tofile(samples)
    s = Setup(name, path, m, xs, ys, xs, ys, samples, samples)
    kw = dict(order=range(12), labels=ys, train="last:2", mode="mixed", opt=SGDM, batch=4)
    dev = device(s, tmp_path, "steps", **kw)  # type: ignore[arg-type]
    ref = reference(s, **kw)  # type: ignore[arg-type]
    assert dev["loss"].tolist() == ref.losses
    assert not differences(ref.arrays(), state_of(dev))
    fit = device(s, tmp_path, "fit", order=range(96), labels=ys, train="last:2", mode="mixed",
                 opt={"kind": "sgd", "lr": 0.02, "momentum": 0.9}, batch=8, fit={"epochs": 4, "seed": 2})
    losses = fit["loss"].tolist()
    print(f"{name}: epoch losses {losses}")
    assert losses[-1] < 0.8 * losses[0], losses


def test_to_torch_undoes_the_folds(converted, digits) -> None:  # type: ignore[no-untyped-def]
    """``to-torch`` of the converted BatchNorm model: the BatchNorms before a layer (fused 'name>') become
    the identity and the folded weights compute what the original model computes (up to int8 weights)."""
    from microtrain_tools import to_torch

    net, _, m, _ = converted["bn"]
    fresh = IDIOM_MODELS["bn"]()
    sd, notes = to_torch.to_state_dict(m, fresh)
    fresh.load_state_dict(sd, strict=True)
    fresh.eval()
    assert sum("set to identity (folded into" in n for n in notes) == 4
    x = digits[0][N_TRAIN:N_TRAIN + N_TEST]
    with torch.no_grad():
        ref, got = net(x), fresh(x)
    assert float((ref.argmax(1) == got.argmax(1)).float().mean()) >= 0.98
    assert float((ref - got).abs().max()) < 0.05


def test_batchnorm_before_grouped_and_depthwise_convs() -> None:
    """A BatchNorm before a layer scales that layer's input channels: per group for grouped convs."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.BatchNorm2d(4), nn.Conv2d(4, 8, 3, groups=4), nn.ReLU(), nn.BatchNorm2d(8),
                        nn.Conv2d(8, 6, 1, groups=2), nn.ReLU(), nn.Flatten(), nn.BatchNorm1d(6 * 6 * 6),
                        nn.Linear(216, 5))
    for mod in net.modules():
        if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):
            with torch.no_grad():
                mod.running_mean.uniform_(-1, 1)
                mod.running_var.uniform_(0.3, 3)
                mod.weight.uniform_(0.3, 2)
                mod.bias.uniform_(-1, 1)
    net.eval()
    x = torch.rand(300, 4, 8, 8)
    m = cv.convert(net, x, progress=False)
    assert [(ly.name, ly.fused) for ly in m.layers] == [("1", "0>,2"), ("4", "3>,5"), ("8", "7>")]
    deq = cv.dequantize_output(m, cv.run_mtm(m, x))
    with torch.no_grad():
        ref = net(x).numpy()
    assert float(np.abs(deq - ref).mean() / np.abs(ref).mean()) < 0.02
    assert float((deq.argmax(1) == ref.argmax(1)).mean()) >= 0.97
