"""Non-finite values in the update primitives (docs/numerics.md, "Non-finite values"):
native (update.c) and pure Python (pyk/update.py) give the same bits, and those of the
documented rule (IEEE float32 operations; sqrt of a negative = 0x7FC00000, of a NaN the
NaN quietened, of +inf +inf), computed here independently with numpy."""

from __future__ import annotations

import numpy as np

from support.harness import run_micropython

# v (Adam's second moments) with every kind of value; g = 1, m = 0
V_BITS = [0xBF800000, 0x7FA00000, 0xFFC12345, 0x7F800000, 0xFF800000, 0x80000000, 0x40800000, 0x00000001]
B1, B2, B1T, B2T, EPS = 0.9, 0.999, 0.9, 0.999, 1e-8

SCRIPT = r"""
import struct
from array import array
import _microtrain as N
from microtrain.pyk import kernel

def run(fn):
    n = VN
    g = array('f', [1.0] * n)
    m = array('f', [0.0] * n)
    v = array('f', struct.pack('<%dI' % n, *VB))
    fn(g, m, v, n, None, B1, B2, B1T, B2T, EPS)
    return bytes(g).hex() + ' ' + bytes(v).hex()

def std(fn):
    g = array('f', struct.pack('<4I', *SB))
    fn(g, 4, None, 1)
    return bytes(g).hex()

def apply(fn):
    # channel 0 cannot be updated (its scale is inf): both raise, with or without rng
    out = []
    for rng in (-1, 44257):
        w_scale = array('f', [float('inf'), 0.02])
        try:
            r = fn(array('b', [1, -2, 3, 4]), w_scale, array('i', [5, 6]), array('i', [1 << 30] * 2),
                   array('i', [-7, -7]), array('f', [1e-3] * 4), array('f', [1e-3] * 2), None, None, None,
                   0.01, 0.02, 0.05, rng, array('f', [0.0, 0.0]))
            out.append('R%d' % r)
        except ValueError as e:
            out.append('E:' + str(e).replace(' ', '_'))
    return ','.join(out)

print('APPLY', apply(N.update_s8_apply), apply(kernel('update_s8_apply')))
print('ADAM', run(N.update_f32_adam), run(kernel('update_f32_adam')))
print('STD', std(N.update_f32_standardize), std(kernel('update_f32_standardize')))
"""


def _f(bits: list[int]) -> np.ndarray:
    return np.array(bits, dtype=np.uint32).view(np.float32)


def _sqrt(x: np.float32) -> np.float32:
    b = int(np.array([x], dtype=np.float32).view(np.uint32)[0])
    if b & 0x7FFFFFFF == 0 or b == 0x7F800000:
        return x
    if b > 0x7F800000:
        return _f([b | 0x00400000 if b & 0x7FFFFFFF > 0x7F800000 else 0x7FC00000])[0]
    return np.sqrt(x)


def _adam_expected() -> tuple[str, str]:
    f = np.float32
    with np.errstate(all="ignore"):
        b1, b2, c1, c2 = f(B1), f(B2), f(1) - f(B1T), f(1) - f(B2T)
        a1, a2 = f(1) - b1, f(1) - b2
        gs, vs = [], []
        for v in _f(V_BITS):
            d, m = f(1.0), f(0.0)
            m1 = f(b1 * m) + f(a1 * d)
            m2 = f(b2 * v) + f(f(a2 * d) * d)
            gs.append(f(m1 / c1) / f(_sqrt(f(m2 / c2)) + f(EPS)))
            vs.append(m2)
    return (np.array(gs, dtype=np.float32).tobytes().hex(), np.array(vs, dtype=np.float32).tobytes().hex())


def test_update_primitives_agree_on_non_finite_values() -> None:
    std_bits = [0x3F800000, 0x7FC00000, 0x40000000, 0x40400000]  # a NaN among the gradients
    code = (SCRIPT.replace("VN", str(len(V_BITS))).replace("VB", repr(V_BITS)).replace("SB", repr(std_bits))
            .replace("B1T", repr(B1T)).replace("B2T", repr(B2T)).replace("B1", repr(B1))
            .replace("B2", repr(B2)).replace("EPS", repr(EPS)))
    p = run_micropython(code)
    assert p.returncode == 0, p.stderr
    out = {ln.split()[0]: ln.split()[1:] for ln in p.stdout.splitlines()}
    native_g, native_v, pure_g, pure_v = out["ADAM"]
    assert (native_g, native_v) == (pure_g, pure_v), "native and pure-Python Adam differ on non-finite state"
    assert (native_g, native_v) == _adam_expected()
    g = np.frombuffer(bytes.fromhex(native_g), dtype=np.float32)
    assert g.view(np.uint32)[0] == 0x7FC00000  # v = -1: sqrt of a negative
    assert g[3] == 0.0  # v = +inf: 1 / inf
    assert out["STD"][0] == out["STD"][1], "native and pure-Python standardize differ on a NaN"
    # a refused channel 0 used to return -1 - 0 = -1, the success value without rng: silently nothing
    assert out["APPLY"][0] == out["APPLY"][1]
    assert all(v.startswith("E:update_s8_apply:_gw:_channel_0") for v in out["APPLY"][0].split(",")), out
