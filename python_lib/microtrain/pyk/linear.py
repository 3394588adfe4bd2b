# linear (linear.c): forward, grad_input, grad_weight, grad_weight_f32.
from array import array

from microtrain.pyk.checks import (
    _NOACT,
    _WHOLE,
    I32,
    M32,
    _chk,
    _f32t,
    _flt,
    _grad_act,
    _gw_window,
    _in8,
    _in32,
    _linear_desc,
    _mask,
    _nover,
    _out8,
    _out32,
    _qcheck,
    _wr_check,
)
from microtrain.pyk.quant import _dyn, _dyn_act, _zero32


def linear_s8_forward(desc, x, w, bias, mult, shift, y):
    fn = "linear_s8_forward"
    d = _linear_desc(fn, desc)
    in_n, out_n, izp, ozp = d[0], d[1], d[2], d[3]
    X = _in8(fn, "x", x, in_n)
    W = _in8(fn, "w", w, in_n * out_n)
    B = _in32(fn, "bias", bias, out_n)
    MU = _in32(fn, "mult", mult, out_n)
    SH = _in32(fn, "shift", shift, out_n)
    ym = _out8(fn, "y", y, out_n)
    _qcheck(fn, B, MU, SH, out_n)
    _nover(fn, "y", y, "x", x)
    _nover(fn, "y", y, "w", w)
    lo = d[4] - ozp
    hi = d[5] - ozp
    WV = memoryview(W)
    j = 0
    for o in range(out_n):
        s = B[o]
        if izp:
            s -= izp * sum(WV[j:j + in_n])
        for v in X:
            s += v * W[j]
            j += 1
        sh = SH[o]
        if sh > 0:
            s = ((s << sh) + I32 & M32) - I32
        h = (s * MU[o] + 0x40000000) >> 31
        if sh < 0:
            e = -sh
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
        y[o] = (r + ozp) & ym


def linear_s8_grad_input(desc, e, w, wr, mask, acc, ein, lo=_NOACT, hi=_NOACT):
    fn = "linear_s8_grad_input"
    d = _linear_desc(fn, desc)
    in_n, out_n = d[0], d[1]
    E = _in8(fn, "e", e, out_n)
    W = _in8(fn, "w", w, in_n * out_n)
    WR = _in32(fn, "wr", wr, out_n)
    mask = _mask(fn, mask, out_n)
    _out32(fn, "acc", acc, in_n)
    om = _out8(fn, "ein", ein, in_n)
    act = _grad_act(fn, lo, hi)  # ein then holds the activation
    _chk(fn, "wr", _wr_check(WR, out_n, out_n))
    _nover(fn, "ein", ein, "e", e)
    _nover(fn, "ein", ein, "w", w)
    _nover(fn, "ein", ein, "mask", mask)
    WR = array('i', WR)  # read after acc is cleared: keep an overlapping wr intact
    _zero32(acc, in_n)
    j = 0
    for o in range(out_n):
        ev = E[o]
        if ev and (mask is None or mask[o]):
            s = ev * WR[o]
            i = 0
            for w in W[j:j + in_n]:  # one row copy: alloc-free iteration
                acc[i] += s * w
                i += 1
        j += in_n
    if act:
        return _dyn_act(acc, in_n, ein, om, act[0], act[1])
    return _dyn(acc, in_n, ein, om)


def _lin_x(X, n, zp):
    # x - zp as a list
    if zp:
        return [v - zp for v in X]
    return X


def linear_s8_grad_weight(desc, x, e, mask, gw, gb):
    fn = "linear_s8_grad_weight"
    d = _linear_desc(fn, desc)
    in_n, out_n = d[0], d[1]
    X = _in8(fn, "x", x, in_n)
    E = _in8(fn, "e", e, out_n)
    mask = _mask(fn, mask, out_n)
    _out32(fn, "gw", gw, in_n * out_n)
    _out32(fn, "gb", gb, out_n)
    _nover(fn, "gw", gw, "gb", gb)
    XZ = _lin_x(X, in_n, d[2])
    j = 0
    for o in range(out_n):
        ev = 0 if (mask is not None and not mask[o]) else E[o]
        gb[o] = ev
        if ev:
            for v in XZ:
                gw[j] = ev * v
                j += 1
        else:
            for i in range(j, j + in_n):
                gw[i] = 0
            j += in_n


def linear_s8_grad_weight_f32(desc, x, e, mask, w_scale, b_scale, gw, gb, c0=_WHOLE):
    fn = "linear_s8_grad_weight_f32"
    d = _linear_desc(fn, desc)
    in_n, out_n = d[0], d[1]
    X = _in8(fn, "x", x, in_n)
    E = _in8(fn, "e", e, out_n)
    mask = _mask(fn, mask, out_n)
    ws = _flt(fn, "w_scale", w_scale)
    bs = _flt(fn, "b_scale", b_scale)
    c0 = _gw_window(fn, out_n, in_n, mask, gw, gb, c0)
    _nover(fn, "gw", gw, "gb", gb)
    XZ = _lin_x(X, in_n, d[2])
    t = _f32t
    for o in range(out_n):
        if mask is not None and not mask[o]:
            continue  # every output outside the window is masked (_gw_window)
        ev = E[o]
        j = (o - c0) * in_n
        for v in XZ:  # |ev * (x - zp)| < 2^24: exact in float32
            t[0] = ws * (ev * v)
            gw[j] = gw[j] + t[0]
            j += 1
        t[0] = bs * ev
        gb[o - c0] = gb[o - c0] + t[0]
