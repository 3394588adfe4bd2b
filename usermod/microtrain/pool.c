// Max / average / global average pooling on NHWC int8 (docs/numerics.md).
// Descriptors passed mt_pool_check: every window overlaps the input (pad < k
// and the last window starts inside), all indices fit in int32.
#include "mt_kernels.h"
#include "mt_dsp.h"

// Valid tap range [k0, k1) of the window starting at input coordinate i0
// (may be negative: padding). Computed once per output row/column instead of
// testing every tap.
static inline void mt_window(int32_t i0, int32_t k, int32_t in, int32_t *k0, int32_t *k1) {
    *k0 = i0 < 0 ? -i0 : 0;
    *k1 = in - i0 < k ? in - i0 : k;
}

// log2(n) if n is a power of two, else -1: lets the common 2x2 / 4x4 windows
// divide by shifting instead of the 32-step software division.
static int32_t mt_pow2_log(uint32_t n) {
    int32_t s = 0;
    while (s < 31 && ((uint32_t)1 << s) < n) {
        ++s;
    }
    return ((uint32_t)1 << s) == n ? s : -1;
}

// sign(S) * ((|S| + n/2) / n): TFLite average rounding, half away from zero.
static inline int8_t mt_avg_round(int32_t s, uint32_t n, int32_t n_log) {
    const uint32_t mag = mt_abs_u32(s) + (n >> 1);
    const uint32_t q = n_log >= 0 ? mag >> n_log : mt_udiv_u32(mag, n);
    return (int8_t)(s < 0 ? -(int32_t)q : (int32_t)q);
}

void mt_maxpool_s8_forward(const mt_pool_params_t *p, const int8_t *x, int8_t *y) {
    const int32_t c = p->c;
    const int32_t row_stride = p->in_w * c;
    int8_t *yp = y;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        int32_t ky0, ky1;
        mt_window(iy0, p->k_h, p->in_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < p->out_w; ++ox, yp += c) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1;
            mt_window(ix0, p->k_w, p->in_w, &kx0, &kx1);
            int32_t row = ((iy0 + ky0) * p->in_w + ix0 + kx0) * c;
            int32_t ch0 = 0;
#if MT_DSP
            // four channels a word: the bytewise maximum over the taps
            for (; ch0 + 4 <= c; ch0 += 4) {
                uint32_t best = 0x80808080u;
                int32_t r = row + ch0;
                for (int32_t ky = ky0; ky < ky1; ++ky, r += row_stride) {
                    int32_t o = r;
                    for (int32_t kx = kx0; kx < kx1; ++kx, o += c) {
                        best = mt_max8(best, mt_load_u32(x + o));
                    }
                }
                mt_store_u32(yp + ch0, best);
            }
#endif
#if MT_SSE2
            // sixteen channels a vector: signed bytes as unsigned (x ^ 0x80, order kept),
            // PMAXUB (SSE2 has no signed byte maximum)
            const __m128i flip = _mm_set1_epi8((char)0x80);
            for (; ch0 + 16 <= c; ch0 += 16) {
                __m128i best = _mm_setzero_si128();
                int32_t r = row + ch0;
                for (int32_t ky = ky0; ky < ky1; ++ky, r += row_stride) {
                    int32_t o = r;
                    for (int32_t kx = kx0; kx < kx1; ++kx, o += c) {
                        best = _mm_max_epu8(best, _mm_xor_si128(mt_sse_load(x + o), flip));
                    }
                }
                _mm_storeu_si128((__m128i *)(void *)(yp + ch0), _mm_xor_si128(best, flip));
            }
#endif
            // Running max over taps with channels innermost: contiguous reads.
            // Every window has a valid tap, so starting from -128 is exact.
            for (int32_t ch = ch0; ch < c; ++ch) {
                yp[ch] = INT8_MIN;
            }
            // Offsets, not stepped pointers: a pointer stepped past the last
            // row would leave the array (undefined behaviour even unread).
            for (int32_t ky = ky0; ky < ky1; ++ky, row += row_stride) {
                int32_t o = row;
                for (int32_t kx = kx0; kx < kx1; ++kx, o += c) {
                    const int8_t *xp = x + o;
                    for (int32_t ch = ch0; ch < c; ++ch) {
                        if (xp[ch] > yp[ch]) {
                            yp[ch] = xp[ch];
                        }
                    }
                }
            }
        }
    }
}

