# residual add forward and error merge (add.c).
from microtrain.pyk.checks import _add_check, _chk, _desc, _in8, _int, _out8, _ve
from microtrain.pyk.quant import _dyn, _requant


def add_s8_forward(desc, x1, x2, y):
    fn = "add_s8_forward"
    d = _desc(fn, desc, 13)
    _chk(fn, "desc", _add_check(d))
    n, z1, z2, zo, m1, sh1, m2, sh2, mo, sho, ls, amin, amax = d
    A = _in8(fn, "x1", x1, n)
    B = _in8(fn, "x2", x2, n)
    ym = _out8(fn, "y", y, n)
    lo = amin - zo
    hi = amax - zo
    sc = 1 << ls
    rq = _requant
    for i in range(n):
        a = rq((A[i] - z1) * sc, m1, sh1)
        b = rq((B[i] - z2) * sc, m2, sh2)
        r = rq(a + b, mo, sho)
        if r < lo:
            r = lo
        elif r > hi:
            r = hi
        y[i] = (r + zo) & ym


def _ratio(fn, name, v):
    r = _int(fn, name, v)
    if r < 0 or r > 32768:
        raise _ve(fn, name, "must be in 0..32768, got " + str(r))
    return r


def add_s8_grad_merge(ea, ra, eb, rb, out):
    fn = "add_s8_grad_merge"
    A = _in8(fn, "ea", ea, -1)
    n = len(A)
    ra = _ratio(fn, "ra", ra)
    B = _in8(fn, "eb", eb, n)
    rb = _ratio(fn, "rb", rb)
    om = _out8(fn, "out", out, n)
    acc = [0] * n
    for i in range(n):
        acc[i] = A[i] * ra + B[i] * rb
    return _dyn(acc, n, out, om)
