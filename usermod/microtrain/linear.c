// linear int8 kernels (docs/numerics.md): conv2d with a 1x1 input, 1x1
// kernel and groups == 1, written directly as row loops over w[out_n][in_n].
// Pure C99, no libc; the descriptor passed mt_linear_check (in_n <= 32768,
// out_n * in_n <= 2^26), so indices and accumulators fit in int32.
#include "mt_kernels.h"

#include "mt_runs.h"
#include "mt_dsp.h"

#if MT_SOFT_MATH  // the Cortex-M0 weight gradient
// g[i] = ev * (x[i] - zp), i < n.
static MT_NOINLINE void scale_x_run(int32_t *g, const int8_t *x, int32_t n, int32_t ev, int32_t zp) {
    for (const int8_t *end = x + n; x != end; ++x, ++g) {
        *g = ev * ((int32_t)*x - zp);
    }
}
#endif

// s[k] += (x - zp) . w[k * ws ...], k < 4, over n bytes: x is loaded (and
// on armv7e-m unpacked) once for four weight rows.
// s[k] = (x - zp) . w[k * ws ...], k < 4, over n bytes: x is loaded (and on
// armv7e-m unpacked) once for four weight rows. Rows 1 and 3 are read at an
// offset from rows 0 and 2: two pointers instead of four keep the loop in
// registers.
#if MT_RV
// RISC-V: four row pointers and four bytes a step at immediate offsets
// (loads take no register offset), so the five pointers move once per four
// bytes: per byte of x, one load and one subtraction for four MACs.
#define MT_RV_COL(j)                          \
    do {                                      \
        const int32_t a = (int32_t)x[j] - zp; \
        s0 += a * (int32_t)w0[j];             \
        s1 += a * (int32_t)w1[j];             \
        s2 += a * (int32_t)w2[j];             \
        s3 += a * (int32_t)w3[j];             \
    } while (0)

static MT_NOINLINE void dot_1x4(const int8_t *x, const int8_t *w, int32_t ws, int32_t n, int32_t zp, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    const int8_t *w0 = w, *w1 = w + ws, *w2 = w1 + ws, *w3 = w2 + ws;
    const int8_t *end = x + n;
    for (const int8_t *end4 = x + (n & ~3); x != end4; x += 4, w0 += 4, w1 += 4, w2 += 4, w3 += 4) {
        MT_RV_COL(0);
        MT_RV_COL(1);
        MT_RV_COL(2);
        MT_RV_COL(3);
    }
    for (; x != end; ++x, ++w0, ++w1, ++w2, ++w3) {
        MT_RV_COL(0);
    }
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
}
#undef MT_RV_COL
#else
static MT_NOINLINE void dot_1x4(const int8_t *x, const int8_t *w, int32_t ws, int32_t n, int32_t zp, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    const int8_t *w2 = w + 2 * ws;
    const int8_t *end = x + n;
#if MT_DSP
    const uint32_t zp2 = mt_pack16(zp, zp);
    for (const int8_t *end4 = x + (n & ~3); x != end4; x += 4, w += 4, w2 += 4) {
        uint32_t ae, ao;
        mt_x4_zp(x, zp2, &ae, &ao);
        // Rows 1 and 3 first: rows 0 and 2 then load with post-increment.
        uint32_t v = mt_load_u32(w + ws);
        s1 = mt_smlad(ae, mt_sxtb16(v), s1);
        s1 = mt_smlad(ao, mt_sxtb16_ror8(v), s1);
        v = mt_load_u32(w);
        s0 = mt_smlad(ae, mt_sxtb16(v), s0);
        s0 = mt_smlad(ao, mt_sxtb16_ror8(v), s0);
        v = mt_load_u32(w2 + ws);
        s3 = mt_smlad(ae, mt_sxtb16(v), s3);
        s3 = mt_smlad(ao, mt_sxtb16_ror8(v), s3);
        v = mt_load_u32(w2);
        s2 = mt_smlad(ae, mt_sxtb16(v), s2);
        s2 = mt_smlad(ao, mt_sxtb16_ror8(v), s2);
    }
#endif
    for (; x != end; ++x, ++w, ++w2) {
        const int32_t a = (int32_t)*x - zp;
        s0 += a * (int32_t)w[0];
        s1 += a * (int32_t)w[ws];
        s2 += a * (int32_t)w2[0];
        s3 += a * (int32_t)w2[ws];
    }
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
}
#endif

