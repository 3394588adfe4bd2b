# softmax cross-entropy of int8 logits (softmax_xent.c).
from microtrain.pyk.checks import M32, U32, _in8, _in32, _int, _nover, _out8, _out32, _ve
from microtrain.pyk.quant import _dyn_shift


def softmax_xent_s8(logits, label, lut, err, stats):
    fn = "softmax_xent_s8"
    Q = _in8(fn, "logits", logits, -1)
    c = len(Q)
    if c < 1 or c > 32767:
        raise _ve(fn, "logits", "must hold 1..32767 classes")
    label = _int(fn, "label", label)
    if label < 0 or label >= c:
        raise _ve(fn, "label", "must be in 0.." + str(c - 1) + ", got " + str(label))
    L = _in32(fn, "lut", lut, -1, U32)
    n = len(L)
    if n < 1 or n > 256:
        raise _ve(fn, "lut", "has " + str(n) + " elements, expected 1..256")
    if L[0] != 65536:
        raise _ve(fn, "lut", "lut[0] must be 65536 (exp(0) in Q16)")
    prev = 65536
    for i in range(1, n):
        v = L[i] & M32
        if v > prev:
            raise _ve(fn, "lut", "must be non-increasing (exp of -s*d)")
        prev = v
    om = _out8(fn, "err", err, c)
    _out32(fn, "stats", stats, 3)
    _nover(fn, "err", err, "logits", logits)
    qmax = max(Q)
    # a distance past the (trimmed) table reads as 0
    g = [L[qmax - q] if qmax - q < n else 0 for q in Q]
    s = 0
    for v in g:
        s += v
    half = s >> 1
    for i in range(c):
        g[i] = ((g[i] << 15) + half) // s
    g[label] = 0
    # zero-sum errors (softmax_xent.c): the smallest shift keeping the sum of
    # the other rounded errors <= 127; err[label] is minus that sum
    sh = _dyn_shift(max(g))
    while True:
        h = (1 << (sh - 1)) if sh else 0
        tot = 0
        for v in g:
            tot += (v + h) >> sh
        if tot <= 127:
            break
        sh += 1
    for i in range(c):
        err[i] = ((g[i] + h) >> sh) & om
    err[label] = -tot & om
    stats[0] = sh
    stats[1] = s
    stats[2] = qmax
    return sh
