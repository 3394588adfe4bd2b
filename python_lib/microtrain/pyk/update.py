# Optimiser-update primitives (update.c), float32 through array('f'): every
# operation is rounded to float32 on its own, so double and single ports give
# the native module's bits. floor / sqrt / quantize_multiplier as update.c.
import math
from array import array

from microtrain.pyk.checks import F32, S8, _buf, _in8, _in32, _int, _mask, _nover, _out8, _te, _ve

_t = array('f', [0.0])
_HALF = 1 / 2
_U_HALF = 128 + 1 / 2  # nearest: trunc(x + 128.5) - 128
_BAD = "channel %d: the step gives non-finite weights or a scale out of float32 range"
_EPS = array('f', b'\x77\xcc\x2b\x32')[0]  # 1e-8 as a float32 (no decimal parse on the board)
_QNAN = array('f', b'\x00\x00\xc0\x7f')[0]  # the quiet NaN 0x7FC00000


def _r(x):
    # x rounded to float32
    _t[0] = x
    return _t[0]


def _sqrt(x):
    # update.c's mt_sqrt_f32 outside finite x >= 0 (numerics.md, "Non-finite values"):
    # a NaN stays (quiet), x < 0 gives 0x7FC00000 (math.sqrt raises), +inf stays
    if x != x:
        return x
    if x < 0:
        return _QNAN
    return math.sqrt(x)


def _flt(fn, name, v, what):
    t = type(v)
    if t is not float and t is not int:
        raise _te(fn, name, "expected a float")
    x = _r(v)
    fin = x - x == 0
    if what == 0:
        ok = fin
        msg = "must be finite"
    elif what == 1:
        ok = fin and x >= 0
        msg = "must be finite and >= 0"
    elif what == 2:
        ok = fin and x > 0
        msg = "must be finite and > 0"
    else:
        ok = 0 <= x < 1
        msg = "must be in [0, 1)"
    if not ok:
        raise _ve(fn, name, msg)
    return x


def _g(fn, name, g, k):
    _buf(fn, name, g, F32, -1, False)
    n = len(g)
    _buf(fn, name, g, F32, n, True)
    k = _int(fn, "k", k)
    if k < 1 or k > n:
        raise _ve(fn, "k", "must be in 1..len(g) (" + str(n) + ")")
    if n % k:
        raise _ve(fn, "k", "must divide len(g) (" + str(n) + ")")
    return n, k, n // k


def _touched(fn, t, n_ch):
    if t is not None:
        _buf(fn, "touched", t, S8, n_ch, False)
    return t


def _count(fn, n):
    n = _int(fn, "n", n)
    if n < 1 or n > 16777216:
        raise _ve(fn, "n", "must be in 1..16777216, got " + str(n))
    return n


def _floor_clamp(x, lim):
    if not x < lim:
        return lim
    if x <= -lim:
        return -lim
    q = math.floor(x)
    return -lim if q < -lim else q


def _qm(real):
    # quantize_multiplier of a float32 real > 0, exactly from its significand
    q, e = math.frexp(real)
    mant = int(math.ldexp(q, 24))
    if e > 31:
        return 2147483647, 31
    if e >= -31:
        return mant << 7, e
    d = 62 + e - 24  # real * 2^62 = mant * 2^d
    if d >= 0:
        m2 = mant << d
    elif -d >= 32:
        m2 = 0
    else:
        m2 = (mant + (1 << (-d - 1))) >> -d
    return (m2, -31) if m2 else (0, 0)


def update_u8_touch(touched, mask):
    fn = "update_u8_touch"
    _buf(fn, "touched", touched, S8, -1, False)
    n = len(touched)
    _buf(fn, "touched", touched, S8, n, True)
    _mask(fn, mask, n)
    if mask is not None and n:  # as the native check: two empty buffers do not overlap
        _nover(fn, "touched", touched, "mask", mask)
    for i in range(n):
        if mask is None or mask[i]:
            touched[i] = 1


def update_f32_check(x):
    fn = "update_f32_check"
    _buf(fn, "x", x, F32, -1, False)
    for i in range(len(x)):
        v = x[i]
        if not v - v == 0:
            return i
    return -1


def _chans(touched, n_ch):
    return range(n_ch) if touched is None else [c for c in range(n_ch) if touched[c]]


