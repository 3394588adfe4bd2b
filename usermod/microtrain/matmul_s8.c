// Product of two int8 activations, y = A B (tb 0) or A B^T (tb 1): attention
// scores Q K^T and weighted values A V (docs/numerics.md, "matmul").
#include "mt_dsp.h"
#include "mt_kernels.h"
#include "mt_seq.h"

// sum_t (x[t] - zx) * (w[t] - zw) over n contiguous bytes. On Cortex-M4/M7
// four bytes a step through SMLAD (each difference fits a halfword); elsewhere
// the plain loop, which the portable SIMD twins would only slow down. The
// callers keep |sum| < 2^31, so every order gives the same bits.
static int32_t mt_dot_zp(const int8_t *x, int32_t zx, const int8_t *w, int32_t zw, int32_t n) {
    int32_t acc = 0, t = 0;
#if MT_DSP
    const uint32_t zzx = mt_pack16(zx, zx), zzw = mt_pack16(zw, zw);
    for (; t + 4 <= n; t += 4) {
        const uint32_t vx = mt_load_u32(x + t), vw = mt_load_u32(w + t);
        acc = mt_smlad(mt_ssub16(mt_sxtb16(vx), zzx), mt_ssub16(mt_sxtb16(vw), zzw), acc);
        acc = mt_smlad(mt_ssub16(mt_sxtb16_ror8(vx), zzx), mt_ssub16(mt_sxtb16_ror8(vw), zzw), acc);
    }
#endif
    for (; t < n; ++t) {
        acc += (x[t] - zx) * (w[t] - zw);
    }
    return acc;
}

#if MT_DSP
// Four outputs of y = A B (b's rows ldb bytes apart) at columns j..j+3: the
// four sums stay in registers while the inner index walks down b's rows, four
// bytes of a row a load.
static void mt_dot4_cols(const int8_t *ar, int32_t za, const int8_t *bc, int32_t zb, int32_t inner, int32_t ldb,
                         int32_t *s) {
    const uint32_t zz = mt_pack16(zb, zb);
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int32_t t = 0; t < inner; ++t, bc += ldb) {
        const uint32_t av = (uint32_t)(ar[t] - za) & 0xFFFFu;
        const uint32_t vb = mt_load_u32(bc);
        const uint32_t even = mt_ssub16(mt_sxtb16(vb), zz), odd = mt_ssub16(mt_sxtb16_ror8(vb), zz);
        s0 = mt_smlabb(even, av, s0);
        s1 = mt_smlabb(odd, av, s1);
        s2 = mt_smlatb(even, av, s2);
        s3 = mt_smlatb(odd, av, s3);
    }
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
}
#endif

// acc[t] += s * (x[t] - zx), t < n: one row of an outer product (|s| <= 255);
// four at a time through SMLABB / SMLATB on Cortex-M4/M7.
static void mt_axpy_zp(int32_t *acc, int32_t s, const int8_t *x, int32_t zx, int32_t n) {
    int32_t t = 0;
#if MT_DSP
    const uint32_t zz = mt_pack16(zx, zx), ss = (uint32_t)s & 0xFFFFu;
    for (; t + 4 <= n; t += 4) {
        const uint32_t v = mt_load_u32(x + t);
        const uint32_t even = mt_ssub16(mt_sxtb16(v), zz), odd = mt_ssub16(mt_sxtb16_ror8(v), zz);
        acc[t] = mt_smlabb(even, ss, acc[t]);
        acc[t + 1] = mt_smlabb(odd, ss, acc[t + 1]);
        acc[t + 2] = mt_smlatb(even, ss, acc[t + 2]);
        acc[t + 3] = mt_smlatb(odd, ss, acc[t + 3]);
    }
#endif
    for (; t < n; ++t) {
        acc[t] += s * (x[t] - zx);
    }
}

// One head's view of the operands: offsets of its first row and the steps
// between rows. With tb 1 the heads split the inner dim of a and b (tokens of
// heads * inner values) and stack in y (heads x rows x cols); with tb 0 a is
// stacked (heads x rows x inner) and the heads split the columns of b and y.
typedef struct {
    int32_t a0, lda, b0, ldb, y0, ldy;
} mt_mm_head_t;

static void mt_mm_head(const mt_matmul_params_t *p, int32_t h, mt_mm_head_t *v) {
    const int32_t nh = p->heads, r = p->rows, k = p->inner, c = p->cols;
    if (p->tb) {
        v->a0 = h * k;
        v->lda = nh * k;
        v->b0 = h * k;
        v->ldb = nh * k;
        v->y0 = h * r * c;
        v->ldy = c;
    } else {
        v->a0 = h * r * k;
        v->lda = k;
        v->b0 = h * c;
        v->ldb = nh * c;
        v->y0 = h * c;
        v->ldy = nh * c;
    }
}

