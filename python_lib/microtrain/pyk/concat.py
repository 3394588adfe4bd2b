# channel concatenation and its grad input (concat.c).
from microtrain.fmt import MAX_ELEMS
from microtrain.pyk.checks import _chk, _desc, _in8, _int, _nover, _out8, _ve
from microtrain.pyk.quant import _requant


def _concat_check(d):
    hw, c1, c2, z1, z2, zo, m1, sh1, m2, sh2 = d
    if hw < 1 or hw > MAX_ELEMS:
        return "hw must be in 1..2^26"
    if c1 < 1 or c2 < 1 or c1 + c2 > 65535:
        return "c1, c2 must be >= 1 with c1 + c2 <= 65535"
    if hw * (c1 + c2) > MAX_ELEMS:
        return "tensor too large (more than 2^26 elements)"
    if not (-128 <= z1 <= 127 and -128 <= z2 <= 127 and -128 <= zo <= 127):
        return "zero points must be in -128..127"
    if m1 < 0 or m2 < 0:
        return "multipliers must be >= 0 (Q31)"
    if sh1 < -31 or sh1 > 7 or sh2 < -31 or sh2 > 7:
        return "shifts sh1, sh2 must be in -31..7"
    return None


def _concat_desc(fn, desc):
    d = _desc(fn, desc, 10)
    _chk(fn, "desc", _concat_check(d))
    return d


def _part(X, hw, c, zp, m, sh, zo, c_out, off, y, ym):
    if m == 0x40000000 and sh == -15 and zp == zo:  # factor 1, same zero point: a copy
        for p in range(hw):
            y[p * c_out + off:p * c_out + off + c] = X[p * c:p * c + c]
        return
    rq = _requant
    i = 0
    for p in range(hw):
        o = p * c_out + off
        for k in range(c):
            r = rq((X[i] - zp) << 16, m, sh) + zo
            y[o + k] = (127 if r > 127 else (-128 if r < -128 else r)) & ym
            i += 1


def concat_s8_forward(desc, x1, x2, y):
    fn = "concat_s8_forward"
    d = _concat_desc(fn, desc)
    hw, c1, c2, z1, z2, zo, m1, sh1, m2, sh2 = d
    A = _in8(fn, "x1", x1, hw * c1)
    B = _in8(fn, "x2", x2, hw * c2)
    ym = _out8(fn, "y", y, hw * (c1 + c2))
    _nover(fn, "y", y, "x1", x1)
    _nover(fn, "y", y, "x2", x2)
    _part(A, hw, c1, z1, m1, sh1, zo, c1 + c2, 0, y, ym)
    _part(B, hw, c2, z2, m2, sh2, zo, c1 + c2, c1, y, ym)


def concat_s8_grad_input(desc, e, part, ein):
    fn = "concat_s8_grad_input"
    d = _concat_desc(fn, desc)
    hw, c1, c2 = d[0], d[1], d[2]
    c_out = c1 + c2
    E = _in8(fn, "e", e, hw * c_out)
    part = _int(fn, "part", part)
    if part != 0 and part != 1:
        raise _ve(fn, "part", "must be 0 or 1, got " + str(part))
    c = c2 if part else c1
    off = c1 if part else 0
    _out8(fn, "ein", ein, hw * c)
    _nover(fn, "ein", ein, "e", e)
    for p in range(hw):
        ein[p * c:p * c + c] = E[p * c_out + off:p * c_out + off + c]
