// conv2d int8 forward (docs/numerics.md); geometry in mt_conv2d.h.
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
// On x86-64 (SSE2) the lanes are output channels instead where the windows
// are small: conv_fwd_lanes (groups == 1) and conv_fwd_dw8 (depthwise).
#define MT_CONV2D_WIN 1
#define MT_CONV2D_BACK 0
#include "mt_conv2d.h"
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


// A window row is either one run (groups == 1: run elements contiguous, or
// depthwise: nkx taps in_c apart) or nkx runs of cpg. The row loops below pick
// the one-call form whenever possible.

// sum over the window of (x - zp) * w; x at offset xo, w at offset wo.
static int32_t win_dot(const int8_t *x, int32_t xo, const int8_t *w, int32_t wo, const mt_win_t *win, int32_t x_row,
                       int32_t x_tap, int32_t w_row, int32_t zp) {
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
static MT_INLINE void dot_2x2_full(const int8_t *xa, int32_t dx, int32_t xr, int32_t nky, const int8_t *wa, int32_t dw,
                                   int32_t run, int32_t *s) {
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
#define MT_RV_TAP(j)                        \
    do {                                    \
        const int32_t u = wa[j], v = wb[j]; \
        int32_t t = x0[j];                  \
        s0 += t * u;                        \
        s1 += t * v;                        \
        t = x1[j];                          \
        s2 += t * u;                        \
        s3 += t * v;                        \
        t = x2[j];                          \
        s4 += t * u;                        \
        s5 += t * v;                        \
        t = x3[j];                          \
        s6 += t * u;                        \
        s7 += t * v;                        \
    } while (0)

static MT_INLINE void dot_4x2_full(const int8_t *xa, int32_t dx, int32_t xr, int32_t nky, const int8_t *wa, int32_t dw,
                                   int32_t run, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    for (int32_t ky = 0, xo = 0; ky < nky; ++ky, xo += xr) {
        const int8_t *x0 = xa + xo, *x1 = x0 + dx, *x2 = x1 + dx, *x3 = x2 + dx, *wb = wa + dw;
        const int8_t *end = wa + run;
        for (const int8_t *end4 = wa + (run & ~3); wa != end4; wa += 4, wb += 4, x0 += 4, x1 += 4, x2 += 4, x3 += 4) {
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
                    const int8_t *xp = x + ((oy * p->stride_h - p->pad_top) * p->in_w) * p->in_c +
                                       (ix0 * p->stride_w - p->pad_left) * p->in_c;
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
#define MAC_LO(acc, x, wp) ((acc) + (x)*mt_lo16((uint32_t)(wp)))
#define MAC_HI(acc, x, wp) ((acc) + (x)*mt_hi16((uint32_t)(wp)))
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

#if MT_SSE2
// mt_rq_out of four int32 lanes, each with its own channel's constants, in
// SSE2 (no per-lane shifts, no signed 32x32 multiply, no 32-bit min / max):
// - acc << left as acc * 2^left, modulo 2^32 (PMULUDQ's low half);
// - a * m + 2^30 of signed a, m from the unsigned product ua * um: modulo
//   2^64 they differ by 2^32 * C, C = (a < 0 ? um : 0) + (m < 0 ? ua : 0),
//   so bits 31..62, which are d, differ by 2 C modulo 2^32;
// - d >> right on ud = d + 2^31 (unsigned): floor(ud * 2^(31 - right) / 2^31)
//   - 2^(31 - right), a 64-bit shift by the same 31 in every lane; the
//   rounding bit from d & mask, the same low bits in ud;
// - the clamp by compare and select.
typedef struct {
    __m128i pl, m, pr, mask, thr, lo, hi, zp;
} mt_rq4_t;

static void mt_rq4_init(mt_rq4_t *v, const mt_rq_t *q) {
    v->pl = _mm_setr_epi32((int32_t)(1u << q[0].left), (int32_t)(1u << q[1].left), (int32_t)(1u << q[2].left),
                           (int32_t)(1u << q[3].left));
    v->m = _mm_setr_epi32(q[0].m, q[1].m, q[2].m, q[3].m);
    v->pr = _mm_setr_epi32((int32_t)(1u << (31 - q[0].right)), (int32_t)(1u << (31 - q[1].right)),
                           (int32_t)(1u << (31 - q[2].right)), (int32_t)(1u << (31 - q[3].right)));
    v->mask = _mm_setr_epi32(q[0].mask, q[1].mask, q[2].mask, q[3].mask);
    v->thr = _mm_setr_epi32(q[0].thr, q[1].thr, q[2].thr, q[3].thr);
    v->lo = _mm_setr_epi32(q[0].lo, q[1].lo, q[2].lo, q[3].lo);
    v->hi = _mm_setr_epi32(q[0].hi, q[1].hi, q[2].hi, q[3].hi);
    v->zp = _mm_setr_epi32(q[0].zp, q[1].zp, q[2].zp, q[3].zp);
}

// Per 32-bit lane: the low 32 bits of (a * b + add) >> 31, a and b unsigned.
static MT_INLINE __m128i mt_sse_mulshr31(__m128i a, __m128i b, __m128i add) {
    const __m128i lo32 = _mm_setr_epi32(-1, 0, -1, 0);
    const __m128i even = _mm_srli_epi64(_mm_add_epi64(_mm_mul_epu32(a, b), add), 31);
    const __m128i odd =
        _mm_srli_epi64(_mm_add_epi64(_mm_mul_epu32(_mm_srli_epi64(a, 32), _mm_srli_epi64(b, 32)), add), 31);
    return _mm_or_si128(_mm_and_si128(even, lo32), _mm_slli_epi64(odd, 32));
}

static MT_INLINE __m128i mt_rq4_out(__m128i acc, const mt_rq4_t *v) {
    const __m128i lo32 = _mm_setr_epi32(-1, 0, -1, 0);
    // a = acc << left: the low halves of the products, lanes 0 2 then 1 3
    const __m128i pe = _mm_mul_epu32(acc, v->pl);
    const __m128i po = _mm_mul_epu32(_mm_srli_epi64(acc, 32), _mm_srli_epi64(v->pl, 32));
    const __m128i a = _mm_or_si128(_mm_and_si128(pe, lo32), _mm_slli_epi64(po, 32));
    const __m128i c =
        _mm_add_epi32(_mm_and_si128(_mm_srai_epi32(a, 31), v->m), _mm_and_si128(_mm_srai_epi32(v->m, 31), a));
    const __m128i d =
        _mm_sub_epi32(mt_sse_mulshr31(a, v->m, _mm_set_epi32(0, 1 << 30, 0, 1 << 30)), _mm_add_epi32(c, c));
    const __m128i sign = _mm_set1_epi32((int32_t)0x80000000u);
    const __m128i sh = _mm_sub_epi32(mt_sse_mulshr31(_mm_xor_si128(d, sign), v->pr, _mm_setzero_si128()), v->pr);
    // round up when (d & mask) > thr + (d < 0); both sides in [0, 2^30]
    const __m128i t = _mm_sub_epi32(v->thr, _mm_srai_epi32(d, 31));
    __m128i r = _mm_sub_epi32(sh, _mm_cmpgt_epi32(_mm_and_si128(d, v->mask), t));
    __m128i k = _mm_cmpgt_epi32(r, v->hi);
    r = _mm_or_si128(_mm_andnot_si128(k, r), _mm_and_si128(k, v->hi));
    k = _mm_cmpgt_epi32(v->lo, r);
    r = _mm_or_si128(_mm_andnot_si128(k, r), _mm_and_si128(k, v->lo));
    return _mm_add_epi32(r, v->zp);
}
#endif

#if MT_SSE2
// x86-64 only: groups == 1 with at most MT_LANE_TAPS taps per window
// (k_h * k_w * in_c), where the vector lanes are output channels: per
// position, the window's x - zp as int16 (0 for a tap outside x, which adds
// nothing, as the valid-tap sums elsewhere), then per tap pair one PMADDWD
// against the weights packed as (tap 2p, tap 2p + 1) for four channels a
// vector, 16 channels per pass. The same exact integer sum
// bias + sum (x - zp) * w: |pair| <= 2 * 255 * 128, at most 288 taps.
// A first layer's few taps are too short for dot_2x2_full's vector loop,
// and here each x is widened once per 16 channels, not once per 2.
#define MT_NARROW_TAPS 16
#define MT_LANE_TAPS 288
static void conv_fwd_lanes(const mt_conv2d_params_t *p, const mt_geom_t *g, const int8_t *x, const int8_t *w,
                           const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y) {
    const int32_t out_c = p->out_c, taps = g->w_oc, k_w = p->k_w, k_h = p->k_h, in_c = p->in_c;
    const int32_t lo = p->act_min - p->out_zp, hi = p->act_max - p->out_zp;
    const int32_t run = k_w * in_c;
    const int32_t pairs = (taps + 1) >> 1, quads = (pairs + 3) >> 2;
    const __m128i zpv = _mm_set1_epi16((int16_t)p->in_zp);
    // few taps (a first layer): each tap by its offset from the window's first
    // element, its pairs built in registers (row runs too short for a vector)
    int32_t toff[MT_NARROW_TAPS], tky[MT_NARROW_TAPS], tkx[MT_NARROW_TAPS];
    const int32_t few = taps <= MT_NARROW_TAPS;
    for (int32_t t = 0, ky = 0, kx = 0, ic = 0; few && t < taps; ++t) {
        tky[t] = ky;
        tkx[t] = kx;
        toff[t] = (ky * p->in_w + kx) * in_c + ic;
        if (++ic == in_c) {
            ic = 0;
            if (++kx == k_w) {
                kx = 0;
                ++ky;
            }
        }
    }
    for (int32_t cb = 0; cb < out_c; cb += 16) {
        const int32_t nb = out_c - cb < 16 ? out_c - cb : 16;
        // weights of channels cb.. as int16 tap pairs, four channels a vector;
        // the taps and channels past the end as 0
        __m128i wp[MT_LANE_TAPS / 2][4];
        for (int32_t q = 0; q < 4 * quads; ++q) {
            for (int32_t gi = 0; gi < 4; ++gi) {
                int16_t v[8];
                for (int32_t j = 0; j < 4; ++j) {
                    const int32_t cj = 4 * gi + j, t = 2 * q;
                    const int32_t wo = (cb + cj) * taps + t;  // an offset: read only for a channel < out_c
                    v[2 * j] = (int16_t)(cj < nb && t < taps ? w[wo] : 0);
                    v[2 * j + 1] = (int16_t)(cj < nb && t + 1 < taps ? w[wo + 1] : 0);
                }
                wp[q][gi] = _mm_setr_epi16(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
            }
        }
        // channels past nb: the constants of channel cb, their outputs never stored
        mt_rq4_t rv[4];
        __m128i bv[4];
        for (int32_t gi = 0; gi < 4; ++gi) {
            mt_rq_t rq[4];
            int32_t bs[4];
            for (int32_t j = 0; j < 4; ++j) {
                const int32_t c = cb + (4 * gi + j < nb ? 4 * gi + j : 0);
                mt_rq_init(&rq[j], mult[c], shift[c], lo, hi, p->out_zp);
                bs[j] = bias[c];
            }
            mt_rq4_init(&rv[gi], rq);
            bv[gi] = _mm_setr_epi32(bs[0], bs[1], bs[2], bs[3]);
        }
        // an offset, not a stepped pointer: nothing points past y after the last position
        int32_t yo = cb;
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            const int32_t by = oy * p->stride_h - p->pad_top;
            for (int32_t ox = 0; ox < p->out_w; ++ox, yo += out_c) {
                const int32_t bx = ox * p->stride_w - p->pad_left;
                // the window as int16 x - zp, row by row; 0 up to a whole vector of pairs
                int16_t xv[MT_LANE_TAPS + 8];
                int32_t kx0, kx1;
                tap_range(bx, k_w, p->in_w, &kx0, &kx1);
                const int32_t v0 = kx0 * in_c, v1 = kx1 * in_c;
                __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
                if (few) {
                    int32_t xs[MT_NARROW_TAPS + 1];
                    const int32_t xo = (by * p->in_w + bx) * in_c;  // an offset only
                    if (by >= 0 && by + k_h <= p->in_h && v0 == 0 && v1 == run) {
                        for (int32_t t = 0; t < taps; ++t) {
                            xs[t] = x[xo + toff[t]] - p->in_zp;
                        }
                    } else {
                        for (int32_t t = 0; t < taps; ++t) {
                            const int32_t iy = by + tky[t], ix = bx + tkx[t];
                            const int32_t in = iy >= 0 && iy < p->in_h && ix >= 0 && ix < p->in_w;
                            xs[t] = in ? x[xo + toff[t]] - p->in_zp : 0;
                        }
                    }
                    xs[taps] = 0;
                    for (int32_t q = 0; q < pairs; ++q) {
                        // (x[2q] - zp, x[2q + 1] - zp) as an int16 pair in every lane
                        const __m128i xb = _mm_set1_epi32(
                            (int32_t)(((uint32_t)xs[2 * q] & 0xFFFFu) | ((uint32_t)xs[2 * q + 1] << 16)));
                        a0 = _mm_add_epi32(a0, _mm_madd_epi16(xb, wp[q][0]));
                        a1 = _mm_add_epi32(a1, _mm_madd_epi16(xb, wp[q][1]));
                        a2 = _mm_add_epi32(a2, _mm_madd_epi16(xb, wp[q][2]));
                        a3 = _mm_add_epi32(a3, _mm_madd_epi16(xb, wp[q][3]));
                    }
                } else {
                    for (int32_t ky = 0, t = 0; ky < k_h; ++ky, t += run) {
                        const int32_t iy = by + ky;
                        if (iy < 0 || iy >= p->in_h) {
                            for (int32_t i = 0; i < run; ++i) {
                                xv[t + i] = 0;
                            }
                            continue;
                        }
                        const int32_t xo = (iy * p->in_w + bx) * in_c;  // an offset only: xo + v0 >= 0
                        int32_t i = 0;
                        for (; i < v0; ++i) {
                            xv[t + i] = 0;
                        }
                        for (; i + 16 <= v1; i += 16) {
                            __m128i l, h;
                            mt_sse_widen(mt_sse_load(x + xo + i), zpv, &l, &h);
                            _mm_storeu_si128((__m128i *)(void *)(xv + t + i), l);
                            _mm_storeu_si128((__m128i *)(void *)(xv + t + i + 8), h);
                        }
                        for (; i < v1; ++i) {
                            xv[t + i] = (int16_t)(x[xo + i] - p->in_zp);
                        }
                        for (; i < run; ++i) {
                            xv[t + i] = 0;
                        }
                    }
                    for (int32_t t = taps; t < 8 * quads; ++t) {
                        xv[t] = 0;
                    }
                    for (int32_t u = 0; u < quads; ++u) {
                        const __m128i xq = _mm_loadu_si128((const __m128i *)(const void *)(xv + 8 * u));
                        const __m128i *wq = wp[4 * u];
#define MT_LANE_PAIR(k, sel)                                         \
    do {                                                             \
        const __m128i xb = _mm_shuffle_epi32(xq, sel);               \
        a0 = _mm_add_epi32(a0, _mm_madd_epi16(xb, wq[4 * (k) + 0])); \
        a1 = _mm_add_epi32(a1, _mm_madd_epi16(xb, wq[4 * (k) + 1])); \
        a2 = _mm_add_epi32(a2, _mm_madd_epi16(xb, wq[4 * (k) + 2])); \
        a3 = _mm_add_epi32(a3, _mm_madd_epi16(xb, wq[4 * (k) + 3])); \
    } while (0)
                        MT_LANE_PAIR(0, 0x00);
                        MT_LANE_PAIR(1, 0x55);
                        MT_LANE_PAIR(2, 0xAA);
                        MT_LANE_PAIR(3, 0xFF);
#undef MT_LANE_PAIR
                    }
                }
                // |bias| <= 2^30, |sum| < 2^25: exact; the outputs in [-128, 127]
                a0 = mt_rq4_out(_mm_add_epi32(a0, bv[0]), &rv[0]);
                a1 = mt_rq4_out(_mm_add_epi32(a1, bv[1]), &rv[1]);
                a2 = mt_rq4_out(_mm_add_epi32(a2, bv[2]), &rv[2]);
                a3 = mt_rq4_out(_mm_add_epi32(a3, bv[3]), &rv[3]);
                const __m128i o = _mm_packs_epi16(_mm_packs_epi32(a0, a1), _mm_packs_epi32(a2, a3));
                if (nb == 16) {
                    _mm_storeu_si128((__m128i *)(void *)(y + yo), o);
                } else {
                    int8_t ob[16];
                    _mm_storeu_si128((__m128i *)(void *)ob, o);
                    for (int32_t j = 0; j < nb; ++j) {
                        y[yo + j] = ob[j];
                    }
                }
            }
        }
    }
}
#endif

#if MT_SSE2
// x86-64 only: depthwise (cpg == opg == 1) with channels a multiple of 8 and
// at most MT_NARROW_TAPS taps. Eight channels a pass, the lanes channels: per
// position each tap's eight x - zp as int16 (0 outside x), two taps
// interleaved per PMADDWD against the weights interleaved the same way; the
// same exact sum as conv_fwd_dw, requantised four channels a vector.
static void conv_fwd_dw8(const mt_conv2d_params_t *p, const mt_geom_t *g, const int8_t *x, const int8_t *w,
                         const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y) {
    const int32_t C = p->in_c, nk = g->w_oc, k_w = p->k_w;
    const int32_t lo = p->act_min - p->out_zp, hi = p->act_max - p->out_zp;
    const __m128i zp = _mm_set1_epi16((int16_t)p->in_zp), z = _mm_setzero_si128();
    const int32_t pairs = (nk + 1) >> 1;
    for (int32_t cb = 0; cb < C; cb += 8) {
        __m128i wl[MT_NARROW_TAPS / 2], wh[MT_NARROW_TAPS / 2], bv[2];
        mt_rq4_t rv[2];
        for (int32_t q = 0; q < pairs; ++q) {
            int16_t v[16];
            for (int32_t j = 0; j < 8; ++j) {
                const int8_t *wc = w + (cb + j) * nk;
                v[2 * j] = wc[2 * q];
                v[2 * j + 1] = (int16_t)(2 * q + 1 < nk ? wc[2 * q + 1] : 0);
            }
            wl[q] = _mm_setr_epi16(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
            wh[q] = _mm_setr_epi16(v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15]);
        }
        for (int32_t h = 0; h < 2; ++h) {
            mt_rq_t rq[4];
            for (int32_t j = 0; j < 4; ++j) {
                const int32_t c = cb + 4 * h + j;
                mt_rq_init(&rq[j], mult[c], shift[c], lo, hi, p->out_zp);
            }
            mt_rq4_init(&rv[h], rq);
            bv[h] = _mm_loadu_si128((const __m128i *)(const void *)(bias + cb + 4 * h));
        }
        int32_t yo = cb;  // an offset, as in conv_fwd_lanes
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            const int32_t by = oy * p->stride_h - p->pad_top;
            for (int32_t ox = 0; ox < p->out_w; ++ox, yo += C) {
                const int32_t bx = ox * p->stride_w - p->pad_left;
                __m128i xt[MT_NARROW_TAPS + 1];
                for (int32_t t = 0, ky = 0, kx = 0; t < nk; ++t) {
                    const int32_t iy = by + ky, ix = bx + kx;
                    if (iy >= 0 && iy < p->in_h && ix >= 0 && ix < p->in_w) {
                        const __m128i v =
                            _mm_loadl_epi64((const __m128i *)(const void *)(x + (iy * p->in_w + ix) * C + cb));
                        xt[t] = _mm_sub_epi16(_mm_unpacklo_epi8(v, _mm_cmpgt_epi8(z, v)), zp);
                    } else {
                        xt[t] = z;
                    }
                    if (++kx == k_w) {
                        kx = 0;
                        ++ky;
                    }
                }
                xt[nk] = z;
                __m128i a0 = z, a1 = z;
                for (int32_t q = 0; q < pairs; ++q) {
                    a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi16(xt[2 * q], xt[2 * q + 1]), wl[q]));
                    a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi16(xt[2 * q], xt[2 * q + 1]), wh[q]));
                }
                a0 = mt_rq4_out(_mm_add_epi32(a0, bv[0]), &rv[0]);
                a1 = mt_rq4_out(_mm_add_epi32(a1, bv[1]), &rv[1]);
                const __m128i o = _mm_packs_epi32(a0, a1);
                _mm_storel_epi64((__m128i *)(void *)(y + yo), _mm_packs_epi16(o, o));
            }
        }
    }
}
#endif