def update_f32_decay(g, k, touched, n, wd, q, scale, f, master):
    fn = "update_f32_decay"
    n_all, k, n_ch = _g(fn, "g", g, k)
    touched = _touched(fn, touched, n_ch)
    n = _count(fn, n)
    wd = _flt(fn, "wd", wd, 1)
    if master is not None:
        _buf(fn, "master", master, F32, n_all, False)
        _nover(fn, "g", g, "master", master)
    else:
        if q is not None and _kind_i(q):
            Q = _in32(fn, "q", q, n_all)
        else:
            Q = _in8(fn, "q", q, n_all)
        _buf(fn, "scale", scale, F32, n_ch, False)
        f = _flt(fn, "f", f, 0)
        _nover(fn, "g", g, "scale", scale)
    if touched is not None:
        _nover(fn, "g", g, "touched", touched)
    inv = _r(1 / n)
    for c in _chans(touched, n_ch):
        for i in range(c * k, c * k + k):
            d = _r(g[i] * inv)
            if wd != 0:
                if master is not None:
                    w = master[i]
                else:
                    w = _r(_r(_r(Q[i]) * f) * scale[c])
                d = _r(d + _r(wd * w))
            g[i] = d


def _kind_i(o):
    # an int32 buffer (the binding's typecode 'i'): array('i') or a view of one
    t = type(o)
    if t is array:
        return repr(o[0:0])[7] == 'i'
    return t is memoryview and len(o) > 0 and len(bytes(o[0:1])) == 4 and type(o[0]) is int


def update_f32_standardize(g, k, touched, n):
    fn = "update_f32_standardize"
    n_all, k, n_ch = _g(fn, "g", g, k)
    touched = _touched(fn, touched, n_ch)
    n = _count(fn, n)
    if touched is not None:
        _nover(fn, "g", g, "touched", touched)
    inv_n = _r(1 / n)
    chans = _chans(touched, n_ch)
    s = 0.0
    cnt = 0
    for c in chans:
        for i in range(c * k, c * k + k):
            v = _r(g[i] * inv_n)
            g[i] = v
            s = _r(s + v)
        cnt += k
    if cnt < 2:
        return
    fc = _r(cnt)
    mu = _r(s / fc)
    ss = 0.0
    for c in chans:
        for i in range(c * k, c * k + k):
            d = _r(g[i] - mu)
            ss = _r(ss + _r(d * d))
    sd = _r(_sqrt(_r(ss / fc)))
    inv = _r(1 / _r(sd + _EPS))
    for c in chans:
        for i in range(c * k, c * k + k):
            g[i] = _r(g[i] - mu) * inv


def update_f32_axpby(y, x, k, touched, a, b):
    fn = "update_f32_axpby"
    n_all, k, n_ch = _g(fn, "y", y, k)
    _buf(fn, "x", x, F32, n_all, False)
    touched = _touched(fn, touched, n_ch)
    a = _flt(fn, "a", a, 0)
    b = _flt(fn, "b", b, 0)
    _nover(fn, "y", y, "x", x)
    if touched is not None:
        _nover(fn, "y", y, "touched", touched)
    for c in _chans(touched, n_ch):
        for i in range(c * k, c * k + k):
            y[i] = _r(a * y[i]) + _r(b * x[i])


def update_f32_momentum(g, v, k, touched, mom):
    fn = "update_f32_momentum"
    n_all, k, n_ch = _g(fn, "g", g, k)
    _buf(fn, "v", v, F32, n_all, True)
    touched = _touched(fn, touched, n_ch)
    mom = _flt(fn, "mom", mom, 3)
    _nover(fn, "v", v, "g", g)
    if touched is not None:
        _nover(fn, "g", g, "touched", touched)
        _nover(fn, "v", v, "touched", touched)
    for c in _chans(touched, n_ch):
        for i in range(c * k, c * k + k):
            d = _r(_r(mom * v[i]) + g[i])
            v[i] = d
            g[i] = d


def update_f32_scale(x, k, touched, a):
    fn = "update_f32_scale"
    n_all, k, n_ch = _g(fn, "x", x, k)
    touched = _touched(fn, touched, n_ch)
    a = _flt(fn, "a", a, 0)
    if touched is not None:
        _nover(fn, "x", x, "touched", touched)
    for c in _chans(touched, n_ch):
        for i in range(c * k, c * k + k):
            x[i] = a * x[i]


