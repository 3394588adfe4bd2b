"""`make coverage`: bring-your-own-model coverage.

A suite of PyTorch models, each trained briefly here (fixed seeds, one thread), converted,
run in the real ``micropython`` (x64 natmod) and fine-tuned there:

- the four MLPerf Tiny reference models and MobileNetV2-w0.35 at 128x128, the Tiny Training
  Engine's model (:mod:`evals.lib.mlperf_tiny`);
- one small model per supported idiom of docs/ops.md (:func:`idiom_models`, on scikit-learn's
  8x8 digits, or on smartwatch windows for the 1-D ones);
- the models of ``evals.accuracy.coverage_ops`` (the ops the idiom models above do not cover).

Per model: top-1 agreement of the device's int8 outputs with PyTorch on held-out data
(>= 0.98), the device's outputs equal the numpy oracle's on every held-out sample (bit-exact),
and fine-tuning on the device (``Trainer.fit``, last two weighted layers) lowers the loss on the
fine-tuning samples. The autoencoder is also fine-tuned in PyTorch on the same protocol (BN
folded as on the device, same layers, SGD, batch, epochs): its held-out reconstruction MSE on
the device must be within 5 % of PyTorch's. MobileNetV2 is fine-tuned sparsely instead, as
`make mem-mcu`'s mbv2_035_sparse trains it (:data:`SPARSE_PROTOCOL`), on the device and in PyTorch
float32 (BN folded, the same layers, policy, SGD, batch, epochs): its accuracy on the fine-tuning
samples on the device must be within ``SPARSE_TOL`` of PyTorch's. The sequence and attention models
of ``coverage_ops.VS_TORCH`` are fine-tuned on the device and in PyTorch float32 on the same protocol
(:func:`torch_finetune`; the GRU and the LSTM on smartwatch windows whole, with backward through time): the
device's accuracy on the fine-tuning samples within ``VS_TORCH_TOL`` of PyTorch's. ``ops`` counts the
docs/ops.md rows the suite uses.

The MLPerf models do not all fit a 256 KB heap (docs/memory.md): every model runs on the unix port
with a large heap (``HEAP``). Last line::

    coverage: models=K/K agree_min=A bitexact=N/N train=K/K ops=M

Exit status 0 when every bar holds, 1 when one fails.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from numpy.typing import NDArray
from tqdm import tqdm

from evals.accuracy import coverage_ops
from evals.lib import datasets as ds
from evals.lib import mlperf_tiny as mlp
from microtrain_tools import convert as cv
from microtrain_tools import mtm, paths

__all__ = ["MIN_AGREE", "AE_TOL", "SPARSE_TOL", "Case", "Result", "idiom_models", "idiom_cases", "run_case",
           "ops_used", "main"]

RUNNER = Path(__file__).resolve().parents[1] / "mp" / "coverage_runner.py"
WORKDIR = paths.BUILD / "coverage"
HEAP = "64m"  # the MLPerf models do not all fit 256 KB (docs/memory.md)
MIN_AGREE = 0.98
# Activation ranges of the MLPerf models: the 99.99 % percentile, as evals/lib/refmodels.py found for
# Fashion-MNIST: on DS-CNN-S min/max ranges cost top-1 agreement with PyTorch (outliers stretch
# the int8 step), on MobileNetV1 the two are about equal. The small models use the converter's
# default (min/max), as a user would.
CALIB: dict[str, Any] = {"method": "percentile", "percentile": 99.99}
# MobileNetV2: ReLU6 bounds its activations, and min/max ranges keep the top-1 agreement that the
# percentile's clipping of its wide, bounded ranges lost
CALIB_OF: dict[str, dict[str, Any]] = {"mobilenet_v2": {"method": "minmax"}}
AE_TOL = 0.05
F32 = NDArray[np.float32]
I64 = NDArray[np.int64]


# --------------------------------------------------------------------------
# one small model per idiom of docs/ops.md


class _Act(nn.Module):
    """conv -> act -> max pool -> linear, the activation given as a module or a function."""

    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.act = act
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.act(self.conv(x))), 1))


class _Fn(nn.Module):
    """conv -> fn(x) -> max pool -> conv -> fn2(x) -> linear: functional spellings."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor],
                 fn2: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        super().__init__()
        self.fn, self.fn2 = fn, fn2 or fn
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(self.fn(self.conv1(x)), 2)
        x = self.fn2(self.conv2(x))
        return self.fc(x.flatten(1))