// Four weight rows per pass over x (dot_1x4), then two, then one.
void mt_linear_s8_forward(const mt_linear_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                          const int32_t *mult, const int32_t *shift, int8_t *y) {
    const int32_t in_n = p->in_n, out_n = p->out_n, zp = p->in_zp, out_zp = p->out_zp;
    // Clamp before adding out_zp: requant may return values near +-2^31.
    const int32_t lo = p->act_min - out_zp, hi = p->act_max - out_zp;
    int32_t o = 0, wo = 0, s[4];
    // |bias| <= 2^30 and |dot| <= 32768 * 255 * 128 < 2^30: exact.
    for (; o + 4 <= out_n; o += 4, wo += 4 * in_n) {
        dot_1x4(x, w + wo, in_n, in_n, zp, s);
        for (int32_t k = 0; k < 4; ++k) {
            y[o + k] = mt_out_s8(bias[o + k] + s[k], mult[o + k], shift[o + k], lo, hi, out_zp);
        }
    }
    if (o + 2 <= out_n) {
        s[0] = s[1] = 0;
        dot_1x2(x, w + wo, w + wo + in_n, in_n, zp, s);
        for (int32_t k = 0; k < 2; ++k) {
            y[o + k] = mt_out_s8(bias[o + k] + s[k], mult[o + k], shift[o + k], lo, hi, out_zp);
        }
        o += 2;
        wo += 2 * in_n;
    }
    if (o < out_n) {
        y[o] = mt_out_s8(bias[o] + dot_run(x, w + wo, in_n, zp), mult[o], shift[o], lo, hi, out_zp);
    }
}

#if MT_SOFT_MATH
// Output-row outermost: a dropped channel or a zero error skips its whole
// weight row.
int32_t mt_linear_s8_grad_input(const mt_linear_params_t *p, const int8_t *e, const int8_t *w, const int32_t *wr,
                                const uint8_t *mask, int32_t lo, int32_t hi, int32_t *acc, int8_t *ein) {
    const int32_t in_n = p->in_n;
    for (int32_t i = 0; i < in_n; ++i) {
        acc[i] = 0;
    }
    int32_t wo = 0;
    for (int32_t o = 0; o < p->out_n; ++o, wo += in_n) {
        const int32_t ev = e[o];
        if (ev == 0 || (mask && !mask[o])) {
            continue;
        }
        // |s * w| <= 16384 * max(wr); mt_wr_check(wr, out_n, out_n) bounds the sum.
        axpy_w_run(acc, w + wo, in_n, ev * wr[o]);
    }
    return mt_dyn_requant_act_s8(acc, (size_t)in_n, lo, hi, ein);
}

#else
// acc[i] += s0 * w0[i] + s1 * w1[i] + s2 * w2[i] + s3 * w3[i], i < n: four
// weight rows per pass over acc.
static MT_NOINLINE void axpy4_w_run(int32_t *acc, const int8_t *const *w, int32_t n, const int32_t *s) {
    const int8_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    const int32_t s0 = s[0], s1 = s[1], s2 = s[2], s3 = s[3];
    int32_t i = 0;
#if MT_RV
    // four values a step at immediate offsets: the five pointers move once per four
    for (; i + 4 <= n; i += 4) {
        const int8_t *a = w0 + i, *b = w1 + i, *c = w2 + i, *d = w3 + i;
        int32_t *t = acc + i;
        t[0] += s0 * (int32_t)a[0] + s1 * (int32_t)b[0] + s2 * (int32_t)c[0] + s3 * (int32_t)d[0];
        t[1] += s0 * (int32_t)a[1] + s1 * (int32_t)b[1] + s2 * (int32_t)c[1] + s3 * (int32_t)d[1];
        t[2] += s0 * (int32_t)a[2] + s1 * (int32_t)b[2] + s2 * (int32_t)c[2] + s3 * (int32_t)d[2];
        t[3] += s0 * (int32_t)a[3] + s1 * (int32_t)b[3] + s2 * (int32_t)c[3] + s3 * (int32_t)d[3];
    }
#else
    // two values a step (half the loop overhead; the sums are exact, any order)
    for (; i + 2 <= n; i += 2) {
        const int32_t a =
            acc[i] + s0 * (int32_t)w0[i] + s1 * (int32_t)w1[i] + s2 * (int32_t)w2[i] + s3 * (int32_t)w3[i];
        const int32_t b = acc[i + 1] + s0 * (int32_t)w0[i + 1] + s1 * (int32_t)w1[i + 1] + s2 * (int32_t)w2[i + 1] +
                          s3 * (int32_t)w3[i + 1];
        acc[i] = a;
        acc[i + 1] = b;
    }
#endif
    for (; i < n; ++i) {
        acc[i] += s0 * (int32_t)w0[i] + s1 * (int32_t)w1[i] + s2 * (int32_t)w2[i] + s3 * (int32_t)w3[i];
    }
}

