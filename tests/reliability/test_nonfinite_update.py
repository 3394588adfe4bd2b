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


KEEP_SCRIPT = r"""
from array import array
import _microtrain as N
from microtrain.pyk import kernel

def layer(master, bad):
    # 3 channels of 2; channel 1 is refused when bad (a NaN in its gw)
    g = [1e-3, -2e-3, 5e-4, 3e-3, -1e-3, 2e-3]
    if bad:
        g[2] = float('nan')
    L = [array('b', [1, -2, 3, 4, 5, -6]), array('f', [0.02, 0.03, 0.01]), array('i', [5, -6, 7]),
         array('i', [1 << 30] * 3), array('i', [-7] * 3), array('f', g), array('f', [1e-3, -2e-3, 4e-3])]
    L += [array('f', [0.02, -0.061, 0.09, 0.12, 0.05, -0.06]), array('f', [0.1, -0.2, 0.3])] if master \
        else [None, None]
    return L

def call(fn, L, rng, scratch):
    try:
        return 'R%d' % fn(*L, None, 0.5, 0.02, 0.05, rng, scratch)
    except ValueError as e:
        return 'E:' + str(e).replace(' ', '_')

def dump(L):
    return '/'.join(bytes(x).hex() for x in L if x is not None)

def keep(fk, fa):
    out = []
    for rng in (-1, 44257):
        for master in (False, True):
            # refused channel 1: nothing but scratch written (channel 0 was planned first)
            L = layer(master, True)
            before = dump(L)
            r = call(fk, L, rng, array('f', [0.0] * 6))
            out.append(r + (':same' if dump(L) == before else ':CHANGED'))
            # accepted: the results of update_s8_apply on copies of gw and gb; gw, gb unchanged
            L, A = layer(master, False), layer(master, False)
            rk = call(fk, L, rng, array('f', [0.0] * 6))
            ra = call(fa, A, rng, array('f', [0.0] * 3))
            fresh = layer(master, False)
            kept = bytes(L[5]) == bytes(fresh[5]) and bytes(L[6]) == bytes(fresh[6])
            A[5], A[6] = L[5], L[6]
            out.append(rk + (':eq' if rk == ra and dump(L) == dump(A) and kept else ':DIFFER'))
    return ','.join(out)

print('KEEP', keep(N.update_s8_apply_keep, N.update_s8_apply),
      keep(kernel('update_s8_apply_keep'), kernel('update_s8_apply')))
"""


def test_apply_keep_refuses_a_channel_without_writing_anything() -> None:
    """update_s8_apply_keep, native and pure Python: a refused channel (a NaN in its gw) raises
    before anything but scratch is written, whichever the rounding and with or without masters;
    accepted, it gives update_s8_apply's results and returns gw / gb unchanged."""
    p = run_micropython(KEEP_SCRIPT)
    assert p.returncode == 0, p.stderr
    (line,) = [ln for ln in p.stdout.splitlines() if ln.startswith("KEEP")]
    _, native, pure = line.split()
    assert native == pure, (native, pure)
    items = native.split(",")
    assert len(items) == 8, items
    msg = ("update_s8_apply_keep: gw: channel 1: the step gives non-finite weights or a scale out of "
           "float32 range")
    for refused, accepted in zip(items[0::2], items[1::2], strict=True):
        assert refused == "E:" + msg.replace(" ", "_") + ":same", refused
        assert accepted.startswith("R") and accepted.endswith(":eq"), accepted
