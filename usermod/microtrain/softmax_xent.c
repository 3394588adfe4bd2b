// Softmax cross-entropy gradient from a caller-made exp table
// (docs/numerics.md, "softmax cross-entropy"): no float, no libm.
#include "mt_kernels.h"

// Q15 probability (v * 2^15 + S/2) / S. v <= 2^16 and S < 2^31, so the
// numerator is < 2^32: exact in uint32.
static inline int32_t mt_q15_prob(uint32_t v, uint32_t s) {
    return (int32_t)mt_udiv_u32((v << 15) + (s >> 1), s);
}

int32_t mt_softmax_xent_s8(const int8_t *q, int32_t c, int32_t label, const uint32_t *lut,
                        int8_t *err, int32_t *stats) {
    int32_t qmax = INT8_MIN;
    for (int32_t i = 0; i < c; ++i) {
        if (q[i] > qmax) {
            qmax = q[i];
        }
    }
    // S, and the largest table value among non-label logits: p is monotone
    // in the table value, so the largest |g| is known after two divisions
    // and the gradients need not be stored (no scratch) before requantising.
    uint32_t s = 0, vmax = 0;
    for (int32_t i = 0; i < c; ++i) {
        const uint32_t v = lut[qmax - q[i]];  // d in [0, 255]
        s += v;
        if (i != label && v > vmax) {
            vmax = v;
        }
    }
    // S >= lut[0] = 2^16 > 0 (the max logit has d = 0).
    const uint32_t g_other = (uint32_t)mt_q15_prob(vmax, s);  // 0 when c == 1
    const uint32_t g_label = (uint32_t)(32768 - mt_q15_prob(lut[qmax - q[label]], s));
    const int32_t shift = mt_dyn_shift(g_other > g_label ? g_other : g_label);
    for (int32_t i = 0; i < c; ++i) {
        int32_t g = mt_q15_prob(lut[qmax - q[i]], s);
        if (i == label) {
            g -= 32768;
        }
        err[i] = mt_dyn_apply(g, shift);
    }
    stats[0] = shift;
    stats[1] = (int32_t)s;
    stats[2] = qmax;
    return shift;
}
