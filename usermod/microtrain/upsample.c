// Nearest (mode 0) and zero-insertion (mode 1, for transposed convs)
// upsampling by integer factors, and their grad input (docs/numerics.md,
// "nearest upsampling"). No division: output rows and columns are walked
// block by block (Cortex-M0 has no divide instruction).
#include "mt_kernels.h"

void mt_upsample_s8_forward(const mt_upsample_params_t *p, const int8_t *x, int8_t *y) {
    const int32_t c = p->c, out_w = p->out_w;
    const int32_t row = out_w * c;
    if (p->mode) {
        const int8_t zp = (int8_t)p->zp;
        const int32_t n = p->out_h * row;
        for (int32_t i = 0; i < n; ++i) {
            y[i] = zp;
        }
        for (int32_t iy = 0; iy < p->in_h; ++iy) {
            int8_t *yr = y + iy * p->f_h * row;
            for (int32_t ix = 0; ix < p->in_w; ++ix, x += c) {
                int8_t *yp = yr + ix * p->f_w * c;
                for (int32_t k = 0; k < c; ++k) {
                    yp[k] = x[k];
                }
            }
        }
        return;
    }
    int32_t oy = 0;
    for (int32_t iy = 0; iy < p->in_h; ++iy) {
        const int8_t *xr = x + iy * p->in_w * c;
        for (int32_t r = 0; r < p->f_h && oy < p->out_h; ++r, ++oy) {
            int8_t *yp = y + oy * row;
            int32_t ox = 0;
            for (int32_t ix = 0; ix < p->in_w; ++ix) {
                const int8_t *xp = xr + ix * c;
                for (int32_t s = 0; s < p->f_w && ox < out_w; ++s, ++ox, yp += c) {
                    for (int32_t k = 0; k < c; ++k) {
                        yp[k] = xp[k];
                    }
                }
            }
        }
    }
}

// acc of input (iy, ix, k): the errors of the output positions it fed.
// |acc| <= 128 * 255 * 255 < 2^31.
static int32_t mt_upsample_acc(const mt_upsample_params_t *p, const int8_t *e, int32_t iy, int32_t ix, int32_t k) {
    const int32_t c = p->c, row = p->out_w * c;
    const int32_t oy0 = iy * p->f_h, ox0 = ix * p->f_w;
    if (p->mode) {
        return e[oy0 * row + ox0 * c + k];
    }
    const int32_t oy1 = oy0 + p->f_h < p->out_h ? oy0 + p->f_h : p->out_h;
    const int32_t ox1 = ox0 + p->f_w < p->out_w ? ox0 + p->f_w : p->out_w;
    int32_t s = 0;
    for (int32_t oy = oy0; oy < oy1; ++oy) {
        const int8_t *ep = e + oy * row + ox0 * c + k;
        for (int32_t ox = ox0; ox < ox1; ++ox, ep += c) {
            s += *ep;
        }
    }
    return s;
}

// Two passes instead of an int32 scratch: the largest |acc| (the shift),
// then the values.
int32_t mt_upsample_s8_grad_input(const mt_upsample_params_t *p, const int8_t *e, int8_t *ein) {
    uint32_t m = 0;
    for (int32_t iy = 0; iy < p->in_h; ++iy) {
        for (int32_t ix = 0; ix < p->in_w; ++ix) {
            for (int32_t k = 0; k < p->c; ++k) {
                const uint32_t v = mt_abs_u32(mt_upsample_acc(p, e, iy, ix, k));
                if (v > m) {
                    m = v;
                }
            }
        }
    }
    const int32_t shift = mt_dyn_shift(m);
    for (int32_t iy = 0; iy < p->in_h; ++iy) {
        for (int32_t ix = 0; ix < p->in_w; ++ix, ein += p->c) {
            for (int32_t k = 0; k < p->c; ++k) {
                ein[k] = mt_dyn_apply(mt_upsample_acc(p, e, iy, ix, k), shift);
            }
        }
    }
    return shift;
}
