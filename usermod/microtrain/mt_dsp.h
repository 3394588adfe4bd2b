// The few Arm DSP-extension (armv7e-m: Cortex-M4/M7/M33) operations the
// kernels use, with portable C equivalents that give the same bits on every
// other target (x64 host, armv6m, armv7m). Kernels written with these run the
// same algorithm everywhere, so the host tests exercise the board's code path.
//
// Packed values: a uint32_t holding two signed 16-bit halves, lo = bits 0..15,
// hi = bits 16..31. All operations are exact integer arithmetic.
#ifndef MT_DSP_H
#define MT_DSP_H

#include <stdint.h>

// Inlining of the register-blocked loops (mt_runs.h, conv2d_s8_*.c).
#if defined(__GNUC__)
#define MT_NOINLINE __attribute__((noinline))
// Out of line, and not every includer uses every block.
#define MT_BLOCK __attribute__((noinline, unused))
#define MT_INLINE inline __attribute__((always_inline))
#else
#define MT_INLINE inline
#define MT_NOINLINE
#define MT_BLOCK
#endif

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#define MT_DSP 1
#else
#define MT_DSP 0
#endif

// x86-64 (the host natmod): SSE2 is part of the base ISA. The forward's
// interior dot products use PMADDWD on sign-extended bytes (8 products a
// step), as the Arm build uses SMLAD: exact integer sums, the same bits.
#if defined(__x86_64__) && defined(__SSE2__)
#define MT_SSE2 1
#include <emmintrin.h>
#else
#define MT_SSE2 0
#endif

// RISC-V (rv32imc: ESP32-C3 / C6, RP2350's Hazard3; no packed SIMD, a
// multiply and an add per MAC, 31 registers, loads with immediate offsets
// only): the dense dot products of the forward take their own blocking
// (conv2d_s8_*.c, linear.c), more accumulators per loaded byte and four taps per
// step, so that each pointer moves once per four bytes; conv2d's backward
// blocks read bytes and unpacked halfword weights, not packed words. MT_FORCE_RV_PATH
// builds the same code on the host (C driver under the sanitizers).
#if defined(__riscv) || defined(MT_FORCE_RV_PATH)
#define MT_RV 1
#else
#define MT_RV 0
#endif

// Four bytes from any address (no alignment assumed). GCC/Clang: one LDR on
// cores with unaligned access, byte loads elsewhere; no aliasing UB.
#if defined(__GNUC__)
typedef uint32_t __attribute__((aligned(1), may_alias)) mt_u32_unaligned_t;
static inline uint32_t mt_load_u32(const int8_t *p) {
    return *(const mt_u32_unaligned_t *)(const void *)p;
}
#else
static inline uint32_t mt_load_u32(const int8_t *p) {
    const uint8_t *b = (const uint8_t *)p;
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}
#endif

// Four bytes to any address, mt_load_u32's counterpart (byte stores where
// the core has no unaligned access).
static inline void mt_store_u32(int8_t *p, uint32_t v) {
#if defined(__GNUC__)
    *(mt_u32_unaligned_t *)(void *)p = v;
#else
    uint8_t *b = (uint8_t *)p;
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
    b[2] = (uint8_t)(v >> 16);
    b[3] = (uint8_t)(v >> 24);
#endif
}

static inline int32_t mt_lo16(uint32_t v) {
    return (int32_t)(int16_t)(uint16_t)(v & 0xFFFFu);
}

static inline int32_t mt_hi16(uint32_t v) {
    return (int32_t)(int16_t)(uint16_t)(v >> 16);
}

static inline uint32_t mt_pack16(int32_t lo, int32_t hi) {
    return ((uint32_t)lo & 0xFFFFu) | (((uint32_t)hi & 0xFFFFu) << 16);
}

#if MT_DSP

// Bytes 0 and 2 of v, sign-extended into the two halves.
static inline uint32_t mt_sxtb16(uint32_t v) {
    uint32_t r;
    __asm__("sxtb16 %0, %1" : "=r"(r) : "r"(v));
    return r;
}

// Bytes 1 and 3 of v, sign-extended into the two halves.
static inline uint32_t mt_sxtb16_ror8(uint32_t v) {
    uint32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(v));
    return r;
}

// acc + bytes 0 and 2 (or 1 and 3) of v, sign-extended, per halfword (wrapping).
static inline uint32_t mt_sxtab16(uint32_t acc, uint32_t v) {
    uint32_t r;
    __asm__("sxtab16 %0, %1, %2" : "=r"(r) : "r"(acc), "r"(v));
    return r;
}

static inline uint32_t mt_sxtab16_ror8(uint32_t acc, uint32_t v) {
    uint32_t r;
    __asm__("sxtab16 %0, %1, %2, ror #8" : "=r"(r) : "r"(acc), "r"(v));
    return r;
}

