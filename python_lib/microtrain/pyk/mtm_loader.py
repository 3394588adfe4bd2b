# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# The .mtm validator and accessors (mtm_loader.c, docs/format.md), and the
# zlib CRC-32 (binascii.crc32 when the port has it, else a table).
import struct
from array import array

from microtrain.fmt import LAYER_HEAD_FMT, N_PARAMS, NONE, SCALE_MAX_BITS, TENSOR_FMT
from microtrain.pyk.checks import (
    I32,
    M32,
    S8,
    _add_check,
    _buf,
    _chk,
    _conv_check,
    _int,
    _linear_check,
    _numel,
    _out32,
    _pool_check,
    _shape_is,
    _te,
    _ve,
)

try:
    from micropython import const
except ImportError:  # CPython (host debugging)
    def const(x):
        return x

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
# The .mtm constants this module reads, private: inlined, no globals entry.
_VERSION_MAJOR = const(1)
_VERSION_MINOR = const(5)
_HEADER_SIZE = const(64)
_TENSOR_ENTRY = const(48)
_LAYER_ENTRY = const(152)
_PARAMS_OFF = const(72)
_N_PARAMS_MAX = const(20)
_MAX_TENSORS = const(4096)
_MAX_LAYERS = const(1024)
_MAX_ELEMS = const(67108864)
_SCALE_MIN_BITS = const(729808896)
_MAX_GAP_HW = const(65536)
_MAX_GRAD_TERMS = const(131071)
_MAX_CLASSES = const(32767)
_SOFTMAX_SCALE_BITS = const(998244352)
_SOFTMAX_ZP = const(-128)
_H_VERSION_MAJOR = const(4)
_H_VERSION_MINOR = const(6)
_H_HEADER_SIZE = const(8)
_H_FLAGS = const(12)
_H_TOTAL_LEN = const(16)
_H_N_TENSORS = const(20)
_H_TENSOR_TABLE_OFF = const(24)
_H_N_LAYERS = const(28)
_H_LAYER_TABLE_OFF = const(32)
_H_STRINGS_OFF = const(36)
_H_STRINGS_LEN = const(40)
_H_TRAIN_STEPS = const(60)
_L_NAME_OFF = const(8)
_L_NAME_LEN = const(12)
_L_IN1 = const(28)
_L_OUT = const(32)
_L_WEIGHT = const(36)
_L_STATE = const(52)
_L_STATE4 = const(68)
_INFO_VERSION_MAJOR = const(0)
_INFO_VERSION_MINOR = const(1)
_INFO_FLAGS = const(2)
_INFO_TOTAL_LEN = const(3)
_INFO_N_TENSORS = const(4)
_INFO_N_LAYERS = const(5)
_INFO_TENSOR_TABLE_OFF = const(6)
_INFO_LAYER_TABLE_OFF = const(7)
_LROW_NAME_OFF = const(5)
_LROW_FUSED_OFF = const(7)
_LROW_STATE3 = const(19)
_LROW_PARAMS_OFF = const(20)
_LROW_STATE4 = const(21)
_LROW_STATE5 = const(22)
_INFO_N = const(15)
_TENSOR_N = const(14)
_LAYER_N = const(23)
_KIND_ACT = const(0)
_KIND_CONST = const(1)
_KIND_STATE = const(2)
_OP_CONV2D = const(1)
_OP_LINEAR = const(2)
_OP_RELU = const(3)
_OP_RELU6 = const(4)
_OP_GAP = const(7)
_OP_ADD = const(8)
_OP_LUT = const(9)
_OP_CONCAT = const(10)
_OP_UPSAMPLE = const(11)
_OP_MUL = const(12)
_OP_LAYERNORM = const(13)
_OP_SOFTMAX = const(14)
_OP_MATMUL = const(15)
_OP_GRU = const(16)
_OP_LSTM = const(17)
# --- generated: end

try:
    import binascii
    _bcrc = binascii.crc32
except (ImportError, AttributeError):
    _bcrc = None

_crc_tab = None


