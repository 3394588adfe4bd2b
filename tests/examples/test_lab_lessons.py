"""examples/lab_lessons: each lesson script runs in the unix MicroPython as a board's REPL runs it,
its pictures and question print, its check passes the right answer and refuses a wrong one, and
its numbers agree with the host's own reading of the model file."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from microtrain_tools import lab, mtm, paths

LESSONS = ("lesson1_int8", "lesson2_step", "lesson3_what", "lesson4_sparse", "lesson5_own")

# after main(), the right answer from what the lesson printed, then a wrong one; the results as JSON
CHECKS = """
import json, sys
import {m} as L
L.main()
r = L.last
if "{m}" == "lesson1_int8":
    right = r["ask"]["q"] * r["ask"]["scale"]; wrong = right + 0.1
elif "{m}" == "lesson2_step":
    right = r["label"]; wrong = (right + 1) % 10
elif "{m}" == "lesson3_what":
    right = min(r["rows"], key=lambda w: w["plan_bytes"])["config"]; wrong = "all"
elif "{m}" == "lesson4_sparse":
    right = round(r["saved_pct"], 1); wrong = right + 5
ok = L.check() if "{m}" == "lesson5_own" else L.check(right)
bad = False if "{m}" == "lesson5_own" else L.check(wrong)
print("RESULT", json.dumps({{"ok": ok, "bad": bad, "last": r}}))
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("lessons")
    lab.lesson_files(d)
    return d


def _run(work: Path, m: str) -> tuple[str, dict[str, Any]]:
    (work / "run.py").write_text(CHECKS.format(m=m))
    env = dict(os.environ, MICROPYPATH=f"{paths.natmod_dir('x64')}:{paths.PYTHON_LIB}")
    p = subprocess.run([paths.micropython(), "run.py"], cwd=work, env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(res) == 1, p.stdout[-3000:]
    return p.stdout, json.loads(res[0][7:])


@pytest.mark.parametrize("m", LESSONS)
def test_lesson_runs_and_its_check_passes(work: Path, m: str) -> None:
    out, r = _run(work, m)
    n = LESSONS.index(m) + 1
    assert f"check lesson {n}: passed" in out
    assert r["ok"] is True and r["bad"] is False
    last = r["last"]
    model = mtm.load(work / "digits.mtm")
    if m == "lesson1_int8":
        # the int8 weights and scales shown are the file's (read here by the host's own reader),
        # and each is within half a step of the PyTorch float weight it was made from
        ly = model.layers[0]
        w = model.tensors[ly.weight].data.reshape(-1)
        s = model.tensors[model.tensors[ly.weight].qscales].data
        assert last["w_int8"] == w.astype(int).tolist()
        assert np.allclose(last["w_scale"], s)
        fw = np.array(last["w_float"]).reshape(len(s), -1)
        assert np.all(np.abs(fw - w.reshape(len(s), -1) * s[:, None]) <= s[:, None] / 2 + 1e-6)
        assert last["agree"] >= 0.9 * last["n"]
    elif m == "lesson2_step":
        assert last["pred_before"] != last["label"] and last["loss_after"] < last["loss"]
    elif m == "lesson3_what":
        plan = {w["config"]: w["plan_bytes"] for w in last["rows"]}
        assert plan["last:1"] < plan["last:2"] < plan["all"]
        assert all(w["heap_bytes"] > 0 for w in last["rows"])  # the unix port's gc measures it
    elif m == "lesson4_sparse":
        heat = np.array(last["heat"])
        assert heat.shape == (30, sum(last["widths"]))
        assert heat[:, -last["widths"][-1]:].all()  # the classifier stays dense
        assert last["saved_pct"] == pytest.approx(100 * (1 - heat.mean()))
        assert 0 < last["saved_pct"] < 100
    else:
        assert last["acc_after"] - last["acc_before"] >= 0.2
