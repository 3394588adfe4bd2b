"""On-device training (python_lib/microtrain, docs/training.md) in the real micropython binary.

Two small CNNs are trained for a few seconds in PyTorch on scikit-learn's handwritten
digits and converted with the project's converter: a 2-D net (conv + BN + relu,
depthwise conv + relu6, pointwise conv, max-pool, conv, avg-pool, two linears) and a
1-D residual net (conv, conv, residual add, max-pool, strided conv, global avg-pool,
linear). Then:

- the device's Trainer (tests/mp/train_runner.py) and the independent numpy reference
  (tools/microtrain_tools/train_ref.py) train the same steps; every trained layer's int8
  weights, biases, multipliers, shifts, weight scales, gradient sums, master copies and
  optimiser state, and every loss, must be equal bit for bit;
- the device's per-sample float32 weight gradients must point where PyTorch autograd's
  gradients of the dequantised float model point (cosine > 0.95, every trained layer);
- training lowers the loss on a fixed problem;
- checkpoints: written atomically, valid for the host reader, byte-identical to the
  reference's, and a resumed run equals an uninterrupted one (SGD + momentum).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from numpy.typing import NDArray
from torch import nn

from microtrain_tools import convert as cv
from microtrain_tools import mtm
from microtrain_tools.mtm import Act, Op
from microtrain_tools.reference import train_ref as tr
from support.harness import ROOT, cosine, run_micropython
from support.torch_models import Cnn2d, Res1d, as_1d, train_quick

RUNNER = ROOT / "tests" / "mp" / "train_runner.py"
N_STEPS = 40
_DT = {"b": np.int8, "i": np.int32, "f": np.float32, "d": np.float64}


# --------------------------------------------------------------------------
# models and data


class Misc(nn.Module):
    """What the other two lack: a strided bias-less conv, a padded max-pool, standalone RELU and
    RELU6 layers, a grouped conv, a residual add without activation, a padded avg-pool."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, stride=2, padding=1, bias=False)
        self.pool = nn.MaxPool2d(3, stride=1, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, groups=4)
        self.avg = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
        self.fc = nn.Linear(8 * 2 * 2, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.pool(self.conv1(x)))  # a RELU layer (after a pool), read twice
        c = F.relu6(self.avg(a + self.conv2(a)))  # ADD, AVGPOOL, a RELU6 layer
        return self.fc(c.flatten(1))


@dataclass
class Setup:
    name: str
    path: Path
    m: mtm.Model
    xs: NDArray[np.int8]  # (N, numel) int8 training samples, NHWC
    ys: NDArray[np.int64]  # true labels
    xe: NDArray[np.int8]  # held-out samples
    ye: NDArray[np.int64]
    samples: Path  # xs as a file for the runner
    eval_samples: Path

    @property
    def numel(self) -> int:
        return int(self.xs.shape[1])


@pytest.fixture(scope="module")
def setups(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Setup]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images / 16.0, dtype=torch.float32)[:, None]
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    work = tmp_path_factory.mktemp("training")
    out = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small nets on a shared machine: one thread is several times faster
    try:
        nets = {}
        same = lambda t: t  # noqa: E731
        for name, cls, view in (("cnn", Cnn2d, same), ("res", Res1d, as_1d), ("misc", Misc, same)):
            torch.manual_seed(1)
            nets[name] = (train_quick(cls(), view(x[:1000]), y[:1000], epochs=5), view)
    finally:
        torch.set_num_threads(threads)
    for name, (net, view) in nets.items():
        m = cv.convert(net, view(x[:256]), progress=False)
        path = work / f"{name}.mtm"
        mtm.save(m, path)
        m = mtm.load(path)
        xs = cv.quantize_input(m, view(x[1000:1400]))
        xe = cv.quantize_input(m, view(x[1400:1700]))
        s, e = work / f"{name}-train.bin", work / f"{name}-eval.bin"
        xs.tofile(s)
        xe.tofile(e)
        out[name] = Setup(name, path, m, xs, y[1000:1400].numpy(), xe, y[1400:1700].numpy(), s, e)
    ops = {n: [(Op(ly.op), Act(ly.act)) for ly in s.m.layers] for n, s in out.items()}
    # what the configurations below exercise
    assert (Op.CONV2D, Act.RELU6) in ops["cnn"] and (Op.AVGPOOL, Act.NONE) in ops["cnn"]
    assert (Op.MAXPOOL, Act.NONE) in ops["cnn"] and out["cnn"].m.layers[1].params[12] == 8  # depthwise
    assert (Op.ADD, Act.RELU) in ops["res"] and (Op.GLOBAL_AVGPOOL, Act.NONE) in ops["res"]
    assert ops["misc"] == [(Op.CONV2D, Act.NONE), (Op.MAXPOOL, Act.NONE), (Op.RELU, Act.NONE),
                           (Op.CONV2D, Act.NONE), (Op.ADD, Act.NONE), (Op.AVGPOOL, Act.NONE),
                           (Op.RELU6, Act.NONE), (Op.LINEAR, Act.NONE)], ops["misc"]
    return out


