"""Convs written over their input and a split conv (python_lib/microtrain/over.py), in the real
micropython binary, native and pure-Python kernels, on DS-CNN's shape in small: a conv, two
depthwise 3x3 + pointwise pairs, an average pool of one window over all of it and a linear,
training the last pointwise conv and the linear into an SGD momentum (sums=False), float32 and
bfloat16 state:

- the device equals train_ref bit for bit (losses, weights, scales, biases, masters, the state);
- its training plan writes the four convs of the pairs over their input and makes the trained
  pointwise conv's output a window of channels at a time (never whole: its pool's output and its
  gradient from the windows), in an arena smaller than the plan without them; `microtrain info`
  counts that arena. With the gradient sums (no windows for the update to take) no conv is split;
  nor without Trainer(recompute=True): the split makes the conv's output again in backward.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from microtrain_tools import convert as cv
from microtrain_tools import info, mtm
from support.harness import run_micropython
from support.torch_models import train_quick
from support.training_cases import SGDM, Setup, device, differences, reference, state_of


def _cbr(cin: int, cout: int, k: int, groups: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, k, 1, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]


class TinyDs(nn.Module):
    """8x8x1 -> conv 3x3 (16) -> (depthwise 3x3, pointwise 16) x 2 -> average pool 8x8 -> linear 10."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(*_cbr(1, 16, 3, 1), *_cbr(16, 16, 3, 16), *_cbr(16, 16, 1, 1),
                                      *_cbr(16, 16, 3, 16), *_cbr(16, 16, 1, 1), nn.AvgPool2d(8))
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    from sklearn.datasets import load_digits

    work = tmp_path_factory.mktemp("over")
    d = load_digits()
    x = torch.tensor(d.images / 16.0, dtype=torch.float32)[:, None]
    y = torch.tensor(d.target, dtype=torch.long)
    torch.manual_seed(2)
    net = train_quick(TinyDs(), x[:600], y[:600], epochs=2)
    path = work / "tiny.mtm"
    mtm.save(cv.convert(net, x[:256], progress=False), path)
    m = mtm.load(path)
    xs, xe = cv.quantize_input(m, x[1000:1100]), cv.quantize_input(m, x[1100:1200])
    s, e = work / "train.bin", work / "eval.bin"
    xs.tofile(s)
    xe.tofile(e)
    return Setup("tiny", path, m, xs, y[1000:1100].numpy(), xe, y[1100:1200].numpy(), s, e)


BF16 = {**SGDM, "state": "bf16"}


@pytest.mark.parametrize("opt,batch,pure",
                         [(BF16, 1, False), (SGDM, 1, False), (BF16, 3, False), (BF16, 1, True)],
                         ids=["bf16-b1", "f32-b1", "bf16-b3", "bf16-pure"])
def test_split_and_over_train_as_the_reference(tiny: Setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               opt: dict[str, Any], batch: int, pure: bool) -> None:
    if pure:
        monkeypatch.setenv("MICROTRAIN_PURE", "1")
    steps = 12 if pure else 24
    kw: dict[str, Any] = dict(order=range(steps), labels=tiny.ys, train="last:2", mode="mixed", opt=opt,
                              batch=batch, sums=False)
    dev = device(tiny, tmp_path, "over", recompute=True, **kw)  # (recompute: the split)
    ref = reference(tiny, **kw)
    assert dev["loss"].tolist() == ref.losses, "per-step losses differ"
    diffs = differences(ref.arrays(), state_of(dev))
    assert not diffs, "\n".join(diffs)
    assert any(k.endswith(".st0") for k in dev), "the state is compared"


PLAN = """
import sys
import microtrain as mt
from microtrain import plan
from microtrain.place import place
path, state, sums, redo = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
m = mt.load(path)
t = mt.Trainer(m, train="last:2", mode="mixed", optimizer=mt.SGD(lr=0.05, momentum=0.9, state=state),
               sums=sums, recompute=redo)
fz = m._fused.get(t.first) or {}
for name in ("over", "win"):
    print(name.upper(), ",".join(str(i) for i in sorted(fz)
                                 if i >= 0 and type(fz[i]) is tuple and fz[i][0].__name__ == name))
print("FIRST", t.first)
rg = set(ly.output for ly in m.layers[t.first:])  # the trained conv's output hosts it, but not split
ie = plan.inplace_errors(m, t.first, rg, True)
nd, n = plan.scratch_plan(m, t.first, rg, ie)[:2]
print("HOST", *(int(plan.recompute_host(m, t.first, ie, nd, n, True, s) is not None) for s in (-1, t.first)))
owners = []
for b in m.owners(t.first).values():
    if not any(b is o for o in owners):
        owners.append(b)
lu = {}
for ly in m.layers:
    for x in ly.inputs:
        lu[x] = ly.index
o = {}
place(m, None, o, lu, plan.kept(m, t.first), lambda n: [n], 0)  # (bwd 0: neither, over.py choose)
print("BYTES", sum(len(b) for b in owners), sum(b[0] for b in o.values()))
from microtrain import memplan  # the Trainer's memory check, without and with a sparse policy (no split)
m2 = mt.load(path)
idx = m2.select("last:2")
print("NEED", *(dict(memplan.need(m2, idx, "mixed", 1, p, True, redo, state == "bf16"))["backward buffers"]
                for p in (None, mt.DynamicSparse(0.1, 1.0))))
"""


@pytest.mark.parametrize("state,sums,redo", [("bf16", False, True), ("f32", False, True), ("f32", True, True),
                                             ("bf16", False, False), ("f32", False, False)])
def test_the_plan_splits_and_writes_over(tiny: Setup, tmp_path: Path, state: str, sums: bool,
                                         redo: bool) -> None:
    """The split only with recompute=True (it makes the conv's output again in backward: instructions
    for RAM); by default the trained conv's output is kept whole, and then nothing is written over."""
    script = tmp_path / "plan.py"
    script.write_text(PLAN)
    p = run_micropython(script, [str(tiny.path), state, "1" if sums else "0", "1" if redo else "0"])
    assert p.returncode == 0, p.stdout + p.stderr
    out = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] if " " in ln else "" for ln in p.stdout.splitlines()}
    lys = tiny.m.layers
    first = int(out["FIRST"])
    assert lys[first].params[6] == 1 and lys[first + 1].op == mtm.Op.AVGPOOL  # the last pointwise, its pool
    assert out["HOST"] == "1 0", out  # (plan.recompute_host: never a split conv's output)
    over = [int(v) for v in out["OVER"].split(",") if v]
    arena, without = (int(v) for v in out["BYTES"].split())
    if sums or not redo:  # the trained conv's output kept whole beside its input: over its input alone
        assert over == [] and out["WIN"] == "" and arena == without, out  # lowers nothing
    else:  # the pairs' convs but the last pointwise (kept: the trained one's input)
        assert over == [1, 2, 3] and out["WIN"] == str(first), out
        assert arena < without - tiny.m.tensors[lys[first].output].numel // 2, out  # (no whole output)
        split, whole = (int(v) for v in out["NEED"].split())  # memplan counts it where the Trainer splits
        assert split < whole - tiny.m.tensors[lys[first].output].numel // 2, out
    r = info.train_ram(tiny.m, 2, momentum=True, mode="mixed", sums=sums, bf16=state == "bf16",
                       recompute=redo)
    assert r["forward"] - (0 if sums or not redo else info.SPLIT_BYTES) == arena, (r["forward"], arena)
