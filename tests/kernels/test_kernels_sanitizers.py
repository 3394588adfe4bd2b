"""The C kernels on the host under ASan + UBSan, in both math modes and on the RISC-V paths.

tests/c/kernel_driver.c runs the same case files as the MicroPython runner,
calling the mt_*_check functions and then the kernels directly; every buffer is
an exact-size heap block. Built with -fsanitize=address,undefined
-fno-sanitize-recover=all, once normally and once with -DMT_FORCE_SOFT_MATH
(the Cortex-M0 integer paths), and once with -DMT_FORCE_RV_PATH (the forward
blocking of rv32 firmware, mt_dsp.h). Any sanitizer report, non-zero exit or
mismatch with the oracle fails; every mode must agree bit for bit.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from support import kernel_cases
from support.harness import (
    KERNEL_DIR,
    Case,
    RunOutcome,
    assert_complete,
    build_driver,
    failures,
    out,
    run_cases_driver,
    s8,
)
from support.kernel_cases import ALL_OPS

SEED = 777
PER_OP = 96
MODES = ("hard", "soft", "rv")


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    per_op = kernel_cases.generate_all(SEED, PER_OP)
    return ([c for op in ALL_OPS for c in per_op[op]] + kernel_cases.generate_limits()
            + kernel_cases.generate_helpers(2, SEED))


@pytest.fixture(scope="module")
def runs(cases: list[Case]) -> dict[str, RunOutcome]:
    out = {}
    for mode in MODES:
        flags = ["-DMT_FORCE_RV_PATH"] if mode == "rv" else []
        exe = build_driver(soft_math=mode == "soft", extra_flags=flags)
        out[mode] = run_cases_driver(cases, exe, name=f"san-{mode}")
    return out


@pytest.mark.parametrize("mode", MODES)
def test_sanitizers_clean(mode: str, cases: list[Case], runs: dict[str, RunOutcome]) -> None:
    outcome = runs[mode]
    assert not outcome.stderr.strip(), f"sanitizer / driver output ({mode}):\n{outcome.stderr[-6000:]}"
    assert_complete(outcome, cases, f"ASan/UBSan driver ({mode})")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", [*ALL_OPS, *kernel_cases.HELPERS])
def test_driver_bitexact(mode: str, op: str, cases: list[Case], runs: dict[str, RunOutcome]) -> None:
    idx = [i for i, c in enumerate(cases) if c.op == op]
    assert idx
    res = runs[mode].results
    bad = failures([cases[i] for i in idx], [res[i] if i < len(res) else None for i in idx])
    assert not bad, f"{op} ({mode} math):\n" + "\n".join(bad)


@pytest.mark.parametrize("mode", ["soft", "rv"])
def test_math_modes_identical(mode: str, cases: list[Case], runs: dict[str, RunOutcome]) -> None:
    """Hardware multiply/divide, the Cortex-M0 integer paths and the RISC-V paths give identical
    bytes."""
    hard, other = runs["hard"].results, runs[mode].results
    assert len(hard) == len(other) == len(cases)
    diff = [i for i, (a, b) in enumerate(zip(hard, other, strict=True))
            if (a.status, a.ret, a.outs, a.exc_msg) != (b.status, b.ret, b.outs, b.exc_msg)]
    assert not diff, f"{len(diff)} cases differ from {mode}, first: case {diff[0]} ({cases[diff[0]].op})"


def test_sanitizer_is_live(tmp_path: Path) -> None:
    """The pipeline really catches an out-of-bounds access (one byte past a buffer)."""
    kdir = tmp_path / "kernels"
    shutil.copytree(KERNEL_DIR, kdir)
    src = (kdir / "activation.c").read_text()
    needle = "void mt_relu_s8_forward(const int8_t *x, int8_t *y, size_t n, int32_t zp) {\n"
    assert needle in src
    (kdir / "activation.c").write_text(src.replace(needle, needle + "    y[n] = 0;  // injected overrun\n"))
    exe = build_driver(kernel_dir=kdir)
    case = kernel_cases.make_case("relu_s8_forward", [s8([1, 2, 3]), 0, out("Y", 3)])
    outcome = run_cases_driver([case], exe, tmp_path)
    assert outcome.returncode != 0
    assert "AddressSanitizer" in outcome.stderr and "heap-buffer-overflow" in outcome.stderr
