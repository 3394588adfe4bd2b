"""Backward's int32 grad-input scratch (python_lib/microtrain/plan.py ``scratch_plan``,
docs/memory.md), in the real micropython binary.

Pools whose windows do not overlap take no scratch (``acc=None``), and the scratch of the
conv / linear layers lives in the int8 error buffer of an activation that is idle while they
run, when one is large enough. On a small CNN trained from its first conv (conv, Hardswish,
disjoint 2x2 max pool, conv, linear) the scratch is the first conv output's error buffer
(written last, by the Hardswish's backward; an activation read only by a disjoint pool after a
conv takes its error in place instead, so it hosts nothing): training must still equal the
numpy reference bit for bit, and the pure-Python kernels (which cannot retype a buffer, so
allocate the scratch) must agree. ``microtrain info`` and the Trainer's memory check count the
scratch the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from microtrain_tools import info
from microtrain_tools.reference import train_ref as tr
from support import model_suite as ms
from support.harness import run_micropython
from support.training_cases import SGDM, Setup, labels_of, same_as_reference


class HostNet(nn.Module):
    """conv (8x8x16) -> Hardswish (a LUT: not fused, so the conv's output has an idle error
    buffer of 1024 B) -> 2x2 max pool -> conv (4x4x16 input: the 1024-byte scratch) -> linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.act = nn.Hardswish()
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(self.act(self.conv1(x)), 2)
        return self.fc(torch.flatten(torch.relu(self.conv2(x)), 1))


