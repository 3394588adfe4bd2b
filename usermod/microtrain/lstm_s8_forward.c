// LSTM (nn.LSTM, one layer, one direction) over a whole sequence in int8
// (docs/numerics.md, "LSTM over a sequence"): the loop over time is here so the
// device runs no Python per step; each step's gates and cell go to keep for backward.
#include "mt_kernels.h"
#include "mt_seq.h"

// The sum of two requantised parts, saturated: each may be near +-2^31 (any multiplier).
static inline int32_t mt_lstm_s8_sum(int32_t a, int32_t b) {
    const int64_t v = (int64_t)a + b;
    return v < -128 ? -128 : (v > 127 ? 127 : (int32_t)v);
}

// One row's dot products: x part with the input zero point, h part plain.
static int32_t mt_lstm_dot(const int8_t *w, const int8_t *v, int32_t n, int32_t zp) {
    int32_t s = 0;
    for (int32_t j = 0; j < n; ++j) {
        s += w[j] * (v[j] - zp);
    }
    return s;
}

void mt_lstm_s8_forward(const mt_lstm_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                        const int32_t *mult, const int32_t *shift, const int8_t *lut, int8_t *y, int8_t *keep) {
    const int32_t D = p->d, H = p->h, row = D + H, H4 = 4 * H, H6 = 6 * H;
    for (int32_t t = 0; t < p->t; ++t) {
        const int8_t *xt = x + t * D;
        const int8_t *hp = t > 0 ? y + (t - 1) * H : NULL;      // h_{-1} = 0
        const int8_t *kp = t > 0 ? keep + (t - 1) * H6 : NULL;  // c_{-1} = 0
        int8_t *ht = y + t * H;
        int8_t *k = keep + t * H6;
        for (int32_t c = 0; c < H; ++c) {
            int32_t gate[4];
            for (int32_t g = 0; g < 4; ++g) {
                const int32_t i = g * H + c;
                const int8_t *wi = w + i * row;
                const int32_t ax = bias[i] + mt_lstm_dot(wi, xt, D, p->x_zp);
                const int32_t ah = hp ? mt_lstm_dot(wi + D, hp, H, 0) : 0;
                const int32_t pre =
                    mt_lstm_s8_sum(mt_requant(ax, mult[i], shift[i]), mt_requant(ah, mult[H4 + i], shift[H4 + i]));
                gate[g] = lut[g * 256 + pre + 128];
            }
            const int32_t cp = kp ? kp[4 * H + c] : 0;
            // f c + i g: f = (f + 128) / 256 keeps c's scale; i g goes to c's scale
            const int32_t cf = mt_rounding_divide_by_pot((gate[1] + 128) * cp, 8);
            const int32_t cn = mt_lstm_s8_sum(cf, mt_requant((gate[0] + 128) * gate[2], p->m_ig, p->sh_ig));
            const int32_t tc = lut[1024 + cn + 128];
            // o tanh(c) with o = (o + 128) / 256: inside int8 at tanh's output scale
            ht[c] = (int8_t)mt_rounding_divide_by_pot((gate[3] + 128) * tc, 8);
            for (int32_t g = 0; g < 4; ++g) {
                k[g * H + c] = (int8_t)gate[g];
            }
            k[4 * H + c] = (int8_t)cn;
            k[5 * H + c] = (int8_t)tc;
        }
    }
}