// acc + lo(a) * lo(b) + hi(a) * hi(b).
static inline int32_t mt_smlad(uint32_t a, uint32_t b, int32_t acc) {
    int32_t r;
    __asm__("smlad %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(acc));
    return r;
}

// acc + lo(a) * lo(b), acc + lo(a) * hi(b): single 16 x 16 multiply-adds
// (SMLABB / SMLABT; a packed weight pair stays one register).
static inline int32_t mt_smlabb(uint32_t a, uint32_t b, int32_t acc) {
    int32_t r;
    __asm__("smlabb %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(acc));
    return r;
}

static inline int32_t mt_smlabt(uint32_t a, uint32_t b, int32_t acc) {
    int32_t r;
    __asm__("smlabt %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(acc));
    return r;
}

// Halfwise a + b, a - b (wrapping 16-bit).
static inline uint32_t mt_sadd16(uint32_t a, uint32_t b) {
    uint32_t r;
    __asm__("sadd16 %0, %1, %2" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

static inline uint32_t mt_ssub16(uint32_t a, uint32_t b) {
    uint32_t r;
    __asm__("ssub16 %0, %1, %2" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

// Bytewise floor((a + b) / 2), signed, without overflow (SHADD8).
static inline uint32_t mt_shadd8(uint32_t a, uint32_t b) {
    uint32_t r;
    __asm__("shadd8 %0, %1, %2" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

// lo half of a with lo half of b as the high half: (lo(a), lo(b)).
static inline uint32_t mt_pkhbt16(uint32_t a, uint32_t b) {
    uint32_t r;
    __asm__("pkhbt %0, %1, %2, lsl #16" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

// hi half of b as the low half, hi half of a as the high half: (hi(b), hi(a)).
static inline uint32_t mt_pkhtb16(uint32_t a, uint32_t b) {
    uint32_t r;
    __asm__("pkhtb %0, %1, %2, asr #16" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

// acc + hi(a) * lo(b), acc + hi(a) * hi(b) (SMLATB / SMLATT).
static inline int32_t mt_smlatb(uint32_t a, uint32_t b, int32_t acc) {
    int32_t r;
    __asm__("smlatb %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(acc));
    return r;
}

static inline int32_t mt_smlatt(uint32_t a, uint32_t b, int32_t acc) {
    int32_t r;
    __asm__("smlatt %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(acc));
    return r;
}

// |b| of each signed byte of v as an unsigned byte (-128 -> 128): 0 - b with
// its GE flags (set where b <= 0) selecting -b or b. One asm statement: the
// compiler does not track GE between statements.
static inline uint32_t mt_abs8(uint32_t v) {
    uint32_t r;
    __asm__("ssub8 %0, %2, %1\n\tsel %0, %0, %1" : "=&r"(r) : "r"(v), "r"(0u) : "cc");
    return r;
}

// e with the bytes whose y (signed) is <= zp (zp in every byte of zp4) zeroed.
static inline uint32_t mt_keep_above8(uint32_t y, uint32_t zp4, uint32_t e) {
    uint32_t r;
    __asm__("ssub8 %0, %1, %2\n\tsel %0, %4, %3" : "=&r"(r) : "r"(zp4), "r"(y), "r"(e), "r"(0u) : "cc");
    return r;
}

// The larger of each pair of signed bytes of a and b (SSUB8 sets GE where
// a >= b, SEL takes those bytes from a).
static inline uint32_t mt_max8(uint32_t a, uint32_t b) {
    uint32_t r;
    __asm__("ssub8 %0, %1, %2\n\tsel %0, %1, %2" : "=&r"(r) : "r"(a), "r"(b) : "cc");
    return r;
}

// 0xFF in the bytes where a >= b (signed), else 0.
static inline uint32_t mt_ge8(uint32_t a, uint32_t b) {
    uint32_t r;
    __asm__("ssub8 %0, %1, %2\n\tsel %0, %3, %4" : "=&r"(r) : "r"(a), "r"(b), "r"(0xFFFFFFFFu), "r"(0u) : "cc");
    return r;
}

// Running first maximum of signed bytes: where v > *best (strictly, so ties
// keep the earlier tap) *best takes v's byte and *idx code's byte.
static inline void mt_max8_first(uint32_t *best, uint32_t *idx, uint32_t v, uint32_t code) {
    uint32_t b = *best, i = *idx, t;
    __asm__("ssub8 %[t], %[b], %[v]\n\tsel %[b], %[b], %[v]\n\tsel %[i], %[i], %[c]"
            : [t] "=&r"(t), [b] "+r"(b), [i] "+r"(i)
            : [v] "r"(v), [c] "r"(code)
            : "cc");
    (void)t;
    *best = b;
    *idx = i;
}

// acc + bytes 0 and 2 (or 1 and 3) of v, zero-extended, per halfword.
static inline uint32_t mt_uxtab16(uint32_t acc, uint32_t v) {
    uint32_t r;
    __asm__("uxtab16 %0, %1, %2" : "=r"(r) : "r"(acc), "r"(v));
    return r;
}

static inline uint32_t mt_uxtab16_ror8(uint32_t acc, uint32_t v) {
    uint32_t r;
    __asm__("uxtab16 %0, %1, %2, ror #8" : "=r"(r) : "r"(acc), "r"(v));
    return r;
}

#else

static inline uint32_t mt_sxtb16(uint32_t v) {
    return mt_pack16((int32_t)(int8_t)(uint8_t)(v & 0xFFu), (int32_t)(int8_t)(uint8_t)((v >> 16) & 0xFFu));
}

static inline uint32_t mt_sxtb16_ror8(uint32_t v) {
    return mt_pack16((int32_t)(int8_t)(uint8_t)((v >> 8) & 0xFFu), (int32_t)(int8_t)(uint8_t)(v >> 24));
}

static inline uint32_t mt_sxtab16(uint32_t acc, uint32_t v) {
    const uint32_t b = mt_sxtb16(v);
    return mt_pack16(mt_lo16(acc) + mt_lo16(b), mt_hi16(acc) + mt_hi16(b));
}

static inline uint32_t mt_sxtab16_ror8(uint32_t acc, uint32_t v) {
    const uint32_t b = mt_sxtb16_ror8(v);
    return mt_pack16(mt_lo16(acc) + mt_lo16(b), mt_hi16(acc) + mt_hi16(b));
}

// Wrapping add like the instruction (the kernels keep sums far from 2^31).
static inline int32_t mt_smlad(uint32_t a, uint32_t b, int32_t acc) {
    return (int32_t)((uint32_t)acc + (uint32_t)(mt_lo16(a) * mt_lo16(b)) + (uint32_t)(mt_hi16(a) * mt_hi16(b)));
}

static inline int32_t mt_smlabb(uint32_t a, uint32_t b, int32_t acc) {
    return (int32_t)((uint32_t)acc + (uint32_t)(mt_lo16(a) * mt_lo16(b)));
}

static inline int32_t mt_smlabt(uint32_t a, uint32_t b, int32_t acc) {
    return (int32_t)((uint32_t)acc + (uint32_t)(mt_lo16(a) * mt_hi16(b)));
}

static inline uint32_t mt_sadd16(uint32_t a, uint32_t b) {
    return mt_pack16(mt_lo16(a) + mt_lo16(b), mt_hi16(a) + mt_hi16(b));
}

static inline uint32_t mt_ssub16(uint32_t a, uint32_t b) {
    return mt_pack16(mt_lo16(a) - mt_lo16(b), mt_hi16(a) - mt_hi16(b));
}

static inline uint32_t mt_pkhbt16(uint32_t a, uint32_t b) {
    return (a & 0xFFFFu) | (b << 16);
}

static inline uint32_t mt_pkhtb16(uint32_t a, uint32_t b) {
    return (a & 0xFFFF0000u) | (b >> 16);
}

static inline int32_t mt_smlatb(uint32_t a, uint32_t b, int32_t acc) {
    return (int32_t)((uint32_t)acc + (uint32_t)(mt_hi16(a) * mt_lo16(b)));
}

static inline int32_t mt_smlatt(uint32_t a, uint32_t b, int32_t acc) {
    return (int32_t)((uint32_t)acc + (uint32_t)(mt_hi16(a) * mt_hi16(b)));
}

#endif

#if MT_SSE2
// The 16 int8 of v as two vectors of 8 int16 (interleaved with their sign
// mask: a sign extension in SSE2), minus zp in every lane (|v - zp| <= 255).
static inline void mt_sse_widen(__m128i v, __m128i zp, __m128i *lo, __m128i *hi) {
    const __m128i sv = _mm_cmpgt_epi8(_mm_setzero_si128(), v);
    *lo = _mm_sub_epi16(_mm_unpacklo_epi8(v, sv), zp);
    *hi = _mm_sub_epi16(_mm_unpackhi_epi8(v, sv), zp);
}

// acc + the dot product of two widened 16-byte runs, in int32 lanes (PMADDWD
// adds products in pairs: |pair| <= 2 * 255 * 128).
static inline __m128i mt_sse_dot(__m128i acc, __m128i al, __m128i ah, __m128i bl, __m128i bh) {
    return _mm_add_epi32(acc, _mm_add_epi32(_mm_madd_epi16(al, bl), _mm_madd_epi16(ah, bh)));
}

static inline __m128i mt_sse_load(const int8_t *p) {
    return _mm_loadu_si128((const __m128i *)(const void *)p);
}

// The sum of the four int32 lanes (modulo 2^32, as the lanes' own sums; the
// callers' true sums fit an int32, so the result is exact).
static inline int32_t mt_sse_hsum(__m128i q) {
    q = _mm_add_epi32(q, _mm_shuffle_epi32(q, 0x4E));
    q = _mm_add_epi32(q, _mm_shuffle_epi32(q, 0xB1));
    return _mm_cvtsi128_si32(q);
}
#endif

#endif
