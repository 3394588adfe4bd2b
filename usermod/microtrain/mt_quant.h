// Integer helpers shared by every kernel: fixed-point requantisation
// (CMSIS-NN arm_nn_requantize / TFLite Micro rounding), the per-sample
// dynamic error requantisation, and division-free arithmetic for Cortex-M0+.
// Pure C99, no MicroPython include. See docs/numerics.md.
#ifndef MT_QUANT_H
#define MT_QUANT_H

#include <stddef.h>
#include <stdint.h>

// Arches without a 32x32->64 multiply or a divide instruction (Cortex-M0+)
// would need libgcc helpers, which a natmod cannot link. There, and in the
// host tests with -DMT_FORCE_SOFT_MATH, we use our own 32-bit-only code.
#if defined(__ARM_ARCH_6M__) || defined(MT_FORCE_SOFT_MATH)
#define MT_SOFT_MATH 1
#else
#define MT_SOFT_MATH 0
#endif

// ARM cores without an FPU (Cortex-M0/M0+/M3: armv6m, armv7m), natmod and
// firmware user C module alike, with no flag from the integrator: the float
// kernels stay plain C and gcc's run-time ABI calls (__aeabi_fadd, ...) go to
// the project's own IEEE-exact routines (softfloat.c, mt_softfloat.h), which
// a natmod needs (it cannot link libgcc) and which beat libgcc's on Cortex-M0.
#if defined(__arm__) && !defined(__ARM_FP) && !defined(MT_FORCE_NO_FLOAT)
#ifndef MT_SOFT_FLOAT
#define MT_SOFT_FLOAT 1
#endif
#if !defined(MT_SOFT_FLOAT_AEABI) && !defined(MT_SOFT_FLOAT_TEST)  // the tests call the mt_ names
#define MT_SOFT_FLOAT_AEABI 1
#endif
#endif

// RISC-V cores without an FPU (rv32imc: ESP32-C3 / C6, the RP2350's Hazard3
// cores) run the float kernels on the project's software float by default,
// under libgcc's names (mt_softfloat.h, MT_SOFT_FLOAT_LIBGCC): it stands in
// for libgcc's own, faster and with the same bits. -DMT_NO_SOFT_FLOAT keeps
// libgcc's (firmware only: a natmod cannot link it).
#if defined(__riscv) && !defined(__riscv_flen) && !defined(MT_SOFT_FLOAT) && !defined(MT_NO_SOFT_FLOAT)
#define MT_SOFT_FLOAT 1
#define MT_SOFT_FLOAT_LIBGCC 1
#endif

// Float (weight-gradient accumulation) where the arch has an FPU (WebAssembly's
// float32 / float64 are IEEE, with no fused multiply-add), or where softfloat.c
// supplies the software float (MT_SOFT_FLOAT, above).
#if defined(MT_FORCE_NO_FLOAT)
#define MT_HAS_FLOAT 0
#elif defined(__x86_64__) || defined(__i386__) || defined(__aarch64__) || defined(__ARM_FP) || defined(__wasm__) || \
    defined(MT_SOFT_FLOAT)
#define MT_HAS_FLOAT 1
#else
#define MT_HAS_FLOAT 0
#endif

// RISC-V: the float kernels always, on the FPU (the F extension), on the
// software float above, or on libgcc's (MT_NO_SOFT_FLOAT).
#if defined(__riscv) && !defined(MT_FORCE_NO_FLOAT)
#undef MT_HAS_FLOAT
#define MT_HAS_FLOAT 1
#endif

#define MT_Q31_HALF ((int32_t)1 << 30)

// Unsigned 32-bit division without a divide instruction (shift-subtract).
uint32_t mt_udiv_u32(uint32_t n, uint32_t d);

// Doubling high multiply: floor((a * b + 2^30) / 2^31), a * b exact.
int32_t mt_doubling_high_mul(int32_t a, int32_t b);

// Round-half-away-from-zero division by 2^e, 0 <= e <= 31.
static inline int32_t mt_rounding_divide_by_pot(int32_t x, int32_t e) {
    const int32_t mask = (int32_t)(((uint32_t)1 << e) - 1u);
    const int32_t rem = x & mask;
    const int32_t thr = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> e) + (rem > thr ? 1 : 0);
}

// requant(acc, m, shift) of docs/numerics.md; -31 <= shift <= 31.
static inline int32_t mt_requant(int32_t acc, int32_t m, int32_t shift) {
    const int32_t left = shift > 0 ? shift : 0;
    const int32_t right = shift > 0 ? 0 : -shift;
    const int32_t a = (int32_t)((uint32_t)acc << left);  // wrap32, no UB
    return mt_rounding_divide_by_pot(mt_doubling_high_mul(a, m), right);
}

static inline int32_t mt_clamp(int32_t v, int32_t lo, int32_t hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

static inline uint32_t mt_abs_u32(int32_t v) {
    return v < 0 ? 0u - (uint32_t)v : (uint32_t)v;
}

// Shift of dyn_requant for a maximum magnitude M.
int32_t mt_dyn_shift(uint32_t max_abs);

// Apply dyn_requant with a known shift to one value.
static inline int8_t mt_dyn_apply(int32_t v, int32_t shift) {
    const uint32_t half = shift > 0 ? ((uint32_t)1 << (shift - 1)) : 0u;
    const uint32_t mag = (mt_abs_u32(v) + half) >> shift;
    return (int8_t)(v < 0 ? -(int32_t)mag : (int32_t)mag);
}

// dyn_requant of docs/numerics.md over acc[0..n): writes out, returns shift.
int32_t mt_dyn_requant_s8(const int32_t *acc, size_t n, int8_t *out);

// dyn_requant with an activation mask: out holds the activation y on entry; then
// out[i] = lo < y[i] < hi ? dyn_requant(acc)[i] : 0, the same shift (from all of acc).
// lo < -128 and hi > 127 (no mask): exactly mt_dyn_requant_s8, out not read.
int32_t mt_dyn_requant_act_s8(const int32_t *acc, size_t n, int32_t lo, int32_t hi, int8_t *out);

#endif
