# max / average / global average pooling (pool.c).
from microtrain.fmt import MAX_ELEMS
from microtrain.pyk.checks import _in8, _int, _nover, _out8, _out32, _pool_desc, _ve
from microtrain.pyk.quant import _dyn, _dyn_shift, _zero32


def _pool_sizes(d):
    return d[0] * d[1] * d[2], d[3] * d[4] * d[2]


def _pool_acc(fn, acc, d, nin):
    # acc None (no scratch): only where the windows do not overlap (pool.c)
    if acc is None:
        if d[7] < d[5] or d[8] < d[6]:
            raise _ve(fn, "acc", "None needs windows that do not overlap "
                      "(stride_h >= k_h and stride_w >= k_w)")
    else:
        _out32(fn, "acc", acc, nin)


def _apply(v, s, half):
    # dyn_requant of one value with a known shift s > 0
    return (v + half) >> s if v >= 0 else -((half - v) >> s)


def maxpool_s8_forward(desc, x, y):
    fn = "maxpool_s8_forward"
    d = _pool_desc(fn, desc)
    nin, nout = _pool_sizes(d)
    X = _in8(fn, "x", x, nin)
    ym = _out8(fn, "y", y, nout)
    _nover(fn, "y", y, "x", x)
    in_h, in_w, c, out_h, out_w, k_h, k_w, s_h, s_w, p_t, p_l = d
    row = in_w * c
    yi = 0
    for oy in range(out_h):
        iy0 = oy * s_h - p_t
        ky0 = -iy0 if iy0 < 0 else 0
        ky1 = in_h - iy0 if in_h - iy0 < k_h else k_h
        for ox in range(out_w):
            ix0 = ox * s_w - p_l
            kx0 = -ix0 if ix0 < 0 else 0
            kx1 = in_w - ix0 if in_w - ix0 < k_w else k_w
            first = ((iy0 + ky0) * in_w + ix0 + kx0) * c
            span = (kx1 - kx0) * c
            for ch in range(c):
                m = -128
                o = first + ch
                for _ in range(ky1 - ky0):
                    for i in range(o, o + span, c):
                        v = X[i]
                        if v > m:
                            m = v
                    o += row
                y[yi] = m & ym
                yi += 1


def maxpool_s8_grad_input(desc, x, e, acc, ein):
    fn = "maxpool_s8_grad_input"
    d = _pool_desc(fn, desc)
    nin, nout = _pool_sizes(d)
    X = _in8(fn, "x", x, nin)
    E = _in8(fn, "e", e, nout)
    _pool_acc(fn, acc, d, nin)
    om = _out8(fn, "ein", ein, nin)
    _nover(fn, "ein", ein, "x", x)
    _nover(fn, "ein", ein, "e", e)
    in_h, in_w, c, out_h, out_w, k_h, k_w, s_h, s_w, p_t, p_l = d
    if acc is None:
        for i in range(nin):
            ein[i] = 0
        emin = 0
    else:
        _zero32(acc, nin)
    row = in_w * c
    ei = 0
    for oy in range(out_h):
        iy0 = oy * s_h - p_t
        ky0 = -iy0 if iy0 < 0 else 0
        ky1 = in_h - iy0 if in_h - iy0 < k_h else k_h
        for ox in range(out_w):
            ix0 = ox * s_w - p_l
            kx0 = -ix0 if ix0 < 0 else 0
            kx1 = in_w - ix0 if in_w - ix0 < k_w else k_w
            first = ((iy0 + ky0) * in_w + ix0 + kx0) * c
            span = (kx1 - kx0) * c
            for ch in range(c):
                ev = E[ei]
                ei += 1
                if ev == 0:
                    continue
                best = -129
                arg = 0
                o = first + ch
                for _ in range(ky1 - ky0):
                    for i in range(o, o + span, c):
                        v = X[i]
                        if v > best:
                            best = v
                            arg = i
                    o += row
                if acc is None:  # disjoint windows: each input routed at most once
                    ein[arg] = ev & om
                    if ev < emin:
                        emin = ev
                else:
                    acc[arg] += ev
    if acc is not None:
        return _dyn(acc, nin, ein, om)
    if emin > -128:
        return 0
    sh = _dyn_shift(128)
    half = 1 << (sh - 1)
    for i in range(nin):  # ein holds the routed errors themselves
        v = ein[i]
        ein[i] = _apply(v - 256 if v > 127 else v, sh, half) & om
    return sh


