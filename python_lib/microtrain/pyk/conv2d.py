# conv2d (conv2d_s8_*.c): forward, grad_input, grad_weight, grad_weight_f32.
from array import array

from microtrain.pyk.accumulate import _acc_f32
from microtrain.pyk.checks import (
    _NOACT,
    _WHOLE,
    I32,
    M32,
    _chk,
    _conv_check,
    _desc,
    _flt,
    _grad_act,
    _gw_window,
    _in8,
    _in32,
    _mask,
    _nover,
    _out8,
    _out32,
    _qcheck,
    _wr_check,
)
from microtrain.pyk.quant import _dyn, _dyn_act, _rq_params, _zero32


def _conv_desc(fn, o):
    if type(o) is array and len(o) == 19 or type(o) is memoryview and len(o) == 19:
        from microtrain.pyk.conv2d_dil import _dil_desc  # 19 ints: dil_h, dil_w follow

        return _dil_desc(fn, o)
    d = _desc(fn, o, 17)
    _chk(fn, "desc", _conv_check(d))
    return d


def _conv_bufs(d):
    in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w = d[:8]
    cpg = in_c // d[12]
    return in_h * in_w * in_c, out_h * out_w * out_c, out_c * k_h * k_w * cpg



# Window of output (oy, ox): valid kernel rows [ky0, ky1) and columns
# [kx0, kx1) (the descriptor check guarantees both are non-empty). The hot
# loops below allocate nothing (no slices, no tuples): on a big heap every
# allocation-triggered collection would sweep all of it.


def _fill(P, X, xo, po, nky, nkx, row, wrow, in_c, cpg, K, full, fz):
    # P[0..K) = window of one group in weight order (ky, kx, ci); padding
    # taps read as fz. xo / po: X / P offsets of the first valid tap.
    if not full:
        for t in range(K):
            P[t] = fz
    if cpg == in_c:  # groups == 1: a kernel row is one contiguous run
        ln = nkx * in_c
        for _ in range(nky):
            dp = po - xo
            for i in range(xo, xo + ln):
                P[i + dp] = X[i]
            xo += row
            po += wrow
    elif cpg == 1:  # depthwise
        for _ in range(nky):
            xi = xo
            for t in range(po, po + nkx):
                P[t] = X[xi]
                xi += in_c
            xo += row
            po += wrow
    else:
        for _ in range(nky):
            xi = xo
            pi = po
            for _ in range(nkx):
                dp = pi - xi
                for i in range(xi, xi + cpg):
                    P[i + dp] = X[i]
                xi += in_c
                pi += cpg
            xo += row
            po += wrow


def conv2d_s8_forward(desc, x, w, bias, mult, shift, y):
    fn = "conv2d_s8_forward"
    d = _conv_desc(fn, desc)
    nin, nout, nw = _conv_bufs(d)
    out_c = d[5]
    X = _in8(fn, "x", x, nin)
    W = _in8(fn, "w", w, nw)
    B = _in32(fn, "bias", bias, out_c)
    MU = _in32(fn, "mult", mult, out_c)
    SH = _in32(fn, "shift", shift, out_c)
    ym = _out8(fn, "y", y, nout)
    _qcheck(fn, B, MU, SH, out_c)
    _nover(fn, "y", y, "x", x)
    _nover(fn, "y", y, "w", w)
    if len(d) == 19:  # dilated: plain loops in their own module
        from microtrain.pyk.conv2d_dil import _forward

        return _forward(d, X, W, B, MU, SH, y, ym)
    in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, p_t, p_l, groups, izp, ozp, lo, hi = d
    lo -= ozp
    hi -= ozp
    cpg = in_c // groups
    opg = out_c // groups
    K = k_h * k_w * cpg
    # sum (x - zp) * w == sum x * w - zp * sum w, with padding taps read as zp
    WV = memoryview(W)
    base = [0] * out_c
    for oc in range(out_c):
        base[oc] = B[oc] - izp * sum(WV[oc * K:oc * K + K])
    M, LS, RS = _rq_params(MU, SH, out_c)
    P = array('b', bytes(K))
    row = in_w * in_c
    wrow = k_w * cpg
    direct = groups == 1 and k_h == 1  # a full window is one run of X
    yi = 0
    for oy in range(out_h):
        by = oy * s_h - p_t
        ky0 = -by if by < 0 else 0
        ky1 = in_h - by if in_h - by < k_h else k_h
        for ox in range(out_w):
            bx = ox * s_w - p_l
            kx0 = -bx if bx < 0 else 0
            kx1 = in_w - bx if in_w - bx < k_w else k_w
            full = ky0 == 0 and kx0 == 0 and ky1 == k_h and kx1 == k_w
            xo = ((by + ky0) * in_w + bx + kx0) * in_c
            po = ky0 * wrow + kx0 * cpg
            oc = 0
            for g in range(groups):
                if direct and full:
                    dp = -xo
                    for i in range(xo, xo + K):
                        P[i + dp] = X[i]
                else:
                    _fill(P, X, xo + g * cpg, po, ky1 - ky0, kx1 - kx0, row, wrow, in_c, cpg, K, full, izp)
                for _ in range(opg):
                    s = base[oc]
                    j = oc * K
                    for v in P:
                        s += v * W[j]
                        j += 1
                    sl = LS[oc]
                    if sl:
                        s = ((s << sl) + I32 & M32) - I32
                    h = (s * M[oc] + 0x40000000) >> 31
                    e = RS[oc]
                    if e:
                        mk = (1 << e) - 1
                        r = h >> e
                        if (h & mk) > (mk >> 1) + (1 if h < 0 else 0):
                            r += 1
                    else:
                        r = h
                    if r < lo:
                        r = lo
                    elif r > hi:
                        r = hi
                    y[yi] = (r + ozp) & ym
                    yi += 1
                    oc += 1


