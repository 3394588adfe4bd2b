// LSTM backward through time in int8 / int32 (docs/numerics.md, "LSTM over a
// sequence"): the running errors of h and of the cell c in int32, the gate
// errors of a step kept as int8 with a power-of-two shift, the weight gradients
// summed over the steps on one common shift, the input errors from the same bytes.
#include "mt_kernels.h"
#include "mt_seq.h"

// The running errors' bound: every product of one with an int8 or a 0..256 factor fits int32.
#define MT_LSTM_B ((int32_t)1 << 22)

static inline int32_t mt_lstm_sat(int32_t v) {
    return mt_clamp(v, -MT_LSTM_B, MT_LSTM_B);
}

// v * 2^a saturated to the bound (no shift of a negative value, no overflow).
static inline int32_t mt_lstm_shl_sat(int32_t v, int32_t a) {
    if (v == 0) {
        return 0;
    }
    const int32_t lim = MT_LSTM_B >> a;
    if (v > lim) {
        return MT_LSTM_B;
    }
    if (v < -lim) {
        return -MT_LSTM_B;
    }
    return (int32_t)((uint32_t)v << a);
}

// One step back: gate errors into keep's first 4H (d8, returns its shift);
// dh, dc become h_{t-1}'s and c_{t-1}'s errors.
static int32_t mt_lstm_step(const mt_lstm_params_t *p, const int8_t *w, const int32_t *wr, const int32_t *dtanh,
                            const int8_t *kp, const int8_t *et, int8_t *k, int32_t *dh, int32_t *dc, int32_t *g) {
    const int32_t D = p->d, H = p->h, row = D + H, H4 = 4 * H;
    for (int32_t c = 0; c < H; ++c) {
        const int32_t ui = k[c] + 128, uf = k[H + c] + 128, gg = k[2 * H + c], uo = k[3 * H + c] + 128;
        const int32_t tc = k[5 * H + c], cp = kp ? kp[4 * H + c] : 0;
        const int32_t d = mt_lstm_sat(256 * et[c] + dh[c]);
        const int32_t dout = mt_lstm_sat(mt_requant(d * tc, p->m_h, p->sh_h));
        const int32_t dtc = mt_rounding_divide_by_pot(d * uo, 8);
        const int32_t dcc = mt_lstm_sat(dc[c] + mt_seq_dhm(dtc, dtanh[tc + 128]));
        const int32_t di = mt_lstm_sat(mt_requant(dcc * gg, p->m_h, p->sh_h));
        const int32_t df = mt_lstm_sat(mt_requant(dcc * cp, p->m_c, p->sh_c));
        const int32_t dg = mt_rounding_divide_by_pot(dcc * ui, 8);
        g[c] = mt_seq_dhm(di, (ui * (256 - ui)) << 15);
        g[H + c] = mt_seq_dhm(df, (uf * (256 - uf)) << 15);
        g[2 * H + c] = mt_seq_dhm(dg, dtanh[gg + 128]);
        g[3 * H + c] = mt_seq_dhm(dout, (uo * (256 - uo)) << 15);
        dc[c] = mt_rounding_divide_by_pot(dcc * uf, 8);  // the f c path
    }
    const int32_t a = mt_dyn_requant_s8(g, (size_t)H4, k);
    for (int32_t j = 0; j < H; ++j) {
        int32_t s = 0;
        for (int32_t i = 0; i < H4; ++i) {
            s += w[i * row + D + j] * wr[i] * k[i];
        }
        dh[j] = mt_lstm_shl_sat(mt_requant(s, p->m_w, p->sh_w), a);
    }
    return a;
}

int32_t mt_lstm_s8_backward(const mt_lstm_params_t *p, const int8_t *x, const int8_t *w, const int32_t *wr,
                            const int32_t *dtanh, const int8_t *y, int8_t *keep, const int8_t *e, int32_t *shifts,
                            int32_t *acc, int32_t *gw, int32_t *gb, int8_t *ein) {
    const int32_t T = p->t, D = p->d, H = p->h, row = D + H, H4 = 4 * H, H6 = 6 * H;
    const int32_t t0 = p->k > 0 && p->k < T ? T - p->k : 0;
    int32_t *dh = acc, *dc = acc + H, *g = acc + 2 * H;
    for (int32_t j = 0; j < 2 * H; ++j) {
        acc[j] = 0;
    }
    int32_t big = 0;
    for (int32_t t = T - 1; t >= 0; --t) {
        shifts[t] = t >= t0 ? mt_lstm_step(p, w, wr, dtanh, t > 0 ? keep + (t - 1) * H6 : NULL, e + t * H,
                                           keep + t * H6, dh, dc, g)
                            : 0;
        big = shifts[t] > big ? shifts[t] : big;
    }
    // every trained step's errors on 2^big, in place
    for (int32_t t = t0; t < T; ++t) {
        int8_t *k = keep + t * H6;
        for (int32_t i = 0; i < H4; ++i) {
            k[i] = (int8_t)mt_rounding_divide_by_pot(k[i], big - shifts[t]);
        }
    }
    for (int32_t i = 0; i < H4; ++i) {
        int32_t *gr = gw + i * row;
        int32_t sb = 0;
        for (int32_t j = 0; j < row; ++j) {
            gr[j] = 0;
        }
        for (int32_t t = t0; t < T; ++t) {
            const int32_t dx = keep[t * H6 + i];
            sb += dx;
            if (dx == 0) {
                continue;
            }
            const int8_t *xt = x + t * D;
            for (int32_t j = 0; j < D; ++j) {
                gr[j] += dx * (xt[j] - p->x_zp);
            }
            if (t > 0) {
                const int8_t *hp = y + (t - 1) * H;
                for (int32_t j = 0; j < H; ++j) {
                    gr[D + j] += dx * hp[j];
                }
            }
        }
        gb[i] = sb;
    }
    // the input errors: two passes (the largest magnitude, then the values) over the
    // trained steps instead of an int32 scratch of T x D
    uint32_t mx = 0;
    for (int32_t pass = 0; pass < 2; ++pass) {
        const int32_t sh = pass ? mt_dyn_shift(mx) : 0;
        for (int32_t t = 0; t < T; ++t) {
            const int8_t *k = keep + t * H6;
            for (int32_t j = 0; j < D; ++j) {
                int32_t s = 0;
                if (t >= t0) {
                    for (int32_t i = 0; i < H4; ++i) {
                        s += w[i * row + j] * wr[i] * k[i];
                    }
                }
                if (pass) {
                    ein[t * D + j] = mt_dyn_apply(s, sh);
                } else if (mt_abs_u32(s) > mx) {
                    mx = mt_abs_u32(s);
                }
            }
        }
        if (pass) {
            return sh;
        }
    }
    return 0;
}
