// conv2d int8 input gradient (docs/numerics.md); geometry in mt_conv2d.h.
#include "mt_kernels.h"
#define MT_CONV2D_WIN MT_SOFT_MATH  // the Cortex-M0 scatter walks windows
#define MT_CONV2D_BACK 1
#include "mt_conv2d.h"
#define MT_RUNS_SCATTER_ONLY 1
#include "mt_runs.h"

#if MT_SOFT_MATH  // the Cortex-M0 input gradient (scatter)
// a[i * as] += s * w[i], i < n.
static MT_NOINLINE void axpy_w_strided(int32_t *a, int32_t as, const int8_t *w, int32_t n, int32_t s) {
    int32_t ai = 0;
    for (const int8_t *end = w + n; w != end; ++w, ai += as) {
        a[ai] += s * (int32_t)*w;
    }
}
#endif

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
static void tap_rect(const mt_conv2d_params_t *p, const mt_geom_t *g, int32_t ky, int32_t kx, mt_rect_t *r, int32_t *eb,
                     int32_t *xb) {
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
// quads at channel offsets qoff[] with packed weights wp[2 q], wp[2 q + 1]:
// quad by quad, so that its two weight words stay in registers over the
// rectangle.
static MT_NOINLINE void dw_rect(const int8_t *e, int32_t *acc, const mt_rect_t *r, const uint32_t *wp,
                                const int32_t *qoff, int32_t nq) {
    const int32_t nox = r->nox, e_col = r->e_col, x_col = r->x_col;
    for (int32_t q = 0; q < nq; ++q) {
        const uint32_t w0 = wp[2 * q], w1 = wp[2 * q + 1];
        int32_t eo = qoff[q], ao = qoff[q];
        for (int32_t row = 0; row < r->noy; ++row, eo += r->e_row, ao += r->x_row) {
            int32_t ei = eo, ai = ao;
            for (int32_t i = 0; i < nox; ++i, ei += e_col, ai += x_col) {
                const uint32_t ew = mt_load_u32(e + ei);
                const uint32_t ea = mt_sxtb16(ew), eb = mt_sxtb16_ror8(ew);
                int32_t *a = acc + ai;
                const int32_t a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
                a[0] = mt_smlabb(ea, w0, a0);
                a[1] = mt_smlabb(eb, w1, a1);
                a[2] = mt_smlatt(ea, w0, a2);
                a[3] = mt_smlatt(eb, w1, a3);
            }
        }
    }
}

#if MT_DSP
// Two horizontally neighbouring taps (ky, kx) and (ky, kx + 1) at stride_w 1
// over the acc positions both reach: there the second tap's error is one
// position left of the first's (e offset - e_col), so each acc quad is loaded
// and stored once for both (wp: four words per quad, the first tap's two then
// the second's).
// Depthwise at stride 1 steps e and acc by the same C between columns (one
// offset for both; past a row's last column it is not used).
static MT_NOINLINE void dw_rect2(const int8_t *e, int32_t *acc, const mt_rect_t *r, const uint32_t *wp,
                                 const int32_t *qoff, int32_t nq) {
    const int32_t nox = r->nox, e_col = r->e_col;
    for (int32_t q = 0; q < nq; ++q) {
        const uint32_t w0 = wp[4 * q], w1 = wp[4 * q + 1], w2 = wp[4 * q + 2], w3 = wp[4 * q + 3];
        int32_t eo = qoff[q], ao = qoff[q];
        for (int32_t row = 0; row < r->noy; ++row, eo += r->e_row, ao += r->x_row) {
            const int8_t *ep = e + eo;
            int32_t *ap = acc + ao;
            for (int32_t i = 0, j = 0; i < nox; ++i, j += e_col) {
                int32_t *a = ap + j;
                int32_t a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
                uint32_t ew = mt_load_u32(ep + j);
                uint32_t ea = mt_sxtb16(ew), eb = mt_sxtb16_ror8(ew);
                a0 = mt_smlabb(ea, w0, a0);
                a1 = mt_smlabb(eb, w1, a1);
                a2 = mt_smlatt(ea, w0, a2);
                a3 = mt_smlatt(eb, w1, a3);
                ew = mt_load_u32(ep + j - e_col);
                ea = mt_sxtb16(ew);
                eb = mt_sxtb16_ror8(ew);
                a[0] = mt_smlabb(ea, w2, a0);
                a[1] = mt_smlabb(eb, w3, a1);
                a[2] = mt_smlatt(ea, w2, a2);
                a[3] = mt_smlatt(eb, w3, a3);
            }
        }
    }
}

#endif

// The taps t .. t + nt - 1 (nt 1 or 2; 2: dw_rect2's pair) over rectangle r
// (offsets eb in e, ab in acc of its first position), MT_DW_QUADS / nt channel
// quads at a time: the quads with some channel on, their weights packed.
static void dw_pass(const mt_conv2d_params_t *p, const int8_t *e, const int8_t *w, const int32_t *wr,
                    const uint8_t *mask, int32_t *acc, const mt_rect_t *r, int32_t eb, int32_t ab, int32_t t,
                    int32_t nt) {
    if (r->noy <= 0 || r->nox <= 0) {
        return;
    }
    const int32_t C = p->in_c, kk = p->k_h * p->k_w, wpq = 2 * nt;
    uint32_t wp[2 * MT_DW_QUADS];
    int32_t qoff[MT_DW_QUADS];
    for (int32_t c = 0; c + 4 <= C;) {
        int32_t nq = 0;
        for (; c + 4 <= C && nq < MT_DW_QUADS / nt; c += 4) {
            int32_t v[8];
            uint32_t any = 0;
            for (int32_t h = 0; h < 4; ++h) {
                const int32_t on = oc_on(mask, c + h) && wr[c + h] != 0;
                v[h] = on ? w[(c + h) * kk + t] : 0;
                v[4 + h] = on && nt == 2 ? w[(c + h) * kk + t + 1] : 0;
                any |= (uint32_t)on;
            }
            if (any) {
                uint32_t *pq = wp + wpq * nq;
                pq[0] = mt_pack16(v[0], v[2]);
                pq[1] = mt_pack16(v[1], v[3]);
                if (nt == 2) {
                    pq[2] = mt_pack16(v[4], v[6]);
                    pq[3] = mt_pack16(v[5], v[7]);
                }
                qoff[nq++] = c;
            }
        }
        if (nq > 0) {
#if MT_DSP
            if (nt == 2) {
                dw_rect2(e + eb, acc + ab, r, wp, qoff, nq);
                continue;
            }
#endif
            dw_rect(e + eb, acc + ab, r, wp, qoff, nq);
        }
    }
}

#if MT_DSP  // the pairs: where the packed multiply-accumulates make them pay
// Columns [j0, j1) of a tap rectangle r (offsets eb, ab) as a rectangle of
// their own, with its offsets.
static void rect_cols(const mt_conv2d_params_t *p, const mt_rect_t *r, int32_t eb, int32_t ab, int32_t j0, int32_t j1,
                      mt_rect_t *s, int32_t *seb, int32_t *sab) {
    *s = *r;
    s->nox = j1 > j0 ? j1 - j0 : 0;
    s->x_col = s->nox > 1 ? p->stride_w * p->in_c : 0;
    *seb = eb + j0 * r->e_col;
    *sab = ab + j0 * p->stride_w * p->in_c;
}

// Taps (ky, kx) and (ky, kx + 1) at stride_w 1: the acc columns both reach
// as a pair, the columns only one of them reaches singly.
static void dw_pair(const mt_conv2d_params_t *p, const mt_geom_t *g, const int8_t *e, const int8_t *w,
                    const int32_t *wr, const uint8_t *mask, int32_t *acc, int32_t ky, int32_t kx) {
    const int32_t t = ky * p->k_w + kx;
    mt_rect_t ra, rb, s;
    int32_t eba, aba, ebb, abb, se, sa;
    tap_rect(p, g, ky, kx, &ra, &eba, &aba);
    tap_rect(p, g, ky, kx + 1, &rb, &ebb, &abb);
    int32_t a0, a1, b0, b1;  // output columns of each tap
    out_range(kx, 1, p->pad_left, p->in_w, p->out_w, &a0, &a1);
    out_range(kx + 1, 1, p->pad_left, p->in_w, p->out_w, &b0, &b1);
    // acc column of output column o: o - pad_left + kx (first tap), + 1 (second)
    const int32_t alo = a0 + kx, ahi = a1 + kx, blo = b0 + kx + 1, bhi = b1 + kx + 1;
    const int32_t lo = alo > blo ? alo : blo, hi = ahi < bhi ? ahi : bhi;
    if (ra.noy <= 0 || rb.noy <= 0 || lo >= hi) {
        dw_pass(p, e, w, wr, mask, acc, &ra, eba, aba, t, 1);
        dw_pass(p, e, w, wr, mask, acc, &rb, ebb, abb, t + 1, 1);
        return;
    }
    rect_cols(p, &ra, eba, aba, 0, lo - alo, &s, &se, &sa);
    dw_pass(p, e, w, wr, mask, acc, &s, se, sa, t, 1);
    rect_cols(p, &ra, eba, aba, hi - alo, ahi - alo, &s, &se, &sa);
    dw_pass(p, e, w, wr, mask, acc, &s, se, sa, t, 1);
    rect_cols(p, &rb, ebb, abb, 0, lo - blo, &s, &se, &sa);
    dw_pass(p, e, w, wr, mask, acc, &s, se, sa, t + 1, 1);
    rect_cols(p, &rb, ebb, abb, hi - blo, bhi - blo, &s, &se, &sa);
    dw_pass(p, e, w, wr, mask, acc, &s, se, sa, t + 1, 1);
    rect_cols(p, &ra, eba, aba, lo - alo, hi - alo, &s, &se, &sa);
    dw_pass(p, e, w, wr, mask, acc, &s, se, sa, t, 2);
}

#endif

static void gi_depthwise(const mt_conv2d_params_t *p, const mt_geom_t *g, const int8_t *e, const int8_t *w,
                         const int32_t *wr, const uint8_t *mask, int32_t *acc) {
    const int32_t C = p->in_c;
    for (int32_t ky = 0; ky < p->k_h; ++ky) {
        for (int32_t kx = 0; kx < p->k_w;) {
#if MT_DSP
            if (p->stride_w == 1 && kx + 1 < p->k_w) {
                dw_pair(p, g, e, w, wr, mask, acc, ky, kx);
                kx += 2;
                continue;
            }
#endif
            {
                mt_rect_t r;
                int32_t eb, ab;
                tap_rect(p, g, ky, kx, &r, &eb, &ab);
                dw_pass(p, e, w, wr, mask, acc, &r, eb, ab, ky * p->k_w + kx, 1);
                ++kx;
            }
        }
    }
    // each quad channel's sum times its wr, four a step (a channel that is
    // off had zero weights: its sum is 0)
    const int32_t n = p->in_h * p->in_w * C, cq = C & ~3;
    for (int32_t i = 0; i < n; i += C) {
        int32_t *a = acc + i;
        for (int32_t c = 0; c < cq; c += 4) {
            const int32_t a0 = a[c], a1 = a[c + 1], a2 = a[c + 2], a3 = a[c + 3];
            const int32_t r0 = wr[c], r1 = wr[c + 1], r2 = wr[c + 2], r3 = wr[c + 3];
            a[c] = a0 * r0;
            a[c + 1] = a1 * r1;
            a[c + 2] = a2 * r2;
            a[c + 3] = a3 * r3;
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
    int32_t n;          // in_c
    const uint32_t *z;  // the packed path: per error position of the tap's rectangle, its four
    int32_t z_row;      // e * wr packed in two words (0, 0: no error); z_row: positions per row
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

#if MT_DSP  // (where SMLAD is one instruction)
// The same sums when every product e * wr fits a halfword (wr <= 256:
// -32768 <= e * wr <= 32512; R = 8 makes the top ratio 256 for 3x3 convs of
// 32 channels): the four weight runs of the tap packed into halfword pairs
// (wp[2 c] = w0, w1; wp[2 c + 1] = w2, w3) of up to MT_SEL_CHUNK input
// channels, then per position and input channel two dual multiply-adds.
#define MT_SEL_CHUNK 64

// One error position of the packed path: v01, v23 (the four e * wr) into the n
// accumulators a, two dual multiply-adds per input channel.
static MT_INLINE void sel_pos_p(int32_t *a, uint32_t v01, uint32_t v23, const uint32_t *wp, int32_t n) {
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
                         : [pa] "+r"(pa), [pw] "+r"(pw), [t0] "=&r"(t0), [t1] "=&r"(t1), [t2] "=&r"(t2), [t3] "=&r"(t3),
                           [t4] "=&r"(t4), [t5] "=&r"(t5)
                         : [v01] "r"(v01), [v23] "r"(v23), [pend] "r"(pend)
                         : "cc", "memory");
        (void)t2, (void)t3, (void)t4, (void)t5;
        c = n & ~1;
    }
#else
    for (; c + 2 <= n; c += 2) {  // two input channels a turn
        const int32_t x0 = mt_smlad(v23, wp[2 * c + 1], mt_smlad(v01, wp[2 * c], a[c]));
        const int32_t x1 = mt_smlad(v23, wp[2 * c + 3], mt_smlad(v01, wp[2 * c + 2], a[c + 1]));
        a[c] = x0;
        a[c + 1] = x1;
    }
#endif
    if (c < n) {
        a[c] = mt_smlad(v23, wp[2 * c + 1], mt_smlad(v01, wp[2 * c], a[c]));
    }
}

static MT_NOINLINE void gi_sel_rect_p(int32_t *acc, const mt_rect_t *r, const mt_sel4_t *s) {
    uint32_t wp[2 * MT_SEL_CHUNK];
    // locals: acc stores may alias the struct's int32 fields, so GCC reloaded them every position
    const int32_t nox = r->nox, noy = r->noy, a_col = r->x_col;
    for (int32_t c0 = 0; c0 < s->n; c0 += MT_SEL_CHUNK) {
        const int32_t n = s->n - c0 < MT_SEL_CHUNK ? s->n - c0 : MT_SEL_CHUNK;
        for (int32_t c = 0; c < n; ++c) {
            wp[2 * c] = mt_pack16(s->w[0][c0 + c], s->w[1][c0 + c]);
            wp[2 * c + 1] = mt_pack16(s->w[2][c0 + c], s->w[3][c0 + c]);
        }
        int32_t ao = c0;
        const uint32_t *zr = s->z;
        for (int32_t row = 0; row < noy; ++row, ao += r->x_row, zr += 2 * s->z_row) {
            // the products of the band's map, formed once for all taps (the zero positions cost a test)
            for (const uint32_t *zp = zr, *zend = zr + 2 * nox; zp < zend; zp += 2) {
                const uint32_t v01 = zp[0], v23 = zp[1];
                if ((v01 | v23) == 0u) {
                    continue;
                }
                sel_pos_p(acc + ao + ((int32_t)(zp - zr) >> 1) * a_col, v01, v23, wp, n);
            }
        }
    }
}

// Positions of the product map (two words each, on the stack): output rows in bands of at
// most this many positions.
#define MT_SEL_ZMAP 256
#endif

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
#if MT_DSP
        // the packed path band by band of output rows: each band's map of the quad's packed
        // products e * wr once (0, 0 where its errors are 0: after a pool's routing most
        // positions), not formed per tap, then every tap over its rectangle's rows in the band
        // (exact in any order)
        uint32_t z[2 * MT_SEL_ZMAP];
        half &= p->out_w <= MT_SEL_ZMAP;
        const int32_t band = half ? MT_SEL_ZMAP / p->out_w : p->out_h;
        s.z_row = p->out_w;
        for (int32_t b0 = 0, b1; b0 < p->out_h; b0 = b1) {
            b1 = p->out_h - b0 < band ? p->out_h : b0 + band;
            const int8_t *ep = e + b0 * p->out_w * p->out_c;
            for (int32_t q = 0; half && q < (b1 - b0) * p->out_w; ++q, ep += p->out_c) {
                z[2 * q] = mt_pack16(ep[s.eo[0]] * s.wr[0], ep[s.eo[1]] * s.wr[1]);
                z[2 * q + 1] = mt_pack16(ep[s.eo[2]] * s.wr[2], ep[s.eo[3]] * s.wr[3]);
            }
#else
        (void)half;
        {
#endif
            for (int32_t ky = 0; ky < p->k_h; ++ky) {
                for (int32_t kx = 0; kx < p->k_w; ++kx) {
                    mt_rect_t r;
                    int32_t eb, ab;
                    tap_rect(p, g, ky, kx, &r, &eb, &ab);
                    if (r.noy == 0) {
                        continue;
                    }
#if MT_DSP
                    const int32_t oy0 = eb / r.e_row, lo = oy0 > b0 ? oy0 : b0;
                    const int32_t hi = oy0 + r.noy < b1 ? oy0 + r.noy : b1;
                    if (lo >= hi) {
                        continue;
                    }
                    r.noy = hi - lo;
                    eb += (lo - oy0) * r.e_row;
                    ab += (lo - oy0) * r.x_row;
#endif
                    const int32_t wt = ky * g->w_row + kx * g->cpg;
                    for (int32_t h = 0; h < 4; ++h) {
                        s.w[h] = w + s.eo[h] * g->w_oc + wt;
                    }
#if MT_DSP
                    if (half) {
                        s.z = z + 2 * (eb / p->out_c - b0 * p->out_w);
                        gi_sel_rect_p(acc + ab, &r, &s);
                        continue;
                    }
#endif
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
int32_t mt_conv2d_s8_grad_input(const mt_conv2d_params_t *p, const int8_t *e, const int8_t *w, const int32_t *wr,
                                const uint8_t *mask, int32_t lo, int32_t hi, int32_t *acc, int8_t *ein) {
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
int32_t mt_conv2d_s8_grad_input(const mt_conv2d_params_t *p, const int8_t *e, const int8_t *w, const int32_t *wr,
                                const uint8_t *mask, int32_t lo, int32_t hi, int32_t *acc, int8_t *ein) {
    const int32_t n = p->in_h * p->in_w * p->in_c;
    for (int32_t i = 0; i < n; ++i) {
        acc[i] = 0;
    }
    gi_blocked(p, e, w, wr, mask, acc);
    return mt_dyn_requant_act_s8(acc, (size_t)n, lo, hi, ein);
}
#endif
