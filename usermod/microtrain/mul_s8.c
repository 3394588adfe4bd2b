// Element-wise product of two int8 activations (TFLite / CMSIS-NN mul_s8),
// x2 broadcast over positions and / or channels: gates, squeeze-and-excitation
// (docs/numerics.md, "element-wise mul").
#include "mt_kernels.h"
#include "mt_seq.h"

// x2's element steps: per position (0 when x2 holds one position) and per
// channel (0 when x2 holds one channel).
static inline int32_t mt_mul_pos_step(const mt_mul_params_t *p) {
    return p->hw2 == p->hw ? p->c2 : 0;
}

// Element-wise, so y may be x1 (or x2 when it has y's shape).
void mt_mul_s8_forward(const mt_mul_params_t *p, const int8_t *x1, const int8_t *x2, int8_t *y) {
    const int32_t z1 = p->in1_zp, z2 = p->in2_zp, zo = p->out_zp;
    mt_rq_t q;  // the requant's constants once, its 64-bit product inline
    mt_rq_init(&q, p->m, p->sh, p->act_min - zo, p->act_max - zo, zo);
    const int32_t c = p->c, sp = mt_mul_pos_step(p);
    int32_t i = 0;
    if (p->c2 == c) {
        for (int32_t r = 0; r < p->hw; ++r) {
            const int8_t *b = x2 + r * sp;
            for (int32_t k = 0; k < c; ++k, ++i) {
                // |x - zp| <= 255: the product is below 2^16, sh <= 15 keeps it in int32
                y[i] = mt_rq_out((x1[i] - z1) * (b[k] - z2), &q);
            }
        }
        return;
    }
    for (int32_t r = 0; r < p->hw; ++r) {  // one x2 value per position
        const int32_t b = x2[r * sp] - z2;
        for (int32_t k = 0; k < c; ++k, ++i) {
            y[i] = mt_rq_out((x1[i] - z1) * b, &q);
        }
    }
}

// ein = dyn_requant(e * (x2 - in2_zp)), x2 broadcast as in the forward. Two
// passes (maximum, then requantise) recompute the products instead of an int32
// scratch; each pass reads e[i] before ein[i] is written, so ein may be e.
int32_t mt_mul_s8_grad_x1(const mt_mul_params_t *p, const int8_t *e, const int8_t *x2, int8_t *ein) {
    const int32_t z2 = p->in2_zp, c = p->c, sp = mt_mul_pos_step(p), sc = p->c2 == c ? 1 : 0;
    uint32_t mx = 0;
    int32_t i = 0;
    for (int32_t q = 0; q < p->hw; ++q) {
        const int8_t *b = x2 + q * sp;
        for (int32_t k = 0; k < c; ++k, ++i) {
            const uint32_t v = mt_abs_u32(e[i] * (b[k * sc] - z2));
            if (v > mx) {
                mx = v;
            }
        }
    }
    const int32_t shift = mt_dyn_shift(mx);
    i = 0;
    for (int32_t q = 0; q < p->hw; ++q) {
        const int8_t *b = x2 + q * sp;
        for (int32_t k = 0; k < c; ++k, ++i) {
            ein[i] = mt_dyn_apply(e[i] * (b[k * sc] - z2), shift);
        }
    }
    return shift;
}

// acc[j] = sum of e[i] * (x1[i] - in1_zp) over the elements i that read x2[j],
// then dyn_requant. |acc| <= 65535 * 128 * 255 < 2^31 (the check bounds the
// elements per x2 value).
int32_t mt_mul_s8_grad_x2(const mt_mul_params_t *p, const int8_t *e, const int8_t *x1, int32_t *acc, int8_t *ein) {
    const int32_t z1 = p->in1_zp, c = p->c, sp = mt_mul_pos_step(p), sc = p->c2 == c ? 1 : 0;
    const int32_t n2 = p->hw2 * p->c2;
    for (int32_t j = 0; j < n2; ++j) {
        acc[j] = 0;
    }
    int32_t i = 0;
    for (int32_t q = 0; q < p->hw; ++q) {
        int32_t *a = acc + q * sp;
        for (int32_t k = 0; k < c; ++k, ++i) {
            a[k * sc] += e[i] * (x1[i] - z1);
        }
    }
    return mt_dyn_requant_s8(acc, (size_t)n2, ein);
}