// The activation mask of the _act grad-input kernels: an input keeps its error
// only where lo < t < hi, t its stored activation (the pool's input). The
// error may be written over t itself (ein == t): every position is in at most
// one window, whose reads of t (maximum, mask) come before its stores.
// On armv7e-m the bytewise form too (mt_act_init): keep where t >= l and
// h >= t, l = lo + 1 and h = hi - 1 clamped to int8 (lo < -128: l = -128,
// hi > 127: h = 127, always true), and ok 0 when no int8 can be kept.
typedef struct {
    const int8_t *t;
    int32_t lo, hi;
#if MT_DSP
    uint32_t l4, h4, ok;
#endif
} mt_pool_act_t;

static inline int mt_act_keep(int32_t v, const mt_pool_act_t *a) {
    return v > a->lo && v < a->hi;
}

static inline void mt_act_init(mt_pool_act_t *a, const int8_t *t, int32_t lo, int32_t hi) {
    a->t = t;
    a->lo = lo;
    a->hi = hi;
#if MT_DSP
    const int32_t l = lo < -128 ? -128 : (lo > 127 ? 128 : lo + 1);
    const int32_t h = hi > 127 ? 127 : (hi < -128 ? -129 : hi - 1);
    a->ok = l <= 127 && h >= -128 ? 0xFFFFFFFFu : 0u;
    a->l4 = ((uint32_t)l & 0xFFu) * 0x01010101u;
    a->h4 = ((uint32_t)h & 0xFFu) * 0x01010101u;
#endif
}

// Zeroes the inputs no window covers (disjoint windows leave gaps where
// stride > k, and rows / columns past the last window): the _act kernels write
// every covered input from its window and cannot clear ein first (it may be the
// activation the windows read). Covered = the union of the windows' row bands
// times the union of their column bands; both are increasing and disjoint.
static void pool_zero_uncovered(const mt_pool_params_t *p, int8_t *ein) {
    if (p->pad_top == 0 && p->pad_left == 0 && p->stride_h == p->k_h && p->stride_w == p->k_w &&
        p->out_h * p->k_h == p->in_h && p->out_w * p->k_w == p->in_w) {
        return;  // the windows tile the input (a 2x2 pool of an even map): nothing to walk
    }
    const int32_t c = p->c;
    int8_t *rp = ein;
    int32_t oy = 0, y0 = -p->pad_top;  // the first row band not above iy, its first row
    for (int32_t iy = 0; iy < p->in_h; ++iy) {
        while (oy < p->out_h && y0 + p->k_h <= iy) {
            ++oy;
            y0 += p->stride_h;
        }
        const int row_in = oy < p->out_h && y0 <= iy;
        int32_t ox = 0, x0 = -p->pad_left;
        for (int32_t ix = 0; ix < p->in_w; ++ix, rp += c) {
            while (ox < p->out_w && x0 + p->k_w <= ix) {
                ++ox;
                x0 += p->stride_w;
            }
            if (!row_in || ox >= p->out_w || x0 > ix) {
                for (int32_t ch = 0; ch < c; ++ch) {
                    rp[ch] = 0;
                }
            }
        }
    }
}

// Zeroes channel ch's taps of one window (first: its first valid tap at ch).
static void pool_zero_taps(int8_t *ein, int32_t first, int32_t rows, int32_t cols, int32_t c, int32_t row_stride) {
    for (int32_t ky = 0; ky < rows; ++ky, first += row_stride) {
        int32_t o = first;
        for (int32_t kx = 0; kx < cols; ++kx, o += c) {
            ein[o] = 0;
        }
    }
}

// Windows that do not overlap (stride >= k on both axes): every input takes
// at most one error, so acc would hold the routed errors themselves and
// M = max |acc| <= 128. Each error is written to ein (and acc, when given) at
// once, with no requantisation pass: shift 0 (ein = acc) unless some routed
// error is -128, then dyn_requant's shift for M = 128, applied to ein itself
// (it holds acc's values): no scratch is needed. Same bits as the general path.
// With act (the _act kernel; acc is NULL): ein may be x, so it is not cleared
// first; each window reads its taps (the maximum, and the mask from it) and
// then writes all of them, the routed error masked (0 where the maximum is
// outside (lo, hi)). The shift still comes from the unmasked errors, as the
// kernel then relu backward would have it; dyn_apply(0) = 0 keeps the masked
// zeros through the requantisation pass.
#if MT_DSP
// Routes byte J of the error word ew to its window tap (byte J of tap: 0, 1 in
// the first row, 2, 3 in the second) in ein (ea = ein + first) and acc, if it
// is not zero.
#define MT_ROUTE1(J)                                                                           \
    do {                                                                                       \
        const int32_t ev_ = (int8_t)(uint8_t)(ew >> (8 * (J)));                                \
        if (ev_ != 0) {                                                                        \
            const uint32_t t_ = (tap >> (8 * (J))) & 3u;                                       \
            const int32_t at_ = ch + (J) + ((t_ & 1u) ? c : 0) + ((t_ & 2u) ? row_stride : 0); \
            if (acc != NULL) {                                                                 \
                acc[first + at_] = ev_;                                                        \
            }                                                                                  \
            ea[at_] = (int8_t)ev_;                                                             \
        }                                                                                      \
    } while (0)

