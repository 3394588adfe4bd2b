"""Bad arguments to every binding function raise TypeError / ValueError naming
the function and the argument, and the interpreter keeps running.

All calls run in ONE MicroPython process: each op's valid call first, then every
bad variant, then every valid call again (bit-exact vs the oracle). Categories:
wrong type, None, wrong length, inconsistent descriptor, bad scalar / table
values, bad mask, read-only output (bytes), partially overlapping buffers, ints
outside int32 / int64, wrong argument count.

Misaligned buffers cannot be made from Python: an array('i'/'I'/'f') is always
4-byte aligned and memoryview slices step in whole elements, so the binding's
alignment check is not reachable here.

A partial overlap passes if the binding refuses it (ValueError "... overlap ...")
or if the call still gives the oracle's answer on the inputs as they were
before the call (the overlap is harmless for that kernel).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest

from support import kernel_cases
from support.bad_input_cases import ALL_OPS, BASES, CATEGORIES, SPECS, VARIANTS, Bad, check_bad, err_case
from support.harness import (
    Case,
    Result,
    RunOutcome,
    assert_complete,
    build_driver,
    compare,
    describe_case,
    ensure_natmod,
    out,
    run_cases_driver,
    run_cases_micropython,
    s8,
)

# --------------------------------------------------------------------------
# one MicroPython process for everything


@dataclass(repr=False)
class Run:
    cases: list[Case]
    outcome: RunOutcome
    first: dict[str, int]  # op -> index of its leading valid call
    bad: dict[str, list[tuple[Bad, int]]]
    last: dict[str, int]  # op -> index of its valid call after all bad ones

    def __repr__(self) -> str:
        return f"Run({len(self.cases)} calls in one micropython process)"


@pytest.fixture(scope="module")
def run() -> Run:
    ensure_natmod()
    cases: list[Case] = []
    first, last, bad_idx = {}, {}, {}
    for op in ALL_OPS:
        first[op] = len(cases)
        cases.append(BASES[op])
        bad_idx[op] = []
        for b in VARIANTS[op]:
            bad_idx[op].append((b, len(cases)))
            cases.append(b.case)
    for op in ALL_OPS:
        last[op] = len(cases)
        cases.append(replace(BASES[op], label="valid, after all bad calls"))
    outcome = run_cases_micropython(cases, name="bad-input")
    return Run(cases, outcome, first, bad_idx, last)


def _result(run: Run, i: int) -> Result | None:
    return run.outcome.results[i] if i < len(run.outcome.results) else None


PARAMS = [(op, cat) for op in ALL_OPS for cat in CATEGORIES if any(b.category == cat for b in VARIANTS[op])]


@pytest.mark.parametrize(("op", "category"), PARAMS, ids=[f"{o}-{c}" for o, c in PARAMS])
def test_bad_input_rejected(op: str, category: str, run: Run) -> None:
    res0 = _result(run, run.first[op])
    assert res0 is not None and not compare(BASES[op], res0), "the valid reference call itself failed"
    errs = []
    for b, i in run.bad[op]:
        if b.category != category:
            continue
        for d in check_bad(b, _result(run, i)):
            errs.append(f"{b.case.label}: {d}")
    assert not errs, f"{op} [{category}]:\n" + "\n".join(errs[:12])


def test_every_category_covered() -> None:
    for op in ALL_OPS:
        cats = {b.category for b in VARIANTS[op]}
        assert {"type", "none", "argcount"} <= cats, op
        if any(k != "f32any" for _, k in SPECS[op]):  # f32any: every length is valid (update_f32_check)
            assert "length" in cats, op
        if SPECS[op][0][1] == "desc":
            assert "desc" in cats, op
        if any(k in ("s8out", "s8io", "i32out", "f32io") for _, k in SPECS[op]):
            assert "readonly" in cats, op
        if any(k == "mask" for _, k in SPECS[op]):
            assert "mask" in cats, op


def test_interpreter_survives(run: Run) -> None:
    """After every bad call the same process still computes every op bit-exactly."""
    assert_complete(run.outcome, run.cases, "micropython (bad-input run)")
    errs = []
    for op in ALL_OPS:
        for d in compare(run.cases[run.last[op]], _result(run, run.last[op])):
            errs.append(f"{op}: {d}")
    assert not errs, "\n".join(errs)


# Categories whose checks are shared C code (checks.c): descriptors, scalar values, buffer
# lengths, ints outside int32. The C driver must reach each of these calls (no DriverError).
SHARED_CHECKS = ("desc", "value", "length", "intrange")


@pytest.mark.parametrize("category", SHARED_CHECKS)
def test_messages_match_c_checks(category: str, run: Run) -> None:
    """The binding and the C driver raise the same type with the same message, byte for byte,
    for every bad descriptor / scalar / length: both take it from checks.c (mt_*_check, mt_msg_format)."""
    cases, idx = [], []
    for op in ALL_OPS:
        for b, i in run.bad[op]:
            if b.category == category:
                cases.append(b.case)
                idx.append(i)
    assert cases
    drv = run_cases_driver(cases, build_driver(), name=f"bad-{category}")
    assert drv.returncode == 0 and not drv.stderr.strip(), drv.stderr[-3000:]
    assert len(drv.results) == len(cases)
    errs = []
    for c, i, d in zip(cases, idx, drv.results, strict=True):
        m = _result(run, i)
        assert m is not None
        if m.status != 1 or (m.exc_type, m.exc_msg) != (d.exc_type, d.exc_msg):
            errs.append(f"{describe_case(c)}: micropython {m.exc_type}({m.exc_msg!r}) vs C {d.exc_type}"
                        f"({d.exc_msg!r})")
    assert not errs, f"{len(errs)}/{len(cases)} differ:\n" + "\n".join(errs[:10])


def test_generator_cases_are_valid_for_binding() -> None:
    """Sanity for the harness: the valid reference calls match the oracle's own argument checks."""
    for op in ALL_OPS:
        assert BASES[op].expected is not None
        assert kernel_cases.OPS[op].nargs == len(BASES[op].args)


def test_gap_grad_hw_times_c_does_not_wrap() -> None:
    """hw * len(e) = 65536 * 65536 = 2^32 wraps to 0 in 32 bits; the check must still refuse it
    (an unchecked product once let an empty ein through). Binding and C driver, same message."""
    op = "global_avgpool_s8_grad_input"
    case = err_case(op, [s8(np.zeros(65536)), 65536, out("Y", 0)], (f"{op}: e: ",), ("ValueError",), "2^32")
    mp = run_cases_micropython([case], name="gap-wrap")
    drv = run_cases_driver([case], build_driver(), name="gap-wrap")
    for res in (mp.results[0], drv.results[0]):
        assert not compare(case, res), compare(case, res)
        assert res.exc_msg == f"{op}: e: must hold 1..2^26/hw channels"
