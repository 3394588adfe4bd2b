// Channel concatenation (torch.cat(dim=1) in NHWC) and its grad input
// (docs/numerics.md, "channel concatenation").
#include "mt_kernels.h"

// One input's channels into their slot of every output position.
static void mt_concat_part(const int8_t *x, int32_t hw, int32_t c, int32_t zp, int32_t m, int32_t sh, int32_t out_zp,
                           int32_t c_out, int8_t *y) {
    // clamp(r + out_zp, -128, 127) == clamp(r, lo, hi) + out_zp without overflow.
    const int32_t lo = -128 - out_zp, hi = 127 - out_zp;
    for (int32_t p = 0; p < hw; ++p, x += c, y += c_out) {
        for (int32_t k = 0; k < c; ++k) {
            // |x - zp| * 2^16 <= 255 * 2^16 and sh <= 7: the left shift stays below 2^31.
            // (The 2^16 as a multiply: left-shifting a negative value is UB.)
            y[k] = (int8_t)(mt_clamp(mt_requant((x[k] - zp) * 65536, m, sh), lo, hi) + out_zp);
        }
    }
}

void mt_concat_s8_forward(const mt_concat_params_t *p, const int8_t *x1, const int8_t *x2, int8_t *y) {
    const int32_t c_out = p->c1 + p->c2;
    mt_concat_part(x1, p->hw, p->c1, p->in1_zp, p->m1, p->sh1, p->out_zp, c_out, y);
    mt_concat_part(x2, p->hw, p->c2, p->in2_zp, p->m2, p->sh2, p->out_zp, c_out, y + p->c1);
}

// Exact: the slice of input `part` (0 or 1), with the output error's scale.
void mt_concat_s8_grad_input(const mt_concat_params_t *p, const int8_t *e, int32_t part, int8_t *ein) {
    const int32_t c_out = p->c1 + p->c2;
    const int32_t c = part ? p->c2 : p->c1;
    e += part ? p->c1 : 0;
    for (int32_t i = 0; i < p->hw; ++i, e += c_out, ein += c) {
        for (int32_t k = 0; k < c; ++k) {
            ein[k] = e[k];
        }
    }
}
