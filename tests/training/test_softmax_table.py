"""The softmax exp table of cross-entropy (python_lib/microtrain/quant.py ``softmax_lut``,
``Model.lut``), in the real micropython binary.

The table stops after its last nonzero entry (softmax_xent_s8 reads d >= len(lut) as 0,
docs/numerics.md): for each scale, the trimmed table equals the host reference's
(``train_ref.softmax_lut``, the device's exp) and the prefix of the full 256-entry table made
into a given array, whose tail is all zero; an array too short is replaced, a longer one keeps
its length with a zero tail; the native and pure-Python kernels give the same bits with the
trimmed and the full table, for logits farther from the max than the trimmed length.
``Model.lut()`` makes the table again when the output scale changes, in the same array unless
the new table is longer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from microtrain_tools import convert as cv
from microtrain_tools import mtm
from microtrain_tools.reference import oracle
from microtrain_tools.reference import train_ref as tr
from support.harness import ensure_natmod, run_micropython

# from every entry nonzero (256) to a single one; 0.13835299015045166: the transfer CNN's output
SCALES = [0.001, 0.0459, 0.05, 0.13835299015045166, 0.5, 1.0, 11.0, 12.0, 30.0]

TABLES = """
from array import array
import _microtrain
from microtrain.pyk.softmax_xent import softmax_xent_s8 as pure
from microtrain.quant import softmax_lut, zeros
for s in %r:
    t = softmax_lut(s)
    f = softmax_lut(s, zeros("I", 256))
    short = zeros("I", 1)
    r = softmax_lut(s, short)
    big = array("I", [12345] * 300)
    softmax_lut(s, big)
    print("T", repr((s, list(t), list(f), len(r), list(short), list(big))))
    q = array("b", [(i * 37) %% 256 - 128 for i in range(40)])
    q[3] = 127
    for label in (0, 5, 3):
        got = []
        for k in (_microtrain.softmax_xent_s8, pure):
            for lut in (t, f):
                err, st = zeros("b", 40), zeros("i", 3)
                k(q, label, lut, err, st)
                got.append(list(err) + list(st))
        print("K", int(got[0] == got[1] == got[2] == got[3]))
"""


def test_trimmed_table_is_the_full_prefix() -> None:
    ensure_natmod()
    p = run_micropython(TABLES % (SCALES,))
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [ast.literal_eval(ln[2:]) for ln in p.stdout.splitlines() if ln.startswith("T ")]
    assert [r[0] for r in rows] == SCALES
    lengths = []
    for scale, t, f, n_r, short, big in rows:
        n = len(t)
        lengths.append(n)
        assert 1 <= n <= 256 and t[-1] > 0 and t[0] == 65536
        assert t == tr.softmax_lut(scale).tolist()  # the host reference of the device's exp
        assert len(f) == 256 and f[:n] == t and not any(f[n:])
        assert f == oracle.make_softmax_lut(scale).tolist()
        # too short: a new array of the table's length (filled in place when it is the one entry)
        assert n_r == n and short == ([65536] if n == 1 else [0])
        assert len(big) == 300 and big[:n] == t and not any(big[n:])
    assert lengths[0] == 256 and lengths[-1] == 1 and lengths[3] == 86
    assert lengths == sorted(lengths, reverse=True)
    k = [ln for ln in p.stdout.splitlines() if ln.startswith("K ")]
    assert k == ["K 1"] * (3 * len(SCALES)), p.stdout


MODEL_LUT = """
import microtrain as mt
m = mt.load(%r)
out = []
m.output.scale = 0.5  # (as the range adaptation sets it: health.py)
a = m.lut()
out.append((m.output.scale, list(a), 1))
m.output.scale = 1.0  # a shorter table: the same array, its tail zero
b = m.lut()
out.append((m.output.scale, list(b), int(b is a)))
m.output.scale = 0.1  # a longer one: a new array of its length
c = m.lut()
out.append((m.output.scale, list(c), int(c is a)))
out.append((m.output.scale, list(m.lut()), int(m.lut() is c)))  # the same scale: made once
print(repr(out))
"""


def test_model_lut_follows_the_output_scale(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 12), nn.ReLU(), nn.Linear(12, 5)).eval()
    x = np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32)
    path = tmp_path / "mlp.mtm"
    path.write_bytes(mtm.write(cv.convert(net, x, progress=False)))
    p = run_micropython(MODEL_LUT % str(path))
    assert p.returncode == 0, p.stdout + p.stderr
    (s_a, a, _), (s_b, b, same_b), (s_c, c, same_c), (s_d, d, same_d) = ast.literal_eval(p.stdout.strip())
    ref_a, ref_b, ref_c = (tr.softmax_lut(s).tolist() for s in (s_a, s_b, s_c))
    assert a == ref_a
    assert len(ref_b) < len(a) and same_b == 1 and len(b) == len(a)
    assert b[:len(ref_b)] == ref_b and not any(b[len(ref_b):])
    assert len(ref_c) > len(a) and same_c == 0 and c == ref_c
    assert s_d == s_c and d == c and same_d == 1