def update_f32_adam(g, m, v, k, touched, b1, b2, b1t, b2t, eps):
    fn = "update_f32_adam"
    n_all, k, n_ch = _g(fn, "g", g, k)
    _buf(fn, "m", m, F32, n_all, True)
    _buf(fn, "v", v, F32, n_all, True)
    touched = _touched(fn, touched, n_ch)
    b1 = _flt(fn, "b1", b1, 3)
    b2 = _flt(fn, "b2", b2, 3)
    b1t = _flt(fn, "b1t", b1t, 3)
    b2t = _flt(fn, "b2t", b2t, 3)
    eps = _flt(fn, "eps", eps, 2)
    _nover(fn, "m", m, "g", g)
    _nover(fn, "v", v, "g", g)
    _nover(fn, "v", v, "m", m)
    if touched is not None:
        _nover(fn, "g", g, "touched", touched)
        _nover(fn, "m", m, "touched", touched)
        _nover(fn, "v", v, "touched", touched)
    a1, a2 = _r(1 - b1), _r(1 - b2)
    c1, c2 = _r(1 - b1t), _r(1 - b2t)
    sq = _sqrt
    for c in _chans(touched, n_ch):
        for i in range(c * k, c * k + k):
            d = g[i]
            m1 = _r(_r(b1 * m[i]) + _r(a1 * d))
            m2 = _r(_r(b2 * v[i]) + _r(_r(a2 * d) * d))
            m[i] = m1
            v[i] = m2
            g[i] = _r(m1 / c1) / _r(_r(sq(_r(m2 / c2))) + eps)


def update_s8_apply(w, w_scale, b, mult, shift, gw, gb, master_w, master_b, touched, lr, s_in, s_out, rng,
                    scratch):
    return _apply("update_s8_apply", w, w_scale, b, mult, shift, gw, gb, master_w, master_b, touched, lr,
                  s_in, s_out, rng, scratch, False)


def update_s8_apply_keep(w, w_scale, b, mult, shift, gw, gb, master_w, master_b, touched, lr, s_in, s_out,
                         rng, scratch):
    return _apply("update_s8_apply_keep", w, w_scale, b, mult, shift, gw, gb, master_w, master_b, touched, lr,
                  s_in, s_out, rng, scratch, True)


