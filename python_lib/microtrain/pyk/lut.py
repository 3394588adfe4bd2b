# Lookup-table activations (lut.c): forward by table, backward by the
# per-input derivative table and dyn_requant.
from microtrain.pyk.checks import _in8, _in32, _nover, _out8, _ve
from microtrain.pyk.quant import _dyn

_DMAX = 16777215


def lut_s8_forward(x, table, y):
    fn = "lut_s8_forward"
    X = _in8(fn, "x", x, -1)
    n = len(X)
    T = _in8(fn, "table", table, 256)
    ym = _out8(fn, "y", y, n)
    _nover(fn, "y", y, "table", table)
    for i in range(n):
        y[i] = T[X[i] + 128] & ym


def lut_s8_grad_input(x, e, dtable, ein):
    fn = "lut_s8_grad_input"
    X = _in8(fn, "x", x, -1)
    n = len(X)
    E = _in8(fn, "e", e, n)
    D = _in32(fn, "dtable", dtable, 256)
    for i in range(256):
        d = D[i]
        if d > _DMAX or d < -_DMAX:
            raise _ve(fn, "dtable", "dtable[%d] = %d is outside -16777215..16777215" % (i, d))
    om = _out8(fn, "ein", ein, n)
    _nover(fn, "ein", ein, "x", x)
    acc = [0] * n
    for i in range(n):
        acc[i] = E[i] * D[X[i] + 128]
    return _dyn(acc, n, ein, om)
