# Argument checks of the pure-Python kernels: the binding's buffer / int /
# float checks (usermod/microtrain/mt_bind.h: mt_buf, mt_int, ...) and
# the descriptor checks (checks.c), with the binding's exception types and
# messages ("fn: arg: what").
from array import array

from microtrain.fmt import MAX_ELEMS

try:
    from micropython import const
except ImportError:  # CPython (host debugging)
    def const(x):
        return x

I32 = 0x80000000  # not const(): a big int on 32-bit ports
M32 = 0xFFFFFFFF

# dtype codes of _buf
S8 = const(0)
I32T = const(1)
U32 = const(2)
F32 = const(3)
_DTN = ("an int8 buffer (bytes, bytearray or array('b'/'B'))", "an array('i')",
        "an array('I') or array('i')", "an array('f')")

_f32t = array('f', [0.0])  # float32 rounding scratch (not re-entrant; kernels are not either)


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


def _mv_probe(o):
    # (itemsize, writable) of an empty memoryview; itemsize 2 stands for "neither 1 nor 4".
    # The size check of a slice assignment comes before the read-only check.
    try:
        o[0:0] = array('i')
        return 4, True
    except TypeError:
        return 4, False
    except ValueError:
        pass
    try:
        o[0:0] = b""
        return 1, True
    except TypeError:
        return 1, False
    except ValueError:
        return 2, True


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
        if not cnt:
            # an empty view: itemsize and writability from slice assignments. Which 4-byte
            # typecode ('i', 'I' or 'f') it has cannot be told from Python: any is taken.
            isz, writable = _mv_probe(o)
            if wr and not writable:
                raise _te(fn, name, "expected a writable buffer (bytearray or array)")
            ok = isz == 1 if dt == S8 else isz == 4
        else:
            if wr:
                try:
                    o[0] = o[0]
                except TypeError:
                    raise _te(fn, name, "expected a writable buffer (bytearray or array)") from None
            isz = len(bytes(o[0:1]))
            if dt == S8:
                ok = isz == 1
            else:
                ok = isz == 4 and (type(o[0]) is float) == (dt == F32)
    elif dt == S8:
        ok = k in "yYbB"
    elif dt == I32T:
        ok = k == 'i'
    elif dt == U32:
        ok = k == 'i' or k == 'I'
    else:
        ok = k == 'f'
    if not ok:
        raise _te(fn, name, "expected " + _DTN[dt])
    if n >= 0 and cnt != n:
        raise _ve(fn, name, "has " + str(cnt) + " elements, expected " + str(n))
    if cnt > MAX_ELEMS:
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
    return _s8copy(o, _buf(fn, name, o, S8, n, False))


def _out8(fn, name, o, n):
    # Mask to store a signed value v as `v & mask`: -1 (v itself) for signed
    # buffers, 255 for unsigned ones. Every store must fit the element type
    # (CircuitPython raises OverflowError where MicroPython truncates), so a
    # memoryview's signedness is probed: a signed element reads back -1.
    k = _buf(fn, name, o, S8, n, True)
    if k == 'b':
        return -1
    if k != 'm' or not len(o):
        return 255
    v = o[0]
    if v < 0:
        return -1
    try:
        o[0] = -1
    except OverflowError:  # CircuitPython: an unsigned element
        return 255
    s = o[0]
    o[0] = v
    return -1 if s < 0 else 255


def _in32(fn, name, o, n, dt=I32T):
    k = _buf(fn, name, o, dt, n, False)
    if k == 'i':
        return o
    n = len(o)
    c = array('i', bytes(4 * n))
    c[0:n] = o
    return c


def _out32(fn, name, o, n):
    _buf(fn, name, o, I32T, n, True)


def _outf(fn, name, o, n):
    _buf(fn, name, o, F32, n, True)


def _mask(fn, o, n):
    if o is not None:
        _buf(fn, "mask", o, S8, n, False)
    return o


def _int(fn, name, v):
    if type(v) is not int:
        raise _te(fn, name, "expected an int")
    if v < -2147483648 or v > 2147483647:
        # the native module's words: a 64-bit small int vs a big int
        big = v < -4611686018427387904 or v > 4611686018427387903
        raise _ve(fn, name, "out of range" if big else "out of int32 range")
    return v


def _act_bounds(fn, lo, hi):
    # an activation mask's bounds in the binding's order: lo, hi, then hi >= lo
    lo = _int(fn, "lo", lo)
    if lo < -129 or lo > 127:
        raise _ve(fn, "lo", "must be in -129..127, got " + str(lo))
    hi = _int(fn, "hi", hi)
    if hi < -128 or hi > 128:
        raise _ve(fn, "hi", "must be in -128..128, got " + str(hi))
    if hi < lo:
        raise _ve(fn, "hi", "must be >= lo")
    return lo, hi


# lo / hi not given to a conv2d / linear grad input (an explicit None is a TypeError)
_NOACT = object()


def _grad_act(fn, lo, hi):
    # the grad input's optional mask bounds (mt_grad_act): None without them
    if lo is _NOACT and hi is _NOACT:
        return None
    if hi is _NOACT or lo is _NOACT:
        raise _te(fn, "hi", "must be given with lo (both or neither)")
    return _act_bounds(fn, lo, hi)


