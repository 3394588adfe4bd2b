// GRU (nn.GRU, one layer, one direction) over a whole sequence in int8
// (docs/numerics.md, "GRU over a sequence"): the loop over time is here so the
// device runs no Python per step; each step's gates go to keep for backward.
#include "mt_kernels.h"
#include "mt_seq.h"

static inline int32_t mt_gru_s8(int32_t v) {
    return mt_clamp(v, -128, 127);
}

// The sum of two requantised parts, saturated: each may be near +-2^31 (any multiplier).
static inline int32_t mt_gru_s8_sum(int32_t a, int32_t b) {
    const int64_t v = (int64_t)a + b;
    return v < -128 ? -128 : (v > 127 ? 127 : (int32_t)v);
}

// One row's dot products: x part with the input zero point, h part plain.
static int32_t mt_gru_dot(const int8_t *w, const int8_t *v, int32_t n, int32_t zp) {
    int32_t s = 0;
    for (int32_t j = 0; j < n; ++j) {
        s += w[j] * (v[j] - zp);
    }
    return s;
}

void mt_gru_s8_forward(const mt_gru_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                       const int32_t *mult, const int32_t *shift, const int8_t *lut, int8_t *y, int8_t *keep) {
    const int32_t D = p->d, H = p->h, row = D + H, H3 = 3 * H;
    for (int32_t t = 0; t < p->t; ++t) {
        const int8_t *xt = x + t * D;
        const int8_t *hp = t > 0 ? y + (t - 1) * H : NULL;  // h_{-1} = 0
        int8_t *ht = y + t * H;
        int8_t *k = keep + t * 4 * H;
        for (int32_t c = 0; c < H; ++c) {
            int32_t pre[3], hpart[3];
            for (int32_t g = 0; g < 3; ++g) {
                const int32_t i = g * H + c;
                const int8_t *wi = w + i * row;
                const int32_t ax = bias[i] + mt_gru_dot(wi, xt, D, p->x_zp);
                const int32_t ah = (hp ? mt_gru_dot(wi + D, hp, H, 0) : 0) + (g == 2 ? bias[H3 + c] : 0);
                pre[g] = mt_requant(ax, mult[i], shift[i]);
                hpart[g] = mt_requant(ah, mult[H3 + i], shift[H3 + i]);
            }
            const int32_t r = lut[mt_gru_s8_sum(pre[0], hpart[0]) + 128];
            const int32_t z = lut[256 + mt_gru_s8_sum(pre[1], hpart[1]) + 128];
            const int32_t hn = mt_gru_s8(hpart[2]);
            const int32_t rn = mt_requant((r + 128) * hn, p->m_rn, p->sh_rn);
            const int32_t n = lut[512 + mt_gru_s8_sum(pre[2], rn) + 128];
            const int32_t h0 = hp ? hp[c] : 0;
            // (1 - z) n + z h with z = (z + 128) / 256: a convex combination, inside int8
            ht[c] = (int8_t)mt_rounding_divide_by_pot((128 - z) * n + (z + 128) * h0, 8);
            k[c] = (int8_t)r;
            k[H + c] = (int8_t)z;
            k[2 * H + c] = (int8_t)n;
            k[3 * H + c] = (int8_t)hn;
        }
    }
}