void mt_conv2d_s8_forward(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                          const int32_t *mult, const int32_t *shift, int8_t *y) {
    mt_geom_t g;
    geom_init(p, &g);
    if (p->groups == 1) {
#if MT_SSE2
        if (g.w_oc <= MT_LANE_TAPS) {
            conv_fwd_lanes(p, &g, x, w, bias, mult, shift, y);
            return;
        }
#endif
        conv_fwd_dense(p, &g, x, w, bias, mult, shift, y);
    } else if (g.cpg == 1 && g.opg == 1) {
#if MT_SSE2
        if ((p->in_c & 7) == 0 && g.w_oc <= MT_NARROW_TAPS) {
            conv_fwd_dw8(p, &g, x, w, bias, mult, shift, y);
            return;
        }
#endif
        conv_fwd_dw(p, &g, x, w, bias, mult, shift, y);
    } else {
        conv_fwd_groups(p, &g, x, w, bias, mult, shift, y);
    }
}

// Output rows [r0, r1) are the whole output of a conv over the input rows they
// read: start at input row r0 * stride_h - pad_top (or keep the part of the top
// padding that is left), with the rows below as the input's height. Every
// output element is the same exact integer sum as in the full call.
void mt_conv2d_s8_forward_rows(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                               const int32_t *mult, const int32_t *shift, int32_t r0, int32_t r1, int8_t *y) {
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
