// Optimiser-update primitives over whole trained layers (docs/numerics.md,
// "Update"): the optimisers of python_lib/microtrain/optim.py are written
// from these. Everything is float32 with one rounding per operation (one
// operation per statement, no fused multiply-add), so a double-float and a
// single-float MicroPython compute the same bits. No libm: floor, sqrt and
// quantize_multiplier are done here exactly with integer operations.
//
// A tensor is n_ch channels of k values (weights: out_c x k; bias: out_c x 1).
// touched (n_ch bytes, NULL = all): a channel whose byte is 0 is skipped
// entirely (sparse updates: nothing of it is read or written).
#include "mt_kernels.h"
#if defined(MT_SOFT_FLOAT)
#include "mt_softfloat.h"
#endif

// touched |= mask (mask NULL: every channel).
void mt_update_u8_touch(uint8_t *touched, const uint8_t *mask, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        if (mask == NULL || mask[i] != 0u) {
            touched[i] = 1u;
        }
    }
}

#if MT_HAS_FLOAT

#if defined(__GNUC__) && !defined(__clang__)
// The update runs once per batch over every trained parameter: its loops are
// built for speed (-O2) even in -Os firmware; never contracted (no FMA).
#define MT_NOCONTRACT __attribute__((optimize("O2", "fp-contract=off", "no-tree-loop-distribute-patterns")))
#else
#define MT_NOCONTRACT
#endif

typedef union {
    float f;
    uint32_t u;
} mt_f32_bits_t;

static uint32_t mt_bits(float x) {
    mt_f32_bits_t b;
    b.f = x;
    return b.u;
}

static float mt_from_bits(uint32_t u) {
    mt_f32_bits_t b;
    b.u = u;
    return b.f;
}

// A subnormal float32 becomes a zero of its sign; everything else is unchanged
// (docs/numerics.md, "Update": the optimiser state's decay product). An integer
// test on the exponent bits, branch-free: a float compare on a subnormal would
// itself take the slow path this avoids.
static float mt_ftz(float x) {
    const uint32_t u = mt_bits(x);
    const uint32_t keep = (u & 0x7F800000u) != 0u ? 0xFFFFFFFFu : 0x80000000u;
    return mt_from_bits(u & keep);
}

static int mt_finite(float x) {
    return (mt_bits(x) & 0x7F800000u) != 0x7F800000u;
}

// floor(x) as an int for |x| < 2^31 (callers clamp first; x is not NaN).
static int32_t mt_floor_i32(float x) {
    int32_t t = (int32_t)x;  // truncates toward zero
    if ((float)t > x) {
        t -= 1;
    }
    return t;
}

// floor(x) clamped to [-lim, lim] (lim <= 2^30, a float exactly); NaN -> lim.
static int32_t mt_floor_clamp(float x, int32_t lim) {
    const float fl = (float)lim;
    if (!(x < fl)) {
        return lim;
    }
    if (x <= -fl) {
        return -lim;
    }
    const int32_t q = mt_floor_i32(x);
    return q < -lim ? -lim : q;
}

// Correctly rounded float32 square root: the classic digit-by-digit root of
// the significand (one result bit per step, 32-bit integers only), rounded to
// nearest (a root is never exactly halfway). Outside finite x >= 0 (only
// non-finite or abused state gets there; docs/numerics.md, "Non-finite
// values"): +-0 and +inf are returned, a NaN quieted (bit 22 set), a
// negative x gives the quiet NaN 0x7FC00000.
static float mt_sqrt_f32(float x) {
    uint32_t ix = mt_bits(x);
    if ((ix & 0x7FFFFFFFu) == 0u || ix == 0x7F800000u) {
        return x;
    }
    if (ix > 0x7F800000u) {  // a NaN of either sign, or x < 0
        return mt_from_bits((ix & 0x7FFFFFFFu) > 0x7F800000u ? (ix | 0x00400000u) : 0x7FC00000u);
    }
    int32_t m = (int32_t)(ix >> 23);
    if (m == 0) {  // subnormal: normalise
        int32_t i = 0;
        while ((ix & 0x00800000u) == 0u) {
            ix <<= 1;
            ++i;
        }
        m -= i - 1;
    }
    m -= 127;
    ix = (ix & 0x007FFFFFu) | 0x00800000u;
    const int32_t odd = (int32_t)((uint32_t)m & 1u);
    if (odd) {
        ix += ix;
    }
    m = (m - odd) / 2;
    ix += ix;
    uint32_t q = 0, s = 0, r = 0x01000000u;
    while (r != 0u) {
        const uint32_t t = s + r;
        if (t <= ix) {
            s = t + r;
            ix -= t;
            q += r;
        }
        ix += ix;
        r >>= 1;
    }
    if (ix != 0u) {
        q += q & 1u;
    }
    return mt_from_bits((q >> 1) + 0x3F000000u + (uint32_t)m * 0x00800000u);
}