// One tap of a window with the activation mask: where v is the maximum top (v >= top), the
// bytes of ek still unclaimed go to this tap (*out) and leave ek (SSUB8, then SEL twice).
static inline uint32_t mt_claim8(uint32_t v, uint32_t top, uint32_t *ek) {
    uint32_t t, out, k = *ek;
    __asm__("ssub8 %[t], %[v], %[top]\n\tsel %[o], %[k], %[z]\n\tsel %[k], %[z], %[k]"
            : [t] "=&r"(t), [o] "=&r"(out), [k] "+r"(k)
            : [v] "r"(v), [top] "r"(top), [z] "r"(0u)
            : "cc");
    (void)t;
    *ek = k;
    return out;
}

// The first c4 channels (a multiple of 4) of one full 2x2 window with the activation mask:
// the act path of maxpool_grad_disjoint below, in a function of its own so that the mask's
// words stay in registers (in the caller GCC reloaded them from act after every store to ein).
// x, y: the window's first tap in x and ein, rs: the row stride; l4, h4: the mask's bounds
// (an empty range where act->ok is 0). Returns the zero-byte flags of e ^ 0x80808080 (some
// byte of e is -128 where bit 7 of a byte is set).
static MT_NOINLINE uint32_t win2x2_act(const int8_t *x, int8_t *y, const int8_t *ep, int32_t c4, int32_t c, int32_t rs,
                                       uint32_t l4, uint32_t h4) {
    uint32_t neg = 0;
    for (int32_t ch = 0; ch < c4; ch += 4, x += 4, y += 4) {
        const uint32_t ew = mt_load_u32(ep + ch);
        if (ew == 0) {
            mt_store_u32(y, 0);
            mt_store_u32(y + c, 0);
            mt_store_u32(y + rs, 0);
            mt_store_u32(y + rs + c, 0);
            continue;
        }
        const uint32_t m = ew ^ 0x80808080u;
        neg |= (m - 0x01010101u) & ~m;
        const uint32_t top =
            mt_max8(mt_max8(mt_load_u32(x), mt_load_u32(x + c)), mt_max8(mt_load_u32(x + rs), mt_load_u32(x + rs + c)));
        uint32_t ek = ew & mt_ge8(top, l4) & mt_ge8(h4, top);
        mt_store_u32(y, mt_claim8(mt_load_u32(x), top, &ek));
        mt_store_u32(y + c, mt_claim8(mt_load_u32(x + c), top, &ek));
        mt_store_u32(y + rs, mt_claim8(mt_load_u32(x + rs), top, &ek));
        mt_store_u32(y + rs + c, ek);
    }
    return neg & 0x80808080u;
}

#endif

