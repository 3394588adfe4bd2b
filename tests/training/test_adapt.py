"""The adaptation methods of docs/adapt.md in the real micropython, bit-exact against
tools/microtrain_tools/reference/adapt_ref.py (written from the docs, numpy + the oracle):

- the prototype head: every score (floats compared exactly) and prediction, both metrics
  and both prototype dtypes, save / load, rename / remove;
- replay: Trainer(replay=Replay(...)) trains to the same weights and state as the
  reference's replay over RefTrainer, both policies, RAM and file, in a 256 KB heap;
- zeroth-order training: the int8 SPSA weights after several steps, pure and hybrid.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from microtrain_tools.reference import adapt_ref as ar
from microtrain_tools.reference import train_ref as tr
from support.harness import ROOT, run_micropython
from support.training_cases import SGDM, Setup, device, differences, labels_of, ref_opt, state_of

RUNNER = ROOT / "tests" / "mp" / "adapt_runner.py"


def run(tmp: Path, tag: str, cfg: dict[str, Any], heap: str | None = None) -> dict[str, Any]:
    cpath = tmp / f"{tag}.json"
    cpath.write_text(json.dumps(cfg))
    p = run_micropython(RUNNER, [str(cpath)], heapsize=heap, timeout=300)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("ADAPT ")]
    assert p.returncode == 0 and lines, f"{tag}: {(p.stdout + p.stderr)[-3000:]}"
    return json.loads(lines[-1][6:])


def base(s: Setup) -> dict[str, Any]:
    return {"model": str(s.path), "samples": str(s.samples), "numel": s.numel,
            "labels": [int(v) for v in s.ys]}


@pytest.mark.parametrize("metric,dtype,pure", [("cosine", "int8", False), ("l2", "int8", False),
                                               ("cosine", "float32", False), ("l2", "float32", False),
                                               ("cosine", "float32", True)])
def test_prototype_head_scores_equal_the_reference(setups: dict[str, Setup], tmp_path: Path, metric: str,
                                                   dtype: str, pure: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    if pure:  # the pure-Python kernels (boards without the native module)
        monkeypatch.setenv("MICROTRAIN_PURE", "1")
    s = setups["cnn"]
    layer = s.m.layers[-2].name
    shots = []
    for c in range(10):
        idx = [int(i) for i in np.nonzero(s.ys == c)[0][:5]]
        shots.append([f"d{c}", idx])
    shots.append(["d3", [int(i) for i in np.nonzero(s.ys == 3)[0][5:8]]])  # more samples for a class
    query = list(range(200, 240))
    save = tmp_path / "head.json"
    got = run(tmp_path, f"proto-{metric}-{dtype}", {**base(s), "kind": "proto", "layer": layer,
                                                    "metric": metric, "dtype": dtype, "shots": shots,
                                                    "query": query, "save": str(save),
                                                    "rename": ["d0", "zero"], "remove": "d5"})
    zp = s.m.tensors[s.m.layers[-2].output].zero_point
    ref = ar.ProtoRef(zp, metric, dtype)
    emb = {i: ar.embed(s.m, s.xs[i], layer) for i in set(query) | {i for _, ix in shots for i in ix}}
    for name, idx in shots:
        ref.add_class(name, np.stack([emb[i] for i in idx]))
    want = [ref.scores(emb[i]) for i in query]
    assert got["classes"] == ref.names
    assert got["scores"] == want  # exact: the same integers, then the same double operations
    assert got["pred"] == [ref.predict(emb[i]) for i in query]
    acc = np.mean([p == f"d{s.ys[i]}" for p, i in zip(got["pred"], query, strict=True)])
    assert acc > 0.5, acc  # 5 shots of the digits on a digits model: far above chance
    assert got["loaded_same"] and json.loads(save.read_text())["classes"][3]["n"] == 8
    c5 = ref.names.index("d5")
    assert got["classes_after"] == ["zero" if n == "d0" else n for n in ref.names if n != "d5"]
    assert got["scores_after"] == [[v for c, v in enumerate(w) if c != c5] for w in want]
    out = tr.RefTrainer(s.m, "last:1").forward(s.xs[query[0]])[s.m.output]
    assert got["both"][0][0] == int(np.argmax(out))


@pytest.mark.parametrize("policy,path", [("reservoir", False), ("balanced", False), ("reservoir", True)])
def test_replay_trains_as_the_reference(setups: dict[str, Setup], tmp_path: Path, policy: str,
                                        path: bool) -> None:
    s = setups["cnn"]
    order = list(range(60))
    labels = labels_of(s)
    rp = {"capacity": 12, "policy": policy, "k": 2, "seed": 7}
    if path:
        rp["path"] = str(tmp_path / "replay.bin")
    got = device(s, tmp_path, f"replay-{policy}", order=order, labels=labels, train="last:2", mode="mixed",
                 opt=SGDM, batch=4, replay=rp)
    t = tr.RefTrainer(s.m, "last:2", "mixed", ref_opt(SGDM), None, 4)
    r = ar.ReplayRef(12, policy, 2, 7)
    for i in order:
        r.step(t, s.xs[i], int(labels[i]))
    t.flush()
    want = {k: v for k, v in t.arrays().items() if not k.endswith((".gw", ".gb"))}
    diff = differences(want, {k: v for k, v in state_of(got).items() if not k.endswith((".gw", ".gb"))})
    assert not diff, diff
    assert got["train_steps"][0] == t.train_steps
    # the replayed steps changed the training: without replay the weights differ
    plain = tr.RefTrainer(s.m, "last:2", "mixed", ref_opt(SGDM), None, 4)
    for i in order:
        plain.step(s.xs[i], int(labels[i]))
    plain.flush()
    assert plain.train_steps < t.train_steps


@pytest.mark.parametrize("bp,queries", [(None, 1), ("last:1", 1), (None, 3)])
def test_zeroth_order_steps_equal_the_reference(setups: dict[str, Setup], tmp_path: Path,
                                                bp: str | None, queries: int) -> None:
    s = setups["cnn"]
    order = list(range(48))
    labels = [int(v) for v in labels_of(s)]
    opt = {"lr": 0.05, "momentum": 0.9}
    cfg = {**base(s), "labels": labels, "kind": "zo", "train": "last:2", "bp": bp, "lr": 20.0, "eps": 2,
           "seed": 5, "batch": 8, "order": order, "opt": opt, "mode": "mixed",
           "out": str(tmp_path / "zo.dump"), "queries": queries}
    got = run(tmp_path, f"zo-{bp}-{queries}", cfg, heap="256k")
    from support.training_cases import read_dump

    dump = read_dump(tmp_path / "zo.dump")
    weighted = [j for j, ly in enumerate(s.m.layers) if ly.weight is not None]
    zo = weighted[-2:-1] if bp else weighted[-2:]
    ref = ar.ZORef(s.m, zo, weighted[-1:] if bp else None, lr=20.0, eps=2, seed=5,
                   opt=tr.SGD(lr=0.05, momentum=0.9), mode="mixed", queries=queries)
    losses = []
    for st in range(0, len(order), 8):
        idx = order[st:st + 8]
        losses.append(list(ref.step([s.xs[i] for i in idx], [labels[i] for i in idx])))
    assert got["losses"] == losses
    fields = (".w", ".b", ".mult", ".shift", ".w_scale")
    want = {k: v for k, v in ref.arrays().items() if k.endswith(fields)}
    diff = differences(want, dump)
    assert not diff, diff
    start = s.m.data(s.m.layers[zo[0]].weight).reshape(-1)
    assert (dump[f"L{zo[0]}.w"] != start).any()  # the steps moved the weights


@pytest.mark.parametrize("queries,mode", [(None, "mixed"), (5, "int8")])
def test_activity_perturbation_equals_the_reference(setups: dict[str, Setup], tmp_path: Path,
                                                     queries: int | None, mode: str) -> None:
    """ZO(perturb="outputs"): every loss and the trained layers' state equal ZOOutRef's."""
    s = setups["cnn"]
    order = list(range(24))
    labels = [int(v) for v in labels_of(s)]
    cfg = {**base(s), "labels": labels, "kind": "zo", "train": "last:2", "perturb": "outputs", "eps": 3,
           "seed": 7, "batch": 6, "order": order, "opt": {"lr": 0.05, "momentum": 0.9}, "mode": mode,
           "out": str(tmp_path / "zo.dump"), "queries": queries}
    got = run(tmp_path, f"zo-out-{queries}", cfg, heap="1m")
    from support.training_cases import read_dump

    dump = read_dump(tmp_path / "zo.dump")
    weighted = [j for j, ly in enumerate(s.m.layers) if ly.weight is not None]
    ref = ar.ZOOutRef(s.m, weighted[-2:], eps=3, seed=7, opt=tr.SGD(lr=0.05, momentum=0.9), mode=mode,
                      queries=queries)
    losses = []
    for st in range(0, len(order), 6):
        idx = order[st:st + 6]
        losses.append(list(ref.step([s.xs[i] for i in idx], [labels[i] for i in idx])))
    assert got["losses"] == losses
    fields = (".w", ".b", ".mult", ".shift", ".w_scale")
    want = {k: v for k, v in ref.arrays().items() if k.endswith(fields)}
    diff = differences(want, dump)
    assert not diff, diff
    for j in weighted[-2:]:  # both layers learnt
        assert (dump[f"L{j}.w"] != s.m.data(s.m.layers[j].weight).reshape(-1)).any()
    assert "perturb='outputs'" in got["repr"]
