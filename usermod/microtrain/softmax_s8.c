// Softmax over one dimension inside a model, int8 in, int8 out (scale 1/256,
// zero point -128), from the caller's exp table as the loss's
// (docs/numerics.md, "softmax"): no float, no libm.
#include "mt_kernels.h"

// The dimension's n elements of row (o, q) sit inner apart from
// (o * n) * inner + q.
void mt_softmax_s8_forward(const mt_softmax_params_t *p, const int8_t *x, const uint32_t *lut, int32_t lut_n,
                           int8_t *y) {
    const int32_t n = p->n, inner = p->inner;
    for (int32_t o = 0; o < p->outer; ++o) {
        for (int32_t q = 0; q < inner; ++q) {
            const int32_t base = o * n * inner + q;
            int32_t qmax = INT8_MIN;
            for (int32_t t = 0, i = base; t < n; ++t, i += inner) {
                if (x[i] > qmax) {
                    qmax = x[i];
                }
            }
            // S <= 256 * 2^16 and lut * 2^8 <= 2^24: the numerator stays in uint32
            uint32_t s = 0;
            for (int32_t t = 0, i = base; t < n; ++t, i += inner) {
                const int32_t d = qmax - x[i];
                s += d < lut_n ? lut[d] : 0u;
            }
            // read all of the row before writing: y may be x
            for (int32_t t = 0, i = base; t < n; ++t, i += inner) {
                const int32_t d = qmax - x[i];
                const uint32_t v = d < lut_n ? lut[d] : 0u;
                const uint32_t u = mt_udiv_u32((v << 8) + (s >> 1), s);  // S >= lut[0] > 0
                y[i] = (int8_t)((u > 255u ? 255 : (int32_t)u) - 128);
            }
        }
    }
}

// T = sum_t u_t e_t over the row, u = y + 128 (the probability in 1/256).
static inline int32_t mt_softmax_dot(const int8_t *y, const int8_t *e, int32_t base, int32_t n, int32_t inner) {
    int32_t s = 0;
    for (int32_t t = 0, i = base; t < n; ++t, i += inner) {
        s += (y[i] + 128) * e[i];
    }
    return s;
}

// acc_t = u_t * (256 e_t - T): p (e - p.e) in units of s_e / 2^16;
// |acc| <= 255 * (256 * 128 + 256 * 255 * 128) < 2^31 for n <= 256. Two
// passes (the maximum, then the values) instead of an int32 scratch; a row's
// T is taken before any of its ein is written, so ein may be e.
int32_t mt_softmax_s8_grad_input(const mt_softmax_params_t *p, const int8_t *y, const int8_t *e, int8_t *ein) {
    const int32_t n = p->n, inner = p->inner;
    uint32_t mx = 0;
    for (int32_t o = 0; o < p->outer; ++o) {
        for (int32_t q = 0; q < inner; ++q) {
            const int32_t base = o * n * inner + q;
            const int32_t tt = mt_softmax_dot(y, e, base, n, inner);
            for (int32_t t = 0, i = base; t < n; ++t, i += inner) {
                const uint32_t v = mt_abs_u32((y[i] + 128) * (e[i] * 256 - tt));
                if (v > mx) {
                    mx = v;
                }
            }
        }
    }
    const int32_t shift = mt_dyn_shift(mx);
    for (int32_t o = 0; o < p->outer; ++o) {
        for (int32_t q = 0; q < inner; ++q) {
            const int32_t base = o * n * inner + q;
            const int32_t tt = mt_softmax_dot(y, e, base, n, inner);
            for (int32_t t = 0, i = base; t < n; ++t, i += inner) {
                ein[i] = mt_dyn_apply((y[i] + 128) * (e[i] * 256 - tt), shift);
            }
        }
    }
    return shift;
}
