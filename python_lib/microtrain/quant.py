# Quantisation helpers shared by the model, the loss and the optimisers.
# Each mirrors a function of tools/microtrain_tools/reference/oracle.py (same formulas,
# same rounding: host round(v) = floor(v + 0.5)).
import array
import math

from micropython import const

INT32_MAX = const(2147483647)
BIAS_LIMIT = const(1073741824)  # |bias| <= 2^30 (numerics.md)


def zeros(typecode, n):
    """array(typecode) of n zeros, grown in place: building it from bytes(n * size)
    would need twice its size at once (a 74 KB gradient buffer would need 148 KB
    free). It starts from the top bits of n and doubles by extending with itself
    (MicroPython re-reads its own buffer after a move), adding one element for
    each set bit of n: log2(n) reallocations, so the copying is linear in n, and
    no temporary beyond the array itself."""
    size = 1 if typecode in "bB" else (2 if typecode in "hH" else 4)
    p = 0
    while (n >> p) * size > 64:  # (the first bytes object is the only temporary: 64 B at most)
        p += 1
    a = array.array(typecode, bytes((n >> p) * size))
    while p:
        p -= 1
        a.extend(a)
        if (n >> p) & 1:
            a.append(0)
    return a


def rnd(v):
    """floor(v + 0.5) as an int."""
    return int(math.floor(v + 0.5))


def quantize_multiplier(real):
    """(m, shift) with real ~= m * 2^(shift - 31), 2^30 <= m < 2^31 (TFLite)."""
    if not real > 0.0:
        if real == 0.0:
            return 0, 0
        raise ValueError("quantize_multiplier: real must be finite and >= 0")
    q, shift = math.frexp(real)
    m = int(math.floor(q * 2147483648.0 + 0.5))
    if m == 2147483648:
        m >>= 1
        shift += 1
    if shift > 31:
        return INT32_MAX, 31
    if shift < -31:
        m = int(math.floor(math.ldexp(real, 62) + 0.5))
        return (m, -31) if m else (0, 0)
    return m, shift


def _exp_q16(scale, d):
    return int(math.floor(65536.0 * math.exp(-scale * d) + 0.5))


def softmax_lut(scale, out=None):
    """uint32 table lut[d] = round(2^16 * exp(-scale * d)) up to its last nonzero
    entry (1..256 entries): softmax_xent_s8 reads d >= len(lut) as 0. Fills `out`
    (zeroing its tail) when it is long enough, else returns a new array."""
    if not scale > 0.0:
        raise ValueError("softmax_lut: scale must be > 0")
    n = 1
    while n < 256 and _exp_q16(scale, n):  # exp decreases: the first 0 ends the table
        n += 1
    lut = out if out is not None and len(out) >= n else zeros("I", n)
    for d in range(len(lut)):
        lut[d] = _exp_q16(scale, d) if d < n else 0
    return lut


def weight_ratios(s_w, terms, wr):
    """Fill wr (int32) with the grad-input weight ratios; return (R, max s_w).

    R is the largest R <= 15 with max(wr) * terms * 16384 <= 2^31 - 1, so the
    ein base scale is s_e * max(s_w) * 2^-R (numerics.md, conv2d grad input)."""
    top = 0.0
    for v in s_w:
        if v > top:
            top = v
    if not top > 0.0:
        raise ValueError("weight_ratios: scales must have max > 0")
    r = 15
    while r > 0 and (1 << r) * terms * 16384 > INT32_MAX:
        r -= 1
    one = 1 << r
    fl = math.floor
    for i in range(len(s_w)):
        wr[i] = int(fl(one * s_w[i] / top + 0.5))
    return r, top


def merge_ratios(s_a, s_b):
    """(ra, rb) = round(2^15 * s / max(s_a, s_b)) for add_s8_grad_merge."""
    top = s_a if s_a > s_b else s_b
    if not top > 0.0:
        return 32768, 32768
    return rnd(32768.0 * s_a / top), rnd(32768.0 * s_b / top)