def _avg(s, n):
    # sign(S) * ((|S| + n // 2) // n)
    if s >= 0:
        return (s + (n >> 1)) // n
    return -((-s + (n >> 1)) // n)


def avgpool_s8_forward(desc, x, y):
    fn = "avgpool_s8_forward"
    d = _pool_desc(fn, desc)
    nin, nout = _pool_sizes(d)
    X = _in8(fn, "x", x, nin)
    ym = _out8(fn, "y", y, nout)
    _nover(fn, "y", y, "x", x)
    in_h, in_w, c, out_h, out_w, k_h, k_w, s_h, s_w, p_t, p_l = d
    row = in_w * c
    yi = 0
    for oy in range(out_h):
        iy0 = oy * s_h - p_t
        ky0 = -iy0 if iy0 < 0 else 0
        ky1 = in_h - iy0 if in_h - iy0 < k_h else k_h
        for ox in range(out_w):
            ix0 = ox * s_w - p_l
            kx0 = -ix0 if ix0 < 0 else 0
            kx1 = in_w - ix0 if in_w - ix0 < k_w else k_w
            n = (ky1 - ky0) * (kx1 - kx0)
            first = ((iy0 + ky0) * in_w + ix0 + kx0) * c
            span = (kx1 - kx0) * c
            for ch in range(c):
                s = 0
                o = first + ch
                for _ in range(ky1 - ky0):
                    for i in range(o, o + span, c):
                        s += X[i]
                    o += row
                y[yi] = _avg(s, n) & ym
                yi += 1


def avgpool_s8_grad_input(desc, e, acc, ein):
    fn = "avgpool_s8_grad_input"
    d = _pool_desc(fn, desc)
    nin, nout = _pool_sizes(d)
    E = _in8(fn, "e", e, nout)
    _pool_acc(fn, acc, d, nin)
    om = _out8(fn, "ein", ein, nin)
    _nover(fn, "ein", ein, "e", e)
    if acc is None:
        return _avg_grad_disjoint(d, E, ein, om, nin)
    in_h, in_w, c, out_h, out_w, k_h, k_w, s_h, s_w, p_t, p_l = d
    _zero32(acc, nin)
    row = in_w * c
    ei = 0
    for oy in range(out_h):
        iy0 = oy * s_h - p_t
        ky0 = -iy0 if iy0 < 0 else 0
        ky1 = in_h - iy0 if in_h - iy0 < k_h else k_h
        for ox in range(out_w):
            ix0 = ox * s_w - p_l
            kx0 = -ix0 if ix0 < 0 else 0
            kx1 = in_w - ix0 if in_w - ix0 < k_w else k_w
            n = (ky1 - ky0) * (kx1 - kx0)
            r = (65536 + (n >> 1)) // n
            o = ((iy0 + ky0) * in_w + ix0 + kx0) * c
            for _ in range(ky1 - ky0):
                a = o
                for _ in range(kx1 - kx0):
                    for ch in range(c):
                        acc[a + ch] += E[ei + ch] * r
                    a += c
                o += row
            ei += c
    return _dyn(acc, nin, ein, om)


def _avg_windows(d):
    # (first input offset, valid rows, valid columns, recip(n)) of each window, in order
    in_h, in_w, c, out_h, out_w, k_h, k_w, s_h, s_w, p_t, p_l = d
    for oy in range(out_h):
        iy0 = oy * s_h - p_t
        ky0 = -iy0 if iy0 < 0 else 0
        ky1 = in_h - iy0 if in_h - iy0 < k_h else k_h
        for ox in range(out_w):
            ix0 = ox * s_w - p_l
            kx0 = -ix0 if ix0 < 0 else 0
            kx1 = in_w - ix0 if in_w - ix0 < k_w else k_w
            n = (ky1 - ky0) * (kx1 - kx0)
            yield ((iy0 + ky0) * in_w + ix0 + kx0) * c, ky1 - ky0, kx1 - kx0, (65536 + (n >> 1)) // n


def _avg_grad_disjoint(d, E, ein, om, nin):
    # no scratch (pool.c avgpool_grad_disjoint): max|acc| = the largest |e| * recip(n)
    # of a window, then each tap's requantised e * recip(n)
    c, row = d[2], d[1] * d[2]
    m = ei = 0
    for _, _, _, r in _avg_windows(d):
        for ch in range(ei, ei + c):
            a = E[ch] * r
            a = a if a >= 0 else -a
            if a > m:
                m = a
        ei += c
    sh = _dyn_shift(m)
    half = 1 << (sh - 1) if sh else 0
    for i in range(nin):
        ein[i] = 0
    ei = 0
    for o, rows, cols, r in _avg_windows(d):
        for _ in range(rows):
            a = o
            for _ in range(cols):
                for ch in range(c):
                    v = E[ei + ch] * r
                    ein[a + ch] = (_apply(v, sh, half) if sh else v) & om
                a += c
            o += row
        ei += c
    return sh


def _hw(fn, v):
    hw = _int(fn, "hw", v)
    if hw < 1 or hw > 65536:
        raise _ve(fn, "hw", "must be in 1..65536, got " + str(hw))
    return hw


def global_avgpool_s8_forward(x, hw, c, y):
    fn = "global_avgpool_s8_forward"
    hw = _hw(fn, hw)
    c = _int(fn, "c", c)
    if c < 1 or c > 65535:
        raise _ve(fn, "c", "must be in 1..65535, got " + str(c))
    if hw * c > MAX_ELEMS:
        raise _ve(fn, "x", "tensor too large (more than 2^26 elements)")
    X = _in8(fn, "x", x, hw * c)
    ym = _out8(fn, "y", y, c)
    _nover(fn, "y", y, "x", x)
    XV = memoryview(X)
    for ch in range(c):
        if c == 1:
            s = sum(XV)
        else:
            s = 0
            for i in range(ch, hw * c, c):
                s += X[i]
        y[ch] = _avg(s, hw) & ym


def global_avgpool_s8_grad_input(e, hw, ein):
    fn = "global_avgpool_s8_grad_input"
    E = _in8(fn, "e", e, -1)
    c = len(E)
    hw = _hw(fn, hw)
    if c < 1 or hw * c > MAX_ELEMS:
        raise _ve(fn, "e", "must hold 1..2^26/hw channels")
    _out8(fn, "ein", ein, hw * c)
    _nover(fn, "ein", ein, "e", e)
    # raw byte copies: e's bytes are the int8 values in any 1-byte buffer
    ev = memoryview(E)
    o = 0
    for _ in range(hw):
        ein[o:o + c] = ev
        o += c