// Rows with a zero error or dropped are skipped; the others go four per
// pass over acc (acc's partial sums are sums of some of its terms, all
// bounded by mt_wr_check(wr, out_n, out_n)).
int32_t mt_linear_s8_grad_input(const mt_linear_params_t *p, const int8_t *e, const int8_t *w, const int32_t *wr,
                                const uint8_t *mask, int32_t lo, int32_t hi, int32_t *acc, int8_t *ein) {
    const int32_t in_n = p->in_n;
    for (int32_t i = 0; i < in_n; ++i) {
        acc[i] = 0;
    }
    const int8_t *rows[4];
    int32_t sv[4], k = 0;
    for (int32_t o = 0; o < p->out_n; ++o) {
        const int32_t ev = e[o];
        if (ev == 0 || (mask && !mask[o])) {
            continue;
        }
        rows[k] = w + o * in_n;
        sv[k++] = ev * wr[o];
        if (k == 4) {
            axpy4_w_run(acc, rows, in_n, sv);
            k = 0;
        }
    }
    for (int32_t j = 0; j < k; ++j) {
        axpy_w_run(acc, rows[j], in_n, sv[j]);
    }
    return mt_dyn_requant_act_s8(acc, (size_t)in_n, lo, hi, ein);
}
#endif

#if MT_SOFT_MATH
// Masked rows are written as zeros without reading x.
void mt_linear_s8_grad_weight(const mt_linear_params_t *p, const int8_t *x, const int8_t *e, const uint8_t *mask,
                              int32_t *gw, int32_t *gb) {
    const int32_t in_n = p->in_n, zp = p->in_zp;
    int32_t wo = 0;
    for (int32_t o = 0; o < p->out_n; ++o, wo += in_n) {
        int32_t *gt = gw + wo;
        const int32_t ev = (mask && !mask[o]) ? 0 : e[o];
        gb[o] = ev;
        if (ev == 0) {
            for (int32_t i = 0; i < in_n; ++i) {
                gt[i] = 0;
            }
        } else {
            scale_x_run(gt, x, in_n, ev, zp);
        }
    }
}
#else
// g0[i] = e0 * (x[i] - zp) and g1[i] = e1 * (x[i] - zp), i < n: x unpacked
// four at a time with the zero point subtracted halfwise (|x - zp| <= 255).
static MT_NOINLINE void scale2_x_run(int32_t *g0, int32_t *g1, const int8_t *x, int32_t n, int32_t e0, int32_t e1,
                                     int32_t zp) {
    int32_t i = 0;
#if MT_RV
    // RISC-V: bytes, four a step at immediate offsets (no packed halfwords)
    for (; i + 4 <= n; i += 4) {
        const int8_t *xp = x + i;
        int32_t *a = g0 + i, *b = g1 + i;
        const int32_t v0 = (int32_t)xp[0] - zp, v1 = (int32_t)xp[1] - zp, v2 = (int32_t)xp[2] - zp,
                      v3 = (int32_t)xp[3] - zp;
        a[0] = e0 * v0;
        a[1] = e0 * v1;
        a[2] = e0 * v2;
        a[3] = e0 * v3;
        b[0] = e1 * v0;
        b[1] = e1 * v1;
        b[2] = e1 * v2;
        b[3] = e1 * v3;
    }
#else
    const uint32_t zp2 = mt_pack16(zp, zp), u0 = (uint32_t)e0, u1 = (uint32_t)e1;
    for (; i + 4 <= n; i += 4) {
        const uint32_t xw = mt_load_u32(x + i);
        const uint32_t xa = mt_ssub16(mt_sxtb16(xw), zp2), xb = mt_ssub16(mt_sxtb16_ror8(xw), zp2);
        g0[i] = mt_smlabb(xa, u0, 0);
        g0[i + 1] = mt_smlabb(xb, u0, 0);
        g0[i + 2] = mt_smlatb(xa, u0, 0);
        g0[i + 3] = mt_smlatb(xb, u0, 0);
        g1[i] = mt_smlabb(xa, u1, 0);
        g1[i + 1] = mt_smlabb(xb, u1, 0);
        g1[i + 2] = mt_smlatb(xa, u1, 0);
        g1[i + 3] = mt_smlatb(xb, u1, 0);
    }
#endif
    for (; i < n; ++i) {
        const int32_t v = (int32_t)x[i] - zp;
        g0[i] = e0 * v;
        g1[i] = e1 * v;
    }
}