static int32_t maxpool_grad_disjoint(const mt_pool_params_t *p, const int8_t *x, const int8_t *e, int32_t *acc,
                                     int8_t *ein, const mt_pool_act_t *act) {
    const int32_t c = p->c;
    const int32_t n_in = p->in_h * p->in_w * c;
    const int32_t row_stride = p->in_w * c;
    int32_t i = 0;
    if (act != NULL) {
        pool_zero_uncovered(p, ein);
    } else {
        // eight a turn, counting down (the -Os loop of four kept its bounds in memory)
        for (int32_t m = n_in >> 3; m > 0; --m, i += 8) {
            mt_store_u32(ein + i, 0);
            mt_store_u32(ein + i + 4, 0);
        }
        for (; i < n_in; ++i) {
            ein[i] = 0;
        }
    }
    if (acc != NULL) {
        for (i = 0; i < n_in; ++i) {
            acc[i] = 0;
        }
    }
    int32_t emin = 0;  // the smallest routed error: -128 needs shift 1
    const int8_t *ep = e;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        int32_t ky0, ky1;
        mt_window(iy0, p->k_h, p->in_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < p->out_w; ++ox, ep += c) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1;
            mt_window(ix0, p->k_w, p->in_w, &kx0, &kx1);
            const int32_t first = ((iy0 + ky0) * p->in_w + ix0 + kx0) * c;
            if (ky1 - ky0 == 2 && kx1 - kx0 == 2) {  // the common full 2x2 window, unrolled
                // the window's two rows (both inside x) and their outputs
                const int8_t *xa = x + first, *xb = xa + row_stride;
                int8_t *ea = ein + first, *eb = ea + row_stride;
                int32_t ch = 0;
#if MT_DSP
                if (act != NULL) {
                    ch = c & ~3;
                    if (win2x2_act(xa, ea, ep, ch, c, row_stride, act->ok ? act->l4 : 0x7F7F7F7Fu,
                                   act->ok ? act->h4 : 0x80808080u) != 0) {
                        emin = INT8_MIN;
                    }
                }
                // four channels a step: the taps' first maximum and its tap (0..3) per byte
                // with SSUB8 + SEL, then each non-zero error routed to its tap (unrolled; a
                // -128 among the four found once per word); with act (win2x2_act), the four
                // tap words written whole: the masked errors in the bytes each tap won (the
                // maximum, then per tap in order the bytes equal to it that no earlier tap took)
                for (; ch + 4 <= c; ch += 4) {
                    const uint32_t ew = mt_load_u32(ep + ch);
                    if (ew == 0) {
                        continue;
                    }
                    const uint32_t m = ew ^ 0x80808080u;  // a zero byte where e is -128
                    if (((m - 0x01010101u) & ~m & 0x80808080u) != 0) {
                        emin = INT8_MIN;
                    }
                    uint32_t best = mt_load_u32(xa + ch), tap = 0;
                    mt_max8_first(&best, &tap, mt_load_u32(xa + ch + c), 0x01010101u);
                    mt_max8_first(&best, &tap, mt_load_u32(xb + ch), 0x02020202u);
                    mt_max8_first(&best, &tap, mt_load_u32(xb + ch + c), 0x03030303u);
                    MT_ROUTE1(0);
                    MT_ROUTE1(1);
                    MT_ROUTE1(2);
                    MT_ROUTE1(3);
                }
#endif
                for (; ch < c; ++ch) {
                    const int32_t ev = ep[ch];
                    if (ev == 0 && act == NULL) {
                        continue;
                    }
                    // strict '>' in ky-major, kx-minor order: the first maximum
                    int32_t o = ch, best = xa[ch];
                    if (xa[ch + c] > best) {
                        best = xa[ch + c];
                        o = ch + c;
                    }
                    if (xb[ch] > best) {
                        best = xb[ch];
                        o = ch + row_stride;
                    }
                    if (xb[ch + c] > best) {
                        best = xb[ch + c];
                        o = ch + row_stride + c;
                    }
                    emin = ev < emin ? ev : emin;
                    if (act != NULL) {
                        ea[ch] = 0;
                        ea[ch + c] = 0;
                        eb[ch] = 0;
                        eb[ch + c] = 0;
                        if (!mt_act_keep(best, act)) {
                            continue;
                        }
                    }
                    if (acc != NULL) {
                        acc[first + o] = ev;
                    }
                    ea[o] = (int8_t)ev;
                }
                continue;
            }
            for (int32_t ch = 0; ch < c; ++ch) {
                const int32_t ev = ep[ch];
                if (ev == 0) {
                    if (act != NULL) {
                        pool_zero_taps(ein, first + ch, ky1 - ky0, kx1 - kx0, c, row_stride);
                    }
                    continue;
                }
                int32_t best = INT8_MIN - 1, arg = 0;
                int32_t off = first + ch;
                for (int32_t ky = ky0; ky < ky1; ++ky, off += row_stride) {
                    int32_t o = off;
                    for (int32_t kx = kx0; kx < kx1; ++kx, o += c) {
                        if (x[o] > best) {
                            best = x[o];
                            arg = o;
                        }
                    }
                }
                emin = ev < emin ? ev : emin;
                if (act != NULL) {
                    pool_zero_taps(ein, first + ch, ky1 - ky0, kx1 - kx0, c, row_stride);
                    if (!mt_act_keep(best, act)) {
                        continue;
                    }
                }
                if (acc != NULL) {
                    acc[arg] = ev;
                }
                ein[arg] = (int8_t)ev;
            }
        }
    }
    if (emin > INT8_MIN) {
        return 0;
    }
    const int32_t shift = mt_dyn_shift(128u);
    i = 0;
#if MT_DSP
    if (shift == 1) {  // dyn_apply(b, 1) = floor((b + (b >= 0)) / 2): a halving add per byte
        for (; i + 4 <= n_in; i += 4) {
            const uint32_t w = mt_load_u32(ein + i);
            mt_store_u32(ein + i, mt_shadd8(w, (~w >> 7) & 0x01010101u));
        }
    }
