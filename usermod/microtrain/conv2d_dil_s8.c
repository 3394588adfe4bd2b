// conv2d int8 with dilation (docs/numerics.md).
#include "mt_kernels.h"

// Dilated convs (docs/numerics.md, "dilation"): tap (ky, kx) of output (oy, ox)
// reads input row oy * stride_h - pad_top + ky * dil_h (likewise columns).
// Plain loops over the taps, kept apart from the blocked kernels (conv2d_s8_*.c); the
// binding calls them for a 19-int descriptor with a dilation above 1.

// Input position of tap k of output o on one axis, or -1 when it is padding.
static int32_t mt_dil_pos(int32_t o, int32_t stride, int32_t pad, int32_t k, int32_t dil, int32_t n) {
    const int32_t i = o * stride - pad + k * dil;
    return i >= 0 && i < n ? i : -1;
}

void mt_conv2d_dil_s8_forward(const mt_conv2d_dil_params_t *d, const int8_t *x, const int8_t *w, const int32_t *bias,
                              const int32_t *mult, const int32_t *shift, int8_t *y) {
    const mt_conv2d_params_t *p = &d->c;
    const int32_t cpg = (int32_t)mt_udiv_u32((uint32_t)p->in_c, (uint32_t)p->groups);
    const int32_t opg = (int32_t)mt_udiv_u32((uint32_t)p->out_c, (uint32_t)p->groups);
    const int32_t lo = p->act_min - p->out_zp, hi = p->act_max - p->out_zp;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        for (int32_t ox = 0; ox < p->out_w; ++ox, y += p->out_c) {
            int32_t oc = 0;
            for (int32_t g = 0; g < p->groups; ++g) {
                for (int32_t o = 0; o < opg; ++o, ++oc) {
                    int32_t acc = bias[oc];  // exact: k_h * k_w * cpg <= 32768 (conv check)
                    for (int32_t ky = 0; ky < p->k_h; ++ky) {
                        const int32_t iy = mt_dil_pos(oy, p->stride_h, p->pad_top, ky, d->dil_h, p->in_h);
                        if (iy < 0) {
                            continue;
                        }
                        for (int32_t kx = 0; kx < p->k_w; ++kx) {
                            const int32_t ix = mt_dil_pos(ox, p->stride_w, p->pad_left, kx, d->dil_w, p->in_w);
                            if (ix < 0) {
                                continue;
                            }
                            const int8_t *xp = x + (iy * p->in_w + ix) * p->in_c + g * cpg;
                            const int8_t *wp = w + ((oc * p->k_h + ky) * p->k_w + kx) * cpg;
                            for (int32_t ci = 0; ci < cpg; ++ci) {
                                acc += (xp[ci] - p->in_zp) * wp[ci];
                            }
                        }
                    }
                    y[oc] = (int8_t)(mt_clamp(mt_requant(acc, mult[oc], shift[oc]), lo, hi) + p->out_zp);
                }
            }
        }
    }
}

int32_t mt_conv2d_dil_s8_grad_input(const mt_conv2d_dil_params_t *d, const int8_t *e, const int8_t *w,
                                    const int32_t *wr, const uint8_t *mask, int32_t lo, int32_t hi, int32_t *acc,
                                    int8_t *ein) {
    const mt_conv2d_params_t *p = &d->c;
    const int32_t cpg = (int32_t)mt_udiv_u32((uint32_t)p->in_c, (uint32_t)p->groups);
    const int32_t opg = (int32_t)mt_udiv_u32((uint32_t)p->out_c, (uint32_t)p->groups);
    const int32_t n_in = p->in_h * p->in_w * p->in_c;
    for (int32_t i = 0; i < n_in; ++i) {
        acc[i] = 0;
    }
    // |acc| <= k_h * k_w * opg * 128 * max(wr) * 128 <= 2^31 - 1 (the wr check)
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        for (int32_t ox = 0; ox < p->out_w; ++ox, e += p->out_c) {
            int32_t oc = 0;
            for (int32_t g = 0; g < p->groups; ++g) {
                for (int32_t o = 0; o < opg; ++o, ++oc) {
                    const int32_t ev = e[oc] * wr[oc];
                    if (ev == 0 || (mask && !mask[oc])) {
                        continue;
                    }
                    for (int32_t ky = 0; ky < p->k_h; ++ky) {
                        const int32_t iy = mt_dil_pos(oy, p->stride_h, p->pad_top, ky, d->dil_h, p->in_h);
                        if (iy < 0) {
                            continue;
                        }
                        for (int32_t kx = 0; kx < p->k_w; ++kx) {
                            const int32_t ix = mt_dil_pos(ox, p->stride_w, p->pad_left, kx, d->dil_w, p->in_w);
                            if (ix < 0) {
                                continue;
                            }
                            int32_t *ap = acc + (iy * p->in_w + ix) * p->in_c + g * cpg;
                            const int8_t *wp = w + ((oc * p->k_h + ky) * p->k_w + kx) * cpg;
                            for (int32_t ci = 0; ci < cpg; ++ci) {
                                ap[ci] += ev * wp[ci];
                            }
                        }
                    }
                }
            }
        }
    }
    return mt_dyn_requant_act_s8(acc, (size_t)n_in, lo, hi, ein);
}