def crc32(data, crc=0):
    """zlib CRC-32 of a byte buffer (binascii.crc32 when present)."""
    if _bcrc is not None:
        return _bcrc(data, crc) & M32
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
    c = crc ^ M32
    for v in data:
        c = t[(c ^ v) & 0xFF] ^ (c >> 8)
    return c ^ M32


_unp = struct.unpack_from
_TFMT = TENSOR_FMT  # one tensor entry (the scale as its bits)
_LFMT = LAYER_HEAD_FMT  # a layer entry up to state[3]


def _u32(b, off):
    return _unp("<I", b, off)[0]


def _slots(b, e):
    # the 6 state slots of the layer entry at e (NONE: absent); 4, 5 (Adam's second moments,
    # format 1.3) are the u16 pair at entry offset 68 (0xFFFF: absent; before 1.3 absent)
    v = _unp("<4I2H", b, e + _L_STATE)
    if _unp("<H", b, _H_VERSION_MINOR)[0] < 3:
        return v[:4] + (NONE, NONE)
    return v[:4] + (NONE if v[4] == 0xFFFF else v[4], NONE if v[5] == 0xFFFF else v[5])


def _i32(b, off):
    return _unp("<i", b, off)[0]


def _scale_ok(bits):
    # IEEE binary32 bits of a scale in [2^-40, 2^40] (positive floats order as their bits)
    return _SCALE_MIN_BITS <= bits <= SCALE_MAX_BITS


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
        h = _unp("<IIIIIIIIIIIII", b, _H_FLAGS)  # flags .. output
        self.flags, self.n_t, self.n_l = h[0], h[2], h[4]
        self.lt_off, self.s_off, self.s_len, self.d_off, self.d_len = h[5], h[6], h[7], h[8], h[9]
        self.input, self.output = h[10], h[11]

    def t(self, i):
        return _unp(_TFMT, self.b, _HEADER_SIZE + _TENSOR_ENTRY * i)

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
        if kind == _KIND_ACT:
            if dt != 1:
                c.fail("activation must be int8", 1, i)
            if off or ln:
                c.fail("activation with data offset/length", 1, i)
            if q != 1:
                c.fail("activation must be PER_TENSOR quantised", 1, i)
            if not 0 <= _numel(t) <= _MAX_ELEMS:
                c.fail("activation larger than 2^26 values", 1, i)
        else:
            if q == 1:
                c.fail("PER_TENSOR quant is for activations only", 1, i)
            if kind == _KIND_STATE:
                if not has_state:
                    c.fail("STATE tensor in a file without HAS_STATE", 1, i)
                if dt != 3 or q != 0:
                    c.fail("STATE tensor must be float32, quant NONE", 1, i)
            need = _numel(t)
            if need >= 0:
                need *= 1 if (dt == 1 or dt == 4) else 4
            if need < 0 or need > M32 or ln != need:
                c.fail("data_len != numel * itemsize", 1, i)
            if off & 7:
                c.fail("data_off not 8-aligned", 1, i)
            if off < prev_end or off > d_end or ln > d_end - off:
                c.fail("data out of the blob, overlapping or out of order", 1, i)
            if not _zeros_in(b, prev_end, off):
                c.fail("non-zero bytes in the data blob gap before this tensor", 1, i)
            prev_end = off + ln
            if kind == _KIND_STATE:
                for k in range(off, off + ln, 4):
                    if (_u32(b, k) >> 23) & 0xFF == 0xFF:
                        c.fail("STATE value not finite", 1, i)
        sc, zp, qs = t[11], t[12], t[13]
        if q == 1:
            if not _scale_ok(sc):
                c.fail("PER_TENSOR scale outside 2^-40..2^40", 1, i)
            if zp < -128 or zp > 127:
                c.fail("zero point outside [-128, 127]", 1, i)
            if qs != NONE:
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
            if qs != NONE:
                c.fail("BIAS tensor with qscales", 1, i)
        elif q == 0 and qs != NONE:
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
            if not _scale_ok(_u32(b, off + 4 * k)):
                c.fail("weight scale (qscales value) outside 2^-40..2^40", 1, i)
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


