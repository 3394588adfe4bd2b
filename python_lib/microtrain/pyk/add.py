# residual add forward and error merge (add.c).
from array import array

from microtrain.pyk.checks import _add_check, _chk, _desc, _in8, _in32, _int, _nover, _out8, _qcheck, _ve
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


def conv2d_add_s8_forward(desc, x, w, bias, mult, shift, add_desc, side, skip, tile):
    # add.c: the conv's output rows a block at a time into tile, each block added
    # into skip in place; every block is the conv of the input rows it reads
    fn = "conv2d_add_s8_forward"
    from microtrain.pyk.conv2d import _conv_bufs, _conv_desc, conv2d_s8_forward

    d = _conv_desc(fn, desc)
    if len(d) == 19:
        raise _ve(fn, "desc", "a dilated conv has no row-block form")
    nin, nout, nw = _conv_bufs(d)
    out_c = d[5]
    _in8(fn, "x", x, nin)
    _in8(fn, "w", w, nw)
    B = _in32(fn, "bias", bias, out_c)
    MU = _in32(fn, "mult", mult, out_c)
    SH = _in32(fn, "shift", shift, out_c)
    _qcheck(fn, B, MU, SH, out_c)
    a = list(_in32(fn, "add_desc", add_desc, 13))
    _chk(fn, "add_desc", _add_check(a))
    if a[0] != nout:
        raise _ve(fn, "add_desc", "n is %d, the conv output has %d elements" % (a[0], nout))
    side = _int(fn, "side", side)
    if side != 0 and side != 1:
        raise _ve(fn, "side", "must be 0 or 1, got " + str(side))
    _out8(fn, "skip", skip, nout)
    _out8(fn, "tile", tile, -1)
    in_h, in_w, in_c, out_h, out_w = d[:5]
    row = out_w * out_c
    if len(tile) < row:
        raise _ve(fn, "tile", "has %d elements, expected at least %d (one output row)" % (len(tile), row))
    for o, on in ((skip, "skip"), (tile, "tile")):
        _nover(fn, on, o, "x", x)
        _nover(fn, on, o, "w", w)
    _nover(fn, "tile", tile, "skip", skip)
    rows = min(len(tile) // row, out_h)
    q = array("i", d)
    xv, sv, tv = memoryview(x), memoryview(skip), memoryview(tile)
    for r0 in range(0, out_h, rows):
        r1 = min(r0 + rows, out_h)
        top = r0 * d[8] - d[10]
        q[3] = r1 - r0
        q[0], q[10] = (in_h - top, 0) if top >= 0 else (in_h, -top)
        t = tv[:(r1 - r0) * row]
        conv2d_s8_forward(q, xv[max(top, 0) * in_w * in_c:], w, bias, mult, shift, t)
        a[0] = len(t)
        s = sv[r0 * row:r1 * row]
        add_s8_forward(array("i", a), t if side == 0 else s, s if side == 0 else t, s)
