// conv2d int8 kernels: forward, grad input, grad weight (docs/numerics.md).
// Pure C99, no libc, no division instruction: the descriptor passed
// mt_conv2d_check, so every index below fits in int32 and every window
// overlaps the input.
//
// Layouts: x/y/e/acc are HWC, w is OHWI with cpg = in_c / groups input
// channels. Windows are walked one kernel row (ky) at a time over the valid
// taps only (ranges computed per output position, no per-tap bounds test).
// With groups == 1 the valid taps of a row are contiguous in both x and w, so
// a row is a single run of nkx * in_c elements; otherwise each tap is a run of
// cpg elements (depthwise: cpg == 1, a strided single-element loop).
// Positions in buffers are int32 offsets rather than bumped pointers, so no
// out-of-range pointer is ever formed after the last tap.
//
// Forward, three loop structures (integer sums are exact, so each may sum in
// its own order; the bounds are in the comments):
// - groups == 1 (conv_fwd_dense): output channels outermost, two at a time
//   (register blocking, mt_runs.h): windows wholly inside x go two
//   neighbours per pass (2 pixels x 2 channels, SMLAD on armv7e-m) with the
//   zero point folded out, sum (x - zp) * w = sum x * w - zp * sum w; border
//   windows run over their valid taps with x - zp per term.
// - depthwise, cpg == opg == 1 (conv_fwd_dw): channel outermost with its
//   weights in registers; 3x3 windows in runs along rows and down border
//   columns, kernel rows / columns outside x masked by zero weights.
// - other groups (conv_fwd_groups): position by position, as the backward.
#include "mt_kernels.h"

// Valid taps [*k0, *k1) of a window starting at input index `base`. The
// descriptor check guarantees base < in and base + k > 0: non-empty.
static inline void tap_range(int32_t base, int32_t k, int32_t in, int32_t *k0, int32_t *k1) {
    *k0 = base < 0 ? -base : 0;
    *k1 = in - base < k ? in - base : k;
}

typedef struct {
    int32_t cpg, opg;  // input / output channels per group
    int32_t x_row;     // in_w * in_c: one input row
    int32_t w_row;     // k_w * cpg: one kernel row of one oc
    int32_t w_oc;      // k_h * k_w * cpg: all weights of one oc
} mt_geom_t;

// Valid part of the window of one output position.
typedef struct {
    int32_t nky;    // valid kernel rows
    int32_t nkx;    // taps per row (1 after fusing when groups == 1)
    int32_t run;    // contiguous elements per tap (cpg, or nkx * in_c fused)
    int32_t x_off;  // x / acc offset of the first valid tap, channel 0
    int32_t w_off;  // offset of the first valid tap inside one oc's weights
} mt_win_t;

static void geom_init(const mt_conv2d_params_t *p, mt_geom_t *g) {
    // Two software divisions per call; exact since groups divides both.
    g->cpg = (int32_t)mt_udiv_u32((uint32_t)p->in_c, (uint32_t)p->groups);
    g->opg = (int32_t)mt_udiv_u32((uint32_t)p->out_c, (uint32_t)p->groups);
    g->x_row = p->in_w * p->in_c;
    g->w_row = p->k_w * g->cpg;
    g->w_oc = p->k_h * g->w_row;
}

static void win_init(const mt_conv2d_params_t *p, const mt_geom_t *g, int32_t oy, int32_t ox, mt_win_t *win) {
    // (out - 1) * stride - pad < in <= 65535: no overflow.
    const int32_t by = oy * p->stride_h - p->pad_top;
    const int32_t bx = ox * p->stride_w - p->pad_left;
    int32_t ky0, ky1, kx0, kx1;
    tap_range(by, p->k_h, p->in_h, &ky0, &ky1);
    tap_range(bx, p->k_w, p->in_w, &kx0, &kx1);
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

#include "mt_runs.h"

// Depthwise: sum (x[i * xs] - zp) * w[i], i < n (index, not a pointer
// bump, so nothing points past the buffer after the last tap).
static MT_NOINLINE int32_t dot_strided(const int8_t *x, int32_t xs, const int8_t *w, int32_t n, int32_t zp) {
    int32_t acc = 0, xi = 0;
    for (const int8_t *end = w + n; w != end; ++w, xi += xs) {
        acc += ((int32_t)x[xi] - zp) * (int32_t)*w;
    }
    return acc;
}

#if MT_SOFT_MATH  // the Cortex-M0 input gradient (scatter)
// a[i * as] += s * w[i], i < n.
static MT_NOINLINE void axpy_w_strided(int32_t *a, int32_t as, const int8_t *w, int32_t n, int32_t s) {
    int32_t ai = 0;
    for (const int8_t *end = w + n; w != end; ++w, ai += as) {
        a[ai] += s * (int32_t)*w;
    }
}
#endif

#if MT_SOFT_MATH  // the Cortex-M0 weight gradient (scatter)
// g[i] += ev * (x[i] - zp), i < n.
static MT_NOINLINE void axpy_x_run(int32_t *g, const int8_t *x, int32_t n, int32_t ev, int32_t zp) {
    for (const int8_t *end = x + n; x != end; ++x, ++g) {
        *g += ev * ((int32_t)*x - zp);
    }
}

// g[i] += ev * (x[i * xs] - zp), i < n.
static MT_NOINLINE void axpy_x_strided(int32_t *g, const int8_t *x, int32_t xs, int32_t n, int32_t ev, int32_t zp) {
    int32_t xi = 0;
    for (const int32_t *end = g + n; g != end; ++g, xi += xs) {
        *g += ev * ((int32_t)x[xi] - zp);
    }
}

#endif

// A window row is either one run (groups == 1: run elements contiguous, or
// depthwise: nkx taps in_c apart) or nkx runs of cpg. The row loops below pick
// the one-call form whenever possible.

// sum over the window of (x - zp) * w; x at offset xo, w at offset wo.
static int32_t win_dot(const int8_t *x, int32_t xo, const int8_t *w, int32_t wo, const mt_win_t *win,
                       int32_t x_row, int32_t x_tap, int32_t w_row, int32_t zp) {
    int32_t acc = 0;
    const int32_t run = win->run, nkx = win->nkx;
    for (int32_t ky = 0; ky < win->nky; ++ky, xo += x_row, wo += w_row) {
        if (run == 1) {  // depthwise
            acc += dot_strided(x + xo, x_tap, w + wo, nkx, zp);
        } else {
            for (int32_t kx = 0, xi = xo, wi = wo; kx < nkx; ++kx, xi += x_tap, wi += run) {
                acc += dot_run(x + xi, w + wi, run, zp);
            }
        }
    }
    return acc;
}

#if MT_SOFT_MATH
// acc[window] += s * w[window] (grad-input scatter).
static void win_scatter_w(int32_t *a, int32_t ao, const int8_t *w, int32_t wo, int32_t s, const mt_win_t *win,
                          int32_t a_row, int32_t a_tap, int32_t w_row) {
    const int32_t run = win->run, nkx = win->nkx;
    for (int32_t ky = 0; ky < win->nky; ++ky, ao += a_row, wo += w_row) {
        if (run == 1) {
            axpy_w_strided(a + ao, a_tap, w + wo, nkx, s);
        } else {
            for (int32_t kx = 0, ai = ao, wi = wo; kx < nkx; ++kx, ai += a_tap, wi += run) {
                axpy_w_run(a + ai, w + wi, run, s);
            }
        }
    }
}
#endif

#if MT_SOFT_MATH
// gw[window] += ev * (x[window] - zp) (grad-weight scatter).
static void win_scatter_x(int32_t *gw, int32_t go, const int8_t *x, int32_t xo, int32_t ev, int32_t zp,
                          const mt_win_t *win, int32_t x_row, int32_t x_tap, int32_t w_row) {
    const int32_t run = win->run, nkx = win->nkx;
    for (int32_t ky = 0; ky < win->nky; ++ky, xo += x_row, go += w_row) {
        if (run == 1) {
            axpy_x_strided(gw + go, x + xo, x_tap, nkx, ev, zp);
        } else {
            for (int32_t kx = 0, xi = xo, gi = go; kx < nkx; ++kx, xi += x_tap, gi += run) {
                axpy_x_run(gw + gi, x + xi, run, ev, zp);
            }
        }
    }
}
#endif

// Output columns [*o0, *o1) whose windows lie wholly inside the input
// along one axis: o * stride - pad >= 0 and o * stride - pad + k <= in.
static void interior(int32_t k, int32_t stride, int32_t pad, int32_t in, int32_t out, int32_t *o0, int32_t *o1) {
    int32_t o = 0;
    while (o < out && o * stride < pad) {
        ++o;
    }
    *o0 = o;
    while (o < out && o * stride - pad + k <= in) {
        ++o;
    }
    *o1 = o;
}

// Full windows, zero point folded out: s[0] = xa . wa, s[1] = xa . wb,
// s[2] = xb . wa, s[3] = xb . wb over nky rows of run bytes (x rows xr
// apart, pixel B dx after pixel A; the weights of a full window are one
// contiguous run per channel, channel B dw after channel A).
static MT_INLINE void dot_2x2_full(const int8_t *xa, int32_t dx, int32_t xr, int32_t nky, const int8_t *wa,
                                   int32_t dw, int32_t run, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#if MT_SSE2
    __m128i q0 = _mm_setzero_si128(), q1 = q0, q2 = q0, q3 = q0;
#endif
    for (int32_t ky = 0, xo = 0; ky < nky; ++ky, xo += xr) {
        const int8_t *xp = xa + xo;
        const int8_t *end = wa + run;
#if MT_SSE2
        // 16 bytes a step, widened to int16, PMADDWD into int32 lanes:
        // integer sums, so the order is free
        for (const int8_t *end16 = wa + (run & ~15); wa != end16; xp += 16, wa += 16) {
            const __m128i z = _mm_setzero_si128();
            __m128i vl, vh, ul, uh, al, ah, bl, bh;
            mt_sse_widen(mt_sse_load(wa), z, &vl, &vh);
            mt_sse_widen(mt_sse_load(wa + dw), z, &ul, &uh);
            mt_sse_widen(mt_sse_load(xp), z, &al, &ah);
            mt_sse_widen(mt_sse_load(xp + dx), z, &bl, &bh);
            q0 = mt_sse_dot(q0, al, ah, vl, vh);
            q1 = mt_sse_dot(q1, al, ah, ul, uh);
            q2 = mt_sse_dot(q2, bl, bh, vl, vh);
            q3 = mt_sse_dot(q3, bl, bh, ul, uh);
        }
#endif
#if MT_DSP
        for (const int8_t *end4 = wa + (run & ~3); wa != end4; xp += 4, wa += 4) {
            const uint32_t u = mt_load_u32(wa + dw), v = mt_load_u32(wa);
            const uint32_t ve = mt_sxtb16(v), vo = mt_sxtb16_ror8(v), ue = mt_sxtb16(u), uo = mt_sxtb16_ror8(u);
            uint32_t t = mt_load_u32(xp + dx);
            uint32_t h = mt_sxtb16(t);
            s2 = mt_smlad(h, ve, s2);
            s3 = mt_smlad(h, ue, s3);
            h = mt_sxtb16_ror8(t);
            s2 = mt_smlad(h, vo, s2);
            s3 = mt_smlad(h, uo, s3);
            t = mt_load_u32(xp);
            h = mt_sxtb16(t);
            s0 = mt_smlad(h, ve, s0);
            s1 = mt_smlad(h, ue, s1);
            h = mt_sxtb16_ror8(t);
            s0 = mt_smlad(h, vo, s0);
            s1 = mt_smlad(h, uo, s1);
        }
#endif
        for (; wa != end; ++xp, ++wa) {
            const int32_t a = xp[0], b = xp[dx], u = wa[0], v = wa[dw];
            s0 += a * u;
            s1 += a * v;
            s2 += b * u;
            s3 += b * v;
        }
    }
#if MT_SSE2
    s0 += mt_sse_hsum(q0);
    s1 += mt_sse_hsum(q1);
    s2 += mt_sse_hsum(q2);
    s3 += mt_sse_hsum(q3);
#endif
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
}

#if MT_RV
// dot_2x2_full for four pixels (A, A + dx, A + 2 dx, A + 3 dx) and two
// channels: s[2 i] = pixel i . wa, s[2 i + 1] = pixel i . wb. Six byte loads
// per eight MACs; four taps per step at immediate offsets, so the six
// pointers move once per four taps.
#define MT_RV_TAP(j)                                                                  \
    do {                                                                              \
        const int32_t u = wa[j], v = wb[j];                                           \
        int32_t t = x0[j];                                                            \
        s0 += t * u;                                                                  \
        s1 += t * v;                                                                  \
        t = x1[j];                                                                    \
        s2 += t * u;                                                                  \
        s3 += t * v;                                                                  \
        t = x2[j];                                                                    \
        s4 += t * u;                                                                  \
        s5 += t * v;                                                                  \
        t = x3[j];                                                                    \
        s6 += t * u;                                                                  \
        s7 += t * v;                                                                  \
    } while (0)

static MT_INLINE void dot_4x2_full(const int8_t *xa, int32_t dx, int32_t xr, int32_t nky, const int8_t *wa,
                                   int32_t dw, int32_t run, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    for (int32_t ky = 0, xo = 0; ky < nky; ++ky, xo += xr) {
        const int8_t *x0 = xa + xo, *x1 = x0 + dx, *x2 = x1 + dx, *x3 = x2 + dx, *wb = wa + dw;
        const int8_t *end = wa + run;
        for (const int8_t *end4 = wa + (run & ~3); wa != end4; wa += 4, wb += 4, x0 += 4, x1 += 4, x2 += 4,
             x3 += 4) {
            MT_RV_TAP(0);
            MT_RV_TAP(1);
            MT_RV_TAP(2);
            MT_RV_TAP(3);
        }
        for (; wa != end; ++wa, ++wb, ++x0, ++x1, ++x2, ++x3) {
            MT_RV_TAP(0);
        }
    }
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
    s[4] = s4;
    s[5] = s5;
    s[6] = s6;
    s[7] = s7;
}
#undef MT_RV_TAP
#endif

// sum w[i], i < n.
static int32_t sum_s8(const int8_t *w, int32_t n) {
    int32_t s = 0, i = 0;
#if MT_DSP
    const uint32_t ones = 0x00010001u;
    for (; i + 4 <= n; i += 4) {
        const uint32_t v = mt_load_u32(w + i);
        s = mt_smlad(mt_sxtb16(v), ones, s);
        s = mt_smlad(mt_sxtb16_ror8(v), ones, s);
    }
#endif
    for (; i < n; ++i) {
        s += w[i];
    }
    return s;
}

// A run of interior outputs for two output channels (A, B = A + dob): n
// windows from x (neighbours dx apart) to y (out_c apart), two per
// dot_2x2_full pass. dense_run is out of line, so the pass is inlined into
// a loop of its own rather than into the whole loop nest.
typedef struct {
    int32_t dx, xr, nky, run, dw, out_c, dob, fa, fb;
    mt_rq_t qa, qb;
} mt_dense_t;

static MT_INLINE void dense_run_k(const mt_dense_t *d, const int8_t *x, const int8_t *wa, int32_t n, int8_t *y,
                                  int32_t nky) {
    int32_t s[4], xo = 0, yo = 0;
#if MT_RV
    for (; n >= 4; n -= 4, xo += 4 * d->dx, yo += 4 * d->out_c) {
        int32_t s8[8];
        int8_t *yp = y + yo;
        dot_4x2_full(x + xo, d->dx, d->xr, nky, wa, d->dw, d->run, s8);
        for (int32_t i = 0; i < 4; ++i, yp += d->out_c) {
            const int8_t a0 = mt_rq_out(d->fa + s8[2 * i], &d->qa), b0 = mt_rq_out(d->fb + s8[2 * i + 1], &d->qb);
            yp[0] = a0;
            yp[d->dob] = b0;
        }
    }
#endif
    for (; n >= 2; n -= 2, xo += 2 * d->dx, yo += 2 * d->out_c) {
        int8_t *yp = y + yo;
        dot_2x2_full(x + xo, d->dx, d->xr, nky, wa, d->dw, d->run, s);
        // Both outputs of a channel before the stores: an int8_t store may
        // alias *d, whose fields would be loaded again after each one.
        int8_t a0 = mt_rq_out(d->fa + s[0], &d->qa), a1 = mt_rq_out(d->fa + s[2], &d->qa);
        yp[0] = a0;
        yp[d->out_c] = a1;
        a0 = mt_rq_out(d->fb + s[1], &d->qb);
        a1 = mt_rq_out(d->fb + s[3], &d->qb);
        yp[d->dob] = a0;
        yp[d->out_c + d->dob] = a1;
    }
    if (n) {  // an odd one: pixel B = pixel A
        dot_2x2_full(x + xo, 0, d->xr, nky, wa, d->dw, d->run, s);
        const int8_t a0 = mt_rq_out(d->fa + s[0], &d->qa), b0 = mt_rq_out(d->fb + s[1], &d->qb);
        y[yo] = a0;
        y[yo + d->dob] = b0;
    }
}

// 1-row kernels (1x1) get a copy without the row loop.
static MT_NOINLINE void dense_run(const mt_dense_t *d, const int8_t *xp, const int8_t *wa, int32_t n, int8_t *yp) {
    if (d->nky == 1) {
        dense_run_k(d, xp, wa, n, yp, 1);
    } else {
        dense_run_k(d, xp, wa, n, yp, d->nky);
    }
}

// groups == 1: every window row is one run of nkx * in_c bytes in x and w.
// Output channels outermost, two at a time (an odd last channel is computed
// twice: same bits, written twice), so their requant constants and the
// zero-point term stay put over all positions. Each row of outputs:
// - the interior run (windows wholly inside x, >= 2 of them overall): two
//   neighbouring outputs per dot_2x2_full pass, the zero point folded out as
//   sum (x - zp) * w = sum x * w - zp * sum w, sum w once per channel;
// - the border windows: their valid taps, x - zp per term (dot_2x2 when two
//   neighbours have the same valid taps, else dot_1x2).
static void conv_fwd_dense(const mt_conv2d_params_t *p, const mt_geom_t *g, const int8_t *x, const int8_t *w,
                           const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y) {
    const int32_t out_c = p->out_c, out_w = p->out_w, zp = p->in_zp, out_zp = p->out_zp;
    const int32_t lo = p->act_min - out_zp, hi = p->act_max - out_zp;
    // x offset between neighbouring outputs: with out_w > 1, stride_w <
    // in_w + k_w and k_w * in_c <= 32768 (groups == 1), so it fits in int32;
    // with out_w == 1 it is never used (and may not fit).
    const int32_t dx = out_w > 1 ? p->stride_w * p->in_c : 0;
    const int32_t yrow = out_w * out_c;
    int32_t ix0, ix1, iy0, iy1;
    interior(p->k_w, p->stride_w, p->pad_left, p->in_w, out_w, &ix0, &ix1);
    interior(p->k_h, p->stride_h, p->pad_top, p->in_h, p->out_h, &iy0, &iy1);
    if ((ix1 - ix0) * (iy1 - iy0) < 2) {  // the sums of w would cost more than they save
        ix1 = ix0;
    }
    // Interior rows that are whole output rows and follow each other in x
    // as their outputs do (1x1 kernels, stride 1) form one run.
    const int32_t merge = p->stride_h == 1 && ix0 == 0 && ix1 == out_w && out_w * dx == g->x_row;
    mt_dense_t d;
    d.dx = dx;
    d.xr = g->x_row;
    d.nky = p->k_h;
    d.run = p->k_w * p->in_c;
    d.out_c = out_c;
    for (int32_t oc = 0; oc < out_c; oc += 2) {
        const int32_t ob = oc + 1 < out_c ? oc + 1 : oc;
        const int32_t dw = (ob - oc) * g->w_oc;
        const int8_t *wc = w + oc * g->w_oc;
        mt_rq_t qa, qb;
        mt_rq_init(&qa, mult[oc], shift[oc], lo, hi, out_zp);
        mt_rq_init(&qb, mult[ob], shift[ob], lo, hi, out_zp);
        if (ix1 > ix0) {
            // |bias| <= 2^30 and each term of a partial sum (x * w, -zp * w
            // of a tap not yet added, or (x - zp) * w) is <= 32640 in
            // magnitude, at most 32768 terms: intermediates stay below 2^31.
            d.fa = bias[oc] - zp * sum_s8(wc, g->w_oc);
            d.fb = bias[ob] - zp * sum_s8(wc + dw, g->w_oc);
            d.dw = dw;
            d.dob = ob - oc;
            d.qa = qa;
            d.qb = qb;
        }
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            int8_t *yr = y + oy * yrow;
            const int32_t inner = oy >= iy0 && oy < iy1 && ix1 > ix0;
            if (inner && merge) {  // all interior rows as one run
                const int8_t *xp = x + (oy * p->stride_h - p->pad_top) * g->x_row;
                dense_run(&d, xp, wc, (iy1 - iy0) * out_w, yr + oc);
                oy = iy1 - 1;
                continue;
            }
            int32_t ox = 0;
            while (ox < out_w) {
                int32_t s[4];
                if (inner && ox == ix0) {
                    const int8_t *xp = x + ((oy * p->stride_h - p->pad_top) * p->in_w) * p->in_c
                                       + (ix0 * p->stride_w - p->pad_left) * p->in_c;
                    dense_run(&d, xp, wc, ix1 - ix0, yr + ix0 * out_c + oc);
                    ox = ix1;
                    continue;
                }
                mt_win_t wa;
                win_init(p, g, oy, ox, &wa);
                int32_t two = 0;
                if (ox + 1 < out_w && !(inner && ox + 1 == ix0)) {
                    mt_win_t wb;
                    win_init(p, g, oy, ox + 1, &wb);
                    two = wb.run == wa.run && wb.w_off == wa.w_off;
                }
                s[0] = s[1] = s[2] = s[3] = 0;
                int32_t xo = wa.x_off, wo = wa.w_off;
                for (int32_t ky = 0; ky < wa.nky; ++ky, xo += g->x_row, wo += g->w_row) {
                    const int8_t *wp = wc + wo;
                    if (two) {
                        dot_2x2(x + xo, x + xo + dx, wp, wp + dw, wa.run, zp, s);
                    } else {
                        dot_1x2(x + xo, wp, wp + dw, wa.run, zp, s);
                    }
                }
                int8_t *yp = yr + ox * out_c;
                // |bias| <= 2^30 and |dot| <= 32768 * 255 * 128 < 2^30: exact.
                yp[oc] = mt_rq_out_call(bias[oc] + s[0], &qa);
                yp[ob] = mt_rq_out_call(bias[ob] + s[1], &qb);
                if (two) {
                    yp[out_c + oc] = mt_rq_out_call(bias[oc] + s[2], &qa);
                    yp[out_c + ob] = mt_rq_out_call(bias[ob] + s[3], &qb);
                }
                ox += 1 + two;
            }
        }
    }
}

