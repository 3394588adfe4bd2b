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


def run_device(s: Setup, tmp: Path, c: tuple[Any, ...], memory_floor: bool = False
               ) -> tuple[dict[str, Any], str]:
    layers, rank, mode, opt, batch, cal = c
    cfg = {"memory_floor": memory_floor, "model": str(s.path), "samples": str(s.samples), "numel": s.numel,
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


def test_to_torch_merges_as_the_device_and_exports_float_adapters(setups: dict[str, Setup],
                                                                   tmp_path: Path) -> None:
    import torch
    import torch.nn.functional as F

    from microtrain_tools import to_torch
    from support.torch_models import Cnn2d

    s = setups["cnn"]
    rank = 3
    at = lr.attach(s.m, rank, "last:3", [s.xs[i] for i in range(16)], seed=5)
    # a mild training: u keeps inside its int8 range (checked below), where the int8 adapter
    # path computes the float one up to rounding
    ref = tr.RefTrainer(at.model, at.train, "float32", tr.SGD(lr=0.02), None, 4)
    for i in range(40):
        ref.step(s.xs[i], int(s.ys[i]))
    ref.flush()
    vals = lr.values(at, ref)
    ad = tmp_path / "a.mtl"
    lr.write_adapters(ad, s.path.read_bytes(), s.m, rank, 5, vals)
    merged_pt, base_pt, lora_pt = tmp_path / "merged.pt", tmp_path / "base.pt", tmp_path / "lora.pt"
    mod = "support.torch_models:Cnn2d"
    assert to_torch.main([str(s.path), "--module", mod, "--lora", str(ad), "-o", str(merged_pt), "-q"]) == 0
    want, _ = to_torch.to_state_dict(lr.merge(s.m, rank, vals), Cnn2d())
    got = torch.load(merged_pt)
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert to_torch.main([str(s.path), "--module", mod, "--lora", str(ad), "--lora-out", str(lora_pt),
                          "-o", str(base_pt), "-q"]) == 0
    lt = torch.load(lora_pt)
    assert len(lt) == 4 * len(vals)
    # the float base with the float adapters computes what the int8 adapted model computes
    net = Cnn2d().eval()
    net.load_state_dict(torch.load(base_pt))
    mods = dict(net.named_modules())

    def hook(name: str) -> Any:
        def f(mod: Any, inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> torch.Tensor:
            a = (lt[f"{name}.lora_A.weight"], lt[f"{name}.lora_A.bias"], lt[f"{name}.lora_B.weight"],
                 lt[f"{name}.lora_B.bias"])
            if isinstance(mod, torch.nn.Conv2d):
                u = F.conv2d(inp[0], a[0], a[1], mod.stride, mod.padding)
                return out + F.conv2d(u, a[2], a[3])
            return out + F.linear(F.linear(inp[0], a[0], a[1]), a[2], a[3])
        return f

    for name in vals:
        mods[name].register_forward_hook(hook(name))
    t_in = s.m.tensors[s.m.input]
    xf = (t_in.scale * (s.xe[:100].astype(np.float32) - t_in.zero_point)).reshape(100, 8, 8, 1)
    with torch.no_grad():
        logits = net(torch.from_numpy(xf.transpose(0, 3, 1, 2).copy())).numpy()
    dev = np.array([np.argmax(ref.forward(s.xe[i])[at.model.output]) for i in range(100)])
    # as close as the base's float and int8 forwards are to each other (same samples)
    net0 = Cnn2d().eval()
    net0.load_state_dict(torch.load(base_pt))
    with torch.no_grad():
        logits0 = net0(torch.from_numpy(xf.transpose(0, 3, 1, 2).copy())).numpy()
    r0 = tr.RefTrainer(s.m, "last:1")
    dev0 = np.array([np.argmax(r0.forward(s.xe[i])[s.m.output]) for i in range(100)])
    agree, agree0 = float(np.mean(logits.argmax(1) == dev)), float(np.mean(logits0.argmax(1) == dev0))
    top_u = max(int(np.abs(ref.forward(s.xe[i])[a.u].astype(np.int32)).max()) for i in range(100)
                for a in at.adapters)
    assert top_u < 127
    assert agree >= agree0 - 0.05, (agree, agree0)
    assert float(np.abs(logits - logits0).max()) > 0.05  # the adapters change the model
    # an adapter file is refused by another base, on the host as on the device
    with pytest.raises(ValueError, match="made for another base model"):
        to_torch.main([str(setups["misc"].path), "--module", "tests.support.training_cases:Misc", "--lora",
                       str(ad), "-o", str(tmp_path / "x.pt"), "-q"])


def test_adapter_file_is_validated_on_the_device(setups: dict[str, Setup], tmp_path: Path) -> None:
    s = setups["cnn"]
    at = lr.attach(s.m, 2, "last:2", None, seed=3)
    good = tmp_path / "good.mtl"
    lr.write_adapters(good, s.path.read_bytes(), s.m, 2, 3, lr.values(at))
    b = bytearray(good.read_bytes())
    cases = {"good": bytes(b), "flipped": bytes(b[:40] + bytes([b[40] ^ 1]) + b[41:]), "short": bytes(b[:-9]),
             "junk": b"MTLX" + bytes(b[4:])}
    for k, v in cases.items():
        (tmp_path / f"{k}.mtl").write_bytes(v)
    code = f"""
import microtrain as mt
from microtrain import lora
for k, base in (("good", {str(s.path)!r}), ("flipped", {str(s.path)!r}), ("short", {str(s.path)!r}),
                ("junk", {str(s.path)!r}), ("good", {str(setups['misc'].path)!r})):
    try:
        ad = lora.load(mt.load(base), {str(tmp_path)!r} + "/" + k + ".mtl")
        print(k, "OK", ad.n_params)
    except ValueError as e:
        print(k, "ValueError", e)
"""
    p = run_micropython(code, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    assert lines[0].startswith("good OK ")
    assert "CRC mismatch" in lines[1] and "CRC mismatch" in lines[2]
    assert "not a LoRA adapter file" in lines[3]
    assert "made for another base model" in lines[4]


@pytest.mark.parametrize("c", [("last:3", 4, "mixed", SGDM, 4, True), ("pw", 2, "int8", SGD, 2, False)],
                         ids=lambda c: f"{c[0]}-r{c[1]}-{c[2]}")
def test_memflora_device_equals_reference(setups: dict[str, Setup], tmp_path: Path, c: Any) -> None:
    """LoRA(memory_floor=True): A frozen, B trained alone with its scale matched to the layer's
    output; the same arrays, losses and adapter file as the reference, A untouched."""
    s = setups["cnn"]
    layers, rank, mode, opt, batch, cal = c
    dev, out = run_device(s, tmp_path, c, memory_floor=True)
    at = lr.attach(s.m, rank, _layers(s, layers), [s.xs[i] for i in range(16)] if cal else None, seed=7,
                   memory_floor=True)
    assert at.train == [at.model.layers[ad.b].name for ad in at.adapters]
    ref = tr.RefTrainer(at.model, at.train, mode, ref_opt(opt), None, batch)
    ys = labels_of(s)
    losses = [ref.step(s.xs[i], int(ys[i])) for i in range(N)]
    ref.flush()
    want = ref.arrays()
    got = {k: v for k, v in dev.items() if k.startswith("L")}
    assert set(want) == set(got) and len(got) > 0
    assert {int(k[1:].split(".")[0]) for k in got} == {ad.b for ad in at.adapters}  # B alone trained
    assert differences(want, got) == []
    assert np.array_equal(np.array(losses), dev["loss"])
    assert "MemFLoRA rank=" in out
    vals = lr.values(at, ref)
    init = lr.values(lr.attach(s.m, rank, _layers(s, layers), [s.xs[i] for i in range(16)] if cal else None,
                               seed=7, memory_floor=True))
    for name, v in vals.items():
        assert np.array_equal(v[1], init[name][1])  # A frozen
        assert np.any(v[4] != 0)  # B moved from zero
        # B's initial scale matched: 127 r levels on u's 127 levels span the output's 127 levels
        s_y = s.m.tensors[s.m.layer(name).output].scale
        assert np.allclose(init[name][5] * np.float32(127 * rank) * init[name][0][0], s_y, rtol=1e-6)
    base = s.path.read_bytes()
    lr.write_adapters(tmp_path / "ref.mtl", base, s.m, rank, 7, vals)
    assert (tmp_path / "a.mtl").read_bytes() == (tmp_path / "ref.mtl").read_bytes()
    assert f"RELOAD-SAME {N_PRED} {N_PRED}" in out


def test_memflora_behind_the_pool_equals_reference(setups: dict[str, Setup], tmp_path: Path) -> None:
    """MemFLoRA on a layer a global average pool alone reads (the residual CNN's conv3, with the
    conv before it and the linear head): the branch joins behind the pool, B on the pooled u;
    the same arrays, losses and adapter file as the reference; merge refuses that adapter."""
    s = setups["res"]
    c = ("last:3", 3, "mixed", SGDM, 4, True)
    layers, rank, mode, opt, batch, cal = c
    dev, out = run_device(s, tmp_path, c, memory_floor=True)
    at = lr.attach(s.m, rank, layers, [s.xs[i] for i in range(16)], seed=7, memory_floor=True)
    pooled = [ad for ad in at.adapters if ad.pu is not None]
    assert len(pooled) == 1 and len(at.adapters) == 3
    pb = at.model.layers[pooled[0].b]
    assert pb.op == mtm.Op.LINEAR and at.model.tensors[pb.inputs[0]].shape == (rank,)  # the pooled u
    ref = tr.RefTrainer(at.model, at.train, mode, ref_opt(opt), None, batch)
    ys = labels_of(s)
    losses = [ref.step(s.xs[i], int(ys[i])) for i in range(N)]
    ref.flush()
    want = ref.arrays()
    got = {k: v for k, v in dev.items() if k.startswith("L")}
    assert set(want) == set(got) and {int(k[1:].split(".")[0]) for k in got} == {ad.b for ad in at.adapters}
    assert differences(want, got) == []
    assert np.array_equal(np.array(losses), dev["loss"])
    vals = lr.values(at, ref)
    assert np.any(vals[pooled[0].name][4] != 0)  # B behind the pool moved from zero
    lr.write_adapters(tmp_path / "ref.mtl", s.path.read_bytes(), s.m, rank, 7, vals)
    assert (tmp_path / "a.mtl").read_bytes() == (tmp_path / "ref.mtl").read_bytes()
    assert f"RELOAD-SAME {N_PRED} {N_PRED}" in out
    assert "merge refused" in out and "merged_preds" not in dev
