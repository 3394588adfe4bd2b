"""The per-board order boundary (python_lib/microtrain/budget.py): for a RAM budget, memplan's
count picks how many of the trained layers go forward-only (SPSA) and how many by backprop; the
chosen hybrid then trains in the real micropython within that budget (the heap training adds,
measured after every batch). And budget.saved, MemFLoRA's activation floor, on the training
tests' CNN against a count from the .mtm on the host."""

from __future__ import annotations

import math
import re

import numpy as np

from microtrain_tools import mtm
from support.harness import ROOT, run_micropython
from support.training_cases import Setup, labels_of

RUNNER = ROOT / "tests" / "mp" / "budget_runner.py"


def test_boundary_trains_within_its_budget(setups: dict[str, Setup]) -> None:
    s = setups["cnn"]
    labels = ",".join(str(int(v)) for v in labels_of(s)[:48])
    budgets = [8000, 14000, 20000, 40000]
    p = run_micropython(RUNNER, [str(s.path), str(s.samples), str(s.numel), labels, "last:3",
                                 *map(str, budgets)], timeout=300)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    rows = {int(m.group(1)): m for m in re.finditer(
        r"BUDGET (\d+) k=(\d) of 3 need=(\d+) peak=(\d+) loss (\S+) (\S+)", p.stdout)}
    assert "BUDGET 8000 refused boundary: 3 layers forward-only need" in p.stdout
    assert sorted(rows) == budgets[1:], p.stdout
    ks = []
    for b, m in rows.items():
        k, need, peak = int(m.group(2)), int(m.group(3)), int(m.group(4))
        assert need <= b and peak <= b, (b, need, peak)  # the count, and what training really took
        assert all(math.isfinite(float(m.group(i))) for i in (5, 6))
        ks.append(k)
    assert ks == [3, 2, 1], ks  # more budget: more layers by backprop


def test_saved_counts_the_rank_r_branch(setups: dict[str, Setup]) -> None:
    s = setups["cnn"]
    code = f"""
import microtrain as mt
import microtrain.budget as budget
from microtrain.lora import LoRA
m = mt.load({str(s.path)!r})
print("FT", *budget.saved(m, m.select("last:3")))
lo = LoRA(m, rank=2, layers="last:3", memory_floor=True)
print("MF", *budget.saved(m, m.select(lo.train)))
"""
    p = run_micropython(code, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    got = {ln.split()[0]: [int(v) for v in ln.split()[1:]] for ln in p.stdout.splitlines()}
    m = s.m
    wl = [j for j, ly in enumerate(m.layers) if ly.op in mtm.WEIGHTED][-3:]
    ft_in = sum(m.tensors[m.layers[j].inputs[0]].numel for j in wl)
    bits = 0
    for ly in m.layers[wl[0]:]:
        if ly.act in (mtm.Act.RELU, mtm.Act.RELU6) or ly.op in (mtm.Op.RELU, mtm.Op.RELU6):
            bits += m.tensors[ly.output].numel
        elif ly.op == mtm.Op.MAXPOOL:
            bits += m.tensors[ly.inputs[0]].numel
    assert got["FT"][:2] == [ft_in, (bits + 7) // 8]
    # MemFLoRA's B layers read u: rank 2 per output position of each adapted layer
    mf_in = sum(2 * int(np.prod(m.tensors[m.layers[j].output].shape[:-1])) for j in wl)
    assert got["MF"][0] == mf_in < ft_in
    assert got["MF"][1] == got["FT"][1]  # the same masks on the way down
    # `microtrain info --memflora`: the same count on the host, from the .mtm and lora_ref's graph
    from microtrain_tools import info

    h = info.saved_activations(m, 3, 2)
    assert [h["ft_inputs"], h["ft_masks"], h["ft_kept"]] == got["FT"]
    assert [h["mf_inputs"], h["mf_masks"], h["mf_kept"]] == got["MF"]


def test_saved_memflora_behind_the_pool_keeps_the_pooled_branch(setups: dict[str, Setup]) -> None:
    """MemFLoRA on the residual CNN's conv3 (read by its global average pool alone) and the head:
    backward reads the pooled u (rank values) and the head's u, no mask; the training plan keeps
    less than full fine-tuning's; the host count (info --memflora) is the device's."""
    s = setups["res"]
    code = f"""
import microtrain as mt
import microtrain.budget as budget
from microtrain.lora import LoRA
m = mt.load({str(s.path)!r})
print("FT", *budget.saved(m, m.select("last:2")))
lo = LoRA(m, rank=3, layers="last:2", memory_floor=True)
print("MF", *budget.saved(m, m.select(lo.train)))
"""
    p = run_micropython(code, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    got = {ln.split()[0]: [int(v) for v in ln.split()[1:]] for ln in p.stdout.splitlines()}
    m = s.m
    wl = [j for j, ly in enumerate(m.layers) if ly.op in mtm.WEIGHTED][-2:]
    assert m.layers[wl[0] + 1].op == mtm.Op.GLOBAL_AVGPOOL and m.layers[wl[0]].act == mtm.Act.RELU
    assert got["FT"][:2] == [sum(m.tensors[m.layers[j].inputs[0]].numel for j in wl),
                             (m.tensors[m.layers[wl[0]].output].numel + 7) // 8]
    assert got["MF"][:2] == [3 + 3, 0]  # the pooled u, the head's u; no activation after B
    assert got["MF"][2] < got["FT"][2]
    from microtrain_tools import info

    h = info.saved_activations(m, 2, 3)
    assert [h["ft_inputs"], h["ft_masks"], h["ft_kept"]] == got["FT"]
    assert [h["mf_inputs"], h["mf_masks"], h["mf_kept"]] == got["MF"]