// acc + x * (low / high half of a packed weight pair), x a sign-extended
// byte: SMLABB / SMLABT on armv7e-m; plain C elsewhere (same value).
#if MT_DSP
#define MAC_LO(acc, x, wp) mt_smlabb((uint32_t)(x), (uint32_t)(wp), (acc))
#define MAC_HI(acc, x, wp) mt_smlabt((uint32_t)(x), (uint32_t)(wp), (acc))
#else
#define MAC_LO(acc, x, wp) ((acc) + (x) * mt_lo16((uint32_t)(wp)))
#define MAC_HI(acc, x, wp) ((acc) + (x) * mt_hi16((uint32_t)(wp)))
#endif

// n depthwise 3x3 outputs of one channel, windows sx apart in x and outputs
// ys apart from yp (a run along a row or down a column). xp is the first
// window's first tap inside x (channel c); kernel rows 1, 2 at offsets o1,
// o2 and kernel columns 1, 2 at offsets a1, a2 from it. acc = bf + sum x * w
// with the nine weights as 16-bit pairs wp[0..4] (five registers, not
// nine). A kernel row or column lying outside x has zero weights and offset
// 0 (or that of a tap inside), so border windows take this path too; bf =
// bias - zp * (sum of the weights used).
typedef struct {
    int32_t o1, o2, a1, a2, sx, ys, bf;
    int32_t wp[5];
} mt_dw3_t;

static MT_NOINLINE void dw3x3_run(const mt_dw3_t *d, const int8_t *x, int32_t n, const mt_rq_t *q, int8_t *y) {
    const int32_t w01 = d->wp[0], w23 = d->wp[1], w45 = d->wp[2], w67 = d->wp[3], w8 = d->wp[4];
    const int32_t o1 = d->o1, o2 = d->o2, a1 = d->a1, a2 = d->a2, sx = d->sx, ys = d->ys, bf = d->bf;
    const mt_rq_t qc = *q;
    // int32 offsets, not bumped pointers: nothing points past x or y after
    // the last output.
    for (int32_t xi = 0, yi = 0; n > 0; --n, xi += sx, yi += ys) {
        const int8_t *xp = x + xi, *r = xp;
        int32_t acc = MAC_LO(bf, r[0], w01);
        acc = MAC_HI(acc, r[a1], w01);
        acc = MAC_LO(acc, r[a2], w23);
        r = xp + o1;
        acc = MAC_HI(acc, r[0], w23);
        acc = MAC_LO(acc, r[a1], w45);
        acc = MAC_HI(acc, r[a2], w45);
        r = xp + o2;
        acc = MAC_LO(acc, r[0], w67);
        acc = MAC_HI(acc, r[a1], w67);
        acc = MAC_LO(acc, r[a2], w8);
        y[yi] = mt_rq_out(acc, &qc);
    }
}

// dw3x3_run for a run along a row with stride 1 and all kernel columns
// inside x (a1 = C, a2 = 2C, sx = ys = C): two outputs per iteration share
// the loads of their two common columns and the requant constants.
static MT_NOINLINE void dw3x3_run_s1(const mt_dw3_t *d, const int8_t *x, int32_t n, const mt_rq_t *q, int8_t *y) {
    const int32_t w01 = d->wp[0], w23 = d->wp[1], w45 = d->wp[2], w67 = d->wp[3], w8 = d->wp[4];
    const int32_t o1 = d->o1, o2 = d->o2, C = d->ys, bf = d->bf;
    const mt_rq_t qc = *q;
    int32_t i = 0;  // offset of the pair in x and y (both step C)
    for (; n >= 2; n -= 2, i += 2 * C) {
        const int8_t *xp = x + i, *r = xp;
        int32_t x0 = r[0], x1 = r[C], x2 = r[2 * C], x3 = r[3 * C];
        int32_t a = MAC_LO(bf, x0, w01), b = MAC_LO(bf, x1, w01);
        a = MAC_HI(a, x1, w01);
        b = MAC_HI(b, x2, w01);
        a = MAC_LO(a, x2, w23);
        b = MAC_LO(b, x3, w23);
        r = xp + o1;
        x0 = r[0];
        x1 = r[C];
        x2 = r[2 * C];
        x3 = r[3 * C];
        a = MAC_HI(a, x0, w23);
        b = MAC_HI(b, x1, w23);
        a = MAC_LO(a, x1, w45);
        b = MAC_LO(b, x2, w45);
        a = MAC_HI(a, x2, w45);
        b = MAC_HI(b, x3, w45);
        r = xp + o2;
        x0 = r[0];
        x1 = r[C];
        x2 = r[2 * C];
        x3 = r[3 * C];
        a = MAC_LO(a, x0, w67);
        b = MAC_LO(b, x1, w67);
        a = MAC_HI(a, x1, w67);
        b = MAC_HI(b, x2, w67);
        a = MAC_LO(a, x2, w8);
        b = MAC_LO(b, x3, w8);
        const int8_t ya = mt_rq_out(a, &qc), yb = mt_rq_out(b, &qc);
        y[i] = ya;
        y[i + C] = yb;
    }
    if (n) {
        dw3x3_run(d, x + i, 1, q, y + i);
    }
}

// Weights and offsets of dw3x3_run for windows whose valid taps are kernel
// rows [ky0, ky1) and columns [kx0, kx1) (rows xr, columns C apart in x).
static void dw3_setup(mt_dw3_t *d, const int8_t *wc, int32_t ky0, int32_t ky1, int32_t kx0, int32_t kx1, int32_t xr,
                      int32_t C, int32_t bias, int32_t zp) {
    int32_t wv[9], sw = 0;
    for (int32_t ky = 0; ky < 3; ++ky) {
        for (int32_t kx = 0; kx < 3; ++kx) {
            const int32_t v = ky >= ky0 && ky < ky1 && kx >= kx0 && kx < kx1 ? wc[ky * 3 + kx] : 0;
            wv[ky * 3 + kx] = v;
            sw += v;
        }
    }
    d->wp[0] = (int32_t)mt_pack16(wv[0], wv[1]);
    d->wp[1] = (int32_t)mt_pack16(wv[2], wv[3]);
    d->wp[2] = (int32_t)mt_pack16(wv[4], wv[5]);
    d->wp[3] = (int32_t)mt_pack16(wv[6], wv[7]);
    d->wp[4] = wv[8];
    // Offsets from the first valid tap; outside taps (zero weight) read it.
    d->o1 = 1 >= ky0 && 1 < ky1 ? (1 - ky0) * xr : 0;
    d->o2 = 2 < ky1 ? (2 - ky0) * xr : 0;
    d->a1 = 1 >= kx0 && 1 < kx1 ? (1 - kx0) * C : 0;
    d->a2 = 2 < kx1 ? (2 - kx0) * C : 0;
    // |bias| <= 2^30 and each term of a partial sum (x * w, or -zp * w of a
    // tap not yet added) is <= 2^14 in magnitude: no overflow.
    d->bf = bias - zp * sw;
}

