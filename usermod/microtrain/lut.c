// Lookup-table activations on int8 tensors (docs/numerics.md, "lookup-table
// activation"). The host builds both tables from the float function and the
// input / output quantisation, so the device needs no float and no libm.
#include "mt_kernels.h"

// y[i] = table[x[i] + 128]. Element-wise, so y == x (in place) is fine.
void mt_lut_s8_forward(const int8_t *x, const int8_t *table, int8_t *y, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        y[i] = table[(int32_t)x[i] + 128];
    }
}

// ein = dyn_requant(e[i] * dtable[x[i] + 128]). Two passes (maximum, then
// requantise) recompute the products instead of keeping an int32 scratch:
// one multiply per element is cheaper than 4 bytes of RAM per element.
// |dtable| < 2^24 (checked) keeps every product inside int32. ein may be e.
int32_t mt_lut_s8_grad_input(const int8_t *x, const int8_t *e, const int32_t *dtable, int8_t *ein, size_t n) {
    uint32_t m = 0;
    for (size_t i = 0; i < n; ++i) {
        const uint32_t a = mt_abs_u32((int32_t)e[i] * dtable[(int32_t)x[i] + 128]);
        if (a > m) {
            m = a;
        }
    }
    const int32_t shift = mt_dyn_shift(m);
    for (size_t i = 0; i < n; ++i) {
        ein[i] = mt_dyn_apply((int32_t)e[i] * dtable[(int32_t)x[i] + 128], shift);
    }
    return shift;
}
