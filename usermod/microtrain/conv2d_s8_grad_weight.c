// conv2d int8 weight gradients, int32 and float32 (docs/numerics.md);
// geometry in mt_conv2d.h.
#include "mt_kernels.h"
#define MT_CONV2D_WIN MT_SOFT_MATH  // the Cortex-M0 scatter walks windows
#define MT_CONV2D_BACK 1
#include "mt_conv2d.h"

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

#if !MT_SOFT_MATH || MT_HAS_FLOAT

// Sums over the rectangle of two output channels times four input channels:
// e holds an oc quad (the pair is bytes 0 and 2, or 1 and 3 when sh == 8),
// x four consecutive input channels. s[0..3]: first oc by ci 0..3; s[4..7]:
// second oc. Each sum <= 65536 * 128 * 128 = 2^30.
#if MT_DSP && defined(__thumb2__)
// One position: 2 loads, 3 unpacks, 8 halfword multiply-accumulates, then the
// column steps (ldrd of ec, xc from the frame).
#define MT_POS_2X4(EROR)                    \
    "ldr %[t0], [%[pe]]\n\t"                \
    "ldr %[t1], [%[px]]\n\t"                \
    "sxtb16 %[t0], %[t0]" EROR "\n\t"       \
    "sxtb16 %[t2], %[t1]\n\t"               \
    "sxtb16 %[t1], %[t1], ror #8\n\t"       \
    "smlabb %[s0], %[t0], %[t2], %[s0]\n\t" \
    "smlabb %[s1], %[t0], %[t1], %[s1]\n\t" \
    "smlabt %[s2], %[t0], %[t2], %[s2]\n\t" \
    "smlabt %[s3], %[t0], %[t1], %[s3]\n\t" \
    "smlatb %[s4], %[t0], %[t2], %[s4]\n\t" \
    "smlatb %[s5], %[t0], %[t1], %[s5]\n\t" \
    "smlatt %[s6], %[t0], %[t2], %[s6]\n\t" \
    "smlatt %[s7], %[t0], %[t1], %[s7]\n\t" \
    "ldrd %[t0], %[t2], %[col]\n\t"         \
    "add %[pe], %[pe], %[t0]\n\t"           \
    "add %[px], %[px], %[t2]\n\t"

// The whole rectangle in one asm loop (GCC spills accumulators of the C loop,
// at -Os and -O2): two positions per turn, entered at the second when nox is
// odd.
#define MT_RECT_2X4(EROR)                                                                                              \
    __asm__ volatile("mov %[s0], #0\n\t"                                                                               \
                     "mov %[s1], #0\n\t"                                                                               \
                     "mov %[s2], #0\n\t"                                                                               \
                     "mov %[s3], #0\n\t"                                                                               \
                     "mov %[s4], #0\n\t"                                                                               \
                     "mov %[s5], #0\n\t"                                                                               \
                     "mov %[s6], #0\n\t"                                                                               \
                     "mov %[s7], #0\n\t"                                                                               \
                     "1:\n\t"                                                                                          \
                     "ldr %[t0], %[odd]\n\t"                                                                           \
                     "cmp %[t0], #0\n\t"                                                                               \
                     "bne 3f\n\t"                                                                                      \
                     "2:\n\t" MT_POS_2X4(EROR) "3:\n\t" MT_POS_2X4(EROR) "cmp %[pe], %[end]\n\t"                       \
                                                                         "bne 2b\n\t"                                  \
                                                                         "ldrd %[t0], %[t2], %[skip]\n\t"              \
                                                                         "add %[pe], %[pe], %[t0]\n\t"                 \
                                                                         "add %[px], %[px], %[t2]\n\t"                 \
                                                                         "ldr %[t0], %[erow]\n\t"                      \
                                                                         "add %[end], %[end], %[t0]\n\t"               \
                                                                         "ldr %[t0], %[rows]\n\t"                      \
                                                                         "subs %[t0], %[t0], #1\n\t"                   \
                                                                         "str %[t0], %[rows]\n\t"                      \
                                                                         "bne 1b\n\t"                                  \
                     : [s0] "=&r"(s0), [s1] "=&r"(s1), [s2] "=&r"(s2), [s3] "=&r"(s3), [s4] "=&r"(s4), [s5] "=&r"(s5), \
                       [s6] "=&r"(s6), [s7] "=&r"(s7), [pe] "+r"(pe), [px] "+r"(px), [end] "+r"(end), [t0] "=&r"(t0),  \
                       [t1] "=&r"(t1), [t2] "=&r"(t2), [rows] "+m"(rows)                                               \
                     : [col] "m"(prm[0]), [skip] "m"(prm[2]), [erow] "m"(prm[4]), [odd] "m"(prm[5]),                   \
                       "m"(*(const int32_t(*)[6])prm)                                                                  \
                     : "cc", "memory")