#endif
    for (; i < n_in; ++i) {
        ein[i] = mt_dyn_apply(ein[i], shift);
    }
    return shift;
}

int32_t mt_maxpool_s8_grad_input(const mt_pool_params_t *p, const int8_t *x, const int8_t *e, int32_t *acc,
                                 int8_t *ein) {
    if (p->stride_h >= p->k_h && p->stride_w >= p->k_w) {
        return maxpool_grad_disjoint(p, x, e, acc, ein, NULL);
    }
    const int32_t c = p->c;
    const int32_t n_in = p->in_h * p->in_w * c;
    const int32_t row_stride = p->in_w * c;
    for (int32_t i = 0; i < n_in; ++i) {
        acc[i] = 0;
    }
    const int8_t *ep = e;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        int32_t ky0, ky1;
        mt_window(iy0, p->k_h, p->in_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < p->out_w; ++ox, ep += c) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1;
            mt_window(ix0, p->k_w, p->in_w, &kx0, &kx1);
            const int32_t first = ((iy0 + ky0) * p->in_w + ix0 + kx0) * c;
            for (int32_t ch = 0; ch < c; ++ch) {
                const int32_t ev = ep[ch];
                if (ev == 0) {
                    continue;  // nothing to route (common after a relu mask)
                }
                // Strict '>' in ky-major, kx-minor order keeps the first maximum.
                int32_t best = INT8_MIN - 1, arg = 0;
                int32_t off = first + ch;
                for (int32_t ky = ky0; ky < ky1; ++ky, off += row_stride) {
                    int32_t o = off;
                    for (int32_t kx = kx0; kx < kx1; ++kx, o += c) {
                        if (x[o] > best) {
                            best = x[o];
                            arg = o;
                        }
                    }
                }
                acc[arg] += ev;
            }
        }
    }
    return mt_dyn_requant_s8(acc, (size_t)n_in, ein);
}

int32_t mt_maxpool_s8_grad_input_act(const mt_pool_params_t *p, const int8_t *x, const int8_t *e, int32_t lo,
                                     int32_t hi, int8_t *ein) {
    mt_pool_act_t act;
    mt_act_init(&act, x, lo, hi);
    return maxpool_grad_disjoint(p, x, e, NULL, ein, &act);
}

#if MT_DSP
#define MT_POOL_L1_WINDOWS 511  // windows a 16-bit lane takes: 511 * 128 < 2^16

// v's bytes where a >= b (signed), else 0: SSUB8 then SEL with 0.
static inline uint32_t keep_ge8(uint32_t a, uint32_t b, uint32_t v) {
    uint32_t t, r;
    __asm__("ssub8 %[t], %[a], %[b]\n\tsel %[r], %[v], %[z]"
            : [t] "=&r"(t), [r] "=&r"(r)
            : [a] "r"(a), [b] "r"(b), [v] "r"(v), [z] "r"(0u)
            : "cc");
    (void)t;
    return r;
}

// The _l1 kernel's 2x2 windows of stride 2 for the quad of channels k (x, y at the quad's
// first byte in the first window; e read at k a window), at most MT_POOL_L1_WINDOWS of them:
// win2x2_act's steps, window after window, with |the routed error| (the masked error: a
// window routes it to one tap) added into 16-bit lanes held in registers. Writes
// norms[0..3]; returns win2x2_act's flags of -128.
static MT_INLINE uint32_t quad2x2_act_l1(const mt_pool_params_t *p, const int8_t *x, int8_t *y, const int8_t *e,
                                         int32_t k, uint32_t l4, uint32_t h4, int upper, int32_t *norms) {
    const int32_t c = p->c, rs = p->in_w * c, ow = p->out_w;
    uint32_t neg = 0, l02 = 0, l13 = 0;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        // (row pointers from the row index: none walks past the buffers' ends)
        const int8_t *xr = x + 2 * oy * rs;
        int8_t *yr = y + 2 * oy * rs;
        for (const int8_t *end = e + ow * c; e != end; xr += 2 * c, yr += 2 * c, e += c) {
            const uint32_t ew = mt_load_u32(e + k);
            const int8_t *x2 = xr + rs;
            int8_t *y2 = yr + rs;
            if (ew == 0) {
                mt_store_u32(yr, 0);
                mt_store_u32(yr + c, 0);
                mt_store_u32(y2, 0);
                mt_store_u32(y2 + c, 0);
                continue;
            }
            const uint32_t m = ew ^ 0x80808080u;
            neg |= (m - 0x01010101u) & ~m;
            const uint32_t v0 = mt_load_u32(xr), v1 = mt_load_u32(xr + c);
            const uint32_t v2 = mt_load_u32(x2), v3 = mt_load_u32(x2 + c);
            const uint32_t top = mt_max8(mt_max8(v0, v1), mt_max8(v2, v3));
            uint32_t ek = keep_ge8(top, l4, ew);
            if (upper) {
                ek = keep_ge8(h4, top, ek);
            }
            const uint32_t a = mt_abs8(ek);
            l02 = mt_uxtab16(l02, a);
            l13 = mt_uxtab16_ror8(l13, a);
            mt_store_u32(yr, mt_claim8(v0, top, &ek));
            mt_store_u32(yr + c, mt_claim8(v1, top, &ek));
            mt_store_u32(y2, mt_claim8(v2, top, &ek));
            mt_store_u32(y2 + c, ek);
        }
    }
    norms[0] = (int32_t)(l02 & 0xFFFFu);
    norms[1] = (int32_t)(l13 & 0xFFFFu);
    norms[2] = (int32_t)(l02 >> 16);
    norms[3] = (int32_t)(l13 >> 16);
    return neg & 0x80808080u;
}

