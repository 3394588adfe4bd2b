# max / average / global average pooling (pool.c).
from microtrain.fmt import MAX_ELEMS
from microtrain.pyk.checks import _act_bounds, _in8, _int, _nover, _out8, _out32, _pool_desc, _ve
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
    c, row = d[2], d[1] * d[2]
    yi = 0
    for first, rows, cols in _windows(d):
        span = cols * c
        for ch in range(c):
            m = -128
            o = first + ch
            for _ in range(rows):
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
    if acc is None:
        return _max_disjoint(d, X, E, ein, om, None)
    c, row = d[2], d[1] * d[2]
    _zero32(acc, nin)
    ei = 0
    for first, rows, cols in _windows(d):
        span = cols * c
        for ch in range(c):
            ev = E[ei]
            ei += 1
            if ev == 0:
                continue
            best, arg = _argmax(X, first + ch, rows, span, c, row)
            acc[arg] += ev
    return _dyn(acc, nin, ein, om)


def _max_disjoint(d, X, E, ein, om, act):
    # acc None (pool.c maxpool_grad_disjoint): each input routed at most once, so ein
    # holds the routed errors (requantised at the end if one is -128). act = (lo, hi):
    # the _act kernel, ein may be x: each window's taps are read (the maximum, its mask)
    # before all of them are written; the inputs no window covers are zeroed apart
    c, row = d[2], d[1] * d[2]
    nin = d[0] * row
    if act is None:
        for i in range(nin):
            ein[i] = 0
    else:
        _zero_uncovered(d, ein)
        lo, hi = act
    emin = ei = 0
    for first, rows, cols in _windows(d):
        span = cols * c
        for ch in range(c):
            ev = E[ei + ch]
            if ev == 0 and act is None:
                continue
            best, arg = _argmax(X, first + ch, rows, span, c, row)
            if ev < emin:
                emin = ev
            if act is not None:
                o = first + ch
                for _ in range(rows):
                    for i in range(o, o + span, c):
                        ein[i] = 0
                    o += row
                if ev == 0 or best <= lo or best >= hi:
                    continue
            ein[arg] = ev & om
        ei += c
    if emin > -128:
        return 0
    sh = _dyn_shift(128)
    half = 1 << (sh - 1)
    for i in range(nin):  # ein holds the routed errors themselves
        v = ein[i]
        ein[i] = _apply(v - 256 if v > 127 else v, sh, half) & om
    return sh


def _argmax(X, o, rows, span, c, row):
    # the largest value of one channel of a window and its first index (pool.c's ties)
    best = -129
    arg = 0
    for _ in range(rows):
        for i in range(o, o + span, c):
            v = X[i]
            if v > best:
                best = v
                arg = i
        o += row
    return best, arg


def _windows(d):
    # (first input offset, valid rows, valid columns) of each window, in order
    in_h, in_w, c, out_h, out_w, k_h, k_w, s_h, s_w, p_t, p_l = d
    for oy in range(out_h):
        iy0 = oy * s_h - p_t
        ky0 = -iy0 if iy0 < 0 else 0
        ky1 = in_h - iy0 if in_h - iy0 < k_h else k_h
        for ox in range(out_w):
            ix0 = ox * s_w - p_l
            kx0 = -ix0 if ix0 < 0 else 0
            kx1 = in_w - ix0 if in_w - ix0 < k_w else k_w
            yield ((iy0 + ky0) * in_w + ix0 + kx0) * c, ky1 - ky0, kx1 - kx0


def _zero_uncovered(d, ein):
    # zeroes the inputs no window covers (pool.c pool_zero_uncovered): the row bands of
    # the windows times their column bands are covered, both increasing and disjoint
    in_h, in_w, c, out_h, out_w, k_h, k_w, s_h, s_w, p_t, p_l = d
    i = oy = 0
    y0 = -p_t
    for iy in range(in_h):
        while oy < out_h and y0 + k_h <= iy:
            oy += 1
            y0 += s_h
        row_in = oy < out_h and y0 <= iy
        ox = 0
        x0 = -p_l
        for ix in range(in_w):
            while ox < out_w and x0 + k_w <= ix:
                ox += 1
                x0 += s_w
            if not row_in or ox >= out_w or x0 > ix:
                for j in range(i, i + c):
                    ein[j] = 0
            i += c


