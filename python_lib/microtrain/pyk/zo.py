# zeroth-order (SPSA) primitives (zo.c): the sign perturbation (along a Hadamard row too) and the
# stochastically rounded update of int8 weights, signs regenerated from a
# xorshift32 state (docs/numerics.md, "Zeroth order"). One loop for both:
# every pure-Python kernel module costs heap on a board.
from microtrain.pyk.checks import U32, _buf, _in8, _int, _nover, _out8, _ve

M32 = 0xFFFFFFFF


def _xs(r):
    r ^= (r << 13) & M32
    r ^= r >> 17
    return r ^ ((r << 5) & M32)


def _zo_index(fn, name, v):
    # each one's type, then its range (row's range before i0's type, as the binding)
    v = _int(fn, name, v)
    if v < 0 or v > 16777215:
        raise _ve(fn, name, "must be in 0..16777215, got " + str(v))
    return v


def _zo(fn, sname, base, s, rng, w, upd, hrow=None):
    # the binding's order: base, the scalar, rng, w, then the overlaps
    B = _in8(fn, "base", base, -1)
    s = _int(fn, sname, s)
    lim = 16711680 if upd else 127  # step: 255 quanta in Q16
    if s < -lim or s > lim:
        raise _ve(fn, sname, "must be in " + str(-lim) + ".." + str(lim) + ", got " + str(s))
    k = _buf(fn, "rng", rng, U32, 2 if upd else 1, True)
    row = i0 = 0
    if hrow is not None:  # zo_perturb_h_s8's Hadamard row and first index, checked before w
        row, i0 = _zo_index(fn, "row", hrow[0]), _zo_index(fn, "i0", hrow[1])
    mask = _out8(fn, "w", w, len(B))
    _nover(fn, "w", w, "rng", rng)
    _nover(fn, "rng", rng, "base", base)
    rz = rng[0] & M32
    r = rng[1] & M32 if upd else 0
    neg = 1 if s < 0 else 0
    mag = -s if neg else s
    whole, thr = mag >> 16, mag & 0xFFFF
    bits = 0
    for i in range(len(B)):
        if not i & 31:
            rz = _xs(rz)
            bits = rz
        if upd:
            r = _xs(r)
            u = whole + 1 if (r & 0xFFFF) < thr else whole
            v = B[i] - u if (bits & 1) == neg else B[i] + u  # -sign(step) * z = -1
        else:
            p = row & (i0 + i)  # the Hadamard sign: the parity of p
            h = 0
            while p:
                h ^= p & 1
                p >>= 1
            v = B[i] - s if (bits ^ h) & 1 else B[i] + s
        bits >>= 1
        w[i] = (127 if v > 127 else (-127 if v < -127 else v)) & mask
    for j, v in enumerate((rz, r)[:2 if upd else 1]):
        # an array('i') (or a signed view) holds the state as its signed 32-bit value
        if k != 'I' and v > 0x7FFFFFFF:
            try:
                rng[j] = v - 0x100000000
                continue
            except OverflowError:  # an unsigned view (CPython, CircuitPython)
                pass
        rng[j] = v


def zo_perturb_s8(base, eps, rng, w):
    _zo("zo_perturb_s8", "eps", base, eps, rng, w, False)


def zo_perturb_h_s8(base, eps, rng, row, i0, w):
    _zo("zo_perturb_h_s8", "eps", base, eps, rng, w, False, (row, i0))


def zo_update_s8(base, step, rng, w):
    _zo("zo_update_s8", "step", base, step, rng, w, True)
