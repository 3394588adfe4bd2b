// Residual add (TFLite / CMSIS-NN elementwise_add_s8) and the merge of two
// error tensors for a fan-out point (docs/numerics.md, "residual add").
#include "mt_kernels.h"

// Element-wise, so y may alias x1 or x2.
void mt_add_s8_forward(const mt_add_params_t *p, const int8_t *x1, const int8_t *x2, int8_t *y) {
    const int32_t n = p->n;
    const int32_t z1 = p->in1_zp, z2 = p->in2_zp;
    const int32_t m1 = p->m1, sh1 = p->sh1, m2 = p->m2, sh2 = p->sh2;
    const int32_t m_out = p->m_out, sh_out = p->sh_out;
    // 2^left_shift as a multiplier: left-shifting a negative value is UB.
    // |x - zp| <= 255 and left_shift <= 22, so the product is < 2^30.
    const int32_t scale_in = (int32_t)((uint32_t)1 << p->left_shift);
    // clamp(r + out_zp, lo, hi) == clamp(r, lo - out_zp, hi - out_zp) + out_zp,
    // and the right side cannot overflow even when requant returns ~2^31.
    const int32_t lo = p->act_min - p->out_zp, hi = p->act_max - p->out_zp;
    const int32_t out_zp = p->out_zp;
    for (int32_t i = 0; i < n; ++i) {
        // sh1, sh2 <= 0 so |a|, |b| <= 255 * 2^22 + 1 and a + b fits int32.
        const int32_t a = mt_requant((x1[i] - z1) * scale_in, m1, sh1);
        const int32_t b = mt_requant((x2[i] - z2) * scale_in, m2, sh2);
        const int32_t r = mt_requant(a + b, m_out, sh_out);
        y[i] = (int8_t)(mt_clamp(r, lo, hi) + out_zp);
    }
}

// A conv2d whose output only feeds this add, written over the other input
// (skip) a block of rows at a time: tile holds tile_rows rows of the conv's
// output, never all of it. The add is element-wise, so each block's result may
// replace the skip values it was made from. Same bits as conv2d_s8_forward
// then add_s8_forward (side 0: the conv output is x1, 1: x2).
void mt_conv2d_add_s8_forward(const mt_conv2d_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                              const int32_t *mult, const int32_t *shift, const mt_add_params_t *a, int32_t side,
                              int8_t *skip, int8_t *tile, int32_t tile_rows) {
    const int32_t row = p->out_w * p->out_c;
    mt_add_params_t q = { 0,      a->in1_zp, a->in2_zp, a->out_zp,     a->m1,      a->sh1,    a->m2,
                          a->sh2, a->m_out,  a->sh_out, a->left_shift, a->act_min, a->act_max };
    for (int32_t r0 = 0; r0 < p->out_h; r0 += tile_rows) {
        const int32_t r1 = p->out_h - r0 < tile_rows ? p->out_h : r0 + tile_rows;
        mt_conv2d_s8_forward_rows(p, x, w, bias, mult, shift, r0, r1, tile);
        q.n = (r1 - r0) * row;
        int8_t *s = skip + r0 * row;
        if (side == 0) {
            mt_add_s8_forward(&q, tile, s, s);
        } else {
            mt_add_s8_forward(&q, s, tile, s);
        }
    }
}

// acc[i] = ea[i] * ra + eb[i] * rb, then dyn_requant. Without an int32
// scratch the accumulators are recomputed: pass 1 finds max |acc| (for the
// shift), pass 2 writes. |acc| <= 2 * 128 * 2^15 = 2^23 (ra, rb in [0, 2^15]).
// Pass 2 reads element i before writing it, so out may alias ea or eb.
int32_t mt_add_s8_grad_merge(const int8_t *ea, int32_t ra, const int8_t *eb, int32_t rb, size_t n, int8_t *out) {
    uint32_t m = 0;
    for (size_t i = 0; i < n; ++i) {
        const uint32_t v = mt_abs_u32(ea[i] * ra + eb[i] * rb);
        if (v > m) {
            m = v;
        }
    }
    const int32_t shift = mt_dyn_shift(m);
    for (size_t i = 0; i < n; ++i) {
        out[i] = mt_dyn_apply(ea[i] * ra + eb[i] * rb, shift);
    }
    return shift;
}