def conv2d_s8_grad_input(desc, e, w, wr, mask, acc, ein, lo=_NOACT, hi=_NOACT):
    fn = "conv2d_s8_grad_input"
    d = _conv_desc(fn, desc)
    nin, nout, nw = _conv_bufs(d)
    out_c = d[5]
    E = _in8(fn, "e", e, nout)
    W = _in8(fn, "w", w, nw)
    WR = _in32(fn, "wr", wr, out_c)
    mask = _mask(fn, mask, out_c)
    _out32(fn, "acc", acc, nin)
    om = _out8(fn, "ein", ein, nin)
    act = _grad_act(fn, lo, hi)  # ein then holds the activation
    groups = d[12]
    opg = out_c // groups
    _chk(fn, "wr", _wr_check(WR, out_c, d[6] * d[7] * opg))
    _nover(fn, "ein", ein, "e", e)
    _nover(fn, "ein", ein, "w", w)
    _nover(fn, "ein", ein, "mask", mask)
    # wr is read after acc is cleared: a copy keeps an overlapping wr intact
    _grad_input(d, E, W, array('i', WR), mask, acc)
    if act:
        return _dyn_act(acc, nin, ein, om, act[0], act[1])
    return _dyn(acc, nin, ein, om)


def _grad_input(d, E, W, WR, mask, acc):
    if len(d) == 19:
        from microtrain.pyk.conv2d_dil import _grad_input as gi

        return gi(d, E, W, WR, mask, acc)
    in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, p_t, p_l, groups = d[:13]
    cpg = in_c // groups
    opg = out_c // groups
    K = k_h * k_w * cpg
    _zero32(acc, in_h * in_w * in_c)
    G = array('i', bytes(4 * K))
    Wr = [W[oc * K:oc * K + K] for oc in range(out_c)]  # weight rows (array copies: alloc-free iteration)
    row = in_w * in_c
    wrow = k_w * cpg
    direct = groups == 1 and k_h == 1
    ei = 0
    for oy in range(out_h):
        by = oy * s_h - p_t
        ky0 = -by if by < 0 else 0
        ky1 = in_h - by if in_h - by < k_h else k_h
        for ox in range(out_w):
            bx = ox * s_w - p_l
            kx0 = -bx if bx < 0 else 0
            kx1 = in_w - bx if in_w - bx < k_w else k_w
            full = ky0 == 0 and kx0 == 0 and ky1 == k_h and kx1 == k_w
            xo = ((by + ky0) * in_w + bx + kx0) * in_c
            oc = 0
            for g in range(groups):
                if direct and full:  # scatter straight into the one run of acc
                    for _ in range(opg):
                        ev = E[ei + oc]
                        if ev and (mask is None or mask[oc]):
                            s = ev * WR[oc]
                            a = xo
                            for w in Wr[oc]:
                                acc[a] += s * w
                                a += 1
                        oc += 1
                    continue
                used = False
                for _ in range(opg):
                    ev = E[ei + oc]
                    if ev and (mask is None or mask[oc]):
                        if used is False:
                            for t in range(K):
                                G[t] = 0
                            used = True
                        s = ev * WR[oc]
                        t = 0
                        for w in Wr[oc]:
                            G[t] += s * w
                            t += 1
                    oc += 1
                if used is False:
                    continue
                # scatter the valid taps of G into acc
                ao = xo + g * cpg
                po = ky0 * wrow + kx0 * cpg
                if cpg == in_c:
                    ln = (kx1 - kx0) * in_c
                    for _ in range(ky1 - ky0):
                        dp = po - ao
                        for a in range(ao, ao + ln):
                            acc[a] += G[a + dp]
                        ao += row
                        po += wrow
                else:
                    nkx = kx1 - kx0
                    for _ in range(ky1 - ky0):
                        a0 = ao
                        p = po
                        for _ in range(nkx):
                            dp = p - a0
                            for a in range(a0, a0 + cpg):
                                acc[a] += G[a + dp]
                            a0 += in_c
                            p += cpg
                        ao += row
                        po += wrow
            ei += out_c


