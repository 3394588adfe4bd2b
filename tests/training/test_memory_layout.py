"""Where training keeps its bytes (docs/memory.md), in the real micropython binary
with the natmod:

- batch 1 with plain SGD momentum keeps no gradient sums: each trained layer's gw / gb are its
  momentum arrays, and creating the Trainer allocates about 4 B per trained parameter less than
  at batch 2 (the results are the reference's bit for bit: tests/training/test_training.py);
  Trainer(sums=True) keeps the sums, sums=False drops them with a sparse policy too, and
  sums=False where the momentum cannot take the gradients is refused;
- a gradient whose scale would overflow the momentum raises before the layer changes;
- a Trainer's plan replaces the inference plan: one set of activation buffers, the same
  predictions;
- an activation whose only backward reader is a pool with disjoint windows takes its own error
  (no error buffer of its own), with the same trained bytes as the reference;
- with a frozen prefix, backward's error buffers and int32 scratch live in the forward buffers
  that are idle during backward (the training plan's buffers that hold no kept activation),
  without overlapping one another or a kept activation, as `microtrain info` predicts; training
  so still equals the numpy reference bit for bit, and inference forwards (which overwrite those
  buffers) between the steps change nothing;
- the optimiser's update row is backward's int32 scratch (the same bytes) where that lives in a
  forward buffer and is long enough, and `microtrain info` counts a row only elsewhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from microtrain_tools import info
from microtrain_tools.reference import train_ref as tr
from support.harness import run_micropython
from support.training_cases import (
    DYN,
    FOLD_CONFIGS,
    N_STEPS,
    SGD,
    SGDM,
    Setup,
    device,
    differences,
    labels_of,
    reference,
    same_as_reference,
    state_of,
)

SUMS = """
import gc
import microtrain as mt
out = {}
# batch 0: batch 1 with sums=False (no sums, no copy of the momentum); 1: the default (with it)
for batch in (2, 0, 2, 1):  # the first Trainer also makes what every later one shares: not counted
    m = mt.load(%r)
    gc.collect()
    a = gc.mem_alloc()
    t = mt.Trainer(m, train="all", mode="int8", optimizer=mt.SGD(lr=0.05, momentum=0.9), batch=batch or 1,
                   sums=False if batch == 0 else None)
    gc.collect()
    out[batch] = gc.mem_alloc() - a
    cp = t.model.update.copy if batch < 2 else None
    if batch == 1:
        low = t.layers[0]
        print("MOMCOPY", sum(len(v[0]) + len(v[1]) for v in cp.values()), len(low.w) + len(low.b))
    elif batch == 0:
        print("NOCOPY", int(cp is None))
    same = all(ly.gw is t.opt.state(ly)[0] and ly.gb is t.opt.state(ly)[1] for ly in t.layers)
    print("SAME", batch, int(same))
    n = sum(len(ly.w) + len(ly.b) for ly in t.layers)
    t = m = None
print("HEAP", out[0], out[2], n, out[1])
m = mt.load(%r)
opt = mt.SGD(lr=0.05, momentum=0.9)
t = mt.Trainer(m, train="last:2", optimizer=opt, sums=True)  # the sums even where they could go
print("SUMS", int(all(ly.gw is not t.opt.state(ly)[0] for ly in t.layers)))
t = mt.Trainer(m, train="last:2", optimizer=opt, sparse=mt.DynamicSparse(0.1, 1.0), sums=False)
print("FORCED", int(all(ly.gw is t.opt.state(ly)[0] for ly in t.layers)))
# batch > 1 folds into the momentum only with SGD momentum and no sparse policy
for kw in ({"sums": False, "batch": 2, "sparse": mt.DynamicSparse(0.1, 1.0)},
           {"sums": False, "batch": 2, "optimizer": mt.Adam()},
           {"sums": False, "batch": 2, "optimizer": mt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-3)},
           {"sums": False, "batch": 2, "optimizer": mt.SGD(lr=0.05)},
           {"sums": False, "optimizer": mt.Adam()}, {"sums": 1}):
    a = {"optimizer": opt}
    a.update(kw)
    try:
        mt.Trainer(m, train="last:2", **a)
        print("ACCEPTED", kw)
    except ValueError as e:
        print("REFUSED", e)
