"""The Trainer's memory check (python_lib/microtrain/memplan.py, docs/memory.md), in the real micropython
binary, on an MLP of 100 k weights: with the free heap between what training every layer needs
and what training the last one needs (a ballast takes the rest), ``Trainer(train="all")`` raises
a MemoryError that states the bytes needed and free and names a smaller set of layers, the model
is left as it was, and a Trainer on the named layers is then created and trains. At batch 2, with
the free heap between what the momentum alone needs (no gradient sums) and the sums, the error
names sums=False or batch=1, and batch 2 with sums=False (the batch folded into the momentum)
then trains.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from microtrain_tools import convert as cv
from microtrain_tools import mtm
from support.harness import run_micropython

SCRIPT = """
import gc
import microtrain as mt
from microtrain import memplan
m = mt.load(%r)
opt = mt.SGD(lr=0.01, momentum=0.9)
idx = m.select("all")
tot = lambda items: sum(n for _, n in items)
# batch 1, SGD momentum: the gradients go into the momentum (fold=True: no gradient sums)
n_all = tot(memplan.need(m, idx, "mixed", 1, None, True))
n_one = tot(memplan.need(m, idx[-1:], "mixed", 1, None, True))
gc.collect()
# one block of ballast: the free heap's holes are left as they are (a heap in pieces is
# test_small_heap's subject; here the count and what it names are)
ballast = bytearray(gc.mem_free() - (n_all + n_one) // 2)
try:
    mt.Trainer(m, train="all", mode="mixed", optimizer=opt)
    print("NO-ERROR")
except MemoryError as e:
    msg = str(e)
    print("MSG", msg)
    print("UNTOUCHED", int(not any(ly.trained for ly in m.layers)))
    names = eval(msg.split("would fit: train=")[1].split(" (")[0])
    t = mt.Trainer(m, train=names, mode="mixed", optimizer=opt)
    x = bytearray(m.input.numel)
    t.step(x, 0)
    print("FIT", len(names), len(idx), len(t.layers))
"""


def test_trainer_says_what_fits(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                        nn.Linear(128, 10)).eval()
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    path = tmp_path / "mlp.mtm"
    path.write_bytes(mtm.write(cv.convert(net, x, progress=False)))
    p = run_micropython(SCRIPT % str(path), heapsize="4m")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "NO-ERROR" not in p.stdout
    msg = p.stdout.split("MSG ", 1)[1].splitlines()[0]
    assert "needs about" in msg and "of heap is free" in msg and "optimiser state" in msg
    assert "gradients" not in msg  # none at batch 1 with momentum
    assert "UNTOUCHED 1" in p.stdout
    fit = p.stdout.split("FIT ", 1)[1].split()
    n_fit, n_all, n_made = (int(v) for v in fit)
    assert 1 <= n_fit < n_all and n_made == n_fit


BATCH = """
import gc
import microtrain as mt
from microtrain import memplan
m = mt.load(%r)
opt = mt.SGD(lr=0.01, momentum=0.9)
idx = m.select("all")
tot = lambda items: sum(n for _, n in items)
n_sums = tot(memplan.need(m, idx, "int8", 1, None))
n_fold = tot(memplan.need(m, idx, "int8", 1, None, True))
gc.collect()
ballast = []
while gc.mem_free() - 4200 > (n_sums + n_fold) // 2:
    ballast.append(bytearray(4096))
try:
    mt.Trainer(m, train="all", mode="int8", optimizer=opt, batch=2)
    print("NO-ERROR")
except MemoryError as e:
    print("MSG", e)
t = mt.Trainer(m, train="all", mode="int8", optimizer=opt, batch=2, sums=False)  # the batch into the momentum
t.step(bytearray(m.input.numel), 0)
t.step(bytearray(m.input.numel), 1)
print("FIT", t.steps, m.train_steps)
"""


def test_trainer_names_sums_false_when_only_the_sums_do_not_fit(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).eval()
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    path = tmp_path / "mlp.mtm"
    path.write_bytes(mtm.write(cv.convert(net, x, progress=False)))
    p = run_micropython(BATCH % str(path), heapsize="4m")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "NO-ERROR" not in p.stdout
    msg = p.stdout.split("MSG ", 1)[1].splitlines()[0]
    assert "gradients" in msg and "would fit:" in msg and "sums=False or batch=1" in msg, msg
    assert "FIT 2 1" in p.stdout, p.stdout


HALF = """
import gc
import microtrain as mt
from microtrain import memplan
m = mt.load(%r)
idx = m.select("all")
tot = lambda items: sum(n for _, n in items)
n_f32 = tot(memplan.need(m, idx, "int8", 2, None))
n_bf16 = tot(memplan.need(m, idx, "int8", 2, None, False, False, True))
print("NEED", n_f32, n_bf16)
gc.collect()
ballast = []
while gc.mem_free() - 4200 > (n_f32 + n_bf16) // 2:
    ballast.append(bytearray(4096))
try:
    mt.Trainer(m, train="all", mode="int8", optimizer=mt.Adam(lr=0.001))
    print("NO-ERROR")
except MemoryError as e:
    print("MSG", e)
t = mt.Trainer(m, train="all", mode="int8", optimizer=mt.Adam(lr=0.001, state="bf16"))
t.step(bytearray(m.input.numel), 0)
print("FIT", t.steps, m.train_steps, len(t.opt.state(t.layers[0])[0]), len(t.layers[0].w))
"""


def test_trainer_proposes_the_16_bit_state_when_it_fits(tmp_path: Path) -> None:
    """Adam (two float32 moments a value, the gradient sums kept) on a heap between what the
    bfloat16 state needs and what the float32 state needs: the error proposes state='bf16' with
    the planner's count (2 B a state value), and Adam(state='bf16') then trains there."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).eval()
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    path = tmp_path / "mlp.mtm"
    path.write_bytes(mtm.write(cv.convert(net, x, progress=False)))
    p = run_micropython(HALF % str(path), heapsize="4m")
    assert p.returncode == 0, p.stdout + p.stderr
    n_f32, n_bf16 = (int(v) for v in p.stdout.split("NEED ", 1)[1].split()[:2])
    n_params = 256 * 256 + 256 + 256 * 10 + 10
    # two moments, 2 B less a value each (up to the heap's block rounding of each of the 8 arrays)
    assert abs(n_f32 - n_bf16 - 2 * 2 * n_params) <= 8 * 16, (n_f32, n_bf16)
    assert "NO-ERROR" not in p.stdout
    msg = p.stdout.split("MSG ", 1)[1].splitlines()[0]
    assert f"state='bf16' (a 16-bit optimiser state: 2 B a value, with the gradient sums) " \
           f"({n_bf16 / 1024:.1f} KB)" in msg, msg
    fit = [int(v) for v in p.stdout.split("FIT ", 1)[1].split()]
    assert fit[:2] == [1, 1] and fit[2] == 2 * fit[3], fit  # one step; 2 bytes a state value