// (m, shift) = quantize_multiplier(real) of docs/numerics.md for a float32
// real > 0 (finite), exactly: its 24-bit significand is the multiplier.
void mt_update_quantize_multiplier(float real, int32_t *mult, int32_t *shift) {
    const uint32_t u = mt_bits(real);
    int32_t e = (int32_t)(u >> 23);
    uint32_t mant = u & 0x007FFFFFu;
    if (e == 0) {
        e = 1;
        while ((mant & 0x00800000u) == 0u) {
            mant <<= 1;
            --e;
        }
    } else {
        mant |= 0x00800000u;
    }
    // real = mant * 2^(e - 150) = (mant / 2^24) * 2^(e - 126)
    const int32_t sh = e - 126;
    if (sh > 31) {
        *mult = 2147483647;
        *shift = 31;
        return;
    }
    if (sh >= -31) {
        *mult = (int32_t)(mant << 7);
        *shift = sh;
        return;
    }
    // round(real * 2^62) = round(mant * 2^(e - 88)), half up; e - 88 < 7
    uint32_t m2;
    if (e >= 88) {
        m2 = mant << (e - 88);
    } else if (88 - e >= 32) {
        m2 = 0u;
    } else {
        const int32_t d = 88 - e;
        m2 = (mant + ((uint32_t)1 << (d - 1))) >> d;
    }
    *mult = (int32_t)m2;
    *shift = m2 != 0u ? -31 : 0;
}

// Index of the first non-finite value of x[0..n), or -1.
MT_NOCONTRACT
int32_t mt_update_f32_check(const float *x, size_t n) {
    const uint32_t *u = (const uint32_t *)(const void *)x;
    uint32_t acc = 0, acc2 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {                    // four at a time: the loop overhead is most of the work
        acc |= (u[i] & 0x7F800000u) + 0x00800000u;  // carries into bit 31 iff inf / NaN
        acc2 |= (u[i + 1] & 0x7F800000u) + 0x00800000u;
        acc |= (u[i + 2] & 0x7F800000u) + 0x00800000u;
        acc2 |= (u[i + 3] & 0x7F800000u) + 0x00800000u;
    }
    for (; i < n; ++i) {
        acc |= (u[i] & 0x7F800000u) + 0x00800000u;
    }
    acc |= acc2;
    if ((acc & 0x80000000u) == 0u) {
        return -1;
    }
    for (size_t j = 0; j < n; ++j) {
        if (!mt_finite(x[j])) {
            return (int32_t)j;
        }
    }
    return -1;
}

// Real value of element i of channel c (master copy, or the dequantised int).
static float mt_real(const mt_update_src_t *src, int32_t c, size_t i) {
    if (src->master != NULL) {
        return src->master[i];
    }
    const float q = src->q8 != NULL ? (float)src->q8[i] : (float)src->q32[i];
    const float t = q * src->f;
    return t * src->scale[c];
}

// g = g * (1 / n) + wd * real (the second term only when wd != 0).
MT_NOCONTRACT
void mt_update_f32_decay(float *g, int32_t n_ch, int32_t k, const uint8_t *touched, int32_t n, float wd,
                         const mt_update_src_t *src) {
    const float inv = 1.0f / (float)n;
    for (int32_t c = 0; c < n_ch; ++c) {
        if (touched != NULL && touched[c] == 0u) {
            continue;
        }
        const size_t base = (size_t)c * (size_t)k;
        for (size_t i = base; i < base + (size_t)k; ++i) {
            float d = g[i] * inv;
            if (wd != 0.0f) {
                const float t = wd * mt_real(src, c, i);
                d = d + t;
            }
            g[i] = d;
        }
    }
}

