"""Checkpoints that always load: save() refuses what load()
would refuse and keeps the previous file, a full file system leaves the previous file and
no .tmp, and the trainer record (fit's shuffle generator) round-trips through the host
tools."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from microtrain_tools import mtm
from microtrain_tools.to_torch import to_state_dict
from support.digits_model import SmallCnn
from support.harness import ensure_natmod
from support.kernel_harness import run_micropython
from support.reliability import run_mp
from support.reliability.train_files import files


@pytest.fixture(scope="module", autouse=True)
def _natmod() -> None:
    ensure_natmod()


@pytest.mark.parametrize("fs", ["lfs2", "fat"])
def test_full_file_system_keeps_the_old_checkpoint(fs: str) -> None:
    model, _ = files(24)
    p = run_mp("rel_fs.py", [str(model), fs], timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    lines = dict(ln.split(" ", 1) for ln in p.stdout.splitlines())
    assert "FULL" in lines, p.stdout  # the second save raised OSError
    assert lines["INTACT"] == "True" and lines["TMP"] == "False" and lines["RESAVED"] == "True", p.stdout


REFUSE = """
import os, sys
import microtrain as mt
from microtrain import optim
path = sys.argv[1]
m = mt.load(sys.argv[2])
tr = mt.Trainer(m, train="all", mode="float32", optimizer=optim.SGD(lr=0.01, momentum=0.9))
x = bytes(m.input.numel)
tr.step(x, 1)
tr.save(path)
good = open(path, "rb").read()
ly = tr.layers[-1]
def put(arr, v):
    old = arr[0]
    arr[0] = v
    def undo():
        arr[0] = old
    return undo
def bad_scale(v):
    return lambda: put(ly.w_scale, v)
def bad_state(arr):
    return lambda: put(arr, float("nan"))
cases = [("scale_inf", bad_scale(float("inf"))), ("scale_big", bad_scale(3.4e38)),
         ("scale_2_41", bad_scale(2.0 ** 41)), ("scale_tiny", bad_scale(1e-20)),
         ("master_nan", bad_state(ly.master_w)), ("momentum_nan", bad_state(tr.opt.state(ly)[0]))]
for name, make in cases:
    undo = make()
    try:
        tr.save(path)
        print(name, "SAVED")
    except ValueError as e:
        print(name, "REFUSED", open(path, "rb").read() == good, "ck.mtm.tmp" in os.listdir(sys.argv[3]), e)
    undo()
tr.save(path)
print("after", mt.load(path).train_steps)
"""


def test_save_refuses_a_checkpoint_load_would_refuse(tmp_path: Path) -> None:
    model, _ = files(24)
    ck = tmp_path / "ck.mtm"
    p = run_micropython(REFUSE, [str(ck), str(model), str(tmp_path)], heapsize="16M")
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout.splitlines()
    assert len(out) == 7, p.stdout
    for ln in out[:-1]:
        name, verdict, intact, tmp_left, *msg = ln.split(" ", 4)
        assert (verdict, intact, tmp_left) == ("REFUSED", "True", "False"), ln
        assert "previous checkpoint is kept" in msg[0] and "save: layer" in msg[0], ln
    assert out[-1] == "after 1"
    mtm.read(ck.read_bytes())  # the host reader accepts what save() wrote


FIT = """
import sys
import microtrain as mt
from microtrain import optim
from microtrain.data import FileDataset
m = mt.load(sys.argv[1])
tr = mt.Trainer(m, train="last:2", mode="mixed", optimizer=optim.SGD(lr=0.01, momentum=0.9), seed=9)
tr.fit(FileDataset(sys.argv[2]), 2, verbose=False)
tr.save(sys.argv[3])
print("RNG", tr.shuffle_state, tr.epoch)
m.save(sys.argv[4])
"""


def test_trainer_record_round_trips_and_old_files_still_load(tmp_path: Path) -> None:
    model, data = files(24)
    ck, plain = tmp_path / "ck.mtm", tmp_path / "plain.mtm"
    p = run_micropython(FIT, [str(model), str(data), str(ck), str(plain)], heapsize="16M")
    assert p.returncode == 0, p.stdout + p.stderr
    rng, ep = int(p.stdout.split()[1]), int(p.stdout.split()[2])
    b = ck.read_bytes()
    m = mtm.read(b)
    assert m.trainer_rng == rng and rng != 0 and m.trainer_epoch == ep == 2  # the seed state, epochs done
    assert mtm.write(m) == b  # the host writer keeps the record where the device put it
    s_off, s_len = int.from_bytes(b[36:40], "little"), int.from_bytes(b[40:44], "little")
    # the pool's last string
    assert b[s_off:s_off + s_len].endswith(b"\0trainer:rng=%08x%08x\0" % (rng, ep))
    # model.save (no trainer) has none; converted files have none; both load as before
    assert mtm.read(plain.read_bytes()).trainer_rng is None
    assert mtm.read(model.read_bytes()).trainer_rng is None
    # to-torch takes a checkpoint with the record
    sd, _ = to_state_dict(m, SmallCnn())
    assert all(np.all(np.isfinite(v.numpy())) for v in sd.values())
