"""On-device training (python_lib/microtrain, docs/training.md) in the real micropython binary.

Two small CNNs are trained for a few seconds in PyTorch on scikit-learn's handwritten
digits and converted with the project's converter: a 2-D net (conv + BN + relu,
depthwise conv + relu6, pointwise conv, max-pool, conv, avg-pool, two linears) and a
1-D residual net (conv, conv, residual add, max-pool, strided conv, global avg-pool,
linear). Then:

- the device's Trainer (tests/mp/train_runner.py) and the independent numpy reference
  (tools/microtrain_tools/reference/train_ref.py) train the same steps; every trained layer's int8
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from numpy.typing import NDArray

from microtrain_tools import convert as cv
from microtrain_tools import mtm
from microtrain_tools.mtm import Act, Op
from microtrain_tools.reference import train_ref as tr
from support.harness import cosine, run_micropython
from support.training_cases import (
    ADAM,
    CONFIGS,
    DYN,
    N_STEPS,
    RUNNER,
    SGD,
    SGDM,
    Setup,
    config_id,
    device,
    differences,
    labels_of,
    read_dump,
    ref_opt,
    ref_sparse,
    reference,
    state_of,
)


@pytest.mark.parametrize("config", CONFIGS, ids=[config_id(c) for c in CONFIGS])
def test_device_equals_reference(setups: dict[str, Setup], tmp_path: Path,
                                 config: tuple[str, Any, str, dict[str, Any], dict[str, Any] | None, int]
                                 ) -> None:
    name, train, mode, opt, sparse, batch = config
    s = setups[name]
    labels = labels_of(s)
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
    kw: dict[str, Any] = dict(order=range(7), labels=labels_of(s), train="all", mode="int8", opt=SGD,
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
    labels = labels_of(s)
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
    kw: dict[str, Any] = dict(order=range(12), labels=labels_of(s), train=train, mode="int8", opt=SGDM,
                              batch=3)
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
    # it learns: every later epoch below the first, the later ones below the second (an epoch's mean
    # may rise a little with the order of its samples)
    assert all(b < losses[0] for b in losses[1:]) and min(losses[2:]) < losses[1], losses
    assert losses[-1] < 0.25 * losses[0]
    before = float(np.mean(cv.run_mtm(s.m, s.xe).argmax(1) == (s.ye + 1) % 10))
    assert before < 0.2 and acc > 0.8, (before, acc)
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert recs[0]["kind"] == "config" and [r["epoch"] for r in recs if r["kind"] == "epoch"] == [0, 1, 2, 3]
    assert [r["loss"] for r in recs if r["kind"] == "epoch"] == losses
    assert recs[-1]["kind"] == "eval" and recs[-1]["acc"] == acc


@pytest.mark.parametrize("train,mode,lr", [("all", "int8", 0.01), ("last:1", "float32", 0.01)])
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
        slots = {0: "master_w", 1: "master_b", 2: "st0", 3: "st1", 4: "st2", 5: "st3"}
        for k, key in slots.items():
            if state and p + key in dump:
                assert ly.state[k] is not None, f"{ly.name}: state slot {k} missing"
                assert ck.data(ly.state[k]).reshape(-1).tobytes() == dump[p + key].tobytes()
            else:
                assert ly.state[k] is None


@pytest.mark.parametrize("mode,rounding", [("int8", "auto"), ("mixed", "auto"), ("float32", "auto"),
                                           ("int8", "nearest"), ("mixed", "nearest"), ("mixed", "bf16")])
def test_resume_equals_uninterrupted_sgd_momentum(setups: dict[str, Setup], tmp_path: Path, mode: str,
                                                  rounding: str) -> None:
    """train k steps, trainer.save, new interpreter loads the checkpoint and a new Trainer continues:
    the result equals the uninterrupted run, bit for bit (weights, scales, masters, momentum); "bf16":
    a bfloat16 momentum (saved widened to float32, rounded again when loaded)."""
    s = setups["res"]
    labels = labels_of(s)
    opt = ({**SGDM, "weight_decay": 1e-4} if rounding == "auto" else
           {**SGDM, "state": "bf16"} if rounding == "bf16" else {**SGDM, "rounding": rounding})
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


@pytest.mark.parametrize("mode,state", [("float32", "f32"), ("int8", "f32"), ("int8", "bf16")])
def test_resume_adam_equals_uninterrupted(setups: dict[str, Setup], tmp_path: Path, mode: str,
                                          state: str) -> None:
    """Format 1.3 keeps Adam's second moments (state[4], state[5]) and the trainer record its bias
    correction (beta1^t, beta2^t): Adam interrupted by trainer.save and resumed in a new interpreter
    is the uninterrupted run, bit for bit, and the device checkpoint is the reference's."""
    s = setups["res"]
    opt = ADAM if state == "f32" else {**ADAM, "state": state}
    kw: dict[str, Any] = dict(labels=labels_of(s), train="last:2", mode=mode, opt=opt, batch=4)
    ck = tmp_path / "ck.mtm"
    first = device(s, tmp_path, "first", order=range(16), save=str(ck), **kw)
    data = ck.read_bytes()
    ck_model = mtm.read(data)
    assert data[6] == 3 and ck_model.adam_bt is not None  # version 1.3, bias correction recorded
    _checkpoint_matches_dump(ck_model, first, "last:2", state=True)  # masters, m and v
    assert all(ck_model.layers[j].state[4] is not None for j in tr.select(ck_model, "last:2"))
    assert data == mtm.write(reference(s, order=range(16), **kw).checkpoint())
    resumed = device(s, tmp_path, "resumed", order=range(16, 32), model=ck, **kw)
    whole = device(s, tmp_path, "whole", order=range(32), **kw)
    diffs = differences(state_of(whole), state_of(resumed), ("uninterrupted", "resumed"))
    assert not diffs, "resumed Adam vs uninterrupted:\n" + "\n".join(diffs)
    diffs = differences(reference(s, order=range(16, 32), model=ck_model, **kw).arrays(), state_of(resumed))
    assert not diffs, "resumed Adam vs the reference resumed from the checkpoint:\n" + "\n".join(diffs)


