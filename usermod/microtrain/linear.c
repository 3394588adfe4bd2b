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

void mt_linear_s8_forward(const mt_linear_params_t *p, const int8_t *x, const int8_t *w,
                       const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y) {
    const int32_t in_n = p->in_n, zp = p->in_zp;
    // Clamp before adding out_zp: requant may return values near +-2^31.
    const int32_t lo = p->act_min - p->out_zp, hi = p->act_max - p->out_zp;
    int32_t wo = 0;
    for (int32_t o = 0; o < p->out_n; ++o, wo += in_n) {
        // |bias| <= 2^30 and |dot| <= 32768 * 255 * 128 < 2^30: exact.
        const int32_t acc = bias[o] + dot_run(x, w + wo, in_n, zp);
        const int32_t r = mt_requant(acc, mult[o], shift[o]);
        y[o] = (int8_t)(mt_clamp(r, lo, hi) + p->out_zp);
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