// The two uses: a mask with an upper bound (relu6) and one without (relu, none: h = 127, which
// every byte meets), its test left out of the loop.
static MT_NOINLINE uint32_t quad2x2_act_l1_hi(const mt_pool_params_t *p, const int8_t *x, int8_t *y, const int8_t *e,
                                              int32_t k, uint32_t l4, uint32_t h4, int32_t *norms) {
    return quad2x2_act_l1(p, x, y, e, k, l4, h4, 1, norms);
}

static MT_NOINLINE uint32_t quad2x2_act_l1_lo(const mt_pool_params_t *p, const int8_t *x, int8_t *y, const int8_t *e,
                                              int32_t k, uint32_t l4, int32_t *norms) {
    return quad2x2_act_l1(p, x, y, e, k, l4, 0x7F7F7F7Fu, 0, norms);
}
#endif

int32_t mt_maxpool_s8_grad_input_act_l1(const mt_pool_params_t *p, const int8_t *x, const int8_t *e, int32_t lo,
                                        int32_t hi, int8_t *ein, int32_t *norms) {
    mt_pool_act_t act;
    mt_act_init(&act, x, lo, hi);
    const int32_t c = p->c;
    const int32_t n_pos = p->in_h * p->in_w;
#if MT_DSP
    // 2x2 windows of stride 2 inside the map over whole quads of channels: a quad at a time
    // through every window (a window's taps read before they are written, as in win2x2_act:
    // ein may be x)
    if (p->k_h == 2 && p->k_w == 2 && p->stride_h == 2 && p->stride_w == 2 && p->pad_top == 0 && p->pad_left == 0 &&
        2 * p->out_h <= p->in_h && 2 * p->out_w <= p->in_w && (c & 3) == 0 &&
        p->out_h * p->out_w <= MT_POOL_L1_WINDOWS) {
        pool_zero_uncovered(p, ein);
        const uint32_t l4 = act.ok ? act.l4 : 0x7F7F7F7Fu, h4 = act.ok ? act.h4 : 0x80808080u;
        uint32_t neg = 0;
        for (int32_t k = 0; k < c; k += 4) {
            neg |= h4 == 0x7F7F7F7Fu ? quad2x2_act_l1_lo(p, x + k, ein + k, e, k, l4, norms + k)
                                     : quad2x2_act_l1_hi(p, x + k, ein + k, e, k, l4, h4, norms + k);
        }
        if (neg == 0) {
            return 0;
        }
        // an error of -128: maxpool_grad_disjoint's requantisation pass over ein, then the
        // norms of its result
        const int32_t shift = mt_dyn_shift(128u);
        for (int32_t i = 0; i < n_pos * c; ++i) {
            ein[i] = mt_dyn_apply(ein[i], shift);
        }
        mt_l1_norm_s8(ein, (size_t)n_pos, c, norms);
        return shift;
    }
#endif
    const int32_t sh = maxpool_grad_disjoint(p, x, e, NULL, ein, &act);
    mt_l1_norm_s8(ein, (size_t)n_pos, c, norms);
    return sh;
}