// sum (x - zp) * w over the valid taps of one depthwise window: nky rows of
// nkx taps; x from xo (rows xr apart, taps C apart), w from wo (rows k_w apart).
static int32_t dw_taps(const int8_t *x, int32_t xo, int32_t C, int32_t xr, const int8_t *w, int32_t k_w, int32_t nky,
                       int32_t nkx, int32_t zp) {
    int32_t acc = 0;
    for (int32_t ky = 0; ky < nky; ++ky, xo += xr, w += k_w) {
        for (int32_t kx = 0, xi = xo; kx < nkx; ++kx, xi += C) {
            acc += ((int32_t)x[xi] - zp) * (int32_t)w[kx];
        }
    }
    return acc;
}

// Depthwise (cpg == opg == 1): channel outermost, so a channel's weights,
// bias and requant constants are set up once for all its outputs (x and y
// are walked in_c apart), with the zero point folded out (sum (x - zp) * w =
// sum x * w - zp * sum w). 3x3 kernels: per output row, the windows whose
// columns are all inside x form one dw3x3_run (kernel rows outside x
// masked); per border column, the windows of the interior rows form one run
// down the column (kernel columns masked); the corners are single windows.
// Other kernels: the interior windows by a plain loop, the others summing
// (x - zp) * w over their valid taps.
static void conv_fwd_dw(const mt_conv2d_params_t *p, const mt_geom_t *g, const int8_t *x, const int8_t *w,
                        const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y) {
    const int32_t C = p->in_c, zp = p->in_zp, out_zp = p->out_zp, out_w = p->out_w, out_h = p->out_h;
    const int32_t lo = p->act_min - out_zp, hi = p->act_max - out_zp;
    const int32_t k_h = p->k_h, k_w = p->k_w, nk = g->w_oc, xr = g->x_row;
    const int32_t yr = out_w * C;
    int32_t ix0, ix1, iy0, iy1;
    interior(k_w, p->stride_w, p->pad_left, p->in_w, out_w, &ix0, &ix1);
    interior(k_h, p->stride_h, p->pad_top, p->in_h, out_h, &iy0, &iy1);
    // x steps between neighbouring interior windows (along a row, down a
    // column): with two interior windows, stride < in and they fit in int32;
    // with fewer they are never used (and may not fit).
    const int32_t sx = ix1 - ix0 > 1 ? p->stride_w * C : 0, sy = iy1 - iy0 > 1 ? p->stride_h * xr : 0;
    const int is3x3 = k_h == 3 && k_w == 3;
    for (int32_t c = 0; c < C; ++c) {
        const int8_t *wc = w + c * nk;
        mt_rq_t q;
        mt_rq_init(&q, mult[c], shift[c], lo, hi, out_zp);
        const int32_t b = bias[c];
        if (is3x3) {
            mt_dw3_t d;
            d.sx = sx;
            d.ys = C;
            // rows: the interior column run [ix0, ix1)
            for (int32_t oy = 0; oy < out_h && ix1 > ix0; ++oy) {
                const int32_t by = oy * p->stride_h - p->pad_top, bx = ix0 * p->stride_w - p->pad_left;
                int32_t ky0, ky1;
                tap_range(by, 3, p->in_h, &ky0, &ky1);
                if (oy <= iy0 || oy >= iy1) {  // weights change only at border rows
                    dw3_setup(&d, wc, ky0, ky1, 0, 3, xr, C, b, zp);
                }
                const int8_t *xp = x + ((by + ky0) * p->in_w + bx) * C + c;
                if (p->stride_w == 1) {
                    dw3x3_run_s1(&d, xp, ix1 - ix0, &q, y + oy * yr + ix0 * C + c);
                } else {
                    dw3x3_run(&d, xp, ix1 - ix0, &q, y + oy * yr + ix0 * C + c);
                }
            }
            // columns: the border columns, over the interior rows [iy0, iy1)
            d.sx = sy;
            d.ys = yr;
            for (int32_t ox = 0; ox < out_w && iy1 > iy0; ++ox) {
                if (ox == ix0 && ix1 > ix0) {
                    ox = ix1 - 1;
                    continue;
                }
                const int32_t by = iy0 * p->stride_h - p->pad_top, bx = ox * p->stride_w - p->pad_left;
                int32_t kx0, kx1;
                tap_range(bx, 3, p->in_w, &kx0, &kx1);
                dw3_setup(&d, wc, 0, 3, kx0, kx1, xr, C, b, zp);
                dw3x3_run(&d, x + (by * p->in_w + bx + kx0) * C + c, iy1 - iy0, &q, y + iy0 * yr + ox * C + c);
            }
        }
        int32_t sw = 0;
        for (int32_t k = 0; k < nk && !is3x3; ++k) {
            sw += wc[k];
        }
        for (int32_t oy = 0; oy < out_h; ++oy) {
            const int32_t by = oy * p->stride_h - p->pad_top;
            const int32_t row_in = oy >= iy0 && oy < iy1;
            if (is3x3 && row_in) {  // done by the column runs above
                continue;
            }
            for (int32_t ox = 0; ox < out_w; ++ox) {
                const int32_t col_in = ox >= ix0 && ox < ix1;
                if (is3x3 && col_in) {  // done by the row runs above
                    ox = ix1 - 1;
                    continue;
                }
                const int32_t bx = ox * p->stride_w - p->pad_left;
                int32_t acc;
                if (row_in && col_in) {  // an interior window (not 3x3)
                    acc = b - zp * sw + dw_taps(x, (by * p->in_w + bx) * C + c, C, xr, wc, k_w, k_h, k_w, 0);
                } else {
                    int32_t ky0, ky1, kx0, kx1;
                    tap_range(by, k_h, p->in_h, &ky0, &ky1);
                    tap_range(bx, k_w, p->in_w, &kx0, &kx1);
                    const int32_t xo = ((by + ky0) * p->in_w + bx + kx0) * C + c;
                    acc = b + dw_taps(x, xo, C, xr, wc + ky0 * k_w + kx0, k_w, ky1 - ky0, kx1 - kx0, zp);
                }
                y[oy * yr + ox * C + c] = mt_rq_out_call(acc, &q);
            }
        }
    }
}

// The general case (groups > 1 and not depthwise): position by position.
static void conv_fwd_groups(const mt_conv2d_params_t *p, const mt_geom_t *g, const int8_t *x, const int8_t *w,
                            const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y) {
    // Clamp before adding out_zp: requant may return values near +-2^31, and
    // clamp(r + zp, lo, hi) == clamp(r, lo - zp, hi - zp) + zp exactly.
    const int32_t lo = p->act_min - p->out_zp, hi = p->act_max - p->out_zp;
    int32_t yi = 0;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            mt_win_t win;
            win_init(p, g, oy, ox, &win);
            int32_t xo = win.x_off, wo = win.w_off, oc = 0;
            for (int32_t gi = 0; gi < p->groups; ++gi, xo += g->cpg) {
                for (int32_t j = 0; j < g->opg; ++j, ++oc, wo += g->w_oc) {
                    // |bias| <= 2^30 and |dot| <= 32768 * 255 * 128 < 2^30: exact.
                    const int32_t acc = bias[oc] + win_dot(x, xo, w, wo, &win, g->x_row, p->in_c, g->w_row, p->in_zp);
                    y[yi++] = mt_out_s8(acc, mult[oc], shift[oc], lo, hi, p->out_zp);
                }
            }
        }
    }
}

void mt_conv2d_s8_forward(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *w,
                       const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y) {
    mt_geom_t g;
    geom_init(p, &g);
    if (p->groups == 1) {
        conv_fwd_dense(p, &g, x, w, bias, mult, shift, y);
    } else if (g.cpg == 1 && g.opg == 1) {
        conv_fwd_dw(p, &g, x, w, bias, mult, shift, y);
    } else {
        conv_fwd_groups(p, &g, x, w, bias, mult, shift, y);
    }
}

// Output rows [r0, r1) are the whole output of a conv over the input rows they
// read: start at input row r0 * stride_h - pad_top (or keep the part of the top
// padding that is left), with the rows below as the input's height. Every
// output element is the same exact integer sum as in the full call.
void mt_conv2d_s8_forward_rows(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *w,
                               const int32_t *bias, const int32_t *mult, const int32_t *shift, int32_t r0,
                               int32_t r1, int8_t *y) {
    // field by field: a struct copy may become a memcpy call, which natmods cannot link
    mt_conv2d_params_t q;
    q.in_h = p->in_h;
    q.in_w = p->in_w;
    q.in_c = p->in_c;
    q.out_h = r1 - r0;
    q.out_w = p->out_w;
    q.out_c = p->out_c;
    q.k_h = p->k_h;
    q.k_w = p->k_w;
    q.stride_h = p->stride_h;
    q.stride_w = p->stride_w;
    q.pad_top = p->pad_top;
    q.pad_left = p->pad_left;
    q.groups = p->groups;
    q.in_zp = p->in_zp;
    q.out_zp = p->out_zp;
    q.act_min = p->act_min;
    q.act_max = p->act_max;
    const int32_t top = r0 * p->stride_h - p->pad_top;  // < in_h: the window of row r0 starts inside
    if (top >= 0) {
        x += top * p->in_w * p->in_c;
        q.in_h = p->in_h - top;
        q.pad_top = 0;
    } else {
        q.pad_top = -top;
    }
    mt_conv2d_s8_forward(&q, x, w, bias, mult, shift, y);
}

