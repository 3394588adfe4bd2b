// Zeroth-order (SPSA) training primitives (docs/numerics.md, "Zeroth order"):
// the perturbation and the update of int8 weights along a sign vector that is
// regenerated from a xorshift32 state instead of stored.
#include "mt_kernels.h"

static uint32_t mt_zo_next(uint32_t r) {
    r ^= r << 13;
    r ^= r >> 17;
    r ^= r << 5;
    return r;
}

// The weights never reach -128, so +z and -z moves stay symmetric.
static int8_t mt_zo_sat(int32_t v) {
    return (int8_t)(v > 127 ? 127 : (v < -127 ? -127 : v));
}

// w[i] = sat(base[i] + eps h[i] z[i]) along a column of a Hadamard matrix:
// h[i] = -1 where popcount(row & (i0 + i)) is odd, else +1; z[i] = -1 where bit
// (i mod 32) of the (i div 32)-th next draw is set, else +1. base may be w itself
// (each element is read before it is written). For a
// fixed state, rows 0..P-1 give P orthogonal directions over any P indices of
// 0..P-1 (P a power of two): the directions of the activity perturbation in
// microtrain.zo, whose estimates are then exact instead of random.
void mt_zo_perturb_h_s8(const int8_t *base, size_t n, int32_t eps, uint32_t row, uint32_t i0, uint32_t *rng,
                        int8_t *w) {
    uint32_t r = *rng;
    for (size_t i = 0; i < n;) {
        r = mt_zo_next(r);
        uint32_t bits = r;
        const size_t end = n - i < 32 ? n : i + 32;
        for (; i < end; ++i, bits >>= 1) {
            uint32_t p = row & (i0 + (uint32_t)i);
            p ^= p >> 16;
            p ^= p >> 8;
            p ^= p >> 4;
            p ^= p >> 2;
            p ^= p >> 1;
            const int32_t s = -(int32_t)((bits ^ p) & 1u);  // the two signs' product
            w[i] = mt_zo_sat((int32_t)base[i] + ((eps ^ s) - s));
        }
    }
    *rng = r;
}

// Row 0 (h = +1): w[i] = sat(base[i] + eps z[i]), the SPSA weight perturbation.
void mt_zo_perturb_s8(const int8_t *base, size_t n, int32_t eps, uint32_t *rng, int8_t *w) {
    mt_zo_perturb_h_s8(base, n, eps, 0, 0, rng, w);
}

// w[i] = sat(base[i] - sign(step) m[i] z[i]), m[i] = (|step| >> 16) + (1 if the
// low 16 bits of the next rounding draw are < (|step| & 0xFFFF)): |step| / 65536
// weight quanta, stochastically rounded. rng = {sign state, rounding state}, the
// signs drawn as in mt_zo_perturb_s8. |step| <= 255 * 65536 (checked).
void mt_zo_update_s8(const int8_t *base, size_t n, int32_t step, uint32_t *rng, int8_t *w) {
    uint32_t rz = rng[0], r = rng[1];
    const uint32_t neg = step < 0 ? 1u : 0u;
    const uint32_t mag = neg ? 0u - (uint32_t)step : (uint32_t)step;
    const int32_t whole = (int32_t)(mag >> 16);
    const uint32_t thr = mag & 0xFFFFu;
    for (size_t i = 0; i < n;) {
        rz = mt_zo_next(rz);
        uint32_t bits = rz;
        const size_t end = n - i < 32 ? n : i + 32;
        for (; i < end; ++i, bits >>= 1) {
            r = mt_zo_next(r);
            const int32_t u = whole + ((r & 0xFFFFu) < thr ? 1 : 0);
            // -sign(step) z = -1 exactly when the sign bit equals neg
            const int32_t s = -(int32_t)((bits & 1u) == neg);
            w[i] = mt_zo_sat((int32_t)base[i] + ((u ^ s) - s));
        }
    }
    rng[0] = rz;
    rng[1] = r;
}