// g[i] = ev * (x[i] - zp), i < n (one row; as scale2_x_run).
static MT_NOINLINE void scale1_x_run(int32_t *g, const int8_t *x, int32_t n, int32_t ev, int32_t zp) {
    int32_t i = 0;
#if MT_RV
    for (; i + 4 <= n; i += 4) {
        const int8_t *xp = x + i;
        int32_t *a = g + i;
        a[0] = ev * ((int32_t)xp[0] - zp);
        a[1] = ev * ((int32_t)xp[1] - zp);
        a[2] = ev * ((int32_t)xp[2] - zp);
        a[3] = ev * ((int32_t)xp[3] - zp);
    }
#else
    const uint32_t zp2 = mt_pack16(zp, zp), u = (uint32_t)ev;
    for (; i + 4 <= n; i += 4) {
        const uint32_t xw = mt_load_u32(x + i);
        const uint32_t xa = mt_ssub16(mt_sxtb16(xw), zp2), xb = mt_ssub16(mt_sxtb16_ror8(xw), zp2);
        g[i] = mt_smlabb(xa, u, 0);
        g[i + 1] = mt_smlabb(xb, u, 0);
        g[i + 2] = mt_smlatb(xa, u, 0);
        g[i + 3] = mt_smlatb(xb, u, 0);
    }
#endif
    for (; i < n; ++i) {
        g[i] = ev * ((int32_t)x[i] - zp);
    }
}

// Rows with a zero error (masked rows count as such) are zero-filled without
// reading x; two neighbouring rows with errors share each unpacked x word.
void mt_linear_s8_grad_weight(const mt_linear_params_t *p, const int8_t *x, const int8_t *e, const uint8_t *mask,
                              int32_t *gw, int32_t *gb) {
    const int32_t in_n = p->in_n, out_n = p->out_n, zp = p->in_zp;
    for (int32_t o = 0; o < out_n; ++o) {
        gb[o] = (mask && !mask[o]) ? 0 : e[o];
    }
    for (int32_t o = 0; o < out_n;) {
        int32_t *gt = gw + o * in_n;
        if (gb[o] == 0) {
            for (int32_t i = 0; i < in_n; ++i) {
                gt[i] = 0;
            }
            ++o;
        } else if (o + 1 < out_n && gb[o + 1] != 0) {
            scale2_x_run(gt, gt + in_n, x, in_n, gb[o], gb[o + 1], zp);
            o += 2;
        } else {
            scale1_x_run(gt, x, in_n, gb[o], zp);
            ++o;
        }
    }
}
#endif

