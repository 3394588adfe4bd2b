# float32 accumulation (accumulate.c): f32_axpy_i32 and the float32 gradient
# sums of the *_grad_weight_f32 kernels. Every product and sum is rounded to
# float32 through an array('f'), so results are bit-exact on double ports too.
from microtrain.pyk.checks import _f32t, _flt, _in32, _outf


def _acc_f32(gi, gf, lo, hi, sc, base=0):
    # gf[i - base] = f32(gf[i - base] + f32(sc * f32(gi[i]))) for i in [lo, hi)
    # (base: gf holds a window of gi's rows, the _grad_weight_f32 c0)
    t = _f32t
    for i in range(lo, hi):
        v = gi[i]
        if v > 16777216 or v < -16777216:
            t[0] = v
            v = t[0]
        t[0] = sc * v
        j = i - base
        gf[j] = gf[j] + t[0]


def f32_axpy_i32(x, a, y):
    fn = "f32_axpy_i32"
    X = _in32(fn, "x", x, -1)
    n = len(X)
    a = _flt(fn, "a", a)
    _outf(fn, "y", y, n)
    _acc_f32(X, y, 0, n, a)
