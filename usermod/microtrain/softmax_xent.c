// Softmax cross-entropy gradient from a caller-made exp table
// (docs/numerics.md, "softmax cross-entropy"): no float, no libm.
#include "mt_kernels.h"

// Q15 probability (v * 2^15 + S/2) / S. v <= 2^16 and S < 2^31, so the
// numerator is < 2^32: exact in uint32.
static inline int32_t mt_q15_prob(uint32_t v, uint32_t s) {
    return (int32_t)mt_udiv_u32((v << 15) + (s >> 1), s);
}

// A table of n entries stands for the full one with zeros after it (the
// caller trims the zero tail to save RAM).
static inline uint32_t mt_exp_at(const uint32_t *lut, int32_t n, int32_t d) {
    return d < n ? lut[d] : 0u;
}

int32_t mt_softmax_xent_s8(const int8_t *q, int32_t c, int32_t label, const uint32_t *lut, int32_t n, int8_t *err,
                           int32_t *stats) {
    int32_t qmax = INT8_MIN;
    for (int32_t i = 0; i < c; ++i) {
        if (q[i] > qmax) {
            qmax = q[i];
        }
    }
    // S, and the largest table value among non-label logits: a lower bound
    // for the shift below (p is monotone in the table value).
    uint32_t s = 0, vmax = 0;
    for (int32_t i = 0; i < c; ++i) {
        const uint32_t v = mt_exp_at(lut, n, qmax - q[i]);  // d in [0, 255]
        s += v;
        if (i != label && v > vmax) {
            vmax = v;
        }
    }
    // Zero-sum errors: err[label] is minus the sum of the other (rounded)
    // errors, so the quantised gradient sums to zero like the real one
    // (rounding the label's error on its own biases every logit upwards, into
    // the int8 clamp). The shift is the smallest that keeps that sum <= 127;
    // S(shift) is non-increasing in shift, so count up from the bound.
    // S >= lut[0] = 2^16 > 0 (the max logit has d = 0).
    int32_t shift = mt_dyn_shift((uint32_t)mt_q15_prob(vmax, s));  // 0 when c == 1
    for (;;) {
        int32_t sum = 0;  // <= c * 127 after the first term above 127
        for (int32_t i = 0; i < c && sum <= 127; ++i) {
            if (i != label) {
                sum += mt_dyn_apply(mt_q15_prob(mt_exp_at(lut, n, qmax - q[i]), s), shift);
            }
        }
        if (sum <= 127) {
            break;
        }
        ++shift;  // terminates: every p < 2^16, so at shift 17 every term is 0
    }
    int32_t sum = 0;
    for (int32_t i = 0; i < c; ++i) {
        if (i != label) {
            const int8_t v = mt_dyn_apply(mt_q15_prob(mt_exp_at(lut, n, qmax - q[i]), s), shift);
            err[i] = v;
            sum += v;
        }
    }
    err[label] = (int8_t)-sum;
    stats[0] = shift;
    stats[1] = (int32_t)s;
    stats[2] = qmax;
    return shift;
}
