"""Helpers shared by the kernel tests.

The machinery lives in ``support.kernel_harness`` (so that
``python -m support.check_kernels`` uses the very same code); this
module re-exports it and adds the pytest-side pieces:

- paths (ROOT, MICROPYTHON, NATMOD_X64, RUNNER, DRIVER_SRC, KERNEL_DIR, ...),
- ``run_micropython(script_path_or_code, args, heapsize=None, timeout=...)``,
- the binary case-file format (``Case``, ``Buf``/``Alias``/``View``/``Expr``,
  ``encode_cases``/``write_cases``, ``decode_results``) and
  ``run_cases_micropython`` / ``run_cases_driver`` / ``build_driver``,
- ``compare`` (bit-exact check of a result against a case's expectation).
"""

from __future__ import annotations

from collections.abc import Sequence

from support.kernel_harness import (
    BUILD_TEST,
    DRIVER_SRC,
    KERNEL_DIR,
    MICROPYTHON,
    NATMOD_X64,
    POISON,
    PYTHON_LIB,
    ROOT,
    RUNNER,
    Alias,
    Arg,
    Buf,
    Case,
    Expected,
    Expr,
    Result,
    RunOutcome,
    View,
    binary_has_builtin_microtrain,
    build_driver,
    compare,
    decode_results,
    describe_case,
    encode_cases,
    ensure_natmod,
    f32,
    i32,
    inout,
    out,
    run_cases_driver,
    run_cases_micropython,
    run_micropython,
    s8,
    skip_reason_builtin,
    u8,
    u32,
    write_cases,
)

__all__ = [
    "BUILD_TEST", "DRIVER_SRC", "KERNEL_DIR", "MICROPYTHON", "NATMOD_X64", "POISON", "PYTHON_LIB", "ROOT",
    "RUNNER", "Alias", "Arg", "Buf", "Case", "Expected", "Expr", "Result", "RunOutcome", "View",
    "assert_complete", "binary_has_builtin_microtrain", "build_driver", "compare", "cosine",
    "decode_results", "describe_case",
    "encode_cases", "ensure_natmod", "f32", "failures", "i32", "inout", "out", "run_cases_driver",
    "run_cases_micropython", "run_micropython", "s8", "skip_reason_builtin", "u8", "u32", "write_cases",
]


def assert_complete(outcome: RunOutcome, cases: Sequence[Case], what: str = "run") -> None:
    """The process exited 0 and produced a result for every case."""
    if outcome.returncode != 0 or len(outcome.results) != len(cases):
        n = len(outcome.results)
        at = f" (stopped at case {n}: {describe_case(cases[n])})" if n < len(cases) else ""
        raise AssertionError(f"{what}: exit {outcome.returncode}, {n}/{len(cases)} results{at}\n"
                             f"case file: {outcome.case_file}\n{(outcome.stdout + outcome.stderr)[-3000:]}")


def failures(cases: Sequence[Case], results: Sequence[Result | None], limit: int = 8) -> list[str]:
    """Human-readable mismatches (empty when every case is as expected)."""
    msgs = []
    for i, c in enumerate(cases):
        diffs = compare(c, results[i] if i < len(results) else None)
        if diffs:
            msgs.append(f"case {i}: {describe_case(c)}: {'; '.join(diffs[:3])}")
    if len(msgs) > limit:
        msgs = msgs[:limit] + [f"... and {len(msgs) - limit} more"]
    return msgs


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    import numpy as np

    x = np.asarray(a, dtype=np.float64).reshape(-1)
    y = np.asarray(b, dtype=np.float64).reshape(-1)
    nx, ny = float(np.linalg.norm(x)), float(np.linalg.norm(y))
    if nx == 0.0 or ny == 0.0:
        return 1.0 if nx == ny else 0.0
    return float(x @ y / (nx * ny))