// gw of weight (oc, ky, kx, ci) in group g: |sum| <= out_h * out_w * 128 * 255 < 2^31.
static int32_t mt_dil_gw(const mt_conv2d_dil_params_t *d, const int8_t *x, const int8_t *e, int32_t oc, int32_t g,
                         int32_t cpg, int32_t ky, int32_t kx, int32_t ci) {
    const mt_conv2d_params_t *p = &d->c;
    int32_t s = 0;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy = mt_dil_pos(oy, p->stride_h, p->pad_top, ky, d->dil_h, p->in_h);
        if (iy < 0) {
            continue;
        }
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t ix = mt_dil_pos(ox, p->stride_w, p->pad_left, kx, d->dil_w, p->in_w);
            if (ix >= 0) {
                s += e[(oy * p->out_w + ox) * p->out_c + oc] *
                     (x[(iy * p->in_w + ix) * p->in_c + g * cpg + ci] - p->in_zp);
            }
        }
    }
    return s;
}

static int32_t mt_dil_gb(const mt_conv2d_params_t *p, const int8_t *e, int32_t oc) {
    int32_t s = 0;
    const int32_t n = p->out_h * p->out_w;
    for (int32_t i = 0; i < n; ++i) {
        s += e[i * p->out_c + oc];
    }
    return s;
}

void mt_conv2d_dil_s8_grad_weight(const mt_conv2d_dil_params_t *d, const int8_t *x, const int8_t *e,
                                  const uint8_t *mask, int32_t *gw, int32_t *gb) {
    const mt_conv2d_params_t *p = &d->c;
    const int32_t cpg = (int32_t)mt_udiv_u32((uint32_t)p->in_c, (uint32_t)p->groups);
    const int32_t opg = (int32_t)mt_udiv_u32((uint32_t)p->out_c, (uint32_t)p->groups);
    int32_t oc = 0;
    for (int32_t g = 0; g < p->groups; ++g) {
        for (int32_t o = 0; o < opg; ++o, ++oc) {
            const int keep = !mask || mask[oc];
            gb[oc] = keep ? mt_dil_gb(p, e, oc) : 0;
            for (int32_t ky = 0; ky < p->k_h; ++ky) {
                for (int32_t kx = 0; kx < p->k_w; ++kx) {
                    for (int32_t ci = 0; ci < cpg; ++ci, ++gw) {
                        *gw = keep ? mt_dil_gw(d, x, e, oc, g, cpg, ky, kx, ci) : 0;
                    }
                }
            }
        }
    }
}

#if MT_HAS_FLOAT
// gw / gb row r is channel c0 + r; channels outside the window are masked
// (the binding's check), so only rows inside it are touched.
void mt_conv2d_dil_s8_grad_weight_f32(const mt_conv2d_dil_params_t *d, const int8_t *x, const int8_t *e,
                                      const uint8_t *mask, float w_scale, float b_scale, float *gw, float *gb,
                                      int32_t c0) {
    const mt_conv2d_params_t *p = &d->c;
    const int32_t cpg = (int32_t)mt_udiv_u32((uint32_t)p->in_c, (uint32_t)p->groups);
    const int32_t opg = (int32_t)mt_udiv_u32((uint32_t)p->out_c, (uint32_t)p->groups);
    const int32_t k = p->k_h * p->k_w * cpg;
    int32_t oc = 0;
    for (int32_t g = 0; g < p->groups; ++g) {
        for (int32_t o = 0; o < opg; ++o, ++oc) {
            if (mask && !mask[oc]) {
                continue;  // masked rows untouched
            }
            const int32_t r = oc - c0;
            gb[r] = gb[r] + b_scale * (float)mt_dil_gb(p, e, oc);
            float *gp = gw + r * k;
            for (int32_t ky = 0; ky < p->k_h; ++ky) {
                for (int32_t kx = 0; kx < p->k_w; ++kx) {
                    for (int32_t ci = 0; ci < cpg; ++ci, ++gp) {
                        *gp = *gp + w_scale * (float)mt_dil_gw(d, x, e, oc, g, cpg, ky, kx, ci);
                    }
                }
            }
        }
    }
}
#endif
