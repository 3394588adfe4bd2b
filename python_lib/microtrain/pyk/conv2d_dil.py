# Dilated convs (the dilated functions of conv2d.c): plain loops over the taps,
# for conv2d.py's kernels when the descriptor has 19 ints with a dilation
# above 1. Arguments arrive checked.
from microtrain.fmt import MAX_ELEMS
from microtrain.pyk.checks import _act, _axis, _chk, _conv_check, _desc, _dim
from microtrain.pyk.quant import _requant, _zero32


def _dil_check(d):
    # mt_conv2d_dil_check: checks.py's _conv_check with the window extent (k - 1) * dil + 1
    in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, p_t, p_l, g, izp, ozp, lo, hi, dh, dw = d
    if not (1 <= dh <= 255 and 1 <= dw <= 255):
        return "dil_h, dil_w must be in 1..255"
    if not (_dim(in_h) and _dim(in_w) and _dim(in_c)):
        return "in_h, in_w, in_c must be in 1..65535"
    if not (_dim(out_h) and _dim(out_w) and _dim(out_c)):
        return "out_h, out_w, out_c must be in 1..65535"
    if not (_dim(k_h) and _dim(k_w) and _dim(s_h) and _dim(s_w)):
        return "k_h, k_w, stride_h, stride_w must be in 1..65535"
    if g < 1 or g > in_c or g > out_c:
        return "groups must be in 1..min(in_c, out_c)"
    if in_c % g or out_c % g:
        return "in_c and out_c must be divisible by groups"
    if in_h * in_w * in_c > MAX_ELEMS or out_h * out_w * out_c > MAX_ELEMS:
        return "tensor too large (more than 2^26 elements)"
    kk = k_h * k_w * (in_c // g)
    if kk > 32768:
        return "k_h * k_w * in_c / groups must be <= 32768"
    if out_c * kk > MAX_ELEMS:
        return "weight tensor too large (more than 2^26 elements)"
    if out_h * out_w > 65536:
        return "out_h * out_w must be <= 65536"
    m = _axis(in_h, out_h, (k_h - 1) * dh + 1, s_h, p_t, "pad_top must be in 0..(k_h-1)*dil_h",
              "out_h too large: last window starts below the input")
    if m:
        return m
    m = _axis(in_w, out_w, (k_w - 1) * dw + 1, s_w, p_l, "pad_left must be in 0..(k_w-1)*dil_w",
              "out_w too large: last window starts right of the input")
    if m:
        return m
    if not (-128 <= izp <= 127 and -128 <= ozp <= 127):
        return "in_zp and out_zp must be in -128..127"
    return _act(lo, hi)


def _dil_desc(fn, o):
    # a 19-tuple when a dilation is above 1, else the plain 17 (conv2d.py's paths)
    d = _desc(fn, o, 19)
    if d[17] == 1 and d[18] == 1:
        d = d[:17]
        _chk(fn, "desc", _conv_check(d))
        return d
    _chk(fn, "desc", _dil_check(d))
    return d


def _taps(o, stride, pad, k, dil, n):
    # (tap, input position) of the valid taps of output o on one axis
    return [(t, o * stride - pad + t * dil) for t in range(k) if 0 <= o * stride - pad + t * dil < n]


def _forward(d, X, W, B, MU, SH, y, ym):
    in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, p_t, p_l, groups, izp, ozp, lo, hi = d[:17]
    cpg = in_c // groups
    opg = out_c // groups
    lo -= ozp
    hi -= ozp
    rq = _requant
    yi = 0
    for oy in range(out_h):
        ty = _taps(oy, s_h, p_t, k_h, d[17], in_h)
        for ox in range(out_w):
            tx = _taps(ox, s_w, p_l, k_w, d[18], in_w)
            for oc in range(out_c):
                gc = (oc // opg) * cpg
                acc = B[oc]
                for ky, iy in ty:
                    for kx, ix in tx:
                        xo = (iy * in_w + ix) * in_c + gc
                        wo = ((oc * k_h + ky) * k_w + kx) * cpg
                        for ci in range(cpg):
                            acc += (X[xo + ci] - izp) * W[wo + ci]
                r = rq(acc, MU[oc], SH[oc])
                y[yi] = ((lo if r < lo else (hi if r > hi else r)) + ozp) & ym
                yi += 1


def _grad_input(d, E, W, WR, mask, acc):
    in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, p_t, p_l, groups = d[:13]
    cpg = in_c // groups
    opg = out_c // groups
    _zero32(acc, in_h * in_w * in_c)
    ei = 0
    for oy in range(out_h):
        ty = _taps(oy, s_h, p_t, k_h, d[17], in_h)
        for ox in range(out_w):
            tx = _taps(ox, s_w, p_l, k_w, d[18], in_w)
            for oc in range(out_c):
                ev = E[ei + oc] * WR[oc]
                if ev == 0 or (mask is not None and not mask[oc]):
                    continue
                gc = (oc // opg) * cpg
                for ky, iy in ty:
                    for kx, ix in tx:
                        ao = (iy * in_w + ix) * in_c + gc
                        wo = ((oc * k_h + ky) * k_w + kx) * cpg
                        for ci in range(cpg):
                            acc[ao + ci] += ev * W[wo + ci]
            ei += out_c


def _grad_weight(d, X, E, mask, gw, gb):
    in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, p_t, p_l, groups, izp = d[:14]
    cpg = in_c // groups
    opg = out_c // groups
    K = k_h * k_w * cpg
    _zero32(gw, out_c * K)
    _zero32(gb, out_c)
    for oy in range(out_h):
        ty = _taps(oy, s_h, p_t, k_h, d[17], in_h)
        for ox in range(out_w):
            tx = _taps(ox, s_w, p_l, k_w, d[18], in_w)
            eo = (oy * out_w + ox) * out_c
            for oc in range(out_c):
                ev = E[eo + oc]
                if ev == 0 or (mask is not None and not mask[oc]):
                    continue
                gb[oc] += ev
                gc = (oc // opg) * cpg
                for ky, iy in ty:
                    for kx, ix in tx:
                        xo = (iy * in_w + ix) * in_c + gc
                        wo = ((oc * k_h + ky) * k_w + kx) * cpg
                        for ci in range(cpg):
                            gw[wo + ci] += ev * (X[xo + ci] - izp)