"""


def test_batch1_momentum_keeps_no_gradient_sums(setups: dict[str, Setup]) -> None:
    p = run_micropython(SUMS % (str(setups["cnn"].path), str(setups["cnn"].path)))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SAME 0 1" in p.stdout and "SAME 1 1" in p.stdout and "SAME 2 0" in p.stdout, p.stdout
    # sums=True keeps them, sums=False drops them with a sparse policy too, and the rest is refused
    assert "SUMS 1" in p.stdout and "FORCED 1" in p.stdout and "ACCEPTED" not in p.stdout, p.stdout
    refused = [ln for ln in p.stdout.splitlines() if ln.startswith("REFUSED")]
    assert len(refused) == 6, p.stdout
    assert all("needs SGD momentum and no sparse policy" in r for r in (refused[0], refused[3])), refused
    assert all("sums=False needs SGD (no weight_decay" in r for r in refused[1:3] + refused[4:5]), refused
    h1, h2, n, h0 = (int(v) for v in p.stdout.split("HEAP ", 1)[1].split()[:4])
    # the float32 sums, 4 B per parameter, in 16-byte GC blocks (two arrays per layer)
    assert 4 * n <= h2 - h1 <= 4 * n + 64 * len(setups["cnn"].m.layers), (h1, h2, n)
    # the default keeps a copy of the momentum of every trained layer but the lowest (so that a
    # failed step puts it back): in backward's idle buffers where they hold it, else its own
    copied, lowest = (int(v) for v in p.stdout.split("MOMCOPY ", 1)[1].split()[:2])
    assert "NOCOPY 1" in p.stdout and copied == n - lowest, p.stdout
    # (and per layer its two views, their tuple and dict entry, in 16-byte GC blocks)
    assert h1 <= h0 <= h1 + 4 * copied + 64 * len(setups["cnn"].m.layers) + 256, (h1, h0, copied)


FOLD_HEAP = """
import gc
import microtrain as mt
out = {}
for sums in (True, False, True):  # the first Trainer also makes what every later one shares: not counted
    m = mt.load(%r)
    gc.collect()
    a = gc.mem_alloc()
    t = mt.Trainer(m, train="all", mode="int8", optimizer=mt.SGD(lr=0.05, momentum=0.9), batch=4, sums=sums)
    gc.collect()
    out[sums] = gc.mem_alloc() - a
    same = all(ly.gw is t.opt.state(ly)[0] and ly.gb is t.opt.state(ly)[1] for ly in t.layers)
    print("SAME", int(sums), int(same))
    n = sum(len(ly.w) + len(ly.b) for ly in t.layers)
    t = m = None
