# Dilated convs (conv2d_dil_s8.c): plain loops over the taps,
# for conv2d.py's kernels when the descriptor has 19 ints with a dilation
# above 1. Arguments arrive checked.
from microtrain.pyk.checks import _chk, _conv_check, _desc
from microtrain.pyk.quant import _requant, _zero32


def _dil_desc(fn, o):
    # a 19-tuple when a dilation is above 1, else the plain 17 (conv2d.py's paths)
    d = _desc(fn, o, 19)
    if d[17] == 1 and d[18] == 1:
        d = d[:17]
        _chk(fn, "desc", _conv_check(d))
        return d
    _chk(fn, "desc", _conv_check(d))
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