#if MT_DSP
// mt_avg_round of four channel sums at once, n = 2^n_log (1 <= n_log <= 7):
// se holds the sums of channels 0, 2 and so those of 1, 3 as halfwords
// (|S| <= 128 * 128). Half away from zero is floor((S + n/2 - (S < 0)) / n);
// each lane's bits n_log .. n_log + 7 are that quotient's int8.
static inline uint32_t avg_round4(uint32_t se, uint32_t so, int32_t n_log) {
    const uint32_t half = 0x00010001u << (n_log - 1);
    const uint32_t te = mt_sadd16(se, half - ((se >> 15) & 0x00010001u));
    const uint32_t to = mt_sadd16(so, half - ((so >> 15) & 0x00010001u));
    return ((te >> n_log) & 0x00FF00FFu) | ((to << (8 - n_log)) & 0xFF00FF00u);
}
#endif

void mt_avgpool_s8_forward(const mt_pool_params_t *p, const int8_t *x, int8_t *y) {
    const int32_t c = p->c;
    const int32_t row_stride = p->in_w * c;
    int8_t *yp = y;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        int32_t ky0, ky1;
        mt_window(iy0, p->k_h, p->in_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < p->out_w; ++ox, yp += c) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1;
            mt_window(ix0, p->k_w, p->in_w, &kx0, &kx1);
            // n counts valid taps only (padding is excluded, TFLite style).
            const uint32_t n = (uint32_t)((ky1 - ky0) * (kx1 - kx0));
            const int32_t n_log = mt_pow2_log(n);
            const int32_t first = ((iy0 + ky0) * p->in_w + ix0 + kx0) * c;
            int32_t ch = 0;
#if MT_DSP
            if (n_log >= 1 && n_log <= 7) {
                for (; ch + 4 <= c; ch += 4) {
                    uint32_t se = 0, so = 0;
                    int32_t row = first + ch;
                    for (int32_t ky = ky0; ky < ky1; ++ky, row += row_stride) {
                        int32_t o = row;
                        for (int32_t kx = kx0; kx < kx1; ++kx, o += c) {
                            const uint32_t v = mt_load_u32(x + o);
                            se = mt_sxtab16(se, v);
                            so = mt_sxtab16_ror8(so, v);
                        }
                    }
                    mt_store_u32(yp + ch, avg_round4(se, so, n_log));
                }
            }
#endif
            for (; ch < c; ++ch) {
                // |S| <= 255 * 128: exact in int32.
                int32_t s = 0;
                int32_t row = first + ch;
                for (int32_t ky = ky0; ky < ky1; ++ky, row += row_stride) {
                    int32_t o = row;
                    for (int32_t kx = kx0; kx < kx1; ++kx, o += c) {
                        s += x[o];
                    }
                }
                yp[ch] = mt_avg_round(s, n, n_log);
            }
        }
    }
}

// Windows that do not overlap, no scratch: every input takes at most one
// e * recip(n), so M = max |acc| = max over windows of max|e| * recip(n) comes
// from e alone. A first pass over e finds M, the second writes each tap's
// dyn_apply(e * recip(n), shift) (uncovered inputs 0): the same bits as
// dyn_requant of the accumulator, without it (DS-CNN's 25x5 pool: 8000 int32).
// With act (the _act kernel): ein may be act->t, so only the uncovered inputs
// are cleared first, and each tap's value is masked by its t, read just before
// the tap is written.
static uint32_t avgpool_recip(uint32_t n) {
    return mt_udiv_u32(((uint32_t)1 << 16) + (n >> 1), n);
}

static int32_t avgpool_grad_disjoint(const mt_pool_params_t *p, const int8_t *e, int8_t *ein,
                                     const mt_pool_act_t *act) {
    const int32_t c = p->c;
    const int32_t n_in = p->in_h * p->in_w * c;
    const int32_t row_stride = p->in_w * c;
    if (act != NULL) {
        pool_zero_uncovered(p, ein);
    } else {
        for (int32_t i = 0; i < n_in; ++i) {
            ein[i] = 0;
        }
    }
    uint32_t m = 0, last_n = 0, r = 0;
    const int8_t *ep = e;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        int32_t ky0, ky1;
        mt_window(iy0, p->k_h, p->in_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < p->out_w; ++ox, ep += c) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1;
            mt_window(ix0, p->k_w, p->in_w, &kx0, &kx1);
            const uint32_t n = (uint32_t)((ky1 - ky0) * (kx1 - kx0));
            if (n != last_n) {
                r = avgpool_recip(n);
                last_n = n;
            }
            uint32_t em = 0;
            for (int32_t ch = 0; ch < c; ++ch) {
                const uint32_t a = mt_abs_u32(ep[ch]);
                em = a > em ? a : em;
            }
            // |e| * recip(n) <= 128 * 2^16: no overflow
            m = em * r > m ? em * r : m;
        }
    }
    const int32_t shift = mt_dyn_shift(m);
    last_n = 0;
    ep = e;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        int32_t ky0, ky1;
        mt_window(iy0, p->k_h, p->in_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < p->out_w; ++ox, ep += c) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1;
            mt_window(ix0, p->k_w, p->in_w, &kx0, &kx1);
            const uint32_t n = (uint32_t)((ky1 - ky0) * (kx1 - kx0));
            if (n != last_n) {
                r = avgpool_recip(n);
                last_n = n;
            }
            int32_t row = ((iy0 + ky0) * p->in_w + ix0 + kx0) * c;
            for (int32_t ky = ky0; ky < ky1; ++ky, row += row_stride) {
                int32_t o = row;
                for (int32_t kx = kx0; kx < kx1; ++kx, o += c) {
                    int8_t *op = ein + o;
                    if (act != NULL) {
                        const int8_t *tp = act->t + o;
                        for (int32_t ch = 0; ch < c; ++ch) {
                            op[ch] = mt_act_keep(tp[ch], act) ? mt_dyn_apply(ep[ch] * (int32_t)r, shift) : 0;
                        }
                        continue;
                    }
                    for (int32_t ch = 0; ch < c; ++ch) {
                        op[ch] = mt_dyn_apply(ep[ch] * (int32_t)r, shift);
                    }
                }
            }
        }
    }
    return shift;
}