def test_resume_adam_from_a_1_2_checkpoint(setups: dict[str, Setup], tmp_path: Path) -> None:
    """A checkpoint older than format 1.3 (first moments only, no bias-correction record) still
    loads and resumes as docs/training.md says: second moments and bias correction restart."""
    s = setups["res"]
    kw: dict[str, Any] = dict(labels=labels_of(s), train="last:2", mode="float32", opt=ADAM, batch=4)
    ck = tmp_path / "ck.mtm"
    device(s, tmp_path, "first", order=range(16), save=str(ck), **kw)
    old = mtm.load(ck)
    for ly in old.layers:
        ly.state[4] = ly.state[5] = None
    old.tensors, remap = _drop_unreferenced(old)
    for ly in old.layers:
        ly.state = [None if v is None else remap[v] for v in ly.state]
    old.adam_bt = None
    data = mtm.write(old)
    assert data[6] == 0  # written as the oldest version that fits: 1.0
    old_path = tmp_path / "old.mtm"
    old_path.write_bytes(data)
    resumed = device(s, tmp_path, "resumed", order=range(16, 32), model=old_path, **kw)
    whole = device(s, tmp_path, "whole", order=range(32), **kw)
    assert differences(state_of(whole), state_of(resumed)), "second moments cannot have been restored"
    diffs = differences(reference(s, order=range(16, 32), model=mtm.read(data), **kw).arrays(),
                        state_of(resumed))
    assert not diffs, "resumed Adam (1.0 file) vs docs/training.md:\n" + "\n".join(diffs)


def _drop_unreferenced(m: mtm.Model) -> tuple[list[mtm.Tensor], dict[int, int]]:
    """m's tensors without STATE tensors no layer references, and the old -> new index map."""
    used = {v for ly in m.layers for v in ly.state if v is not None}
    keep = [i for i, t in enumerate(m.tensors) if t.kind != mtm.Kind.STATE or i in used]
    remap = {old: new for new, old in enumerate(keep)}
    assert all(remap[i] == i for i, t in enumerate(m.tensors) if t.kind != mtm.Kind.STATE)  # STATE comes last
    return [m.tensors[i] for i in keep], remap


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
    kw: dict[str, Any] = dict(order=range(6), labels=labels_of(s), train="all", mode=mode, opt=SGDM,
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
