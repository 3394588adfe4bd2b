"""Resuming is exact: fit(a) then fit(n - a) equals fit(n), on one trainer and through a
checkpoint (save, load, a new Trainer with seed None), for every split, shuffled, with
schedules and several optimisers and batch sizes; the shuffle order is a function of the seed
and the epoch only, the host reference's (train_ref) the same; the epoch count travels in the
checkpoint's trainer record, and a record older than it still loads (as epoch 0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from microtrain_tools import mtm
from microtrain_tools.reference.train_ref import shuffle_order, shuffle_state
from support.harness import ensure_natmod
from support.kernel_harness import run_micropython
from support.reliability import run_mp
from support.reliability.train_files import files


@pytest.fixture(scope="module", autouse=True)
def _natmod() -> None:
    ensure_natmod()


def test_every_split_of_a_fit_is_the_whole_fit(tmp_path: Path) -> None:
    model, data = files(24)
    p = run_mp("rel_resume.py", [str(model), str(data), str(tmp_path), "3"], timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    splits = [ln.split() for ln in p.stdout.splitlines() if ln.startswith("SPLIT ")]
    assert len(splits) >= 20, p.stdout
    assert all(s[2] == "exact" for s in splits), p.stdout


ORDERS = """
import sys
from array import array
import microtrain as mt
m = mt.load(sys.argv[1])
n = int(sys.argv[2])
for seed in (1, 9):
    tr = mt.Trainer(m, train="last:1", seed=seed)
    for ep in (0, 1, 2, 7):
        order = array("H", range(n))
        tr._shuffle(order, ep)
        print("ORDER", seed, ep, " ".join(str(i) for i in order))
"""


def test_the_order_is_the_reference_one_for_seed_and_epoch() -> None:
    model, _ = files(24)
    p = run_micropython(ORDERS, [str(model), "37"], heapsize="16M")
    assert p.returncode == 0, p.stdout + p.stderr
    got = {(int(a), int(b)): [int(v) for v in rest.split()] for _, a, b, rest in
           (ln.split(" ", 3) for ln in p.stdout.splitlines() if ln.startswith("ORDER "))}
    assert len(got) == 8
    for (seed, ep), order in got.items():
        assert order == shuffle_order(37, 1, seed, first=ep)[0], (seed, ep)
    assert got[(1, 0)] != got[(1, 1)] and got[(1, 0)] != got[(9, 0)]  # epochs and seeds differ


RESUME = """
import sys
import microtrain as mt
from microtrain.data import FileDataset
m = mt.load(sys.argv[1])
tr = mt.Trainer(m, train="last:2", seed=None)
print("START", tr.epoch, tr.shuffle_state)
"""


def test_the_epoch_travels_in_the_checkpoint_and_old_records_load(tmp_path: Path) -> None:
    model, data = files(24)
    ck = tmp_path / "ck.mtm"
    fit = ("import sys\nimport microtrain as mt\nfrom microtrain.data import FileDataset\n"
           "m = mt.load(sys.argv[1])\ntr = mt.Trainer(m, train='last:2', seed=4)\n"
           "tr.fit(FileDataset(sys.argv[2]), 2, verbose=False)\ntr.save(sys.argv[3])\n")
    p = run_micropython(fit, [str(model), str(data), str(ck)], heapsize="16M")
    assert p.returncode == 0, p.stdout + p.stderr
    m = mtm.read(ck.read_bytes())
    assert m.trainer_epoch == 2 and m.trainer_rng == shuffle_state(4)
    p = run_micropython(RESUME, [str(ck)], heapsize="16M")
    assert p.returncode == 0 and f"START 2 {shuffle_state(4)}" in p.stdout, p.stdout + p.stderr
    # a checkpoint written before the epoch count: its generator state is the seed state, epoch 0
    m.trainer_epoch = None
    old = tmp_path / "old.mtm"
    old.write_bytes(mtm.write(m))
    assert b"trainer:rng=%08x\0" % shuffle_state(4) in old.read_bytes()
    p = run_micropython(RESUME, [str(old)], heapsize="16M")
    assert p.returncode == 0 and f"START 0 {shuffle_state(4)}" in p.stdout, p.stdout + p.stderr
