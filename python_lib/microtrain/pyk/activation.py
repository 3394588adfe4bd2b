# relu / relu6 forward and backward (activation.c).
from microtrain.pyk.checks import _in8, _int, _out8, _ve


def _zp(fn, name, v):
    v = _int(fn, name, v)
    if v < -128 or v > 127:
        raise _ve(fn, name, "must be in -128..127, got " + str(v))
    return v


def relu_s8_forward(x, zp, y):
    fn = "relu_s8_forward"
    X = _in8(fn, "x", x, -1)
    n = len(X)
    zp = _zp(fn, "zp", zp)
    ym = _out8(fn, "y", y, n)
    for i in range(n):
        v = X[i]
        y[i] = (zp if v < zp else v) & ym


def relu6_s8_forward(x, zp, q6, y):
    fn = "relu6_s8_forward"
    X = _in8(fn, "x", x, -1)
    n = len(X)
    zp = _zp(fn, "zp", zp)
    q6 = _zp(fn, "q6", q6)
    ym = _out8(fn, "y", y, n)
    if q6 < zp:
        raise _ve(fn, "q6", "must be >= zp")
    for i in range(n):
        v = X[i]
        if v < zp:
            v = zp
        y[i] = (q6 if v > q6 else v) & ym


def relu_s8_backward(y, zp, e):
    fn = "relu_s8_backward"
    Y = _in8(fn, "y", y, -1)
    n = len(Y)
    zp = _zp(fn, "zp", zp)
    _out8(fn, "e", e, n)
    for i in range(n):
        if Y[i] <= zp:
            e[i] = 0


def relu6_s8_backward(y, zp, q6, e):
    fn = "relu6_s8_backward"
    Y = _in8(fn, "y", y, -1)
    n = len(Y)
    zp = _zp(fn, "zp", zp)
    q6 = _zp(fn, "q6", q6)
    _out8(fn, "e", e, n)
    if q6 < zp:
        raise _ve(fn, "q6", "must be >= zp")
    for i in range(n):
        v = Y[i]
        if v <= zp or v >= q6:
            e[i] = 0