def _apply(fn, w, w_scale, b, mult, shift, gw, gb, master_w, master_b, touched, lr, s_in, s_out, rng, scratch,
           keep):
    # keep (update_s8_apply_keep): gw and gb only read, the new biases in scratch[nc:], the new
    # weights recomputed in pass B with pass A's expressions (the same bits)
    _buf(fn, "w", w, S8, -1, False)
    nw = len(w)
    wm = _out8(fn, "w", w, nw)  # store mask that keeps every store in the element's range
    _buf(fn, "w_scale", w_scale, F32, -1, False)
    nc = len(w_scale)
    if nc < 1 or nc > 65535:
        raise _ve(fn, "w_scale", "must hold 1..65535 channels")
    _buf(fn, "w_scale", w_scale, F32, nc, True)
    k = nw // nc
    if k < 1 or k * nc != nw:
        raise _ve(fn, "w", "has %d elements, not a positive multiple of %d channels" % (nw, nc))
    from microtrain.pyk.checks import I32T
    _buf(fn, "b", b, I32T, nc, True)
    _buf(fn, "mult", mult, I32T, nc, True)
    _buf(fn, "shift", shift, I32T, nc, True)
    _buf(fn, "gw", gw, F32, nw, not keep)
    _buf(fn, "gb", gb, F32, nc, not keep)
    if master_w is not None:
        _buf(fn, "master_w", master_w, F32, nw, True)
    if master_b is not None:
        _buf(fn, "master_b", master_b, F32, nc, True)
    if (master_w is None) != (master_b is None):
        raise _ve(fn, "master_b", "must be given with master_w (both or neither)")
    touched = _touched(fn, touched, nc)
    lr = _flt(fn, "lr", lr, 1)
    s_in = _flt(fn, "s_in", s_in, 2)
    s_out = _flt(fn, "s_out", s_out, 2)
    rng = _int(fn, "rng", rng)
    if not (rng == -1 or 1 <= rng <= 65535):
        raise _ve(fn, "rng", "must be -1 (nearest) or a state in 1..65535, got " + str(rng))
    _buf(fn, "scratch", scratch, F32, -1, True)  # at least n_scr: a lent longer buffer is fine
    n_scr = 2 * nc if keep else nc
    if len(scratch) < n_scr:
        raise _ve(fn, "scratch", "has %d elements, expected at least %d" % (len(scratch), n_scr))
    objs = (w, w_scale, b, mult, shift, gw, gb, master_w, master_b, scratch, touched)
    names = ("w", "w_scale", "b", "mult", "shift", "gw", "gb", "master_w", "master_b", "scratch", "touched")
    ro = (5, 6, 10) if keep else (10,)  # only read: these may share memory with each other
    for i in range(10):
        for j in range(i + 1, 11):
            if objs[i] is not None and objs[j] is not None and not (i in ro and j in ro):
                _nover(fn, names[i], objs[i], names[j], objs[j])
    W = _in8(fn, "w", w, nw)
    chans = _chans(touched, nc)
    bias, bo = (scratch, nc) if keep else (gb, 0)  # where the new bias of channel c goes: bias[bo + c]
    for c in chans:  # plan: every channel checked before the model is written
        s_old = w_scale[c]
        top = 0.0
        for i in range(c * k, c * k + k):
            old = master_w[i] if master_w is not None else _r(W[i] * s_old)
            v = _r(old - _r(lr * gw[i]))
            if not keep:
                gw[i] = v
            a = -v if v < 0 else v
            if not a <= top and top == top:  # a NaN sticks (update.c compares |bits|)
                top = a
        old = master_b[c] if master_b is not None else _r(_r(_r(b[c]) * s_in) * s_old)
        bf = _r(old - _r(lr * gb[c]))
        bias[bo + c] = bf
        if not top - top == 0:
            raise _ve(fn, "gw", _BAD % c)
        s = s_old
        if top > 0:
            t = _r(top / 127)
            if t > 0:
                s = t
        inv = _r(1 / s)
        den = _r(s_in * s)
        t = _r(den / s_out)
        if not (inv - inv == 0 and bf - bf == 0 and den > 0 and t - t == 0 and t > 0):
            raise _ve(fn, "gw", _BAD % c)
        scratch[c] = s
    r = rng
    for c in chans:
        s = scratch[c]
        s_old = w_scale[c]
        inv = _r(1 / s)
        for i in range(c * k, c * k + k):
            if keep:  # pass A's expressions again (w[i] / master_w[i] read before they are written)
                old = master_w[i] if master_w is not None else _r(W[i] * s_old)
                v = _r(old - _r(lr * gw[i]))
            else:
                v = gw[i]
                gw[i] = 0.0
            if master_w is not None:
                master_w[i] = v
            x = _r(v * inv)
            if rng >= 0:
                r ^= (r << 7) & 0xFFFF
                r ^= r >> 9
                r ^= (r << 8) & 0xFFFF
                u = 128 + math.ldexp(r, -16)  # exact in float32
            else:
                u = _U_HALF
            q = int(_r(x + u)) - 128  # 0 < x + u < 256: int() truncates = floor
            w[i] = (-127 if q < -127 else q) & wm
        bf = bias[bo + c]
        if master_b is not None:
            master_b[c] = bf
        if not keep:
            gb[c] = 0.0
        den = _r(s_in * s)
        b[c] = _floor_clamp(_r(_r(bf / den) + _HALF), 1073741824)
        w_scale[c] = s
        mult[c], shift[c] = _qm(_r(den / s_out))
    return r if rng >= 0 else -1


def update_f32_ratios(w_scale, r, wr):
    fn = "update_f32_ratios"
    _buf(fn, "w_scale", w_scale, F32, -1, False)
    n = len(w_scale)
    if n < 1 or n > 65535:
        raise _ve(fn, "w_scale", "must hold 1..65535 channels")
    top = 0.0
    at = -1
    for v in w_scale:
        if not (v - v == 0 and v >= 0):
            raise _ve(fn, "w_scale", "must be finite and >= 0")
        if v > top:
            top = v
    if not top > 0:
        raise _ve(fn, "w_scale", "must have a maximum > 0")
    r = _int(fn, "r", r)
    if r < 0 or r > 15:
        raise _ve(fn, "r", "must be in 0..15, got " + str(r))
    from microtrain.pyk.checks import I32T
    _buf(fn, "wr", wr, I32T, n, True)
    _nover(fn, "wr", wr, "w_scale", w_scale)
    one = 1 << r
    for i in range(n):
        v = w_scale[i]
        if at < 0 and v == top:  # the first maximum, found in the pass that reads every scale anyway
            at = i
        wr[i] = math.floor(_r(_r(_r(one * v) / top) + _HALF))
    return at