// Over the touched elements (cnt of them): g' = g * (1 / n) (stored), mu =
// sum(g') / cnt, sigma = sqrt(sum((g' - mu)^2) / cnt), g = (g' - mu) * (1 /
// (sigma + 1e-8)); sums in storage order. Fewer than two elements: g' only.
MT_NOCONTRACT
void mt_update_f32_standardize(float *g, int32_t n_ch, int32_t k, const uint8_t *touched, int32_t n) {
    const float inv_n = 1.0f / (float)n;
    float s = 0.0f;
    int32_t cnt = 0;
    for (int32_t c = 0; c < n_ch; ++c) {
        if (touched != NULL && touched[c] == 0u) {
            continue;
        }
        const size_t base = (size_t)c * (size_t)k;
        for (size_t i = base; i < base + (size_t)k; ++i) {
            const float v = g[i] * inv_n;
            g[i] = v;
            s = s + v;
        }
        cnt += k;
    }
    if (cnt < 2) {
        return;
    }
    const float fc = (float)cnt;
    const float mu = s / fc;
    float ss = 0.0f;
    for (int32_t c = 0; c < n_ch; ++c) {
        if (touched != NULL && touched[c] == 0u) {
            continue;
        }
        const size_t base = (size_t)c * (size_t)k;
        for (size_t i = base; i < base + (size_t)k; ++i) {
            const float d = g[i] - mu;
            const float d2 = d * d;
            ss = ss + d2;
        }
    }
    const float var = ss / fc;
    const float sd = mt_sqrt_f32(var);
    const float den = sd + 1e-8f;
    const float inv = 1.0f / den;
    for (int32_t c = 0; c < n_ch; ++c) {
        if (touched != NULL && touched[c] == 0u) {
            continue;
        }
        const size_t base = (size_t)c * (size_t)k;
        for (size_t i = base; i < base + (size_t)k; ++i) {
            const float d = g[i] - mu;
            g[i] = d * inv;
        }
    }
}

// y = a * y + b * x.
MT_NOCONTRACT
void mt_update_f32_axpby(float *y, const float *x, int32_t n_ch, int32_t k, const uint8_t *touched, float a, float b) {
    for (int32_t c = 0; c < n_ch; ++c) {
        if (touched != NULL && touched[c] == 0u) {
            continue;
        }
        const size_t base = (size_t)c * (size_t)k;
        for (size_t i = base; i < base + (size_t)k; ++i) {
            const float t1 = a * y[i];
            const float t2 = b * x[i];
            y[i] = t1 + t2;
        }
    }
}

// SGD momentum: v = ftz(mom * v) + g; g = v (the decayed state flushed: a
// value that only decays would otherwise sink through the subnormal range).
MT_NOCONTRACT
void mt_update_f32_momentum(float *g, float *v, int32_t n_ch, int32_t k, const uint8_t *touched, float mom) {
    for (int32_t c = 0; c < n_ch; ++c) {
        if (touched != NULL && touched[c] == 0u) {
            continue;
        }
        float *gc = g + (size_t)c * (size_t)k, *vc = v + (size_t)c * (size_t)k;
        size_t i = 0;
        for (; i + 2 <= (size_t)k; i += 2) {  // two at a time: less loop overhead per value
            const float t0 = mt_ftz(mom * vc[i]);
            const float t1 = mt_ftz(mom * vc[i + 1]);
            const float d0 = t0 + gc[i];
            const float d1 = t1 + gc[i + 1];
            vc[i] = d0;
            gc[i] = d0;
            vc[i + 1] = d1;
            gc[i + 1] = d1;
        }
        if (i < (size_t)k) {
            const float t = mt_ftz(mom * vc[i]);
            const float d = t + gc[i];
            vc[i] = d;
            gc[i] = d;
        }
    }
}

// x = ftz(a * x) on the touched channels: SGD momentum at batch 1 scales v by
// the momentum coefficient and then accumulates the sample's gradient straight
// into it (no float32 gradient sums), so the flush is update_f32_momentum's.
MT_NOCONTRACT
void mt_update_f32_scale(float *x, int32_t n_ch, int32_t k, const uint8_t *touched, float a) {
    for (int32_t c = 0; c < n_ch; ++c) {
        if (touched != NULL && touched[c] == 0u) {
            continue;
        }
        const size_t base = (size_t)c * (size_t)k;
        for (size_t i = base; i < base + (size_t)k; ++i) {
            x[i] = mt_ftz(a * x[i]);
        }
    }
}