def _act_args(fn, d, t_name, t, e, lo, hi, ein):
    # the _act kernels' checks in the binding's order (mt_maxpool_s8_grad_input_act_args): disjoint
    # windows, t, e, the mask bounds (kept where lo < t < hi), ein (may be t itself)
    if d[7] < d[5] or d[8] < d[6]:
        raise _ve(fn, "desc", "windows must not overlap (stride_h >= k_h and stride_w >= k_w)")
    nin, nout = _pool_sizes(d)
    T = _in8(fn, t_name, t, nin)
    E = _in8(fn, "e", e, nout)
    lo, hi = _act_bounds(fn, lo, hi)
    om = _out8(fn, "ein", ein, nin)
    if ein is not t:
        _nover(fn, "ein", ein, t_name, t)
    _nover(fn, "ein", ein, "e", e)
    return T, E, (lo, hi), om


def maxpool_s8_grad_input_act(desc, x, e, lo, hi, ein):
    fn = "maxpool_s8_grad_input_act"
    d = _pool_desc(fn, desc)
    X, E, act, om = _act_args(fn, d, "x", x, e, lo, hi, ein)
    return _max_disjoint(d, X, E, ein, om, act)


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
    c, row = d[2], d[1] * d[2]
    yi = 0
    for first, rows, cols in _windows(d):
        n = rows * cols
        span = cols * c
        for ch in range(c):
            s = 0
            o = first + ch
            for _ in range(rows):
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
    c, row = d[2], d[1] * d[2]
    _zero32(acc, nin)
    ei = 0
    for o, rows, cols, r in _avg_windows(d):
        for _ in range(rows):
            a = o
            for _ in range(cols):
                for ch in range(c):
                    acc[a + ch] += E[ei + ch] * r
                a += c
            o += row
        ei += c
    return _dyn(acc, nin, ein, om)


def _avg_windows(d):
    # _windows with recip(n) of each window
    for o, rows, cols in _windows(d):
        n = rows * cols
        yield o, rows, cols, (65536 + (n >> 1)) // n


def _avg_grad_disjoint(d, E, ein, om, nin, act=None):
    # no scratch (pool.c avgpool_grad_disjoint): max|acc| = the largest |e| * recip(n)
    # of a window, then each tap's requantised e * recip(n). act = (Y, lo, hi): the
    # _act kernel, ein may be y: only the uncovered inputs are zeroed first, and each
    # tap is 0 unless lo < y < hi (y read before the tap is written)
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
    if act is None:
        for i in range(nin):
            ein[i] = 0
    else:
        _zero_uncovered(d, ein)
        Y, lo, hi = act
    ei = 0
    for o, rows, cols, r in _avg_windows(d):
        for _ in range(rows):
            a = o
            for _ in range(cols):
                for ch in range(c):
                    if act is not None:
                        t = Y[a + ch]
                        if t <= lo or t >= hi:
                            ein[a + ch] = 0
                            continue
                    v = E[ei + ch] * r
                    ein[a + ch] = (_apply(v, sh, half) if sh else v) & om
                a += c
            o += row
        ei += c
    return sh


def avgpool_s8_grad_input_act(desc, y, e, lo, hi, ein):
    fn = "avgpool_s8_grad_input_act"
    d = _pool_desc(fn, desc)
    Y, E, act, om = _act_args(fn, d, "y", y, e, lo, hi, ein)
    nin = d[0] * d[1] * d[2]
    return _avg_grad_disjoint(d, E, ein, om, nin, (Y, act[0], act[1]))


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