class _Pool(nn.Module):
    """conv -> relu -> conv -> relu -> pool(x) -> (flatten) -> linear: the pooling spellings. Two convs:
    one conv's 16 channels pooled globally classify digits poorly (accuracy 0.56; agreement 0.93)."""

    def __init__(self, pool: Callable[[torch.Tensor], torch.Tensor], feats: int) -> None:
        super().__init__()
        self.pool = pool
        self.conv = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(2 * feats, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv2(F.relu(self.conv(x))))
        return self.fc(self.pool(x).reshape(x.shape[0], -1))


class _Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 16, 3, padding=1)
        self.a = nn.Conv2d(16, 16, 3, padding=1)
        self.b = nn.Conv2d(16, 16, 3, padding=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x).relu()
        x = F.relu(x + self.a(x))
        x = torch.relu(torch.add(x, self.b(x)))
        return self.fc(x.mean((2, 3)))


class _Pad(nn.Module):
    """TensorFlow-style 'same' stride-2 convs: ZeroPad2d and F.pad folded into the conv."""

    def __init__(self) -> None:
        super().__init__()
        self.pad = nn.ZeroPad2d((0, 1, 0, 1))
        self.conv1 = nn.Conv2d(1, 16, 3, 2)
        self.conv2 = nn.Conv2d(16, 16, 3, 2)
        self.fc = nn.Linear(16 * 2 * 2, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(self.pad(x)))
        x = F.relu(self.conv2(F.pad(x, (0, 1, 0, 1))))
        return self.fc(torch.flatten(x, 1))


