"""One whole digits model through every stage: the checks that test_lut_layers and test_new_ops share.

A model written for a family of ops is trained for a moment in PyTorch on the digits and
converted; the checks run it in the real ``micropython`` (native and pure-Python kernels) against
the numpy oracle, compare its top-1 with PyTorch's, train it on the device against the training
reference, and fine-tune ``last:2`` on a shifted task.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from evals.accuracy import parity as par
from microtrain_tools import convert as cv
from microtrain_tools import mtm
from support import training_cases as tc
from support.harness import ensure_natmod
from support.torch_models import train_quick

Suite = tuple[tc.Setup, nn.Module, torch.Tensor]  # the setup, the trained float model, held-out inputs


def build(name: str, make: Callable[[], nn.Module], work: Path) -> Suite:
    """Train ``make()`` on 1000 digits (one thread, seeded), convert it, write the int8 samples."""
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
        net = train_quick(make(), x[:1000], y[:1000], epochs=12)
    finally:
        torch.set_num_threads(threads)
    path = work / f"{name}.mtm"
    cv.convert_to_file(net, x[:256], path, progress=False)
    m = mtm.load(path)
    xs = cv.quantize_input(m, x[1000:1400])
    xe = cv.quantize_input(m, x[1400:])
    s, e = work / f"{name}-train.bin", work / f"{name}-eval.bin"
    xs.tofile(s)
    xe.tofile(e)
    return tc.Setup(name, path, m, xs, y[1000:1400].numpy(), xe, y[1400:].numpy(), s, e), net, x[1400:]


def check_bitexact(s: tc.Setup, pure: bool, n_pure: int, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Device int8 outputs equal the oracle's bit for bit (the pure kernels on the first ``n_pure``)."""
    ensure_natmod()
    q = s.xe if not pure else s.xe[:n_pure]
    if pure:
        monkeypatch.setenv("MICROTRAIN_PURE", "1")
    # the pure kernels compiled from source need more than the default 256 KB heap (not a memory test)
    got, _ = par.run_device(s.path, q, tmp, progress=False, heapsize="2m" if pure else "256k")
    want = par.run_oracle(s.m, q, progress=False)
    assert np.array_equal(got, want), f"{int(np.sum(np.any(got != want, axis=1)))} samples differ"


def check_agrees_with_pytorch(suite: Suite) -> None:
    s, net, xe = suite
    with torch.no_grad():
        ref = net(xe).argmax(1).numpy()
    got = par.run_oracle(s.m, s.xe, progress=False).argmax(1)
    agree = float(np.mean(got == ref))
    assert agree >= 0.98, f"top-1 agreement with PyTorch {agree:.4f}"
    assert float(np.mean(ref == s.ye)) >= 0.9  # the float model learned the task


def check_training_bitexact(s: tc.Setup, tmp: Path, train: str, mode: str, batch: int) -> None:
    """24 device training steps equal the training reference bit for bit; ``all`` moves the first layer."""
    ensure_natmod()
    order = list(range(24))
    labels = tc.labels_of(s)
    dev = tc.device(s, tmp, s.name, order=order, labels=labels, train=train, mode=mode, opt=tc.SGDM,
                    batch=batch)
    ref = tc.reference(s, order=order, labels=labels, train=train, mode=mode, opt=tc.SGDM, batch=batch)
    assert not tc.differences(ref.arrays(), tc.state_of(dev))
    assert np.array_equal(np.asarray(ref.losses), dev["loss"])
    if train == "all":  # backward ran through every layer: the first conv's weights moved
        assert not np.array_equal(dev["L0.w"], s.m.data(s.m.layers[0].weight).reshape(-1))


def check_last2_lowers_the_loss(s: tc.Setup, tmp: Path) -> None:
    """``last:2`` mixed fine-tuning on a shifted task (labels rotated by one) cuts the loss by 30 %."""
    ensure_natmod()
    labels = (s.ys + 1) % 10  # the converted model starts far from it
    dev = tc.device(s, tmp, f"{s.name}-fit", order=list(range(200)), labels=labels, train="last:2",
                    mode="mixed", opt={"kind": "sgd", "lr": 0.05, "momentum": 0.9}, batch=4,
                    fit={"epochs": 3, "shuffle": True, "seed": 3})
    loss = dev["loss"]
    assert loss[-1] < 0.7 * loss[0], f"per-epoch losses {loss}"


def check_lora_bitexact(s: tc.Setup, tmp: Path, layers: list[str]) -> None:
    """Rank-2 adapters on ``layers``, trained on the device (mixed, batch 2, 16 samples), equal the
    LoRA reference's bit for bit, and every adapter's B moved from zero."""
    import json

    from microtrain_tools.reference import lora_ref as lr
    from microtrain_tools.reference import train_ref as tr
    from support.harness import ROOT, run_micropython
    from support.training_cases import SGDM, differences, labels_of, read_dump, ref_opt

    ensure_natmod()
    n = 16
    ys = labels_of(s)
    cfg = {"memory_floor": False, "model": str(s.path), "samples": str(s.samples), "numel": s.numel,
           "labels": [int(v) for v in ys], "order": list(range(n)), "calib": list(range(8)), "rank": 2,
           "layers": layers, "seed": 7, "mode": "mixed", "opt": SGDM, "batch": 2,
           "adapters": str(tmp / "a.mtl"), "reload": False, "merged": str(tmp / "merged.mtm"),
           "out": str(tmp / "dump"), "n_pred": 10}
    (tmp / "cfg.json").write_text(json.dumps(cfg))
    p = run_micropython(ROOT / "tests" / "mp" / "lora_runner.py", [str(tmp / "cfg.json")], timeout=300)
    assert p.returncode == 0 and "LORA-RUNNER-DONE" in p.stdout, (p.stdout + p.stderr)[-3000:]
    dev = read_dump(tmp / "dump")
    at = lr.attach(s.m, 2, layers, [s.xs[i] for i in range(8)], seed=7)
    ref = tr.RefTrainer(at.model, at.train, "mixed", ref_opt(SGDM), None, 2)
    losses = [ref.step(s.xs[i], int(ys[i])) for i in range(n)]
    ref.flush()
    got = {k: v for k, v in dev.items() if k.startswith("L")}
    assert differences(ref.arrays(), got) == []
    assert np.array_equal(np.array(losses), dev["loss"])
    assert all(np.any(v[4] != 0) for v in lr.values(at, ref).values())  # B moved from zero
