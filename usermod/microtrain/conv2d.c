// conv2d int8 kernels: forward, grad input, grad weight (docs/numerics.md).
// Pure C99, no libc, no division: the descriptor passed mt_conv2d_check, so
// every index below fits in int32 and every window overlaps the input.
//
// Layouts: x/y/e are HWC, w is OHWI with cpg = in_c / groups input channels.
// Inner loops walk one kernel row (ky) at a time. With groups == 1 the taps of
// a row are contiguous in both x and w, so a row is one run of nkx * in_c
// bytes; otherwise each tap is a run of cpg (depthwise: cpg == 1, a strided
// single-element loop).
#include "mt_kernels.h"

// Valid taps [*k0, *k1) of a window starting at input index `base`. The
// descriptor check guarantees base < in and base + k > 0, so it is non-empty.
static inline void tap_range(int32_t base, int32_t k, int32_t in, int32_t *k0, int32_t *k1) {
    *k0 = base < 0 ? -base : 0;
    *k1 = in - base < k ? in - base : k;
}

// Window geometry shared by the loops of one output position.
typedef struct {
    int32_t nky;    // valid kernel rows
    int32_t nkx;    // taps per row after fusing (1 when groups == 1)
    int32_t run;    // contiguous elements per tap (cpg, or nkx * in_c fused)
    int32_t x_off;  // offset of the first valid tap in x / acc (channel 0)
    int32_t w_off;  // offset of the first valid tap inside one oc's weights
} mt_win_t;

typedef struct {
    int32_t cpg, opg;   // input / output channels per group
    int32_t x_row;      // in_w * in_c: one input row
    int32_t w_row;      // k_w * cpg: one kernel row of one oc
    int32_t w_oc;       // k_h * k_w * cpg: all weights of one oc
} mt_geom_t;

static void geom_init(const mt_conv2d_params_t *p, mt_geom_t *g) {
    // Two divisions per call, no divide instruction needed.
    g->cpg = (int32_t)mt_udiv_u32((uint32_t)p->in_c, (uint32_t)p->groups);
    g->opg = (int32_t)mt_udiv_u32((uint32_t)p->out_c, (uint32_t)p->groups);
    g->x_row = p->in_w * p->in_c;
    g->w_row = p->k_w * g->cpg;
    g->w_oc = p->k_h * g->w_row;
}

static inline void win_init(const mt_conv2d_params_t *p, const mt_geom_t *g, int32_t by, int32_t bx,
                            int32_t ky0, int32_t ky1, int32_t kx0, int32_t kx1, mt_win_t *win) {
    win->nky = ky1 - ky0;
    win->nkx = kx1 - kx0;
    win->run = g->cpg;
    if (p->groups == 1) {  // a kernel row is one contiguous run in x and w
        win->run = win->nkx * p->in_c;
        win->nkx = 1;
    }
    win->x_off = ((by + ky0) * p->in_w + bx + kx0) * p->in_c;
    win->w_off = ky0 * g->w_row + kx0 * g->cpg;
}

// sum over the window of (x - zp) * w. x_tap = in_c (x step between taps).
// Steps are int32 offsets, not pointer bumps, so no out-of-range pointer is
// ever formed after the last tap.
static int32_t win_dot(const int8_t *x, const int8_t *w, const mt_win_t *win, int32_t x_row,
                       int32_t x_tap, int32_t w_row, int32_t zp) {
    int32_t acc = 0;
    int32_t xr = 0, wrow = 0;
    for (int32_t ky = 0; ky < win->nky; ++ky, xr += x_row, wrow += w_row) {
        const int8_t *wt = w + wrow;
        if (win->run == 1) {  // depthwise: one channel per tap
            const int8_t *xt = x + xr;
            int32_t xi = 0;
            for (int32_t kx = 0; kx < win->nkx; ++kx, xi += x_tap) {
                acc += ((int32_t)xt[xi] - zp) * (int32_t)wt[kx];
            }
        } else {
            int32_t xi = xr;
            for (int32_t kx = 0; kx < win->nkx; ++kx, xi += x_tap) {
                const int8_t *xt = x + xi;
                for (int32_t i = 0; i < win->run; ++i) {
                    acc += ((int32_t)xt[i] - zp) * (int32_t)wt[i];
                }
                if (kx + 1 < win->nkx) {
                    wt += win->run;
                }
            }
        }
    }
    return acc;
}

// acc[window] += s * w[window] (grad input scatter).
static void win_scatter_w(int32_t *ap, const int8_t *wp, int32_t s, const mt_win_t *win, int32_t a_row,
                          int32_t a_tap, int32_t w_row) {
    for (int32_t ky = 0; ky < win->nky; ++ky) {
        int32_t *at = ap;
        const int8_t *wt = wp;
        if (win->run == 1) {
            for (int32_t kx = 0; kx < win->nkx; ++kx) {
                *at += s * (int32_t)wt[kx];
                at += a_tap;
            }
        } else {
            for (int32_t kx = 0; kx < win->nkx; ++kx) {
                for (int32_t i = 0; i < win->run; ++i) {
                    at[i] += s * (int32_t)wt[i];
                }
                at += a_tap;
                wt += win->run;
            }
        }
        ap += a_row;
        wp += w_row;
    }
}

