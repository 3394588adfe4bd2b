"""Every binding function, bit-exact against the numpy oracle, inside MicroPython.

One MicroPython process (the real unix binary, x64 natmod) runs all cases of
all ops; each op is then its own test. ``make check-kernels`` runs many more
cases (and the sanitised C driver); this is the quick per-op view.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from support import kernel_cases
from support.harness import (
    Alias,
    Buf,
    Case,
    RunOutcome,
    assert_complete,
    ensure_natmod,
    failures,
    run_cases_micropython,
)
from support.kernel_cases import ALL_OPS, CONV_VARIANTS, POOL_DISJOINT_VARIANTS, POOL_VARIANTS

SEED = 4242
PER_OP = 72  # a multiple of the variant cycles (12 conv variants, 6 mask kinds, ...)


@pytest.fixture(scope="module")
def cases() -> dict[str, list[Case]]:
    return kernel_cases.generate_all(SEED, PER_OP)


@pytest.fixture(scope="module")
def mp_run(cases: dict[str, list[Case]]) -> tuple[list[Case], RunOutcome]:
    ensure_natmod()
    flat = [c for op in ALL_OPS for c in cases[op]]
    outcome = run_cases_micropython(flat, name="bitexact")
    assert_complete(outcome, flat, "micropython kernel runner")
    return flat, outcome


def test_accumulator_limits_bitexact() -> None:
    """Every int32 accumulator at the largest magnitude the descriptor checks allow."""
    ensure_natmod()
    limits = kernel_cases.generate_limits()
    outcome = run_cases_micropython(limits, name="limits")
    assert_complete(outcome, limits, "micropython kernel runner")
    bad = failures(limits, outcome.results)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("op", ALL_OPS)
def test_bitexact_vs_oracle(op: str, mp_run: tuple[list[Case], RunOutcome]) -> None:
    flat, outcome = mp_run
    idx = [i for i, c in enumerate(flat) if c.op == op]
    assert len(idx) == PER_OP
    sel = [flat[i] for i in idx]
    bad = failures(sel, [outcome.results[i] for i in idx])
    assert not bad, f"{op}: {len(bad)} cases differ from the oracle:\n" + "\n".join(bad)


def test_every_binding_function_is_covered() -> None:
    """The generator table lists exactly the module's functions (all 64)."""
    ensure_natmod()
    from support.harness import run_micropython

    proc = run_micropython("import _microtrain as m\nprint(' '.join(sorted(dir(m))))")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = {n for n in proc.stdout.split() if not n.startswith("_") and n != "HAS_FLOAT"}
    names = {n for n in names if not n.startswith("mtm_")}  # model-file accessors: tested elsewhere
    assert names == set(ALL_OPS)
    assert len(ALL_OPS) == 65


def _labels(cases: list[Case]) -> set[str]:
    return {c.label.split("/")[0] for c in cases}


def _mask_kinds(cases: list[Case], index: int) -> set[str]:
    kinds = set()
    for c in cases:
        m = c.args[index]
        if m is None:
            kinds.add("none")
            continue
        assert isinstance(m, Buf) and m.data is not None
        v = np.asarray(m.data)
        kinds.add("zero" if not v.any() else "one" if v.all() else "random")
    return kinds


