// GRU backward through time in int8 / int32 (docs/numerics.md, "GRU over a
// sequence"): the running error of h in int32, the step errors of the gates
// kept as int8 with a power-of-two shift a step, the weight gradients summed
// over the steps on one common shift, the input errors from the same bytes.
#include "mt_kernels.h"
#include "mt_seq.h"

// The running error's bound: every product of it with an int8 difference fits int32.
#define MT_GRU_B ((int32_t)1 << 22)

static inline int32_t mt_gru_sat(int32_t v) {
    return mt_clamp(v, -MT_GRU_B, MT_GRU_B);
}

// v * 2^a saturated to the bound (no shift of a negative value, no overflow).
static inline int32_t mt_gru_shl_sat(int32_t v, int32_t a) {
    if (v == 0) {
        return 0;
    }
    const int32_t lim = MT_GRU_B >> a;
    if (v > lim) {
        return MT_GRU_B;
    }
    if (v < -lim) {
        return -MT_GRU_B;
    }
    return (int32_t)((uint32_t)v << a);
}

// One step back: gate errors into keep (d8, returns its shift), dh to h_{t-1}'s.
static int32_t mt_gru_step(const mt_gru_params_t *p, const int8_t *w, const int32_t *wr, const int32_t *dtanh,
                           const int8_t *hp, const int8_t *et, int8_t *k, int32_t *dh, int32_t *g) {
    const int32_t D = p->d, H = p->h, row = D + H;
    for (int32_t c = 0; c < H; ++c) {
        const int32_t r = k[c], z = k[H + c], n = k[2 * H + c], hn = k[3 * H + c];
        const int32_t u = z + 128, v = r + 128;
        const int32_t d = mt_gru_sat(256 * et[c] + dh[c]);
        const int32_t dn = mt_rounding_divide_by_pot(d * (256 - u), 8);
        const int32_t dz = mt_gru_sat(mt_requant(d * ((hp ? hp[c] : 0) - n), p->m_h, p->sh_h));
        const int32_t dpn = mt_seq_dhm(dn, dtanh[n + 128]);
        const int32_t dr = mt_gru_sat(mt_requant(dpn * hn, p->m_hn, p->sh_hn));
        g[c] = mt_seq_dhm(dr, (v * (256 - v)) << 15);
        g[H + c] = mt_seq_dhm(dz, (u * (256 - u)) << 15);
        g[2 * H + c] = dpn;
        g[3 * H + c] = mt_seq_dhm(dpn, v << 23);
        dh[c] = mt_rounding_divide_by_pot(d * u, 8);  // the z h path
    }
    const int32_t a = mt_dyn_requant_s8(g, (size_t)(4 * H), k);
    for (int32_t j = 0; j < H; ++j) {
        int32_t s = 0;
        for (int32_t i = 0; i < 3 * H; ++i) {
            // rows of r and z meet dpr, dpz; rows of n meet dhn (keep's last H)
            const int32_t e8 = k[i < 2 * H ? i : i + H];
            s += w[i * row + D + j] * wr[i] * e8;
        }
        dh[j] = mt_gru_sat(dh[j] + mt_gru_shl_sat(mt_requant(s, p->m_w, p->sh_w), a));
    }
    return a;
}

int32_t mt_gru_s8_backward(const mt_gru_params_t *p, const int8_t *x, const int8_t *w, const int32_t *wr,
                           const int32_t *dtanh, const int8_t *y, int8_t *keep, const int8_t *e, int32_t *shifts,
                           int32_t *acc, int32_t *gw, int32_t *gb, int8_t *ein) {
    const int32_t T = p->t, D = p->d, H = p->h, row = D + H, H4 = 4 * H;
    const int32_t t0 = p->k > 0 && p->k < T ? T - p->k : 0;
    int32_t *dh = acc, *g = acc + H;
    for (int32_t j = 0; j < H; ++j) {
        dh[j] = 0;
    }
    int32_t big = 0;
    for (int32_t t = T - 1; t >= 0; --t) {
        shifts[t] =
            t >= t0 ? mt_gru_step(p, w, wr, dtanh, t > 0 ? y + (t - 1) * H : NULL, e + t * H, keep + t * H4, dh, g) : 0;
        big = shifts[t] > big ? shifts[t] : big;
    }
    // every trained step's errors on 2^big, in place
    for (int32_t t = t0; t < T; ++t) {
        int8_t *k = keep + t * H4;
        for (int32_t i = 0; i < H4; ++i) {
            k[i] = (int8_t)mt_rounding_divide_by_pot(k[i], big - shifts[t]);
        }
    }
    for (int32_t i = 0; i < 3 * H; ++i) {
        const int32_t ih = i < 2 * H ? i : i + H;  // the h part's error: dhn for n's rows
        int32_t *gr = gw + i * row;
        int32_t sb = 0;
        for (int32_t j = 0; j < row; ++j) {
            gr[j] = 0;
        }
        for (int32_t t = t0; t < T; ++t) {
            const int8_t *k = keep + t * H4;
            const int32_t dx = k[i], dhh = k[ih];
            sb += dx;
            const int8_t *xt = x + t * D;
            for (int32_t j = 0; j < D; ++j) {
                gr[j] += dx * (xt[j] - p->x_zp);
            }
            if (t > 0 && dhh != 0) {
                const int8_t *hp = y + (t - 1) * H;
                for (int32_t j = 0; j < H; ++j) {
                    gr[D + j] += dhh * hp[j];
                }
            }
        }
        gb[i] = sb;
    }
    for (int32_t c = 0; c < H; ++c) {
        int32_t sb = 0;
        for (int32_t t = t0; t < T; ++t) {
            sb += keep[t * H4 + 3 * H + c];
        }
        gb[3 * H + c] = sb;
    }
    // the input errors: two passes (the largest magnitude, then the values) over the
    // trained steps instead of an int32 scratch of T x D
    uint32_t mx = 0;
    for (int32_t pass = 0; pass < 2; ++pass) {
        const int32_t sh = pass ? mt_dyn_shift(mx) : 0;
        for (int32_t t = 0; t < T; ++t) {
            const int8_t *k = keep + t * H4;
            for (int32_t j = 0; j < D; ++j) {
                int32_t s = 0;
                if (t >= t0) {
                    for (int32_t i = 0; i < 3 * H; ++i) {
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
