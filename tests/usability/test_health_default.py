"""Training health by default: from-scratch training on the reliability campaign's case with
the Trainer's defaults either learns or says "saturated" after its first epoch, proposing the
adaptive ranges (not a lower learning rate); the full health record names the saturation the
same way; "not learning" is not said while the accuracy is well above chance."""

from __future__ import annotations

import pytest

from support.harness import ensure_natmod
from support.kernel_harness import run_micropython
from support.reliability.train_files import files


@pytest.fixture(scope="module", autouse=True)
def _natmod() -> None:
    ensure_natmod()


def test_from_scratch_with_the_defaults_learns_or_says_saturated() -> None:
    from support.reliability import scratch as sc

    r = sc.run(epochs=1, adapt=None)  # Trainer(...) without health / adapt_ranges arguments
    warned = [w for w in r.first["warnings"] if w.startswith("saturated")]
    assert r.acc >= 0.95 or warned, r
    for w in warned:
        assert "adapt_ranges=True" in w and "learning rate" not in w, w
    full = sc.run(epochs=1, adapt=False)  # health=True: every trained layer counted
    assert any(w.startswith("saturated: ") and "adapt_ranges=True" in w for w in full.first["warnings"]), full
    assert not any("lower the learning rate" in w for w in full.first["warnings"]), full


NOT_LEARNING = """
import sys
import microtrain as mt
m = mt.load(sys.argv[1])
tr = mt.Trainer(m, train="last:1", health=True)
n = m.output.numel
# an epoch whose mean loss is above chance (its first samples) while its accuracy rose well
# above chance, then one that is at chance in both
for loss, acc in ((2.6, 0.6), (2.6, 0.1)):
    print("WARN", acc, tr._mon.epoch(loss, n, acc)["warnings"])
"""


def test_not_learning_only_when_the_accuracy_does_not_rise() -> None:
    model, _ = files(24)
    p = run_micropython(NOT_LEARNING, [str(model)], heapsize="16M")
    assert p.returncode == 0, p.stdout + p.stderr
    rising, flat = (ln for ln in p.stdout.splitlines() if ln.startswith("WARN "))
    assert "not learning" not in rising, p.stdout
    assert "not learning" in flat, p.stdout