#if !MT_SOFT_MATH || MT_HAS_FLOAT
// Outputs [*o0, *o1) whose tap k lands inside the input,
// 0 <= o * stride - pad + k < in; possibly empty (*o0 == *o1).
static void out_range(int32_t k, int32_t stride, int32_t pad, int32_t in, int32_t out, int32_t *o0,
                      int32_t *o1) {
    int32_t lo = 0, hi = 0;
    if (k < pad) {  // ceil((pad - k) / stride)
        lo = stride == 1 ? pad - k : (int32_t)mt_udiv_u32((uint32_t)(pad - k + stride - 1), (uint32_t)stride);
    }
    const int32_t last = in - 1 + pad - k;  // largest allowed o * stride
    if (last >= 0) {
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

// ---- Backward, register-blocked (docs/numerics.md: int32 sums are exact, so
// their order is free). Every weight-gradient sum is taken over one tap's
// rectangle of valid output positions, a block of weights at a time: the
// block's sums stay in registers while the rectangle is walked once. On
// armv7e-m the Arm DSP halfword multiply-accumulates (mt_dsp.h) take four
// channels from one word load; elsewhere the same code runs on their exact C
// equivalents. The 2x4 blocks take the zero point out of their sums,
// sum e * (x - zp) = sum e * x - zp * sum e (|each part| <= 2^30: exact);
// the other blocks subtract it from x (x - zp is a halfword, -255..255).
#include "mt_dsp.h"

// One tap's valid output positions: noy rows of nox columns. Offsets (not
// pointers) step through e and x, so nothing points outside the buffers.
typedef struct {
    int32_t nox, noy;
    int32_t e_col, x_col;  // offset steps between neighbouring columns
    int32_t e_row, x_row;  // offset steps between neighbouring rows
} mt_rect_t;

// Sums over the rectangle of two output channels times four input channels:
// e holds an oc quad (the pair is bytes 0 and 2, or 1 and 3 when sh == 8),
// x four consecutive input channels. s[0..3]: first oc by ci 0..3; s[4..7]:
// second oc. Each sum <= 65536 * 128 * 128 = 2^30.
#if MT_DSP && defined(__thumb2__)
// One position: 2 loads, 3 unpacks, 8 halfword multiply-accumulates, then the
// column steps (ldrd of ec, xc from the frame).
#define MT_POS_2X4(EROR)                         \
    "ldr %[t0], [%[pe]]\n\t"                     \
    "ldr %[t1], [%[px]]\n\t"                     \
    "sxtb16 %[t0], %[t0]" EROR "\n\t"            \
    "sxtb16 %[t2], %[t1]\n\t"                    \
    "sxtb16 %[t1], %[t1], ror #8\n\t"            \
    "smlabb %[s0], %[t0], %[t2], %[s0]\n\t"      \
    "smlabb %[s1], %[t0], %[t1], %[s1]\n\t"      \
    "smlabt %[s2], %[t0], %[t2], %[s2]\n\t"      \
    "smlabt %[s3], %[t0], %[t1], %[s3]\n\t"      \
    "smlatb %[s4], %[t0], %[t2], %[s4]\n\t"      \
    "smlatb %[s5], %[t0], %[t1], %[s5]\n\t"      \
    "smlatt %[s6], %[t0], %[t2], %[s6]\n\t"      \
    "smlatt %[s7], %[t0], %[t1], %[s7]\n\t"      \
    "ldrd %[t0], %[t2], %[col]\n\t"              \
    "add %[pe], %[pe], %[t0]\n\t"                \
    "add %[px], %[px], %[t2]\n\t"

// The whole rectangle in one asm loop (GCC spills accumulators of the C loop,
// at -Os and -O2): two positions per turn, entered at the second when nox is
// odd.
#define MT_RECT_2X4(EROR)                                                                            \
    __asm__ volatile("mov %[s0], #0\n\t"                                                             \
                     "mov %[s1], #0\n\t"                                                             \
                     "mov %[s2], #0\n\t"                                                             \
                     "mov %[s3], #0\n\t"                                                             \
                     "mov %[s4], #0\n\t"                                                             \
                     "mov %[s5], #0\n\t"                                                             \
                     "mov %[s6], #0\n\t"                                                             \
                     "mov %[s7], #0\n\t"                                                             \
                     "1:\n\t"                                                                         \
                     "ldr %[t0], %[odd]\n\t"                                                          \
                     "cmp %[t0], #0\n\t"                                                              \
                     "bne 3f\n\t"                                                                     \
                     "2:\n\t" MT_POS_2X4(EROR) "3:\n\t" MT_POS_2X4(EROR)                              \
                     "cmp %[pe], %[end]\n\t"                                                          \
                     "bne 2b\n\t"                                                                     \
                     "ldrd %[t0], %[t2], %[skip]\n\t"                                                 \
                     "add %[pe], %[pe], %[t0]\n\t"                                                    \
                     "add %[px], %[px], %[t2]\n\t"                                                    \
                     "ldr %[t0], %[erow]\n\t"                                                         \
                     "add %[end], %[end], %[t0]\n\t"                                                  \
                     "ldr %[t0], %[rows]\n\t"                                                         \
                     "subs %[t0], %[t0], #1\n\t"                                                      \
                     "str %[t0], %[rows]\n\t"                                                         \
                     "bne 1b\n\t"                                                                     \
                     : [s0] "=&r"(s0), [s1] "=&r"(s1), [s2] "=&r"(s2), [s3] "=&r"(s3), [s4] "=&r"(s4), \
                       [s5] "=&r"(s5), [s6] "=&r"(s6), [s7] "=&r"(s7), [pe] "+r"(pe), [px] "+r"(px),  \
                       [end] "+r"(end), [t0] "=&r"(t0), [t1] "=&r"(t1), [t2] "=&r"(t2),               \
                       [rows] "+m"(rows)                                                              \
                     : [col] "m"(prm[0]), [skip] "m"(prm[2]), [erow] "m"(prm[4]), [odd] "m"(prm[5]),  \
                       "m"(*(const int32_t(*)[6])prm)                                                 \
                     : "cc", "memory")

static MT_NOINLINE void rect_2x4(const int8_t *e, const int8_t *x, const mt_rect_t *r, uint32_t sh, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    if (r->noy > 0) {
        // Addresses as integers: the loop steps one column past each row.
        const int32_t nox = r->nox;
        // ec, xc | steps from a row's end to the next row's start | e_row | nox odd
        const int32_t prm[6] = {r->e_col, r->x_col, r->e_row - nox * r->e_col, r->x_row - nox * r->x_col,
                                r->e_row, nox & 1};
        uint32_t pe = (uint32_t)(uintptr_t)e, px = (uint32_t)(uintptr_t)x, t0, t1, t2;
        uint32_t end = pe + (uint32_t)(nox * r->e_col);
        int32_t rows = r->noy;
        if (sh) {
            MT_RECT_2X4(", ror #8");
        } else {
            MT_RECT_2X4("");
        }
        (void)t0, (void)t1, (void)t2;
    }
    s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3, s[4] = s4, s[5] = s5, s[6] = s6, s[7] = s7;
}
#elif MT_RV
// RISC-V: the same sums from byte loads (no packed multiply-add; an unaligned
// word costs four byte loads there): per position two e bytes, four x bytes,
// eight multiplies and adds.
static MT_NOINLINE void rect_2x4(const int8_t *e, const int8_t *x, const mt_rect_t *r, uint32_t sh, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    const int32_t nox = r->nox, ec = r->e_col, xc = r->x_col;
    const int8_t *ep = e + (sh >> 3);  // the pair: bytes 0 and 2, or 1 and 3
    int32_t eo = 0, xo = 0;
    for (int32_t row = 0; row < r->noy; ++row, eo += r->e_row, xo += r->x_row) {
        int32_t ei = eo, xi = xo;
        for (int32_t i = 0; i < nox; ++i, ei += ec, xi += xc) {
            const int8_t *pe = ep + ei, *px = x + xi;
            const int32_t ea = pe[0], eb = pe[2];
            int32_t t = px[0];
            s0 += ea * t;
            s4 += eb * t;
            t = px[1];
            s1 += ea * t;
            s5 += eb * t;
            t = px[2];
            s2 += ea * t;
            s6 += eb * t;
            t = px[3];
            s3 += ea * t;
            s7 += eb * t;
        }
    }
    s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3, s[4] = s4, s[5] = s5, s[6] = s6, s[7] = s7;
}
#else
static MT_NOINLINE void rect_2x4(const int8_t *e, const int8_t *x, const mt_rect_t *r, uint32_t sh, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    const int32_t nox = r->nox, ec = r->e_col, xc = r->x_col;
    int32_t eo = 0, xo = 0;
    for (int32_t row = 0; row < r->noy; ++row, eo += r->e_row, xo += r->x_row) {
        int32_t ei = eo, xi = xo;
        for (int32_t i = 0; i < nox; ++i, ei += ec, xi += xc) {
            const uint32_t ev = mt_sxtb16(mt_load_u32(e + ei) >> sh);
            const uint32_t xw = mt_load_u32(x + xi);
            const uint32_t xa = mt_sxtb16(xw), xb = mt_sxtb16_ror8(xw);  // ci 0, 2 / ci 1, 3
            s0 = mt_smlabb(ev, xa, s0);
            s1 = mt_smlabb(ev, xb, s1);
            s2 = mt_smlabt(ev, xa, s2);
            s3 = mt_smlabt(ev, xb, s3);
            s4 = mt_smlatb(ev, xa, s4);
            s5 = mt_smlatb(ev, xb, s5);
            s6 = mt_smlatt(ev, xa, s6);
            s7 = mt_smlatt(ev, xb, s7);
        }
    }
    s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3, s[4] = s4, s[5] = s5, s[6] = s6, s[7] = s7;
}
#endif

// Four output channels (an e quad) times one input channel minus zp:
// s[0..3] by oc.
static MT_NOINLINE void rect_4x1(const int8_t *e, const int8_t *x, const mt_rect_t *r, int32_t zp, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    const int32_t nox = r->nox, ec = r->e_col, xc = r->x_col;
    int32_t eo = 0, xo = 0;
    for (int32_t row = 0; row < r->noy; ++row, eo += r->e_row, xo += r->x_row) {
        int32_t ei = eo, xi = xo;
        for (int32_t i = 0; i < nox; ++i, ei += ec, xi += xc) {
            const uint32_t ew = mt_load_u32(e + ei);
            const uint32_t ea = mt_sxtb16(ew), eb = mt_sxtb16_ror8(ew);  // oc 0, 2 / oc 1, 3
            const uint32_t xv = (uint32_t)((int32_t)x[xi] - zp);  // a halfword: -255..255
            s0 = mt_smlabb(ea, xv, s0);
            s1 = mt_smlabb(eb, xv, s1);
            s2 = mt_smlatb(ea, xv, s2);
            s3 = mt_smlatb(eb, xv, s3);
        }
    }
    s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3;
}

// One output channel times four input channels minus zp (zp2: zp in both
// halves): s[0..3] by ci.
static MT_NOINLINE void rect_1x4(const int8_t *e, const int8_t *x, const mt_rect_t *r, uint32_t zp2, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    const int32_t nox = r->nox, ec = r->e_col, xc = r->x_col;
    int32_t eo = 0, xo = 0;
    for (int32_t row = 0; row < r->noy; ++row, eo += r->e_row, xo += r->x_row) {
        int32_t ei = eo, xi = xo;
        for (int32_t i = 0; i < nox; ++i, ei += ec, xi += xc) {
            const uint32_t ev = (uint32_t)(int32_t)e[ei];
            const uint32_t xw = mt_load_u32(x + xi);
            const uint32_t xa = mt_ssub16(mt_sxtb16(xw), zp2), xb = mt_ssub16(mt_sxtb16_ror8(xw), zp2);
            s0 = mt_smlabb(xa, ev, s0);
            s1 = mt_smlabb(xb, ev, s1);
            s2 = mt_smlatb(xa, ev, s2);
            s3 = mt_smlatb(xb, ev, s3);
        }
    }
    s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3;
}

// Depthwise: four channels, each its own e times (x - zp) (zp in both
// halves of zp2; x - zp fits a halfword). s[0..3] by channel.
static MT_NOINLINE void rect_dw4(const int8_t *e, const int8_t *x, const mt_rect_t *r, uint32_t zp2, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    const int32_t nox = r->nox, ec = r->e_col, xc = r->x_col;
    int32_t eo = 0, xo = 0;
    for (int32_t row = 0; row < r->noy; ++row, eo += r->e_row, xo += r->x_row) {
        int32_t ei = eo, xi = xo;
        for (int32_t i = 0; i < nox; ++i, ei += ec, xi += xc) {
            const uint32_t ew = mt_load_u32(e + ei), xw = mt_load_u32(x + xi);
            const uint32_t ea = mt_sxtb16(ew), eb = mt_sxtb16_ror8(ew);
            const uint32_t xa = mt_ssub16(mt_sxtb16(xw), zp2), xb = mt_ssub16(mt_sxtb16_ror8(xw), zp2);
            s0 = mt_smlabb(ea, xa, s0);
            s2 = mt_smlatt(ea, xa, s2);
            s1 = mt_smlabb(eb, xb, s1);
            s3 = mt_smlatt(eb, xb, s3);
        }
    }
    s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3;
}

// One output channel times one input channel minus zp.
static MT_NOINLINE int32_t rect_1x1(const int8_t *e, const int8_t *x, const mt_rect_t *r, int32_t zp) {
    int32_t s = 0;
    const int32_t nox = r->nox, ec = r->e_col, xc = r->x_col;
    int32_t eo = 0, xo = 0;
    for (int32_t row = 0; row < r->noy; ++row, eo += r->e_row, xo += r->x_row) {
        int32_t ei = eo, xi = xo;
        for (int32_t i = 0; i < nox; ++i, ei += ec, xi += xc) {
            s += (int32_t)e[ei] * ((int32_t)x[xi] - zp);
        }
    }
    return s;
}

#if !MT_SOFT_MATH  // the masked pairs below (Cortex-M0 keeps one channel at a time)
// Two output channels that need not be neighbours (e at offsets 0 and db)
// times four input channels: s[0..3] the first oc by ci 0..3, s[4..7] the
// second, without the zero point (the caller folds it out, as for the 2x4
// blocks). The pair's errors are packed into one word per position, so the
// masked weight gradient gets the 2x4 block's halfword MACs for any two
// selected channels.
#if MT_DSP && defined(__thumb2__)
// One position of the pair: its two error bytes packed into halfwords (oc a
// low, oc b high; db from the frame, no register left for it), then as
// MT_POS_2X4.
#define MT_POS_2X4G                              \
    "ldr %[t2], %[db]\n\t"                       \
    "ldrsb %[t1], [%[pe], %[t2]]\n\t"            \
    "ldrsb %[t0], [%[pe]]\n\t"                   \
    "pkhbt %[t0], %[t0], %[t1], lsl #16\n\t"     \
    "ldr %[t1], [%[px]]\n\t"                     \
    "sxtb16 %[t2], %[t1]\n\t"                    \
    "sxtb16 %[t1], %[t1], ror #8\n\t"            \
    "smlabb %[s0], %[t0], %[t2], %[s0]\n\t"      \
    "smlabb %[s1], %[t0], %[t1], %[s1]\n\t"      \
    "smlabt %[s2], %[t0], %[t2], %[s2]\n\t"      \
    "smlabt %[s3], %[t0], %[t1], %[s3]\n\t"      \
    "smlatb %[s4], %[t0], %[t2], %[s4]\n\t"      \
    "smlatb %[s5], %[t0], %[t1], %[s5]\n\t"      \
    "smlatt %[s6], %[t0], %[t2], %[s6]\n\t"      \
    "smlatt %[s7], %[t0], %[t1], %[s7]\n\t"      \
    "ldrd %[t0], %[t2], %[col]\n\t"              \
    "add %[pe], %[pe], %[t0]\n\t"                \
    "add %[px], %[px], %[t2]\n\t"

// The rectangle in one asm loop, as MT_RECT_2X4 (the C loop spills).
static MT_NOINLINE void rect_2x4g(const int8_t *e, int32_t db, const int8_t *x, const mt_rect_t *r, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    if (r->noy > 0) {
        const int32_t nox = r->nox;
        // ec, xc | steps from a row's end to the next row's start | e_row | nox odd | db
        const int32_t prm[7] = {r->e_col, r->x_col, r->e_row - nox * r->e_col, r->x_row - nox * r->x_col,
                                r->e_row, nox & 1, db};
        uint32_t pe = (uint32_t)(uintptr_t)e, px = (uint32_t)(uintptr_t)x, t0, t1, t2;
        uint32_t end = pe + (uint32_t)(nox * r->e_col);
        int32_t rows = r->noy;
        __asm__ volatile("mov %[s0], #0\n\t"
                         "mov %[s1], #0\n\t"
                         "mov %[s2], #0\n\t"
                         "mov %[s3], #0\n\t"
                         "mov %[s4], #0\n\t"
                         "mov %[s5], #0\n\t"
                         "mov %[s6], #0\n\t"
                         "mov %[s7], #0\n\t"
                         "1:\n\t"
                         "ldr %[t0], %[odd]\n\t"
                         "cmp %[t0], #0\n\t"
                         "bne 3f\n\t"
                         "2:\n\t" MT_POS_2X4G "3:\n\t" MT_POS_2X4G
                         "cmp %[pe], %[end]\n\t"
                         "bne 2b\n\t"
                         "ldrd %[t0], %[t2], %[skip]\n\t"
                         "add %[pe], %[pe], %[t0]\n\t"
                         "add %[px], %[px], %[t2]\n\t"
                         "ldr %[t0], %[erow]\n\t"
                         "add %[end], %[end], %[t0]\n\t"
                         "ldr %[t0], %[rows]\n\t"
                         "subs %[t0], %[t0], #1\n\t"
                         "str %[t0], %[rows]\n\t"
                         "bne 1b\n\t"
                         : [s0] "=&r"(s0), [s1] "=&r"(s1), [s2] "=&r"(s2), [s3] "=&r"(s3), [s4] "=&r"(s4),
                           [s5] "=&r"(s5), [s6] "=&r"(s6), [s7] "=&r"(s7), [pe] "+r"(pe), [px] "+r"(px),
                           [end] "+r"(end), [t0] "=&r"(t0), [t1] "=&r"(t1), [t2] "=&r"(t2), [rows] "+m"(rows)
                         : [col] "m"(prm[0]), [skip] "m"(prm[2]), [erow] "m"(prm[4]), [odd] "m"(prm[5]),
                           [db] "m"(prm[6]), "m"(*(const int32_t(*)[7])prm)
                         : "cc", "memory");
        (void)t0, (void)t1, (void)t2;
    }
    s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3, s[4] = s4, s[5] = s5, s[6] = s6, s[7] = s7;
}
// One position of a packed pair: its error word already holds the two
// channels' errors as halfwords (oc a low, oc b high), so no unpack.
#define MT_POS_2X4P                              \
    "ldr %[t0], [%[pe]]\n\t"                     \
    "ldr %[t1], [%[px]]\n\t"                     \
    "sxtb16 %[t2], %[t1]\n\t"                    \
    "sxtb16 %[t1], %[t1], ror #8\n\t"            \
    "smlabb %[s0], %[t0], %[t2], %[s0]\n\t"      \
    "smlabb %[s1], %[t0], %[t1], %[s1]\n\t"      \
    "smlabt %[s2], %[t0], %[t2], %[s2]\n\t"      \
    "smlabt %[s3], %[t0], %[t1], %[s3]\n\t"      \
    "smlatb %[s4], %[t0], %[t2], %[s4]\n\t"      \
    "smlatb %[s5], %[t0], %[t1], %[s5]\n\t"      \
    "smlatt %[s6], %[t0], %[t2], %[s6]\n\t"      \
    "smlatt %[s7], %[t0], %[t1], %[s7]\n\t"      \
    "ldrd %[t0], %[t2], %[col]\n\t"              \
    "add %[pe], %[pe], %[t0]\n\t"                \
    "add %[px], %[px], %[t2]\n\t"

// rect_2x4g over a packed pair (e: the pair's words, e_col / e_row in bytes
// of them): 15 instructions a position where the gathered loads take 19.
static MT_NOINLINE void rect_2x4p(const int8_t *e, const int8_t *x, const mt_rect_t *r, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    if (r->noy > 0) {
        const int32_t nox = r->nox;
        const int32_t prm[6] = {r->e_col, r->x_col, r->e_row - nox * r->e_col, r->x_row - nox * r->x_col,
                                r->e_row, nox & 1};
        uint32_t pe = (uint32_t)(uintptr_t)e, px = (uint32_t)(uintptr_t)x, t0, t1, t2;
        uint32_t end = pe + (uint32_t)(nox * r->e_col);
        int32_t rows = r->noy;
        __asm__ volatile("mov %[s0], #0\n\t"
                         "mov %[s1], #0\n\t"
                         "mov %[s2], #0\n\t"
                         "mov %[s3], #0\n\t"
                         "mov %[s4], #0\n\t"
                         "mov %[s5], #0\n\t"
                         "mov %[s6], #0\n\t"
                         "mov %[s7], #0\n\t"
                         "1:\n\t"
                         "ldr %[t0], %[odd]\n\t"
                         "cmp %[t0], #0\n\t"
                         "bne 3f\n\t"
                         "2:\n\t" MT_POS_2X4P "3:\n\t" MT_POS_2X4P
                         "cmp %[pe], %[end]\n\t"
                         "bne 2b\n\t"
                         "ldrd %[t0], %[t2], %[skip]\n\t"
                         "add %[pe], %[pe], %[t0]\n\t"
                         "add %[px], %[px], %[t2]\n\t"
                         "ldr %[t0], %[erow]\n\t"
                         "add %[end], %[end], %[t0]\n\t"
                         "ldr %[t0], %[rows]\n\t"
                         "subs %[t0], %[t0], #1\n\t"
                         "str %[t0], %[rows]\n\t"
                         "bne 1b\n\t"
                         : [s0] "=&r"(s0), [s1] "=&r"(s1), [s2] "=&r"(s2), [s3] "=&r"(s3), [s4] "=&r"(s4),
                           [s5] "=&r"(s5), [s6] "=&r"(s6), [s7] "=&r"(s7), [pe] "+r"(pe), [px] "+r"(px),
                           [end] "+r"(end), [t0] "=&r"(t0), [t1] "=&r"(t1), [t2] "=&r"(t2), [rows] "+m"(rows)
                         : [col] "m"(prm[0]), [skip] "m"(prm[2]), [erow] "m"(prm[4]), [odd] "m"(prm[5]),
                           "m"(*(const int32_t(*)[6])prm)
                         : "cc", "memory");
        (void)t0, (void)t1, (void)t2;
    }
    s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3, s[4] = s4, s[5] = s5, s[6] = s6, s[7] = s7;
}
#define MT_GW_PACKED 1
#else
static MT_NOINLINE void rect_2x4g(const int8_t *e, int32_t db, const int8_t *x, const mt_rect_t *r, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    const int32_t nox = r->nox, ec = r->e_col, xc = r->x_col;
    int32_t eo = 0, xo = 0;
    for (int32_t row = 0; row < r->noy; ++row, eo += r->e_row, xo += r->x_row) {
        int32_t ei = eo, xi = xo;
        for (int32_t i = 0; i < nox; ++i, ei += ec, xi += xc) {
            const uint32_t ev = mt_pkhbt16((uint32_t)(int32_t)e[ei], (uint32_t)(int32_t)e[ei + db]);
            const uint32_t xw = mt_load_u32(x + xi);
            const uint32_t xa = mt_sxtb16(xw), xb = mt_sxtb16_ror8(xw);  // ci 0, 2 / ci 1, 3
            s0 = mt_smlabb(ev, xa, s0);
            s1 = mt_smlabb(ev, xb, s1);
            s2 = mt_smlabt(ev, xa, s2);
            s3 = mt_smlabt(ev, xb, s3);
            s4 = mt_smlatb(ev, xa, s4);
            s5 = mt_smlatb(ev, xb, s5);
            s6 = mt_smlatt(ev, xa, s6);
            s7 = mt_smlatt(ev, xb, s7);
        }
    }
    s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3, s[4] = s4, s[5] = s5, s[6] = s6, s[7] = s7;
}

#endif

// The same pair times one input channel minus zp: s[0], s[1] by oc.
#if MT_DSP && defined(__thumb2__)
// One position: three byte loads, x - zp, two multiply-accumulates, the steps.
#define MT_POS_2X1G                              \
    "ldrsb %[t0], [%[pe]]\n\t"                   \
    "ldrsb %[t1], [%[pe], %[db]]\n\t"            \
    "ldrsb %[t2], [%[px]]\n\t"                   \
    "sub %[t2], %[t2], %[zp]\n\t"                \
    "mla %[s0], %[t0], %[t2], %[s0]\n\t"         \
    "mla %[s1], %[t1], %[t2], %[s1]\n\t"         \
    "add %[pe], %[pe], %[ec]\n\t"                \
    "add %[px], %[px], %[xc]\n\t"

// The rectangle in one asm loop, two positions per turn as MT_RECT_2X4 (the C
// loop's index arithmetic cost a third more).
static MT_NOINLINE void rect_2x1g(const int8_t *e, int32_t db, const int8_t *x, const mt_rect_t *r, int32_t zp,
                                  int32_t *s) {
    int32_t s0 = 0, s1 = 0;
    if (r->noy > 0) {
        const int32_t nox = r->nox;
        // steps from a row's end to the next row's start | e_row | nox odd
        const int32_t prm[5] = {r->e_row - nox * r->e_col, r->x_row - nox * r->x_col, r->e_row, nox & 1, 0};
        uint32_t pe = (uint32_t)(uintptr_t)e, px = (uint32_t)(uintptr_t)x, t0, t1, t2;
        uint32_t end = pe + (uint32_t)(nox * r->e_col);
        int32_t rows = r->noy;
        const int32_t ec = r->e_col, xc = r->x_col;
        __asm__ volatile("mov %[s0], #0\n\t"
                         "mov %[s1], #0\n\t"
                         "1:\n\t"
                         "ldr %[t0], %[odd]\n\t"
                         "cmp %[t0], #0\n\t"
                         "bne 3f\n\t"
                         "2:\n\t" MT_POS_2X1G "3:\n\t" MT_POS_2X1G
                         "cmp %[pe], %[end]\n\t"
                         "bne 2b\n\t"
                         "ldrd %[t0], %[t2], %[skip]\n\t"
                         "add %[pe], %[pe], %[t0]\n\t"
                         "add %[px], %[px], %[t2]\n\t"
                         "ldr %[t0], %[erow]\n\t"
                         "add %[end], %[end], %[t0]\n\t"
                         "ldr %[t0], %[rows]\n\t"
                         "subs %[t0], %[t0], #1\n\t"
                         "str %[t0], %[rows]\n\t"
                         "bne 1b\n\t"
                         : [s0] "=&r"(s0), [s1] "=&r"(s1), [pe] "+r"(pe), [px] "+r"(px), [end] "+r"(end),
                           [t0] "=&r"(t0), [t1] "=&r"(t1), [t2] "=&r"(t2), [rows] "+m"(rows)
                         : [db] "r"(db), [zp] "r"(zp), [ec] "r"(ec), [xc] "r"(xc), [skip] "m"(prm[0]),
                           [erow] "m"(prm[2]), [odd] "m"(prm[3]), "m"(*(const int32_t(*)[5])prm)
                         : "cc", "memory");
        (void)t0, (void)t1, (void)t2;
    }
    s[0] = s0, s[1] = s1;
}
#else
static MT_NOINLINE void rect_2x1g(const int8_t *e, int32_t db, const int8_t *x, const mt_rect_t *r, int32_t zp,
                                  int32_t *s) {
    int32_t s0 = 0, s1 = 0;
    const int32_t nox = r->nox, ec = r->e_col, xc = r->x_col;
    int32_t eo = 0, xo = 0;
    for (int32_t row = 0; row < r->noy; ++row, eo += r->e_row, xo += r->x_row) {
        int32_t ei = eo, xi = xo;
        for (int32_t i = 0; i < nox; ++i, ei += ec, xi += xc) {
            const int32_t xv = (int32_t)x[xi] - zp;
            s0 += (int32_t)e[ei] * xv;
            s1 += (int32_t)e[ei + db] * xv;
        }
    }
    s[0] = s0, s[1] = s1;
}
#endif
#endif

// Where the finished sums go: the int32 gradient (stored) or the float32
// one (gf[i] = gf[i] + scale * (float)s, the contract's single add). The
// float one may hold a window of the output channels: element i of the
// whole layer is gf[i - base] (an index, so no pointer leaves the array);
// the int32 sink is always the whole layer (no subtraction on its path).
typedef struct {
    int32_t *gi;
    float *gf;
    float scale;
    int32_t base;
} mt_sink_t;

static void sink_put(const mt_sink_t *o, int32_t i, int32_t s) {
#if MT_HAS_FLOAT
    if (o->gf) {
        // Rounded product in its own variable: float32 result even with x87
        // excess precision; no FMA (-std=c99 implies -ffp-contract=off).
        const float d = o->scale * (float)s;
        const int32_t j = i - o->base;
        o->gf[j] = o->gf[j] + d;
        return;
    }
#endif
    o->gi[i] = s;
}

static int oc_on(const uint8_t *mask, int32_t oc) {
    return !mask || mask[oc];
}

#ifdef MT_GW_PACKED
// Output positions whose pair errors fit the stack buffer (1 KB) of gw_pairs_packed.
#define MT_GW_PACK_MAX 256

// The valid output rectangle of tap (ky, kx) for the weight gradient, its
// first output position (pos0) and input offset (xb); steps as gw_blocked's.
static void gw_tap(const mt_conv2d_params_t *p, const mt_geom_t *g, int32_t ky, int32_t kx, mt_rect_t *r,
                   int32_t *pos0, int32_t *xb) {
    int32_t oy0, oy1, ox0, ox1;
    out_range(ky, p->stride_h, p->pad_top, p->in_h, p->out_h, &oy0, &oy1);
    out_range(kx, p->stride_w, p->pad_left, p->in_w, p->out_w, &ox0, &ox1);
    r->nox = ox1 - ox0;
    r->noy = r->nox > 0 ? oy1 - oy0 : 0;
    if (r->noy == 0) {
        r->nox = 0;
    }
    r->e_col = p->out_c;
    r->x_col = r->nox > 1 ? p->stride_w * p->in_c : 0;
    r->e_row = p->out_w * p->out_c;
    r->x_row = r->noy > 1 ? p->stride_h * g->x_row : 0;
    *pos0 = *xb = 0;
    if (r->noy > 0) {
        *pos0 = oy0 * p->out_w + ox0;
        *xb = ((oy0 * p->stride_h - p->pad_top + ky) * p->in_w + ox0 * p->stride_w - p->pad_left + kx) * p->in_c;
    }
}

// Both sums of e over the rectangle of a packed pair, in halfword lanes:
// at most MT_GW_PACK_MAX (256) terms of -128..127 each, so a lane stays
// within -32768..32512 and SADD16 never wraps.
static MT_NOINLINE void rect_sum2p(const uint32_t *pk, int32_t pos0, int32_t out_w, const mt_rect_t *r, int32_t *se) {
    uint32_t acc = 0;
    int32_t o = pos0;
    for (int32_t row = 0; row < r->noy; ++row, o += out_w) {
        for (int32_t i = 0; i < r->nox; ++i) {
            acc = mt_sadd16(acc, pk[o + i]);
        }
    }
    se[0] = mt_lo16(acc);
    se[1] = mt_hi16(acc);
}

// Masked weight gradient, pairs of selected channels (cpg >= 4, at most
// MT_GW_PACK_MAX output positions): pair outermost, its errors packed once
// into halfword pairs, then every tap and input quad over the packed words
// (rect_2x4p); the input channels past the last quad as gw_blocked. A last
// odd channel is left to gw_blocked (its pair loop skips the pairs).
static void gw_pairs_packed(const mt_conv2d_params_t *p, const mt_geom_t *g, const int8_t *x, const int8_t *e,
                            const uint8_t *mask, const mt_sink_t *ow) {
    uint32_t pk[MT_GW_PACK_MAX];
    const int32_t out_c = p->out_c, cpg = g->cpg, zp = p->in_zp, npos = p->out_h * p->out_w;
    int32_t s[8], se[2];
    for (int32_t gi = 0; gi < p->groups; ++gi) {
        const int32_t oc_end = (gi + 1) * g->opg;
        int32_t a = -1;
        for (int32_t b = gi * g->opg; b < oc_end; ++b) {
            if (!mask[b]) {
                continue;
            }
            if (a < 0) {
                a = b;
                continue;
            }
            for (int32_t i = 0, o = 0; i < npos; ++i, o += out_c) {
                pk[i] = mt_pkhbt16((uint32_t)(int32_t)e[o + a], (uint32_t)(int32_t)e[o + b]);
            }
            for (int32_t ky = 0; ky < p->k_h; ++ky) {
                for (int32_t kx = 0; kx < p->k_w; ++kx) {
                    mt_rect_t r, rp;
                    int32_t pos0, xb;
                    gw_tap(p, g, ky, kx, &r, &pos0, &xb);
                    const int32_t eb = pos0 * out_c;
                    rp.nox = r.nox;
                    rp.noy = r.noy;
                    rp.e_col = 4;
                    rp.e_row = 4 * p->out_w;
                    rp.x_col = r.x_col;
                    rp.x_row = r.x_row;
                    const int8_t *xg = x + xb + gi * cpg;
                    const int32_t wt = ky * g->w_row + kx * cpg;
                    const int32_t wa = a * g->w_oc + wt, wb = b * g->w_oc + wt;
                    rect_sum2p(pk, pos0, p->out_w, &r, se);
                    int32_t c = 0;
                    for (; c + 4 <= cpg; c += 4) {
                        rect_2x4p((const int8_t *)pk + 4 * pos0, xg + c, &rp, s);
                        for (int32_t k = 0; k < 4; ++k) {
                            sink_put(ow, wa + c + k, s[k] - zp * se[0]);
                            sink_put(ow, wb + c + k, s[4 + k] - zp * se[1]);
                        }
                    }
                    for (; c < cpg; ++c) {
                        rect_2x1g(e + eb + a, b - a, xg + c, &r, zp, s);
                        sink_put(ow, wa + c, s[0]);
                        sink_put(ow, wb + c, s[1]);
                    }
                }
            }
            a = -1;
        }
    }
}
#endif

// All weight-gradient sums of the active output channels, each handed to
// the sink once (zero sums too: x + 0.0f is not an identity for -0.0f or a
// NaN scale); then the bias sums. Masked channels are skipped entirely.
static void gw_blocked(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *e, const uint8_t *mask,
                       const mt_sink_t *ow, const mt_sink_t *ob) {
    static const int8_t one = 1;  // x of the sums of e (column and row steps 0)
    mt_geom_t g;
    geom_init(p, &g);
    const int32_t zp = p->in_zp, out_c = p->out_c, in_c = p->in_c, cpg = g.cpg;
    const uint32_t zp2 = mt_pack16(zp, zp);
    int32_t s[8], se[4];
    int packed = 0;  // the masked pairs done by gw_pairs_packed
#ifdef MT_GW_PACKED
    if (mask && cpg >= 4 && p->out_h * p->out_w <= MT_GW_PACK_MAX) {
        gw_pairs_packed(p, &g, x, e, mask, ow);
        packed = 1;
    }
#endif
    (void)packed;  // no masked pair path on Cortex-M0
    for (int32_t ky = 0; ky < p->k_h; ++ky) {
        int32_t oy0, oy1;
        out_range(ky, p->stride_h, p->pad_top, p->in_h, p->out_h, &oy0, &oy1);
        for (int32_t kx = 0; kx < p->k_w; ++kx) {
            int32_t ox0, ox1;
            out_range(kx, p->stride_w, p->pad_left, p->in_w, p->out_w, &ox0, &ox1);
            mt_rect_t r, r1;
            r.nox = ox1 - ox0;
            r.noy = r.nox > 0 ? oy1 - oy0 : 0;
            if (r.noy == 0) {
                r.nox = 0;
            }
            // Steps only where there is a next column / row (bounded there).
            r.e_col = out_c;
            r.x_col = r.nox > 1 ? p->stride_w * in_c : 0;
            r.e_row = p->out_w * out_c;
            r.x_row = r.noy > 1 ? p->stride_h * g.x_row : 0;
            int32_t eb = 0, xb = 0;
            if (r.noy > 0) {
                eb = (oy0 * p->out_w + ox0) * out_c;
                xb = ((oy0 * p->stride_h - p->pad_top + ky) * p->in_w + ox0 * p->stride_w - p->pad_left + kx) * in_c;
            }
            // field by field: a struct copy is a memcpy call on armv6m, which natmods lack
            r1.nox = r.nox;
            r1.noy = r.noy;
            r1.e_col = r.e_col;
            r1.e_row = r.e_row;
            r1.x_col = r1.x_row = 0;
            const int32_t wt = ky * g.w_row + kx * cpg;  // tap offset inside one oc's weights
            if (cpg == 1 && g.opg == 1) {  // depthwise: channel quads, then single channels
                for (int32_t oc = 0; oc < out_c;) {
                    if (oc + 4 <= out_c && oc_on(mask, oc) && oc_on(mask, oc + 1) && oc_on(mask, oc + 2) &&
                        oc_on(mask, oc + 3)) {
                        rect_dw4(e + eb + oc, x + xb + oc, &r, zp2, s);
                        for (int32_t q = 0; q < 4; ++q) {
                            sink_put(ow, (oc + q) * g.w_oc + wt, s[q]);
                        }
                        oc += 4;
                        continue;
                    }
                    if (oc_on(mask, oc)) {
                        sink_put(ow, oc * g.w_oc + wt, rect_1x1(e + eb + oc, x + xb + oc, &r, zp));
                    }
                    ++oc;
                }
                continue;
            }
#if !MT_SOFT_MATH
            if (mask) {
                // Masked: the selected channels of each group in pairs (a last
                // odd one alone), whatever their distance.
                for (int32_t gi = 0; gi < p->groups; ++gi) {
                    const int8_t *xg = x + xb + gi * cpg;
                    const int32_t oc_end = (gi + 1) * g.opg;
                    int32_t a = -1;  // a selected channel waiting for its pair
                    for (int32_t oc = gi * g.opg; oc <= oc_end; ++oc) {
                        if (oc < oc_end && !mask[oc]) {
                            continue;
                        }
                        if (oc < oc_end && a < 0) {
                            a = oc;
                            continue;
                        }
                        if (a < 0) {
                            break;
                        }
                        if (oc < oc_end && packed) {  // done by gw_pairs_packed
                            a = -1;
                            continue;
                        }
                        const int32_t wa = a * g.w_oc + wt;
                        int32_t c = 0;
                        if (oc < oc_end) {  // the pair (a, oc)
                            const int32_t wb = oc * g.w_oc + wt;
                            if (cpg >= 4) {
                                rect_2x1g(e + eb + a, oc - a, &one, &r1, 0, se);  // both sums of e, one pass
                                for (; c + 4 <= cpg; c += 4) {
                                    rect_2x4g(e + eb + a, oc - a, xg + c, &r, s);
                                    for (int32_t k = 0; k < 4; ++k) {
                                        sink_put(ow, wa + c + k, s[k] - zp * se[0]);
                                        sink_put(ow, wb + c + k, s[4 + k] - zp * se[1]);
                                    }
                                }
                            }
                            for (; c < cpg; ++c) {
                                rect_2x1g(e + eb + a, oc - a, xg + c, &r, zp, s);
                                sink_put(ow, wa + c, s[0]);
                                sink_put(ow, wb + c, s[1]);
                            }
                        } else {  // the last one alone
                            for (; c + 4 <= cpg; c += 4) {
                                rect_1x4(e + eb + a, xg + c, &r, zp2, s);
                                for (int32_t k = 0; k < 4; ++k) {
                                    sink_put(ow, wa + c + k, s[k]);
                                }
                            }
                        }
                        for (; c < cpg; ++c) {
                            sink_put(ow, wa + c, rect_1x1(e + eb + a, xg + c, &r, zp));
                        }
                        a = -1;
                    }
                }
                continue;
            }
#endif
            for (int32_t gi = 0, oc = 0; gi < p->groups; ++gi) {
                const int8_t *xg = x + xb + gi * cpg;
                const int32_t oc_end = oc + g.opg;
                while (oc < oc_end) {
                    const int8_t *eq = e + eb + oc;
                    const int32_t wo = oc * g.w_oc + wt;
                    if (oc + 4 <= oc_end && oc_on(mask, oc) && oc_on(mask, oc + 1) && oc_on(mask, oc + 2) &&
                        oc_on(mask, oc + 3)) {
                        if (cpg >= 4) {  // sums of e for the 2x4 blocks
                            rect_4x1(eq, &one, &r1, 0, se);
                        }
                        int32_t c = 0;
                        for (; c + 4 <= cpg; c += 4) {
                            for (uint32_t h = 0; h < 2; ++h) {  // oc pairs (0, 2) then (1, 3)
                                rect_2x4(eq, xg + c, &r, 8 * h, s);
                                for (int32_t k = 0; k < 4; ++k) {
                                    sink_put(ow, wo + (int32_t)h * g.w_oc + c + k, s[k] - zp * se[h]);
                                    sink_put(ow, wo + (int32_t)(h + 2) * g.w_oc + c + k, s[4 + k] - zp * se[h + 2]);
                                }
                            }
                        }
                        for (; c < cpg; ++c) {
                            rect_4x1(eq, xg + c, &r, zp, s);
                            for (int32_t q = 0; q < 4; ++q) {
                                sink_put(ow, wo + q * g.w_oc + c, s[q]);
                            }
                        }
                        oc += 4;
                        continue;
                    }
                    if (oc_on(mask, oc)) {
                        int32_t c = 0;
                        for (; c + 4 <= cpg; c += 4) {
                            rect_1x4(eq, xg + c, &r, zp2, s);
                            for (int32_t k = 0; k < 4; ++k) {
                                sink_put(ow, wo + c + k, s[k]);
                            }
                        }
                        for (; c < cpg; ++c) {
                            sink_put(ow, wo + c, rect_1x1(eq, xg + c, &r, zp));
                        }
                    }
                    ++oc;
                }
            }
        }
    }
    // Bias: sums of e over every position, as one row.
    mt_rect_t rb = {p->out_h * p->out_w, 1, out_c, 0, 0, 0};
    for (int32_t oc = 0; oc < out_c;) {
        if (oc + 4 <= out_c && oc_on(mask, oc) && oc_on(mask, oc + 1) && oc_on(mask, oc + 2) && oc_on(mask, oc + 3)) {
            rect_4x1(e + oc, &one, &rb, 0, se);
            for (int32_t q = 0; q < 4; ++q) {
                sink_put(ob, oc + q, se[q]);
            }
            oc += 4;
            continue;
        }
        if (oc_on(mask, oc)) {
            sink_put(ob, oc, rect_1x1(e + oc, &one, &rb, 0));
        }
        ++oc;
    }
}
#endif

#if !MT_SOFT_MATH
// ---- Grad input, tap-major: for each tap, acc[in pos, ci] += sum over oc of
// e[out pos, oc] * wr[oc] * w[oc, tap, ci] over the tap's rectangle of valid
// output positions, a GEMM. The weights of one tap, four input channels and
// up to MT_GI_QUADS oc quads are packed once into halfword pairs that match
// the unpacked error words (oc 0, 2 and oc 1, 3), with wr folded in; each
// position then costs one word load and two unpacks per oc quad and one dual
// multiply-accumulate per oc pair and ci.
//
// wr * w must fit a halfword: wr is split into digits d (wr = sum d_j *
// 2^(k + 8 j), d_j <= 256; k = common trailing zero bits) and each digit is
// one pass, its sums scaled by 2^(k + 8 j) into acc. Every partial sum is a
// sum of parts of the terms e * wr * w, each part at most as large as its
// term, so mt_wr_check's bound keeps all of them in int32.
#define MT_GI_QUADS 16  // 16 quads * 8 words: 512 bytes of stack

// acc[pos, 0..nc) += mult * sum over the nq packed quads of e[pos, quad] . wp.
// qoff: 4 channel offsets per quad; only the first is used when the quad's
// channels are consecutive (one word load), all four when gather is set.
#if MT_RV
// RISC-V (no packed multiply-add): the packed weights unpacked once per call
// into halfwords, [quad][ci][oc 0..3], then per position and quad four e
// bytes, sixteen halfword loads, sixteen multiplies and adds.
static MT_NOINLINE void gi_rect(const int8_t *e, int32_t *acc, const mt_rect_t *r, const uint32_t *wp,
                               const int32_t *qoff, int32_t nq, int32_t nc, int32_t mult, int gather) {
    int16_t wu[16 * MT_GI_QUADS];
    for (int32_t q = 0; q < nq; ++q) {
        for (int32_t c = 0; c < 4; ++c) {
            int16_t *u = wu + 16 * q + 4 * c;
            const uint32_t a = wp[8 * q + c], b = wp[8 * q + 4 + c];  // oc 0, 2 / oc 1, 3
            u[0] = (int16_t)mt_lo16(a);
            u[1] = (int16_t)mt_lo16(b);
            u[2] = (int16_t)mt_hi16(a);
            u[3] = (int16_t)mt_hi16(b);
        }
    }
    int32_t eo = 0, ao = 0;
    for (int32_t row = 0; row < r->noy; ++row, eo += r->e_row, ao += r->x_row) {
        int32_t ei = eo, ai = ao;
        for (int32_t i = 0; i < r->nox; ++i, ei += r->e_col, ai += r->x_col) {
            int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            const int8_t *ep = e + ei;
            const int16_t *u = wu;
            for (int32_t q = 0; q < nq; ++q, u += 16) {
                const int32_t *o = qoff + 4 * q;
                int32_t e0, e1, e2, e3;
                if (gather) {
                    e0 = ep[o[0]], e1 = ep[o[1]], e2 = ep[o[2]], e3 = ep[o[3]];
                } else {
                    const int8_t *eq = ep + o[0];
                    e0 = eq[0], e1 = eq[1], e2 = eq[2], e3 = eq[3];
                }
                s0 += e0 * u[0] + e1 * u[1] + e2 * u[2] + e3 * u[3];
                s1 += e0 * u[4] + e1 * u[5] + e2 * u[6] + e3 * u[7];
                s2 += e0 * u[8] + e1 * u[9] + e2 * u[10] + e3 * u[11];
                s3 += e0 * u[12] + e1 * u[13] + e2 * u[14] + e3 * u[15];
            }
            int32_t *a = acc + ai;
            a[0] += s0 * mult;
            if (nc > 1) {
                a[1] += s1 * mult;
                if (nc > 2) {
                    a[2] += s2 * mult;
                    if (nc > 3) {
                        a[3] += s3 * mult;
                    }
                }
            }
        }
    }
}
#else
static MT_NOINLINE void gi_rect(const int8_t *e, int32_t *acc, const mt_rect_t *r, const uint32_t *wp,
                               const int32_t *qoff, int32_t nq, int32_t nc, int32_t mult, int gather) {
    int32_t eo = 0, ao = 0;
    for (int32_t row = 0; row < r->noy; ++row, eo += r->e_row, ao += r->x_row) {
        int32_t ei = eo, ai = ao;
        for (int32_t i = 0; i < r->nox; ++i, ei += r->e_col, ai += r->x_col) {
            int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            const uint32_t *w = wp;
            if (gather) {
                const int8_t *ep = e + ei;
                for (int32_t q = 0; q < nq; ++q, w += 8) {
                    const int32_t *o = qoff + 4 * q;
                    const uint32_t ea = mt_pkhbt16((uint32_t)(int32_t)ep[o[0]], (uint32_t)(int32_t)ep[o[2]]);
                    const uint32_t eb = mt_pkhbt16((uint32_t)(int32_t)ep[o[1]], (uint32_t)(int32_t)ep[o[3]]);
                    s0 = mt_smlad(ea, w[0], s0);
                    s1 = mt_smlad(ea, w[1], s1);
                    s2 = mt_smlad(ea, w[2], s2);
                    s3 = mt_smlad(ea, w[3], s3);
                    s0 = mt_smlad(eb, w[4], s0);
                    s1 = mt_smlad(eb, w[5], s1);
                    s2 = mt_smlad(eb, w[6], s2);
                    s3 = mt_smlad(eb, w[7], s3);
                }
            } else {
                for (int32_t q = 0; q < nq; ++q, w += 8) {
                    const uint32_t ew = mt_load_u32(e + ei + qoff[4 * q]);
                    const uint32_t ea = mt_sxtb16(ew), eb = mt_sxtb16_ror8(ew);
                    s0 = mt_smlad(ea, w[0], s0);
                    s1 = mt_smlad(ea, w[1], s1);
                    s2 = mt_smlad(ea, w[2], s2);
                    s3 = mt_smlad(ea, w[3], s3);
                    s0 = mt_smlad(eb, w[4], s0);
                    s1 = mt_smlad(eb, w[5], s1);
                    s2 = mt_smlad(eb, w[6], s2);
                    s3 = mt_smlad(eb, w[7], s3);
                }
            }
            int32_t *a = acc + ai;
            a[0] += s0 * mult;
            if (nc > 1) {
                a[1] += s1 * mult;
                if (nc > 2) {
                    a[2] += s2 * mult;
                    if (nc > 3) {
                        a[3] += s3 * mult;
                    }
                }
            }
        }
    }
}

#endif

// The tap's valid output rectangle and its e / acc bases (offsets of the
// first position; 0 when empty).
static void tap_rect(const mt_conv2d_params_t *p, const mt_geom_t *g, int32_t ky, int32_t kx, mt_rect_t *r,
                     int32_t *eb, int32_t *xb) {
    int32_t oy0, oy1, ox0, ox1;
    out_range(ky, p->stride_h, p->pad_top, p->in_h, p->out_h, &oy0, &oy1);
    out_range(kx, p->stride_w, p->pad_left, p->in_w, p->out_w, &ox0, &ox1);
    r->nox = ox1 - ox0;
    r->noy = r->nox > 0 ? oy1 - oy0 : 0;
    if (r->noy == 0) {
        r->nox = 0;
    }
    // Steps only where there is a next column / row (bounded there).
    r->e_col = p->out_c;
    r->x_col = r->nox > 1 ? p->stride_w * p->in_c : 0;
    r->e_row = p->out_w * p->out_c;
    r->x_row = r->noy > 1 ? p->stride_h * g->x_row : 0;
    *eb = *xb = 0;
    if (r->noy > 0) {
        *eb = (oy0 * p->out_w + ox0) * p->out_c;
        *xb = ((oy0 * p->stride_h - p->pad_top + ky) * p->in_w + ox0 * p->stride_w - p->pad_left + kx) * p->in_c;
    }
}

// Scatter of the output channels outside whole quads (opg % 4 of each group;
// for depthwise, the channels from oc_from on): per position,
// acc[window row] += (e * wr) * w.
static void gi_singles(const mt_conv2d_params_t *p, const mt_geom_t *g, const int8_t *e, const int8_t *w,
                       const int32_t *wr, const uint8_t *mask, int32_t oc_from, int32_t *acc) {
    for (int32_t ky = 0; ky < p->k_h; ++ky) {
        for (int32_t kx = 0; kx < p->k_w; ++kx) {
            mt_rect_t r;
            int32_t eb, ab;
            tap_rect(p, g, ky, kx, &r, &eb, &ab);
            const int32_t wt = ky * g->w_row + kx * g->cpg;
            for (int32_t gi = 0; gi < p->groups; ++gi) {
                for (int32_t oc = gi * g->opg + (g->opg & ~3); oc < (gi + 1) * g->opg; ++oc) {
                    if (oc < oc_from || !oc_on(mask, oc) || wr[oc] == 0) {
                        continue;
                    }
                    const int8_t *wo = w + oc * g->w_oc + wt;
                    int32_t eo = eb + oc, ao = ab + gi * g->cpg;
                    for (int32_t row = 0; row < r.noy; ++row, eo += r.e_row, ao += r.x_row) {
                        int32_t ei = eo, ai = ao;
                        for (int32_t i = 0; i < r.nox; ++i, ei += r.e_col, ai += r.x_col) {
                            const int32_t ev = e[ei];
                            if (ev != 0) {
                                axpy_w_run(acc + ai, wo, g->cpg, ev * wr[oc]);
                            }
                        }
                    }
                }
            }
        }
    }
}

// ---- Depthwise (one input and one output channel per group) ----
// Grad input, tap-major over channel quads: acc[in pos, c] += e[out pos, c] *
// w[c, tap] for four channels per error word (unpacked to channels 0, 2 and
// 1, 3 against the tap's packed weights of those channels); then each
// channel's sum is scaled by its wr once (all its terms carry the same wr;
// |sum| <= k_h * k_w * 16384, times wr within mt_wr_check's bound). Channels
// past the last whole quad go through gi_singles.
#define MT_DW_QUADS 64  // channel quads per tap chunk: 2 words each, 512 bytes

// acc[pos, quad] += e[pos, quad] . w[quad] over the rectangle, for the nq
// quads at channel offsets qoff[] with packed weights wp[2 q], wp[2 q + 1].
static MT_NOINLINE void dw_rect(const int8_t *e, int32_t *acc, const mt_rect_t *r, const uint32_t *wp,
                                const int32_t *qoff, int32_t nq) {
    int32_t eo = 0, ao = 0;
    for (int32_t row = 0; row < r->noy; ++row, eo += r->e_row, ao += r->x_row) {
        int32_t ei = eo, ai = ao;
        for (int32_t i = 0; i < r->nox; ++i, ei += r->e_col, ai += r->x_col) {
            const int8_t *ep = e + ei;
            int32_t *ap = acc + ai;
            for (int32_t q = 0; q < nq; ++q) {
                const int32_t o = qoff[q];
                const uint32_t ew = mt_load_u32(ep + o);
                const uint32_t ea = mt_sxtb16(ew), eb = mt_sxtb16_ror8(ew);
                // all loads before the stores (acc may alias wp as far as C knows)
                const uint32_t w0 = wp[2 * q], w1 = wp[2 * q + 1];
                int32_t *a = ap + o;
                const int32_t a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
                a[0] = mt_smlabb(ea, w0, a0);
                a[1] = mt_smlabb(eb, w1, a1);
                a[2] = mt_smlatt(ea, w0, a2);
                a[3] = mt_smlatt(eb, w1, a3);
            }
        }
    }
}

static void gi_depthwise(const mt_conv2d_params_t *p, const mt_geom_t *g, const int8_t *e, const int8_t *w,
                         const int32_t *wr, const uint8_t *mask, int32_t *acc) {
    const int32_t C = p->in_c, kk = p->k_h * p->k_w;
    uint32_t wp[2 * MT_DW_QUADS];
    int32_t qoff[MT_DW_QUADS];
    for (int32_t ky = 0; ky < p->k_h; ++ky) {
        for (int32_t kx = 0; kx < p->k_w; ++kx) {
            mt_rect_t r;
            int32_t eb, ab;
            tap_rect(p, g, ky, kx, &r, &eb, &ab);
            if (r.noy == 0) {
                continue;
            }
            const int32_t t = ky * p->k_w + kx;
            for (int32_t c = 0; c + 4 <= C;) {
                int32_t nq = 0;
                for (; c + 4 <= C && nq < MT_DW_QUADS; c += 4) {
                    int32_t v[4];
                    uint32_t any = 0;
                    for (int32_t h = 0; h < 4; ++h) {
                        const int32_t on = oc_on(mask, c + h) && wr[c + h] != 0;
                        v[h] = on ? w[(c + h) * kk + t] : 0;
                        any |= (uint32_t)on;
                    }
                    if (any) {
                        wp[2 * nq] = mt_pack16(v[0], v[2]);
                        wp[2 * nq + 1] = mt_pack16(v[1], v[3]);
                        qoff[nq++] = c;
                    }
                }
                if (nq > 0) {
                    dw_rect(e + eb, acc + ab, &r, wp, qoff, nq);
                }
            }
        }
    }
    const int32_t n = p->in_h * p->in_w * C, cq = C & ~3;
    for (int32_t i = 0; i < n; i += C) {
        for (int32_t c = 0; c < cq; ++c) {
            acc[i + c] *= oc_on(mask, c) ? wr[c] : 0;
        }
    }
}

// ---- Masked grad input, groups == 1: the selected output channels four at a
// time (a sparse update keeps few of them). Per position the four products
// e * wr (int32) are formed once; each input channel of the tap then takes
// them in 32-bit multiply-accumulates against the four weight runs, so wr is
// not split into halfword digits (one pass, where the packed path needs one
// per digit) and nothing is packed. Padding channels of a last short group
// have wr 0. Sums are exact in any order (mt_wr_check bounds every partial
// sum of the terms e * wr * w).
typedef struct {
    const int8_t *w[4];  // the tap's weight runs (in_c each)
    int32_t eo[4];       // channel offsets in an error row
    int32_t wr[4];
    int32_t n;  // in_c
} mt_sel4_t;

static MT_NOINLINE void gi_sel_rect(const int8_t *e, int32_t *acc, const mt_rect_t *r, const mt_sel4_t *s) {
    const int8_t *w0 = s->w[0], *w1 = s->w[1], *w2 = s->w[2], *w3 = s->w[3];
    const int32_t n = s->n;
    int32_t eo = 0, ao = 0;
    for (int32_t row = 0; row < r->noy; ++row, eo += r->e_row, ao += r->x_row) {
        int32_t ei = eo, ai = ao;
        for (int32_t i = 0; i < r->nox; ++i, ei += r->e_col, ai += r->x_col) {
            const int8_t *ep = e + ei;
            const int32_t v0 = ep[s->eo[0]] * s->wr[0], v1 = ep[s->eo[1]] * s->wr[1];
            const int32_t v2 = ep[s->eo[2]] * s->wr[2], v3 = ep[s->eo[3]] * s->wr[3];
            if ((v0 | v1 | v2 | v3) == 0) {
                continue;
            }
            int32_t *a = acc + ai;
            for (int32_t c = 0; c < n; ++c) {
                a[c] += v0 * w0[c] + v1 * w1[c] + v2 * w2[c] + v3 * w3[c];
            }
        }
    }
}

// The same sums when every product e * wr fits a halfword (wr <= 256:
// -32768 <= e * wr <= 32512; R = 8 makes the top ratio 256 for 3x3 convs of
// 32 channels): the four weight runs of the tap packed into halfword pairs
// (wp[2 c] = w0, w1; wp[2 c + 1] = w2, w3) of up to MT_SEL_CHUNK input
// channels, then per position and input channel two dual multiply-adds.
#define MT_SEL_CHUNK 64

static MT_NOINLINE void gi_sel_rect_p(const int8_t *e, int32_t *acc, const mt_rect_t *r, const mt_sel4_t *s) {
    uint32_t wp[2 * MT_SEL_CHUNK];
    // locals: acc stores may alias the struct's int32 fields, so GCC reloaded them every position
    const int32_t o0 = s->eo[0], o1 = s->eo[1], o2 = s->eo[2], o3 = s->eo[3];
    const int32_t r0 = s->wr[0], r1 = s->wr[1], r2 = s->wr[2], r3 = s->wr[3];
    const int32_t nox = r->nox, noy = r->noy, e_col = r->e_col, a_col = r->x_col;
    for (int32_t c0 = 0; c0 < s->n; c0 += MT_SEL_CHUNK) {
        const int32_t n = s->n - c0 < MT_SEL_CHUNK ? s->n - c0 : MT_SEL_CHUNK;
        for (int32_t c = 0; c < n; ++c) {
            wp[2 * c] = mt_pack16(s->w[0][c0 + c], s->w[1][c0 + c]);
            wp[2 * c + 1] = mt_pack16(s->w[2][c0 + c], s->w[3][c0 + c]);
        }
        int32_t eo = 0, ao = c0;
        for (int32_t row = 0; row < noy; ++row, eo += r->e_row, ao += r->x_row) {
            int32_t ei = eo, ai = ao;
            for (int32_t i = 0; i < nox; ++i, ei += e_col, ai += a_col) {
                const int8_t *ep = e + ei;
                const int32_t v0 = ep[o0] * r0, v1 = ep[o1] * r1, v2 = ep[o2] * r2, v3 = ep[o3] * r3;
                if ((v0 | v1 | v2 | v3) == 0) {
                    continue;
                }
                const uint32_t v01 = mt_pack16(v0, v1), v23 = mt_pack16(v2, v3);
                int32_t *a = acc + ai;
                int32_t c = 0;
#if MT_DSP && defined(__thumb2__)
                if (n >= 2) {  // two input channels a turn in one asm loop (the C loop spilled)
                    uint32_t pa = (uint32_t)(uintptr_t)a, pw = (uint32_t)(uintptr_t)wp, t0, t1, t2, t3, t4, t5;
                    const uint32_t pend = pa + 4u * (uint32_t)(n & ~1);
                    __asm__ volatile("1:\n\t"
                                     "ldrd %[t0], %[t1], [%[pa]]\n\t"
                                     "ldrd %[t2], %[t3], [%[pw]], #8\n\t"
                                     "ldrd %[t4], %[t5], [%[pw]], #8\n\t"
                                     "smlad %[t0], %[v01], %[t2], %[t0]\n\t"
                                     "smlad %[t0], %[v23], %[t3], %[t0]\n\t"
                                     "smlad %[t1], %[v01], %[t4], %[t1]\n\t"
                                     "smlad %[t1], %[v23], %[t5], %[t1]\n\t"
                                     "strd %[t0], %[t1], [%[pa]], #8\n\t"
                                     "cmp %[pa], %[pend]\n\t"
                                     "bne 1b\n\t"
                                     : [pa] "+r"(pa), [pw] "+r"(pw), [t0] "=&r"(t0), [t1] "=&r"(t1), [t2] "=&r"(t2),
                                       [t3] "=&r"(t3), [t4] "=&r"(t4), [t5] "=&r"(t5)
                                     : [v01] "r"(v01), [v23] "r"(v23), [pend] "r"(pend)
                                     : "cc", "memory");
                    (void)t2, (void)t3, (void)t4, (void)t5;
                    c = n & ~1;
                }
#endif
                for (; c + 2 <= n; c += 2) {  // two input channels a turn
                    const int32_t x0 = mt_smlad(v23, wp[2 * c + 1], mt_smlad(v01, wp[2 * c], a[c]));
                    const int32_t x1 = mt_smlad(v23, wp[2 * c + 3], mt_smlad(v01, wp[2 * c + 2], a[c + 1]));
                    a[c] = x0;
                    a[c + 1] = x1;
                }
                if (c < n) {
                    a[c] = mt_smlad(v23, wp[2 * c + 1], mt_smlad(v01, wp[2 * c], a[c]));
                }
            }
        }
    }
}

static void gi_selected(const mt_conv2d_params_t *p, const mt_geom_t *g, const int8_t *e, const int8_t *w,
                        const int32_t *wr, const uint8_t *mask, int32_t *acc) {
    int32_t oc = 0;
    while (oc < p->out_c) {
        int32_t ch[4], n = 0;
        for (; oc < p->out_c && n < 4; ++oc) {
            if (mask[oc] && wr[oc] != 0) {
                ch[n++] = oc;
            }
        }
        if (n == 0) {
            break;
        }
        mt_sel4_t s;
        s.n = p->in_c;
        int half = MT_DSP;  // every e * wr fits a halfword (SMLAD pays only where it is one instruction)
        for (int32_t h = 0; h < 4; ++h) {
            s.eo[h] = ch[h < n ? h : 0];
            s.wr[h] = h < n ? wr[ch[h]] : 0;
            half &= s.wr[h] <= 256;
        }
        for (int32_t ky = 0; ky < p->k_h; ++ky) {
            for (int32_t kx = 0; kx < p->k_w; ++kx) {
                mt_rect_t r;
                int32_t eb, ab;
                tap_rect(p, g, ky, kx, &r, &eb, &ab);
                if (r.noy == 0) {
                    continue;
                }
                const int32_t wt = ky * g->w_row + kx * g->cpg;
                for (int32_t h = 0; h < 4; ++h) {
                    s.w[h] = w + s.eo[h] * g->w_oc + wt;
                }
                if (half) {
                    gi_sel_rect_p(e + eb, acc + ab, &r, &s);
                } else {
                    gi_sel_rect(e + eb, acc + ab, &r, &s);
                }
            }
        }
    }
}

// Masked depthwise: each selected channel alone, tap by tap, with its ratio
// folded into the tap's weight (|wr * w| < 2^24): acc[in pos, c] += e[out pos,
// c] * (wr[c] * w[c, tap]). The same integers as the quad path's
// (sum e * w) * wr, without a pass over the channels that are off.
// Kernels of up to this many taps go position-major (the tap weights times
// wr on the stack): the error of a selected channel is read once per output
// position, zero errors (a ReLU's zeros) cost a test, and a small output (7x7)
// pays no per-tap row loops.
#define MT_DW_SEL_TAPS 25

static void gi_dw_selected(const mt_conv2d_params_t *p, const mt_geom_t *g, const int8_t *e, const int8_t *w,
                           const int32_t *wr, const uint8_t *mask, int32_t *acc) {
    const int32_t kk = p->k_h * p->k_w;
    for (int32_t c = 0; c < p->out_c; ++c) {
        if (!mask[c] || wr[c] == 0) {
            continue;
        }
        if (kk <= MT_DW_SEL_TAPS) {
            int32_t m[MT_DW_SEL_TAPS];
            for (int32_t t = 0; t < kk; ++t) {
                m[t] = wr[c] * w[c * kk + t];
            }
            const int32_t C = p->in_c;
            int32_t ei = c;
            for (int32_t oy = 0; oy < p->out_h; ++oy) {
                const int32_t iy0 = oy * p->stride_h - p->pad_top;
                int32_t ky0, ky1;
                tap_range(iy0, p->k_h, p->in_h, &ky0, &ky1);
                for (int32_t ox = 0; ox < p->out_w; ++ox, ei += p->out_c) {
                    const int32_t ev = e[ei];
                    if (ev == 0) {
                        continue;
                    }
                    const int32_t ix0 = ox * p->stride_w - p->pad_left;
                    int32_t kx0, kx1;
                    tap_range(ix0, p->k_w, p->in_w, &kx0, &kx1);
                    int32_t row = ((iy0 + ky0) * p->in_w + ix0 + kx0) * C + c;
                    for (int32_t ky = ky0; ky < ky1; ++ky, row += g->x_row) {
                        const int32_t *mk = m + ky * p->k_w;
                        int32_t ai = row;
                        for (int32_t kx = kx0; kx < kx1; ++kx, ai += C) {
                            acc[ai] += ev * mk[kx];
                        }
                    }
                }
            }
            continue;
        }
        for (int32_t ky = 0; ky < p->k_h; ++ky) {
            for (int32_t kx = 0; kx < p->k_w; ++kx) {
                mt_rect_t r;
                int32_t eb, ab;
                tap_rect(p, g, ky, kx, &r, &eb, &ab);
                const int32_t m = wr[c] * w[c * kk + ky * p->k_w + kx];
                if (r.noy == 0 || m == 0) {
                    continue;
                }
                int32_t eo = eb + c, ao = ab + c;
                for (int32_t row = 0; row < r.noy; ++row, eo += r.e_row, ao += r.x_row) {
                    int32_t ei = eo, ai = ao;
                    for (int32_t i = 0; i < r.nox; ++i, ei += r.e_col, ai += r.x_col) {
                        acc[ai] += e[ei] * m;
                    }
                }
            }
        }
    }
}

static void gi_blocked(const mt_conv2d_params_t *p, const int8_t *e, const int8_t *w, const int32_t *wr,
                       const uint8_t *mask, int32_t *acc) {
    mt_geom_t g;
    geom_init(p, &g);
    if (g.cpg == 1 && g.opg == 1) {
        if (mask) {
            gi_dw_selected(p, &g, e, w, wr, mask, acc);
            return;
        }
        gi_depthwise(p, &g, e, w, wr, mask, acc);
        gi_singles(p, &g, e, w, wr, mask, p->in_c & ~3, acc);
        return;
    }
    if (mask && p->groups == 1) {
        gi_selected(p, &g, e, w, wr, mask, acc);
        return;
    }
    // Dense: whole quads of consecutive channels (the rest scattered); masked:
    // quads of the channels that are on, gathered byte by byte, so dropped
    // channels cost nothing.
    const int gather = mask != 0;
    const int32_t nquads = g.opg >> 2, qspan = gather ? g.opg : 4 * nquads;
    if (!gather) {
        gi_singles(p, &g, e, w, wr, mask, 0, acc);
    }
    if (qspan == 0) {
        return;
    }
    // Digits of wr over the channels of the quads that are on.
    uint32_t orv = 0;
    for (int32_t gi = 0; gi < p->groups; ++gi) {
        for (int32_t oc = gi * g.opg, end = oc + qspan; oc < end; ++oc) {
            if (oc_on(mask, oc)) {
                orv |= (uint32_t)wr[oc];
            }
        }
    }
    if (orv == 0) {
        return;
    }
    uint32_t k = 0, top = 0;
    while (!((orv >> k) & 1u)) {
        ++k;
    }
    for (int32_t gi = 0; gi < p->groups; ++gi) {
        for (int32_t oc = gi * g.opg, end = oc + qspan; oc < end; ++oc) {
            if (oc_on(mask, oc) && ((uint32_t)wr[oc] >> k) > top) {
                top = (uint32_t)wr[oc] >> k;
            }
        }
    }
    // One pass when wr >> k <= 256, else base-256 digits (wr <= 131071: <= 3).
    const uint32_t dmask = top <= 256u ? 0xFFFFFFFFu : 0xFFu;
    const int32_t npass = top <= 256u ? 1 : (top < 65536u ? 2 : 3);
    uint32_t wp[8 * MT_GI_QUADS];
    int32_t qoff[4 * MT_GI_QUADS];
    for (int32_t pass = 0; pass < npass; ++pass) {
        const uint32_t sh = k + 8u * (uint32_t)pass;
        const int32_t mult = (int32_t)((uint32_t)1 << sh);
        for (int32_t ky = 0; ky < p->k_h; ++ky) {
            for (int32_t kx = 0; kx < p->k_w; ++kx) {
                mt_rect_t r;
                int32_t eb, ab;
                tap_rect(p, &g, ky, kx, &r, &eb, &ab);
                if (r.noy == 0) {
                    continue;
                }
                const int32_t wt = ky * g.w_row + kx * g.cpg;
                for (int32_t gi = 0; gi < p->groups; ++gi) {
                    for (int32_t cb = 0; cb < g.cpg; cb += 4) {
                        const int32_t nc = g.cpg - cb < 4 ? g.cpg - cb : 4;
                        int32_t oc = gi * g.opg;
                        const int32_t oc_end = oc + qspan;
                        while (oc < oc_end) {
                            // pack up to MT_GI_QUADS quads that have a channel on
                            int32_t nq = 0;
                            while (oc < oc_end && nq < MT_GI_QUADS) {
                                int32_t *ch = qoff + 4 * nq, nch = 0;
                                if (gather) {
                                    for (; oc < oc_end && nch < 4; ++oc) {
                                        if (mask[oc]) {
                                            ch[nch++] = oc;
                                        }
                                    }
                                } else {
                                    for (; nch < 4; ++nch, ++oc) {
                                        ch[nch] = oc;
                                    }
                                }
                                uint32_t any = 0;
                                int32_t wv[4][4];  // [channel in quad][ci]
                                for (int32_t h = 0; h < 4; ++h) {
                                    if (h >= nch) {  // padding: a real channel with weight 0
                                        ch[h] = nch ? ch[0] : gi * g.opg;
                                    }
                                    const int32_t c_ = ch[h];
                                    const int32_t d =
                                        h < nch && oc_on(mask, c_) ? (int32_t)(((uint32_t)wr[c_] >> sh) & dmask) : 0;
                                    any |= (uint32_t)d;
                                    for (int32_t c = 0; c < 4; ++c) {
                                        wv[h][c] = c < nc ? d * (int32_t)w[c_ * g.w_oc + wt + cb + c] : 0;
                                    }
                                }
                                if (!any) {
                                    continue;
                                }
                                uint32_t *wq = wp + 8 * nq;
                                for (int32_t c = 0; c < 4; ++c) {
                                    wq[c] = mt_pack16(wv[0][c], wv[2][c]);
                                    wq[4 + c] = mt_pack16(wv[1][c], wv[3][c]);
                                }
                                ++nq;
                            }
                            if (nq > 0) {
                                gi_rect(e + eb, acc + ab + gi * g.cpg + cb, &r, wp, qoff, nq, nc, mult, gather);
                            }
                        }
                    }
                }
            }
        }
    }
}
#endif

// Cortex-M0 (MT_SOFT_MATH) keeps the position-major scatter: 8 low registers
// and no halfword multiply-accumulates, so the blocks above would spill.
#if MT_SOFT_MATH
// Position-major: tap ranges and window offsets are computed once per output
// position; each (position, oc) first tests the error and the mask, so a
// dropped channel or a zero error costs a byte test and no window work.
int32_t mt_conv2d_s8_grad_input(const mt_conv2d_params_t *p, const int8_t *e, const int8_t *w,
                                const int32_t *wr, const uint8_t *mask, int32_t lo, int32_t hi, int32_t *acc,
                                int8_t *ein) {
    mt_geom_t g;
    geom_init(p, &g);
    const int32_t n = p->in_h * g.x_row;
    for (int32_t i = 0; i < n; ++i) {
        acc[i] = 0;
    }
    int32_t ei = 0;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        for (int32_t ox = 0; ox < p->out_w; ++ox, ei += p->out_c) {
            mt_win_t win;
            win_init(p, &g, oy, ox, &win);
            const int8_t *ep = e + ei;
            int32_t ao = win.x_off, wo = win.w_off, oc = 0;
            for (int32_t gi = 0; gi < p->groups; ++gi, ao += g.cpg) {
                for (int32_t j = 0; j < g.opg; ++j, ++oc, wo += g.w_oc) {
                    const int32_t ev = ep[oc];
                    if (ev == 0 || (mask && !mask[oc])) {
                        continue;
                    }
                    // Each term |ev * wr * w| <= 16384 * max(wr); mt_wr_check
                    // bounds their number per acc element, so no overflow.
                    win_scatter_w(acc, ao, w, wo, ev * wr[oc], &win, g.x_row, p->in_c, g.w_row);
                }
            }
        }
    }
    return mt_dyn_requant_act_s8(acc, (size_t)n, lo, hi, ein);
}
#else
int32_t mt_conv2d_s8_grad_input(const mt_conv2d_params_t *p, const int8_t *e, const int8_t *w,
                                const int32_t *wr, const uint8_t *mask, int32_t lo, int32_t hi, int32_t *acc,
                                int8_t *ein) {
    const int32_t n = p->in_h * p->in_w * p->in_c;
    for (int32_t i = 0; i < n; ++i) {
        acc[i] = 0;
    }
    gi_blocked(p, e, w, wr, mask, acc);
    return mt_dyn_requant_act_s8(acc, (size_t)n, lo, hi, ein);
}
#endif

#if MT_SOFT_MATH
// Zero every row first (masked rows stay 0), then scatter position-major,
// testing the mask and the error before any window work.
void mt_conv2d_s8_grad_weight(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *e,
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
    int32_t ei = 0;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        for (int32_t ox = 0; ox < p->out_w; ++ox, ei += p->out_c) {
            mt_win_t win;
            win_init(p, &g, oy, ox, &win);
            const int8_t *ep = e + ei;
            int32_t xo = win.x_off, go = win.w_off, oc = 0;
            for (int32_t gi = 0; gi < p->groups; ++gi, xo += g.cpg) {
                for (int32_t j = 0; j < g.opg; ++j, ++oc, go += g.w_oc) {
                    const int32_t ev = ep[oc];
                    if (ev == 0 || (mask && !mask[oc])) {
                        continue;
                    }
                    gb[oc] += ev;
                    // <= 65536 terms of |ev * (x - zp)| <= 32640: exact.
                    win_scatter_x(gw, go, x, xo, ev, p->in_zp, &win, g.x_row, p->in_c, g.w_row);
                }
            }
        }
    }
}
#else
// Masked rows are written as zeros (not computed), every other weight once.
void mt_conv2d_s8_grad_weight(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *e,
                           const uint8_t *mask, int32_t *gw, int32_t *gb) {
    if (mask) {
        const int32_t w_oc = p->k_h * p->k_w * (int32_t)mt_udiv_u32((uint32_t)p->in_c, (uint32_t)p->groups);
        for (int32_t oc = 0; oc < p->out_c; ++oc) {
            if (!mask[oc]) {
                gb[oc] = 0;
                for (int32_t i = oc * w_oc, end = i + w_oc; i < end; ++i) {
                    gw[i] = 0;
                }
            }
        }
    }
    const mt_sink_t ow = {gw, 0, 0, 0}, ob = {gb, 0, 0, 0};
    gw_blocked(p, x, e, mask, &ow, &ob);
}
#endif