// Adam: m = ftz(b1 * m) + (1 - b1) * g; v = ftz(b2 * v) + ((1 - b2) * g) * g;
// g = (m / (1 - b1t)) / (sqrt(v / (1 - b2t)) + eps), b1t = b1^t, b2t = b2^t.
MT_NOCONTRACT
void mt_update_f32_adam(float *g, float *m, float *v, int32_t n_ch, int32_t k, const uint8_t *touched, float b1,
                        float b2, float b1t, float b2t, float eps) {
    const float a1 = 1.0f - b1, a2 = 1.0f - b2;
    const float c1 = 1.0f - b1t, c2 = 1.0f - b2t;
    for (int32_t ch = 0; ch < n_ch; ++ch) {
        if (touched != NULL && touched[ch] == 0u) {
            continue;
        }
        const size_t base = (size_t)ch * (size_t)k;
        for (size_t i = base; i < base + (size_t)k; ++i) {
            const float d = g[i];
            const float m1a = mt_ftz(b1 * m[i]);
            const float m1b = a1 * d;
            const float m1 = m1a + m1b;
            const float m2a = mt_ftz(b2 * v[i]);
            const float m2b = a2 * d;
            const float m2c = m2b * d;
            const float m2 = m2a + m2c;
            m[i] = m1;
            v[i] = m2;
            const float num = m1 / c1;
            const float r = m2 / c2;
            const float den = mt_sqrt_f32(r) + eps;
            g[i] = num / den;
        }
    }
}

// A bfloat16 state value: the upper half of a float32, two little-endian bytes
// (read and written a byte at a time: a byte buffer promises no alignment).
static float mt_bf16_load(const int8_t *p) {
    const uint8_t *q = (const uint8_t *)p;
    return mt_from_bits(((uint32_t)q[0] | ((uint32_t)q[1] << 8)) << 16);
}