print("HEAP", out[False], out[True], n)
"""


def test_batch_folded_into_the_momentum_keeps_no_gradient_sums(setups: dict[str, Setup]) -> None:
    """Trainer(batch=4, sums=False): gw / gb are the momentum arrays, and creating it allocates the
    float32 sums' 4 B per trained parameter less than sums=True."""
    p = run_micropython(FOLD_HEAP % str(setups["cnn"].path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SAME 1 0" in p.stdout and "SAME 0 1" in p.stdout, p.stdout
    h0, h1, n = (int(v) for v in p.stdout.split("HEAP ", 1)[1].split()[:3])
    assert 4 * n <= h1 - h0 <= 4 * n + 64 * len(setups["cnn"].m.layers), (h0, h1, n)


@pytest.mark.parametrize("config", FOLD_CONFIGS,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-b{c[4]}-n{c[5]}" + ("" if c[6] else "-midbatch")
                              for c in FOLD_CONFIGS])
def test_batch_folded_into_the_momentum_equals_the_reference(setups: dict[str, Setup], tmp_path: Path,
                                                             config: tuple[Any, ...]) -> None:
    """Batch > 1, sums=False: v = m v at each batch's first sample, every gradient added into v with
    the scales / batch, the update applying v (a short last batch: 1 / batch per sample too); the
    device equals the reference bit for bit: losses, weights, scales, biases, masters, momentum,
    the stochastic-rounding generator's effect, also stopped mid-batch."""
    name, train, mode, opt, batch, steps, flush = config
    s = setups[name]
    kw: dict[str, Any] = dict(order=range(steps), labels=labels_of(s), train=train, mode=mode, opt=opt,
                              batch=batch, sums=False)
    dev = device(s, tmp_path, "fold", flush=flush, **kw)
    ref = reference(s, flush=flush, **kw)
    assert ref.fold and not ref.sums
    assert dev["loss"].tolist() == ref.losses, "per-step losses differ"
    diffs = differences(ref.arrays(), state_of(dev))
    assert not diffs, "\n".join(diffs)
    assert int(dev["train_steps"][0]) == ref.train_steps == steps // batch + (flush and steps % batch > 0)
    assert not any(k.endswith((".gw", ".gb")) for k in dev), "no gradient sums"
    # not the sums' bits (the batch mean rounds differently): the reference really folds
    sums = reference(s, flush=flush, **{**kw, "sums": True})
    assert differences({k: v for k, v in sums.arrays().items() if not k.endswith((".gw", ".gb"))},
                       ref.arrays())


DIVERGE = """
import microtrain as mt
m = mt.load(%r)
t = mt.Trainer(m, train="last:2", mode="mixed", optimizer=mt.SGD(lr=0.05, momentum=0.9))
x = bytearray(m.input.numel)
t.step(x, 1)  # a normal step: momentum not zero
before = [(bytes(ly.w), bytes(ly.gw), bytes(ly.b)) for ly in t.layers]

def huge(model, target, out):  # a custom loss whose error scale has diverged
    loss, err, s = mt.cross_entropy(model, target, out)
    return loss, err, 1e36

t.loss_fn = huge
try:
    t.step(x, 1)
    print("NO-ERROR")
except ValueError as e:
    print("MSG", e)
print("KEPT", int(before == [(bytes(ly.w), bytes(ly.gw), bytes(ly.b)) for ly in t.layers]))
# batch 2 folded into the momentum (sums=False): the check is per sample; a failure mid-batch steps
# nothing and counts no sample (the output layer fails first: no layer took any of it)
t = mt.Trainer(m, train="last:2", mode="mixed", optimizer=mt.SGD(lr=0.05, momentum=0.9), batch=2, sums=False)
t.step(x, 1)
before = [(bytes(ly.w), bytes(ly.gw), bytes(ly.b)) for ly in t.layers]
t.loss_fn = huge
try:
    t.step(x, 1)
    print("NO-ERROR")
except ValueError as e:
    print("MSG2", e)
print("KEPT2", int(before == [(bytes(ly.w), bytes(ly.gw), bytes(ly.b)) for ly in t.layers]), t.pending,
      m.train_steps)
t.loss_fn = mt.cross_entropy
t.step(x, 1)  # the batch completes with the next good sample
print("STEPPED", t.pending, m.train_steps, int(before != [(bytes(ly.w), bytes(ly.gw), bytes(ly.b))
                                                         for ly in t.layers]))
"""


def test_diverged_gradient_leaves_the_layer(setups: dict[str, Setup]) -> None:
    p = run_micropython(DIVERGE % str(setups["cnn"].path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "NO-ERROR" not in p.stdout
    assert "not finite or too large" in p.stdout.split("MSG ", 1)[1], p.stdout
    assert "KEPT 1" in p.stdout, p.stdout
    assert "not finite or too large" in p.stdout.split("MSG2 ", 1)[1], p.stdout
    steps = int(p.stdout.split("KEPT2 ", 1)[1].split()[2])
    assert f"KEPT2 1 1 {steps}" in p.stdout and f"STEPPED 0 {steps + 1} 1" in p.stdout, p.stdout


PLAN = """
import microtrain as mt
m = mt.load(%r)
xs = [bytes((i * 37 + k) & 0xFF for k in range(m.input.numel)) for i in range(4)]
want = [bytes(m.forward(x)) for x in xs]
t = mt.Trainer(m, train="last:2", mode="int8")
print("PLANS", len(m._plans), list(m._plans)[0] == t.first)
print("SAME", int([bytes(m.forward(x)) for x in xs] == want))
"""


def test_the_training_plan_serves_inference(setups: dict[str, Setup]) -> None:
    p = run_micropython(PLAN % str(setups["res"].path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "PLANS 1 True" in p.stdout and "SAME 1" in p.stdout, p.stdout


INPLACE = """
import microtrain as mt
m = mt.load(%r)
t = mt.Trainer(m, train="all", mode="int8")
bw = m.backward_plan
for ti in sorted(bw.inplace):
    print("INPLACE", ti, int(bw.ebuf[ti] is bw.bufs[ti]))
"""


def test_pool_errors_over_their_activations(setups: dict[str, Setup], tmp_path: Path) -> None:
    s = setups["cnn"]
    p = run_micropython(INPLACE % str(s.path))
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [ln.split()[1:] for ln in p.stdout.splitlines() if ln.startswith("INPLACE")]
    pools = [ly for ly in s.m.layers if ly.op.name in ("MAXPOOL", "AVGPOOL")]
    assert rows and all(r[1] == "1" for r in rows), p.stdout
    # a pool's input, or a conv / linear's input made without a fused activation or by a conv /
    # linear (its error is written after the weight gradient read it, with the maker's mask)
    made = {ly.output: ly for ly in s.m.layers}
    convs = [ly for ly in s.m.layers if ly.op.name in ("CONV2D", "LINEAR") and ly.inputs[0] in made
             and (made[ly.inputs[0]].act.name == "NONE" or made[ly.inputs[0]].op.name in ("CONV2D", "LINEAR"))
             and made[ly.inputs[0]].op.name not in ("RELU", "RELU6")]
    got = {int(r[0]) for r in rows}
    assert got & {ly.inputs[0] for ly in pools} and got & {ly.inputs[0] for ly in convs}, p.stdout
    assert got <= {ly.inputs[0] for ly in pools} | {ly.inputs[0] for ly in convs}


SPARSE_FOLD = """
import microtrain as mt
out = []
for sums in (True, False):
    m = mt.load(%r)
    t = mt.Trainer(m, train="all", mode="int8", optimizer=mt.SGD(lr=0.05, momentum=0.9),
                   sparse=mt.DynamicSparse(0.1, 1.0), sums=sums)
    n = m.input.numel
    with open(%r, "rb") as f:
        data = f.read(40 * n)
    losses = [t.step(data[i * n:(i + 1) * n], i %% 10) for i in range(40)]
    arrs = []
    for ly in t.layers:
        arrs += [bytes(ly.w), bytes(ly.b), bytes(ly.mult), bytes(ly.shift), bytes(ly.w_scale)]
        arrs += [bytes(a) for a in t.opt.state(ly)]
    out.append((losses, arrs, int(t.layers[0].gw is t.opt.state(t.layers[0])[0])))
print("FOLDED", out[0][2], out[1][2])
print("LOSSES", int(out[0][0] == out[1][0]))
print("ARRAYS", int(out[0][1] == out[1][1]), len(out[0][1]))
"""


def test_sums_false_with_a_sparse_policy_is_the_same_training(setups: dict[str, Setup]) -> None:
    """sums=False with DynamicSparse (the mode mem-mcu's MobileNetV1 case runs) trains to the same
    bits as the gradient sums, which tests/training/test_training.py checks against the reference."""
    s = setups["cnn"]
    p = run_micropython(SPARSE_FOLD % (str(s.path), str(s.samples)))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "FOLDED 0 1" in p.stdout and "LOSSES 1" in p.stdout, p.stdout
    assert "ARRAYS 1" in p.stdout, p.stdout


NOW = """
import microtrain as mt
from microtrain import stepwise


def run(sums, mode, sparse, window, rounding="auto"):
    m = mt.load(%r)
    pol = mt.DynamicSparse(0.1, 1.0) if sparse else None
    t = mt.Trainer(m, train="all", mode=mode, optimizer=mt.SGD(lr=0.05, rounding=rounding), sparse=pol,
                   sums=sums)
    if window:  # several windows per layer (the default 2048 floats hold these small layers whole)
        m.update = stepwise.StepInBackward(t.opt, t.layers, pol, window)
    n = m.input.numel
    with open(%r, "rb") as f:
        data = f.read(30 * n)
    losses = [t.step(data[i * n:(i + 1) * n], i %% 10) for i in range(30)]
    arrs = []
    for ly in t.layers:
        arrs += [bytes(ly.w), bytes(ly.b), bytes(ly.mult), bytes(ly.shift), bytes(ly.w_scale)]
        if ly.master_w is not None:
            arrs += [bytes(ly.master_w), bytes(ly.master_b)]
    nosums = isinstance(m.update, stepwise.StepInBackward) and all(ly.gw is None for ly in t.layers)
    return losses, arrs, t.opt.rng, int(nosums), m.train_steps


for mode in ("int8", "mixed"):
    ref = run(True, mode, False, 0)
    for w in (0, 40):
        got = run(None, mode, False, w)
        print("DENSE", mode, w, got[3], int(got[0] == ref[0]), int(got[1] == ref[1]), int(got[2] == ref[2]),
              int(got[4] == ref[4] == 30))
ref = run(True, "int8", True, 0, "nearest")
for w in (0, 40):
    got = run(False, "int8", True, w, "nearest")
    print("SPARSE", w, got[3], int(got[0] == ref[0]), int(got[1] == ref[1]))
print("DEFAULT_SPARSE", run(None, "int8", True, 0)[3])
"""


def test_batch1_plain_sgd_steps_during_backward(setups: dict[str, Setup]) -> None:
    """Batch 1, plain SGD: no gradient sums, each layer steps during backward a window of
    channels at a time (stepwise.StepInBackward); the same bits as the sums path: weights, scales, biases,
    masters, losses and the stochastic-rounding generator (the xorshift16 jumps), with one
    window per layer and with several; with a sparse policy (sums=False, nearest rounding: the
    draws follow the update order there) too; by default a sparse policy keeps the sums."""
    s = setups["cnn"]
    p = run_micropython(NOW % (str(s.path), str(s.samples)))
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [ln.split() for ln in p.stdout.splitlines() if ln.startswith(("DENSE", "SPARSE"))]
    assert len(rows) == 6, p.stdout
    assert all(set(r[3:]) == {"1"} for r in rows if r[0] == "DENSE"), p.stdout
    assert all(set(r[2:]) == {"1"} for r in rows if r[0] == "SPARSE"), p.stdout
    assert "DEFAULT_SPARSE 0" in p.stdout, p.stdout


def test_plain_sgd_steps_during_backward_sparse(setups: dict[str, Setup], tmp_path: Path) -> None:
    """sums=False, plain SGD, DynamicSparse, stochastic rounding (mem-mcu's MobileNetV1 mode):
    the reference's bits, its updates (and so its draws) in backward order."""
    s = setups["cnn"]
    kw: dict[str, Any] = dict(order=range(N_STEPS), labels=labels_of(s), train="all", mode="int8",
                              opt={**SGD, "rounding": "stochastic"}, sparse=DYN, batch=1, sums=False)
    dev, ref = same_as_reference(s, tmp_path, "now", **kw)
    assert not ref.sums and ref.reverse
    assert int(dev["train_steps"][0]) == ref.train_steps == N_STEPS
    assert not any(k.endswith((".gw", ".gb")) for k in dev), "no gradient sums"

HOSTED = """
import microtrain as mt
from microtrain import kern, plan
m = mt.load(%r)
t = mt.Trainer(m, train=%r, mode="mixed", optimizer=mt.SGD(lr=0.05, momentum=0.9))
bw = m.backward_plan
idle = []  # every buffer of the forward plan (the idle segments are in them)
for b in m.owners(bw.first).values():
    if not any(b is c for c in idle):
        idle.append(b)
_, n, host = plan.scratch_plan(m, bw.first, bw.region, bw.inplace, kern.NATIVE)
views = []  # (name, int8 view) of every error buffer that is not an activation itself
for d, k in ((bw.ebuf, "e"), (bw.esecond, "t"), (bw.emerge, "m")):
    for ti in sorted(d):
        if ti not in bw.inplace:
            views.append(("%%s%%d" %% (k, ti), d[ti]))
acc = None
for j in bw.acc_views:
    if acc is None or len(bw.acc_views[j]) > len(acc):
        acc = bw.acc_views[j]
kept = sorted(plan.kept(m, bw.first))
before = [bytes(bw.bufs[ti]) for ti in kept]

def lit():  # bytes written through a view that show in the idle forward buffers
    c = 0
    for b in idle:
        for v in b:
            c += v != 0
    return c

hosted = new = 0
for name, v in views:
    for b in idle:
        b[:] = bytes(len(b))
    v[:] = b"\\x01" * len(v)
    c = lit()
    print("VIEW", name, len(v), c)
    hosted += c
    new += len(v) - c
if acc is not None and host is None:  # (else it is in that error buffer)
    for b in idle:
        b[:] = bytes(len(b))
    for i in range(len(acc)):
        acc[i] = 0x01010101
    c = lit()
    print("VIEW acc", 4 * len(acc), c)
    hosted += c
    new += 4 * len(acc) - c
for ti, b in zip(kept, before):  # (zeroed above with the rest)
    bw.bufs[ti][:] = b
# no two overlap: each holds its own mark after all were written, and no kept activation changed
for k in range(len(views)):
    views[k][1][:] = bytes([k + 1]) * len(views[k][1])
ok = all(bytes(v) == bytes([k + 1]) * len(v) for k, (_, v) in enumerate(views))
if acc is not None and host is None:
    for i in range(len(acc)):
        acc[i] = -1
    ok = ok and all(bytes(v) == bytes([k + 1]) * len(v) for k, (_, v) in enumerate(views))
print("DISJOINT", int(ok))
print("KEPT", int(before == [bytes(bw.bufs[ti]) for ti in kept]))
print("HOSTED", hosted, new)
"""


@pytest.mark.parametrize("name", ["cnn", "res", "misc"])
def test_backward_buffers_in_idle_forward_buffers(setups: dict[str, Setup], name: str) -> None:
    s = setups[name]
    p = run_micropython(HOSTED % (str(s.path), "last:2"))
    assert p.returncode == 0, p.stdout + p.stderr
    views = [ln.split()[1:] for ln in p.stdout.splitlines() if ln.startswith("VIEW")]
    # a view is either inside the idle forward buffers or in a buffer of its own, never partly
    assert views and all(c in ("0", n) for _, n, c in views), p.stdout
    assert "DISJOINT 1" in p.stdout and "KEPT 1" in p.stdout, p.stdout
    hosted, new = (int(v) for v in p.stdout.split("HOSTED ", 1)[1].split()[:2])
    r = info.train_ram(s.m, 2, momentum=True)  # (as the Trainer above: SGD momentum)
    assert (hosted, new) == (r["hosted"], r["errors"] + r["scratch"]), (p.stdout, r)
    # misc's forward segments leave no idle room that large: its errors get buffers of their own
    assert hosted > 0 or name == "misc", p.stdout


INTERLEAVED = """
import microtrain as mt
out = []
for extra in (0, 1):
    m = mt.load(%r)
    t = mt.Trainer(m, train="last:2", mode="mixed", optimizer=mt.SGD(lr=0.05, momentum=0.9), batch=2,
                   sparse=mt.DynamicSparse(0.1, 1.0), health=bool(extra))
    n = m.input.numel
    with open(%r, "rb") as f:
        data = f.read(24 * n)
    losses, preds = [], []
    for i in range(12):
        losses.append(t.step(data[i * n:(i + 1) * n], i %% 10))
        if extra:  # inference on the training plan: it overwrites the buffers backward's errors use
            preds.append(m.predict(data[(23 - i) * n:(24 - i) * n]))
    arrs = []
    for ly in t.layers:
        arrs += [bytes(ly.w), bytes(ly.b), bytes(ly.mult), bytes(ly.shift), bytes(ly.w_scale)]
    out.append((losses, arrs))
print("LOSSES", int(out[0][0] == out[1][0]))
print("ARRAYS", int(out[0][1] == out[1][1]), len(out[0][1]))
"""


def test_hosted_backward_buffers_train_like_the_reference(setups: dict[str, Setup], tmp_path: Path) -> None:
    """cnn last:2: its errors and scratch are all in idle forward buffers (the test above); the device
    trains to the reference's bits, and inference forwards plus Health's counting between the steps
    (both write those buffers) leave the training unchanged: no error outlives its backward."""
    s = setups["cnn"]
    assert info.train_ram(s.m, 2)["errors"] + info.train_ram(s.m, 2)["scratch"] == 0
    kw: dict[str, Any] = dict(order=range(10), labels=labels_of(s), train="last:2", mode="mixed", opt=SGDM,
                              batch=2)
    dev, _ = same_as_reference(s, tmp_path, "hosted", **kw)
    j = tr.select(s.m, "last:2")[0]
    assert (dev[f"L{j}.w"] != s.m.data(s.m.layers[j].weight).reshape(-1)).any()
    p = run_micropython(INTERLEAVED % (str(s.path), str(s.samples)))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "LOSSES 1" in p.stdout and "ARRAYS 1" in p.stdout, p.stdout


LENT_ROW = """
import microtrain as mt
m = mt.load(%r)
t = mt.Trainer(m, train=%r, mode="mixed", optimizer=mt.SGD(lr=0.05, momentum=%r), batch=2, sums=%r,
               recompute=%r)
n = m.input.numel
with open(%r, "rb") as f:
    data = f.read(4 * n)
bw = m.backward_plan
acc = None
for j in bw.acc_views:
    if acc is None or len(bw.acc_views[j]) > len(acc):
        acc = bw.acc_views[j]
fr = bw.frow
shared = 0
if fr is not None:  # the same bytes as backward's int32 scratch: a write shows through the other
    acc[0] = 0
    fr[0] = 1.0
    shared = int(acc[0] == 0x3F800000)
for i in range(4):
    t.step(data[i * n:(i + 1) * n], i)
print("LENT", int(fr is not None), len(fr) if fr is not None else 0, len(acc) if acc is not None else 0,
      shared, int(t.opt._row is None), max(len(ly.b) for ly in t.layers))
"""


@pytest.mark.parametrize("name,train,redo,mom", [
    ("cnn", "last:2", False, 0.9), ("cnn", "all", False, 0.9), ("cnn", "all", True, 0.9),
    ("res", "all", False, 0.9), ("misc", "last:2", False, 0.9), ("cnn", "last:2", False, 0.0),
    ("cnn", "all", True, 0.0)])
def test_the_update_row_is_backward_scratch(setups: dict[str, Setup], name: str, train: str, redo: bool,
                                            mom: float) -> None:
    """The optimiser's update row (a float per channel of the widest layer, two with the batch
    folded into the momentum) is backward's int32 scratch retyped where that lives in a forward
    buffer and is long enough: the same bytes, and no row of the optimiser's own; elsewhere the
    optimiser makes one (the bits are the reference's either way: the training tests)."""
    s = setups[name]
    fold = mom > 0  # batch 2, sums=False: into the momentum (update_s8_apply_keep: 2 floats a channel)
    p = run_micropython(LENT_ROW % (str(s.path), train, mom, False if fold else None, redo, str(s.samples)))
    assert p.returncode == 0, p.stdout + p.stderr
    lent, n_fr, n_acc, shared, no_row, width = (int(v) for v in p.stdout.split("LENT ", 1)[1].split()[:6])
    need = (2 if fold else 1) * width
    used = bool(lent) and n_fr >= need
    assert not lent or (n_fr == n_acc and shared == 1), p.stdout
    assert no_row == int(used), p.stdout
    r = info.train_ram(s.m, len(info.weighted_layers(s.m)) if train == "all" else 2, momentum=fold,
                       mode="mixed", batch=2, sums=False if fold else None, recompute=redo)
    idx = tr.select(s.m, train)  # (the first trained layer has no grad-input ratios: 16 B a channel)
    copies = sum(s.m.tensors[ly.weight].numel + (16 if j == idx[0] else 20) * s.m.tensors[ly.bias].numel
                 for j, ly in ((j, s.m.layers[j]) for j in idx))
    assert r["copies"] == copies + (0 if used else 4 * need), (r["copies"], copies, used)
    if (name, train, mom) == ("cnn", "last:2", 0.0):  # (32 channels, a 32-value scratch in an idle buffer)
        assert used, p.stdout