@pytest.fixture(scope="module")
def hostnet(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    return ms.build("host", HostNet, tmp_path_factory.mktemp("host"))[0]


PLAN = """
import microtrain as mt
from microtrain import kern, memplan, plan
m = mt.load(%r)
idx = m.select(%r)
need = dict(memplan.need(m, idx, "mixed", 1, None))
t = mt.Trainer(m, train=%r, mode="mixed", optimizer=mt.SGD(lr=0.01, momentum=0.9))
bw = m.backward_plan
need_l, n, host = plan.scratch_plan(m, bw.first, bw.region, bw.inplace, kern.NATIVE)
print("PLAN", n, host, [ly.index for ly in need_l])
if host is not None:
    v = bw.acc_views[need_l[0].index]
    v[0] = 0x01020304  # the scratch writes into the host's int8 error buffer
    print("ALIAS", list(bw.ebuf[host][:4]))
print("NEED", need["backward buffers"])
"""


def _plan(s: Setup, train: str, pure: bool, mp: pytest.MonkeyPatch) -> dict[str, str]:
    with mp.context() as c:
        if pure:
            c.setenv("MICROTRAIN_PURE", "1")
        p = run_micropython(PLAN % (str(s.path), train, train))
    assert p.returncode == 0, p.stdout + p.stderr
    return {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in p.stdout.splitlines() if " " in ln}


def test_scratch_in_an_idle_error_buffer(hostnet: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    s = hostnet
    native, pure = _plan(s, "last:3", False, monkeypatch), _plan(s, "last:3", True, monkeypatch)
    n, host, users = native["PLAN"].split(" ", 2)
    assert host != "None", native
    assert native["ALIAS"] == "[4, 3, 2, 1]", native  # little-endian int32 over the int8 buffer
    assert pure["PLAN"] == f"{n} None {users}", pure  # the pure-Python kernels allocate it
    # the memory check counts it once, in the pure run only: 16 B header + 16-byte blocks
    assert int(pure["NEED"]) - int(native["NEED"]) == 16 + ((4 * int(n) + 15) & ~15)
    assert info.train_ram(s.m, 3)["scratch"] == 0
    first = info.weighted_layers(s.m)[-3]
    host_t = int(host)
    assert s.m.layers[first].output == host_t  # the conv's output, read only by the Hardswish


def test_training_with_the_scratch_in_place_equals_reference(hostnet: Setup, tmp_path: Path) -> None:
    s = hostnet
    kw: dict[str, Any] = dict(order=range(8), labels=labels_of(s), train="last:3", mode="mixed", opt=SGDM,
                              batch=2)
    dev, _ = same_as_reference(s, tmp_path, "native", **kw)
    j = tr.select(s.m, "last:3")[0]
    assert any(dev[f"L{j}.w"] != s.m.data(s.m.layers[j].weight).reshape(-1))


class RedoNet(nn.Module):
    """conv+ReLU (8x8x16, 1024 B) -> 2x2 max pool -> conv+ReLU (4x4x16 input: a 1024-byte
    scratch) -> linear: no idle error buffer holds the scratch, so the first conv's output does,
    and the conv runs again before the pool's backward (plan.recompute_host); the pool's output
    takes its error over itself after conv2's weight gradient read it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        return self.fc(torch.flatten(torch.relu(self.conv2(x)), 1))


@pytest.fixture(scope="module")
def redonet(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    return ms.build("redo", RedoNet, tmp_path_factory.mktemp("redo"))[0]


REDO = """
import microtrain as mt
m = mt.load(%r)
t = mt.Trainer(m, train="all", mode="mixed", optimizer=mt.SGD(lr=0.01, momentum=0.9), batch=2)
print("DEFAULT", m.backward_plan.redo)  # off unless asked: it costs a forward of that layer per sample
t = mt.Trainer(m, train="all", mode="mixed", optimizer=mt.SGD(lr=0.01, momentum=0.9), batch=2, recompute=True)
bw = m.backward_plan
print("REDO", bw.redo, sorted(bw.inplace))
pool, conv = bw.redo
t_out = m.layers[conv].output
acc = bw.acc_views[max(bw.acc_views)]
acc[0] = 0x01020304  # the scratch is the conv output's buffer
print("ALIAS", list(bw.bufs[t_out][:4]))
"""


def test_scratch_in_a_recomputed_activation(redonet: Setup, tmp_path: Path) -> None:
    s = redonet
    p = run_micropython(REDO % str(s.path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "DEFAULT None" in p.stdout, p.stdout
    assert "REDO (1, 0)" in p.stdout and "ALIAS [4, 3, 2, 1]" in p.stdout, p.stdout
    # info counts no scratch: it is hosted
    r = info.train_ram(s.m, 3, momentum=True, mode="mixed", batch=2, recompute=True)
    assert r["scratch"] == 0 and r["hosted"] >= 1024, r
    assert info.train_ram(s.m, 3, momentum=True, mode="mixed", batch=2)["scratch"] == 1024
    # the same bits as the reference, with sums (batch 2) and stepping during backward (batch 1)
    for tag, opt, batch in (("sums", SGDM, 2), ("now", {"kind": "sgd", "lr": 0.05}, 1)):
        kw: dict[str, Any] = dict(order=range(8), labels=labels_of(s), train="all", mode="mixed", opt=opt,
                                  batch=batch)
        same_as_reference(s, tmp_path, tag, {"recompute": True}, **kw)



class ThroughNet(nn.Module):
    """The transfer CNN's shape, small: conv+ReLU (8x8x8, 512 B) -> 2x2 max pool -> conv+ReLU
    (4x4x16) -> 2x2 max pool -> linear+ReLU -> linear. With recompute the first conv's output
    is made again before its pool's backward, so it need not be kept: the plan is placed
    through backward (plan.redo_plan), the later activations and each layer's scratch in its
    bytes where their lifetimes allow, in a smaller arena than with it kept."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc1 = nn.Linear(16 * 2 * 2, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))


@pytest.fixture(scope="module")
def throughnet(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    return ms.build("through", ThroughNet, tmp_path_factory.mktemp("through"))[0]


THROUGH = """
import microtrain as mt
m = mt.load(%r)
t = mt.Trainer(m, train="all", mode="mixed", optimizer=mt.SGD(lr=0.01, momentum=0.9), batch=2, recompute=True)
print("REDO", m.backward_plan.redo)
print("ARENA", m.ram(0))
t = mt.Trainer(m, train="all", mode="mixed", optimizer=mt.SGD(lr=0.01, momentum=0.9), batch=2)
print("AGAIN", m.backward_plan.redo, m.ram(0))  # a trainer without recompute: the plan kept whole again
"""


def test_plan_placed_through_backward(throughnet: Setup, tmp_path: Path) -> None:
    s = throughnet
    kept = info.train_ram(s.m, 4, momentum=True, mode="mixed", batch=2)
    through = info.train_ram(s.m, 4, momentum=True, mode="mixed", batch=2, recompute=True)
    assert through["scratch"] == 0 and through["forward"] < kept["forward"], (kept, through)
    p = run_micropython(THROUGH % str(s.path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "REDO (1, 0)" in p.stdout, p.stdout
    assert int(p.stdout.split("ARENA ")[1].split()[0]) == through["forward"], (p.stdout, through)
    assert f"AGAIN None {kept['forward']}" in p.stdout, (p.stdout, kept)
    # the same bits as the reference: gradient sums, and the batch folded into a float32 and a
    # bfloat16 momentum
    bf16 = {**SGDM, "state": "bf16"}
    for tag, opt, sums in (("sums", SGDM, None), ("fold", SGDM, False), ("fold16", bf16, False)):
        kw: dict[str, Any] = dict(order=range(8), labels=labels_of(s), train="all", mode="mixed", opt=opt,
                                  batch=2, sums=sums)
        same_as_reference(s, tmp_path, tag, {"recompute": True}, **kw)