def _labels(s: Setup) -> NDArray[np.int64]:
    """Training labels with every third one changed: larger losses, so every step moves weights."""
    ys = s.ys.copy()
    ys[::3] = (ys[::3] + 3) % 10
    return ys


# --------------------------------------------------------------------------
# running the device and the reference


def read_dump(path: Path) -> dict[str, NDArray[Any]]:
    b = path.read_bytes()
    pos, out = 0, {}
    while pos < len(b):
        (n,) = struct.unpack_from("<H", b, pos)
        name = b[pos + 2:pos + 2 + n].decode()
        pos += 2 + n
        tc = chr(b[pos])
        (ln,) = struct.unpack_from("<I", b, pos + 1)
        out[name] = np.frombuffer(b[pos + 5:pos + 5 + ln], dtype=_DT[tc]).copy()
        pos += 5 + ln
    return out


def device(s: Setup, tmp: Path, tag: str, *, order: Sequence[int], labels: Sequence[int], train: Any,
           mode: str, opt: dict[str, Any], sparse: dict[str, Any] | None = None, batch: int = 1,
           model: Path | None = None, **extra: Any) -> dict[str, NDArray[Any]]:
    """Run tests/mp/train_runner.py; returns its dump."""
    cfg = {"model": str(model or s.path), "samples": str(s.samples), "numel": s.numel,
           "labels": [int(v) for v in labels], "order": [int(i) for i in order], "train": train, "mode": mode,
           "opt": opt, "sparse": sparse, "batch": batch, "out": str(tmp / f"{tag}.dump"), **extra}
    cpath = tmp / f"{tag}.json"
    cpath.write_text(json.dumps(cfg))
    p = run_micropython(RUNNER, [str(cpath)], timeout=300)
    assert p.returncode == 0 and "TRAIN-RUNNER-DONE" in p.stdout, \
        f"{tag}: device run failed\n{(p.stdout + p.stderr)[-3000:]}"
    return read_dump(tmp / f"{tag}.dump")


def ref_opt(c: dict[str, Any]) -> tr.SGD | tr.Adam:
    kw = {k: v for k, v in c.items() if k != "kind"}
    return tr.SGD(**kw) if c["kind"] == "sgd" else tr.Adam(**kw)


def ref_sparse(c: dict[str, Any] | None) -> tr.DynamicSparse | tr.StaticSparse | None:
    if c is None:
        return None
    if c["kind"] == "dynamic":
        return tr.DynamicSparse(c["lmin"], c["lmax"], c.get("form", "text"))
    return tr.StaticSparse(c["ratio"])


def reference(s: Setup, *, order: Sequence[int], labels: Sequence[int], train: Any, mode: str,
              opt: dict[str, Any], sparse: dict[str, Any] | None = None, batch: int = 1,
              model: mtm.Model | None = None, flush: bool = True) -> tr.RefTrainer:
    ref = tr.RefTrainer(model or s.m, train, mode, ref_opt(opt), ref_sparse(sparse), batch)
    for i in order:
        ref.step(s.xs[i], int(labels[i]))
    if flush:
        ref.flush()
    return ref


def differences(want: dict[str, NDArray[Any]], got: dict[str, NDArray[Any]],
                what: tuple[str, str] = ("reference", "device")) -> list[str]:
    """Names whose arrays differ in any bit (or exist on one side only), with a first example."""
    out = []
    for k in sorted(set(want) | set(got)):
        if k not in want or k not in got:
            out.append(f"{k}: only in {what[0] if k in want else what[1]}")
            continue
        a, b = want[k], got[k]
        if a.dtype != b.dtype or a.shape != b.shape:
            out.append(f"{k}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}")
        elif a.tobytes() != b.tobytes():
            idx = np.nonzero(a.view(f"u{a.itemsize}") != b.view(f"u{b.itemsize}"))[0]
            i = int(idx[0])
            out.append(f"{k}: {idx.size}/{a.size} differ, first [{i}] {what[0]} {a[i]!r} {what[1]} {b[i]!r}")
    return out


