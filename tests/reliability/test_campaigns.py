"""Short runs of the reliability campaigns (``make reliability`` runs the long ones):
libFuzzer on the loader and kernels, abusive calls (native == pure-Python verdicts),
kill -9 during saves, small heaps, bad inputs, failed training steps, split fits and a soak."""

from __future__ import annotations

import pytest

from support.harness import ensure_natmod
from support.reliability import abuse, bad_inputs, failures, fuzz, heaps, kill, resume, soak


@pytest.fixture(scope="module", autouse=True)
def _natmod() -> None:
    ensure_natmod()


def test_libfuzzer_loader_and_kernels_short() -> None:
    if fuzz.clang() is None:
        pytest.fail("clang-14 with libFuzzer is required "
                    "(tools/setup.sh installs clang-14 libclang-rt-14-dev)")
    r = fuzz.run(10_000, seed=11)
    assert r.crashes == 0, "\n".join(r.log)
    assert r.execs == 10_000


def test_abusive_calls_native_equals_pure_python() -> None:
    r = abuse.run(3_000, seed=7)
    assert r.calls == 3_000
    assert r.crashes == 0 and r.mismatches == 0, "\n".join(r.lines)


def test_kill_during_save_never_tears_and_resumes_exactly() -> None:
    r = kill.run(3, seed=5)
    assert r.kills == 3 and r.torn == 0 and r.resume_exact == 3, "\n".join(r.log)


def test_small_heaps_fail_cleanly() -> None:
    r = heaps.run([60_000, 140_000, 220_000, 400_000, 1_000_000])
    assert r.crashes == 0, "\n".join(r.log)
    assert r.ok >= 1  # the largest heap trains and saves


def test_bad_inputs_clear_errors_and_model_unchanged() -> None:
    r = bad_inputs.run()
    assert r.cases >= 100
    assert r.clear == r.cases and r.unchanged == r.cases and r.same_checkpoint, "\n".join(r.log)


def test_failed_steps_change_nothing() -> None:
    r = failures.run(modes=("mixed",))
    assert r.cases >= 50 and r.runs == 9, "\n".join(r.log)
    assert r.modes == {"Sums", "IntoMomentum", "StepInBackward"}, r.modes
    assert r.unchanged == r.cases and r.same_checkpoint == r.runs, "\n".join(r.log)


def test_split_fits_are_exact() -> None:
    r = resume.run(epochs=3)
    assert r.splits >= 20, "\n".join(r.log)
    assert r.exact == r.splits, "\n".join(r.log)


def test_soak_short_no_leak() -> None:
    r = soak.run(1_500, round_steps=250)
    assert r.steps == 1_500 and len(r.live) == 6
    assert r.leak == 0, "\n".join(r.log)
