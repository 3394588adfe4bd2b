// Innermost runs shared by conv2d_s8_forward.c and linear.c, the forward's register
// blocks (dot_2x2, dot_1x2: two channels x one or two pixels per pass) and
// the inlined requant of one output (mt_rq_t). They are static and kept out
// of line on purpose: on Cortex-M0 (8 low registers) the accumulator and
// pointers stay in registers instead of being spilled by the enclosing loop
// nest. Each including file gets its own copy.
#ifndef MT_RUNS_H
#define MT_RUNS_H

#include <stdint.h>

#include "mt_dsp.h"
#include "mt_quant.h"

// MT_RUNS_SCATTER_ONLY: an includer that needs axpy_w_run alone (a natmod keeps every
// static function of a file, used or not).
#if !MT_RUNS_SCATTER_ONLY
// sum (x[i] - zp) * w[i], i < n. x and w end at most one past their run.
static MT_BLOCK int32_t dot_run(const int8_t *x, const int8_t *w, int32_t n, int32_t zp) {
    int32_t acc = 0;
    for (const int8_t *end = w + n; w != end; ++w, ++x) {
        acc += ((int32_t)*x - zp) * (int32_t)*w;
    }
    return acc;
}

#endif

// a[i] += s * w[i], i < n.
static MT_BLOCK void axpy_w_run(int32_t *a, const int8_t *w, int32_t n, int32_t s) {
    for (const int8_t *end = w + n; w != end; ++w, ++a) {
        *a += s * (int32_t)*w;
    }
}

#if !MT_RUNS_SCATTER_ONLY
// ---- forward blocks -------------------------------------------------------
// The forward kernels are register-blocked: one pass over a run computes
// several (pixel, output channel) sums at once, so each x byte is loaded once
// for two output channels and each w byte once for two pixels. On armv7e-m
// four bytes are loaded at a time and multiplied as 16-bit pairs (SMLAD):
// SXTB16 of a word gives bytes (0, 2), its ror8 form bytes (1, 3), the same
// permutation for x and w, so the pairs line up without repacking, and
// x - zp is formed per pair with SSUB16 (|x - zp| <= 255 fits in 16 bits).
// Elsewhere the same blocks run byte by byte. Integer sums are exact, so the
// summation order is free (|sum| < 2^30 by mt_conv2d_check / mt_linear_check).

#if MT_DSP
// Four x bytes minus zp: bytes (0, 2) in *e, bytes (1, 3) in *o.
static inline void mt_x4_zp(const int8_t *x, uint32_t zp2, uint32_t *e, uint32_t *o) {
    const uint32_t v = mt_load_u32(x);
    *e = mt_ssub16(mt_sxtb16(v), zp2);
    *o = mt_ssub16(mt_sxtb16_ror8(v), zp2);
}
#endif

// s[0] += (xa - zp) . wa, s[1] += (xa - zp) . wb, s[2] += (xb - zp) . wa,
// s[3] += (xb - zp) . wb over n bytes.
static MT_BLOCK void dot_2x2(const int8_t *xa, const int8_t *xb, const int8_t *wa, const int8_t *wb, int32_t n,
                             int32_t zp, int32_t *s) {
    int32_t s0 = s[0], s1 = s[1], s2 = s[2], s3 = s[3];
    const int8_t *end = wa + n;
#if MT_SSE2
    if (n >= 16) {
        // as dot_2x2_full (conv2d_s8_forward.c), x - zp in int16 lanes (|x - zp| <= 255)
        const __m128i z = _mm_setzero_si128(), zpv = _mm_set1_epi16((int16_t)zp);
        __m128i q0 = z, q1 = z, q2 = z, q3 = z;
        for (const int8_t *end16 = wa + (n & ~15); wa != end16; xa += 16, xb += 16, wa += 16, wb += 16) {
            __m128i vl, vh, ul, uh, al, ah, bl, bh;
            mt_sse_widen(mt_sse_load(wa), z, &vl, &vh);
            mt_sse_widen(mt_sse_load(wb), z, &ul, &uh);
            mt_sse_widen(mt_sse_load(xa), zpv, &al, &ah);
            mt_sse_widen(mt_sse_load(xb), zpv, &bl, &bh);
            q0 = mt_sse_dot(q0, al, ah, vl, vh);
            q1 = mt_sse_dot(q1, al, ah, ul, uh);
            q2 = mt_sse_dot(q2, bl, bh, vl, vh);
            q3 = mt_sse_dot(q3, bl, bh, ul, uh);
        }
        s0 += mt_sse_hsum(q0);
        s1 += mt_sse_hsum(q1);
        s2 += mt_sse_hsum(q2);
        s3 += mt_sse_hsum(q3);
    }
#endif
#if MT_DSP
    const uint32_t zp2 = mt_pack16(zp, zp);
    for (const int8_t *end4 = wa + (n & ~3); wa != end4; xa += 4, xb += 4, wa += 4, wb += 4) {
        uint32_t ae, ao, be, bo;
        mt_x4_zp(xa, zp2, &ae, &ao);
        mt_x4_zp(xb, zp2, &be, &bo);
        uint32_t v = mt_load_u32(wa);
        uint32_t ve = mt_sxtb16(v), vo = mt_sxtb16_ror8(v);
        s0 = mt_smlad(ae, ve, s0);
        s2 = mt_smlad(be, ve, s2);
        s0 = mt_smlad(ao, vo, s0);
        s2 = mt_smlad(bo, vo, s2);
        v = mt_load_u32(wb);
        ve = mt_sxtb16(v);
        vo = mt_sxtb16_ror8(v);
        s1 = mt_smlad(ae, ve, s1);
        s3 = mt_smlad(be, ve, s3);
        s1 = mt_smlad(ao, vo, s1);
        s3 = mt_smlad(bo, vo, s3);
    }
#endif
    for (; wa != end; ++xa, ++xb, ++wa, ++wb) {
        const int32_t a = (int32_t)*xa - zp, b = (int32_t)*xb - zp;
        const int32_t u = *wa, v = *wb;
        s0 += a * u;
        s1 += a * v;
        s2 += b * u;
        s3 += b * v;
    }
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
}