def test_generator_covers_edge_cases(cases: dict[str, list[Case]]) -> None:
    """Guard against the case generator silently losing its edge cases."""
    for op in [o for o in ALL_OPS if o.startswith("conv2d_")]:
        # conv2d_add_s8_forward: every variant but dilation (the fused kernel takes none)
        want = set(CONV_VARIANTS) - ({"dilated"} if op == "conv2d_add_s8_forward" else set())
        assert _labels(cases[op]) == want, op
        descs = [np.asarray(c.args[0].data) for c in cases[op] if isinstance(c.args[0], Buf)]
        assert any(d[12] == d[2] and d[5] > d[2] for d in descs), "depthwise with channel multiplier"
        assert any(1 < d[12] < d[2] for d in descs), "grouped"
        assert any(d[0] == 1 and d[6] == 1 for d in descs), "conv1d (H = 1)"
        assert any(d[10] > 0 or d[11] > 0 for d in descs), "padding"
        assert any(d[8] == 2 for d in descs), "stride 2"
        assert any(d[6] == d[7] == 1 for d in descs), "1x1"
        assert {-128, 127} <= {int(d[13]) for d in descs}, "input zero points -128 and 127"
    for op in [o for o in ALL_OPS if o.endswith(("_grad_input", "_grad_weight")) and "pool" not in o
               and not o.startswith(("lut_", "concat_", "upsample_", "softmax_s8_", "layernorm_"))]:
        mi = 4 if "input" in op else 3
        assert _mask_kinds(cases[op], mi) == {"none", "zero", "random", "one"}, op
    fwd = cases["conv2d_s8_forward"] + cases["linear_s8_forward"]
    assert {"real", "saturate", "extreme"} <= {c.label.split("/")[-1] for c in fwd}
    assert any(c.label == "requant-probe" for c in cases["linear_s8_forward"])
    for op in ("maxpool_s8_forward", "maxpool_s8_grad_input", "avgpool_s8_forward", "avgpool_s8_grad_input"):
        assert _labels(cases[op]) == set(POOL_VARIANTS), op
    for op, ai in (("maxpool_s8_grad_input", 3), ("avgpool_s8_grad_input", 2)):
        assert any(c.args[ai] is None for c in cases[op]), f"{op}: acc None (disjoint windows)"
    for op in ("maxpool_s8_grad_input_act", "avgpool_s8_grad_input_act"):
        # disjoint windows only (overlapping ones are refused): every pool variant but "overlap"
        assert _labels(cases[op]) == set(POOL_DISJOINT_VARIANTS) == set(POOL_VARIANTS) - {"overlap"}, op
        descs = [np.asarray(c.args[0].data) for c in cases[op] if isinstance(c.args[0], Buf)]
        assert all(d[7] >= d[5] and d[8] >= d[6] for d in descs), f"{op}: overlapping windows"
        assert any(d[7] > d[5] or d[8] > d[6] for d in descs), f"{op}: gaps between the windows"
        assert any(d[9] > 0 or d[10] > 0 for d in descs), f"{op}: padding"
        where = Counter(c.label.split("/")[2] for c in cases[op])
        assert where["in-place"] and where["own ein"], f"{op}: ein the activation itself and its own buffer"
        assert all(isinstance(c.args[5], Alias) and c.args[5].index == 1
                   for c in cases[op] if c.label.endswith("in-place")), f"{op}: in place is ein = x"
        kinds = {c.label.split("/")[1] for c in cases[op]}
        assert {"none", "relu", "relu6", "upper only", "empty", "range"} == kinds, f"{op}: mask kinds"
        los = {c.args[3] for c in cases[op] if c.label.split("/")[1] in ("relu", "relu6")}
        assert {-128, 127} <= los, f"{op}: zero points -128 and 127"
        assert any(c.label.startswith("ties") for c in cases[op]), f"{op}: ties"
    assert any(c.expected is not None and c.expected.ret == 1 for c in cases["maxpool_s8_grad_input_act"]), \
        "maxpool_s8_grad_input_act: an error of -128 (shift 1: the requantisation pass over ein)"
    for op in ("relu_s8_forward", "relu6_s8_forward", "add_s8_forward", "add_s8_grad_merge"):
        assert any(isinstance(a, Alias) for c in cases[op] for a in c.args), f"{op}: in-place call"
    assert {"copy", "rescale", "extreme"} <= {c.label.split("/")[0] for c in cases["concat_s8_forward"]}
    assert {0, 1} == {c.args[2] for c in cases["concat_s8_grad_input"]}, "both parts"
    for op in ("upsample_s8_forward", "upsample_s8_grad_input"):
        descs = [np.asarray(c.args[0].data) for c in cases[op] if isinstance(c.args[0], Buf)]
        assert {0, 1} == {int(d[7]) for d in descs}, f"{op}: both modes"
        assert any(d[3] < d[0] * d[5] for d in descs), f"{op}: clipped output (a transposed conv's size)"
    ks = Counter(int(c.args[1]) == 0 for c in cases["topk_mask"] if isinstance(c.args[1], int))
    assert ks[True] and ks[False], "topk with k = 0 and k > 0"
