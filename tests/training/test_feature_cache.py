"""The frozen-prefix feature cache of Trainer.fit (python_lib/microtrain/cache.py).

Training with the cache (in RAM or in a file) must give the same weights, optimiser state
and losses bit for bit as training without it, and both must equal the numpy training
reference (train_ref.RefTrainer.fit, which has no cache). Runs in the real micropython (the
choice between RAM and a file in a 256 KB heap). The models: the training tests' three (a
boundary of one tensor, in two of them read by two layers) and one whose boundary is two
tensors (a skip connection across the first trained layer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from microtrain_tools import convert as cv
from microtrain_tools import mtm
from microtrain_tools.reference import train_ref as tr
from support.harness import run_micropython
from support.training_cases import (
    ADAM,
    DYN,
    RUNNER,
    SGDM,
    STATIC,
    Setup,
    differences,
    labels_of,
    read_dump,
    ref_opt,
    ref_sparse,
    state_of,
)

HEAP = "256k"
# the bit-exactness runs: their numerics do not depend on the heap, and the package compiled from
# source into a 64-bit 256 KB heap is at the edge of fragmentation (qstr pools amid the free
# heap), which moves with any change of the sources (the heap figures: make mem-mcu, train-eval)
RUN_HEAP = "512k"
Config = tuple[str, Any, str, dict[str, Any], dict[str, Any] | None, int]

# (model, train, mode, optimizer, sparse, batch): the boundary of `res` / `misc` with
# conv2 trained is a tensor read by two layers (conv2 and the residual add)
CONFIGS: list[Config] = [
    ("cnn", "last:2", "mixed", SGDM, None, 1),
    ("res", ["conv2", "fc"], "int8", SGDM, DYN, 4),
    ("misc", ["conv2", "fc"], "float32", ADAM, None, 3),
]


def fit_run(s: Setup, tmp: Path, tag: str, c: Config,
            order: list[int], cache: Any, epochs: int = 3) -> tuple[dict[str, Any], str]:
    """Trainer.fit in micropython (256 KB heap) with fit(cache=cache); (dump, stdout)."""
    _, train, mode, opt, sparse, batch = c
    cfg = {"model": str(s.path), "samples": str(s.samples), "numel": s.numel,
           "labels": [int(v) for v in labels_of(s)], "order": order, "train": train, "mode": mode, "opt": opt,
           "sparse": sparse, "batch": batch, "out": str(tmp / f"{tag}.dump"),
           "fit": {"epochs": epochs, "seed": 11, "cache": cache, "verbose": True}}
    cpath = tmp / f"{tag}.json"
    cpath.write_text(json.dumps(cfg))
    p = run_micropython(RUNNER, [str(cpath)], heapsize=RUN_HEAP, timeout=300, cwd=tmp)
    assert p.returncode == 0 and "TRAIN-RUNNER-DONE" in p.stdout, f"{tag}: {(p.stdout + p.stderr)[-3000:]}"
    return read_dump(tmp / f"{tag}.dump"), p.stdout


@pytest.mark.parametrize("c", CONFIGS, ids=lambda c: f"{c[0]}-{c[2]}")
def test_cache_in_ram_and_in_a_file_train_bit_exactly_as_without(setups: dict[str, Setup], tmp_path: Path,
                                                                 c: Any) -> None:
    s = setups[c[0]]
    order = list(range(60))
    off, off_out = fit_run(s, tmp_path, "off", c, order, None)
    ram, ram_out = fit_run(s, tmp_path, "ram", c, order, "ram")
    path = tmp_path / "features.bin"
    fil, fil_out = fit_run(s, tmp_path, "file", c, order, str(path))
    assert "feature cache" not in off_out
    assert "feature cache: RAM, 60 samples" in ram_out
    assert f"feature cache: {path}, 60 samples" in fil_out
    assert not path.exists(), "the cache file is removed after fit"
    for name, got in (("ram", ram), ("file", fil)):
        diffs = differences(off, got, ("no cache", name))
        assert not diffs, "\n".join(diffs)
    # and the independent reference (no cache) agrees with all three
    _, train, mode, opt, sparse, batch = c
    ref = tr.RefTrainer(s.m, train, mode, ref_opt(opt), ref_sparse(sparse), batch)
    labels = labels_of(s)
    means = ref.fit([s.xs[i] for i in order], [int(labels[i]) for i in order], epochs=3, seed=11)
    assert off["loss"].tolist() == means
    diffs = differences(ref.arrays(), state_of(off))
    assert not diffs, "\n".join(diffs)


_AUTO = """
import gc, sys
import microtrain as mt
from microtrain import cache
m = mt.load(sys.argv[1])
numel = m.input.numel
with open(sys.argv[2], "rb") as f:
    data = memoryview(f.read())