// acc = sum_k (a - a_zp) * (b - b_zp) is exact in int32 (inner <= 32768), in
// whatever order the sum is taken.
void mt_matmul_s8_forward(const mt_matmul_params_t *p, const int8_t *a, const int8_t *b, int8_t *y) {
    const int32_t rows = p->rows, inner = p->inner, cols = p->cols, za = p->a_zp, zb = p->b_zp;
    mt_rq_t q;
    mt_rq_init(&q, p->mult, p->sh, p->act_min - p->out_zp, p->act_max - p->out_zp, p->out_zp);
    for (int32_t h = 0; h < p->heads; ++h) {
        mt_mm_head_t v;
        mt_mm_head(p, h, &v);
        const int8_t *bh = b + v.b0;
        for (int32_t i = 0; i < rows; ++i) {
            const int8_t *ar = a + v.a0 + i * v.lda;
            int8_t *yr = y + v.y0 + i * v.ldy;
            if (p->tb) {  // both operands contiguous along the inner dimension
                for (int32_t j = 0; j < cols; ++j) {
                    yr[j] = mt_rq_out(mt_dot_zp(ar, za, bh + j * v.ldb, zb, inner), &q);
                }
                continue;
            }
            int32_t j = 0;
#if MT_DSP
            for (; j + 4 <= cols; j += 4) {
                int32_t s[4];
                mt_dot4_cols(ar, za, bh + j, zb, inner, v.ldb, s);
                for (int32_t u = 0; u < 4; ++u) {
                    yr[j + u] = mt_rq_out(s[u], &q);
                }
            }
#endif
            for (; j < cols; ++j) {
                int32_t acc = 0;
                const int8_t *bc = bh + j;
                for (int32_t t = 0; t < inner; ++t, bc += v.ldb) {
                    acc += (ar[t] - za) * (*bc - zb);
                }
                yr[j] = mt_rq_out(acc, &q);
            }
        }
    }
}

// dA = E (B - b_zp)^T (tb 0) or E (B - b_zp) (tb 1) into acc (laid out as a),
// then dyn_requant. |acc| <= cols * 128 * 255 < 2^31 (cols <= 65535).
int32_t mt_matmul_s8_grad_a(const mt_matmul_params_t *p, const int8_t *e, const int8_t *b, int32_t *acc, int8_t *ein) {
    const int32_t rows = p->rows, inner = p->inner, cols = p->cols, zb = p->b_zp;
    for (int32_t h = 0; h < p->heads; ++h) {
        mt_mm_head_t v;
        mt_mm_head(p, h, &v);
        const int8_t *bh = b + v.b0;
        for (int32_t i = 0; i < rows; ++i) {
            const int8_t *er = e + v.y0 + i * v.ldy;
            int32_t *ar = acc + v.a0 + i * v.lda;
            if (!p->tb) {  // B is inner x cols: row k of B against row i of E
                for (int32_t k = 0; k < inner; ++k) {
                    ar[k] = mt_dot_zp(er, 0, bh + k * v.ldb, zb, cols);
                }
            } else {  // B is cols x inner: the rows of B weighted by row i of E
                for (int32_t k = 0; k < inner; ++k) {
                    ar[k] = 0;
                }
                for (int32_t j = 0; j < cols; ++j) {
                    if (er[j]) {
                        mt_axpy_zp(ar, er[j], bh + j * v.ldb, zb, inner);
                    }
                }
            }
        }
    }
    return mt_dyn_requant_s8(acc, (size_t)(p->heads * rows * inner), ein);
}

// dB = (A - a_zp)^T E (tb 0) or E^T (A - a_zp) (tb 1) into acc (laid out as b),
// then dyn_requant. |acc| <= rows * 128 * 255 < 2^31.
int32_t mt_matmul_s8_grad_b(const mt_matmul_params_t *p, const int8_t *e, const int8_t *a, int32_t *acc, int8_t *ein) {
    const int32_t rows = p->rows, inner = p->inner, cols = p->cols, za = p->a_zp;
    const int32_t n = p->heads * inner * cols;
    for (int32_t t = 0; t < n; ++t) {
        acc[t] = 0;
    }
    for (int32_t h = 0; h < p->heads; ++h) {
        mt_mm_head_t v;
        mt_mm_head(p, h, &v);
        int32_t *bh = acc + v.b0;
        for (int32_t i = 0; i < rows; ++i) {
            const int8_t *er = e + v.y0 + i * v.ldy, *ar = a + v.a0 + i * v.lda;
            if (!p->tb) {  // row k of dB += (a[i][k] - za) * row i of E
                for (int32_t k = 0; k < inner; ++k) {
                    const int32_t s = ar[k] - za;
                    if (s) {
                        mt_axpy_zp(bh + k * v.ldb, s, er, 0, cols);
                    }
                }
            } else {  // row j of dB += e[i][j] * (row i of A - za)
                for (int32_t j = 0; j < cols; ++j) {
                    if (er[j]) {
                        mt_axpy_zp(bh + j * v.ldb, er[j], ar, za, inner);
                    }
                }
            }
        }
    }
    return mt_dyn_requant_s8(acc, (size_t)n, ein);
}
