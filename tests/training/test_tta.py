"""Test-time adaptation without labels (python_lib/microtrain/tta.py) in the real micropython,
on the training tests' CNN: a stream whose sensor gain and offset drifted (int8 inputs moved
by the host), labels never given. The parameters step, the stream's accuracy rises, reset()
gives back the model's own outputs bit for bit, and a step size far too large makes the guard
stop and roll back to the last healthy window."""

from __future__ import annotations

import re

import numpy as np

from support.harness import run_micropython
from support.training_cases import Setup, labels_of

CODE = """
import microtrain as mt
from microtrain.tta import TTA
m = mt.load({model!r})
with open({stream!r}, "rb") as f:
    data = f.read()
n, k = {n}, {numel}
xs = [data[i * k:(i + 1) * k] for i in range(n)]
ys = {labels!r}
own = [bytes(m.forward(x)) for x in xs[:20]]
def acc():
    return sum(m.predict(xs[i]) == ys[i] for i in range(n)) / n
print("BEFORE", acc())
t = TTA(m, lr={lr}, floor=0.6, seed=2)
for p in range({passes}):
    for x in xs:
        t.add(x)
print("AFTER", acc(), t.steps, t.n_params, t.stopped, t.div, t.base_div)
print(t)
good = list(t._good)
print("ROLLED", list(t.p) == good)
t.reset()
print("RESET", [bytes(m.forward(x)) for x in xs[:20]] == own)
"""


def _drifted(s: Setup, gain: float, offset: int) -> tuple[np.ndarray, np.ndarray]:
    m = s.m
    zp = m.tensors[m.input].zero_point
    x = s.xs.astype(np.float64)
    q = np.clip(np.round((x - zp) * gain + zp + offset), -128, 127).astype(np.int8)
    return q, labels_of(s)


def _run(s: Setup, tmp, lr: float, passes: int) -> str:
    q, y = _drifted(s, 0.8, 12)
    path = tmp / "stream.bin"
    q.tofile(path)
    code = CODE.format(model=str(s.path), stream=str(path), n=len(y), numel=s.numel,
                       labels=[int(v) for v in y], lr=lr, passes=passes)
    p = run_micropython(code, timeout=300)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return p.stdout


def test_tta_adapts_a_drifted_stream_without_labels(setups: dict[str, Setup], tmp_path) -> None:
    out = _run(setups["cnn"], tmp_path, 1.0, 2)
    before = float(re.search(r"BEFORE (\S+)", out).group(1))
    m = re.search(r"AFTER (\S+) (\d+) (\d+) (\w+)", out)
    assert m, out
    after, steps, n_params = float(m.group(1)), int(m.group(2)), int(m.group(3))
    assert steps > 10 and n_params == 2 * setups["cnn"].m.tensors[setups["cnn"].m.layers[0].output].shape[-1]
    assert m.group(4) == "False"
    assert after > before, (before, after)
    assert "RESET True" in out


def test_tta_guard_stops_and_rolls_back(setups: dict[str, Setup], tmp_path) -> None:
    out = _run(setups["cnn"], tmp_path, 300.0, 2)
    m = re.search(r"AFTER (\S+) (\d+) (\d+) (\w+) (\S+) (\S+)", out)
    assert m, out
    assert m.group(4) == "True", out  # the guard fired
    assert float(m.group(5)) < 0.6 * float(m.group(6))  # on a collapse of the predictions' diversity
    assert "stopped (collapse)" in out and "ROLLED True" in out and "RESET True" in out
