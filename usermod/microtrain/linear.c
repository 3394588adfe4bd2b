// linear int8 kernels (docs/numerics.md): conv2d with a 1x1 input, 1x1
// kernel and groups == 1, written directly as row loops over w[out_n][in_n].
// Pure C99, no libc; the descriptor passed mt_linear_check (in_n <= 32768,
// out_n * in_n <= 2^26), so indices and accumulators fit in int32.
#include "mt_kernels.h"

#include "mt_runs.h"

// g[i] = ev * (x[i] - zp), i < n.
static MT_NOINLINE void scale_x_run(int32_t *g, const int8_t *x, int32_t n, int32_t ev, int32_t zp) {
    for (const int8_t *end = x + n; x != end; ++x, ++g) {
        *g = ev * ((int32_t)*x - zp);
    }
}

// s[k] += (x - zp) . w[k * ws ...], k < 4, over n bytes: x is loaded (and
// on armv7e-m unpacked) once for four weight rows.
// s[k] = (x - zp) . w[k * ws ...], k < 4, over n bytes: x is loaded (and on
// armv7e-m unpacked) once for four weight rows. Rows 1 and 3 are read at an
// offset from rows 0 and 2: two pointers instead of four keep the loop in
// registers.
static MT_NOINLINE void dot_1x4(const int8_t *x, const int8_t *w, int32_t ws, int32_t n, int32_t zp, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    const int8_t *w2 = w + 2 * ws;
    const int8_t *end = x + n;
#if MT_DSP
    const uint32_t zp2 = mt_pack16(zp, zp);
    for (const int8_t *end4 = x + (n & ~3); x != end4; x += 4, w += 4, w2 += 4) {
        uint32_t ae, ao;
        mt_x4_zp(x, zp2, &ae, &ao);
        // Rows 1 and 3 first: rows 0 and 2 then load with post-increment.
        uint32_t v = mt_load_u32(w + ws);
        s1 = mt_smlad(ae, mt_sxtb16(v), s1);
        s1 = mt_smlad(ao, mt_sxtb16_ror8(v), s1);
        v = mt_load_u32(w);
        s0 = mt_smlad(ae, mt_sxtb16(v), s0);
        s0 = mt_smlad(ao, mt_sxtb16_ror8(v), s0);
        v = mt_load_u32(w2 + ws);
        s3 = mt_smlad(ae, mt_sxtb16(v), s3);
        s3 = mt_smlad(ao, mt_sxtb16_ror8(v), s3);
        v = mt_load_u32(w2);
        s2 = mt_smlad(ae, mt_sxtb16(v), s2);
        s2 = mt_smlad(ao, mt_sxtb16_ror8(v), s2);
    }
#endif
    for (; x != end; ++x, ++w, ++w2) {
        const int32_t a = (int32_t)*x - zp;
        s0 += a * (int32_t)w[0];
        s1 += a * (int32_t)w[ws];
        s2 += a * (int32_t)w2[0];
        s3 += a * (int32_t)w2[ws];
    }
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
}

// Four weight rows per pass over x (dot_1x4), then two, then one.
void mt_linear_s8_forward(const mt_linear_params_t *p, const int8_t *x, const int8_t *w,
                       const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y) {
    const int32_t in_n = p->in_n, out_n = p->out_n, zp = p->in_zp, out_zp = p->out_zp;
    // Clamp before adding out_zp: requant may return values near +-2^31.
    const int32_t lo = p->act_min - out_zp, hi = p->act_max - out_zp;
    int32_t o = 0, wo = 0, s[4];
    // |bias| <= 2^30 and |dot| <= 32768 * 255 * 128 < 2^30: exact.
    for (; o + 4 <= out_n; o += 4, wo += 4 * in_n) {
        dot_1x4(x, w + wo, in_n, in_n, zp, s);
        for (int32_t k = 0; k < 4; ++k) {
            y[o + k] = mt_out_s8(bias[o + k] + s[k], mult[o + k], shift[o + k], lo, hi, out_zp);
        }
    }
    if (o + 2 <= out_n) {
        s[0] = s[1] = 0;
        dot_1x2(x, w + wo, w + wo + in_n, in_n, zp, s);
        for (int32_t k = 0; k < 2; ++k) {
            y[o + k] = mt_out_s8(bias[o + k] + s[k], mult[o + k], shift[o + k], lo, hi, out_zp);
        }
        o += 2;
        wo += 2 * in_n;
    }
    if (o < out_n) {
        y[o] = mt_out_s8(bias[o] + dot_run(x, w + wo, in_n, zp), mult[o], shift[o], lo, hi, out_zp);
    }
}

// Output-row outermost: a dropped channel or a zero error skips its whole
// weight row.
int32_t mt_linear_s8_grad_input(const mt_linear_params_t *p, const int8_t *e, const int8_t *w,
                             const int32_t *wr, const uint8_t *mask, int32_t *acc, int8_t *ein) {
    const int32_t in_n = p->in_n;
    for (int32_t i = 0; i < in_n; ++i) {
        acc[i] = 0;
    }
    int32_t wo = 0;
    for (int32_t o = 0; o < p->out_n; ++o, wo += in_n) {
        const int32_t ev = e[o];
        if (ev == 0 || (mask && !mask[o])) {
            continue;
        }
        // |s * w| <= 16384 * max(wr); mt_wr_check(wr, out_n, out_n) bounds the sum.
        axpy_w_run(acc, w + wo, in_n, ev * wr[o]);
    }
    return mt_dyn_requant_s8(acc, (size_t)in_n, ein);
}

// Masked rows are written as zeros without reading x.
void mt_linear_s8_grad_weight(const mt_linear_params_t *p, const int8_t *x, const int8_t *e,
                           const uint8_t *mask, int32_t *gw, int32_t *gb) {
    const int32_t in_n = p->in_n, zp = p->in_zp;
    int32_t wo = 0;
    for (int32_t o = 0; o < p->out_n; ++o, wo += in_n) {
        int32_t *gt = gw + wo;
        const int32_t ev = (mask && !mask[o]) ? 0 : e[o];
        gb[o] = ev;
        if (ev == 0) {
            for (int32_t i = 0; i < in_n; ++i) {
                gt[i] = 0;
            }
        } else {
            scale_x_run(gt, x, in_n, ev, zp);
        }
    }
}

#if MT_HAS_FLOAT
// Each weight's "sum" is the single term e[o] * (x[i] - zp). Zero errors are
// still added (x + 0.0f is not an identity for -0.0f or a NaN scale), so the
// result is exactly gw[i] + w_scale * (float)term per element.
void mt_linear_s8_grad_weight_f32(const mt_linear_params_t *p, const int8_t *x, const int8_t *e,
                               const uint8_t *mask, float w_scale, float b_scale, float *gw, float *gb) {
    const int32_t in_n = p->in_n, zp = p->in_zp;
    int32_t wo = 0;
    for (int32_t o = 0; o < p->out_n; ++o, wo += in_n) {
        if (mask && !mask[o]) {
            continue;  // masked rows untouched
        }
        const int32_t ev = e[o];
        float *gt = gw + wo;
        for (int32_t i = 0; i < in_n; ++i) {
            // Rounded product in its own variable: float32 result even with
            // x87 excess precision; no FMA (-std=c99 implies -ffp-contract=off).
            const float d = w_scale * (float)(ev * ((int32_t)x[i] - zp));
            gt[i] = gt[i] + d;
        }
        const float db = b_scale * (float)ev;
        gb[o] = gb[o] + db;
    }
}
#endif