class _Reshape(nn.Module):
    """squeeze / unsqueeze / view of a global pool's 1x1, nn.Flatten, dropout and identity dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(1, 16, 3, padding=1)  # two convs: see _Pool
        self.conv = nn.Conv2d(16, 32, 3, padding=1)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.drop = nn.Dropout(0.1)
        self.ident = nn.Identity()
        self.fc1 = nn.Linear(32, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gap(F.relu(self.conv(F.relu(self.conv0(x))))).squeeze(-1).squeeze(-1).unsqueeze(-1)
        x = self.drop(x.view(x.size(0), -1))
        x = F.dropout(F.relu(self.fc1(self.ident(x))), 0.1, training=self.training)
        return self.fc2(x.contiguous())


def _seq(*mods: nn.Module) -> nn.Module:
    return nn.Sequential(*mods)


def _har1d() -> nn.Module:
    return _seq(nn.Conv1d(6, 16, 5, padding=2, bias=False), nn.BatchNorm1d(16), nn.ReLU(), nn.MaxPool1d(4),
                nn.Conv1d(16, 16, 3, padding=1, groups=16), nn.ReLU(), nn.Conv1d(16, 24, 1), nn.ReLU6(),
                nn.AvgPool1d(2), nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(24, 7))


def idiom_models() -> list[tuple[str, Callable[[], nn.Module], tuple[int, ...]]]:
    """(name, factory, input shape) of one small model per docs/ops.md row (digits or HAR windows)."""
    d = (1, 8, 8)
    luts = [("sigmoid", nn.Sigmoid), ("tanh", nn.Tanh), ("hardswish", nn.Hardswish),
            ("hardsigmoid", nn.Hardsigmoid), ("leaky_relu", lambda: nn.LeakyReLU(0.1)), ("silu", nn.SiLU),
            ("gelu", nn.GELU)]
    out: list[tuple[str, Callable[[], nn.Module], tuple[int, ...]]] = [
        ("conv_linear", lambda: _seq(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                     nn.Linear(128, 10)), d),
        ("conv1d_dw_har", _har1d, (6, 128)),
        ("bn_standalone", lambda: _seq(nn.BatchNorm2d(1), nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
                                       nn.MaxPool2d(2), nn.Flatten(), nn.Linear(72, 10)), d),
        ("relu_spellings", lambda: _Fn(F.relu, lambda t: t.clamp(min=0)), d),
        ("relu_torch", lambda: _Fn(torch.relu, lambda t: t.relu()), d),
        ("relu6", lambda: _Fn(F.relu6, nn.ReLU6()), d),
        ("hardtanh06", lambda: _Fn(nn.Hardtanh(0, 6), lambda t: F.hardtanh(t, 0, 6)), d),
        ("clamp06", lambda: _Fn(lambda t: t.clamp(0, 6), lambda t: torch.clip(t, 0, 6)), d),
        ("maxpool_fn", lambda: _Pool(lambda t: F.max_pool2d(t, 2), 16 * 4 * 4), d),
        ("avgpool", lambda: _Pool(lambda t: F.avg_pool2d(t, 2), 16 * 4 * 4), d),
        ("avgpool_padded", lambda: _Pool(nn.AvgPool2d(3, 2, padding=1, count_include_pad=False), 16 * 4 * 4),
         d),
        ("adaptive_avg", lambda: _Pool(nn.AdaptiveAvgPool2d(1), 16), d),
        ("adaptive_max", lambda: _Pool(lambda t: F.adaptive_max_pool2d(t, 1), 16), d),
        ("mean_pool", lambda: _Pool(lambda t: t.mean((2, 3)), 16), d),
        ("amax_pool", lambda: _Pool(lambda t: torch.amax(t, (2, 3)), 16), d),
        ("residual_add", _Residual, d),
        ("zero_pad", _Pad, d),
        ("reshape_dropout", _Reshape, d),
        # LogSoftmax: trained with cross-entropy on its output, that is on the logits (log_softmax is
        # idempotent); a final Softmax trained that way grows its logits (loss rose when fine-tuned)
        ("final_softmax", lambda: _seq(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                       nn.Flatten(), nn.Linear(128, 10), nn.LogSoftmax(dim=1)), d),
    ]
    for name, act in luts:
        out.append((name, lambda a=act: _Act(a()), d))  # type: ignore[misc]
    out.append(("lut_functional", lambda: _Fn(torch.sigmoid, lambda t: F.leaky_relu(t, 0.2)), d))
    out.append(("lut_methods", lambda: _Fn(lambda t: t.tanh(), F.silu), d))
    return out


# --------------------------------------------------------------------------
# data for the small models


@dataclass
class Case:
    """A trained model with its data; the loss of its fine-tuning."""

    name: str
    group: str  # "mlperf", "idiom" or "ops"
    model: nn.Module
    x_test: F32
    y_test: I64
    x_tune: F32
    y_tune: I64
    calib: F32
    loss: str = "xent"
    info: str = ""
    train_s: float = 0.0
    calib_kw: dict[str, Any] = field(default_factory=dict)  # convert()'s calibration arguments


def _digits(shape: tuple[int, ...]) -> tuple[F32, I64]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    if len(shape) == 3 and shape[1:] != (8, 8):  # other sizes: nearest resize, channels replicated
        x = F.interpolate(torch.from_numpy(x), size=shape[1:], mode="nearest").numpy()
    if len(shape) == 3 and shape[0] != 1:
        x = np.repeat(x, shape[0], axis=1)
    elif len(shape) == 2:  # (C, L): the rows of the image as a sequence of C channels
        flat = x.reshape(len(x), -1)
        x = np.resize(flat, (len(x), shape[0] * shape[1])).reshape(len(x), *shape)
    return np.ascontiguousarray(x, dtype=np.float32), d.target.astype(np.int64)


def _train_small(model: nn.Module, x: F32, y: I64, epochs: int = 20) -> nn.Module:
    # no weight decay: Adam's coupled decay drives the weights of a dead channel to ~1e-12, a weight
    # scale the file cannot hold (the converter refuses it)
    return mlp.train_classifier(model, x, y, epochs, 1e-2, batch=32, seed=0, weight_decay=0.0)


def _har_windows(shape: tuple[int, ...]) -> tuple[F32, I64, NDArray[np.bool_]]:
    w = ds.watch_windows(window=shape[1])
    return w.x, w.y, np.isin(w.subject, ds.PRETRAIN_SUBJECTS)


def small_case(name: str, group: str, model: nn.Module, shape: tuple[int, ...]) -> Case:
    """Train ``model`` on the data its input shape suits: 6-channel 1-D windows -> HAR, else digits."""
    t0 = time.perf_counter()
    with torch.no_grad():
        n_out = int(model.eval()(torch.zeros(2, *shape)).shape[1])
    if len(shape) == 2 and 6 in (shape[0], shape[1]):
        # HAR windows: (C, L) signals, or (T, D) steps for a sequence model (shape[1] == 6)
        seq = shape[0] != 6
        x, y, pre = _har_windows((6, shape[0]) if seq else shape)
        if seq:
            x = np.ascontiguousarray(x.transpose(0, 2, 1))
        y = y % n_out
        rest = np.random.default_rng(0).permutation(np.flatnonzero(~pre))
        tr, tune, te = np.flatnonzero(pre), rest[:len(rest) // 2], rest[len(rest) // 2:]
        epochs = 10
    else:
        x, y = _digits(shape)
        y = y % n_out
        perm = np.random.default_rng(0).permutation(len(y))
        tr, tune, te = perm[:1000], perm[1000:1400], perm[1400:]
        epochs = 20
    m = _train_small(model, x[tr], y[tr], epochs)
    return Case(name, group, m, x[te], y[te], x[tune], y[tune], x[tr][:500], "xent",
                "HAR windows" if len(shape) == 2 else "digits", time.perf_counter() - t0)


def _seeded(make: Callable[[], nn.Module]) -> nn.Module:
    # torch's default generator starts from a random seed: unseeded initial weights made each run
    # (and `--only`, which skips models) train a different float model
    torch.manual_seed(0)
    return make()


def idiom_cases(only: Sequence[str] = ()) -> list[Case]:
    return [small_case(n, "idiom", _seeded(f), s) for n, f, s in idiom_models() if not only or n in only]


def ops_cases(only: Sequence[str] = ()) -> list[Case]:
    """The models of evals/accuracy/coverage_ops.py (one per op the idioms do not cover)."""
    return [small_case(n, "ops", m, tuple(s)) for n, m, s in coverage_ops.models() if not only or n in only]


def mlperf_cases(mode: str = "full", only: Sequence[str] = (),
                 log: Callable[[str], None] | None = None) -> list[Case]:
    return [Case(c.name, "mlperf", c.model, c.x_test, c.y_test, c.x_tune, c.y_tune, c.calib, c.loss, c.info,
                 c.train_s, CALIB_OF.get(c.name, CALIB)) for c in mlp.cases(mode, log, tuple(only))]


# --------------------------------------------------------------------------
# running one case


@dataclass
class Result:
    name: str
    group: str
    agree: float  # top-1, device vs PyTorch (classifiers)
    bitexact: int
    n: int
    loss_before: float
    loss_after: float
    device: dict[str, Any] = field(default_factory=dict)
    torch_mse: float | None = None  # the autoencoder: PyTorch's held-out MSE after the same fine-tuning
    device_mse: float | None = None
    torch_acc: tuple[float, float] | None = None  # a sparse fine-tune: PyTorch's accuracy before, after
    torch_tol: float = 0.0  # how far below PyTorch's accuracy after the fine-tune the device may end
    seconds: float = 0.0
    info: str = ""

    @property
    def trained(self) -> bool:
        return self.loss_after < self.loss_before

    @property
    def ok(self) -> bool:
        ae = self.torch_mse is None or self.device_mse is None or \
            self.device_mse <= (1 + AE_TOL) * self.torch_mse
        sp = self.torch_acc is None or float(self.device.get("tune_acc_after", 0.0)) >= \
            self.torch_acc[1] - self.torch_tol
        return self.agree >= MIN_AGREE and self.bitexact == self.n and self.trained and ae and sp


# fine-tuning on the device: the last two weighted layers, float32 master copy of the last, with
# range adaptation (docs/training.md). The float models learned with label smoothing (small
# logits); plain cross-entropy grows the logits past the output range calibrated for them, and
# the clamped logits cost what training gains (on ops-upsample, without adaptation the accuracy
# on the tuning samples fell while the float weights had improved; with it, it holds, as in
# PyTorch float32 on the same protocol).
PROTOCOL: dict[str, Any] = {"layers": "last:2", "mode": "mixed", "lr": 0.01, "momentum": 0.9, "batch": 8,
                            "epochs": 2, "seed": 1, "adapt_ranges": True}
# MobileNetV2's sparse fine-tune (make mem-mcu's mbv2_035_sparse): the last block's depthwise conv with
# DynamicSparse(0.1) (its channels of the largest error per sample, more for harder samples) and the
# classifier (the output layer: dense), int8, plain SGD, batch 1
SPARSE_PROTOCOL: dict[str, Any] = {"layers": list(mlp.MBV2_SPARSE_LAYERS), "mode": "int8", "lr": 0.05,
                                   "momentum": 0.0, "batch": 1, "epochs": 2, "seed": 1, "sparse": 0.1}
SPARSE_TOL = 0.05
# coverage_ops.VS_TORCH: the device's protocol also run in PyTorch float32; the device's accuracy on the
# fine-tuning samples after it must be within VS_TORCH_TOL of PyTorch's
VS_TORCH_TOL = 0.02
# the GRU and the LSTM are fine-tuned whole (the recurrent layer with backward through time, its head)
PROTOCOLS: dict[str, dict[str, Any]] = {"mobilenet_v2": SPARSE_PROTOCOL,
                                        "ops-gru_har": dict(PROTOCOL, layers="all"),
                                        "ops-lstm_har": dict(PROTOCOL, layers="all")}
AE_PROTOCOL: dict[str, Any] = {"layers": "last:2", "mode": "mixed", "lr": 0.01, "momentum": 0.9, "batch": 8,
                               "epochs": 3, "seed": 1}


def run_device(cfg: dict[str, Any], work: Path, tag: str, heapsize: str = HEAP) -> dict[str, Any]:
    path = work / f"{tag}.json"
    path.write_text(json.dumps(cfg))
    env = dict(os.environ, MICROPYPATH=f"{paths.natmod_dir('x64')}:{paths.PYTHON_LIB}")
    p = subprocess.run([paths.micropython(), "-X", f"heapsize={heapsize}", str(RUNNER), str(path)],
                       capture_output=True, text=True, env=env, timeout=3600)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"device run {tag} failed (exit {p.returncode}):\n"
                           f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return dict(json.loads(lines[-1][7:]))


def _torch_out(model: nn.Module, x: F32) -> NDArray[np.float32]:
    with torch.no_grad():
        return torch.cat([model(torch.from_numpy(x[i:i + 128])) for i in range(0, len(x), 128)]).numpy()


def _folded(model: nn.Module) -> nn.Sequential:
    """The autoencoder with every BatchNorm folded into its Linear (eval mode): the device's layers."""
    mods = list(copy.deepcopy(model).eval().net)
    out: list[nn.Module] = []
    for m in mods:
        if isinstance(m, nn.BatchNorm1d):
            lin = out.pop()
            assert isinstance(lin, nn.Linear)
            out.append(torch.nn.utils.fusion.fuse_linear_bn_eval(lin, m))
        else:
            out.append(m)
    return nn.Sequential(*out)


