// LayerNorm's normalisation over the last dimension, per sample and position,
// in integers (docs/numerics.md, "LayerNorm"): the statistics, an integer
// square root and one division per row, so it runs on cores without an FPU or
// a divide instruction. The affine part (gamma, beta) is a depthwise 1x1 conv.
#include "mt_kernels.h"
#include "mt_seq.h"

// floor(sqrt(v)), bit by bit: shifts, compares and subtractions only.
static uint32_t mt_isqrt_u32(uint32_t v) {
    uint32_t r = 0, bit = (uint32_t)1 << 30;
    while (bit > v) {
        bit >>= 2;
    }
    while (bit) {
        if (v >= r + bit) {
            v -= r + bit;
            r = (r >> 1) + bit;
        } else {
            r >>= 1;
        }
        bit >>= 2;
    }
    return r;
}

// One row's statistics: S1 = sum a, and inv = floor(2^26 / R), R =
// isqrt(min(C * S2 - S1^2 + eps_q, 2^32 - 1)) (>= 1: eps_q >= 1), a = x - in_zp.
// C <= 256: S2 <= 256 * 255^2 and C * S2 - S1^2 is exact in uint32.
static int32_t mt_ln_stats(const mt_layernorm_params_t *p, const int8_t *x, int32_t *inv) {
    const int32_t c = p->c, z = p->in_zp;
    int32_t s1 = 0;
    uint32_t s2 = 0;
    for (int32_t k = 0; k < c; ++k) {
        const int32_t a = x[k] - z;
        s1 += a;
        s2 += (uint32_t)(a * a);
    }
    const uint32_t q = (uint32_t)c * s2 - (uint32_t)s1 * (uint32_t)s1;  // both < 2^32, q >= 0
    const uint32_t qe = q > 0xFFFFFFFFu - (uint32_t)p->eps_q ? 0xFFFFFFFFu : q + (uint32_t)p->eps_q;
    *inv = (int32_t)mt_udiv_u32((uint32_t)1 << 26, mt_isqrt_u32(qe));
    return s1;
}

// y = clamp(requant((C a - S1) * inv, m, sh) + out_zp): the normalised value in
// Q26 (|C a - S1| < 32 R keeps it below 2^31), then the output's scale.
void mt_layernorm_s8_forward(const mt_layernorm_params_t *p, const int8_t *x, int8_t *y) {
    const int32_t c = p->c, z = p->in_zp, zo = p->out_zp;
    mt_rq_t q;
    mt_rq_init(&q, p->m, p->sh, -128 - zo, 127 - zo, zo);
    for (int32_t r = 0; r < p->rows; ++r) {
        const int8_t *xr = x + r * c;
        int8_t *yr = y + r * c;
        int32_t inv;
        const int32_t s1 = mt_ln_stats(p, xr, &inv);
        for (int32_t k = 0; k < c; ++k) {  // y may be x: x[k] is read before y[k] is written
            const int32_t t = (c * (xr[k] - z) - s1) * inv;
            yr[k] = mt_rq_out(t, &q);
        }
    }
}

// One row of the grad: v = C e - sum e - yhat * G (G = sum e yhat), yhat = t / 2^26,
// in Q9 (v9 below), times 1 / R through inv: acc = v * 2^8 / R. With
// |yhat| < 32 and sum |yhat| <= 2C, every intermediate stays below 2^31.
static uint32_t mt_ln_grad_row(const mt_layernorm_params_t *p, const int8_t *x, const int8_t *e, int8_t *out,
                               int32_t shift, uint32_t mx) {
    const int32_t c = p->c, z = p->in_zp;
    int32_t inv;
    const int32_t s1 = mt_ln_stats(p, x, &inv);
    int32_t e1 = 0, g14 = 0;  // sum e; G in Q14
    for (int32_t k = 0; k < c; ++k) {
        const int32_t t = (c * (x[k] - z) - s1) * inv;
        e1 += e[k];
        g14 += e[k] * (t >> 12);
    }
    for (int32_t k = 0; k < c; ++k) {  // e[k] read before out[k]: out may be e
        const int32_t t = (c * (x[k] - z) - s1) * inv;
        const int32_t v9 = (int32_t)((uint32_t)(c * e[k] - e1) << 9) - mt_seq_dhm(t, g14);
        const int32_t acc = mt_seq_dhm(v9, inv << 4);
        if (out) {
            out[k] = mt_dyn_apply(acc, shift);
        } else {
            const uint32_t a = mt_abs_u32(acc);
            if (a > mx) {
                mx = a;
            }
        }
    }
    return mx;
}

// Two passes over the rows (the largest |acc|, then the values): no scratch.
int32_t mt_layernorm_s8_grad_input(const mt_layernorm_params_t *p, const int8_t *x, const int8_t *e, int8_t *ein) {
    const int32_t c = p->c;
    uint32_t mx = 0;
    for (int32_t r = 0; r < p->rows; ++r) {
        mx = mt_ln_grad_row(p, x + r * c, e + r * c, NULL, 0, mx);
    }
    const int32_t shift = mt_dyn_shift(mx);
    for (int32_t r = 0; r < p->rows; ++r) {
        mt_ln_grad_row(p, x + r * c, e + r * c, ein + r * c, shift, 0);
    }
    return shift;
}
