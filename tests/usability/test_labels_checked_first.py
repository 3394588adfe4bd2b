"""A bad sample in the middle of a data set: fit refuses the data set before the first
update, naming the sample, the rule and what to do; the model in memory and its file stay
as they were, byte for byte (an in-RAM list, a FileDataset, a regression target, eval
samples)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.harness import ensure_natmod
from support.kernel_harness import run_micropython
from support.reliability.train_files import files


@pytest.fixture(scope="module", autouse=True)
def _natmod() -> None:
    ensure_natmod()


SCRIPT = """
import sys
from array import array
import microtrain as mt
from microtrain.data import FileDataset
model, data, work, case = sys.argv[1:5]
ds = FileDataset(data)
good = [(bytes(ds[i][0]), ds[i][1]) for i in range(len(ds))]
m = mt.load(model)
loss = "mse" if case == "target_nan" else "xent"
tr = mt.Trainer(m, train="last:2", loss=loss)
m.save(work + "/before.mtm")
bad = list(good)
evals = None
if case == "label":
    bad[7] = (bad[7][0], 12)
elif case == "x_short":
    bad[11] = (bad[11][0][:-1], bad[11][1])
elif case == "x_float":
    bad[3] = (array("f", [0.5] * m.input.numel), bad[3][1])
elif case == "target_nan":
    n = m.output.numel
    bad = [(x, array("f", [1.0 if k == y else 0.0 for k in range(n)])) for x, y in good]
    bad[5][1][2] = float("nan")
elif case == "mtd":
    bad[9] = (bad[9][0], 200)
    FileDataset.write(work + "/bad.mtd", bad)
    bad = FileDataset(work + "/bad.mtd")
elif case == "eval":
    evals = list(good)
    evals[4] = (evals[4][0], -1)
    bad = good
try:
    tr.fit(bad, 2, verbose=False, eval_samples=evals)
    print("ACCEPTED")
except (ValueError, TypeError) as e:
    print("REFUSED", type(e).__name__, e)
m.save(work + "/after.mtm")
print("STEPS", m.train_steps, tr.steps, tr.epoch)
"""

CASES = {  # case: what the message must name
    "label": ("fit: sample 7: label must be an int class index in 0..9, got 12", "fix or drop the sample"),
    "x_short": ("fit: sample 11: x must be an int8 buffer", "of 64 values", "got bytes of 63"),
    "x_float": ("fit: sample 3: x must be an int8 buffer", "got array of 64"),
    "target_nan": ("fit: sample 5: target[2] is nan: not finite", "fix or drop the sample"),
    "mtd": ("fit: sample 9: label must be an int class index in 0..9, got 200", "nothing was trained"),
    "eval": ("fit: eval_samples: sample 4: label must be an int class index in 0..9, got -1", "fix or drop"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_sample_is_refused_before_anything_changes(case: str, tmp_path: Path) -> None:
    model, data = files(24)
    p = run_micropython(SCRIPT, [str(model), str(data), str(tmp_path), case], heapsize="16M")
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "REFUSED" in out, out
    for part in CASES[case]:
        assert part in out, out
    assert "\n" not in out.split("REFUSED", 1)[1].strip().split("\nSTEPS")[0]  # one line
    assert "STEPS 0 0 0" in out  # no update, no sample, no epoch
    assert (tmp_path / "after.mtm").read_bytes() == (tmp_path / "before.mtm").read_bytes()
