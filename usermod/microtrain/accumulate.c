// Float32 gradient accumulation (FPU builds only; docs/numerics.md, "Misc").
#include "mt_kernels.h"

#if MT_HAS_FLOAT
// y[i] = y[i] + a * (float)x[i], product and sum each rounded to float32.
// A fused multiply-add would round once and break bit-exactness with the
// oracle; gnu99 builds let gcc contract by default, so turn that off here.
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("fp-contract=off")))
#endif
void mt_f32_axpy_i32(float *y, const int32_t *x, size_t n, float a) {
    for (size_t i = 0; i < n; ++i) {
        const float t = a * (float)x[i];  // separate statement: clang contracts only within one
        y[i] = y[i] + t;
    }
}
#endif
