# sparse-update helpers (sparse.c): per-channel L1 norms and the top-k mask.
from microtrain.pyk.checks import _in8, _in32, _int, _out8, _out32, _ve


def l1_norm_s8(e, c, norms):
    fn = "l1_norm_s8"
    E = _in8(fn, "e", e, -1)
    n = len(E)
    c = _int(fn, "c", c)
    if c < 1 or c > 65535:
        raise _ve(fn, "c", "must be in 1..65535, got " + str(c))
    npos = n // c
    if npos * c != n:
        raise _ve(fn, "e", "length " + str(n) + " is not a multiple of c = " + str(c))
    if npos >= 16777216:
        raise _ve(fn, "e", "too many positions (2^24 or more)")
    _out32(fn, "norms", norms, c)
    for k in range(c):
        s = 0
        for i in range(k, n, c):
            v = E[i]
            s += v if v >= 0 else -v
        norms[k] = s


def topk_mask(norms, k, mask):
    fn = "topk_mask"
    N = _in32(fn, "norms", norms, -1)
    c = len(N)
    if c < 1 or c > 65535:
        raise _ve(fn, "norms", "must hold 1..65535 channels")
    k = _int(fn, "k", k)
    if k < 0 or k > c:
        raise _ve(fn, "k", "must be in 0.." + str(c) + ", got " + str(k))
    _out8(fn, "mask", mask, c)
    # rank by (-norm, index): one int key each, sorted in C
    keys = [0] * c
    for i in range(c):
        keys[i] = ((0x7FFFFFFF - N[i]) << 16) | i
    keys.sort()
    for i in range(c):
        mask[i] = 0
    for j in range(k):
        mask[keys[j] & 0xFFFF] = 1
