// Stand-alone ReLU / ReLU6 on int8 tensors (docs/numerics.md, "relu / relu6").
// Scale and zero point pass through unchanged, so these are pure clamps.
#include "mt_kernels.h"
#include "mt_dsp.h"

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
// Four bytes per step: with y and zp biased to unsigned (xor 0x80), each
// 16-bit lane of bytes 0, 2 (then 1, 3) holds y' + 255 - zp' (0..510, no
// carry between lanes), whose bit 8 is set iff y' > zp'; those bits make the
// byte mask. Plain C: the same on every target. e may be y (word by word).
// On armv7e-m SSUB8 + SEL do the byte compare and select (GE set where y <= zp).
void mt_relu_s8_backward(const int8_t *y, int8_t *e, size_t n, int32_t zp) {
    size_t i = 0;
#if MT_DSP
    const uint32_t zp4 = ((uint32_t)zp & 0xFFu) * 0x01010101u;
    for (size_t m = n >> 3; m > 0; --m, i += 8) {  // two words a turn, counting down
        const uint32_t a = mt_keep_above8(mt_load_u32(y + i), zp4, mt_load_u32(e + i));
        const uint32_t b = mt_keep_above8(mt_load_u32(y + i + 4), zp4, mt_load_u32(e + i + 4));
        mt_store_u32(e + i, a);
        mt_store_u32(e + i + 4, b);
    }
    for (; i + 4 <= n; i += 4) {
        mt_store_u32(e + i, mt_keep_above8(mt_load_u32(y + i), zp4, mt_load_u32(e + i)));
    }
#else
    const uint32_t z = (uint32_t)(zp + 128);  // 0..255
    const uint32_t zl = 0x00FF00FFu - (z | (z << 16));
    for (; i + 4 <= n; i += 4) {
        const uint32_t yw = mt_load_u32(y + i) ^ 0x80808080u;
        const uint32_t a = (yw & 0x00FF00FFu) + zl;
        const uint32_t b = ((yw >> 8) & 0x00FF00FFu) + zl;
        const uint32_t keep = ((a >> 8) & 0x00010001u) | (b & 0x01000100u);
        mt_store_u32(e + i, mt_load_u32(e + i) & (keep * 0xFFu));
    }
#endif
    for (; i < n; ++i) {
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
