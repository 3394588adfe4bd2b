# Pure-Python fallback of the native `_microtrain` module, for boards without
# the natmod (and CircuitPython). Same function names, argument order, return
# values, argument checks (TypeError / ValueError "fn: arg: what", the
# binding's messages) and bit-exact numerics as usermod/microtrain/*.c
# (docs/numerics.md; the .mtm loader of docs/format.md), plus crc32().
#
# Notes for callers:
# - int8 inputs that are not array('b') (bytes, bytearray, array('B'),
#   memoryview) are copied once per call into a signed array('b') (a C-speed
#   copy); pass array('b') to avoid the copy. Outputs may be any writable
#   1-byte buffer.
# - Overlaps: Python has no addresses, so only the very same object passed as
#   an input and an output that the native module refuses is refused here.
#   Partially overlapping views are not detected; inputs copied as above are
#   read from their copies, so such calls mostly give the pre-call answer,
#   but two overlapping outputs (gw / gb views of one buffer) cannot be right.
# - Float kernels round every product and sum to float32 (through array('f')),
#   so they are bit-exact on double-precision ports too (not on ports whose
#   floats are 30-bit, MICROPY_OBJ_REPR_C).
# - requant needs 64-bit products: on 32-bit ports those are long ints
#   (MPZ), allocated per output element; ports without long ints cannot run
#   this module.
# - Ship it precompiled (mpy-cross) or frozen: compiling this source needs
#   more RAM than a 256 KB heap has.
import struct
from array import array

try:
    from micropython import const
except ImportError:  # CPython (host debugging)
    def const(x):
        return x

try:
    import binascii
    _bcrc = binascii.crc32
except (ImportError, AttributeError):
    _bcrc = None

HAS_FLOAT = True

_MAXN = const(67108864)  # 2^26: largest buffer / tensor element count
_I32 = 0x80000000  # not const(): a big int on 32-bit ports
_M32 = 0xFFFFFFFF
_NONE = 0xFFFFFFFF

# dtype codes of _buf
_S8 = const(0)
_I32T = const(1)
_U32 = const(2)
_F32 = const(3)
_DTN = ("an int8 buffer (bytes, bytearray or array('b'/'B'))", "an array('i')",
        "an array('I') or array('i')", "an array('f')")

_f32t = array('f', [0.0])  # float32 rounding scratch (not re-entrant; kernels are not either)


# ---------------------------------------------------------------------------
# errors and argument checks


def _te(fn, name, what):
    return TypeError(fn + ": " + name + ": " + what)


def _ve(fn, name, what):
    return ValueError(fn + ": " + name + ": " + what)


def _kind(o):
    # 'y' bytes, 'Y' bytearray, array typecode, 'm' memoryview, None
    t = type(o)
    if t is bytearray:
        return 'Y'
    if t is bytes:
        return 'y'
    if t is array:
        return repr(o[0:0])[7]
    if t is memoryview:
        return 'm'
    return None


def _buf(fn, name, o, dt, n, wr):
    # Checks a buffer argument like the binding's mt_buf; returns its kind.
    if o is None:
        raise _te(fn, name, "expected a buffer, got None")
    k = _kind(o)
    if k is None or (wr and k == 'y'):
        raise _te(fn, name, "expected a writable buffer (bytearray or array)" if wr else "expected a buffer")
    cnt = len(o)
    if k == 'm':
        ok = True
        if cnt:
            if wr:
                try:
                    o[0] = o[0]
                except TypeError:
                    raise _te(fn, name, "expected a writable buffer (bytearray or array)") from None
            isz = len(bytes(o[0:1]))
            if dt == _S8:
                ok = isz == 1
            else:
                ok = isz == 4 and (type(o[0]) is float) == (dt == _F32)
    elif dt == _S8:
        ok = k in "yYbB"
    elif dt == _I32T:
        ok = k == 'i'
    elif dt == _U32:
        ok = k == 'i' or k == 'I'
    else:
        ok = k == 'f'
    if not ok:
        raise _te(fn, name, "expected " + _DTN[dt])
    if n >= 0 and cnt != n:
        raise _ve(fn, name, "has " + str(cnt) + " elements, expected " + str(n))
    if cnt > _MAXN:
        raise _ve(fn, name, "buffer too large (more than 2^26 elements)")
    return k


def _s8copy(o, k):
    # A signed array('b') with the bytes of a 1-byte buffer (raw copy).
    if k == 'b':
        return o
    if k == 'y' or k == 'Y':
        return array('b', o)
    n = len(o)
    c = array('b', bytes(n))
    c[0:n] = o
    return c


def _in8(fn, name, o, n):
    return _s8copy(o, _buf(fn, name, o, _S8, n, False))


def _out8(fn, name, o, n):
    # Mask to store a signed value v as `v & mask` (255 for unsigned buffers).
    return -1 if _buf(fn, name, o, _S8, n, True) == 'b' else 255


def _in32(fn, name, o, n, dt=_I32T):
    k = _buf(fn, name, o, dt, n, False)
    if k == 'i':
        return o
    n = len(o)
    c = array('i', bytes(4 * n))
    c[0:n] = o
    return c


def _out32(fn, name, o, n):
    _buf(fn, name, o, _I32T, n, True)


def _outf(fn, name, o, n):
    _buf(fn, name, o, _F32, n, True)


def _mask(fn, o, n):
    if o is not None:
        _buf(fn, "mask", o, _S8, n, False)
    return o


def _int(fn, name, v):
    if type(v) is not int:
        raise _te(fn, name, "expected an int")
    if v < -2147483648 or v > 2147483647:
        # the native module's words: a 64-bit small int vs a big int
        big = v < -4611686018427387904 or v > 4611686018427387903
        raise _ve(fn, name, "out of range" if big else "out of int32 range")
    return v


def _flt(fn, name, v):
    # A float scale argument (float or int), rounded to float32.
    t = type(v)
    if t is not float and t is not int:
        raise _te(fn, name, "expected a float")
    _f32t[0] = v
    return _f32t[0]


def _nover(fn, out_name, out, in_name, inp):
    # The one overlap Python can see: the very same object.
    if out is inp:
        raise _ve(fn, out_name, "must not overlap " + in_name)


def _chk(fn, name, msg):
    if msg:
        raise _ve(fn, name, msg)