int32_t mt_avgpool_s8_grad_input(const mt_pool_params_t *p, const int8_t *e, int32_t *acc, int8_t *ein) {
    if (acc == NULL) {
        return avgpool_grad_disjoint(p, e, ein, NULL);
    }
    const int32_t c = p->c;
    const int32_t n_in = p->in_h * p->in_w * c;
    const int32_t row_stride = p->in_w * c;
    for (int32_t i = 0; i < n_in; ++i) {
        acc[i] = 0;
    }
    uint32_t last_n = 0;
    int32_t r = 0;
    const int8_t *ep = e;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        int32_t ky0, ky1;
        mt_window(iy0, p->k_h, p->in_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < p->out_w; ++ox, ep += c) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1;
            mt_window(ix0, p->k_w, p->in_w, &kx0, &kx1);
            const uint32_t n = (uint32_t)((ky1 - ky0) * (kx1 - kx0));
            if (n != last_n) {
                // recip(n) = (2^16 + n/2) / n; n is the same for all interior
                // windows, so the division runs only at the borders.
                r = (int32_t)avgpool_recip(n);
                last_n = n;
            }
            // |acc| <= 255 windows * 128 * 2^16 < 2^31 (k_h*k_w <= 255).
            int32_t row = ((iy0 + ky0) * p->in_w + ix0 + kx0) * c;
            for (int32_t ky = ky0; ky < ky1; ++ky, row += row_stride) {
                int32_t o = row;
                for (int32_t kx = kx0; kx < kx1; ++kx, o += c) {
                    int32_t *ap = acc + o;
                    for (int32_t ch = 0; ch < c; ++ch) {
                        ap[ch] += ep[ch] * r;
                    }
                }
            }
        }
    }
    return mt_dyn_requant_s8(acc, (size_t)n_in, ein);
}

int32_t mt_avgpool_s8_grad_input_act(const mt_pool_params_t *p, const int8_t *y, const int8_t *e, int32_t lo,
                                     int32_t hi, int8_t *ein) {
    mt_pool_act_t act;
    mt_act_init(&act, y, lo, hi);
    return avgpool_grad_disjoint(p, e, ein, &act);
}

// Average over all hw positions per channel. Requires 1 <= hw <= 2^24 so
// that |S| <= 128 * hw fits int32 (|S| + hw/2 then fits uint32).
void mt_global_avgpool_s8_forward(const int8_t *x, int32_t hw, int32_t c, int8_t *y) {
    const uint32_t n = (uint32_t)hw;
    const int32_t n_log = mt_pow2_log(n);
    for (int32_t ch = 0; ch < c; ++ch) {
        // Channel-outer with a register accumulator: no scratch needed.
        int32_t s = 0;
        int32_t o = ch;
        for (int32_t i = 0; i < hw; ++i, o += c) {
            s += x[o];
        }
        y[ch] = mt_avg_round(s, n, n_log);
    }
}

// Exact: every position receives e[c] unchanged (the 1/hw goes into the scale).
void mt_global_avgpool_s8_grad_input(const int8_t *e, int32_t hw, int32_t c, int8_t *ein) {
    int8_t *op = ein;
    for (int32_t i = 0; i < hw; ++i, op += c) {
        for (int32_t ch = 0; ch < c; ++ch) {
            op[ch] = e[ch];
        }
    }
}