def state_of(dump: dict[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
    return {k: v for k, v in dump.items() if k.startswith("L")}


# --------------------------------------------------------------------------
# bit-exact: device Trainer == train_ref.RefTrainer

SGD = {"kind": "sgd", "lr": 0.05}
SGDM = {"kind": "sgd", "lr": 0.05, "momentum": 0.9}
ADAM = {"kind": "adam", "lr": 0.005}
DYN = {"kind": "dynamic", "lmin": 0.1, "lmax": 1.0}
DYN_LIN = {"kind": "dynamic", "lmin": 0.2, "lmax": 0.8, "form": "linear"}
STATIC = {"kind": "static", "ratio": 0.5}

# (model, train, mode, optimizer, sparse, batch)
CONFIGS: list[tuple[str, Any, str, dict[str, Any], dict[str, Any] | None, int]] = [
    ("res", "last:1", "int8", SGD, None, 1),
    ("res", "last:2", "int8", {**SGDM, "weight_decay": 1e-3}, DYN, 4),
    ("res", "all", "int8", SGDM, DYN, 3),
    ("res", "all", "mixed", {**SGD, "standardize": True}, STATIC, 2),
    ("res", "all", "float32", {**ADAM, "weight_decay": 1e-4}, None, 3),
    ("res", "all", "int8", {**ADAM, "standardize": True, "rounding": "nearest"}, DYN_LIN, 1),
    ("res", "last:2", "float32", {**SGDM, "rounding": "stochastic"}, DYN, 5),
    ("cnn", "all", "int8", SGDM, DYN, 4),
    ("cnn", "all", "mixed", ADAM, STATIC, 3),
    ("cnn", "all", "float32", {**SGDM, "weight_decay": 1e-3, "standardize": True}, DYN_LIN, 5),
    ("cnn", "last:2", "int8", {**SGD, "rounding": "nearest"}, None, 1),
    ("cnn", "last:1", "float32", {**ADAM, "standardize": True}, None, 2),
    ("cnn", "all", "int8", {**ADAM, "weight_decay": 1e-3}, {"kind": "static",
                                                            "ratio": {"features.10": 0.25, "fc1": 0.5}}, 3),
    ("misc", "all", "int8", SGDM, DYN, 2),
    ("misc", "all", "float32", {**ADAM, "standardize": True}, STATIC, 3),
    ("misc", "last:2", "mixed", {**SGDM, "weight_decay": 1e-3}, DYN_LIN, 1),
]


def _cid(c: tuple[str, Any, str, dict[str, Any], dict[str, Any] | None, int]) -> str:
    name, train, mode, opt, sparse, batch = c
    o = opt["kind"] + "".join(f"-{k[:3]}" for k in ("momentum", "weight_decay", "standardize") if opt.get(k))
    o += f"-{opt['rounding']}" if "rounding" in opt else ""
    sp = "dense" if sparse is None else sparse["kind"] + ("-lin" if sparse.get("form") == "linear" else "")
    return f"{name}-{train}-{mode}-{o}-{sp}-b{batch}"


@pytest.mark.parametrize("config", CONFIGS, ids=[_cid(c) for c in CONFIGS])
def test_device_equals_reference(setups: dict[str, Setup], tmp_path: Path,
                                 config: tuple[str, Any, str, dict[str, Any], dict[str, Any] | None, int]
                                 ) -> None:
    name, train, mode, opt, sparse, batch = config
    s = setups[name]
    labels = _labels(s)
    kw: dict[str, Any] = dict(order=range(N_STEPS), labels=labels, train=train, mode=mode, opt=opt,
                              sparse=sparse, batch=batch)
    dev = device(s, tmp_path, "run", **kw)
    ref = reference(s, **kw)
    assert int(dev["train_steps"][0]) == ref.train_steps == -(-N_STEPS // batch)
    assert dev["loss"].tolist() == ref.losses, "per-step losses differ"
    diffs = differences(ref.arrays(), state_of(dev))
    assert not diffs, "\n".join(diffs)
    # the weights did move (the comparison is not between two untouched copies)
    j = tr.select(s.m, train)[-1]
    assert np.any(dev[f"L{j}.w"] != s.m.data(s.m.layers[j].weight).reshape(-1))


@pytest.mark.parametrize("name", ["res", "cnn", "misc"])
def test_gradient_sums_equal_reference_mid_batch(setups: dict[str, Setup], tmp_path: Path, name: str) -> None:
    """Float32 gradient sums of 7 samples (no update yet) through every layer, with a sparse policy."""
    s = setups[name]
    kw: dict[str, Any] = dict(order=range(7), labels=_labels(s), train="all", mode="int8", opt=SGD,
                              sparse=DYN, batch=100)
    dev = device(s, tmp_path, "grad", flush=False, **kw)
    ref = reference(s, flush=False, **kw)
    assert int(dev["train_steps"][0]) == 0
    diffs = differences(ref.arrays(), state_of(dev))
    assert not diffs, "\n".join(diffs)
    assert all(np.any(v != 0) for k, v in dev.items() if k.endswith(".gw"))


def test_fit_shuffle_and_epoch_flush_equal_reference(setups: dict[str, Setup], tmp_path: Path) -> None:
    """Trainer.fit (xorshift32 shuffle, per-epoch mean loss, the partial batch applied at the epoch
    end) then trainer.save, against RefTrainer.fit and against the reference's command line, whose
    checkpoint must be the device's byte for byte."""
    s = setups["cnn"]
    kw: dict[str, Any] = dict(train="last:2", mode="mixed", opt=SGDM, sparse=DYN, batch=5)
    order = list(range(23))
    labels = _labels(s)
    ck = tmp_path / "device.mtm"
    dev = device(s, tmp_path, "fit", order=order, labels=labels, fit={"epochs": 2, "seed": 7}, save=str(ck),
                 **kw)
    ref = tr.RefTrainer(s.m, kw["train"], kw["mode"], ref_opt(SGDM), ref_sparse(DYN), kw["batch"])
    means = ref.fit([s.xs[i] for i in order], [int(labels[i]) for i in order], epochs=2, seed=7)
    assert dev["loss"].tolist() == means
    assert int(dev["train_steps"][0]) == ref.train_steps == 2 * 5
    diffs = differences(ref.arrays(), state_of(dev))
    assert not diffs, "\n".join(diffs)
    data = tmp_path / "data.npz"
    np.savez(data, x=s.xs[order], y=labels[order])
    host = tmp_path / "host.mtm"
    rc = tr.main([str(s.path), str(data), "-o", str(host), "--train", "last:2", "--mode", "mixed",
                  "--lr", "0.05", "--momentum", "0.9", "--sparse", "dynamic:0.1:1.0", "--batch", "5",
                  "--epochs", "2", "--seed", "7"])
    assert rc == 0
    assert host.read_bytes() == ck.read_bytes()


@pytest.mark.parametrize("name,train", [("res", ["conv1", "fc"]), ("cnn", ["features.0", "fc1"])])
def test_frozen_layer_inside_the_trained_region(setups: dict[str, Setup], tmp_path: Path, name: str,
                                                train: list[str]) -> None:
    """Frozen conv/linear layers between trained ones back-propagate with their file weights."""
    s = setups[name]
    kw: dict[str, Any] = dict(order=range(12), labels=_labels(s), train=train, mode="int8", opt=SGDM, batch=3)
    dev = device(s, tmp_path, "frozen", **kw)
    diffs = differences(reference(s, **kw).arrays(), state_of(dev))
    assert not diffs, "\n".join(diffs)


# --------------------------------------------------------------------------
# gradients against PyTorch autograd


def _float_params(m: mtm.Model, j: int) -> tuple[torch.Tensor, torch.Tensor]:
    ly = m.layers[j]
    w = m.data(ly.weight).astype(np.float64)
    sw = m.data(m.tensors[ly.weight].qscales).astype(np.float64)  # type: ignore[index]
    b = m.data(ly.bias).astype(np.float64) * m.tensors[ly.inputs[0]].scale * sw
    w = w * sw.reshape((-1,) + (1,) * (w.ndim - 1))
    return torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)


def _pad(x: torch.Tensor, p: Sequence[int], value: float) -> torch.Tensor:
    """Explicit padding of a (1, C, H, W) tensor so that the window count is (out_h, out_w)."""
    out_h, out_w, k_h, k_w, s_h, s_w, pt, pl = p
    bottom = max(0, (out_h - 1) * s_h + k_h - pt - x.shape[2])
    right = max(0, (out_w - 1) * s_w + k_w - pl - x.shape[3])
    return F.pad(x, (pl, right, pt, bottom), value=value)


def float_forward(m: mtm.Model, x: torch.Tensor, params: dict[int, tuple[torch.Tensor, torch.Tensor]]
                  ) -> torch.Tensor:
    """The file's graph in float64 with the given (dequantised) weights: logits of one NHWC sample."""
    vals = {m.input: x}
    for j, ly in enumerate(m.layers):
        a = vals[ly.inputs[0]]
        p = list(ly.params)
        shape = m.tensors[ly.output].shape
        if ly.op == Op.CONV2D:
            w, b = params[j]
            in_h, in_w, in_c, out_h, out_w, _, k_h, k_w, s_h, s_w, pt, pl, groups = p[:13]
            xi = _pad(a.reshape(in_h, in_w, in_c).permute(2, 0, 1)[None],
                      (out_h, out_w, k_h, k_w, s_h, s_w, pt, pl), 0.0)
            y = F.conv2d(xi, w.permute(0, 3, 1, 2), b, stride=(s_h, s_w), groups=groups)
            y = y[0, :, :out_h, :out_w].permute(1, 2, 0)
        elif ly.op == Op.LINEAR:
            w, b = params[j]
            y = w @ a.reshape(-1) + b
        elif ly.op in (Op.MAXPOOL, Op.AVGPOOL):
            in_h, in_w, c, out_h, out_w, k_h, k_w, s_h, s_w, pt, pl = p
            geo = (out_h, out_w, k_h, k_w, s_h, s_w, pt, pl)
            xi = a.reshape(in_h, in_w, c).permute(2, 0, 1)[None]
            if ly.op == Op.MAXPOOL:
                y = F.max_pool2d(_pad(xi, geo, float("-inf")), (k_h, k_w), (s_h, s_w))
            else:  # the mean of the valid taps
                y = (F.avg_pool2d(_pad(xi, geo, 0.0), (k_h, k_w), (s_h, s_w))
                     / F.avg_pool2d(_pad(torch.ones_like(xi), geo, 0.0), (k_h, k_w), (s_h, s_w)))
            y = y[0, :, :out_h, :out_w].permute(1, 2, 0)
        elif ly.op == Op.GLOBAL_AVGPOOL:
            y = a.reshape(p[0], p[1]).mean(0)
        elif ly.op == Op.ADD:
            y = a + vals[ly.inputs[1]]
        else:  # standalone RELU / RELU6: the activation below
            y = a
        act = {Op.RELU: Act.RELU, Op.RELU6: Act.RELU6}.get(Op(ly.op), Act(ly.act))
        if act == Act.RELU:
            y = torch.relu(y)
        elif act == Act.RELU6:
            y = torch.clamp(y, 0.0, 6.0)
        vals[ly.output] = y.reshape(shape)
    return vals[m.output].reshape(-1)


@pytest.mark.parametrize("name", ["res", "cnn", "misc"])
def test_device_gradients_match_torch_autograd(setups: dict[str, Setup], tmp_path: Path, name: str) -> None:
    """Per-sample float32 gradient sums (before any update) vs autograd of the dequantised float model.

    Checks the backward scale bookkeeping of every trained layer, through pools, the
    global pool and the residual merge: a wrong scale anywhere would scale a branch
    wrongly and turn the gradient away from autograd's."""
    s = setups[name]
    m = s.m
    trained = tr.select(m, "all")
    out = cv.run_mtm(m, s.xs[:40])
    t_in = m.tensors[m.input]
    report = []
    checked = 0
    for i in range(40):
        label = int((np.argmax(out[i]) + 5) % 10)  # a wrong label: a large, well-resolved error
        dev = device(s, tmp_path, f"g{i}", order=[i], labels=[label] * len(s.ys), train="all", mode="int8",
                     opt=SGD, batch=100, flush=False)
        params = {j: _float_params(m, j) for j in trained}
        x = torch.tensor(t_in.scale * (s.xs[i].astype(np.float64) - t_in.zero_point)).reshape(t_in.shape)
        loss = F.cross_entropy(float_forward(m, x, params)[None], torch.tensor([label]))
        loss.backward()
        assert abs(loss.item() - float(dev["loss"][0])) < 0.1 * loss.item(), "float and int8 losses disagree"
        for j in trained:
            w, b = params[j]
            assert w.grad is not None and b.grad is not None
            cw = cosine(dev[f"L{j}.gw"], w.grad.numpy().reshape(-1))
            cb = cosine(dev[f"L{j}.gb"], b.grad.numpy())
            ratio = np.linalg.norm(dev[f"L{j}.gw"]) / np.linalg.norm(w.grad.numpy())
            report.append(f"sample {i} {m.layers[j].name}: cos w {cw:.4f} b {cb:.4f} "
                          f"|dev|/|torch| {ratio:.3f}")
            assert cw > 0.95 and cb > 0.95 and 0.7 < ratio < 1.4, "\n".join(report)
        checked += 1
        if checked == 3:
            break
    print("\n".join(report))


# --------------------------------------------------------------------------
# training makes progress


def test_loss_decreases_on_a_fixed_problem(setups: dict[str, Setup], tmp_path: Path) -> None:
    """Relabelled digits (class c -> c + 1 mod 10): the last layer has to learn the new mapping."""
    s = setups["res"]
    labels = (s.ys + 1) % 10
    order = list(range(300))
    log = tmp_path / "train.jsonl"
    dev = device(s, tmp_path, "fit", order=order, labels=labels, train="last:1", mode="mixed",
                 opt={"kind": "sgd", "lr": 0.01, "momentum": 0.9}, batch=8, fit={"epochs": 4, "seed": 3},
                 eval={"samples": str(s.eval_samples), "labels": [int(v) for v in (s.ye + 1) % 10]},
                 log=str(log))
    losses = dev["loss"].tolist()
    acc, eval_loss = dev["eval"].tolist()
    print(f"epoch losses {losses}, held-out accuracy {acc:.3f} loss {eval_loss:.3f}")
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses
    assert losses[-1] < 0.25 * losses[0]
    before = float(np.mean(cv.run_mtm(s.m, s.xe).argmax(1) == (s.ye + 1) % 10))
    assert before < 0.2 and acc > 0.8, (before, acc)
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert recs[0]["kind"] == "config" and [r["epoch"] for r in recs if r["kind"] == "epoch"] == [0, 1, 2, 3]
    assert [r["loss"] for r in recs if r["kind"] == "epoch"] == losses
    assert recs[-1]["kind"] == "eval" and recs[-1]["acc"] == acc


@pytest.mark.parametrize("train,mode,lr", [("all", "int8", 0.01), ("last:1", "float32", 0.02)])
@pytest.mark.parametrize("sparse", [None, DYN], ids=["dense", "dynamic"])
def test_training_on_its_own_data_keeps_accuracy(setups: dict[str, Setup], tmp_path: Path, train: str,
                                                 mode: str, lr: float, sparse: dict[str, Any] | None) -> None:
    """Fine-tuning the converted model on more samples of its own task must not destroy it, with
    or without the dynamic sparse update (Deutel et al.'s setting: SGD + momentum, batch 8)."""
    s = setups["res"]
    before = float(np.mean(cv.run_mtm(s.m, s.xe).argmax(1) == s.ye))
    dev = device(s, tmp_path, "keep", order=range(400), labels=s.ys, train=train, mode=mode,
                 opt={"kind": "sgd", "lr": lr, "momentum": 0.9}, sparse=sparse, batch=8,
                 fit={"epochs": 3, "seed": 5}, eval={"samples": str(s.eval_samples), "labels": s.ye.tolist()})
    acc = float(dev["eval"][0])
    print(f"held-out accuracy {before:.3f} -> {acc:.3f}; epoch losses {dev['loss'].tolist()}")
    assert acc >= before - 0.05, (before, acc, dev["loss"].tolist())


# --------------------------------------------------------------------------
# checkpoints


def _checkpoint_matches_dump(ck: mtm.Model, dump: dict[str, NDArray[Any]], train: Any, state: bool) -> None:
    trained = tr.select(ck, train)
    assert ck.trained and ck.train_steps == int(dump["train_steps"][0])
    assert [j for j, ly in enumerate(ck.layers) if ly.trained] == trained
    for j in trained:
        ly = ck.layers[j]
        p = f"L{j}."
        wt = ck.tensors[ly.weight]  # type: ignore[index]
        got = {"w": ck.data(ly.weight).reshape(-1), "b": ck.data(ly.bias), "mult": ck.data(ly.mult),
               "shift": ck.data(ly.shift), "w_scale": ck.data(wt.qscales)}
        for k, v in got.items():
            assert v.tobytes() == dump[p + k].tobytes(), f"checkpoint {ly.name}.{k}"
        slots = {0: "master_w", 1: "master_b", 2: "st0", 3: "st1"}
        for k, key in slots.items():
            if state and p + key in dump:
                assert ly.state[k] is not None, f"{ly.name}: state slot {k} missing"
                assert ck.data(ly.state[k]).reshape(-1).tobytes() == dump[p + key].tobytes()
            else:
                assert ly.state[k] is None


@pytest.mark.parametrize("mode,rounding", [("int8", "auto"), ("mixed", "auto"), ("float32", "auto"),
                                           ("int8", "nearest"), ("mixed", "nearest")])
def test_resume_equals_uninterrupted_sgd_momentum(setups: dict[str, Setup], tmp_path: Path, mode: str,
                                                  rounding: str) -> None:
    """train k steps, trainer.save, new interpreter loads the checkpoint and a new Trainer continues:
    the result equals the uninterrupted run, bit for bit (weights, scales, masters, momentum)."""
    s = setups["res"]
    labels = _labels(s)
    opt = {**SGDM, "weight_decay": 1e-4} if rounding == "auto" else {**SGDM, "rounding": rounding}
    kw: dict[str, Any] = dict(labels=labels, train="all", mode=mode, opt=opt, batch=4)
    k, n = 16, 32
    ck = tmp_path / "ck.mtm"
    first = device(s, tmp_path, "first", order=range(k), save=str(ck), **kw)
    ck_model = mtm.load(ck)  # validates
    _checkpoint_matches_dump(ck_model, first, "all", state=True)
    # the device checkpoint is the reference checkpoint, byte for byte
    ref_first = reference(s, order=range(k), **kw)
    assert ck.read_bytes() == mtm.write(ref_first.checkpoint())
    resumed = device(s, tmp_path, "resumed", order=range(k, n), model=ck, **kw)
    whole = device(s, tmp_path, "whole", order=range(n), **kw)
    assert int(resumed["train_steps"][0]) == int(whole["train_steps"][0]) == n // 4
    # the resumed device run is what the reference does from the same checkpoint ...
    ref_resumed = reference(s, order=range(k, n), model=ck_model, **kw)
    diffs = differences(ref_resumed.arrays(), state_of(resumed))
    assert not diffs, "resumed run vs reference resumed from the checkpoint:\n" + "\n".join(diffs)
    # ... and what an uninterrupted run does
    diffs = differences(state_of(whole), state_of(resumed), ("uninterrupted", "resumed"))
    assert not diffs, "resumed vs uninterrupted:\n" + "\n".join(diffs)


def test_resume_adam_restores_first_moments(setups: dict[str, Setup], tmp_path: Path) -> None:
    """Format v1.0 has slots for Adam's first moments but not its second moments (docs/training.md,
    Checkpoints): the checkpoint holds the first moments, a resumed run restores them and restarts
    the second moments at zero, so it is NOT the uninterrupted run (the documented limitation)."""
    s = setups["res"]
    kw: dict[str, Any] = dict(labels=_labels(s), train="last:2", mode="float32", opt=ADAM, batch=4)
    ck = tmp_path / "ck.mtm"
    first = device(s, tmp_path, "first", order=range(16), save=str(ck), **kw)
    ck_model = mtm.load(ck)
    _checkpoint_matches_dump(ck_model, first, "last:2", state=True)  # master copies + first moments
    resumed = device(s, tmp_path, "resumed", order=range(16, 32), model=ck, **kw)
    whole = device(s, tmp_path, "whole", order=range(32), **kw)
    assert differences(state_of(whole), state_of(resumed)), "the second moments cannot have been restored"
    diffs = differences(reference(s, order=range(16, 32), model=ck_model, **kw).arrays(), state_of(resumed))
    assert not diffs, "resumed Adam vs docs/training.md (first moments restored, second at 0):\n" + \
        "\n".join(diffs)


SAVE_SCRIPT = r"""
import os
import microtrain as mt

src, samples, numel, label, d = SRC, SAMPLES, NUMEL, LABEL, DIR
m = mt.load(src)
t = mt.Trainer(m, train="last:2", mode="int8", optimizer=mt.SGD(lr=0.05, momentum=0.9), batch=2)
with open(samples, "rb") as f:
    x = f.read(2 * numel)
t.step(x[:numel], label)
t.step(x[numel:], label)
m.save(d + "/model.mtm")            # replaces the existing file
print("files", sorted(os.listdir(d)))
os.mkdir(d + "/blocked.mtm.tmp")    # the temporary file cannot be created: the target must survive
try:
    m.save(d + "/blocked.mtm")
    print("saved")
except OSError:
    print("OSError")
print("files", sorted(os.listdir(d)))
"""


def test_model_save_is_atomic_and_matches_the_reference(setups: dict[str, Setup], tmp_path: Path) -> None:
    s = setups["cnn"]
    d = tmp_path / "ck"
    d.mkdir()
    (d / "model.mtm").write_bytes(b"old contents that are not a model")
    (d / "blocked.mtm").write_bytes(b"previous checkpoint")
    label = int((s.ys[0] + 4) % 10)
    code = (SAVE_SCRIPT.replace("SRC", repr(str(s.path))).replace("SAMPLES", repr(str(s.samples)))
            .replace("NUMEL", str(s.numel)).replace("LABEL", str(label)).replace("DIR", repr(str(d))))
    p = run_micropython(code)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "files ['blocked.mtm', 'model.mtm']", lines  # no model.mtm.tmp left behind
    assert lines[1] == "OSError"
    assert lines[2] == "files ['blocked.mtm', 'blocked.mtm.tmp', 'model.mtm']"
    assert (d / "blocked.mtm").read_bytes() == b"previous checkpoint"
    # model.save: trained values, no optimiser state; identical to the reference's file
    ref = tr.RefTrainer(s.m, "last:2", "int8", tr.SGD(lr=0.05, momentum=0.9), None, 2)
    ref.step(s.xs[0], label)
    ref.step(s.xs[1], label)
    saved = (d / "model.mtm").read_bytes()
    ck = mtm.read(saved)
    assert not ck.has_state and ck.train_steps == 1
    assert saved == mtm.write(ref.checkpoint(state=False))
    _checkpoint_matches_dump(ck, {**{k: v for k, v in ref.arrays().items()},
                                  "train_steps": np.array([1], dtype=np.int32)}, "last:2", state=False)
    # the saved model runs on the host like the device's trained model
    assert np.array_equal(cv.run_mtm(saved, s.xs[:5]),
                          np.stack([ref.forward(x)[ref.m.output] for x in s.xs[:5]]))


@pytest.mark.parametrize("mode", ["int8", "mixed"])
def test_native_and_pure_python_kernels_train_identically(setups: dict[str, Setup], tmp_path: Path,
                                                          mode: str) -> None:
    """The same training steps with the native module and with microtrain.pyk (no natmod on the
    path, as on a board where the .mpy cannot load) give identical weights, scales and state."""
    import subprocess

    from support.kernel_harness import MICROPYTHON, PYTHON_LIB, micropython_env

    s = setups["res"]
    kw: dict[str, Any] = dict(order=range(6), labels=_labels(s), train="all", mode=mode, opt=SGDM,
                              sparse=DYN, batch=2)
    native = device(s, tmp_path, "native", **kw)
    cfg = json.loads((tmp_path / "native.json").read_text())
    cfg["out"] = str(tmp_path / "pure.dump")
    (tmp_path / "pure.json").write_text(json.dumps(cfg))
    env = micropython_env()
    env["MICROPYPATH"] = str(PYTHON_LIB)  # no natmod: microtrain falls back to microtrain.pyk
    env["MICROTRAIN_PURE"] = "1"  # and a _microtrain built into the binary is not used either
    p = subprocess.run([str(MICROPYTHON), str(RUNNER), str(tmp_path / "pure.json")], env=env,
                       capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0 and "TRAIN-RUNNER-DONE" in p.stdout, (p.stdout + p.stderr)[-3000:]
    probe = subprocess.run([str(MICROPYTHON), "-c", "import microtrain; print(microtrain.NATIVE)"], env=env,
                           capture_output=True, text=True, timeout=60, check=False)
    assert probe.stdout.strip() == "False"
    pure = read_dump(tmp_path / "pure.dump")
    assert native.keys() == pure.keys()
    diffs = [k for k in native if not np.array_equal(native[k], pure[k])]
    assert not diffs, f"native and pure-Python runs differ in {diffs}"
    assert int(native["train_steps"][0]) == 3
