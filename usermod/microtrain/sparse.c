// Building blocks of the sparse (top-k channel) update (docs/numerics.md).
#include "mt_kernels.h"

// norms[k] = sum_p |e[p, k]|. Channel-outer with a register accumulator:
// one load per element and no read-modify-write of norms (no cache on MCUs).
// Exact for n_pos < 2^24 (|e| <= 128); summed in uint32 so larger inputs
// wrap instead of overflowing a signed int.
void mt_l1_norm_s8(const int8_t *e, size_t n_pos, int32_t c, int32_t *norms) {
    for (int32_t k = 0; k < c; ++k) {
        uint32_t s = 0;
        size_t o = (size_t)k;
        for (size_t i = 0; i < n_pos; ++i, o += (size_t)c) {
            s += mt_abs_u32(e[o]);
        }
        norms[k] = (int32_t)s;
    }
}

// mask[i] = 1 iff fewer than k channels rank ahead of i, where j ranks ahead
// if norms[j] > norms[i], or equal with j < i (ties go to the lower index).
// O(c^2) but stops counting as soon as k channels are ahead.
void mt_topk_mask(const int32_t *norms, int32_t c, int32_t k, uint8_t *mask) {
    for (int32_t i = 0; i < c; ++i) {
        const int32_t v = norms[i];
        int32_t ahead = 0;
        for (int32_t j = 0; j < i && ahead < k; ++j) {
            if (norms[j] >= v) {
                ++ahead;
            }
        }
        for (int32_t j = i + 1; j < c && ahead < k; ++j) {
            if (norms[j] > v) {
                ++ahead;
            }
        }
        mask[i] = ahead < k ? 1u : 0u;
    }
}