def _flt(fn, name, v):
    # A float scale argument (float or int), rounded to float32.
    t = type(v)
    if t is not float and t is not int:
        raise _te(fn, name, "expected a float")
    _f32t[0] = v
    return _f32t[0]


def _nover(fn, out_name, out, in_name, inp):
    # The one overlap Python can see: the very same object (two empty buffers do not
    # overlap, as in the native check).
    if out is inp and len(out):
        raise _ve(fn, out_name, "must not overlap " + in_name)


def _chk(fn, name, msg):
    if msg:
        raise _ve(fn, name, msg)


def _desc(fn, o, n):
    d = _in32(fn, "desc", o, n)
    return tuple(d)


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
    in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, p_t, p_l, g, izp, ozp, lo, hi = d[:17]
    dh = dw = 1
    if len(d) > 17:  # mt_conv2d_dil_check: dil_h, dil_w follow; windows span (k - 1) * dil + 1
        dh, dw = d[17], d[18]
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
    dil = len(d) > 17
    m = _axis(in_h, out_h, (k_h - 1) * dh + 1, s_h, p_t,
              "pad_top must be in 0..(k_h-1)*dil_h" if dil else "pad_top must be in 0..k_h-1",
              "out_h too large: last window starts below the input")
    if m:
        return m
    m = _axis(in_w, out_w, (k_w - 1) * dw + 1, s_w, p_l,
              "pad_left must be in 0..(k_w-1)*dil_w" if dil else "pad_left must be in 0..k_w-1",
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
    if in_n * out_n > MAX_ELEMS:
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
    if in_h * in_w * c > MAX_ELEMS or out_h * out_w * c > MAX_ELEMS:
        return "tensor too large (more than 2^26 elements)"
    m = _axis(in_h, out_h, k_h, s_h, p_t, "pad_top must be in 0..k_h-1",
              "out_h too large: last window starts below the input")
    if m:
        return m
    return _axis(in_w, out_w, k_w, s_w, p_l, "pad_left must be in 0..k_w-1",
                 "out_w too large: last window starts right of the input")


def _add_check(d):
    n, z1, z2, zo, m1, sh1, m2, sh2, mo, sho, ls, lo, hi = d
    if n < 0 or n > MAX_ELEMS:
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
            return ("wr must be >= 0 (the grad-input weight ratios: fill wr from the layer's weight "
                    "scales with update_f32_ratios(w_scale, r, wr))")
        if v > mx:
            mx = v
    if mx * terms > 131071 and mx:
        return "wr too large: max(wr) * terms * 16384 must be <= 2^31-1"
    return None


def _linear_desc(fn, o):
    d = _desc(fn, o, 6)
    _chk(fn, "desc", _linear_check(d))
    return d


def _pool_desc(fn, o):
    d = _desc(fn, o, 11)
    _chk(fn, "desc", _pool_check(d))
    return d


# c0 not given to a _grad_weight_f32 kernel (not None: the binding refuses an
# explicit None with a TypeError, so must its twin)
_WHOLE = object()


def _gw_window(fn, out_c, k, mask, gw, gb, c0):
    # gw / gb of a _grad_weight_f32 call as the binding's mt_gw_window: the whole
    # layer without c0, else the window of len(gb) channels from c0, every
    # channel outside it masked. Returns c0.
    if c0 is _WHOLE:
        _outf(fn, "gw", gw, out_c * k)
        _outf(fn, "gb", gb, out_c)
        return 0
    _outf(fn, "gw", gw, -1)
    _outf(fn, "gb", gb, -1)
    c0 = _int(fn, "c0", c0)
    n = len(gb)
    if c0 < 0 or c0 >= out_c:
        raise _ve(fn, "c0", "must be in 0.." + str(out_c - 1) + ", got " + str(c0))
    if n < 1 or n > out_c - c0:
        raise _ve(fn, "gb", "has " + str(n) + " elements, expected 1.." + str(out_c - c0) + " (out_c - c0)")
    if len(gw) != n * k:
        raise _ve(fn, "gw", "has " + str(len(gw)) + " elements, expected " + str(n * k))
    if c0 or n != out_c:
        if mask is None:
            raise _ve(fn, "mask", "required when gw / gb hold a window of the channels (c0, len(gb))")
        for oc in range(out_c):
            if mask[oc] and (oc < c0 or oc >= c0 + n):
                raise _ve(fn, "mask", "channel " + str(oc) + " is set, outside the window " + str(c0) + ".."
                          + str(c0 + n - 1) + " of gw / gb")
    return c0


# a tensor row of the .mtm loader's (mtm_loader.py, mtm_rules_rnn.py): its numel, its shape
def _numel(t):
    r = 1
    for d in range(t[1]):
        r *= t[5 + d]
    return r if r <= M32 else -1


def _shape_is(t, r, d):
    if t[1] != r:
        return False
    for k in range(r):
        if d[k] < 1 or t[5 + k] != d[k]:
            return False
    return True