#if MT_HAS_FLOAT
// Each weight's "sum" is the single term e[o] * (x[i] - zp). Zero errors are
// still added (x + 0.0f is not an identity for -0.0f or a NaN scale), so the
// result is exactly gw[i] + w_scale * (float)term per element. The terms of
// four elements come from one word of x, unpacked halfwise with the zero
// point subtracted (|x - zp| <= 255).
static MT_NOINLINE void axpy_f32_x_run(float *g, const int8_t *x, int32_t n, int32_t ev, int32_t zp, float sc) {
    const uint32_t zp2 = mt_pack16(zp, zp), u = (uint32_t)ev;
    int32_t i = 0;
    // Rounded products in their own variables: float32 results even with x87
    // excess precision; no FMA (-std=c99 implies -ffp-contract=off).
    for (; i + 4 <= n; i += 4) {
        const uint32_t xw = mt_load_u32(x + i);
        const uint32_t xa = mt_ssub16(mt_sxtb16(xw), zp2), xb = mt_ssub16(mt_sxtb16_ror8(xw), zp2);
        const float d0 = sc * (float)mt_smlabb(xa, u, 0), d1 = sc * (float)mt_smlabb(xb, u, 0);
        const float d2 = sc * (float)mt_smlatb(xa, u, 0), d3 = sc * (float)mt_smlatb(xb, u, 0);
        g[i] = g[i] + d0;
        g[i + 1] = g[i + 1] + d1;
        g[i + 2] = g[i + 2] + d2;
        g[i + 3] = g[i + 3] + d3;
    }
    for (; i < n; ++i) {
        const float d = sc * (float)(ev * ((int32_t)x[i] - zp));
        g[i] = g[i] + d;
    }
}

// Column blocks of x: the term e[o] * (x[i] - zp) is exact in float32
// (|term| <= 128 * 255 < 2^24), and so is |e| * (+-(x - zp)), so each x is
// converted once per block for every row instead of once per weight. A zero
// term must be +0 (as (float)0, the sum's other operand may be -0): the
// block keeps x - zp and zp - x, each with +0 for x == zp, and a row takes
// the one that gives its sign; a zero error adds w_scale * +0 to the row.
// Software float (MT_SOFT_FLOAT): a float product costs more than the
// conversion it saves, so every row takes the per-row path.
#define MT_FC_BLOCK 16
#if defined(MT_SOFT_FLOAT)
#define MT_FC_BLOCKED 0
#else
#define MT_FC_BLOCKED 1
#endif

#if MT_DSP && defined(__ARM_FP)
// g[k] = g[k] + sc * (a * v[k]), k < MT_FC_BLOCK (a * v[k] exact), the block
// and the column values moved by one VLDM / VSTM each. VMLA rounds its
// product before the addition (it is not VFMA): the same two operations.
static inline void axpy_f32_block(float *g, const float *v, float a, float sc) {
    // two halves of eight, through the same sixteen registers
    __asm__ volatile("vldmia %[v]!, {s16-s23}\n\t"
                     "vldmia %[g], {s24-s31}\n\t"
                     "vmul.f32 s16, s16, %[a]\n\t"
                     "vmul.f32 s17, s17, %[a]\n\t"
                     "vmul.f32 s18, s18, %[a]\n\t"
                     "vmul.f32 s19, s19, %[a]\n\t"
                     "vmul.f32 s20, s20, %[a]\n\t"
                     "vmul.f32 s21, s21, %[a]\n\t"
                     "vmul.f32 s22, s22, %[a]\n\t"
                     "vmul.f32 s23, s23, %[a]\n\t"
                     "vmla.f32 s24, s16, %[sc]\n\t"
                     "vmla.f32 s25, s17, %[sc]\n\t"
                     "vmla.f32 s26, s18, %[sc]\n\t"
                     "vmla.f32 s27, s19, %[sc]\n\t"
                     "vmla.f32 s28, s20, %[sc]\n\t"
                     "vmla.f32 s29, s21, %[sc]\n\t"
                     "vmla.f32 s30, s22, %[sc]\n\t"
                     "vmla.f32 s31, s23, %[sc]\n\t"
                     "vstmia %[g]!, {s24-s31}\n\t"
                     "vldmia %[v], {s16-s23}\n\t"
                     "vldmia %[g], {s24-s31}\n\t"
                     "vmul.f32 s16, s16, %[a]\n\t"
                     "vmul.f32 s17, s17, %[a]\n\t"
                     "vmul.f32 s18, s18, %[a]\n\t"
                     "vmul.f32 s19, s19, %[a]\n\t"
                     "vmul.f32 s20, s20, %[a]\n\t"
                     "vmul.f32 s21, s21, %[a]\n\t"
                     "vmul.f32 s22, s22, %[a]\n\t"
                     "vmul.f32 s23, s23, %[a]\n\t"
                     "vmla.f32 s24, s16, %[sc]\n\t"
                     "vmla.f32 s25, s17, %[sc]\n\t"
                     "vmla.f32 s26, s18, %[sc]\n\t"
                     "vmla.f32 s27, s19, %[sc]\n\t"
                     "vmla.f32 s28, s20, %[sc]\n\t"
                     "vmla.f32 s29, s21, %[sc]\n\t"
                     "vmla.f32 s30, s22, %[sc]\n\t"
                     "vmla.f32 s31, s23, %[sc]\n\t"
                     "vstmia %[g]!, {s24-s31}"
                     : [g] "+r"(g), [v] "+r"(v)
                     : [a] "t"(a), [sc] "t"(sc)
                     : "memory", "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23", "s24", "s25", "s26", "s27",
                       "s28", "s29", "s30", "s31");
}
#else
// g[k] += sc * (a * v[k]), k < MT_FC_BLOCK (a * v[k] exact).
static inline void axpy_f32_block(float *g, const float *v, float a, float sc) {
    for (int32_t k = 0; k < MT_FC_BLOCK; ++k) {
        const float t = a * v[k];
        const float d = sc * t;
        g[k] = g[k] + d;
    }
}
#endif

