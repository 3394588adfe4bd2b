"""The optimiser update on its own (docs/training.md, "Update"; docs/numerics.md, "Update").

A MicroPython script loads a model, makes a Trainer (last:2) and applies optimiser steps to
gradient sums given from a file (no forward / backward, so nothing but the update runs), then
dumps every trained array. Checked here:

- the same bits on the double-float unix port (natmod), its pure-Python kernels and the
  single-float host twin (ports/host): the update is float32 on every build;
- SGD / Adam equal the training reference (train_ref, numpy), and a user-written Nesterov
  optimiser (the one of docs/api.md) equals a numpy reference of its formulas built on the
  oracle's update_s8_apply;
- sparse steps leave untouched channels (and their momentum) exactly as they were;
- a failing step (NaN gradient, bad lr) raises one ValueError and changes nothing;
  bad hyperparameters are refused where they are set.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from microtrain_tools import mtm
from microtrain_tools.reference import oracle as o
from microtrain_tools.reference import train_ref as tr
from support import training_cases as tt
from support.fwbuild import PYLIB, build_twin
from support.harness import MICROPYTHON, ROOT
from support.kernel_harness import binary_has_builtin_microtrain, micropython_env

LIB = ROOT / "ports" / "common" / "lib"

SCRIPT = r'''
import json, sys, struct
from array import array
import microtrain as mt
from microtrain.optim import SGD, F

class Nesterov(SGD):
    def direction(self, p, st, n):
        self.prepare(p, n)
        F.update_f32_axpby(st[p.i], p.g, p.k, p.touched, self.momentum, 1.0)  # v = m v + g
        F.update_f32_axpby(p.g, st[p.i], p.k, p.touched, 1.0, self.momentum)  # g = g + m v

cfg = json.load(open(sys.argv[1]))
m = mt.load(cfg["model"])
o = cfg["opt"]
kind = o.pop("kind")
opt = {"sgd": mt.SGD, "adam": mt.Adam, "nesterov": Nesterov}[kind](**o)
t = mt.Trainer(m, train=cfg["train"], mode=cfg["mode"], optimizer=opt)
grads = open(cfg["grads"], "rb").read()
out = open(cfg["out"], "wb")

def rec(name, a):
    b = bytes(a)
    nb = name.encode()
    out.write(struct.pack("<H", len(nb)) + nb + bytes([ord(repr(a)[7]) if type(a) is array else 98])
              + struct.pack("<I", len(b)) + b)

def snapshot():
    s = []
    for ly in t.layers:
        s += [bytes(ly.w), bytes(ly.b), bytes(ly.mult), bytes(ly.shift), bytes(ly.w_scale), bytes(ly.gw),
              bytes(ly.gb), bytes(ly.wr or b"")]  # (the first trained layer has no ratios)
        if ly.master_w is not None:
            s += [bytes(ly.master_w), bytes(ly.master_b)]
        for a in opt.state(ly) or []:
            s.append(bytes(a))
    return s + [opt.steps, opt.rng, m.train_steps]

pos = 0
for si, step in enumerate(cfg["steps"]):
    for j, ly in enumerate(t.layers):
        nw, nb = len(ly.gw), len(ly.gb)
        ly.gw[0:nw] = array("f", grads[pos:pos + 4 * nw])
        pos += 4 * nw
        ly.gb[0:nb] = array("f", grads[pos:pos + 4 * nb])
        pos += 4 * nb
        tch = step["touched"][j]
        ly.touched = None if tch is None else bytearray(tch)
    if step.get("bad"):
        before = snapshot()
        lr = step.get("lr")
        try:
            opt.step(t.layers, step["n"], float(lr) if type(lr) is str else lr)
            print("NO-ERROR")
        except ValueError as e:
            print("ERROR", e)
        print("UNCHANGED", snapshot() == before)
        for ly in t.layers:
            for i in range(len(ly.gw)):
                ly.gw[i] = 0.0
            for i in range(len(ly.gb)):
                ly.gb[i] = 0.0
        continue
    opt.step(t.layers, step["n"], step.get("lr"))
    for ly in t.layers:
        p = "S%d.L%d." % (si, ly.index)
        for name in ("w", "b", "mult", "shift", "w_scale", "gw", "gb", "wr", "master_w", "master_b"):
            a = getattr(ly, name)
            if a is not None:
                rec(p + name, a)
        for k, a in enumerate(opt.state(ly) or []):
            rec(p + "st%d" % k, a)
        rec(p + "ein", array("f", [ly.ein_top, ly.ein_r]))
    rec("S%d.rng" % si, array("i", [opt.rng]))
out.close()
for name, kw in (("lr", {"lr": 0.0}), ("lr", {"lr": float("nan")}), ("momentum", {"momentum": 1.0}),
                 ("weight_decay", {"weight_decay": -1.0})):
    try:
        mt.SGD(**kw)
        print("ACCEPTED", name)
    except ValueError as e:
        print("REFUSED", e)
for kw in ({"beta1": 1.0}, {"beta2": -0.5}, {"eps": 0.0}):
    try:
        mt.Adam(**kw)
        print("ACCEPTED", kw)
    except ValueError as e:
        print("REFUSED", e)
print("UPDATE-DONE")
'''


def _grads(s: tt.Setup, layers: list[int], steps: int, seed: int) -> bytes:
    """Gradient-like float32 sums for every step and trained layer (weights then bias)."""
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(steps):
        for j in layers:
            ly = s.m.layers[j]
            nw = s.m.data(ly.weight).size
            nb = s.m.data(ly.bias).size
            for n in (nw, nb):
                parts.append((rng.normal(0, 1, n) * 10.0 ** rng.uniform(-4, -1)).astype(np.float32).tobytes())
    return b"".join(parts)


def _steps(s: tt.Setup, layers: list[int], sparse: bool) -> list[dict[str, Any]]:
    """Four steps: batch sizes 1 and 3, the third with half of the channels untouched (sparse)."""
    out = []
    for i, n in enumerate((1, 3, 1, 2)):
        touched: list[list[int] | None] = [None] * len(layers)
        if sparse and i == 2:
            touched = [[int(c % 2 == 0) for c in range(len(s.m.data(s.m.layers[j].bias)))] for j in layers]
        out.append({"n": n, "touched": touched})
    return out


def _run(exe: list[str], env: dict[str, str], tmp: Path, tag: str,
         cfg: dict[str, Any]) -> tuple[dict[str, NDArray[Any]], str]:
    script = tmp / "update_run.py"
    script.write_text(SCRIPT)
    cfg = dict(cfg, out=str(tmp / f"{tag}.dump"))
    (tmp / f"{tag}.json").write_text(json.dumps(cfg))
    p = subprocess.run([*exe, str(script), str(tmp / f"{tag}.json")], capture_output=True, text=True,
                       env=env, cwd=tmp, timeout=600, check=False)
    assert p.returncode == 0 and "UPDATE-DONE" in p.stdout, f"{tag}:\n{(p.stdout + p.stderr)[-3000:]}"
    return tt.read_dump(tmp / f"{tag}.dump"), p.stdout


def _config(s: tt.Setup, tmp: Path, mode: str, opt: dict[str, Any], sparse: bool = False,
            bad: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[int]]:
    layers = tr.select(s.m, "last:2")
    steps = _steps(s, layers, sparse)
    gpath = tmp / "grads.bin"
    gpath.write_bytes(_grads(s, layers, len(steps) + (1 if bad else 0), 7))
    if bad:
        steps.append(dict({"n": 1, "touched": [None] * len(layers), "bad": True}, **bad))
    return {"model": str(s.path), "train": "last:2", "mode": mode, "opt": opt, "grads": str(gpath),
            "steps": steps}, layers


def _unix(pure: bool = False) -> tuple[list[str], dict[str, str]]:
    env = micropython_env()
    if pure:
        env["MICROTRAIN_PURE"] = "1"
    else:
        env.pop("MICROTRAIN_PURE", None)
    return [str(MICROPYTHON), "-X", "heapsize=8m"], env


@pytest.fixture(scope="module")
def twin() -> Path:
    """The float32 host twin and the compiled package (both incremental; test_training_float32's)."""
    return build_twin()


OPTS = {"sgdm": {"kind": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.001},
        "adam": {"kind": "adam", "lr": 0.005},
        "std": {"kind": "sgd", "lr": 0.02, "momentum": 0.5, "standardize": True},
        "nesterov": {"kind": "nesterov", "lr": 0.03, "momentum": 0.9}}


@pytest.mark.parametrize("mode", ["int8", "mixed", "float32"])
@pytest.mark.parametrize("opt", list(OPTS))
def test_update_is_the_same_on_double_single_and_pure_python(setups: dict[str, tt.Setup], tmp_path: Path,
                                                            twin: Path, mode: str, opt: str) -> None:
    """The headline: double-float unix (natmod), its pure-Python kernels and the single-float
    twin (the boards' interpreter) give the same bits for every trained array after each step."""
    s = setups["cnn"]
    cfg, _ = _config(s, tmp_path, mode, dict(OPTS[opt]), sparse=True)
    runs = {"unix": _run(*_unix(), tmp_path, "unix", cfg)[0],
            "pure": _run(*_unix(pure=True), tmp_path, "pure", cfg)[0],
            "twin": _run([str(twin), "-X", "heapsize=8m", "-p", str(PYLIB), "-p", str(LIB)], dict(os.environ),
                         tmp_path, "twin", cfg)[0]}
    base = runs["unix"]
    assert len(base) > 20
    for name, got in runs.items():
        assert set(got) == set(base), name
        diff = [k for k in base if base[k].tobytes() != got[k].tobytes()]
        assert not diff, f"{name} differs from unix in {diff[:8]}"


def _reference(s: tt.Setup, cfg: dict[str, Any], grads: bytes) -> dict[str, NDArray[Any]]:
    """train_ref's update fed the same sums: the arrays after each step."""
    o_ = dict(cfg["opt"])
    kind = o_.pop("kind")
    opt = tr.SGD(**o_) if kind == "sgd" else tr.Adam(**o_)
    ref = tr.RefTrainer(s.m, "last:2", cfg["mode"], opt)
    pos, out = 0, {}
    for si, step in enumerate(cfg["steps"]):
        for j, tch in zip(sorted(ref.layers), step["touched"], strict=True):
            rl = ref.layers[j]
            rl.gw = np.frombuffer(grads[pos:pos + 4 * rl.gw.size], np.float32).copy()
            pos += 4 * rl.gw.size
            rl.gb = np.frombuffer(grads[pos:pos + 4 * rl.gb.size], np.float32).copy()
            pos += 4 * rl.gb.size
            rl.touched = None if tch is None else np.array(tch, bool)
        ref.pending = step["n"]
        ref.flush()
        for k, v in ref.arrays().items():
            out[f"S{si}.{k}"] = v
    return out


@pytest.mark.parametrize("mode", ["int8", "mixed"])
@pytest.mark.parametrize("opt", ["sgdm", "adam", "std"])
def test_update_equals_the_training_reference(setups: dict[str, tt.Setup], tmp_path: Path, mode: str,
                                             opt: str) -> None:
    s = setups["res"]
    cfg, _ = _config(s, tmp_path, mode, dict(OPTS[opt]), sparse=True)
    dev, _ = _run(*_unix(), tmp_path, "dev", cfg)
    want = _reference(s, cfg, Path(cfg["grads"]).read_bytes())
    keys = [k for k in want if k in dev]
    assert len(keys) >= 4 * 2 * 8
    diff = [k for k in keys if want[k].tobytes() != dev[k].astype(want[k].dtype).tobytes()]
    assert not diff, f"device differs from train_ref in {diff[:8]}"


def test_nesterov_from_the_primitives_equals_numpy(setups: dict[str, tt.Setup], tmp_path: Path) -> None:
    """docs/api.md's Nesterov, run in MicroPython, against its formulas in numpy (float32) and
    the oracle's update_s8_apply, step by step (dense steps, mixed mode: int8 + master)."""
    s = setups["cnn"]
    cfg, layers = _config(s, tmp_path, "mixed", dict(OPTS["nesterov"]))
    dev, _ = _run(*_unix(), tmp_path, "nest", cfg)
    grads = Path(cfg["grads"]).read_bytes()
    mom, lr = np.float32(0.9), 0.03
    m = s.m
    state: dict[int, dict[str, Any]] = {}
    for j in layers:
        ly = m.layers[j]
        w = m.data(ly.weight).reshape(-1).astype(np.int8)
        sw = m.data(m.tensors[ly.weight].qscales).astype(np.float32)
        b = m.data(ly.bias).astype(np.int32)
        s_in = np.float32(m.tensors[ly.inputs[0]].scale)
        k = w.size // b.size
        st = {"w": w, "w_scale": sw, "b": b, "mult": m.data(ly.mult).astype(np.int32),
              "shift": m.data(ly.shift).astype(np.int32), "vw": np.zeros(w.size, np.float32),
              "vb": np.zeros(b.size, np.float32), "s_in": s_in,
              "s_out": np.float32(m.tensors[ly.output].scale),
              "k": k, "mw": None, "mb": None}
        if j == layers[-1]:  # mixed: a master copy of the last trained layer
            st["mw"] = w.astype(np.float32) * np.repeat(sw, k)
            st["mb"] = (b.astype(np.float32) * s_in) * sw
        state[j] = st
    pos, rng = 0, 0xACE1
    for si, step in enumerate(cfg["steps"]):
        for j in layers:
            st = state[j]
            gw = np.frombuffer(grads[pos:pos + 4 * st["w"].size], np.float32).copy()
            pos += 4 * st["w"].size
            gb = np.frombuffer(grads[pos:pos + 4 * st["b"].size], np.float32).copy()
            pos += 4 * st["b"].size
            inv = np.float32(1.0) / np.float32(step["n"])
            dirs = []
            for g, v in ((gw, "vw"), (gb, "vb")):
                g = g * inv if step["n"] != 1 else g
                st[v] = mom * st[v] + g  # v = m v + g
                dirs.append(g + mom * st[v])  # g + m v
            r = -1 if st["mw"] is not None else rng
            ret, outs = o.update_s8_apply(st["w"], st["w_scale"], st["b"], st["mult"], st["shift"], dirs[0],
                                          dirs[1], st["mw"], st["mb"], None, lr, float(st["s_in"]),
                                          float(st["s_out"]), r, np.zeros(st["b"].size, np.float32))
            if st["mw"] is None:
                rng = ret
                st["w"], st["w_scale"], st["b"], st["mult"], st["shift"] = outs[:5]
            else:
                st["w"], st["w_scale"], st["b"], st["mult"], st["shift"], _, _, st["mw"], st["mb"] = outs[:9]
            p = f"S{si}.L{j}."
            for name, want in (("w", st["w"]), ("w_scale", st["w_scale"]), ("b", st["b"]),
                               ("mult", st["mult"]), ("shift", st["shift"]), ("st0", st["vw"]),
                               ("st1", st["vb"])):
                assert dev[p + name].tobytes() == np.asarray(want).astype(dev[p + name].dtype).tobytes(), \
                    f"step {si} layer {j}: {name}"
            if st["mw"] is not None:
                assert dev[p + "master_w"].tobytes() == st["mw"].astype(np.float32).tobytes()
            if j != layers[0]:  # the lowest trained layer's grad input never runs: its ratios wait
                _, wr = o.update_f32_ratios(st["w_scale"], int(dev[p + "ein"][1]))  # for set_trained
                assert dev[p + "wr"].tobytes() == wr.tobytes(), f"step {si} layer {j}: wr"


def test_sparse_steps_leave_untouched_channels_alone(setups: dict[str, tt.Setup], tmp_path: Path) -> None:
    s = setups["cnn"]
    cfg, layers = _config(s, tmp_path, "int8", dict(OPTS["sgdm"]), sparse=True)
    dev, _ = _run(*_unix(), tmp_path, "sparse", cfg)
    for j in layers:
        c = s.m.data(s.m.layers[j].bias).size
        odd = np.arange(c) % 2 == 1  # untouched in step 2
        for name in ("w", "w_scale", "b", "mult", "shift", "st0", "st1"):
            before, after = dev[f"S1.L{j}.{name}"], dev[f"S2.L{j}.{name}"]
            rows_b, rows_a = before.reshape(c, -1), after.reshape(c, -1)
            assert rows_b[odd].tobytes() == rows_a[odd].tobytes(), f"layer {j} {name}: untouched changed"
            if name in ("w_scale", "st0"):
                assert rows_b[~odd].tobytes() != rows_a[~odd].tobytes(), f"layer {j} {name}: nothing updated"


@pytest.mark.parametrize("bad", [{"nan_in": "gb"}, {"lr": "nan"}, {"lr": -0.1}, {"n": 0}])
def test_a_failing_step_changes_nothing(setups: dict[str, tt.Setup], tmp_path: Path,
                                        bad: dict[str, Any]) -> None:
    s = setups["cnn"]
    cfg, layers = _config(s, tmp_path, "mixed", dict(OPTS["adam"]), bad=dict(bad))
    step = cfg["steps"][-1]
    if bad.get("nan_in"):
        # a NaN in the last (second) layer's bias sum: the first layer is checked clean before it
        g = bytearray(Path(cfg["grads"]).read_bytes())
        g[-4:] = np.float32(np.nan).tobytes()
        Path(cfg["grads"]).write_bytes(bytes(g))
        step.pop("nan_in")
    if "n" in bad:
        step["n"] = bad["n"]
    _, out = _run(*_unix(), tmp_path, "bad", cfg)
    lines = out.splitlines()
    err = [ln for ln in lines if ln.startswith(("ERROR", "NO-ERROR"))]
    assert err and err[0].startswith("ERROR step"), out[-2000:]
    assert "UNCHANGED True" in lines, out[-2000:]
    refused = [ln for ln in lines if ln.startswith(("REFUSED", "ACCEPTED"))]
    assert len(refused) == 7 and all(ln.startswith("REFUSED") for ln in refused), refused


def test_pure_python_and_native_agree_on_a_training_run(setups: dict[str, tt.Setup], tmp_path: Path) -> None:
    """Trainer runs (forward, loss, sparse backward, update) on the natmod and on the pure-Python
    kernels: the update primitives are the only float code that differs in kind between them."""
    if binary_has_builtin_microtrain():
        pytest.skip(f"{MICROPYTHON} has _microtrain built in: MICROTRAIN_PURE covers it elsewhere")
    s = setups["misc"]
    labels = tt.labels_of(s)
    order = list(range(12))
    a = tt.device(s, tmp_path, "nat", order=order, labels=labels, train="all", mode="int8",
                  opt=tt.SGDM, sparse=tt.DYN, batch=3)
    os.environ["MICROTRAIN_PURE"] = "1"  # the harness passes the environment on
    try:
        b = tt.device(s, tmp_path, "pure", order=order, labels=labels, train="all", mode="int8",
                      opt=tt.SGDM, sparse=tt.DYN, batch=3)
    finally:
        os.environ.pop("MICROTRAIN_PURE", None)
    diff = [k for k in a if a[k].tobytes() != b[k].tobytes()]
    assert not diff, diff[:8]


def test_checkpoint_format_is_unchanged(setups: dict[str, tt.Setup], tmp_path: Path) -> None:
    """A trainer checkpoint after native updates reads back with the momentum in STATE slots 2/3."""
    s = setups["cnn"]
    labels = tt.labels_of(s)
    ck = tmp_path / "ck.mtm"
    dump = tt.device(s, tmp_path, "ck", order=list(range(6)), labels=labels, train="last:2", mode="mixed",
                     opt=tt.SGDM, save=str(ck))
    m = mtm.load(ck)
    j = max(dump_layer for dump_layer in (int(k[1:].split(".")[0]) for k in dump if k.startswith("L")))
    ly = m.layers[j]
    assert ly.state[2] is not None and ly.state[3] is not None
    assert m.data(ly.state[2]).astype(np.float32).tobytes() == dump[f"L{j}.st0"].tobytes()
