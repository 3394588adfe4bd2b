// Product of two int8 activations, y = A B (tb 0) or A B^T (tb 1): attention
// scores Q K^T and weighted values A V (docs/numerics.md, "matmul").
#include "mt_dsp.h"
#include "mt_kernels.h"

// sum_t x[t] * (w[t] - zw) over n contiguous bytes. Four bytes a step through
// SMLAD on Cortex-M4/M7 (the portable twins elsewhere, the same bits): w - zw
// fits a halfword. |sum| <= 32768 * 128 * 255 < 2^31 for the callers' n.
static int32_t mt_dot_zp(const int8_t *x, const int8_t *w, int32_t zw, int32_t n) {
    const uint32_t zz = mt_pack16(zw, zw);
    int32_t acc = 0, t = 0;
    for (; t + 4 <= n; t += 4) {
        const uint32_t vx = mt_load_u32(x + t), vw = mt_load_u32(w + t);
        acc = mt_smlad(mt_sxtb16(vx), mt_ssub16(mt_sxtb16(vw), zz), acc);
        acc = mt_smlad(mt_sxtb16_ror8(vx), mt_ssub16(mt_sxtb16_ror8(vw), zz), acc);
    }
    for (; t < n; ++t) {
        acc += x[t] * (w[t] - zw);
    }
    return acc;
}

// acc[t] += s * (x[t] - zx), t < n: one row of an outer product.
static void mt_axpy_zp(int32_t *acc, int32_t s, const int8_t *x, int32_t zx, int32_t n) {
    for (int32_t t = 0; t < n; ++t) {
        acc[t] += s * (x[t] - zx);
    }
}

// acc = sum_k (a - a_zp) * (b - b_zp) is exact in int32 (inner <= 32768); the
// zero point of a is applied per element through x - zx = -(zx - x).
void mt_matmul_s8_forward(const mt_matmul_params_t *p, const int8_t *a, const int8_t *b, int8_t *y) {
    const int32_t rows = p->rows, inner = p->inner, cols = p->cols, za = p->a_zp, zb = p->b_zp;
    const int32_t zo = p->out_zp, lo = p->act_min - zo, hi = p->act_max - zo;
    for (int32_t i = 0; i < rows; ++i) {
        const int8_t *ar = a + i * inner;
        for (int32_t j = 0; j < cols; ++j) {
            int32_t acc;
            if (p->tb) {  // both operands contiguous along the inner dimension
                // sum (a - za)(b - zb) = sum a (b - zb) - za sum (b - zb): the
                // parts are below 2^30 and their difference is exact
                const int8_t *br = b + j * inner;
                int32_t sb = 0;
                for (int32_t t = 0; t < inner; ++t) {
                    sb += br[t] - zb;
                }
                acc = (int32_t)((uint32_t)mt_dot_zp(ar, br, zb, inner) - (uint32_t)(za * sb));
            } else {
                acc = 0;
                const int8_t *bc = b + j;
                for (int32_t t = 0; t < inner; ++t, bc += cols) {
                    acc += (ar[t] - za) * (*bc - zb);
                }
            }
            const int32_t r = mt_requant(acc, p->mult, p->sh);
            y[i * cols + j] = (int8_t)(mt_clamp(r, lo, hi) + zo);
        }
    }
}

// dA = E (B - b_zp)^T (tb 0) or E (B - b_zp) (tb 1) into acc (rows x inner),
// then dyn_requant. |acc| <= cols * 128 * 255 < 2^31 (cols <= 65535).
int32_t mt_matmul_s8_grad_a(const mt_matmul_params_t *p, const int8_t *e, const int8_t *b, int32_t *acc, int8_t *ein) {
    const int32_t rows = p->rows, inner = p->inner, cols = p->cols, zb = p->b_zp;
    for (int32_t i = 0; i < rows; ++i) {
        const int8_t *er = e + i * cols;
        int32_t *ar = acc + i * inner;
        if (!p->tb) {  // B is inner x cols: row k of B against row i of E
            for (int32_t k = 0; k < inner; ++k) {
                ar[k] = mt_dot_zp(er, b + k * cols, zb, cols);
            }
        } else {  // B is cols x inner: the rows of B weighted by row i of E
            for (int32_t k = 0; k < inner; ++k) {
                ar[k] = 0;
            }
            for (int32_t j = 0; j < cols; ++j) {
                if (er[j]) {
                    mt_axpy_zp(ar, er[j], b + j * inner, zb, inner);
                }
            }
        }
    }
    return mt_dyn_requant_s8(acc, (size_t)(rows * inner), ein);
}

// dB = (A - a_zp)^T E (tb 0, inner x cols) or E^T (A - a_zp) (tb 1, cols x
// inner) into acc, then dyn_requant. |acc| <= rows * 128 * 255 < 2^31.
int32_t mt_matmul_s8_grad_b(const mt_matmul_params_t *p, const int8_t *e, const int8_t *a, int32_t *acc, int8_t *ein) {
    const int32_t rows = p->rows, inner = p->inner, cols = p->cols, za = p->a_zp;
    const int32_t n = inner * cols;
    for (int32_t t = 0; t < n; ++t) {
        acc[t] = 0;
    }
    for (int32_t i = 0; i < rows; ++i) {
        const int8_t *er = e + i * cols, *ar = a + i * inner;
        if (!p->tb) {  // row k of dB += (a[i][k] - za) * row i of E
            for (int32_t k = 0; k < inner; ++k) {
                const int32_t s = ar[k] - za;
                if (s) {
                    mt_axpy_zp(acc + k * cols, s, er, 0, cols);
                }
            }
        } else {  // row j of dB += e[i][j] * (row i of A - za)
            for (int32_t j = 0; j < cols; ++j) {
                if (er[j]) {
                    mt_axpy_zp(acc + j * inner, er[j], ar, za, inner);
                }
            }
        }
    }
    return mt_dyn_requant_s8(acc, (size_t)n, ein);
}