#if MT_FC_BLOCKED
// gw / gb row r is output c0 + r; outputs outside the window are masked (the
// binding's check), so only rows inside it are touched.
void mt_linear_s8_grad_weight_f32(const mt_linear_params_t *p, const int8_t *x, const int8_t *e, const uint8_t *mask,
                                  float w_scale, float b_scale, float *gw, float *gb, int32_t c0) {
    const int32_t in_n = p->in_n, out_n = p->out_n, zp = p->in_zp;
    const int32_t nb = in_n - in_n % MT_FC_BLOCK;
    const float zero_d = w_scale * 0.0f;  // a zero term's addend
    for (int32_t i = 0; i < nb; i += MT_FC_BLOCK) {
        float vp[MT_FC_BLOCK], vn[MT_FC_BLOCK];
        for (int32_t k = 0; k < MT_FC_BLOCK; ++k) {
            const int32_t v = (int32_t)x[i + k] - zp;
            vp[k] = (float)v;
            vn[k] = (float)-v;
        }
        for (int32_t o = 0; o < out_n; ++o) {
            if (mask && !mask[o]) {
                continue;  // masked rows untouched
            }
            float *g = gw + (o - c0) * in_n + i;
            const int32_t ev = e[o];
            if (ev > 0) {
                axpy_f32_block(g, vp, (float)ev, w_scale);
            } else if (ev < 0) {
                axpy_f32_block(g, vn, (float)-ev, w_scale);
            } else {
                for (int32_t k = 0; k < MT_FC_BLOCK; ++k) {
                    g[k] = g[k] + zero_d;
                }
            }
        }
    }
    for (int32_t o = 0; o < out_n; ++o) {
        if (mask && !mask[o]) {
            continue;
        }
        const int32_t r = o - c0;
        if (nb < in_n) {
            axpy_f32_x_run(gw + r * in_n + nb, x + nb, in_n - nb, e[o], zp, w_scale);
        }
        const float db = b_scale * (float)e[o];
        gb[r] = gb[r] + db;
    }
}
#else
// gw / gb row r is output c0 + r; outputs outside the window are masked (the
// binding's check), so only rows inside it are touched.
void mt_linear_s8_grad_weight_f32(const mt_linear_params_t *p, const int8_t *x, const int8_t *e, const uint8_t *mask,
                                  float w_scale, float b_scale, float *gw, float *gb, int32_t c0) {
    const int32_t in_n = p->in_n, zp = p->in_zp;
    for (int32_t o = 0; o < p->out_n; ++o) {
        if (mask && !mask[o]) {
            continue;  // masked rows untouched
        }
        const int32_t r = o - c0;
        axpy_f32_x_run(gw + r * in_n, x, in_n, e[o], zp, w_scale);
        const float db = b_scale * (float)e[o];
        gb[r] = gb[r] + db;
    }
}
#endif
#endif
