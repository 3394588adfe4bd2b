// Building blocks of the sparse (top-k channel) update (docs/numerics.md).
#include "mt_kernels.h"
#include "mt_dsp.h"

// norms[k] = sum_p |e[p, k]|. Channel-outer with a register accumulator:
// one load per element and no read-modify-write of norms (no cache on MCUs).
// Exact for n_pos < 2^24 (|e| <= 128); summed in uint32 so larger inputs
// wrap instead of overflowing a signed int.
//
// Channels in whole quads (c % 4 == 0 up to the last quad) go four at a time:
// one word load per position, |e| of its four bytes without a carry between
// them (negative bytes complemented, then +1: at most 128 per byte), bytes 0, 2
// and 1, 3 added into 16-bit lanes, which take at most 511 * 128 < 2^16
// before they are flushed to the uint32 sums. Plain C: the same on every
// target.
#define MT_L1_LANE_RUN 511

#if !MT_DSP
static uint32_t mt_abs4_u8(uint32_t w) {
    const uint32_t s = (w >> 7) & 0x01010101u;  // 1 in each negative byte
    return (w ^ (s * 0xFFu)) + s;               // per byte: ~b + 1 = |b|; b >= 0: b
}
#endif

void mt_l1_norm_s8(const int8_t *e, size_t n_pos, int32_t c, int32_t *norms) {
    const int32_t cq = c & ~3;
    int32_t k = 0;
#if MT_DSP
    // two quads a position while eight channels remain: one loop's overhead for both
    for (; k + 8 <= cq; k += 8) {
        uint32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;  // no array: memset
        size_t o = (size_t)k;
        for (size_t left = n_pos; left > 0;) {
            size_t run = left < MT_L1_LANE_RUN ? left : MT_L1_LANE_RUN;
            left -= run;
            uint32_t a02 = 0, a13 = 0, b02 = 0, b13 = 0;
            do {
                const uint32_t wa = mt_load_u32(e + o), wb = mt_load_u32(e + o + 4);
                o += (size_t)c;
                if ((wa | wb) == 0u) {
                    continue;  // after a pool's routing most positions hold no error: nothing to add
                }
                const uint32_t a = mt_abs8(wa), b = mt_abs8(wb);
                a02 = mt_uxtab16(a02, a);
                a13 = mt_uxtab16_ror8(a13, a);
                b02 = mt_uxtab16(b02, b);
                b13 = mt_uxtab16_ror8(b13, b);
            } while (--run);
            s0 += a02 & 0xFFFFu;
            s2 += a02 >> 16;
            s1 += a13 & 0xFFFFu;
            s3 += a13 >> 16;
            s4 += b02 & 0xFFFFu;
            s6 += b02 >> 16;
            s5 += b13 & 0xFFFFu;
            s7 += b13 >> 16;
        }
        norms[k] = (int32_t)s0;
        norms[k + 1] = (int32_t)s1;
        norms[k + 2] = (int32_t)s2;
        norms[k + 3] = (int32_t)s3;
        norms[k + 4] = (int32_t)s4;
        norms[k + 5] = (int32_t)s5;
        norms[k + 6] = (int32_t)s6;
        norms[k + 7] = (int32_t)s7;
    }
#endif
    for (; k < cq; k += 4) {
        uint32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        size_t o = (size_t)k;
        // count-down runs: at -Os GCC kept an up-counting index in memory
        for (size_t left = n_pos; left > 0;) {
            size_t run = left < MT_L1_LANE_RUN ? left : MT_L1_LANE_RUN;
            left -= run;
            uint32_t l02 = 0, l13 = 0;
#if MT_DSP
            // SSUB8 + SEL make |e|, UXTAB16 adds bytes into the lanes
            do {
                const uint32_t a = mt_abs8(mt_load_u32(e + o));
                l02 = mt_uxtab16(l02, a);
                l13 = mt_uxtab16_ror8(l13, a);
                o += (size_t)c;
            } while (--run);
#else
            do {
                const uint32_t a = mt_abs4_u8(mt_load_u32(e + o));
                l02 += a & 0x00FF00FFu;
                l13 += (a >> 8) & 0x00FF00FFu;
                o += (size_t)c;
            } while (--run);
#endif
            s0 += l02 & 0xFFFFu;
            s2 += l02 >> 16;
            s1 += l13 & 0xFFFFu;
            s3 += l13 >> 16;
        }
        norms[k] = (int32_t)s0;
        norms[k + 1] = (int32_t)s1;
        norms[k + 2] = (int32_t)s2;
        norms[k + 3] = (int32_t)s3;
    }
    for (k = cq; k < c; ++k) {
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
//
// At most c / 2 passes over the channels: for k <= c / 2 each pass marks the
// first maximum among the unmarked channels (the next channel in that order);
// else each clears the last minimum among the marked ones (the last channel in
// that order still kept), c - k times. Both give the rank rule's mask in
// O(c min(k, c - k)) without the counting loops' early-exit branches.
void mt_topk_mask(const int32_t *norms, int32_t c, int32_t k, uint8_t *mask) {
    if (2 * k <= c) {
        for (int32_t i = 0; i < c; ++i) {
            mask[i] = 0;
        }
        for (int32_t n = 0; n < k; ++n) {
            int32_t best = -1, bv = 0;
            for (int32_t i = 0; i < c; ++i) {
                if (!mask[i] && (best < 0 || norms[i] > bv)) {
                    best = i;
                    bv = norms[i];
                }
            }
            mask[best] = 1;
        }
        return;
    }
    for (int32_t i = 0; i < c; ++i) {
        mask[i] = 1;
    }
    for (int32_t n = k; n < c; ++n) {
        int32_t worst = -1, wv = 0;
        for (int32_t i = 0; i < c; ++i) {
            if (mask[i] && (worst < 0 || norms[i] <= wv)) {  // <=: a tie goes to the later index
                worst = i;
                wv = norms[i];
            }
        }
        mask[worst] = 0;
    }
}
