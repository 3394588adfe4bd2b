// The project's own IEEE-754 binary32 arithmetic for cores without an FPU
// (Cortex-M0/M0+/M3 natmods, which cannot link libgcc). Round to nearest,
// ties to even, subnormals kept (no flush to zero), exactly what the
// Cortex-M4F/M7 FPU computes with MicroPython's reset FPSCR (DN=0, FZ=0) and
// what x64 SSE computes; NaN results follow the Arm FPU (docs/numerics.md,
// "Software float on Cortex-M0").
//
// Operands and results are the float32 bit patterns. On FPU-less ARM cores
// (MT_SOFT_FLOAT_AEABI, set by mt_quant.h) gcc's calls for float arithmetic
// (__aeabi_fadd, ...) reach these functions, so the float kernels stay plain
// C: in a natmod the functions carry those run-time ABI names themselves; in
// firmware they keep the mt_ names below and softfloat.c adds the ABI names
// as weak aliases (it says why). Elsewhere (host tests): the mt_ names. Pure C99.
#ifndef MT_SOFTFLOAT_H
#define MT_SOFTFLOAT_H

#include <stdint.h>
#include "mt_quant.h"

#if defined(MT_SOFT_FLOAT_AEABI) && defined(MICROPY_ENABLE_DYNRUNTIME)
#define MT_SF_NAME(mt, aeabi) aeabi
#else
#define MT_SF_NAME(mt, aeabi) mt
#endif

#define mt_f32_add MT_SF_NAME(mt_f32_add, __aeabi_fadd)
#define mt_f32_sub MT_SF_NAME(mt_f32_sub, __aeabi_fsub)
#define mt_f32_mul MT_SF_NAME(mt_f32_mul, __aeabi_fmul)
#define mt_f32_div MT_SF_NAME(mt_f32_div, __aeabi_fdiv)
#define mt_f32_from_i32 MT_SF_NAME(mt_f32_from_i32, __aeabi_i2f)
#define mt_f32_from_u32 MT_SF_NAME(mt_f32_from_u32, __aeabi_ui2f)
#define mt_f32_to_i32 MT_SF_NAME(mt_f32_to_i32, __aeabi_f2iz)
#define mt_f32_to_u32 MT_SF_NAME(mt_f32_to_u32, __aeabi_f2uiz)
#define mt_f32_eq MT_SF_NAME(mt_f32_eq, __aeabi_fcmpeq)
#define mt_f32_lt MT_SF_NAME(mt_f32_lt, __aeabi_fcmplt)
#define mt_f32_le MT_SF_NAME(mt_f32_le, __aeabi_fcmple)
#define mt_f32_gt MT_SF_NAME(mt_f32_gt, __aeabi_fcmpgt)
#define mt_f32_ge MT_SF_NAME(mt_f32_ge, __aeabi_fcmpge)
#define mt_f32_un MT_SF_NAME(mt_f32_un, __aeabi_fcmpun)

// RISC-V without an FPU (MT_SOFT_FLOAT_LIBGCC, mt_quant.h): the arithmetic and
// conversions under libgcc's names, so gcc's calls for float C code (kernels
// and the whole firmware) reach them; softfloat.c adds the comparisons with
// libgcc's return conventions (__eqsf2 ...) and __mulsf3 (mt_f32_mul's
// bits, its product from the core's 32x32->64 multiply). Same arguments and
// results.
#if defined(MT_SOFT_FLOAT_LIBGCC)
#undef mt_f32_add
#undef mt_f32_sub
#undef mt_f32_div
#undef mt_f32_from_i32
#undef mt_f32_from_u32
#undef mt_f32_to_i32
#undef mt_f32_to_u32
#define mt_f32_add __addsf3
#define mt_f32_sub __subsf3
#define mt_f32_div __divsf3
#define mt_f32_from_i32 __floatsisf
#define mt_f32_from_u32 __floatunsisf
#define mt_f32_to_i32 __fixsfsi
#define mt_f32_to_u32 __fixunssfsi
#endif

uint32_t mt_f32_add(uint32_t a, uint32_t b);
uint32_t mt_f32_sub(uint32_t a, uint32_t b);
uint32_t mt_f32_mul(uint32_t a, uint32_t b);
uint32_t mt_f32_div(uint32_t a, uint32_t b);
uint32_t mt_f32_from_i32(int32_t x);
uint32_t mt_f32_from_u32(uint32_t x);
// C casts (truncation); out of range and NaN saturate like the Arm VCVT:
// NaN -> 0, too large -> INT32_MAX / INT32_MIN (unsigned: UINT32_MAX / 0).
int32_t mt_f32_to_i32(uint32_t a);
uint32_t mt_f32_to_u32(uint32_t a);
// 1 or 0; every ordered comparison is 0 when an operand is NaN; un: either NaN.
int mt_f32_eq(uint32_t a, uint32_t b);
int mt_f32_lt(uint32_t a, uint32_t b);
int mt_f32_le(uint32_t a, uint32_t b);
int mt_f32_gt(uint32_t a, uint32_t b);
int mt_f32_ge(uint32_t a, uint32_t b);
int mt_f32_un(uint32_t a, uint32_t b);
// (float)w * s, one rounding, for an integer |w| <= 128 (no ABI name: the
// update's int8 path calls it directly).
uint32_t mt_f32_mul_i8(int32_t w, uint32_t s);
// (int32_t)(x + u): the float32 sum truncated, fast for u in [128, 129) and
// |x| < 128 (the update's requantisation to int8 levels).
int32_t mt_f32_add_trunc(uint32_t x, uint32_t u);
// Correctly rounded square root (no ABI name: gcc calls libm's sqrtf).
uint32_t mt_f32_sqrt(uint32_t a);

#endif
