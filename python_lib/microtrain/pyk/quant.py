# Integer requantisation helpers (mt_quant.h, quant.c) and dyn_requant_s8.
from microtrain.pyk.checks import I32, M32, _in32, _out8


def _requant(acc, m, shift):
    # requant(acc, m, shift) of docs/numerics.md for one value.
    if shift > 0:
        acc = ((acc << shift) + I32 & M32) - I32
    h = (acc * m + 0x40000000) >> 31
    if shift < 0:
        e = -shift
        mk = (1 << e) - 1
        r = h >> e
        if (h & mk) > (mk >> 1) + (1 if h < 0 else 0):
            r += 1
        return r
    return h


def _rq_params(mult, shift, n):
    # Per-channel (m, left, right) lists for the inlined requant.
    M = [0] * n
    L = [0] * n
    R = [0] * n
    for i in range(n):
        s = shift[i]
        M[i] = mult[i]
        if s > 0:
            L[i] = s
        else:
            R[i] = -s
    return M, L, R


def _dyn_shift(m):
    s = 0
    while s < 31 and (m + ((1 << (s - 1)) if s else 0)) >> s > 127:
        s += 1
    return s


def _dyn(acc, n, out, om):
    # dyn_requant of acc[0..n) into out (int8, stored as v & om); returns shift.
    if n == 0:
        return 0
    hi = max(acc)
    lo = min(acc)
    m = hi if hi > -lo else -lo
    s = _dyn_shift(m)
    if s == 0:
        for i in range(n):
            out[i] = acc[i] & om
        return 0
    half = 1 << (s - 1)
    for i in range(n):
        v = acc[i]
        if v >= 0:
            out[i] = ((v + half) >> s) & om
        else:
            out[i] = -((half - v) >> s) & om
    return s


def _dyn_act(acc, n, out, om, lo, hi):
    # dyn_requant of acc[0..n) into out, which holds the activation y on entry: kept
    # where lo < y < hi, else 0 (mt_dyn_requant_act_s8); the shift from all of acc.
    if n == 0:
        return 0
    a = max(acc)
    b = min(acc)
    s = _dyn_shift(a if a > -b else -b)
    half = (1 << (s - 1)) if s else 0
    for i in range(n):
        y = out[i]
        if om != -1 and y > 127:  # an unsigned buffer holds y & 255
            y -= 256
        if lo < y < hi:
            v = acc[i]
            out[i] = (((v + half) >> s) if v >= 0 else -((half - v) >> s)) & om
        else:
            out[i] = 0
    return s


def _zero32(a, n):
    for i in range(n):
        a[i] = 0


def dyn_requant_s8(acc, out):
    fn = "dyn_requant_s8"
    A = _in32(fn, "acc", acc, -1)
    n = len(A)
    om = _out8(fn, "out", out, n)
    return _dyn(A, n, out, om)