// gw[window] += ev * (x[window] - zp) (grad weight scatter).
static void win_scatter_x(int32_t *gp, const int8_t *xp, int32_t ev, int32_t zp, const mt_win_t *win,
                          int32_t x_row, int32_t x_tap, int32_t g_row) {
    for (int32_t ky = 0; ky < win->nky; ++ky) {
        int32_t *gt = gp;
        const int8_t *xt = xp;
        if (win->run == 1) {
            for (int32_t kx = 0; kx < win->nkx; ++kx) {
                gt[kx] += ev * ((int32_t)*xt - zp);
                xt += x_tap;
            }
        } else {
            for (int32_t kx = 0; kx < win->nkx; ++kx) {
                for (int32_t i = 0; i < win->run; ++i) {
                    gt[i] += ev * ((int32_t)xt[i] - zp);
                }
                xt += x_tap;
                gt += win->run;
            }
        }
        xp += x_row;
        gp += g_row;
    }
}

void conv2d_s8_forward(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *w,
                       const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y) {
    mt_geom_t g;
    geom_init(p, &g);
    // Clamp before adding out_zp: requant can return values near +-2^31.
    const int32_t lo = p->act_min - p->out_zp, hi = p->act_max - p->out_zp;
    const int32_t zp = p->in_zp;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t by = oy * p->stride_h - p->pad_top;
        int32_t ky0, ky1;
        tap_range(by, p->k_h, p->in_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t bx = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1;
            tap_range(bx, p->k_w, p->in_w, &kx0, &kx1);
            mt_win_t win;
            win_init(p, &g, by, bx, ky0, ky1, kx0, kx1, &win);
            const int8_t *xg = x + win.x_off;
            const int8_t *wo = w + win.w_off;
            int32_t oc = 0;
            for (int32_t gi = 0; gi < p->groups; ++gi) {
                for (int32_t j = 0; j < g.opg; ++j, ++oc) {
                    // |bias| <= 2^30 and the dot product < 2^30: exact.
                    const int32_t acc = bias[oc] + win_dot(xg, wo, &win, g.x_row, p->in_c, g.w_row, zp);
                    const int32_t r = mt_requant(acc, mult[oc], shift[oc]);
                    *y++ = (int8_t)(mt_clamp(r, lo, hi) + p->out_zp);
                    wo += g.w_oc;
                }
                xg += g.cpg;
            }
        }
    }
}

// Position-major with the mask and zero-error test before each window, so a
// dropped channel or zero error costs one byte test; ranges and window offsets
// are computed once per position.
int32_t conv2d_s8_grad_input(const mt_conv2d_params_t *p, const int8_t *e, const int8_t *w,
                             const int32_t *wr, const uint8_t *mask, int32_t *acc, int8_t *ein) {
    mt_geom_t g;
    geom_init(p, &g);
    const int32_t n = p->in_h * g.x_row;
    for (int32_t i = 0; i < n; ++i) {
        acc[i] = 0;
    }
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t by = oy * p->stride_h - p->pad_top;
        int32_t ky0, ky1;
        tap_range(by, p->k_h, p->in_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t bx = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1;
            tap_range(bx, p->k_w, p->in_w, &kx0, &kx1);
            mt_win_t win;
            win_init(p, &g, by, bx, ky0, ky1, kx0, kx1, &win);
            int32_t *ag = acc + win.x_off;
            const int8_t *wo = w + win.w_off;
            int32_t oc = 0;
            for (int32_t gi = 0; gi < p->groups; ++gi) {
                for (int32_t j = 0; j < g.opg; ++j, ++oc, wo += g.w_oc) {
                    const int32_t ev = e[oc];
                    if (ev == 0 || (mask && !mask[oc])) {
                        continue;
                    }
                    // |ev * wr * w| <= 16384 * max(wr); mt_wr_check bounds the sum.
                    win_scatter_w(ag, wo, ev * wr[oc], &win, g.x_row, p->in_c, g.w_row);
                }
                ag += g.cpg;
            }
            e += p->out_c;
        }
    }
    return dyn_requant_s8(acc, (size_t)n, ein);
}

