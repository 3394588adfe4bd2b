"""Weights in place (docs/memory.md): ``mt.load()`` of a bytes-like object (frozen bytes, a view over
flash) uses the buffer where it lies, in the real micropython binary with the natmod.

- training a model loaded from bytes / bytearray / memoryview gives the same losses and the same
  trained state, bit for bit, as loading it from its path;
- every frozen layer's int8 weights, int32 biases / multipliers and float32 weight scales are
  views of the caller's buffer (a byte changed in the buffer shows in the layer), while the
  trained layers' parameters are the Trainer's own copies (a change does not show);
- loading from bytes allocates far less than the weights (the model objects only), loading from
  the path at least the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn as nn

from microtrain_tools import convert as cv
from microtrain_tools import mtm
from support.harness import run_micropython
from support.training_cases import (
    ADAM,
    DYN,
    N_STEPS,
    SGDM,
    STATIC,
    Setup,
    device,
    labels_of,
)

CASES: list[tuple[str, str, str, dict[str, Any], dict[str, Any] | None, int, str]] = [
    ("res", "last:2", "int8", SGDM, DYN, 4, "bytes"),
    ("cnn", "all", "mixed", ADAM, STATIC, 3, "bytearray"),
    ("res", "all", "float32", ADAM, None, 3, "memoryview"),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[6]}" for c in CASES])
def test_training_from_bytes_equals_training_from_path(setups: dict[str, Setup], tmp_path: Path,
                                                       case: tuple[Any, ...]) -> None:
    name, train, mode, opt, sparse, batch, load = case
    s = setups[name]
    kw: dict[str, Any] = dict(order=range(N_STEPS), labels=labels_of(s), train=train, mode=mode, opt=opt,
                              sparse=sparse, batch=batch)
    want = device(s, tmp_path, "path", **kw)
    got = device(s, tmp_path, load, load=load, **kw)
    assert sorted(got) == sorted(want)
    for k in want:
        assert np.array_equal(got[k], want[k]), f"{k} differs between load from {load} and from the path"


ALIAS = """
import microtrain as mt
with open(%r, "rb") as f:
    buf = bytearray(f.read())
m = mt.load(buf)
tr = mt.Trainer(m, train="last:1", mode="int8")
for ly in m.layers:
    if ly.w is None:
        continue
    # no layer's constants have a Tensor object (tensor(i) reads one again): the layer holds them
    w_t, b_t, m_t, _ = ly.tensor_ids()
    print("DROPPED", ly.index, int(m.tensors[w_t] is None), int(ly.trained))
    for name, ti in (("w", w_t), ("b", b_t), ("mult", m_t), ("w_scale", m.tensor(w_t).qscales)):
        off = m.tensor(ti).data_off
        before = getattr(ly, name)[0]
        buf[off] ^= 1  # the lowest bit of the first value (little-endian)
        after = getattr(ly, name)[0]
        buf[off] ^= 1
        print("ALIAS", ly.index, name, int(after != before), int(ly.trained))
"""


def test_frozen_layers_are_views_of_the_buffer(setups: dict[str, Setup]) -> None:
    s = setups["res"]
    p = run_micropython(ALIAS % str(s.path))
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [line.split()[1:] for line in p.stdout.splitlines() if line.startswith("ALIAS")]
    weighted = [j for j, ly in enumerate(s.m.layers) if ly.op in mtm.WEIGHTED and ly.weight is not None]
    assert {int(r[0]) for r in rows} == set(weighted)
    assert len(rows) == 4 * len(weighted)
    last = weighted[-1]
    for idx, name, changed, trained in rows:
        assert trained == ("1" if int(idx) == last else "0")
        # frozen: the buffer's byte is the layer's value; trained: the Trainer's copy
        assert changed == ("0" if trained == "1" else "1"), f"layer {idx} {name}"
    dropped = [line.split()[1:] for line in p.stdout.splitlines() if line.startswith("DROPPED")]
    assert len(dropped) == len(weighted) and all(d[1] == "1" for d in dropped), dropped


MEM = """
import gc
import microtrain as mt
with open(%r, "rb") as f:
    data = f.read()
gc.collect()
a = gc.mem_alloc()
m = mt.load(data)
gc.collect()
b = gc.mem_alloc()
del m
gc.collect()
c = gc.mem_alloc()
m = mt.load(%r)
gc.collect()
print("MEM", b - a, gc.mem_alloc() - c)
"""


def test_load_from_bytes_does_not_copy_the_weights(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10)).eval()
    x = np.random.default_rng(0).standard_normal((64, 512)).astype(np.float32)
    path = tmp_path / "wide.mtm"
    path.write_bytes(mtm.write(cv.convert(net, x, progress=False)))
    params = 512 * 256 + 256 * 10
    p = run_micropython(MEM % (str(path), str(path)), heapsize="4m")
    assert p.returncode == 0, p.stdout + p.stderr
    from_bytes, from_path = (int(v) for v in p.stdout.split("MEM")[1].split())
    assert from_path >= path.stat().st_size  # the file is read into the heap
    # the model objects only (64-bit: ~8 KB here), not the 134 KB of int8 weights
    assert from_bytes < params // 10, f"load from bytes allocated {from_bytes} B for {params} weights"
