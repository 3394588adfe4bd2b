"""Training test setups: three small converted models, the device runner, the reference, the configs.

Shared by tests/training (double-float host against train_ref, float32 twin against
train_ref's float32 model).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import NDArray
from torch import nn

from microtrain_tools import convert as cv
from microtrain_tools import mtm
from microtrain_tools.mtm import Act, Op
from microtrain_tools.reference import train_ref as tr
from support.harness import ROOT, run_micropython
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


def build_setups(work: Path) -> dict[str, Setup]:
    """The three converted models and their int8 training / evaluation samples, written to ``work``."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images / 16.0, dtype=torch.float32)[:, None]
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
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


def labels_of(s: Setup) -> NDArray[np.int64]:
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
              model: mtm.Model | None = None, flush: bool = True,
              adapt_ranges: bool = False, sums: bool | None = None) -> tr.RefTrainer:
    ref = tr.RefTrainer(model or s.m, train, mode, ref_opt(opt), ref_sparse(sparse), batch,
                        adapt_ranges=adapt_ranges, sums=sums)
    for i in order:
        ref.step(s.xs[i], int(labels[i]))
    if flush:
        ref.flush()
    return ref


def same_as_reference(s: Setup, tmp: Path, tag: str, device_extra: dict[str, Any] | None = None,
                      **kw: Any) -> tuple[dict[str, NDArray[Any]], tr.RefTrainer]:
    """Train on the device (``device``, with ``device_extra`` for the runner only) and in the
    reference with the same arguments; assert the same per-step losses and trained arrays, bit
    for bit. Returns (the device dump, the reference)."""
    dev = device(s, tmp, tag, **kw, **(device_extra or {}))
    ref = reference(s, **kw)
    assert dev["loss"].tolist() == ref.losses, f"{tag}: per-step losses differ"
    diffs = differences(ref.arrays(), state_of(dev))
    assert not diffs, "\n".join(diffs)
    return dev, ref


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
    # batch 1, plain SGD momentum: the gradients go straight into the momentum (no sums)
    ("res", "all", "int8", SGDM, DYN, 1),
    ("cnn", "last:2", "mixed", {**SGDM, "rounding": "stochastic"}, STATIC, 1),
    ("misc", "all", "float32", SGDM, None, 1),
    # batch 1, plain SGD: each layer steps during backward (stepwise.StepInBackward), the draws by jumps
    ("cnn", "all", "mixed", SGD, None, 1),
    # a bfloat16 optimiser state (the gradient sums kept, also at batch 1)
    ("cnn", "all", "mixed", {**SGDM, "state": "bf16"}, None, 1),
    ("res", "all", "int8", {**SGDM, "state": "bf16"}, DYN, 3),
    ("misc", "all", "float32", {**ADAM, "state": "bf16"}, STATIC, 2),
]

# batch > 1 folded into the momentum (Trainer sums=False, docs/memory.md): (model, train, mode, optimizer,
# batch, samples, flush): a short last batch at the flush (38 = 9 x 4 + 2, 40 = 13 x 3 + 1), and one
# run that stops mid-batch (the momentum holding m v plus two samples' gradients / 4)
FOLD_CONFIGS: list[tuple[str, Any, str, dict[str, Any], int, int, bool]] = [
    ("cnn", "all", "mixed", SGDM, 4, 38, True),
    ("res", "all", "int8", {**SGDM, "rounding": "stochastic"}, 3, 40, True),
    ("cnn", "all", "mixed", SGDM, 4, 38, False),
]


def config_id(c: tuple[str, Any, str, dict[str, Any], dict[str, Any] | None, int]) -> str:
    name, train, mode, opt, sparse, batch = c
    o = opt["kind"] + "".join(f"-{k[:3]}" for k in ("momentum", "weight_decay", "standardize") if opt.get(k))
    o += f"-{opt['rounding']}" if "rounding" in opt else ""
    o += f"-{opt['state']}" if "state" in opt else ""
    sp = "dense" if sparse is None else sparse["kind"] + ("-lin" if sparse.get("form") == "linear" else "")
    return f"{name}-{train}-{mode}-{o}-{sp}-b{batch}"
