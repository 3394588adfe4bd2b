// Stand-alone ReLU / ReLU6 on int8 tensors (docs/numerics.md, "relu / relu6").
// Scale and zero point pass through unchanged, so these are pure clamps.
#include "mt_kernels.h"

// y = max(x, zp). Element-wise, so y == x (in place) is fine.
void mt_relu_s8_forward(const int8_t *x, int8_t *y, size_t n, int32_t zp) {
    for (size_t i = 0; i < n; ++i) {
        const int32_t v = x[i];
        y[i] = (int8_t)(v < zp ? zp : v);
    }
}

// y = min(max(x, zp), q6), in that order (matters only if q6 < zp).
void mt_relu6_s8_forward(const int8_t *x, int8_t *y, size_t n, int32_t zp, int32_t q6) {
    for (size_t i = 0; i < n; ++i) {
        int32_t v = x[i];
        v = v < zp ? zp : v;
        y[i] = (int8_t)(v > q6 ? q6 : v);
    }
}

// Error passes where the stored output was strictly above zp, else 0.
void mt_relu_s8_backward(const int8_t *y, int8_t *e, size_t n, int32_t zp) {
    for (size_t i = 0; i < n; ++i) {
        if (y[i] <= zp) {
            e[i] = 0;
        }
    }
}

// Error passes only strictly inside (zp, q6): clipped outputs have zero slope.
void mt_relu6_s8_backward(const int8_t *y, int8_t *e, size_t n, int32_t zp, int32_t q6) {
    for (size_t i = 0; i < n; ++i) {
        const int32_t v = y[i];
        if (v <= zp || v >= q6) {
            e[i] = 0;
        }
    }
}