static MT_NOINLINE void rect_2x4(const int8_t *e, const int8_t *x, const mt_rect_t *r, uint32_t sh, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    if (r->noy > 0) {
        // Addresses as integers: the loop steps one column past each row.
        const int32_t nox = r->nox;
        // ec, xc | steps from a row's end to the next row's start | e_row | nox odd
        const int32_t prm[6] = { r->e_col, r->x_col, r->e_row - nox * r->e_col, r->x_row - nox * r->x_col,
                                 r->e_row, nox & 1 };
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
            const uint32_t xv = (uint32_t)((int32_t)x[xi] - zp);         // a halfword: -255..255
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
#define MT_POS_2X4G                          \
    "ldr %[t2], %[db]\n\t"                   \
    "ldrsb %[t1], [%[pe], %[t2]]\n\t"        \
    "ldrsb %[t0], [%[pe]]\n\t"               \
    "pkhbt %[t0], %[t0], %[t1], lsl #16\n\t" \
    "ldr %[t1], [%[px]]\n\t"                 \
    "sxtb16 %[t2], %[t1]\n\t"                \
    "sxtb16 %[t1], %[t1], ror #8\n\t"        \
    "smlabb %[s0], %[t0], %[t2], %[s0]\n\t"  \
    "smlabb %[s1], %[t0], %[t1], %[s1]\n\t"  \
    "smlabt %[s2], %[t0], %[t2], %[s2]\n\t"  \
    "smlabt %[s3], %[t0], %[t1], %[s3]\n\t"  \
    "smlatb %[s4], %[t0], %[t2], %[s4]\n\t"  \
    "smlatb %[s5], %[t0], %[t1], %[s5]\n\t"  \
    "smlatt %[s6], %[t0], %[t2], %[s6]\n\t"  \
    "smlatt %[s7], %[t0], %[t1], %[s7]\n\t"  \
    "ldrd %[t0], %[t2], %[col]\n\t"          \
    "add %[pe], %[pe], %[t0]\n\t"            \
    "add %[px], %[px], %[t2]\n\t"

// The rectangle in one asm loop, as MT_RECT_2X4 (the C loop spills).
static MT_NOINLINE void rect_2x4g(const int8_t *e, int32_t db, const int8_t *x, const mt_rect_t *r, int32_t *s) {
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    if (r->noy > 0) {
        const int32_t nox = r->nox;
        // ec, xc | steps from a row's end to the next row's start | e_row | nox odd | db
        const int32_t prm[7] = { r->e_col, r->x_col, r->e_row - nox * r->e_col, r->x_row - nox * r->x_col, r->e_row,
                                 nox & 1,  db };
        uint32_t pe = (uint32_t)(uintptr_t)e, px = (uint32_t)(uintptr_t)x, t0, t1, t2;
        uint32_t end = pe + (uint32_t)(nox * r->e_col);
        int32_t rows = r->noy;
        __asm__ volatile(
            "mov %[s0], #0\n\t"
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
            "2:\n\t" MT_POS_2X4G "3:\n\t" MT_POS_2X4G "cmp %[pe], %[end]\n\t"
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
            : [s0] "=&r"(s0), [s1] "=&r"(s1), [s2] "=&r"(s2), [s3] "=&r"(s3), [s4] "=&r"(s4), [s5] "=&r"(s5),
              [s6] "=&r"(s6), [s7] "=&r"(s7), [pe] "+r"(pe), [px] "+r"(px), [end] "+r"(end), [t0] "=&r"(t0),
              [t1] "=&r"(t1), [t2] "=&r"(t2), [rows] "+m"(rows)
            : [col] "m"(prm[0]), [skip] "m"(prm[2]), [erow] "m"(prm[4]), [odd] "m"(prm[5]), [db] "m"(prm[6]),
              "m"(*(const int32_t(*)[7])prm)
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
#define MT_POS_2X1G                      \
    "ldrsb %[t0], [%[pe]]\n\t"           \
    "ldrsb %[t1], [%[pe], %[db]]\n\t"    \
    "ldrsb %[t2], [%[px]]\n\t"           \
    "sub %[t2], %[t2], %[zp]\n\t"        \
    "mla %[s0], %[t0], %[t2], %[s0]\n\t" \
    "mla %[s1], %[t1], %[t2], %[s1]\n\t" \
    "add %[pe], %[pe], %[ec]\n\t"        \
    "add %[px], %[px], %[xc]\n\t"

// The rectangle in one asm loop, two positions per turn as MT_RECT_2X4 (the C
// loop's index arithmetic cost a third more).
static MT_NOINLINE void rect_2x1g(const int8_t *e, int32_t db, const int8_t *x, const mt_rect_t *r, int32_t zp,
                                  int32_t *s) {
    int32_t s0 = 0, s1 = 0;
    if (r->noy > 0) {
        const int32_t nox = r->nox;
        // steps from a row's end to the next row's start | e_row | nox odd
        const int32_t prm[5] = { r->e_row - nox * r->e_col, r->x_row - nox * r->x_col, r->e_row, nox & 1, 0 };
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
                         "2:\n\t" MT_POS_2X1G "3:\n\t" MT_POS_2X1G "cmp %[pe], %[end]\n\t"
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


#ifdef MT_GW_PACKED
// Output positions whose pair errors fit the stack buffers of gw_pairs_packed.
#define MT_GW_PACK_MAX 256

// Sums of a packed pair's listed positions times four input channels, as
// rect_2x4g: tl holds (packed errors, input offset from x + base) per
// position, n >= 1 of them. One asm loop (the C loop spills accumulators);
// addresses as integers (an offset may be negative, its sum with base not).
static MT_NOINLINE void list_2x4p(const uint32_t *tl, int32_t n, const int8_t *x, int32_t base, int32_t *s) {
    int32_t s0, s1, s2, s3, s4, s5, s6, s7;
    uint32_t pl = (uint32_t)(uintptr_t)tl, t0, t1, t2;
    const uint32_t xa = (uint32_t)(uintptr_t)x + (uint32_t)base;
    const uint32_t end = pl + 8u * (uint32_t)n;
    __asm__ volatile("mov %[s0], #0\n\t"
                     "mov %[s1], #0\n\t"
                     "mov %[s2], #0\n\t"
                     "mov %[s3], #0\n\t"
                     "mov %[s4], #0\n\t"
                     "mov %[s5], #0\n\t"
                     "mov %[s6], #0\n\t"
                     "mov %[s7], #0\n\t"
                     "1:\n\t"
                     "ldrd %[t0], %[t1], [%[pl]], #8\n\t"
                     "ldr %[t1], [%[x], %[t1]]\n\t"
                     "sxtb16 %[t2], %[t1]\n\t"
                     "sxtb16 %[t1], %[t1], ror #8\n\t"
                     "smlabb %[s0], %[t0], %[t2], %[s0]\n\t"
                     "smlabb %[s1], %[t0], %[t1], %[s1]\n\t"
                     "smlabt %[s2], %[t0], %[t2], %[s2]\n\t"
                     "smlabt %[s3], %[t0], %[t1], %[s3]\n\t"
                     "smlatb %[s4], %[t0], %[t2], %[s4]\n\t"
                     "smlatb %[s5], %[t0], %[t1], %[s5]\n\t"
                     "smlatt %[s6], %[t0], %[t2], %[s6]\n\t"
                     "smlatt %[s7], %[t0], %[t1], %[s7]\n\t"
                     "cmp %[pl], %[end]\n\t"
                     "bne 1b\n\t"
                     : [s0] "=&r"(s0), [s1] "=&r"(s1), [s2] "=&r"(s2), [s3] "=&r"(s3), [s4] "=&r"(s4), [s5] "=&r"(s5),
                       [s6] "=&r"(s6), [s7] "=&r"(s7), [pl] "+r"(pl), [t0] "=&r"(t0), [t1] "=&r"(t1), [t2] "=&r"(t2)
                     : [x] "r"(xa), [end] "r"(end), "m"(*(const uint32_t(*)[2 * MT_GW_PACK_MAX]) tl)
                     : "cc", "memory");
    (void)t0, (void)t1, (void)t2;
    s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3, s[4] = s4, s[5] = s5, s[6] = s6, s[7] = s7;
}

// Masked weight gradient, pairs of selected channels (cpg >= 4, at most
// MT_GW_PACK_MAX output positions): pair outermost, the positions where
// either channel's error is nonzero listed once with their errors packed
// into halfword pairs (a zero error adds nothing to any sum, and after a
// pool most are zero): those whose window lies inside the input once for
// every tap, the others per tap where inside its rectangle; then every
// input quad over that list (list_2x4p), the input channels past
// the last quad one at a time; a last odd channel as a pair with a zero
// partner; the biases from the same list.
static MT_NOINLINE void gw_pairs_packed(const mt_conv2d_params_t *p, const mt_geom_t *g, const int8_t *x,
                                        const int8_t *e, const uint8_t *mask, const mt_sink_t *ow,
                                        const mt_sink_t *ob) {
    uint32_t pk[MT_GW_PACK_MAX], yx[MT_GW_PACK_MAX], tl[2 * MT_GW_PACK_MAX];
    const int32_t out_c = p->out_c, cpg = g->cpg, zp = p->in_zp;
    const int32_t ystep = p->stride_h * g->x_row, xstep = p->stride_w * p->in_c;
    int32_t s[8], se[2];
    for (int32_t gi = 0; gi < p->groups; ++gi) {
        const int32_t oc_end = (gi + 1) * g->opg;
        const int32_t o00 = (-p->pad_top * p->in_w - p->pad_left) * p->in_c + gi * cpg;  // (0, 0)'s input at tap (0, 0)
        int32_t a = -1;
        for (int32_t b = gi * g->opg; b <= oc_end; ++b) {
            if (b < oc_end && !mask[b]) {
                continue;
            }
            if (b < oc_end && a < 0) {
                a = b;
                continue;
            }
            if (a < 0) {
                break;
            }
            const int32_t two = b < oc_end, bo = two ? b : a;  // alone: b's errors read as 0
            const uint32_t bmask = two ? 0xFFFFFFFFu : 0xFFFFu;
            // tl: the inner windows (na), then per tap the border ones inside it; pk, yx: the
            // border ones. Offsets from tap (0, 0)'s input, so an inner one serves every tap.
            int32_t n = 0, na = 0;
            uint32_t bias = 0, sin = 0;  // both sums of e over every position, the inner ones (<= 256 terms a lane)
            for (int32_t oy = 0, o = 0; oy < p->out_h; ++oy) {
                const int32_t iy = oy * p->stride_h - p->pad_top;
                const int yin = iy >= 0 && iy + p->k_h <= p->in_h;
                for (int32_t ox = 0; ox < p->out_w; ++ox, o += out_c) {
                    const uint32_t w = mt_pkhbt16((uint32_t)(int32_t)e[o + a], (uint32_t)(int32_t)e[o + bo]) & bmask;
                    if (!w) {
                        continue;
                    }
                    bias = mt_sadd16(bias, w);
                    const int32_t ix = ox * p->stride_w - p->pad_left;
                    if (yin && ix >= 0 && ix + p->k_w <= p->in_w) {
                        sin = mt_sadd16(sin, w);
                        tl[2 * na] = w;
                        tl[2 * na + 1] = (uint32_t)(oy * ystep + ox * xstep + o00);
                        ++na;
                    } else {
                        pk[n] = w;
                        yx[n++] = ((uint32_t)oy << 16) | (uint32_t)ox;
                    }
                }
            }
            sink_put(ob, a, mt_lo16(bias));
            if (two) {
                sink_put(ob, b, mt_hi16(bias));
            }
            for (int32_t ky = 0; ky < p->k_h; ++ky) {
                int32_t oy0, oy1;
                out_range(ky, p->stride_h, p->pad_top, p->in_h, p->out_h, &oy0, &oy1);
                for (int32_t kx = 0; kx < p->k_w; ++kx) {
                    int32_t ox0, ox1;
                    out_range(kx, p->stride_w, p->pad_left, p->in_w, p->out_w, &ox0, &ox1);
                    const int32_t xt = (ky * p->in_w + kx) * p->in_c;  // tap (ky, kx)'s input from (0, 0)'s
                    int32_t m = na;
                    uint32_t acc = sin;
                    if (oy1 > oy0 && ox1 > ox0) {
                        const uint32_t ny = (uint32_t)(oy1 - oy0), nx = (uint32_t)(ox1 - ox0);
                        for (int32_t i = 0; i < n; ++i) {
                            const int32_t oy = (int32_t)(yx[i] >> 16), ox = (int32_t)(yx[i] & 0xFFFFu);
                            if ((uint32_t)(oy - oy0) < ny && (uint32_t)(ox - ox0) < nx) {
                                tl[2 * m] = pk[i];
                                tl[2 * m + 1] = (uint32_t)(oy * ystep + ox * xstep + o00);
                                acc = mt_sadd16(acc, pk[i]);  // <= 256 terms: no lane wraps
                                ++m;
                            }
                        }
                    }
                    se[0] = mt_lo16(acc);
                    se[1] = mt_hi16(acc);
                    const int32_t wt = ky * g->w_row + kx * cpg;
                    const int32_t wa = a * g->w_oc + wt, wb = bo * g->w_oc + wt;
                    int32_t c = 0;
                    for (; c + 4 <= cpg; c += 4) {
                        if (m > 0) {
                            list_2x4p(tl, m, x, xt + c, s);
                        } else {
                            s[0] = s[1] = s[2] = s[3] = s[4] = s[5] = s[6] = s[7] = 0;
                        }
                        for (int32_t k = 0; k < 4; ++k) {
                            sink_put(ow, wa + c + k, s[k] - zp * se[0]);
                            if (two) {
                                sink_put(ow, wb + c + k, s[4 + k] - zp * se[1]);
                            }
                        }
                    }
                    for (; c < cpg; ++c) {  // past the last quad: one input channel at a time
                        int32_t s0 = 0, s1 = 0;
                        for (int32_t i = 0; i < m; ++i) {
                            const uint32_t xv = (uint32_t)(int32_t)x[xt + c + (int32_t)tl[2 * i + 1]];
                            s0 = mt_smlabb(tl[2 * i], xv, s0);
                            s1 = mt_smlatb(tl[2 * i], xv, s1);
                        }
                        sink_put(ow, wa + c, s0 - zp * se[0]);
                        if (two) {
                            sink_put(ow, wb + c, s1 - zp * se[1]);
                        }
                    }
                }
            }
            a = -1;
        }
    }
}

// Weights of one output channel that gw_pairs_scatter sums on the stack.
#define MT_GW_SCAT_MAX 32

// sa[i] += the sums of the listed positions' packed pair errors (sums ta, tb)
// times (x - zp) at tap i's input channel, i < w_oc of the listed windows
// (all inside the input): tap-major over the list, the sums in registers.
static MT_NOINLINE void scatter_flush(const mt_conv2d_params_t *p, const mt_geom_t *g, const int8_t *x,
                                      const uint32_t *tl, int32_t m, int32_t ta, int32_t tb, int32_t *sa, int32_t *sb) {
    const int32_t cpg = g->cpg, zp = p->in_zp;
    for (int32_t ky = 0, i = 0; ky < p->k_h; ++ky) {
        for (int32_t kx = 0; kx < p->k_w; ++kx) {
            for (int32_t ci = 0; ci < cpg; ++ci, ++i) {
                const int8_t *xt = x + (ky * p->in_w + kx) * p->in_c + ci;
                int32_t s0 = 0, s1 = 0;
                for (const uint32_t *q = tl, *end = tl + 2 * m; q != end; q += 2) {
                    const uint32_t xv = (uint32_t)(int32_t)xt[(int32_t)q[1]];
                    s0 = mt_smlabb(q[0], xv, s0);
                    s1 = mt_smlatb(q[0], xv, s1);
                }
                sa[i] += s0 - zp * ta;
                sb[i] += s1 - zp * tb;
            }
        }
    }
}

// Masked weight gradient, the selected channels with few input channels
// (cpg < 4, at most MT_GW_SCAT_MAX weights per channel; depthwise too) in
// pairs of a group, a last odd one with a zero partner: position-major, the positions where both errors
// are zero skipped (after a pool most are), each other one's window added
// into the pair's int32 sums, which are complete before they go to the sink;
// the windows wholly inside the input listed and added tap-major
// (scatter_flush), MT_GW_PACK_MAX at a time.
static MT_NOINLINE void gw_pairs_scatter(const mt_conv2d_params_t *p, const mt_geom_t *g, const int8_t *x,
                                         const int8_t *e, const uint8_t *mask, const mt_sink_t *ow,
                                         const mt_sink_t *ob) {
    int32_t sa[MT_GW_SCAT_MAX], sb[MT_GW_SCAT_MAX];
    uint32_t tl[2 * MT_GW_PACK_MAX];  // listed windows: packed pair errors, input offset
    const int32_t out_c = p->out_c, cpg = g->cpg, zp = p->in_zp, w_oc = g->w_oc, in_c = p->in_c;
    for (int32_t gi = 0; gi < p->groups; ++gi) {
        const int32_t oc_end = (gi + 1) * g->opg;
        int32_t a = -1;
        for (int32_t b = gi * g->opg; b <= oc_end; ++b) {
            if (b < oc_end && !mask[b]) {
                continue;
            }
            if (b < oc_end && a < 0) {
                a = b;
                continue;
            }
            if (a < 0) {
                break;
            }
            const int32_t two = b < oc_end, bo = two ? b : a;  // alone: b's errors read as 0
            int32_t ba = 0, bb = 0, ta = 0, tb = 0, m = 0;
            for (int32_t i = 0; i < w_oc; ++i) {
                sa[i] = sb[i] = 0;
            }
            for (int32_t oy = 0, o = 0; oy < p->out_h; ++oy) {
                const int32_t iy = oy * p->stride_h - p->pad_top;
                const int32_t ky0 = iy < 0 ? -iy : 0, ky1 = p->in_h - iy < p->k_h ? p->in_h - iy : p->k_h;
                for (int32_t ox = 0; ox < p->out_w; ++ox, o += out_c) {
                    const int32_t ea = e[o + a], eb = two ? e[o + bo] : 0;
                    if ((ea | eb) == 0) {
                        continue;
                    }
                    ba += ea;
                    bb += eb;
                    const int32_t ix = ox * p->stride_w - p->pad_left;
                    const int32_t kx0 = ix < 0 ? -ix : 0, kx1 = p->in_w - ix < p->k_w ? p->in_w - ix : p->k_w;
                    if (ky0 == 0 && ky1 == p->k_h && kx0 == 0 && kx1 == p->k_w) {
                        tl[2 * m] = mt_pkhbt16((uint32_t)ea, (uint32_t)eb);
                        tl[2 * m + 1] = (uint32_t)((iy * p->in_w + ix) * in_c + gi * cpg);
                        ta += ea;
                        tb += eb;
                        if (++m == MT_GW_PACK_MAX) {
                            scatter_flush(p, g, x, tl, m, ta, tb, sa, sb);
                            m = ta = tb = 0;
                        }
                        continue;
                    }
                    const int32_t n = (kx1 - kx0) * cpg;  // a kernel row's valid weights
                    for (int32_t ky = ky0; ky < ky1; ++ky) {
                        const int8_t *xr = x + ((iy + ky) * p->in_w + ix + kx0) * in_c + gi * cpg;
                        int32_t *ga = sa + ky * g->w_row + kx0 * cpg, *gb = sb + ky * g->w_row + kx0 * cpg;
                        if (cpg == in_c) {  // the row's taps are contiguous
                            for (int32_t i = 0; i < n; ++i) {
                                const int32_t xv = (int32_t)xr[i] - zp;
                                ga[i] += ea * xv;
                                gb[i] += eb * xv;
                            }
                            continue;
                        }
                        for (int32_t kx = kx0, i = 0; kx < kx1; ++kx, xr += in_c) {
                            for (int32_t ci = 0; ci < cpg; ++ci, ++i) {
                                const int32_t xv = (int32_t)xr[ci] - zp;
                                ga[i] += ea * xv;
                                gb[i] += eb * xv;
                            }
                        }
                    }
                }
            }
            if (m > 0) {
                scatter_flush(p, g, x, tl, m, ta, tb, sa, sb);
            }
            for (int32_t i = 0; i < w_oc; ++i) {
                sink_put(ow, a * w_oc + i, sa[i]);
                if (two) {
                    sink_put(ow, bo * w_oc + i, sb[i]);
                }
            }
            sink_put(ob, a, ba);
            if (two) {
                sink_put(ob, bo, bb);
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
#ifdef MT_GW_PACKED
    // every selected channel's weights and bias there (no masked pair path on Cortex-M0)
    if (mask && cpg >= 4 && p->out_h * p->out_w <= MT_GW_PACK_MAX) {
        gw_pairs_packed(p, &g, x, e, mask, ow, ob);
        return;
    }
    if (mask && cpg < 4 && g.w_oc <= MT_GW_SCAT_MAX) {
        gw_pairs_scatter(p, &g, x, e, mask, ow, ob);
        return;
    }
#endif
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
            if (cpg == 1 && g.opg == 1) {                // depthwise: channel quads, then single channels
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
    mt_rect_t rb = { p->out_h * p->out_w, 1, out_c, 0, 0, 0 };
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

#if MT_SOFT_MATH
// Zero every row first (masked rows stay 0), then scatter position-major,
// testing the mask and the error before any window work.
void mt_conv2d_s8_grad_weight(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *e, const uint8_t *mask,
                              int32_t *gw, int32_t *gb) {
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
void mt_conv2d_s8_grad_weight(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *e, const uint8_t *mask,
                              int32_t *gw, int32_t *gb) {
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
    const mt_sink_t ow = { gw, 0, 0, 0 }, ob = { gb, 0, 0, 0 };
    gw_blocked(p, x, e, mask, &ow, &ob);
}
#endif

#if MT_HAS_FLOAT
// Each weight's int32 sum is complete before its single float multiply and
// add, as the contract requires; masked rows untouched. gw / gb row r is
// channel c0 + r: the binding guarantees every channel outside the window is
// masked, so gw_blocked hands the sinks only rows inside it.
void mt_conv2d_s8_grad_weight_f32(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *e, const uint8_t *mask,
                                  float w_scale, float b_scale, float *gw, float *gb, int32_t c0) {
    const int32_t w_oc = p->k_h * p->k_w * (int32_t)mt_udiv_u32((uint32_t)p->in_c, (uint32_t)p->groups);
    const mt_sink_t ow = { 0, gw, w_scale, c0 * w_oc }, ob = { 0, gb, b_scale, c0 };
    gw_blocked(p, x, e, mask, &ow, &ob);
}
#endif
