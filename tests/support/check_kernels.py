"""Check every kernel bit for bit against the numpy oracle (``make check-kernels``).

Generates seeded cases for all binding functions (tools/microtrain_tools/
kernel_cases.py), plus calls at the documented accumulator bounds, runs them

- in the real MicroPython through the x64 natmod (tests/mp/kernel_runner.py),
- in the host C driver (tests/c/kernel_driver.c) built with ASan + UBSan, once
  with the normal and once with the Cortex-M0 integer paths
  (``-DMT_FORCE_SOFT_MATH``),

and compares every output and return value with the oracle, bit for bit
(float32 outputs included). Prints a per-op table and ends with

    kernels: ops=N cases=M bitexact=K asan=clean|dirty

where a case counts as bit-exact only if all three runs match the oracle.
The C driver also runs the integer helpers of mt_quant.h (requant, the
doubling high multiply, the software division, the dynamic shift) element-wise
on a few thousand values each, in both math modes (the ``helpers:`` line).
Exits non-zero unless K == M, every helper case matches and the sanitiser runs
were clean.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from support import kernel_cases, kernel_harness
from support.kernel_harness import Case, RunOutcome

RUNS = ("mp", "c-hard", "c-soft")


@dataclass
class OpStats:
    cases: int = 0
    ok: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RUNS, 0))
    bitexact: int = 0
    mp_us: int = 0
    failures: list[str] = field(default_factory=list)


def _sanitizer_clean(outcome: RunOutcome) -> bool:
    return outcome.returncode == 0 and outcome.complete and not outcome.stderr.strip()


def run_all(cases: Sequence[Case], helpers: Sequence[Case], workdir: Path) -> dict[str, RunOutcome]:
    """The three runs, concurrently (the ASan builds are compiled first). The
    drivers run ``cases`` followed by ``helpers``."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        hard = pool.submit(kernel_harness.build_driver, False)
        soft = pool.submit(kernel_harness.build_driver, True)
        exes = {"c-hard": hard.result(), "c-soft": soft.result()}
    with ThreadPoolExecutor(max_workers=3) as pool:
        futs = {"mp": pool.submit(kernel_harness.run_cases_micropython, cases, workdir, name="mp")}
        for name, exe in exes.items():
            futs[name] = pool.submit(kernel_harness.run_cases_driver, [*cases, *helpers], exe, workdir,
                                     name=name)
        return {name: f.result() for name, f in futs.items()}


def tabulate(cases: Sequence[Case], runs: dict[str, RunOutcome], max_failures: int) -> dict[str, OpStats]:
    stats: dict[str, OpStats] = {}
    for i, case in enumerate(cases):
        st = stats.setdefault(case.op, OpStats())
        st.cases += 1
        exact = True
        for name in RUNS:
            res = runs[name].results[i] if i < len(runs[name].results) else None
            diffs = kernel_harness.compare(case, res)
            if name == "mp" and res is not None:
                st.mp_us += res.elapsed_us
            if diffs:
                exact = False
                if len(st.failures) < max_failures:
                    st.failures.append(f"[{name}] case {i}: {kernel_harness.describe_case(case)}: "
                                       + "; ".join(diffs[:3]))
            else:
                st.ok[name] += 1
        st.bitexact += exact
    return stats


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m support.check_kernels", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=20240601, help="case generator seed (default %(default)s)")
    ap.add_argument("--cases-per-op", type=int, default=160,
                    help="cases generated for each binding function (default %(default)s)")
    ap.add_argument("--ops", nargs="+", choices=kernel_cases.ALL_OPS, metavar="OP",
                    help="only these binding functions (default: all)")
    ap.add_argument("--helper-cases", type=int, default=3,
                    help="cases per integer helper, C driver only (default %(default)s)")
    ap.add_argument("--max-failures", type=int, default=5, help="failures shown per op (default %(default)s)")
    ap.add_argument("--workdir", type=Path, default=kernel_harness.BUILD_TEST / "check_kernels",
                    help="where case and result files go (default %(default)s)")
    args = ap.parse_args(argv)

    try:
        kernel_harness.ensure_natmod()
    except RuntimeError as exc:
        print(f"check_kernels: {exc}", file=sys.stderr)
        return 2
    ops = tuple(args.ops or kernel_cases.ALL_OPS)
    t0 = time.monotonic()
    cases = [c for op in ops for c in kernel_cases.generate(op, args.cases_per_op, args.seed)]
    cases += [c for c in kernel_cases.generate_limits() if c.op in ops]
    helpers = kernel_cases.generate_helpers(args.helper_cases, args.seed)
    t_gen = time.monotonic() - t0
    runs = run_all(cases, helpers, args.workdir)
    t_run = time.monotonic() - t0 - t_gen
    stats = tabulate(cases, runs, args.max_failures)

    print(f"{'op':32} {'cases':>6} {'mp':>6} {'c-hard':>7} {'c-soft':>7} {'exact':>6} {'mp_ms':>7}")
    for op in ops:
        st = stats[op]
        print(f"{op:32} {st.cases:6d} {st.ok['mp']:6d} {st.ok['c-hard']:7d} {st.ok['c-soft']:7d} "
              f"{st.bitexact:6d} {st.mp_us / 1000:7.1f}")
    for op in ops:
        for line in stats[op].failures:
            print(f"FAIL {op}: {line}")
    clean = True
    for name, outcome in runs.items():
        ran = cases if name == "mp" else [*cases, *helpers]
        incomplete = len(outcome.results) < len(ran)
        if incomplete or outcome.returncode != 0:
            print(f"run {name}: exit {outcome.returncode}, {len(outcome.results)}/{len(ran)} results"
                  + (f" (died at case {len(outcome.results)}: "
                     f"{kernel_harness.describe_case(ran[len(outcome.results)])})" if incomplete else ""))
            print((outcome.stdout + outcome.stderr)[-4000:])
            rerun = "micropython tests/mp/kernel_runner.py" if name == "mp" else "build/test/kernel_driver-*"
            print(f"case file: {outcome.case_file} (rerun: {rerun} CASES RESULTS)")
        if name != "mp":
            if not _sanitizer_clean(outcome):
                clean = False
                if outcome.stderr.strip():
                    print(f"sanitizer output ({name}):\n{outcome.stderr[-6000:]}")
    helper_ok = 0
    for j, case in enumerate(helpers):
        diffs = []
        for name in RUNS[1:]:
            res = runs[name].results[len(cases) + j] if len(cases) + j < len(runs[name].results) else None
            diffs += [f"[{name}] {d}" for d in kernel_harness.compare(case, res)]
        helper_ok += not diffs
        for d in diffs[:args.max_failures]:
            print(f"FAIL helper {case.op}: {d}")
    print(f"helpers: cases={len(helpers)} bitexact={helper_ok} (C driver, hardware and soft math)")
    n_exact = sum(st.bitexact for st in stats.values())
    print(f"time: generate+oracle {t_gen:.1f}s, runs {t_run:.1f}s")
    asan = "clean" if clean else "dirty"
    print(f"kernels: ops={len(ops)} cases={len(cases)} bitexact={n_exact} asan={asan}")
    return 0 if n_exact == len(cases) and helper_ok == len(helpers) and clean else 1


if __name__ == "__main__":
    sys.exit(main())