def _weighted_ok(c, L, wr, wd, e):
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
    for s, si in enumerate(_slots(c.b, e)):
        if si == NONE:
            continue
        tt = c.t(si)
        ok = _shape_is(tt, 1, (oc,)) if s & 1 else _shape_is(tt, wr, wd)
        if tt[0] != 3 or not ok:
            return "state tensor must be float32 with the shape of its weight / bias"
    return None


def _same_shape(a, b):
    return a[1] == b[1] and a[5] == b[5] and a[6] == b[6] and a[7] == b[7] and a[8] == b[8]


def _op_rules(c, L, p, op, act, e):
    x = c.t(L[9])
    y = c.t(L[11])
    if op == _OP_LUT:  # params: n, in_zp, out_zp, d_shift; weight = table, bias = dtable
        tt, dt = c.t(L[12]), c.t(L[13])
        if not _same_shape(x, y):
            return "input and output shapes differ"
        if p[0] < 1 or _numel(x) != p[0]:
            return "n != numel"
        if p[1] != x[12] or p[2] != y[12]:
            return "zero points differ from the tensors'"
        if p[3] < 0 or p[3] > 24:
            return "d_shift outside [0, 24]"
        if tt[0] != 1 or tt[3] != 0 or not _shape_is(tt, 1, (256,)):
            return "table must be int8 quant NONE of shape (256,)"
        if dt[0] != 2 or dt[3] != 0 or not _shape_is(dt, 1, (256,)):
            return "dtable must be int32 quant NONE of shape (256,)"
        o = dt[9]
        for k in range(256):
            v = _i32(c.b, o + 4 * k)
            if v > 16777215 or v < -16777215:
                return "|dtable| > 2^24 - 1"
        return None
    if op == _OP_CONV2D:
        m = _conv_check(p[:19] if L[2] == 19 else p[:17])  # 19: dil_h, dil_w follow
        if m:
            return m
        if not _shape_is(x, 3, (p[0], p[1], p[2])):
            return "input shape != (in_h, in_w, in_c)"
        if not _shape_is(y, 3, (p[3], p[4], p[5])):
            return "output shape != (out_h, out_w, out_c)"
        if p[6] * p[7] * (p[5] // p[12]) > _MAX_GRAD_TERMS:
            return "k_h * k_w * out_c / groups must be <= 131071 (grad-input bound)"
        m = _weighted_ok(c, L, 4, (p[5], p[6], p[7], p[2] // p[12]), e)
        if m:
            return m
        if p[13] != x[12] or p[14] != y[12]:
            return "in_zp / out_zp differ from the tensors' zero points"
        return _act_rule(act, p[14], p[15], p[16])
    if op == _OP_LINEAR:
        m = _linear_check(p[:6])
        if m:
            return m
        if p[0] < 1 or _numel(x) != p[0]:
            return "input numel != in_n"
        if not _shape_is(y, 1, (p[1],)):
            return "output shape != (out_n,)"
        m = _weighted_ok(c, L, 2, (p[1], p[0]), e)
        if m:
            return m
        if p[2] != x[12] or p[3] != y[12]:
            return "in_zp / out_zp differ from the tensors' zero points"
        return _act_rule(act, p[3], p[4], p[5])
    if op == _OP_ADD:
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
    if op == _OP_MUL:
        from microtrain.pyk.mul_s8 import _mul_check

        m = _mul_check(p[:11])
        if m:
            return m
        x2 = c.t(L[10])
        if not _same_shape(x, y) or _numel(x) != p[0] * p[1] or x[4 + x[1]] != p[1]:
            return "input / output shapes differ from each other or from hw, c"
        if _numel(x2) != p[2] * p[3] or x2[4 + x2[1]] != p[3]:
            return "second input's shape does not match hw2, c2"
        if p[4] != x[12] or p[5] != x2[12] or p[6] != y[12]:
            return "zero points differ from the tensors'"
        return _act_rule(act, p[6], p[9], p[10])
    if op == _OP_LAYERNORM:
        from microtrain.pyk.layernorm_s8 import _layernorm_check

        m = _layernorm_check(p[:7])
        if m:
            return m
        n = p[0] * p[1]
        if _numel(x) != n or _numel(y) != n or x[4 + x[1]] != p[1] or y[4 + y[1]] != p[1]:
            return "input / output numel != rows * c or last dim != c"
        if p[2] != x[12] or p[3] != y[12]:
            return "zero points differ from the tensors'"
        return None
    if op == _OP_SOFTMAX:
        from microtrain.pyk.softmax_s8 import _softmax_check

        m = _softmax_check(p[:3])
        if m:
            return m
        if not _same_shape(x, y) or _numel(x) != p[0] * p[1] * p[2]:
            return "input and output shapes differ or numel != outer * n * inner"
        if y[11] != _SOFTMAX_SCALE_BITS or y[12] != _SOFTMAX_ZP:
            return "output quantisation must be scale 1/256, zero point -128"
        return None
    if op >= _OP_GRU:  # GRU, LSTM: their rules in a module of their own, read only for such a file
        from microtrain.pyk.mtm_rules_rnn import rnn_rules

        return rnn_rules(c, L, p, op)
    if op == _OP_MATMUL:  # the descriptor (heads only with 13 params), then the factor's float32 bits
        from microtrain.pyk.matmul_s8 import _matmul_check

        nh = p[11] if L[2] == 13 else 1
        m = _matmul_check(p[:11] + (nh,))
        if m:
            return m
        x2 = c.t(L[10])
        rows, inner, cols, tb = p[0], p[1], p[2], p[3]
        # the last dims of the head layouts (numerics.md): tb 1 splits a's and b's values into the
        # heads and stacks y's; tb 0 stacks a's and splits b's and y's columns
        xl = x[4 + x[1]]  # (one row: a vector, also as a column of one value per token)
        if _numel(x) != nh * rows * inner or (xl != (nh if tb else 1) * inner
                                              and not (rows == 1 and xl == 1)):
            return ("first input's numel != heads * rows * inner or last dim != inner (heads * inner with tb,"
                    " 1 or inner for one row)")
        if _numel(x2) != nh * inner * cols or x2[4 + x2[1]] != nh * (inner if tb else cols):
            return ("second input's numel != heads * inner * cols or last dim != heads * cols (heads * inner"
                    " with tb)")
        if _numel(y) != nh * rows * cols or y[4 + y[1]] != (1 if tb else nh) * cols:
            return "output numel != heads * rows * cols or last dim != cols (heads * cols without tb)"
        if p[4] != x[12] or p[5] != x2[12] or p[6] != y[12]:
            return "zero points differ from the tensors'"
        if not _scale_ok(p[L[2] - 1] & 0xFFFFFFFF):
            return "factor outside [2^-40, 2^40]"
        return _act_rule(act, p[6], p[9], p[10])
    if op == _OP_CONCAT:
        from microtrain.pyk.concat import _concat_check

        m = _concat_check(p[:10])
        if m:
            return m
        x2 = c.t(L[10])
        if x[4 + x[1]] != p[1] or x2[4 + x2[1]] != p[2] or y[4 + y[1]] != p[1] + p[2]:
            return "channel (last) dims differ from c1, c2, c1 + c2"
        if _numel(x) != p[0] * p[1] or _numel(x2) != p[0] * p[2] or _numel(y) != p[0] * (p[1] + p[2]):
            return "numel != hw * channels"
        if p[3] != x[12] or p[4] != x2[12] or p[5] != y[12]:
            return "zero points differ from the tensors'"
        return None
    if op == _OP_UPSAMPLE:
        from microtrain.pyk.upsample import _upsample_check

        m = _upsample_check(p[:9])
        if m:
            return m
        if not _shape_is(x, 3, (p[0], p[1], p[2])):
            return "input shape != (in_h, in_w, c)"
        if not _shape_is(y, 3, (p[3], p[4], p[2])):
            return "output shape != (out_h, out_w, c)"
        if p[8] != x[12]:
            return "zp != input zero point"
    elif op == _OP_RELU or op == _OP_RELU6:
        if not _same_shape(x, y):
            return "input and output shapes differ"
        if p[0] < 1 or _numel(x) != p[0]:
            return "n != numel"
        if p[1] != x[12]:
            return "zp != input zero point"
        if op == _OP_RELU6 and (p[2] < p[1] or p[2] > 127):
            return "need zp <= q6 <= 127"
    elif op == _OP_GAP:
        if p[0] < 1 or p[1] < 1:
            return "hw and c must be >= 1"
        if p[0] > _MAX_GAP_HW:
            return "hw must be <= 65536 (global_avgpool positions)"
        if x[1] != 3 or (x[5] * x[6]) & M32 != p[0] or x[7] != p[1]:
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
    if c.t(c.input)[2] != _KIND_ACT:
        c.fail("model input is not an activation")
    produced[c.input] = 1
    for j in range(c.n_l):
        e = c.lt_off + _LAYER_ENTRY * j
        L = _unp(_LFMT, b, e)
        op, act, n_p, n_in, lflags = L[0], L[1], L[2], L[3], L[4]
        noff, nlen, foff, flen = L[5], L[6], L[7], L[8]
        if op < 1 or op > _OP_LSTM:
            c.fail("unknown op", 2, j)
        if op == _OP_LUT and _unp("<H", b, _H_VERSION_MINOR)[0] < 1:
            c.fail("LUT layer in a version 1.0 file (needs 1.1)", 2, j)
        if op >= _OP_CONCAT and _unp("<H", b, _H_VERSION_MINOR)[0] < 2:
            c.fail("CONCAT / UPSAMPLE layer in a version 1.0 / 1.1 file (needs 1.2)", 2, j)
        if op >= _OP_MUL and _unp("<H", b, _H_VERSION_MINOR)[0] < (5 if op >= _OP_GRU else 4):
            c.fail("GRU / LSTM layer in a file before version 1.5" if op >= _OP_GRU
                   else "MUL / LAYERNORM / SOFTMAX / MATMUL layer in a file before version 1.4", 2, j)
        two = op == _OP_ADD or op == _OP_CONCAT or op == _OP_MUL or op == _OP_MATMUL
        if n_in != (2 if two else 1):
            c.fail("n_inputs does not match the op", 2, j)
        dilated = op == _OP_CONV2D and n_p == 19
        multi = op == _OP_MATMUL and n_p == 13
        if n_p != N_PARAMS[op] and not dilated and not multi:
            c.fail("n_params does not match the op", 2, j)
        if multi and (_unp("<H", b, _H_VERSION_MINOR)[0] < 5 or _unp("<i", b, e + _PARAMS_OFF + 44)[0] < 2):
            c.fail("13-param MATMUL needs version 1.5 and heads above 1", 2, j)
        if dilated and (_unp("<H", b, _H_VERSION_MINOR)[0] < 2
                        or _unp("<2i", b, e + _PARAMS_OFF + 4 * 17) == (1, 1)):  # dil_h, dil_w
            c.fail("19-param CONV2D needs version 1.2 and a dilation above 1", 2, j)
        p = _unp("<20i", b, e + _PARAMS_OFF)  # N_PARAMS_MAX
        for k in range(n_p, _N_PARAMS_MAX):
            if p[k]:
                c.fail("unused params not zero", 2, j)
        weighted = op == _OP_CONV2D or op == _OP_LINEAR
        if act > 2:
            c.fail("unknown act", 2, j)
        if act and not weighted and op != _OP_ADD:
            c.fail("fused activation on an op without one", 2, j)
        if (lflags & ~1) or (_unp("<H", b, _H_VERSION_MINOR)[0] < 3 and _u32(b, e + _L_STATE4)):
            c.fail("unknown layer flags or non-zero reserved field", 2, j)
        if (lflags & 1) and not (c.flags & 1):
            c.fail("TRAINED layer in a file without TRAINED", 2, j)
        if nlen < 1 or nlen > 63 or not c.string_ok(noff, nlen):
            c.fail("bad layer name (1..63 bytes of UTF-8, NUL-terminated in the pool)", 2, j)
        na = c.s_off + noff
        for k in range(j):
            ek = c.lt_off + _LAYER_ENTRY * k
            if _u32(b, ek + _L_NAME_LEN) == nlen:
                nb = c.s_off + _u32(b, ek + _L_NAME_OFF)
                t = 0
                while t < nlen and b[na + t] == b[nb + t]:
                    t += 1
                if t == nlen:
                    c.fail("duplicate layer name", 2, j)
        if flen > 255 or not c.string_ok(foff, flen):
            c.fail("bad fused string (0..255 bytes of UTF-8, NUL-terminated in the pool)", 2, j)
        in0, in1, out = L[9], L[10], L[11]
        if (in1 >= n_t) if two or op >= _OP_GRU else (in1 != NONE):
            c.fail("in1 must be a tensor for ADD / CONCAT / MUL / MATMUL / GRU / LSTM and NONE otherwise",
                   2, j)
        if in0 >= n_t or out >= n_t:
            c.fail("tensor index out of range", 2, j)
        if c.t(in0)[2] != _KIND_ACT or c.t(out)[2] != _KIND_ACT or (two and c.t(in1)[2] != _KIND_ACT):
            c.fail("input / output tensor is not an activation", 2, j)
        if not produced[in0] or (two and not produced[in1]):
            c.fail("input tensor is neither the model input nor an earlier output", 2, j)
        if produced[out]:
            c.fail("output tensor is already produced", 2, j)
        for s in range(4):
            t = L[12 + s]
            if op == _OP_LUT:
                if (t >= n_t or c.t(t)[2] != _KIND_CONST) if s < 2 else t != NONE:
                    c.fail("LUT needs CONST weight (table) and bias (dtable), and mult/shift NONE", 2, j)
            elif (t >= n_t or c.t(t)[2] != _KIND_CONST) if weighted or op >= _OP_GRU else t != NONE:
                c.fail("weight/bias/mult/shift must be CONST tensors for CONV2D/LINEAR/GRU/LSTM and NONE "
                       "otherwise", 2, j)
        sl = _slots(b, e)
        for s in range(6):
            t = sl[s]
            if t == NONE:
                continue
            if s >= 4 and sl[s - 2] == NONE:
                c.fail("state[4] / state[5] set without state[2] / state[3]", 2, j)
            if not has_state or not weighted:
                c.fail("state slot set without HAS_STATE or on a non-weighted op", 2, j)
            if t >= n_t or c.t(t)[2] != _KIND_STATE:
                c.fail("state slot tensor is not a STATE tensor", 2, j)
        m = _op_rules(c, L, p, op, act, e)
        if m:
            c.fail(m, 2, j)
        produced[out] = 1
        consumed[in0] = 1
        if two:
            consumed[in1] = 1

def _check_graph(c, produced, consumed):
    b = c.b
    n_t = c.n_t
    if _u32(b, c.lt_off + _LAYER_ENTRY * (c.n_l - 1) + _L_OUT) != c.output:
        c.fail("output is not the last layer's output")
    if not 0 <= _numel(c.t(c.output)) <= _MAX_CLASSES:
        c.fail("model output larger than 32767 values (cross_entropy class limit)")
    for i in range(n_t):
        if c.t(i)[2] != _KIND_ACT:
            continue
        if not produced[i]:
            c.fail("activation is never produced", 1, i)
        if i != c.output and not consumed[i]:
            c.fail("activation is never consumed", 1, i)
    # reference counts of CONST/STATE tensors (0, 1, 2 = twice or more)
    refs = bytearray(n_t)
    for j in range(c.n_l):
        e = c.lt_off + _LAYER_ENTRY * j
        ts = _unp("<4I", b, e + _L_WEIGHT) + _slots(b, e)
        if b[e] >= _OP_GRU:  # a GRU's / LSTM's tables
            ts += (_u32(b, e + _L_IN1),)
        for t in ts:
            if t != NONE and refs[t] < 2:
                refs[t] += 1
    for i in range(n_t):
        t = c.t(i)
        if t[3] == 2 and refs[t[13]] < 2:
            refs[t[13]] += 1
    for i in range(n_t):
        if c.t(i)[2] != _KIND_ACT and refs[i] != 1:
            c.fail("CONST/STATE tensor not referenced exactly once", 1, i)


def _validate(b, ln):
    # Returns None, or (message, where, index) like mtm_validate in C.
    if ln < 68:
        return "file too short (< 68 bytes)", 0, -1
    if ln > 0x7FFFFFF0:
        return "file too large", 0, -1
    if b[0] & 0xFF != 77 or b[1] & 0xFF != 84 or b[2] & 0xFF != 77 or b[3] & 0xFF != 70:
        return "bad magic (expected MTMF)", 0, -1
    if (_unp("<H", b, _H_VERSION_MAJOR)[0] != _VERSION_MAJOR
            or _unp("<H", b, _H_VERSION_MINOR)[0] > _VERSION_MINOR):
        return "unsupported version (reader is 1.5)", 0, -1
    if _u32(b, _H_HEADER_SIZE) != _HEADER_SIZE:
        return "header_size != 64", 0, -1
    if _u32(b, _H_TOTAL_LEN) != ln:
        return "total_len != file length (truncated or padded file)", 0, -1
    if crc32(memoryview(b)[0:ln - 4]) != _u32(b, ln - 4):
        return "CRC32 mismatch", 0, -1
    c = _V(b, ln)
    if c.flags & ~3:
        return "unknown header flags", 0, -1
    if c.n_t < 1 or c.n_t > _MAX_TENSORS:
        return "n_tensors outside 1..4096", 0, -1
    if c.n_l < 1 or c.n_l > _MAX_LAYERS:
        return "n_layers outside 1..1024", 0, -1
    if _u32(b, _H_TENSOR_TABLE_OFF) != _HEADER_SIZE:
        return "tensor_table_off != 64", 0, -1
    if c.lt_off != _HEADER_SIZE + _TENSOR_ENTRY * c.n_t:
        return "layer_table_off != 64 + 48 * n_tensors", 0, -1
    if c.s_off != c.lt_off + _LAYER_ENTRY * c.n_l:
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
    if _u32(b, _H_TRAIN_STEPS) and not c.flags & 1:
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
    _buf(fn, "buf", o, S8, -1, False)
    return o


def _tables(b, ln):
    # mtm_check_tables: NULL (None) when ok, else a message
    if ln < _HEADER_SIZE or b[0] & 0xFF != 77 or b[1] & 0xFF != 84 or b[2] & 0xFF != 77 or b[3] & 0xFF != 70:
        return "not an .mtm header (too short or bad magic)"
    n_t, n_l = _u32(b, _H_N_TENSORS), _u32(b, _H_N_LAYERS)
    s_off, s_len = _u32(b, _H_STRINGS_OFF), _u32(b, _H_STRINGS_LEN)
    if n_t < 1 or n_t > _MAX_TENSORS or n_l < 1 or n_l > _MAX_LAYERS:
        return "n_tensors / n_layers out of range"
    lt = _u32(b, _H_LAYER_TABLE_OFF)
    if (_u32(b, _H_TENSOR_TABLE_OFF) != _HEADER_SIZE or lt != _HEADER_SIZE + _TENSOR_ENTRY * n_t
            or s_off != lt + _LAYER_ENTRY * n_l or s_off > ln or s_len > ln - s_off):
        return "tables or string pool outside the buffer"
    return None


def _layer_name(b, ln, i):
    if _tables(b, ln) or i >= _u32(b, _H_N_LAYERS):
        return None
    e = _u32(b, _H_LAYER_TABLE_OFF) + _LAYER_ENTRY * i
    s_len = _u32(b, _H_STRINGS_LEN)
    off, n = _u32(b, e + _L_NAME_OFF), _u32(b, e + _L_NAME_LEN)
    if off >= s_len or n > 63 or n > s_len - off:
        return None
    o = _u32(b, _H_STRINGS_OFF) + off
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


def mtm_view(view, typecode):
    """int32 / float32 items of a 1-byte memoryview. The C binding retypes the view in place
    (zero-copy); Python cannot, so this returns a copy with the same values."""
    fn = "mtm_view"
    if type(view) is not memoryview:
        raise _te(fn, "view", "must be a memoryview")
    typecode = _int(fn, "typecode", typecode)
    if typecode != 105 and typecode != 102:
        raise _ve(fn, "typecode", "must be ord('i') or ord('f')")
    if len(view) & 3:
        raise _ve(fn, "view", "must be 4-byte aligned, a multiple of 4 bytes long")
    return array(chr(typecode), bytes(view))


def _tables_buf(fn, buf):
    b = _mtm_buf(fn, buf)
    _chk(fn, "buf", _tables(b, len(b)))
    return b


def _s32(u):
    u &= M32
    return u - 0x100000000 if u & I32 else u


def mtm_info(buf, out):
    fn = "mtm_info"
    b = _tables_buf(fn, buf)
    _out32(fn, "out", out, _INFO_N)
    out[_INFO_VERSION_MAJOR] = _unp("<H", b, _H_VERSION_MAJOR)[0]
    out[_INFO_VERSION_MINOR] = _unp("<H", b, _H_VERSION_MINOR)[0]
    out[_INFO_FLAGS] = _s32(_u32(b, _H_FLAGS))
    out[_INFO_TOTAL_LEN] = _s32(_u32(b, _H_TOTAL_LEN))
    out[_INFO_N_TENSORS] = _s32(_u32(b, _H_N_TENSORS))
    out[_INFO_N_LAYERS] = _s32(_u32(b, _H_N_LAYERS))
    out[_INFO_TENSOR_TABLE_OFF] = _s32(_u32(b, _H_TENSOR_TABLE_OFF))
    for k in range(_INFO_N - _INFO_LAYER_TABLE_OFF):  # layer_table_off .. train_steps: consecutive u32
        out[_INFO_LAYER_TABLE_OFF + k] = _s32(_u32(b, _H_LAYER_TABLE_OFF + 4 * k))


def _index(fn, v, n):
    i = _int(fn, "i", v)
    if i < 0 or i >= n:
        raise _ve(fn, "i", "must be in 0.." + str(n - 1) + ", got " + str(i))
    return i


def mtm_tensor(buf, i, out):
    fn = "mtm_tensor"
    b = _tables_buf(fn, buf)
    i = _index(fn, i, _u32(b, _H_N_TENSORS))
    _out32(fn, "out", out, _TENSOR_N)
    t = _unp(_TFMT, b, _HEADER_SIZE + _TENSOR_ENTRY * i)
    for k in range(_TENSOR_N):  # the entry's fields are the row's, in order
        out[k] = _s32(t[k])


def mtm_layer(buf, i, out):
    fn = "mtm_layer"
    b = _tables_buf(fn, buf)
    i = _index(fn, i, _u32(b, _H_N_LAYERS))
    _out32(fn, "out", out, _LAYER_N)
    e = _u32(b, _H_LAYER_TABLE_OFF) + _LAYER_ENTRY * i
    s_off = _u32(b, _H_STRINGS_OFF)
    L = _unp(_LFMT, b, e)
    for k in range(_LROW_STATE3 + 1):  # op .. state[3]: the entry's fields, in order
        out[k] = _s32(L[k])
    out[_LROW_NAME_OFF] = _s32(L[_LROW_NAME_OFF] + s_off)
    out[_LROW_FUSED_OFF] = _s32(L[_LROW_FUSED_OFF] + s_off)
    out[_LROW_PARAMS_OFF] = _s32(e + _PARAMS_OFF)
    sl = _slots(b, e)
    out[_LROW_STATE4] = _s32(sl[4])
    out[_LROW_STATE5] = _s32(sl[5])