// s[0] += (x - zp) . wa, s[1] += (x - zp) . wb over n bytes.
static MT_BLOCK void dot_1x2(const int8_t *x, const int8_t *wa, const int8_t *wb, int32_t n, int32_t zp, int32_t *s) {
    int32_t s0 = s[0], s1 = s[1];
    const int8_t *end = wa + n;
#if MT_SSE2
    if (n >= 16) {
        const __m128i z = _mm_setzero_si128(), zpv = _mm_set1_epi16((int16_t)zp);
        __m128i q0 = z, q1 = z;
        for (const int8_t *end16 = wa + (n & ~15); wa != end16; x += 16, wa += 16, wb += 16) {
            __m128i vl, vh, ul, uh, al, ah;
            mt_sse_widen(mt_sse_load(wa), z, &vl, &vh);
            mt_sse_widen(mt_sse_load(wb), z, &ul, &uh);
            mt_sse_widen(mt_sse_load(x), zpv, &al, &ah);
            q0 = mt_sse_dot(q0, al, ah, vl, vh);
            q1 = mt_sse_dot(q1, al, ah, ul, uh);
        }
        s0 += mt_sse_hsum(q0);
        s1 += mt_sse_hsum(q1);
    }
#endif
#if MT_DSP
    const uint32_t zp2 = mt_pack16(zp, zp);
    for (const int8_t *end4 = wa + (n & ~3); wa != end4; x += 4, wa += 4, wb += 4) {
        uint32_t ae, ao;
        mt_x4_zp(x, zp2, &ae, &ao);
        uint32_t v = mt_load_u32(wa);
        s0 = mt_smlad(ae, mt_sxtb16(v), s0);
        s0 = mt_smlad(ao, mt_sxtb16_ror8(v), s0);
        v = mt_load_u32(wb);
        s1 = mt_smlad(ae, mt_sxtb16(v), s1);
        s1 = mt_smlad(ao, mt_sxtb16_ror8(v), s1);
    }
#endif
    for (; wa != end; ++x, ++wa, ++wb) {
        const int32_t a = (int32_t)*x - zp;
        s0 += a * (int32_t)*wa;
        s1 += a * (int32_t)*wb;
    }
    s[0] = s0;
    s[1] = s1;
}

// Requant of one output channel with its constants precomputed (the loops
// keep one or two of these across many outputs): docs/numerics.md requant,
// clamp to [lo, hi] (relative to zp), + zp.
typedef struct {
    int32_t m, left, right, mask, thr, lo, hi, zp;
} mt_rq_t;

static inline void mt_rq_init(mt_rq_t *q, int32_t m, int32_t shift, int32_t lo, int32_t hi, int32_t zp) {
    q->m = m;
    q->left = shift > 0 ? shift : 0;
    q->right = shift > 0 ? 0 : -shift;
    q->mask = (int32_t)(((uint32_t)1 << q->right) - 1u);
    q->thr = q->mask >> 1;
    q->lo = lo;
    q->hi = hi;
    q->zp = zp;
}

static inline int8_t mt_rq_out(int32_t acc, const mt_rq_t *q) {
#if MT_SOFT_MATH
    const int32_t r = mt_requant(acc, q->m, q->left - q->right);
#else
    // mt_requant with a 64-bit product and mt_rounding_divide_by_pot's
    // mask / threshold from q: the same bits.
    const int32_t a = (int32_t)((uint32_t)acc << q->left);  // wrap32, as mt_requant
    const int32_t d = (int32_t)(((int64_t)a * (int64_t)q->m + ((int64_t)1 << 30)) >> 31);
    const int32_t r = (d >> q->right) + ((d & q->mask) > q->thr + (d < 0 ? 1 : 0) ? 1 : 0);
#endif
    return (int8_t)(mt_clamp(r, q->lo, q->hi) + q->zp);
}

// Out of line, for the paths that requantise few outputs (code size).
static MT_BLOCK int8_t mt_rq_out_call(int32_t acc, const mt_rq_t *q) {
    return mt_rq_out(acc, q);
}

static MT_BLOCK int8_t mt_out_s8(int32_t acc, int32_t m, int32_t shift, int32_t lo, int32_t hi, int32_t zp) {
    mt_rq_t q;
    mt_rq_init(&q, m, shift, lo, hi, zp);
    return mt_rq_out(acc, &q);
}

#endif

#endif
