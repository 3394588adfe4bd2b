// Integer helpers: see mt_quant.h and docs/numerics.md.
#include "mt_quant.h"

#include "mt_dsp.h"

// The four-a-turn loops below where code size is not scarce (armv7e-m, x64); armv6m and
// armv7m keep the two-a-turn ones.
#if MT_DSP || MT_SSE2
#define MT_RQ_WIDE 1
#else
#define MT_RQ_WIDE 0
#endif

uint32_t mt_udiv_u32(uint32_t n, uint32_t d) {
#if MT_SOFT_MATH
    // Restoring division, one quotient bit per step; d == 0 returns all ones
    // (callers never divide by zero; this keeps the function total).
    uint32_t q = 0, r = 0;
    for (int i = 31; i >= 0; --i) {
        r = (r << 1) | ((n >> i) & 1u);
        if (r >= d) {
            r -= d;
            q |= (uint32_t)1 << i;
        }
    }
    return q;
#else
    return d ? n / d : 0xFFFFFFFFu;
#endif
}

int32_t mt_doubling_high_mul(int32_t a, int32_t b) {
#if MT_SOFT_MATH
    // 64-bit product from 16-bit halves in 32-bit arithmetic only, then
    // floor((p + 2^30) / 2^31). Sign handled on magnitudes.
    const int neg = (a < 0) != (b < 0);
    const uint32_t ua = mt_abs_u32(a), ub = mt_abs_u32(b);
    const uint32_t a0 = ua & 0xFFFFu, a1 = ua >> 16, b0 = ub & 0xFFFFu, b1 = ub >> 16;
    uint32_t lo = a0 * b0;
    uint32_t mid1 = a1 * b0, mid2 = a0 * b1;
    uint32_t hi = a1 * b1;
    uint32_t t = lo + (mid1 << 16);
    hi += (mid1 >> 16) + (t < lo ? 1u : 0u);
    lo = t;
    t = lo + (mid2 << 16);
    hi += (mid2 >> 16) + (t < lo ? 1u : 0u);
    lo = t;
    if (neg) {  // two's complement negate of (hi:lo)
        lo = ~lo + 1u;
        hi = ~hi + (lo == 0 ? 1u : 0u);
    }
    // add 2^30
    t = lo + 0x40000000u;
    hi += (t < lo ? 1u : 0u);
    lo = t;
    // arithmetic shift right by 31 of (hi:lo), keep low 32 bits
    return (int32_t)((hi << 1) | (lo >> 31));
#else
    const int64_t p = (int64_t)a * (int64_t)b + ((int64_t)1 << 30);
    return (int32_t)(p >> 31);  // arithmetic shift: gcc/clang define it
#endif
}

int32_t mt_dyn_shift(uint32_t max_abs) {
    int32_t s = 0;
    while (s < 31) {
        const uint32_t half = s > 0 ? ((uint32_t)1 << (s - 1)) : 0u;
        // (M + half) may exceed 2^32 only for M near 2^32; use the carry.
        const uint32_t sum = max_abs + half;
        const uint32_t v = (sum < max_abs) ? ((sum >> s) | ((uint32_t)1 << (32 - s))) : (sum >> s);
        if (v <= 127u) {
            break;
        }
        ++s;
    }
    return s;
}

#if MT_RQ_WIDE
// mt_dyn_apply for shift <= MT_RQ_FAST_MAX as one floor: sign(v) * ((|v| + h) >> shift)
// = (v + h - (v < 0)) >> shift, h = 2^(shift - 1) (the negative side's ceiling written as a
// floor; the shift is arithmetic, as gcc and clang define it); shift 0: v itself (sm = 0, h =
// 0; else sm = -1). No overflow: the shift's rule bounds |v| + h by 2^(shift + 7) <= 2^30.
#define MT_RQ_FAST_MAX 23
static inline int32_t mt_rq_floor(int32_t v, int32_t h, int32_t sm, int32_t shift) {
    return (v + h + ((v >> 31) & sm)) >> shift;
}
#endif