def _desc(fn, o, n):
    d = _in32(fn, "desc", o, n)
    return tuple(d)


# ---------------------------------------------------------------------------
# descriptor checks (checks.c, same messages)


def _dim(v):
    return 1 <= v <= 65535


def _axis(n_in, n_out, k, stride, pad, msg_pad, msg_out):
    if pad < 0 or pad >= k:
        return msg_pad
    if (n_out - 1) * stride >= n_in + pad:
        return msg_out
    return None


def _act(lo, hi):
    if lo < -128 or hi > 127 or lo > hi:
        return "act_min/act_max must satisfy -128 <= act_min <= act_max <= 127"
    return None


def _conv_check(d):
    in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, p_t, p_l, g, izp, ozp, lo, hi = d
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
    if in_h * in_w * in_c > _MAXN or out_h * out_w * out_c > _MAXN:
        return "tensor too large (more than 2^26 elements)"
    kk = k_h * k_w * (in_c // g)
    if kk > 32768:
        return "k_h * k_w * in_c / groups must be <= 32768"
    if out_c * kk > _MAXN:
        return "weight tensor too large (more than 2^26 elements)"
    if out_h * out_w > 65536:
        return "out_h * out_w must be <= 65536"
    m = _axis(in_h, out_h, k_h, s_h, p_t, "pad_top must be in 0..k_h-1",
              "out_h too large: last window starts below the input")
    if m:
        return m
    m = _axis(in_w, out_w, k_w, s_w, p_l, "pad_left must be in 0..k_w-1",
              "out_w too large: last window starts right of the input")
    if m:
        return m
    if not (-128 <= izp <= 127 and -128 <= ozp <= 127):
        return "in_zp and out_zp must be in -128..127"
    return _act(lo, hi)


def _linear_check(d):
    in_n, out_n, izp, ozp, lo, hi = d
    if in_n < 1 or in_n > 32768 or not _dim(out_n):
        return "in_n must be in 1..32768 and out_n in 1..65535"
    if in_n * out_n > _MAXN:
        return "weight tensor too large (more than 2^26 elements)"
    if not (-128 <= izp <= 127 and -128 <= ozp <= 127):
        return "in_zp and out_zp must be in -128..127"
    return _act(lo, hi)


def _pool_check(d):
    in_h, in_w, c, out_h, out_w, k_h, k_w, s_h, s_w, p_t, p_l = d
    if not (_dim(in_h) and _dim(in_w) and _dim(c) and _dim(out_h) and _dim(out_w)):
        return "in_h, in_w, c, out_h, out_w must be in 1..65535"
    if not (_dim(k_h) and _dim(k_w) and _dim(s_h) and _dim(s_w)):
        return "k_h, k_w, stride_h, stride_w must be in 1..65535"
    if k_h * k_w > 255:
        return "k_h * k_w must be <= 255"
    if in_h * in_w * c > _MAXN or out_h * out_w * c > _MAXN:
        return "tensor too large (more than 2^26 elements)"
    m = _axis(in_h, out_h, k_h, s_h, p_t, "pad_top must be in 0..k_h-1",
              "out_h too large: last window starts below the input")
    if m:
        return m
    return _axis(in_w, out_w, k_w, s_w, p_l, "pad_left must be in 0..k_w-1",
                 "out_w too large: last window starts right of the input")


def _add_check(d):
    n, z1, z2, zo, m1, sh1, m2, sh2, mo, sho, ls, lo, hi = d
    if n < 0 or n > _MAXN:
        return "n must be in 0..2^26"
    if not (-128 <= z1 <= 127 and -128 <= z2 <= 127 and -128 <= zo <= 127):
        return "zero points must be in -128..127"
    if m1 < 0 or m2 < 0 or mo < 0:
        return "multipliers must be >= 0 (Q31)"
    if sh1 > 0 or sh1 < -31 or sh2 > 0 or sh2 < -31:
        return "input shifts sh1, sh2 must be in -31..0"
    if sho < -31 or sho > 31:
        return "sh_out must be in -31..31"
    if ls < 0 or ls > 22:
        return "left_shift must be in 0..22"
    return _act(lo, hi)


def _qcheck(fn, bias, mult, shift, n):
    for i in range(n):
        b = bias[i]
        if b > 1073741824 or b < -1073741824:
            raise _ve(fn, "bias", "bias must be in -2^30..2^30")
    for i in range(n):
        if mult[i] < 0:
            raise _ve(fn, "mult/shift", "mult must be >= 0 (Q31 multipliers)")
        s = shift[i]
        if s < -31 or s > 31:
            raise _ve(fn, "mult/shift", "shift must be in -31..31")


def _wr_check(wr, n, terms):
    mx = 0
    for i in range(n):
        v = wr[i]
        if v < 0:
            return "wr must be >= 0"
        if v > mx:
            mx = v
    if mx * terms > 131071 and mx:
        return "wr too large: max(wr) * terms * 16384 must be <= 2^31-1"
    return None


def _conv_desc(fn, o):
    d = _desc(fn, o, 17)
    _chk(fn, "desc", _conv_check(d))
    return d


def _linear_desc(fn, o):
    d = _desc(fn, o, 6)
    _chk(fn, "desc", _linear_check(d))
    return d


def _pool_desc(fn, o):
    d = _desc(fn, o, 11)
    _chk(fn, "desc", _pool_check(d))
    return d


# ---------------------------------------------------------------------------
# integer helpers (mt_quant.h)


def _requant(acc, m, shift):
    # requant(acc, m, shift) of docs/numerics.md for one value.
    if shift > 0:
        acc = ((acc << shift) + _I32 & _M32) - _I32
    h = (acc * m + 0x40000000) >> 31
    if shift < 0:
        e = -shift
        mk = (1 << e) - 1
        r = h >> e
        if (h & mk) > (mk >> 1) + (1 if h < 0 else 0):
            r += 1
        return r
    return h


def _rq_params(mult, shift, n):
    # Per-channel (m, left, right) lists for the inlined requant.
    M = [0] * n
    L = [0] * n
    R = [0] * n
    for i in range(n):
        s = shift[i]
        M[i] = mult[i]
        if s > 0:
            L[i] = s
        else:
            R[i] = -s
    return M, L, R


def _dyn_shift(m):
    s = 0
    while s < 31 and (m + ((1 << (s - 1)) if s else 0)) >> s > 127:
        s += 1
    return s


def _dyn(acc, n, out, om):
    # dyn_requant of acc[0..n) into out (int8, stored as v & om); returns shift.
    if n == 0:
        return 0
    hi = max(acc)
    lo = min(acc)
    m = hi if hi > -lo else -lo
    s = _dyn_shift(m)
    if s == 0:
        for i in range(n):
            out[i] = acc[i] & om
        return 0
    half = 1 << (s - 1)
    for i in range(n):
        v = acc[i]
        if v >= 0:
            out[i] = ((v + half) >> s) & om
        else:
            out[i] = -((half - v) >> s) & om
    return s


def _zero32(a, n):
    for i in range(n):
        a[i] = 0


# ---------------------------------------------------------------------------
# conv2d


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
                        s = ((s << sl) + _I32 & _M32) - _I32
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


def conv2d_s8_grad_input(desc, e, w, wr, mask, acc, ein):
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
    groups = d[12]
    opg = out_c // groups
    _chk(fn, "wr", _wr_check(WR, out_c, d[6] * d[7] * opg))
    _nover(fn, "ein", ein, "e", e)
    _nover(fn, "ein", ein, "w", w)
    _nover(fn, "ein", ein, "mask", mask)
    # wr is read after acc is cleared: a copy keeps an overlapping wr intact
    _grad_input(d, E, W, array('i', WR), mask, acc)
    return _dyn(acc, nin, ein, om)


def _grad_input(d, E, W, WR, mask, acc):
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


def _acc_f32(gi, gf, lo, hi, sc):
    # gf[i] = f32(gf[i] + f32(sc * f32(gi[i]))) for i in [lo, hi)
    t = _f32t
    for i in range(lo, hi):
        v = gi[i]
        if v > 16777216 or v < -16777216:
            t[0] = v
            v = t[0]
        t[0] = sc * v
        gf[i] = gf[i] + t[0]


def conv2d_s8_grad_weight_f32(desc, x, e, mask, w_scale, b_scale, gw, gb):
    fn = "conv2d_s8_grad_weight_f32"
    d = _conv_desc(fn, desc)
    nin, nout, nw = _conv_bufs(d)
    out_c = d[5]
    X = _in8(fn, "x", x, nin)
    E = _in8(fn, "e", e, nout)
    mask = _mask(fn, mask, out_c)
    ws = _flt(fn, "w_scale", w_scale)
    bs = _flt(fn, "b_scale", b_scale)
    _outf(fn, "gw", gw, nw)
    _outf(fn, "gb", gb, out_c)
    _nover(fn, "gw", gw, "gb", gb)
    K = nw // out_c
    iw = array('i', bytes(4 * nw))
    ib = array('i', bytes(4 * out_c))
    _grad_weight(d, X, E, mask, iw, ib)
    for oc in range(out_c):
        if mask is None or mask[oc]:
            _acc_f32(iw, gw, oc * K, oc * K + K, ws)
            _acc_f32(ib, gb, oc, oc + 1, bs)


# ---------------------------------------------------------------------------
# linear


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
            s = ((s << sh) + _I32 & _M32) - _I32
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


def linear_s8_grad_input(desc, e, w, wr, mask, acc, ein):
    fn = "linear_s8_grad_input"
    d = _linear_desc(fn, desc)
    in_n, out_n = d[0], d[1]
    E = _in8(fn, "e", e, out_n)
    W = _in8(fn, "w", w, in_n * out_n)
    WR = _in32(fn, "wr", wr, out_n)
    mask = _mask(fn, mask, out_n)
    _out32(fn, "acc", acc, in_n)
    om = _out8(fn, "ein", ein, in_n)
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


def linear_s8_grad_weight_f32(desc, x, e, mask, w_scale, b_scale, gw, gb):
    fn = "linear_s8_grad_weight_f32"
    d = _linear_desc(fn, desc)
    in_n, out_n = d[0], d[1]
    X = _in8(fn, "x", x, in_n)
    E = _in8(fn, "e", e, out_n)
    mask = _mask(fn, mask, out_n)
    ws = _flt(fn, "w_scale", w_scale)
    bs = _flt(fn, "b_scale", b_scale)
    _outf(fn, "gw", gw, in_n * out_n)
    _outf(fn, "gb", gb, out_n)
    _nover(fn, "gw", gw, "gb", gb)
    XZ = _lin_x(X, in_n, d[2])
    t = _f32t
    j = 0
    for o in range(out_n):
        if mask is not None and not mask[o]:
            j += in_n
            continue
        ev = E[o]
        for v in XZ:  # |ev * (x - zp)| < 2^24: exact in float32
            t[0] = ws * (ev * v)
            gw[j] = gw[j] + t[0]
            j += 1
        t[0] = bs * ev
        gb[o] = gb[o] + t[0]


# ---------------------------------------------------------------------------
# relu / relu6


def _zp(fn, name, v):
    v = _int(fn, name, v)
    if v < -128 or v > 127:
        raise _ve(fn, name, "must be in -128..127, got " + str(v))
    return v


def relu_s8_forward(x, zp, y):
    fn = "relu_s8_forward"
    X = _in8(fn, "x", x, -1)
    n = len(X)
    zp = _zp(fn, "zp", zp)
    ym = _out8(fn, "y", y, n)
    for i in range(n):
        v = X[i]
        y[i] = (zp if v < zp else v) & ym


def relu6_s8_forward(x, zp, q6, y):
    fn = "relu6_s8_forward"
    X = _in8(fn, "x", x, -1)
    n = len(X)
    zp = _zp(fn, "zp", zp)
    q6 = _zp(fn, "q6", q6)
    ym = _out8(fn, "y", y, n)
    if q6 < zp:
        raise _ve(fn, "q6", "must be >= zp")
    for i in range(n):
        v = X[i]
        if v < zp:
            v = zp
        y[i] = (q6 if v > q6 else v) & ym


def relu_s8_backward(y, zp, e):
    fn = "relu_s8_backward"
    Y = _in8(fn, "y", y, -1)
    n = len(Y)
    zp = _zp(fn, "zp", zp)
    _out8(fn, "e", e, n)
    for i in range(n):
        if Y[i] <= zp:
            e[i] = 0


def relu6_s8_backward(y, zp, q6, e):
    fn = "relu6_s8_backward"
    Y = _in8(fn, "y", y, -1)
    n = len(Y)
    zp = _zp(fn, "zp", zp)
    q6 = _zp(fn, "q6", q6)
    _out8(fn, "e", e, n)
    if q6 < zp:
        raise _ve(fn, "q6", "must be >= zp")
    for i in range(n):
        v = Y[i]
        if v <= zp or v >= q6:
            e[i] = 0


# ---------------------------------------------------------------------------
# pools


def _pool_sizes(d):
    return d[0] * d[1] * d[2], d[3] * d[4] * d[2]


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
    _out32(fn, "acc", acc, nin)
    om = _out8(fn, "ein", ein, nin)
    _nover(fn, "ein", ein, "x", x)
    _nover(fn, "ein", ein, "e", e)
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
                acc[arg] += ev
    return _dyn(acc, nin, ein, om)


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
    _out32(fn, "acc", acc, nin)
    om = _out8(fn, "ein", ein, nin)
    _nover(fn, "ein", ein, "e", e)
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
    if hw * c > _MAXN:
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
    if c < 1 or hw * c > _MAXN:
        raise _ve(fn, "e", "must hold 1..2^26/hw channels")
    _out8(fn, "ein", ein, hw * c)
    _nover(fn, "ein", ein, "e", e)
    # raw byte copies: e's bytes are the int8 values in any 1-byte buffer
    ev = memoryview(E)
    o = 0
    for _ in range(hw):
        ein[o:o + c] = ev
        o += c


# ---------------------------------------------------------------------------
# residual add


def add_s8_forward(desc, x1, x2, y):
    fn = "add_s8_forward"
    d = _desc(fn, desc, 13)
    _chk(fn, "desc", _add_check(d))
    n, z1, z2, zo, m1, sh1, m2, sh2, mo, sho, ls, amin, amax = d
    A = _in8(fn, "x1", x1, n)
    B = _in8(fn, "x2", x2, n)
    ym = _out8(fn, "y", y, n)
    lo = amin - zo
    hi = amax - zo
    sc = 1 << ls
    rq = _requant
    for i in range(n):
        a = rq((A[i] - z1) * sc, m1, sh1)
        b = rq((B[i] - z2) * sc, m2, sh2)
        r = rq(a + b, mo, sho)
        if r < lo:
            r = lo
        elif r > hi:
            r = hi
        y[i] = (r + zo) & ym


def _ratio(fn, name, v):
    r = _int(fn, name, v)
    if r < 0 or r > 32768:
        raise _ve(fn, name, "must be in 0..32768, got " + str(r))
    return r


def add_s8_grad_merge(ea, ra, eb, rb, out):
    fn = "add_s8_grad_merge"
    A = _in8(fn, "ea", ea, -1)
    n = len(A)
    ra = _ratio(fn, "ra", ra)
    B = _in8(fn, "eb", eb, n)
    rb = _ratio(fn, "rb", rb)
    om = _out8(fn, "out", out, n)
    acc = [0] * n
    for i in range(n):
        acc[i] = A[i] * ra + B[i] * rb
    return _dyn(acc, n, out, om)


# ---------------------------------------------------------------------------
# softmax cross-entropy


def softmax_xent_s8(logits, label, lut, err, stats):
    fn = "softmax_xent_s8"
    Q = _in8(fn, "logits", logits, -1)
    c = len(Q)
    if c < 1 or c > 32767:
        raise _ve(fn, "logits", "must hold 1..32767 classes")
    label = _int(fn, "label", label)
    if label < 0 or label >= c:
        raise _ve(fn, "label", "must be in 0.." + str(c - 1) + ", got " + str(label))
    L = _in32(fn, "lut", lut, 256, _U32)
    if L[0] != 65536:
        raise _ve(fn, "lut", "lut[0] must be 65536 (exp(0) in Q16)")
    prev = 65536
    for i in range(1, 256):
        v = L[i] & _M32
        if v > prev:
            raise _ve(fn, "lut", "must be non-increasing (exp of -s*d)")
        prev = v
    om = _out8(fn, "err", err, c)
    _out32(fn, "stats", stats, 3)
    _nover(fn, "err", err, "logits", logits)
    qmax = max(Q)
    s = 0
    for q in Q:
        s += L[qmax - q]
    half = s >> 1
    g = [0] * c
    for i in range(c):
        g[i] = ((L[qmax - Q[i]] << 15) + half) // s
    g[label] -= 32768
    sh = _dyn(g, c, err, om)
    stats[0] = sh
    stats[1] = s
    stats[2] = qmax
    return sh


# ---------------------------------------------------------------------------
# sparse-update helpers and misc


def l1_norm_s8(e, c, norms):
    fn = "l1_norm_s8"
    E = _in8(fn, "e", e, -1)
    n = len(E)
    c = _int(fn, "c", c)
    if c < 1 or c > 65535:
        raise _ve(fn, "c", "must be in 1..65535, got " + str(c))
    npos = n // c
    if npos * c != n:
        raise _ve(fn, "e", "length " + str(n) + " is not a multiple of c = " + str(c))
    if npos >= 16777216:
        raise _ve(fn, "e", "too many positions (2^24 or more)")
    _out32(fn, "norms", norms, c)
    for k in range(c):
        s = 0
        for i in range(k, n, c):
            v = E[i]
            s += v if v >= 0 else -v
        norms[k] = s


def topk_mask(norms, k, mask):
    fn = "topk_mask"
    N = _in32(fn, "norms", norms, -1)
    c = len(N)
    if c < 1 or c > 65535:
        raise _ve(fn, "norms", "must hold 1..65535 channels")
    k = _int(fn, "k", k)
    if k < 0 or k > c:
        raise _ve(fn, "k", "must be in 0.." + str(c) + ", got " + str(k))
    _out8(fn, "mask", mask, c)
    # rank by (-norm, index): one int key each, sorted in C
    keys = [0] * c
    for i in range(c):
        keys[i] = ((0x7FFFFFFF - N[i]) << 16) | i
    keys.sort()
    for i in range(c):
        mask[i] = 0
    for j in range(k):
        mask[keys[j] & 0xFFFF] = 1


def dyn_requant_s8(acc, out):
    fn = "dyn_requant_s8"
    A = _in32(fn, "acc", acc, -1)
    n = len(A)
    om = _out8(fn, "out", out, n)
    return _dyn(A, n, out, om)


def f32_axpy_i32(x, a, y):
    fn = "f32_axpy_i32"
    X = _in32(fn, "x", x, -1)
    n = len(X)
    a = _flt(fn, "a", a)
    _outf(fn, "y", y, n)
    _acc_f32(X, y, 0, n, a)


# ---------------------------------------------------------------------------
# CRC-32 (zlib)

_crc_tab = None


def crc32(data, crc=0):
    """zlib CRC-32 of a byte buffer (binascii.crc32 when present)."""
    if _bcrc is not None:
        return _bcrc(data, crc) & _M32
    global _crc_tab
    t = _crc_tab
    if t is None:
        t = array('I', bytes(1024))
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
            t[i] = c
        _crc_tab = t
    c = crc ^ _M32
    for v in data:
        c = t[(c ^ v) & 0xFF] ^ (c >> 8)
    return c ^ _M32


# ---------------------------------------------------------------------------
# .mtm model files (mtm_loader.c, docs/format.md)

_unp = struct.unpack_from
_TFMT = "<BBBBIIIIIIIIiII"  # one 48-byte tensor entry
_LFMT = "<BBBBIIIIIIIIIIIIIIII"  # the first 72 bytes of a layer entry
_NPARAMS = (0, 17, 6, 2, 3, 11, 11, 2, 13)


def _u32(b, off):
    return _unp("<I", b, off)[0]


def _i32(b, off):
    return _unp("<i", b, off)[0]


def _f32ok(bits):
    # IEEE binary32 bits: finite and > 0
    return bits != 0 and (bits >> 31) == 0 and ((bits >> 23) & 0xFF) != 0xFF


def _zeros_in(b, lo, hi):
    for k in range(lo, hi):
        if b[k] & 0xFF:
            return False
    return True


def _utf8_ok(b, o, n):
    k = 0
    while k < n:
        c = b[o + k] & 0xFF
        lo = 0x80
        hi = 0xBF
        if c < 0x80:
            k += 1
            continue
        if 0xC2 <= c <= 0xDF:
            need = 1
        elif 0xE0 <= c <= 0xEF:
            need = 2
            if c == 0xE0:
                lo = 0xA0
            elif c == 0xED:
                hi = 0x9F
        elif 0xF0 <= c <= 0xF4:
            need = 3
            if c == 0xF0:
                lo = 0x90
            elif c == 0xF4:
                hi = 0x8F
        else:
            return False
        if need > n - k - 1:
            return False
        v = b[o + k + 1] & 0xFF
        if v < lo or v > hi:
            return False
        for t in range(2, need + 1):
            v = b[o + k + t] & 0xFF
            if v < 0x80 or v > 0xBF:
                return False
        k += need + 1
    return True


class _Fail(Exception):
    pass


class _V:
    # validation context: the header numbers and tensor-entry access

    def __init__(self, b, ln):
        self.b = b
        self.len = ln
        h = _unp("<IIIIIIIIIIIII", b, 12)
        self.flags, self.n_t, self.n_l = h[0], h[2], h[4]
        self.lt_off, self.s_off, self.s_len, self.d_off, self.d_len = h[5], h[6], h[7], h[8], h[9]
        self.input, self.output = h[10], h[11]

    def t(self, i):
        return _unp(_TFMT, self.b, 64 + 48 * i)

    def fail(self, msg, where=0, index=-1):
        raise _Fail(msg, where, index)

    def string_ok(self, off, n):
        s_len = self.s_len
        if off >= s_len or n >= s_len - off:
            return False
        b = self.b
        o = self.s_off + off
        if b[o + n] & 0xFF:
            return False
        for k in range(o, o + n):
            if not b[k] & 0xFF:
                return False
        return _utf8_ok(b, o, n)


def _numel(t):
    r = 1
    for d in range(t[1]):
        r *= t[5 + d]
    return r if r <= _M32 else -1


def _shape_is(t, r, d):
    if t[1] != r:
        return False
    for k in range(r):
        if d[k] < 1 or t[5 + k] != d[k]:
            return False
    return True


def _check_tensors(c):
    b = c.b
    n_t = c.n_t
    d_end = c.d_off + c.d_len
    prev_end = c.d_off
    has_state = c.flags & 2
    for i in range(n_t):
        t = c.t(i)
        dt, rank, kind, q, tflags = t[0], t[1], t[2], t[3], t[4]
        if dt < 1 or dt > 4:
            c.fail("unknown tensor dtype", 1, i)
        if kind > 2:
            c.fail("unknown tensor kind", 1, i)
        if q > 3:
            c.fail("unknown tensor quant", 1, i)
        if rank < 1 or rank > 4:
            c.fail("tensor rank outside 1..4", 1, i)
        for d in range(4):
            v = t[5 + d]
            if (v < 1 or v > 65535) if d < rank else v != 0:
                c.fail("tensor shape: dims must be 1..65535 below rank, 0 beyond", 1, i)
        if (tflags & ~1) or t[14]:
            c.fail("unknown tensor flags or non-zero reserved field", 1, i)
        if (tflags & 1) and (rank != 3 or t[5] != 1):
            c.fail("SIGNAL_1D tensor must have shape (1, L, C)", 1, i)
        off, ln = t[9], t[10]
        if kind == 0:
            if dt != 1:
                c.fail("activation must be int8", 1, i)
            if off or ln:
                c.fail("activation with data offset/length", 1, i)
            if q != 1:
                c.fail("activation must be PER_TENSOR quantised", 1, i)
        else:
            if q == 1:
                c.fail("PER_TENSOR quant is for activations only", 1, i)
            if kind == 2:
                if not has_state:
                    c.fail("STATE tensor in a file without HAS_STATE", 1, i)
                if dt != 3 or q != 0:
                    c.fail("STATE tensor must be float32, quant NONE", 1, i)
            need = _numel(t)
            if need >= 0:
                need *= 1 if (dt == 1 or dt == 4) else 4
            if need < 0 or need > _M32 or ln != need:
                c.fail("data_len != numel * itemsize", 1, i)
            if off & 7:
                c.fail("data_off not 8-aligned", 1, i)
            if off < prev_end or off > d_end or ln > d_end - off:
                c.fail("data out of the blob, overlapping or out of order", 1, i)
            if not _zeros_in(b, prev_end, off):
                c.fail("non-zero bytes in the data blob gap before this tensor", 1, i)
            prev_end = off + ln
        sc, zp, qs = t[11], t[12], t[13]
        if q == 1:
            if not _f32ok(sc):
                c.fail("PER_TENSOR scale must be finite and > 0", 1, i)
            if zp < -128 or zp > 127:
                c.fail("zero point outside [-128, 127]", 1, i)
            if qs != _NONE:
                c.fail("PER_TENSOR tensor with qscales", 1, i)
        elif (sc & 0x7FFFFFFF) or zp:
            c.fail("scale and zero point must be 0 unless PER_TENSOR", 1, i)
        if q == 2:
            if dt != 1 or kind != 1:
                c.fail("PER_CHANNEL tensor must be an int8 CONST", 1, i)
            if qs >= n_t:
                c.fail("qscales index out of range", 1, i)
        elif q == 3:
            if dt != 2 or kind != 1:
                c.fail("BIAS tensor must be an int32 CONST", 1, i)
            if qs != _NONE:
                c.fail("BIAS tensor with qscales", 1, i)
        elif q == 0 and qs != _NONE:
            c.fail("quant NONE tensor with qscales", 1, i)
    for i in range(n_t):
        t = c.t(i)
        if t[3] != 2:
            continue
        qt = c.t(t[13])
        if qt[0] != 3 or qt[2] != 1 or qt[3] != 0 or qt[1] != 1 or qt[5] != t[5]:
            c.fail("qscales tensor must be a float32 CONST quant NONE of shape (shape[0],)", 1, i)
        off = qt[9]
        for k in range(qt[5]):
            if not _f32ok(_u32(b, off + 4 * k)):
                c.fail("qscales value not finite or <= 0", 1, i)
    if not _zeros_in(b, prev_end, d_end):
        c.fail("non-zero bytes in the data blob after the last tensor", 1, n_t - 1)


def _act_rule(act, ozp, lo, hi):
    if lo < -128 or hi > 127 or lo > hi:
        return "need -128 <= act_min <= act_max <= 127"
    if act == 0 and (lo != -128 or hi != 127):
        return "act none needs act_min -128, act_max 127"
    if act == 1 and (lo != ozp or hi != 127):
        return "act relu needs act_min == out_zp, act_max 127"
    if act == 2 and lo != ozp:
        return "act relu6 needs act_min == out_zp"
    return None


def _qparams_ok(c, bt, mt, st, n):
    b = c.b
    bo, mo, so = bt[9], mt[9], st[9]
    for k in range(n):
        v = _i32(b, bo + 4 * k)
        if v > 1073741824 or v < -1073741824:
            return "|bias| > 2^30"
        if _i32(b, mo + 4 * k) < 0:
            return "negative multiplier"
        v = _i32(b, so + 4 * k)
        if v < -31 or v > 31:
            return "shift outside [-31, 31]"
    return None


def _weighted_ok(c, L, wr, wd):
    oc = wd[0]
    wt, bt, mt, st = c.t(L[12]), c.t(L[13]), c.t(L[14]), c.t(L[15])
    if not _shape_is(wt, wr, wd):
        return "weight shape does not match the descriptor"
    if wt[0] != 1 or wt[3] != 2:
        return "weight must be int8 PER_CHANNEL"
    if bt[0] != 2 or bt[3] != 3 or not _shape_is(bt, 1, (oc,)):
        return "bias must be int32 BIAS of shape (out_c,)"
    if mt[0] != 2 or mt[3] != 0 or not _shape_is(mt, 1, (oc,)):
        return "mult must be int32 quant NONE of shape (out_c,)"
    if st[0] != 2 or st[3] != 0 or not _shape_is(st, 1, (oc,)):
        return "shift must be int32 quant NONE of shape (out_c,)"
    m = _qparams_ok(c, bt, mt, st, oc)
    if m:
        return m
    for s in range(4):
        si = L[16 + s]
        if si == _NONE:
            continue
        tt = c.t(si)
        ok = _shape_is(tt, 1, (oc,)) if s & 1 else _shape_is(tt, wr, wd)
        if tt[0] != 3 or not ok:
            return "state tensor must be float32 with the shape of its weight / bias"
    return None


def _same_shape(a, b):
    return a[1] == b[1] and a[5] == b[5] and a[6] == b[6] and a[7] == b[7] and a[8] == b[8]


def _op_rules(c, L, p, op, act):
    x = c.t(L[9])
    y = c.t(L[11])
    if op == 1:
        m = _conv_check(p[:17])
        if m:
            return m
        if not _shape_is(x, 3, (p[0], p[1], p[2])):
            return "input shape != (in_h, in_w, in_c)"
        if not _shape_is(y, 3, (p[3], p[4], p[5])):
            return "output shape != (out_h, out_w, out_c)"
        m = _weighted_ok(c, L, 4, (p[5], p[6], p[7], p[2] // p[12]))
        if m:
            return m
        if p[13] != x[12] or p[14] != y[12]:
            return "in_zp / out_zp differ from the tensors' zero points"
        return _act_rule(act, p[14], p[15], p[16])
    if op == 2:
        m = _linear_check(p[:6])
        if m:
            return m
        if p[0] < 1 or _numel(x) != p[0]:
            return "input numel != in_n"
        if not _shape_is(y, 1, (p[1],)):
            return "output shape != (out_n,)"
        m = _weighted_ok(c, L, 2, (p[1], p[0]))
        if m:
            return m
        if p[2] != x[12] or p[3] != y[12]:
            return "in_zp / out_zp differ from the tensors' zero points"
        return _act_rule(act, p[3], p[4], p[5])
    if op == 8:
        x2 = c.t(L[10])
        if not _same_shape(x, x2) or not _same_shape(x, y):
            return "inputs and output shapes differ"
        if p[0] < 1 or _numel(y) != p[0]:
            return "n != numel"
        if p[1] != x[12] or p[2] != x2[12] or p[3] != y[12]:
            return "zero points differ from the tensors'"
        m = _add_check(p[:13])
        if m:
            return m
        return _act_rule(act, p[3], p[11], p[12])
    if op == 3 or op == 4:
        if not _same_shape(x, y):
            return "input and output shapes differ"
        if p[0] < 1 or _numel(x) != p[0]:
            return "n != numel"
        if p[1] != x[12]:
            return "zp != input zero point"
        if op == 4 and (p[2] < p[1] or p[2] > 127):
            return "need zp <= q6 <= 127"
    elif op == 7:
        if p[0] < 1 or p[1] < 1:
            return "hw and c must be >= 1"
        if x[1] != 3 or (x[5] * x[6]) & _M32 != p[0] or x[7] != p[1]:
            return "input shape does not match hw, c"
        if not _shape_is(y, 3, (1, 1, p[1])):
            return "output shape != (1, 1, c)"
    else:
        m = _pool_check(p[:11])
        if m:
            return m
        if not _shape_is(x, 3, (p[0], p[1], p[2])):
            return "input shape != (in_h, in_w, c)"
        if not _shape_is(y, 3, (p[3], p[4], p[2])):
            return "output shape != (out_h, out_w, c)"
    if x[11] != y[11] or x[12] != y[12]:
        return "input and output quantisation differ"
    return None


def _check_layers(c, produced, consumed):
    b = c.b
    n_t = c.n_t
    has_state = c.flags & 2
    if c.t(c.input)[2] != 0:
        c.fail("model input is not an activation")
    produced[c.input] = 1
    for j in range(c.n_l):
        e = c.lt_off + 152 * j
        L = _unp(_LFMT, b, e)
        op, act, n_p, n_in, lflags = L[0], L[1], L[2], L[3], L[4]
        noff, nlen, foff, flen = L[5], L[6], L[7], L[8]
        if op < 1 or op > 8:
            c.fail("unknown op", 2, j)
        if n_in != (2 if op == 8 else 1):
            c.fail("n_inputs does not match the op", 2, j)
        if n_p != _NPARAMS[op]:
            c.fail("n_params does not match the op", 2, j)
        p = _unp("<20i", b, e + 72)
        for k in range(n_p, 20):
            if p[k]:
                c.fail("unused params not zero", 2, j)
        weighted = op == 1 or op == 2
        if act > 2:
            c.fail("unknown act", 2, j)
        if act and not weighted and op != 8:
            c.fail("fused activation on an op without one", 2, j)
        if (lflags & ~1) or _u32(b, e + 68):
            c.fail("unknown layer flags or non-zero reserved field", 2, j)
        if (lflags & 1) and not (c.flags & 1):
            c.fail("TRAINED layer in a file without TRAINED", 2, j)
        if nlen < 1 or nlen > 63 or not c.string_ok(noff, nlen):
            c.fail("bad layer name (1..63 bytes of UTF-8, NUL-terminated in the pool)", 2, j)
        na = c.s_off + noff
        for k in range(j):
            ek = c.lt_off + 152 * k
            if _u32(b, ek + 12) == nlen:
                nb = c.s_off + _u32(b, ek + 8)
                t = 0
                while t < nlen and b[na + t] == b[nb + t]:
                    t += 1
                if t == nlen:
                    c.fail("duplicate layer name", 2, j)
        if flen > 255 or not c.string_ok(foff, flen):
            c.fail("bad fused string (0..255 bytes of UTF-8, NUL-terminated in the pool)", 2, j)
        in0, in1, out = L[9], L[10], L[11]
        if (in1 >= n_t) if op == 8 else (in1 != _NONE):
            c.fail("in1 must be a tensor for ADD and NONE otherwise", 2, j)
        if in0 >= n_t or out >= n_t:
            c.fail("tensor index out of range", 2, j)
        if c.t(in0)[2] != 0 or c.t(out)[2] != 0 or (op == 8 and c.t(in1)[2] != 0):
            c.fail("input / output tensor is not an activation", 2, j)
        if not produced[in0] or (op == 8 and not produced[in1]):
            c.fail("input tensor is neither the model input nor an earlier output", 2, j)
        if produced[out]:
            c.fail("output tensor is already produced", 2, j)
        for s in range(4):
            t = L[12 + s]
            if (t >= n_t or c.t(t)[2] != 1) if weighted else t != _NONE:
                c.fail("weight/bias/mult/shift must be CONST tensors for CONV2D/LINEAR and NONE otherwise",
                       2, j)
        for s in range(4):
            t = L[16 + s]
            if t == _NONE:
                continue
            if not has_state or not weighted:
                c.fail("state slot set without HAS_STATE or on a non-weighted op", 2, j)
            if t >= n_t or c.t(t)[2] != 2:
                c.fail("state slot tensor is not a STATE tensor", 2, j)
        m = _op_rules(c, L, p, op, act)
        if m:
            c.fail(m, 2, j)
        produced[out] = 1
        consumed[in0] = 1
        if op == 8:
            consumed[in1] = 1


def _check_graph(c, produced, consumed):
    b = c.b
    n_t = c.n_t
    if _u32(b, c.lt_off + 152 * (c.n_l - 1) + 32) != c.output:
        c.fail("output is not the last layer's output")
    for i in range(n_t):
        if c.t(i)[2] != 0:
            continue
        if not produced[i]:
            c.fail("activation is never produced", 1, i)
        if i != c.output and not consumed[i]:
            c.fail("activation is never consumed", 1, i)
    # reference counts of CONST/STATE tensors (0, 1, 2 = twice or more)
    refs = bytearray(n_t)
    for j in range(c.n_l):
        for t in _unp("<8I", b, c.lt_off + 152 * j + 36):
            if t != _NONE and refs[t] < 2:
                refs[t] += 1
    for i in range(n_t):
        t = c.t(i)
        if t[3] == 2 and refs[t[13]] < 2:
            refs[t[13]] += 1
    for i in range(n_t):
        if c.t(i)[2] != 0 and refs[i] != 1:
            c.fail("CONST/STATE tensor not referenced exactly once", 1, i)


def _validate(b, ln):
    # Returns None, or (message, where, index) like mtm_validate in C.
    if ln < 68:
        return "file too short (< 68 bytes)", 0, -1
    if ln > 0x7FFFFFF0:
        return "file too large", 0, -1
    if b[0] & 0xFF != 77 or b[1] & 0xFF != 84 or b[2] & 0xFF != 77 or b[3] & 0xFF != 70:
        return "bad magic (expected MTMF)", 0, -1
    if _unp("<H", b, 4)[0] != 1 or _unp("<H", b, 6)[0] > 0:
        return "unsupported version (reader is 1.0)", 0, -1
    if _u32(b, 8) != 64:
        return "header_size != 64", 0, -1
    if _u32(b, 16) != ln:
        return "total_len != file length (truncated or padded file)", 0, -1
    if crc32(memoryview(b)[0:ln - 4]) != _u32(b, ln - 4):
        return "CRC32 mismatch", 0, -1
    c = _V(b, ln)
    if c.flags & ~3:
        return "unknown header flags", 0, -1
    if c.n_t < 1 or c.n_t > 4096:
        return "n_tensors outside 1..4096", 0, -1
    if c.n_l < 1 or c.n_l > 1024:
        return "n_layers outside 1..1024", 0, -1
    if _u32(b, 24) != 64:
        return "tensor_table_off != 64", 0, -1
    if c.lt_off != 64 + 48 * c.n_t:
        return "layer_table_off != 64 + 48 * n_tensors", 0, -1
    if c.s_off != c.lt_off + 152 * c.n_l:
        return "strings_off != layer_table_off + 152 * n_layers", 0, -1
    if c.s_len < 1 or c.s_off > ln - 4 or c.s_len > ln - 4 - c.s_off:
        return "strings_len out of range", 0, -1
    s_end = c.s_off + c.s_len
    if c.d_off != (s_end + 7) & ~7:
        return "data_off != align8(strings_off + strings_len)", 0, -1
    if c.d_off > ln - 4 or c.d_len != ln - 4 - c.d_off or c.d_len & 7:
        return "data_len inconsistent with total_len or not a multiple of 8", 0, -1
    if c.input >= c.n_t or c.output >= c.n_t:
        return "input/output tensor index out of range", 0, -1
    if _u32(b, 60) and not c.flags & 1:
        return "train_steps without TRAINED", 0, -1
    if b[c.s_off] & 0xFF:
        return "string pool does not start with NUL", 0, -1
    if not _zeros_in(b, s_end, c.d_off):
        return "non-zero padding after the string pool", 0, -1
    try:
        _check_tensors(c)
        produced = bytearray(c.n_t)
        consumed = bytearray(c.n_t)
        _check_layers(c, produced, consumed)
        _check_graph(c, produced, consumed)
    except _Fail as e:
        return e.args
    return None


def _mtm_buf(fn, o):
    _buf(fn, "buf", o, _S8, -1, False)
    return o


def _tables(b, ln):
    # mtm_check_tables: NULL (None) when ok, else a message
    if ln < 64 or b[0] & 0xFF != 77 or b[1] & 0xFF != 84 or b[2] & 0xFF != 77 or b[3] & 0xFF != 70:
        return "not an .mtm header (too short or bad magic)"
    n_t, n_l = _u32(b, 20), _u32(b, 28)
    s_off, s_len = _u32(b, 36), _u32(b, 40)
    if n_t < 1 or n_t > 4096 or n_l < 1 or n_l > 1024:
        return "n_tensors / n_layers out of range"
    lt = _u32(b, 32)
    if (_u32(b, 24) != 64 or lt != 64 + 48 * n_t or s_off != lt + 152 * n_l or s_off > ln
            or s_len > ln - s_off):
        return "tables or string pool outside the buffer"
    return None


def _layer_name(b, ln, i):
    if _tables(b, ln) or i >= _u32(b, 28):
        return None
    e = _u32(b, 32) + 152 * i
    s_len = _u32(b, 40)
    off, n = _u32(b, e + 8), _u32(b, e + 12)
    if off >= s_len or n > 63 or n > s_len - off:
        return None
    o = _u32(b, 36) + off
    return bytes(b[k] & 0xFF for k in range(o, o + n))


def mtm_validate(buf):
    fn = "mtm_validate"
    b = _mtm_buf(fn, buf)
    ln = len(b)
    r = _validate(b, ln)
    if r is None:
        return None
    msg, where, index = r
    what = msg.encode()
    if where == 1:
        what += b" (tensor " + str(index).encode() + b")"
    elif where == 2:
        what += b" (layer " + str(index).encode()
        name = _layer_name(b, ln, index)
        if name is not None:
            z = name.find(b"\0")
            if z >= 0:
                name = name[:z]
            # as the C binding: the name is unvalidated, non-ASCII bytes read as '?'
            what += b" '" + bytes(v if v < 128 else 63 for v in name) + b"'"
        what += b")"
    full = (fn + ": ").encode() + what
    full = full[:223]
    try:
        text = full.decode()
    except UnicodeError:
        text = "".join(chr(v) if v < 128 else "?" for v in full)
    raise ValueError(text)


def _tables_buf(fn, buf):
    b = _mtm_buf(fn, buf)
    _chk(fn, "buf", _tables(b, len(b)))
    return b


def _s32(u):
    u &= _M32
    return u - 0x100000000 if u & _I32 else u


def mtm_info(buf, out):
    fn = "mtm_info"
    b = _tables_buf(fn, buf)
    _out32(fn, "out", out, 15)
    h = _unp("<HHIIIIIIIIIIIIII", b, 4)
    out[0] = h[0]
    out[1] = h[1]
    out[2] = _s32(h[3])
    out[3] = _s32(h[4])
    out[4] = _s32(h[5])
    out[5] = _s32(h[7])
    out[6] = _s32(h[6])
    for k in range(8):  # layer_table_off .. output, train_steps
        out[7 + k] = _s32(h[8 + k])


def _index(fn, v, n):
    i = _int(fn, "i", v)
    if i < 0 or i >= n:
        raise _ve(fn, "i", "must be in 0.." + str(n - 1) + ", got " + str(i))
    return i


def mtm_tensor(buf, i, out):
    fn = "mtm_tensor"
    b = _tables_buf(fn, buf)
    i = _index(fn, i, _u32(b, 20))
    _out32(fn, "out", out, 14)
    t = _unp("<BBBBIIIIIIIIII", b, 64 + 48 * i)
    for k in range(14):
        out[k] = _s32(t[k])


def mtm_layer(buf, i, out):
    fn = "mtm_layer"
    b = _tables_buf(fn, buf)
    i = _index(fn, i, _u32(b, 28))
    _out32(fn, "out", out, 21)
    e = _u32(b, 32) + 152 * i
    s_off = _u32(b, 36)
    L = _unp(_LFMT, b, e)
    for k in range(20):
        out[k] = _s32(L[k])
    out[5] = _s32(L[5] + s_off)
    out[7] = _s32(L[7] + s_off)
    out[20] = _s32(e + 72)