// Zero all rows first (masked rows stay 0), then scatter position-major,
// skipping masked channels and zero errors before touching the window.
void conv2d_s8_grad_weight(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *e,
                           const uint8_t *mask, int32_t *gw, int32_t *gb) {
    mt_geom_t g;
    geom_init(p, &g);
    const int32_t nw = p->out_c * g.w_oc;
    for (int32_t i = 0; i < nw; ++i) {
        gw[i] = 0;
    }
    for (int32_t oc = 0; oc < p->out_c; ++oc) {
        gb[oc] = 0;
    }
    const int32_t zp = p->in_zp;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t by = oy * p->stride_h - p->pad_top;
        int32_t ky0, ky1;
        tap_range(by, p->k_h, p->in_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t bx = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1;
            tap_range(bx, p->k_w, p->in_w, &kx0, &kx1);
            mt_win_t win;
            win_init(p, &g, by, bx, ky0, ky1, kx0, kx1, &win);
            const int8_t *xg = x + win.x_off;
            int32_t *go = gw + win.w_off;
            int32_t oc = 0;
            for (int32_t gi = 0; gi < p->groups; ++gi) {
                for (int32_t j = 0; j < g.opg; ++j, ++oc, go += g.w_oc) {
                    if (mask && !mask[oc]) {
                        continue;
                    }
                    const int32_t ev = e[oc];
                    if (ev == 0) {
                        continue;
                    }
                    gb[oc] += ev;
                    // out_h * out_w <= 65536 terms of |ev * (x - zp)| <= 32640: exact.
                    win_scatter_x(go, xg, ev, zp, &win, g.x_row, p->in_c, g.w_row);
                }
                xg += g.cpg;
            }
            e += p->out_c;
        }
    }
}

#if MT_HAS_FLOAT
// Outputs o in [*o0, *o1) whose tap k lands inside the input:
// 0 <= o * stride - pad + k < in (possibly empty).
static void out_range(int32_t k, int32_t stride, int32_t pad, int32_t in, int32_t out, int32_t *o0,
                      int32_t *o1) {
    int32_t lo = 0, hi;
    if (k < pad) {  // ceil((pad - k) / stride)
        lo = stride == 1 ? pad - k : (int32_t)mt_udiv_u32((uint32_t)(pad - k + stride - 1), (uint32_t)stride);
    }
    const int32_t last = in - 1 + pad - k;  // largest o * stride allowed
    if (last < 0) {
        hi = 0;
    } else {
        hi = 1 + (stride == 1 ? last : (int32_t)mt_udiv_u32((uint32_t)last, (uint32_t)stride));
    }
    if (hi > out) {
        hi = out;
    }
    if (lo > hi) {
        lo = hi;
    }
    *o0 = lo;
    *o1 = hi;
}

// Gather order: each weight's int32 sum is complete before the single float
// add, as the contract requires (no int32 scratch). Taps outermost so the
// valid output ranges are computed once per tap, not per channel.
void conv2d_s8_grad_weight_f32(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *e,
                               const uint8_t *mask, float w_scale, float b_scale, float *gw, float *gb) {
    mt_geom_t g;
    geom_init(p, &g);
    const int32_t zp = p->in_zp, out_c = p->out_c, in_c = p->in_c;
    // x step between neighbouring outputs of a row; only formed when used
    // (stride * in_c is bounded only if out_w > 1).
    const int32_t x_ox = p->out_w > 1 ? p->stride_w * in_c : 0;
    for (int32_t ky = 0; ky < p->k_h; ++ky) {
        int32_t oy0, oy1;
        out_range(ky, p->stride_h, p->pad_top, p->in_h, p->out_h, &oy0, &oy1);
        for (int32_t kx = 0; kx < p->k_w; ++kx) {
            int32_t ox0, ox1;
            out_range(kx, p->stride_w, p->pad_left, p->in_w, p->out_w, &ox0, &ox1);
            const int32_t nox = ox1 - ox0;
            const int32_t ix0 = ox0 * p->stride_w - p->pad_left + kx;
            int32_t oc = 0;
            for (int32_t gi = 0; gi < p->groups; ++gi) {
                const int32_t c0 = gi * g.cpg;
                for (int32_t j = 0; j < g.opg; ++j, ++oc) {
                    if (mask && !mask[oc]) {
                        continue;
                    }
                    float *gwp = gw + oc * g.w_oc + ky * g.w_row + kx * g.cpg;
                    for (int32_t ci = 0; ci < g.cpg; ++ci) {
                        int32_t s = 0;
                        for (int32_t oy = oy0; oy < oy1; ++oy) {
                            const int32_t iy = oy * p->stride_h - p->pad_top + ky;
                            const int8_t *ep = e + (oy * p->out_w + ox0) * out_c + oc;
                            const int8_t *xp = x + (iy * p->in_w + ix0) * in_c + c0 + ci;
                            for (int32_t i = 0; i < nox; ++i) {
                                s += (int32_t)*ep * ((int32_t)*xp - zp);
                                ep += out_c;
                                xp += x_ox;
                            }
                        }
                        // Separate rounded product: no FMA contraction (-std=c99
                        // implies -ffp-contract=off) and no x87 excess precision.
                        const float d = w_scale * (float)s;
                        gwp[ci] = gwp[ci] + d;
                    }
                }
            }
        }
    }
    const int32_t npos = p->out_h * p->out_w;
    for (int32_t oc = 0; oc < out_c; ++oc) {
        if (mask && !mask[oc]) {
            continue;
        }
        int32_t s = 0;
        const int8_t *ep = e + oc;
        for (int32_t i = 0; i < npos; ++i) {
            s += *ep;
            ep += out_c;
        }
        const float d = b_scale * (float)s;
        gb[oc] = gb[oc] + d;
    }
}
#endif
