"""Integer-only arches (armv6m: no FPU, no `_f32` kernels) can still train.

There the int32 weight-gradient kernels hand MicroPython the raw sums, and
MicroPython scales and accumulates them. This test runs, in the real
interpreter, per-sample gradients of a conv and a linear layer both ways and
checks the int32 path times its scale equals the float32 kernel's
accumulation (float32 vs MicroPython's double: within 1e-6 of the largest
gradient).
"""

from __future__ import annotations

from support.harness import run_micropython

SCRIPT = r"""
import _microtrain as mt
from array import array

seed = [12345]
def rnd(n, lo, hi):
    out = bytearray(n)
    for i in range(n):
        seed[0] = (seed[0] * 1103515245 + 12345) & 0x7FFFFFFF
        out[i] = (lo + seed[0] % (hi - lo + 1)) & 0xFF
    return out

def check(name, grad_i32, grad_f32, desc, nw, nb, shapes):
    x_n, e_n = shapes
    gw_f = array('f', bytes(4 * nw)); gb_f = array('f', bytes(4 * nb))
    gw_py = [0.0] * nw; gb_py = [0.0] * nb
    gw_i = array('i', bytes(4 * nw)); gb_i = array('i', bytes(4 * nb))
    for sample in range(4):
        x = rnd(x_n, -128, 127); e = rnd(e_n, -40, 40)
        s_x, s_e = 0.02 + 0.01 * sample, 2.0 ** (-9 - sample)
        grad_f32(desc, x, e, None, s_x * s_e, s_e, gw_f, gb_f)
        grad_i32(desc, x, e, None, gw_i, gb_i)
        ws, bs = s_x * s_e, s_e
        for i in range(nw):
            gw_py[i] += ws * gw_i[i]
        for i in range(nb):
            gb_py[i] += bs * gb_i[i]
    worst = 0.0
    nonzero = 0
    for a, b in ((gw_py, gw_f), (gb_py, gb_f)):
        top = max(abs(v) for v in a)
        for i in range(len(a)):
            if a[i] != 0.0:
                nonzero += 1
            worst = max(worst, abs(a[i] - b[i]) / top)
    print(name, nonzero, worst)

conv = array('i', [6, 6, 4, 3, 3, 8, 3, 3, 2, 2, 1, 1, 1, -3, 5, -128, 127])
check('conv', mt.conv2d_s8_grad_weight, mt.conv2d_s8_grad_weight_f32, conv, 8 * 9 * 4, 8, (144, 72))
lin = array('i', [40, 10, 7, 0, -128, 127])
check('linear', mt.linear_s8_grad_weight, mt.linear_s8_grad_weight_f32, lin, 400, 10, (40, 10))
print('done')
"""


def test_int32_grads_plus_python_accumulation_equal_f32_kernels() -> None:
    p = run_micropython(SCRIPT)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split("\n")
    assert lines[-2] == "done", p.stdout
    for line in lines[:2]:
        name, nonzero, worst = line.split()
        assert int(nonzero) > 100 if name == "conv" else int(nonzero) > 50, line
        assert float(worst) < 1e-6, line