// max |acc[i]| over acc[0..n), two elements a turn (half the loop overhead at -Os).
static uint32_t dyn_max_abs(const int32_t *acc, size_t n) {
    uint32_t m = 0;
    size_t i = 0;
#if MT_DSP && defined(__thumb2__)
    if (n >= 4) {  // four a turn in asm: |v| in two instructions each
        uint32_t pa = (uint32_t)(uintptr_t)acc, a0, a1, t0, t1, m2 = 0;
        const uint32_t pend = pa + 16u * (uint32_t)(n >> 2);
        __asm__ volatile(
            "1:\n\t"
            "ldrd %[a0], %[a1], [%[pa]], #8\n\t"
            "eor %[t0], %[a0], %[a0], asr #31\n\t"
            "eor %[t1], %[a1], %[a1], asr #31\n\t"
            "sub %[t0], %[t0], %[a0], asr #31\n\t"
            "sub %[t1], %[t1], %[a1], asr #31\n\t"
            "cmp %[t0], %[m]\n\t"
            "it hi\n\t"
            "movhi %[m], %[t0]\n\t"
            "cmp %[t1], %[m2]\n\t"
            "it hi\n\t"
            "movhi %[m2], %[t1]\n\t"
            "ldrd %[a0], %[a1], [%[pa]], #8\n\t"
            "eor %[t0], %[a0], %[a0], asr #31\n\t"
            "eor %[t1], %[a1], %[a1], asr #31\n\t"
            "sub %[t0], %[t0], %[a0], asr #31\n\t"
            "sub %[t1], %[t1], %[a1], asr #31\n\t"
            "cmp %[t0], %[m]\n\t"
            "it hi\n\t"
            "movhi %[m], %[t0]\n\t"
            "cmp %[t1], %[m2]\n\t"
            "it hi\n\t"
            "movhi %[m2], %[t1]\n\t"
            "cmp %[pa], %[pend]\n\t"
            "bne 1b\n\t"
            : [pa] "+r"(pa), [m] "+r"(m), [m2] "+r"(m2), [a0] "=&r"(a0), [a1] "=&r"(a1), [t0] "=&r"(t0), [t1] "=&r"(t1)
            : [pend] "r"(pend), "m"(*(const int32_t(*)[])acc)
            : "cc");
        (void)a0, (void)a1, (void)t0, (void)t1;
        m = m2 > m ? m2 : m;
        i = n & ~(size_t)3;
    }
    for (; i < n; ++i) {  // (the last few)
        const uint32_t a = mt_abs_u32(acc[i]);
        m = a > m ? a : m;
    }
#else
#if MT_RQ_WIDE
    uint32_t m2 = 0;            // a second maximum: two compare chains in flight
    for (; i + 4 <= n; i += 4) {
        const uint32_t a = mt_abs_u32(acc[i]), b = mt_abs_u32(acc[i + 1]);
        const uint32_t c = mt_abs_u32(acc[i + 2]), d = mt_abs_u32(acc[i + 3]);
        m = a > m ? a : m;
        m2 = b > m2 ? b : m2;
        m = c > m ? c : m;
        m2 = d > m2 ? d : m2;
    }
    m = m2 > m ? m2 : m;
#endif
    for (; i + 2 <= n; i += 2) {
        const uint32_t a = mt_abs_u32(acc[i]), b = mt_abs_u32(acc[i + 1]);
        m = a > m ? a : m;
        m = b > m ? b : m;
    }
    if (i < n) {
        const uint32_t a = mt_abs_u32(acc[i]);
        m = a > m ? a : m;
    }
#endif
    return m;
}

// The apply two elements a turn too, branch-free on the sign: |v| = (v ^ s) - s
// and back, s = 0 or all ones (four a turn as one floor where code size is not scarce).
int32_t mt_dyn_requant_s8(const int32_t *acc, size_t n, int8_t *out) {
    const int32_t shift = mt_dyn_shift(dyn_max_abs(acc, n));
    size_t i = 0;
#if MT_RQ_WIDE
    if (shift <= MT_RQ_FAST_MAX) {
        const int32_t h = ((int32_t)1 << shift) >> 1, sm = -(int32_t)(shift > 0);
        for (; i + 4 <= n; i += 4) {
            const int32_t a = acc[i], b = acc[i + 1], c = acc[i + 2], d = acc[i + 3];
            out[i] = (int8_t)mt_rq_floor(a, h, sm, shift);
            out[i + 1] = (int8_t)mt_rq_floor(b, h, sm, shift);
            out[i + 2] = (int8_t)mt_rq_floor(c, h, sm, shift);
            out[i + 3] = (int8_t)mt_rq_floor(d, h, sm, shift);
        }
    }
    for (; i < n; ++i) {  // the last few, and shifts past the fast range
        out[i] = mt_dyn_apply(acc[i], shift);
    }
#else
    const uint32_t half = shift > 0 ? ((uint32_t)1 << (shift - 1)) : 0u;
    for (; i + 2 <= n; i += 2) {
        const uint32_t v = (uint32_t)acc[i], w = (uint32_t)acc[i + 1];
        const uint32_t sv = 0u - (v >> 31), sw = 0u - (w >> 31);
        const uint32_t mv = (((v ^ sv) - sv) + half) >> shift, mw = (((w ^ sw) - sw) + half) >> shift;
        out[i] = (int8_t)(uint8_t)((mv ^ sv) - sv);  // mag <= 127 (the shift's rule): exact
        out[i + 1] = (int8_t)(uint8_t)((mw ^ sw) - sw);
    }
    if (i < n) {
        out[i] = mt_dyn_apply(acc[i], shift);
    }
#endif
    return shift;
}

// The shift from all of acc (masked entries included), as mt_dyn_requant_s8; each
// y[i] = out[i] is read before out[i] is written, so out may hold the activation.
// (-129, 128) keeps everything: mt_dyn_requant_s8 itself, out not read.
int32_t mt_dyn_requant_act_s8(const int32_t *acc, size_t n, int32_t lo, int32_t hi, int8_t *out) {
    if (lo < -128 && hi > 127) {
        return mt_dyn_requant_s8(acc, n, out);
    }
    const int32_t shift = mt_dyn_shift(dyn_max_abs(acc, n));
    for (size_t i = 0; i < n; ++i) {
        const int32_t y = out[i];
        out[i] = (lo < y && y < hi) ? mt_dyn_apply(acc[i], shift) : 0;
    }
    return shift;
}