def _grad_weight(d, X, E, mask, gw, gb):
    # int32 weight / bias gradients into gw, gb; masked rows are zeroed.
    if len(d) == 19:
        from microtrain.pyk.conv2d_dil import _grad_weight as gw_dil

        return gw_dil(d, X, E, mask, gw, gb)
    in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, p_t, p_l, groups, izp = d[:14]
    cpg = in_c // groups
    opg = out_c // groups
    K = k_h * k_w * cpg
    _zero32(gw, out_c * K)
    _zero32(gb, out_c)
    # sum e * (x - zp) == sum e * x - zp * sum e, with padding taps read as zp
    P = array('b', bytes(K))
    row = in_w * in_c
    wrow = k_w * cpg
    direct = groups == 1 and k_h == 1
    ei = 0
    for oy in range(out_h):
        by = oy * s_h - p_t
        ky0 = -by if by < 0 else 0
        ky1 = in_h - by if in_h - by < k_h else k_h
        for ox in range(out_w):
            bx = ox * s_w - p_l
            kx0 = -bx if bx < 0 else 0
            kx1 = in_w - bx if in_w - bx < k_w else k_w
            full = ky0 == 0 and kx0 == 0 and ky1 == k_h and kx1 == k_w
            xo = ((by + ky0) * in_w + bx + kx0) * in_c
            po = ky0 * wrow + kx0 * cpg
            oc = 0
            for g in range(groups):
                filled = False
                for _ in range(opg):
                    ev = E[ei + oc]
                    if ev and (mask is None or mask[oc]):
                        if filled is False:
                            filled = True
                            if direct and full:
                                dp = -xo
                                for i in range(xo, xo + K):
                                    P[i + dp] = X[i]
                            else:
                                _fill(P, X, xo + g * cpg, po, ky1 - ky0, kx1 - kx0, row, wrow, in_c, cpg, K,
                                      full, izp)
                        gb[oc] += ev
                        j = oc * K
                        for v in P:
                            gw[j] += ev * v
                            j += 1
                    oc += 1
            ei += out_c
    if izp:
        for oc in range(out_c):
            c = izp * gb[oc]
            if c:
                for j in range(oc * K, oc * K + K):
                    gw[j] -= c


def conv2d_s8_grad_weight(desc, x, e, mask, gw, gb):
    fn = "conv2d_s8_grad_weight"
    d = _conv_desc(fn, desc)
    nin, nout, nw = _conv_bufs(d)
    X = _in8(fn, "x", x, nin)
    E = _in8(fn, "e", e, nout)
    mask = _mask(fn, mask, d[5])
    _out32(fn, "gw", gw, nw)
    _out32(fn, "gb", gb, d[5])
    _nover(fn, "gw", gw, "gb", gb)
    _grad_weight(d, X, E, mask, gw, gb)


def conv2d_s8_grad_weight_f32(desc, x, e, mask, w_scale, b_scale, gw, gb, c0=_WHOLE):
    fn = "conv2d_s8_grad_weight_f32"
    d = _conv_desc(fn, desc)
    nin, nout, nw = _conv_bufs(d)
    out_c = d[5]
    X = _in8(fn, "x", x, nin)
    E = _in8(fn, "e", e, nout)
    mask = _mask(fn, mask, out_c)
    ws = _flt(fn, "w_scale", w_scale)
    bs = _flt(fn, "b_scale", b_scale)
    K = nw // out_c
    c0 = _gw_window(fn, out_c, K, mask, gw, gb, c0)
    _nover(fn, "gw", gw, "gb", gb)
    iw = array('i', bytes(4 * nw))
    ib = array('i', bytes(4 * out_c))
    _grad_weight(d, X, E, mask, iw, ib)
    for oc in range(out_c):
        if mask is None or mask[oc]:  # inside the window (_gw_window)
            _acc_f32(iw, gw, oc * K, oc * K + K, ws, c0 * K)
            _acc_f32(ib, gb, oc, oc + 1, bs, c0)
