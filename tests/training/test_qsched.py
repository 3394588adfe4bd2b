"""QScheduler (python_lib/microtrain/zo.py) in the real micropython: q doubles after `patience`
batches without progress of the running loss and stops at q_max; a falling loss keeps q; ZO with a
QScheduler runs as many queries a batch as the scheduler says, and counts its forward passes; with
share=True the queries of a batch share one step, bit-exact against adapt_ref.ZORef."""

from __future__ import annotations

import json

import numpy as np

from microtrain_tools.reference import adapt_ref as ar
from support.harness import run_micropython
from support.training_cases import Setup, labels_of


def test_qscheduler_grows_q_on_a_stall() -> None:
    code = """
from microtrain.zo import QScheduler
s = QScheduler(q0=1, q_max=8, patience=3, tol=0.0, beta=0.0)
print("FLAT", [s.update(1.0) for _ in range(12)], s.changes)
s = QScheduler(q0=2, q_max=8, patience=3, tol=0.0, beta=0.0)
print("FALLING", [s.update(1.0 / (i + 1)) for i in range(12)])
for bad in ("q0=0", "q0=4, q_max=2", "patience=0", "grow=1", "tol=1.0"):
    try:
        exec("QScheduler(" + bad + ")")
        print("ACCEPTED", bad)
    except ValueError as e:
        print("REFUSED", bad)
"""
    p = run_micropython(code, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    # the first batch sets the best; every third batch without a fall doubles q
    assert lines[0] == "FLAT [1, 1, 1, 2, 2, 2, 4, 4, 4, 8, 8, 8] [(3, 2), (6, 4), (9, 8)]"
    assert lines[1] == "FALLING [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]"
    assert all(ln.startswith("REFUSED") for ln in lines[2:]) and len(lines) == 7


def test_zo_runs_the_scheduled_queries(setups: dict[str, Setup]) -> None:
    s = setups["cnn"]
    y = [int(v) for v in labels_of(s)[:32]]
    code = f"""
import json
import microtrain as mt
from microtrain.zo import QScheduler
m = mt.load({str(s.path)!r})
with open({str(s.samples)!r}, "rb") as f:
    data = f.read(32 * {s.numel})
ys = {y!r}
batch = [(data[i * {s.numel}:(i + 1) * {s.numel}], ys[i]) for i in range(8)]
q = QScheduler(q0=1, q_max=4, patience=2, tol=0.5, beta=0.0)
z = mt.ZO(m, train="last:2", lr=20.0, eps=2, queries=q)
qs = []
for _ in range(8):
    qs.append(z.queries)
    z.step(batch)
print(json.dumps({{"qs": qs, "passes": z.passes, "changes": q.changes}}))
"""
    p = run_micropython(code, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["qs"][0] == 1 and r["qs"][-1] == 4 and r["qs"] == sorted(r["qs"])
    assert r["passes"] == sum(2 * q * 8 for q in r["qs"])


def test_shared_queries_equal_the_reference(setups: dict[str, Setup]) -> None:
    """QScheduler(share=True): the q queries of a batch each step at lr q0 / q. ZO's losses and
    trained weights equal adapt_ref.ZORef's run with those queries and rates batch by batch; a
    full step per query (share=False) trains other weights."""
    s = setups["cnn"]
    y = [int(v) for v in labels_of(s)[:32]]
    code = f"""
import json
import microtrain as mt
from microtrain.zo import QScheduler
with open({str(s.samples)!r}, "rb") as f:
    data = f.read(32 * {s.numel})
ys = {y!r}
for share in (True, False):
    m = mt.load({str(s.path)!r})
    q = QScheduler(q0=1, q_max=4, patience=1, tol=0.5, beta=0.0, share=share)
    z = mt.ZO(m, train="last:2", lr=20.0, eps=2, seed=3, queries=q)
    qs, losses = [], []
    for k in range(4):
        batch = [(data[i * {s.numel}:(i + 1) * {s.numel}], ys[i]) for i in range(8 * k, 8 * k + 8)]
        qs.append(z.queries)
        losses.append(list(z.step(batch)))
    print(json.dumps({{"qs": qs, "losses": losses, "w": [list(ly.w) for ly in z.layers]}}))
"""
    p = run_micropython(code, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    shared, full = (json.loads(ln) for ln in p.stdout.strip().splitlines()[-2:])
    assert shared["qs"] == [1, 1, 2, 4]  # the first batch sets the best; then each a stall
    weighted = [j for j, ly in enumerate(s.m.layers) if ly.weight is not None]
    ref = ar.ZORef(s.m, weighted[-2:], None, lr=20.0, eps=2, seed=3)
    losses = []
    for k, q in enumerate(shared["qs"]):
        ref.queries, ref.lr = q, 20.0 * 1 / q
        idx = range(8 * k, 8 * k + 8)
        losses.append(list(ref.step([s.xs[i] for i in idx], [y[i] for i in idx])))
    assert shared["losses"] == losses
    for j, w in zip(weighted[-2:], shared["w"], strict=True):
        assert np.array_equal(ref.w[j], np.array(w, np.int8))
    assert full["w"] != shared["w"]
