"""LoRA adapters (python_lib/microtrain/lora.py, docs/lora.md) against the training reference.

The device (real micropython) attaches adapters, trains them with the Trainer, writes the adapter
file and merges them into the base; the reference (reference/lora_ref.py + train_ref.RefTrainer)
does the same from the docs. Every trained array, the losses, the calibrated scales, the adapter
file's bytes and the merged layers must be equal bit for bit. Models: the training tests' CNN
(a 3x3 conv, a 1x1 conv and two linears, with and without fused activations).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from microtrain_tools import mtm
from microtrain_tools.reference import lora_ref as lr
from microtrain_tools.reference import train_ref as tr
from support.harness import ROOT, run_micropython
from support.training_cases import ADAM, SGD, SGDM, Setup, differences, labels_of, read_dump, ref_opt

RUNNER = ROOT / "tests" / "mp" / "lora_runner.py"
N = 24
N_PRED = 100  # samples the reload and merge checks predict

# (layers, rank, mode, optimizer, batch, calibrate on the first 16 samples)
CONFIGS: list[tuple[Any, int, str, dict[str, Any], int, bool]] = [
    ("last:3", 4, "mixed", SGDM, 4, True),  # 3x3 conv + relu, linear + relu, linear (logits)
    ("pw", 2, "float32", ADAM, 1, False),  # the 1x1 conv + relu, no calibration
    ("last:2", 3, "int8", SGD, 2, True),  # stochastic rounding
]


def _layers(s: Setup, spec: Any) -> Any:
    if spec == "pw":  # the pointwise conv: the 1x1 conv2d of the model
        return [ly.name for ly in s.m.layers if ly.op == mtm.Op.CONV2D and ly.params[6] == 1]
    return spec


def run_device(s: Setup, tmp: Path, c: tuple[Any, ...]) -> tuple[dict[str, Any], str]:
    layers, rank, mode, opt, batch, cal = c
    cfg = {"model": str(s.path), "samples": str(s.samples), "numel": s.numel,
           "labels": [int(v) for v in labels_of(s)], "order": list(range(N)),
           "calib": list(range(16)) if cal else None, "rank": rank, "layers": _layers(s, layers), "seed": 7,
           "mode": mode, "opt": opt, "batch": batch, "adapters": str(tmp / "a.mtl"), "reload": True,
           "merged": str(tmp / "merged.mtm"), "out": str(tmp / "dump"), "n_pred": N_PRED}
    cp = tmp / "cfg.json"
    cp.write_text(json.dumps(cfg))
    p = run_micropython(RUNNER, [str(cp)], timeout=300)
    assert p.returncode == 0 and "LORA-RUNNER-DONE" in p.stdout, (p.stdout + p.stderr)[-3000:]
    return read_dump(tmp / "dump"), p.stdout


@pytest.mark.parametrize("c", CONFIGS, ids=lambda c: f"{c[0]}-r{c[1]}-{c[2]}")
def test_lora_device_equals_reference(setups: dict[str, Setup], tmp_path: Path, c: Any) -> None:
    s = setups["cnn"]
    layers, rank, mode, opt, batch, cal = c
    dev, out = run_device(s, tmp_path, c)
    at = lr.attach(s.m, rank, _layers(s, layers), [s.xs[i] for i in range(16)] if cal else None, seed=7)
    ref = tr.RefTrainer(at.model, at.train, mode, ref_opt(opt), None, batch)
    ys = labels_of(s)
    losses = [ref.step(s.xs[i], int(ys[i])) for i in range(N)]
    ref.flush()
    want = ref.arrays()
    got = {k: v for k, v in dev.items() if k.startswith("L")}
    assert set(want) == set(got)
    assert differences(want, got) == []
    assert np.array_equal(np.array(losses), dev["loss"])
    u = np.array([at.model.tensors[ad.u].scale for ad in at.adapters], np.float32)
    assert u.tobytes() == dev["u_scale"].tobytes()
    assert len({float(v) for v in dev["loss"]}) > 1
    # the adapters moved, B from zero
    vals = lr.values(at, ref)
    assert all(np.any(v[4] != 0) for v in vals.values())
    # the adapter file: the same bytes as the reference writes, a few KB, checked on read
    base = s.path.read_bytes()
    lr.write_adapters(tmp_path / "ref.mtl", base, s.m, rank, 7, vals)
    assert (tmp_path / "a.mtl").read_bytes() == (tmp_path / "ref.mtl").read_bytes()
    assert lr.read_adapters(tmp_path / "a.mtl", base)[0] == rank
    assert "save refused: save: LoRA adapters are attached" in out
    assert f"RELOAD-SAME {N_PRED} {N_PRED}" in out
    # merge: the base layers requantised with W + B A, as the reference merges
    merged = lr.merge(s.m, rank, vals)
    for name in vals:
        j = [ly.name for ly in s.m.layers].index(name)
        ly = merged.layers[j]
        for key, arr in (("w", merged.data(ly.weight).reshape(-1)), ("b", merged.data(ly.bias)),
                         ("mult", merged.data(ly.mult)), ("shift", merged.data(ly.shift)),
                         ("w_scale", merged.data(merged.tensors[ly.weight].qscales))):
            assert arr.tobytes() == dev[f"M{j}.{key}"].tobytes(), (name, key)
    # the merged checkpoint loads on the host and holds the merged weights
    mm = mtm.load(tmp_path / "merged.mtm")
    for name in vals:
        assert np.array_equal(mm.data(mm.layer(name).weight), merged.data(merged.layer(name).weight))
    # merging changes predictions only where the adapter's int8 rounding of u mattered
    agree = float(np.mean(dev["preds"] == dev["merged_preds"]))
    assert agree >= 0.9, agree
