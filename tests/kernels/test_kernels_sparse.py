"""Masked (sparse-update) kernels.

1. Equivalence, inside MicroPython: a masked grad-input / grad-weight call gives
   exactly what the dense call (mask None) gives on the error with the masked
   channels zeroed (MicroPython output compared with MicroPython output).
2. The skipped work is really skipped:
   - MicroPython wall time, a big layer, mask keeping 10% of the channels vs
     dense, interleaved repetitions, minimum of each: masked >= 3x faster;
   - deterministic: callgrind instruction counts of the kernel function in the
     (sanitizer-free) host driver: masked <= 1/4 of dense.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from microtrain_tools.reference import oracle
from support.harness import (
    Arg,
    Buf,
    Case,
    Result,
    assert_complete,
    build_driver,
    ensure_natmod,
    i32,
    out,
    run_cases_driver,
    run_cases_micropython,
    s8,
    u8,
    write_cases,
)
from support.kernel_cases import CONV_VARIANTS, ConvGeom, conv_geom

SEED = 99
MASKED_OPS = ("conv2d_s8_grad_input", "conv2d_s8_grad_weight", "conv2d_s8_grad_weight_f32",
              "linear_s8_grad_input", "linear_s8_grad_weight", "linear_s8_grad_weight_f32")


def _linear_geom(rng: np.random.Generator) -> ConvGeom:
    in_n, out_n = int(rng.integers(1, 120)), int(rng.integers(2, 40))
    return ConvGeom(1, 1, in_n, 1, 1, out_n, 1, 1, 1, 1, 0, 0, 1)


def _desc(op: str, g: ConvGeom, zp: int) -> Buf:
    if op.startswith("linear"):
        return i32([g.in_c, g.out_c, zp, 0, -128, 127])
    return i32(g.desc(zp, 0, -128, 127))


def _call(op: str, g: ConvGeom, desc: Buf, x: np.ndarray, w: np.ndarray, wr: np.ndarray, e: np.ndarray,
          mask: Buf | None, gw0: np.ndarray, gb0: np.ndarray) -> Case:
    args: list[Arg]
    if op.endswith("grad_input"):
        args = [desc, s8(e), s8(w), i32(wr), mask, out("i", g.n_in), out("Y", g.n_in)]
    elif op.endswith("grad_weight"):
        args = [desc, s8(x), s8(e), mask, out("i", g.n_w), out("i", g.out_c)]
    else:
        args = [desc, s8(x), s8(e), mask, 3.0517578125e-05, -0.0078125,
                Buf("f", gw0.astype(np.float32), out=True), Buf("f", gb0.astype(np.float32), out=True)]
    return Case(op, args)


def _pairs() -> list[tuple[str, str, Case, Case]]:
    """(op, what, masked call, dense call on the zeroed error)."""
    rng = np.random.default_rng(SEED)
    pairs = []
    for op in MASKED_OPS:
        for k in range(24):
            variant = CONV_VARIANTS[k % len(CONV_VARIANTS)]
            g = _linear_geom(rng) if op.startswith("linear") else conv_geom(rng, variant)
            zp = int(rng.choice([-128, 0, 127, 5]))
            desc = _desc(op, g, zp)
            x = rng.integers(-128, 128, g.n_in)
            w = rng.integers(-128, 128, g.n_w)
            e = rng.integers(-128, 128, g.n_out).reshape(-1, g.out_c)
            terms = g.k_h * g.k_w * g.opg
            wr, _ = oracle.weight_ratios(10.0 ** rng.uniform(-3, -1, g.out_c), terms)
            kind = ["random", "random", "zero", "one", "random-255", "one-255"][k % 6]
            keep = rng.random(g.out_c) < 0.4
            keep[int(rng.integers(0, g.out_c))] = True
            if kind == "zero":
                keep[:] = False
            if kind.startswith("one"):
                keep[:] = True
            val = 255 if kind.endswith("255") else 1
            mask = u8(np.where(keep, val, 0), str(rng.choice(["y", "Y", "b", "B"])))
            gw0 = rng.normal(0, 1, g.n_w)  # no -0.0: adding +0.0 must leave values unchanged
            gb0 = rng.normal(0, 1, g.out_c)
            masked = _call(op, g, desc, x, w, wr, e.reshape(-1), mask, gw0, gb0)
            dense = _call(op, g, desc, x, w, wr, (e * keep).reshape(-1), None, gw0, gb0)
            pairs.append((op, f"{kind} {g}", masked, dense))
    return pairs


@pytest.fixture(scope="module")
def pair_results() -> list[tuple[str, str, Result, Result]]:
    ensure_natmod()
    pairs = _pairs()
    flat = [c for _, _, m, d in pairs for c in (m, d)]
    outcome = run_cases_micropython(flat, name="sparse-eq")
    assert_complete(outcome, flat, "micropython")
    res = outcome.results
    return [(op, what, res[2 * i], res[2 * i + 1]) for i, (op, what, _, _) in enumerate(pairs)]


@pytest.mark.parametrize("op", MASKED_OPS)
def test_masked_equals_dense_on_zeroed_error(op: str,
                                             pair_results: list[tuple[str, str, Result, Result]]) -> None:
    rows = [r for r in pair_results if r[0] == op]
    assert len(rows) == 24
    bad = []
    for _, what, m, d in rows:
        if m.status != 0 or d.status != 0:
            bad.append(f"{what}: raised {m.exc_msg or d.exc_msg}")
        elif (m.ret, m.outs) != (d.ret, d.outs):
            bad.append(f"{what}: masked ret={m.ret} != dense ret={d.ret} or outputs differ")
    assert not bad, "\n".join(bad[:6])


# --------------------------------------------------------------------------
# the work is skipped


def _speed_cases(op: str, rng: np.random.Generator, keep_frac: float = 0.1,
                 repeat: int = 1) -> tuple[Case, ...]:
    """(dense, masked keeping keep_frac of the channels, masked keeping none) on a big layer."""
    if op.startswith("linear"):
        g = ConvGeom(1, 1, 4096, 1, 1, 1024, 1, 1, 1, 1, 0, 0, 1)
        desc = i32([g.in_c, g.out_c, -128, 0, -128, 127])
    else:
        g = ConvGeom(16, 16, 32, 16, 16, 64, 3, 3, 1, 1, 1, 1, 1)
        desc = i32(g.desc(-128, 0, -128, 127))
    keep = np.zeros(g.out_c, dtype=np.uint8)
    keep[rng.permutation(g.out_c)[: max(1, round(keep_frac * g.out_c))]] = 1
    x, w = rng.integers(-128, 128, g.n_in), rng.integers(-128, 128, g.n_w)
    e = rng.integers(-128, 128, g.n_out)
    e[e == 0] = 1  # a zero error may legitimately skip work too: keep the dense run dense
    wr = np.full(g.out_c, 1)
    cases = []
    for mask in (None, u8(keep), u8(np.zeros(g.out_c))):
        args: list[Arg]
        if op.endswith("grad_input"):
            args = [desc, s8(e), s8(w), i32(wr), mask, out("i", g.n_in), out("Y", g.n_in)]
        else:
            args = [desc, s8(x), s8(e), mask, out("i", g.n_w), out("i", g.out_c)]
        cases.append(Case(op, args, repeat=repeat))
    return tuple(cases)


# The masked weight gradient of a linear layer still has to write its rows as
# zeros (docs/numerics.md), a cost of the same order as computing them: only
# the zero-fill bound below applies to it.
SPEED_OPS = ("conv2d_s8_grad_input", "conv2d_s8_grad_weight", "linear_s8_grad_input")


@pytest.mark.parametrize("op", SPEED_OPS)
def test_masked_is_faster_in_micropython(op: str) -> None:
    """Min over 2 x 5 calls each, dense and masked blocks interleaved, one process."""
    ensure_natmod()
    dense, masked, _ = _speed_cases(op, np.random.default_rng(SEED), repeat=5)
    seq = [dense, masked, dense, masked]
    outcome = run_cases_micropython(seq, name=f"speed-{op}")
    assert_complete(outcome, seq, "micropython")
    assert all(r.status == 0 for r in outcome.results), outcome.results[0].exc_msg
    t_dense = min(r.elapsed_us for r in outcome.results[0::2])
    t_masked = min(r.elapsed_us for r in outcome.results[1::2])
    assert t_dense >= 1000, f"dense run too short to time ({t_dense} us)"
    assert t_dense >= 3 * t_masked, f"{op}: dense {t_dense} us vs masked (10% kept) {t_masked} us"


def _callgrind_instructions(exe: Path, case: Case, fn: str, tmp: Path, tag: str) -> int:
    run_dir = tmp / tag
    run_dir.mkdir()
    cpath, rpath, cg = run_dir / "c.cases", run_dir / "c.results", run_dir / "cg.out"
    write_cases(cpath, [case])
    proc = subprocess.run(["valgrind", "--tool=callgrind", f"--toggle-collect={fn}",
                           f"--callgrind-out-file={cg}", str(exe), str(cpath), str(rpath)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = re.search(r"^(?:summary|totals): (\d+)", cg.read_text(), re.M)
    assert m, "no callgrind totals"
    return int(m.group(1))


def _instruction_counts(op: str, tmp: Path) -> tuple[int, int, int]:
    assert shutil.which("valgrind"), "valgrind is required (apt-get install valgrind)"
    exe = build_driver(sanitize=False)
    cases = _speed_cases(op, np.random.default_rng(SEED + 1))
    res = run_cases_driver(list(cases), exe, tmp)  # sanity: the calls themselves succeed
    assert res.returncode == 0 and all(r.status == 0 for r in res.results), res.stderr
    fn = f"mt_{op}"  # the C kernel: mt_ + its Python name
    dense, masked, none = (_callgrind_instructions(exe, c, fn, tmp, t)
                           for c, t in zip(cases, ("dense", "masked", "none"), strict=True))
    assert dense > 1_000_000
    return dense, masked, none


@pytest.mark.parametrize("op", SPEED_OPS)
def test_masked_skips_work_callgrind(op: str, tmp_path: Path) -> None:
    """Deterministic: instructions executed inside the kernel, 10% of channels kept."""
    dense, masked, _ = _instruction_counts(op, tmp_path)
    assert 4 * masked <= dense, f"{op}: {masked} instructions masked vs {dense} dense"


def test_linear_grad_weight_masked_rows_only_zero_filled(tmp_path: Path) -> None:
    """A masked row costs what a zero-filled row costs: with 10% kept, the run
    is within 5% of 0.1 * dense + 0.9 * (all rows masked)."""
    dense, masked, none = _instruction_counts("linear_s8_grad_weight", tmp_path)
    assert none < dense
    assert masked <= 0.1 * dense + 0.9 * none + 0.05 * dense, (dense, masked, none)