// x rounded to bfloat16, to nearest with ties to even (a carry into the exponent
// is the right result, up to infinity); a NaN keeps its sign and top bits, quietened.
static void mt_bf16_store(int8_t *p, float x) {
    const uint32_t u = mt_bits(x);
    const uint32_t r =
        (u & 0x7FFFFFFFu) > 0x7F800000u ? ((u >> 16) | 0x0040u) : ((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    uint8_t *q = (uint8_t *)p;
    q[0] = (uint8_t)(r & 0xFFu);
    q[1] = (uint8_t)(r >> 8);
}

// SGD momentum, bfloat16 state: d = ftz(mom * v) + g; v = bf16(d); g = d.
MT_NOCONTRACT
void mt_update_bf16_momentum(float *g, int8_t *v, int32_t n_ch, int32_t k, const uint8_t *touched, float mom) {
    for (int32_t c = 0; c < n_ch; ++c) {
        if (touched != NULL && touched[c] == 0u) {
            continue;
        }
        const size_t base = (size_t)c * (size_t)k;
        for (size_t i = base; i < base + (size_t)k; ++i) {
            const float t = mt_ftz(mom * mt_bf16_load(v + 2 * i));
            const float d = t + g[i];
            mt_bf16_store(v + 2 * i, d);
            g[i] = d;
        }
    }
}

// Adam, bfloat16 moments: update_f32_adam's float32 values, each moment rounded
// when stored; the direction from the float32 values.
MT_NOCONTRACT
void mt_update_bf16_adam(float *g, int8_t *m, int8_t *v, int32_t n_ch, int32_t k, const uint8_t *touched, float b1,
                         float b2, float b1t, float b2t, float eps) {
    const float a1 = 1.0f - b1, a2 = 1.0f - b2;
    const float c1 = 1.0f - b1t, c2 = 1.0f - b2t;
    for (int32_t ch = 0; ch < n_ch; ++ch) {
        if (touched != NULL && touched[ch] == 0u) {
            continue;
        }
        const size_t base = (size_t)ch * (size_t)k;
        for (size_t i = base; i < base + (size_t)k; ++i) {
            const float d = g[i];
            const float m1a = mt_ftz(b1 * mt_bf16_load(m + 2 * i));
            const float m1b = a1 * d;
            const float m1 = m1a + m1b;
            const float m2a = mt_ftz(b2 * mt_bf16_load(v + 2 * i));
            const float m2b = a2 * d;
            const float m2c = m2b * d;
            const float m2 = m2a + m2c;
            mt_bf16_store(m + 2 * i, m1);
            mt_bf16_store(v + 2 * i, m2);
            const float num = m1 / c1;
            const float r = m2 / c2;
            const float den = mt_sqrt_f32(r) + eps;
            g[i] = num / den;
        }
    }
}

// The real bias after the step (bias source: master_b, or b * s_in * w_scale).
MT_NOCONTRACT
static float mt_bias_new(const mt_update_layer_t *L, int32_t c, float lr) {
    float old;
    if (L->master_b != NULL) {
        old = L->master_b[c];
    } else {
        const float t = (float)L->b[c] * L->s_in;
        old = t * L->w_scale[c];
    }
    const float st = lr * L->gb[c];
    return old - st;
}

// max(top, |v|) on the bits: for non-negative floats the integer order is
// the float order, and a NaN's bits exceed every other value's (it sticks).
static uint32_t mt_max_abs_bits(uint32_t top, float v) {
    const uint32_t a = mt_bits(v) & 0x7FFFFFFFu;
    return a > top ? a : top;
}

// mt_update_s8_apply and mt_update_s8_apply_keep share mt_apply and its
// helpers below, with keep a constant argument. With an FPU they are always
// inlined: each entry point gets its own loops, none testing keep per value.
// With software float (code in a small GC heap, float operations far dearer
// than a test) there is one copy, keep tested at run time.
#if defined(__GNUC__) && !defined(MT_SOFT_FLOAT)
#define MT_APPLY_STEP static inline __attribute__((always_inline))
#define MT_APPLY_BODY MT_APPLY_STEP
#elif defined(__GNUC__)
#define MT_APPLY_STEP static inline
#define MT_APPLY_BODY static __attribute__((noinline))
#else
#define MT_APPLY_STEP static inline
#define MT_APPLY_BODY static
#endif

// The new value of weight i of a channel without a master copy: (float)w[i] *
// s0 - lr * g[i], s0 the channel's scale before the step.
MT_NOCONTRACT
MT_APPLY_STEP float mt_step_q(const int8_t *w, const float *g, size_t i, float s0, float lr) {
#if defined(MT_SOFT_FLOAT)
    // software float: conversion and product in one rounding (the same bits)
    const float old = mt_from_bits(mt_f32_mul_i8(w[i], mt_bits(s0)));
#else
    const float old = (float)w[i] * s0;
#endif
    const float st = lr * g[i];
    return old - st;
}

// The same with a master copy: m[i] - lr * g[i].
MT_NOCONTRACT
MT_APPLY_STEP float mt_step_m(const float *m, const float *g, size_t i, float lr) {
    const float st = lr * g[i];
    return m[i] - st;
}

// Pass A for channel c: top = max |w_new| (NaN if any is), the new bias into
// *b_new, the new scale into *s_new. w_new is stored over gw unless keep
// (then gw is only read and pass B recomputes w_new). Returns 0, or 1 when
// the channel cannot be updated (non-finite values or a scale out of range).
MT_NOCONTRACT
MT_APPLY_STEP int mt_apply_plan(const mt_update_layer_t *L, int32_t c, float lr, const int keep, float *s_new,
                                float *b_new) {
    const size_t k = (size_t)L->k, base = (size_t)c * k;
    const float s_old = L->w_scale[c];
    float *g = L->gw + base;
    uint32_t tb = 0;
    if (L->master_w != NULL) {
        const float *m = L->master_w + base;
        for (size_t i = 0; i < k; ++i) {
            const float v = mt_step_m(m, g, i, lr);
            if (!keep) {
                g[i] = v;
            }
            tb = mt_max_abs_bits(tb, v);
        }
    } else {
        const int8_t *w = L->w + base;
        for (size_t i = 0; i < k; ++i) {
            const float v = mt_step_q(w, g, i, s_old, lr);
            if (!keep) {
                g[i] = v;
            }
            tb = mt_max_abs_bits(tb, v);
        }
    }
    const float top = mt_from_bits(tb);
    const float bf = mt_bias_new(L, c, lr);
    *b_new = bf;
    if (!mt_finite(top)) {
        return 1;
    }
    float s = s_old;
    if (top > 0.0f) {
        const float t = top / 127.0f;
        if (t > 0.0f) {
            s = t;
        }
    }
    const float inv = 1.0f / s;
    const float den = L->s_in * s;
    const float t = den / L->s_out;
    if (!mt_finite(inv) || !mt_finite(bf) || !(den > 0.0f) || !mt_finite(t) || !(t > 0.0f)) {
        return 1;
    }
    *s_new = s;
    return 0;
}

// The int8 level of y = x + 128 + u (0 < y < 256: |x| <= 127.00005, see
// mt_apply_row): trunc(y) - 128 = floor(y) - 128, at least -127.
#if defined(MT_SOFT_FLOAT)
// (Software float: t = trunc(y) comes from mt_f32_add_trunc.)
static int8_t mt_q8i(int32_t t) {
    const int32_t q = t - 128;
    return (int8_t)(q < -127 ? -127 : q);
}
#else
static int8_t mt_q8(float y) {
    const int32_t q = (int32_t)y - 128;
    return (int8_t)(q < -127 ? -127 : q);
}
#endif

// Element i's new value in pass B: from g, where pass A planned it (g[i]
// zeroed; mt_apply_row has copied it to the master already), or, keep,
// recomputed from the master m or from w with pass A's very expressions (the
// same bits; g only read), then stored into the master when there is one.
// w[i] is read here before the caller writes it.
MT_NOCONTRACT
MT_APPLY_STEP float mt_row_value(const int8_t *w, float *g, float *m, size_t i, float s0, float lr, const int keep) {
    if (!keep) {
        const float v = g[i];
        g[i] = 0.0f;
        return v;
    }
    if (m == NULL) {
        return mt_step_q(w, g, i, s0, lr);
    }
    const float v = mt_step_m(m, g, i, lr);
    m[i] = v;
    return v;
}

// Pass B for one channel: w = level of w_new * (1 / s) (w_new from
// mt_row_value; without keep the master takes the planned values first).
// |w_new| <= top and s = top / 127 (or w_new all zero / tiny when the scale
// was kept), so |w_new * (1 / s)| <= 127 * (1 + 2^-22). s0: the scale before
// the step (keep recomputes w_new from it). Returns the generator state.
MT_NOCONTRACT
MT_APPLY_STEP uint32_t mt_apply_row(int8_t *w, float *g, float *m, size_t k, float inv, int32_t stochastic, uint32_t r,
                                    float s0, float lr, const int keep) {
    if (m != NULL && !keep) {
        for (size_t i = 0; i < k; ++i) {
            m[i] = g[i];
        }
    }
    if (stochastic) {
        for (size_t i = 0; i < k; ++i) {
            const float x = mt_row_value(w, g, m, i, s0, lr, keep) * inv;
            r ^= (r << 7) & 0xFFFFu;
            r ^= r >> 9;
            r ^= (r << 8) & 0xFFFFu;
#if defined(MT_SOFT_FLOAT)
            // software float: the sum and its truncation in one step (the same level)
            w[i] = mt_q8i(mt_f32_add_trunc(mt_bits(x), 0x43000000u | r));
#else
            const float u = mt_from_bits(0x43000000u | r);  // 128 + r * 2^-16, exact
            w[i] = mt_q8(x + u);
#endif
        }
    } else {
        for (size_t i = 0; i < k; ++i) {
            const float x = mt_row_value(w, g, m, i, s0, lr, keep) * inv;
#if defined(MT_SOFT_FLOAT)
            w[i] = mt_q8i(mt_f32_add_trunc(mt_bits(x), 0x43008000u));  // + 128.5
#else
            w[i] = mt_q8(x + 128.5f);
#endif
        }
    }
    return r;
}

// The step of both entry points below. keep = 0: the new values are planned
// over gw and gb (zeroed in pass B), the scales in scratch[0..n_ch). keep =
// 1: gw and gb are only read; the new biases go to scratch[n_ch..2 n_ch) and
// pass B recomputes the new weights.
MT_NOCONTRACT
MT_APPLY_BODY int32_t mt_apply(const mt_update_layer_t *L, const uint8_t *touched, float lr, int32_t rng,
                               float *scratch, const int keep) {
    const int32_t n_ch = L->n_ch;
    const size_t k = (size_t)L->k;
    float *bias = keep ? scratch + n_ch : L->gb;
    for (int32_t c = 0; c < n_ch; ++c) {
        if (touched != NULL && touched[c] == 0u) {
            continue;
        }
        if (mt_apply_plan(L, c, lr, keep, &scratch[c], &bias[c])) {
            return -2 - c;  // never -1: that is the success value without rng
        }
    }
    uint32_t r = (uint32_t)rng;
    for (int32_t c = 0; c < n_ch; ++c) {
        if (touched != NULL && touched[c] == 0u) {
            continue;
        }
        const size_t base = (size_t)c * k;
        const float s = scratch[c];
        const float inv = 1.0f / s;
        r = mt_apply_row(L->w + base, L->gw + base, L->master_w != NULL ? L->master_w + base : NULL, k, inv, rng >= 0,
                         r, L->w_scale[c], lr, keep);
        const float bf = bias[c];
        if (L->master_b != NULL) {
            L->master_b[c] = bf;
        }
        if (!keep) {
            L->gb[c] = 0.0f;
        }
        const float den = L->s_in * s;
        const float qb = bf / den;
        const float qb2 = qb + 0.5f;
        L->b[c] = mt_floor_clamp(qb2, 1073741824);
        L->w_scale[c] = s;
        const float real = den / L->s_out;
        mt_update_quantize_multiplier(real, &L->mult[c], &L->shift[c]);
    }
    return rng >= 0 ? (int32_t)r : -1;
}

// The fully quantised step of one layer (docs/numerics.md, update_s8_apply):
// per touched channel c, w_new = w_real - lr * gw (into master_w when there is
// one), w_scale[c] = max|w_new| / 127 (kept when 0), w = trunc(w_new / s + 128
// + u) - 128 clamped to >= -127 (u = 0.5, or the next xorshift16 value * 2^-16
// when rng >= 0), bias re-expressed in s_in * w_scale[c] (nearest), mult/shift
// recomputed, gw and gb of the channel zeroed. Every channel is planned
// (w_new into gw, the new bias into gb, the scale into scratch) before the
// model is written: returns -2 - c when channel c cannot be updated (w,
// w_scale, b, mult, shift and the master copies unchanged), else the new
// generator state (rng, or -1 if rng < 0).
MT_NOCONTRACT
int32_t mt_update_s8_apply(const mt_update_layer_t *L, const uint8_t *touched, float lr, int32_t rng, float *scratch) {
    return mt_apply(L, touched, lr, rng, scratch, 0);
}

// The same step with gw and gb only read (they may be the optimiser's
// momentum, which must survive the step): the same results bit for bit
// (w_new recomputed in pass B with pass A's expressions), scratch of 2 n_ch
// (the new scales, then the new biases). On failure (-2 - c) nothing but
// scratch is written.
MT_NOCONTRACT
int32_t mt_update_s8_apply_keep(const mt_update_layer_t *L, const uint8_t *touched, float lr, int32_t rng,
                                float *scratch) {
    return mt_apply(L, touched, lr, rng, scratch, 1);
}

// wr[i] = floor((2^R * w_scale[i]) / top + 0.5), top = max(w_scale) > 0: the
// grad-input weight ratios (docs/numerics.md, conv2d grad input) in float32.
// Returns the index of the first maximum, so the caller reads top without
// boxing every scale (max() over an array('f') allocates a float each).
MT_NOCONTRACT
int32_t mt_update_f32_ratios(const float *w_scale, int32_t n, int32_t r, int32_t *wr) {
    float top = 0.0f;
    int32_t at = 0;
    for (int32_t i = 0; i < n; ++i) {
        if (w_scale[i] > top) {
            top = w_scale[i];
            at = i;
        }
    }
    const float one = (float)((int32_t)1 << r);
    for (int32_t i = 0; i < n; ++i) {
        const float a = one * w_scale[i];
        const float q = a / top;
        wr[i] = mt_floor_i32(q + 0.5f);
    }
    return at;
}

#endif