#if MT_HAS_FLOAT
// Each weight's int32 sum is complete before its single float multiply and
// add, as the contract requires; masked rows untouched. gw / gb row r is
// channel c0 + r: the binding guarantees every channel outside the window is
// masked, so gw_blocked hands the sinks only rows inside it.
void mt_conv2d_s8_grad_weight_f32(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *e,
                               const uint8_t *mask, float w_scale, float b_scale, float *gw, float *gb,
                               int32_t c0) {
    const int32_t w_oc = p->k_h * p->k_w * (int32_t)mt_udiv_u32((uint32_t)p->in_c, (uint32_t)p->groups);
    const mt_sink_t ow = {0, gw, w_scale, c0 * w_oc}, ob = {0, gb, b_scale, c0};
    gw_blocked(p, x, e, mask, &ow, &ob);
}
#endif

// ---------------------------------------------------------------------------
// Dilated convs (docs/numerics.md, "dilation"): tap (ky, kx) of output (oy, ox)
// reads input row oy * stride_h - pad_top + ky * dil_h (likewise columns).
// Plain loops over the taps, kept apart from the blocked kernels above; the
// binding calls them for a 19-int descriptor with a dilation above 1.

// Input position of tap k of output o on one axis, or -1 when it is padding.
static int32_t mt_dil_pos(int32_t o, int32_t stride, int32_t pad, int32_t k, int32_t dil, int32_t n) {
    const int32_t i = o * stride - pad + k * dil;
    return i >= 0 && i < n ? i : -1;
}

void mt_conv2d_dil_s8_forward(const mt_conv2d_dil_params_t *d, const int8_t *x, const int8_t *w,
                              const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y) {
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
                                    const int32_t *wr, const uint8_t *mask, int32_t lo, int32_t hi,
                                    int32_t *acc, int8_t *ein) {
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
static int32_t mt_dil_gw(const mt_conv2d_dil_params_t *d, const int8_t *x, const int8_t *e, int32_t oc,
                         int32_t g, int32_t cpg, int32_t ky, int32_t kx, int32_t ci) {
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