n0 = len(data) // numel
t = mt.Trainer(m, train="last:2", mode="mixed", optimizer=mt.SGD(lr=0.01, momentum=0.9))
# the boundary tensor: what forward(x, first) leaves in the plan for layers >= first
b = cache.boundary(m, t.first)
print("boundary", b, cache.record_size(m, t.first))
class Samples:  # n samples cycling through the file's, made on access (no RAM per sample)
    def __init__(self, n):
        self.n = n
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        j = i % n0
        return data[j * numel:(j + 1) * numel], i % 10
for n in (int(sys.argv[3]), int(sys.argv[4])):
    samples = Samples(n)
    fc = cache.make(m, t.first, samples, 2, "auto")
    kind = "none" if fc is None else ("ram" if fc.path is None else "file")
    # every record holds what a forward leaves in the boundary buffers
    ok = fc is not None
    for i in range(0, n, 97):
        m.forward(samples[i][0], t.first)
        want = bytes(m.activation(b[0], t.first))
        m.activation(b[0], t.first)[:] = bytes(len(want))
        ok = ok and fc.load(i) == i % 10 and bytes(m.activation(b[0], t.first)) == want
    fc.close()
    print("auto", n, kind, ok)
print("one epoch", cache.make(m, t.first, samples, 1, "auto"))
"""


def test_auto_takes_ram_when_it_fits_the_budget_else_a_file(setups: dict[str, Setup], tmp_path: Path) -> None:
    """In a 256 KB heap: 60 samples of the cnn's 65-byte records (2 x 2 x 16 + the label) go to RAM,
    3,000 (195 KB: more than half the free heap) to the file; records read back what forward
    computes; no cache for a single epoch."""
    s = setups["cnn"]
    script = tmp_path / "auto.py"
    script.write_text(_AUTO)
    p = run_micropython(script, [str(s.path), str(s.samples), "60", "3000"], heapsize=HEAP, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    first = next(j for j, ly in enumerate(s.m.layers) if ly.name == "fc1")
    inp = s.m.layers[first].inputs[0]
    numel = 1
    for d in s.m.tensors[inp].shape:
        numel *= d
    assert lines[0] == f"boundary [{inp}] {numel + 1}"
    assert lines[1:] == ["auto 60 ram True", "auto 3000 file True", "one epoch None"]
    assert not (tmp_path / "mt_cache.bin").exists()


class Skip2(nn.Module):
    """conv1 -> a, conv2 -> b, conv3(b) -> c, relu(a + c), pool, fc: with conv3 the first trained
    layer, two tensors cross the boundary (b, read by conv3, and a, read by the add)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv3 = nn.Conv2d(8, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.conv1(x))
        c = self.conv3(torch.relu(self.conv2(a)))
        return self.fc(self.pool(torch.relu(a + c)).flatten(1))


def test_a_boundary_of_two_tensors(tmp_path: Path) -> None:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images[:300] / 16.0, dtype=torch.float32)[:, None]
    torch.manual_seed(3)
    m = cv.convert(Skip2().eval(), x[:200], progress=False)
    path = tmp_path / "skip2.mtm"
    mtm.save(m, path)
    m = mtm.load(path)
    first = [ly.name for ly in m.layers].index("conv3")
    made = {ly.output for ly in m.layers[first:]}
    crossing = {t for ly in m.layers[first:] for t in ly.inputs if t not in made}
    assert len(crossing) == 2, [(ly.name, ly.inputs, ly.output) for ly in m.layers]
    xs = cv.quantize_input(m, x[200:260])
    samples = tmp_path / "skip2-train.bin"
    xs.tofile(samples)
    ys = np.asarray(d.target[200:260])
    s = Setup("skip2", path, m, xs, ys, xs[:0], ys[:0], samples, samples)
    c: Config = ("skip2", ["conv3", "fc"], "int8", SGDM, STATIC, 2)
    order = list(range(20))  # 1,025-byte records: 20 of them fit next to the training in 256 KB
    off, _ = fit_run(s, tmp_path, "off", c, order, None)
    ram, ram_out = fit_run(s, tmp_path, "ram", c, order, "ram")
    fil, _ = fit_run(s, tmp_path, "file", c, order, str(tmp_path / "f.bin"))
    rec = 1 + sum(int(np.prod(m.tensors[t].shape)) for t in crossing)
    assert f"feature cache: RAM, 20 samples x {rec} bytes" in ram_out
    for name, got in (("ram", ram), ("file", fil)):
        diffs = differences(off, got, ("no cache", name))
        assert not diffs, "\n".join(diffs)
    ref = tr.RefTrainer(m, c[1], c[2], ref_opt(SGDM), ref_sparse(STATIC), c[5])
    labels = labels_of(s)
    assert off["loss"].tolist() == ref.fit([xs[i] for i in order], [int(labels[i]) for i in order], epochs=3,
                                           seed=11)
    diffs = differences(ref.arrays(), state_of(off))
    assert not diffs, "\n".join(diffs)