def torch_ae_finetune(model: nn.Module, x: F32, x_test: F32, p: dict[str, Any]) -> float:
    """The device's autoencoder protocol in PyTorch float32: SGD on the last two (folded) Linears."""
    torch.manual_seed(p["seed"])
    net = _folded(model)
    lins = [m for m in net if isinstance(m, nn.Linear)][-int(str(p["layers"])[5:]):]
    for prm in net.parameters():
        prm.requires_grad_(False)
    params = [q for m in lins for q in m.parameters()]
    for q in params:
        q.requires_grad_(True)
    opt = torch.optim.SGD(params, lr=p["lr"], momentum=p["momentum"])
    xt = torch.from_numpy(x)
    gen = torch.Generator().manual_seed(p["seed"])
    for _ in range(p["epochs"]):
        for idx in torch.randperm(len(x), generator=gen).split(p["batch"]):
            loss = F.mse_loss(net(xt[idx]), xt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        return float(F.mse_loss(net(torch.from_numpy(x_test)), torch.from_numpy(x_test)))


def _fold_conv_bn(net: nn.Module, name: str) -> nn.Conv2d:
    """Fold the BatchNorm after conv ``name`` (the next module of its Sequential) into it, as the
    converter does (eval mode); the BN becomes an identity. Returns the folded conv."""
    mods = dict(net.named_modules())
    parent, i = name.rsplit(".", 1)
    seq = mods[parent]
    assert isinstance(seq, nn.Sequential) and isinstance(seq[int(i) + 1], nn.BatchNorm2d), name
    conv = torch.nn.utils.fusion.fuse_conv_bn_eval(seq[int(i)], seq[int(i) + 1])
    seq[int(i)], seq[int(i) + 1] = conv, nn.Identity()
    return conv


def torch_sparse_finetune(model: nn.Module, x: F32, y: I64, p: dict[str, Any]) -> tuple[float, float]:
    """The device's sparse protocol in PyTorch float32: the named layers (convs with their BN folded)
    trained by SGD, per sample the non-output layers' gradients kept for the ceil(rate * C) output
    channels of the largest L1 error, rate = clamp(loss / largest loss so far, lambda_min, 1)
    (DynamicSparse's default form). Returns the accuracy on the samples before and after."""
    torch.manual_seed(p["seed"])
    net = copy.deepcopy(model).eval()
    mods = dict(net.named_modules())
    layers = [_fold_conv_bn(net, n) if isinstance(mods[n], nn.Conv2d) else mods[n] for n in p["layers"]]
    for q in net.parameters():
        q.requires_grad_(False)
    params = [q for m in layers for q in m.parameters()]
    for q in params:
        q.requires_grad_(True)
    grads: dict[int, torch.Tensor] = {}
    def keep_grad(i: int) -> Callable[[nn.Module, Any, torch.Tensor], None]:
        def hook(_m: nn.Module, _i: Any, o: torch.Tensor) -> None:
            if o.requires_grad:
                o.register_hook(lambda g: grads.__setitem__(i, g))
        return hook

    for i, m in enumerate(layers[:-1]):  # the output layer stays dense
        m.register_forward_hook(keep_grad(i))
    opt = torch.optim.SGD(params, lr=p["lr"], momentum=p["momentum"])
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def acc() -> float:
        with torch.no_grad():
            return float((torch.cat([net(xt[i:i + 64]) for i in range(0, len(x), 64)]).argmax(1) == yt)
                         .float().mean())

    before, top = acc(), 0.0
    gen = torch.Generator().manual_seed(p["seed"])
    for _ in range(p["epochs"]):
        for idx in torch.randperm(len(x), generator=gen).split(p["batch"]):
            loss = F.cross_entropy(net(xt[idx]), yt[idx])
            top = max(top, loss.item())
            rate = min(1.0, max(p["sparse"], loss.item() / top if top > 0 else 1.0))
            opt.zero_grad()
            loss.backward()
            for i, g in grads.items():
                c = g.shape[1]
                k = math.ceil(rate * c)
                if k < c:
                    keep = torch.zeros(c)
                    keep[g.abs().sum((0, 2, 3)).topk(k).indices] = 1.0
                    w, b = layers[i].weight.grad, layers[i].bias.grad
                    assert w is not None and b is not None
                    w *= keep.view(-1, *([1] * (w.dim() - 1)))
                    b *= keep
            opt.step()
    return before, acc()


def torch_finetune(model: nn.Module, m: mtm.Model, x: F32, y: I64, p: dict[str, Any]) -> tuple[float, float]:
    """A device protocol in PyTorch float32: every parameter (``layers="all"``) or the file's last N
    weighted layers (``last:N``; their modules, by the layer names: a LayerNorm's affine conv is the
    LayerNorm) trained by SGD with momentum, the batch and epochs of the device. Returns the accuracy
    on the samples before and after."""
    torch.manual_seed(p["seed"])
    net = copy.deepcopy(model).eval()
    if p["layers"] == "all":
        params = list(net.parameters())
    else:
        mods = dict(net.named_modules())
        n_last = int(str(p["layers"]).split(":")[1])
        names = [ly.name for ly in m.layers if ly.op in (mtm.Op.CONV2D, mtm.Op.LINEAR)][-n_last:]
        params = [q for n in names for q in mods[n].parameters()]
    for q in net.parameters():
        q.requires_grad_(False)
    for q in params:
        q.requires_grad_(True)
    opt = torch.optim.SGD(params, lr=p["lr"], momentum=p["momentum"])
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def acc() -> float:
        with torch.no_grad():
            return float((torch.cat([net(xt[i:i + 64]) for i in range(0, len(x), 64)]).argmax(1) == yt)
                         .float().mean())

    before = acc()
    gen = torch.Generator().manual_seed(p["seed"])
    for _ in range(p["epochs"]):
        for idx in torch.randperm(len(x), generator=gen).split(p["batch"]):
            opt.zero_grad()
            F.cross_entropy(net(xt[idx]), yt[idx]).backward()
            opt.step()
    return before, acc()


def run_case(c: Case, work: Path = WORKDIR, heapsize: str = HEAP) -> Result:
    """Convert, check bit-exactness and agreement on the held-out data, fine-tune on the device."""
    t0 = time.perf_counter()
    work.mkdir(parents=True, exist_ok=True)
    model_path = work / f"{c.name}.mtm"
    m = cv.convert(c.model, c.calib, progress=False, **c.calib_kw)
    model_path.write_bytes(mtm.write(m))
    qt, qn = cv.quantize_input(m, c.x_test), cv.quantize_input(m, c.x_tune)
    qt.tofile(work / f"{c.name}.test.bin")
    qn.tofile(work / f"{c.name}.tune.bin")
    if c.loss == "xent":
        c.y_test.astype(np.uint8).tofile(work / f"{c.name}.test.t")
        c.y_tune.astype(np.uint8).tofile(work / f"{c.name}.tune.t")
    else:  # the autoencoder reconstructs its input
        c.x_test.reshape(len(c.x_test), -1).astype(np.float32).tofile(work / f"{c.name}.test.t")
        c.x_tune.reshape(len(c.x_tune), -1).astype(np.float32).tofile(work / f"{c.name}.tune.t")
    proto = AE_PROTOCOL if c.loss == "mse" else PROTOCOLS.get(c.name, PROTOCOL)
    cfg = dict(proto, model=str(model_path), eval_in=str(work / f"{c.name}.test.bin"),
               eval_out=str(work / f"{c.name}.out.bin"), tune_in=str(work / f"{c.name}.tune.bin"),
               tune_t=str(work / f"{c.name}.tune.t"), test_t=str(work / f"{c.name}.test.t"), loss=c.loss)
    dev = run_device(cfg, work, c.name, heapsize)
    n_out = m.tensors[m.output].numel
    out = np.fromfile(work / f"{c.name}.out.bin", dtype=np.int8).reshape(len(qt), n_out)
    ref = np.concatenate([cv.run_mtm(m, qt[i:i + 100]) for i in range(0, len(qt), 100)])
    bitexact = int(np.all(out == ref.reshape(out.shape), axis=1).sum())
    res = Result(c.name, c.group, 1.0, bitexact, len(qt), float(dev["tune_before"]), float(dev["tune_after"]),
                 dev, info=c.info)
    if c.loss == "xent":
        res.agree = float((out.argmax(1) == _torch_out(c.model, c.x_test).argmax(1)).mean())
        if proto.get("sparse"):
            res.torch_acc = torch_sparse_finetune(c.model, c.x_tune, c.y_tune, proto)
            res.torch_tol = SPARSE_TOL
        elif c.name in coverage_ops.VS_TORCH:
            res.torch_acc = torch_finetune(c.model, m, c.x_tune, c.y_tune, proto)
            res.torch_tol = VS_TORCH_TOL
    else:  # agreement has no meaning for a regression: report the MSE comparison instead
        res.torch_mse = torch_ae_finetune(c.model, c.x_tune, c.x_test, proto)
        res.device_mse = float(dev["test_after"])
    res.seconds = time.perf_counter() - t0
    return res


# --------------------------------------------------------------------------
# which docs/ops.md rows the suite uses


def ops_used(models: Sequence[nn.Module]) -> set[int]:
    """Indices into ``convert.REGISTRY`` of the rows the models' traced ops fall under."""
    rows: set[int] = set()
    index = {id(e): i for i, e in enumerate(cv.REGISTRY)}
    for model in models:
        gm = cv._trace(copy.deepcopy(model).eval())  # the converter's own trace and lookup
        mods = dict(gm.named_modules())
        for node in gm.graph.nodes:
            if node.op in ("call_module", "call_function", "call_method"):
                e = cv._lookup(node, mods)
                if isinstance(e, cv.OpEntry):
                    rows.add(index[id(e)])
    return rows


# --------------------------------------------------------------------------


def _line(r: Result) -> str:
    d = r.device
    s = (f"{r.name:<16} {r.group:<6} agree={r.agree:.4f} bitexact={r.bitexact}/{r.n} "
         f"loss {r.loss_before:.4f} -> {r.loss_after:.4f}")
    if r.torch_mse is not None:
        s += f" held-out mse device={r.device_mse:.4f} torch={r.torch_mse:.4f}"
    elif d.get("tune_acc_after") is not None:
        s += f" tune acc {d['tune_acc_before']:.3f} -> {d['tune_acc_after']:.3f}"
        if r.torch_acc is not None:
            what = "sparse; " if r.torch_tol == SPARSE_TOL else ""
            s += f" ({what}PyTorch float32 {r.torch_acc[0]:.3f} -> {r.torch_acc[1]:.3f})"
    return s + f" fwd={d.get('fwd_ms', 0):.1f}ms ({r.seconds:.0f}s){'' if r.ok else '  FAIL'}"


def summary(results: Sequence[Result], ops: int) -> str:
    k = len(results)
    agree = min((r.agree for r in results), default=0.0)
    return (f"coverage: models={sum(r.ok for r in results)}/{k} agree_min={agree:.4f} "
            f"bitexact={sum(r.bitexact for r in results)}/{sum(r.n for r in results)} "
            f"train={sum(r.trained for r in results)}/{k} ops={ops}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evals.accuracy.coverage", description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=tuple(mlp.SIZES), default="full",
                   help="MLPerf models: full, quick (fewer samples, epochs) or smoke (untrained, 4 inputs)")
    p.add_argument("--only", nargs="*", default=[], help="run only these models (names)")
    p.add_argument("--no-mlperf", action="store_true", help="the idiom and ops models only")
    p.add_argument("--work", type=Path, default=WORKDIR)
    p.add_argument("--write-doc", type=Path, default=None, metavar="MD",
                   help="write the fine-tunes compared with PyTorch float32 (a generated page) to MD")
    return p


def vs_torch_doc(results: Sequence[Result], argv: Sequence[str]) -> str:
    """docs/coverage.md: each fine-tune the suite also ran in PyTorch float32, side by side."""
    lines = ["# Fine-tuning on the device next to PyTorch", "",
             "Generated by `python -m evals.accuracy.coverage " + " ".join(argv) + "` (do not edit). Each "
             "model below is trained briefly in PyTorch, converted, and fine-tuned on the device (the real "
             "`micropython`, x64 natmod) and in PyTorch float32 on the same protocol: the same layers, "
             "optimiser, batch and epochs (evals/accuracy/coverage.py: `PROTOCOL` with "
             "`torch_finetune`, MobileNetV2's `SPARSE_PROTOCOL` with `torch_sparse_finetune`). "
             "Accuracy on the fine-tuning samples before and after; the device must end within the bar "
             "below PyTorch's.", "",
             "| model | device before -> after | PyTorch float32 before -> after | device - PyTorch | bar |",
             "|---|---|---|---|---|"]
    for r in results:
        if r.torch_acc is None:
            continue
        d0, d1 = float(r.device.get("tune_acc_before", 0.0)), float(r.device.get("tune_acc_after", 0.0))
        diff = round(100 * (d1 - r.torch_acc[1]), 1) + 0.0  # (no "-0.0")
        lines.append(f"| {r.name} | {100 * d0:.1f} % -> {100 * d1:.1f} % | {100 * r.torch_acc[0]:.1f} % -> "
                     f"{100 * r.torch_acc[1]:.1f} % | {diff:+.1f} pp | "
                     f">= -{100 * r.torch_tol:.0f} pp{'' if r.ok else ' FAIL'} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    models: list[nn.Module] = []
    results: list[Result] = []
    names = [n for n, _, _ in idiom_models()]
    only = tuple(a.only)
    mlperf = () if a.no_mlperf else tuple(n for n in ("ds_cnn_s", "resnet8", "mobilenet_v1", "autoencoder",
                                                                      "mobilenet_v2")
                                          if not only or n in only)
    idioms = [n for n in names if not only or n in only]
    bar = tqdm(total=len(mlperf) + len(idioms), desc="coverage", unit="model", dynamic_ncols=True)

    def done(c: Case) -> None:
        bar.set_postfix_str(f"{c.name}: device")
        try:
            r = run_case(c, a.work)
        except (cv.ConvertError, RuntimeError) as e:  # counted as a failed model; the suite goes on
            r = Result(c.name, c.group, 0.0, 0, len(c.x_test), 0.0, 0.0, info=f"error: {e}")
            tqdm.write(f"{c.name:<16} {c.group:<6} FAIL {str(e).splitlines()[0]}")
        r.seconds += c.train_s
        results.append(r)
        models.append(c.model)
        if not r.info.startswith("error: "):
            tqdm.write(_line(r))
        bar.update(1)

    for name in mlperf:
        bar.set_postfix_str(f"{name}: training")
        for c in mlperf_cases(a.mode, (name,), lambda s, n=name: bar.set_postfix_str(f"{n}: {s}")):
            done(c)
    for name in idioms:
        bar.set_postfix_str(f"{name}: training")
        for c in idiom_cases((name,)):
            done(c)
    extra = ops_cases(only)
    bar.total += len(extra)
    for c in extra:
        done(c)
    bar.close()
    used = ops_used(models)
    missing = [cv.REGISTRY[i].forms for i in range(len(cv.REGISTRY)) if i not in used]
    print(f"docs/ops.md rows used: {len(used)} of {len(cv.REGISTRY)}" +
          (f" (not used: {'; '.join(missing)})" if missing else ""))
    for r in results:
        if r.torch_mse is not None and r.device_mse is not None:
            rel = 100 * (r.device_mse / r.torch_mse - 1)
            print(f"autoencoder: fine-tuned on the device, held-out reconstruction MSE {r.device_mse:.4f} vs "
                  f"PyTorch {r.torch_mse:.4f} on the same protocol ({rel:+.1f} %, bar +{100 * AE_TOL:.0f} %)")
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time() + ch.ru_utime + ch.ru_stime  # ~ the wall time on an idle machine
    print(f"coverage: {time.perf_counter() - t0:.0f} s wall, {cpu:.0f} s CPU; micropython (unix port, x64 "
          f"natmod) with -X heapsize={HEAP}")
    print(summary(results, len(used)))
    if a.write_doc is not None:
        args = list(argv if argv is not None else sys.argv[1:])
        if "--work" in args:  # (a scratch folder: not part of the recipe)
            k = args.index("--work")
            del args[k:k + 2]
        a.write_doc.write_text(vs_torch_doc(results, args))
    return 0 if results and all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
