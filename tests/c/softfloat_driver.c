// Host check of usermod/microtrain/softfloat.c against the host FPU (x64 SSE:
// round to nearest-even, no flush-to-zero, no denormals-are-zero).
//   softfloat_driver <pairs per generator> <seed>
// For each operation, operand pairs come from several generators (uniform bit
// patterns, close exponents (alignment, cancellation, ties), exponent sums at
// the underflow / overflow boundaries, short significands (exact results and
// ties), a table of edge values crossed with everything). Non-NaN results must
// equal the FPU's bit for bit. NaN results must be NaN on both sides; their
// bits follow the Arm FPU (the boards), which differs from x64 in the default
// NaN's sign and in which NaN operand propagates: checked against the Arm
// rules (arm_nan below). Prints "softfloat: ok pairs=<n> unary=<n>" and exits
// 0, else prints the first mismatches and exits 1. Built with
// -DMT_SF_BAREMETAL=<pairs> it runs on a QEMU Cortex-M4F against its FPU.
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt_softfloat.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float flt(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// xorshift64*: reproducible operands from the seed
static uint64_t rng_state;
static uint32_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ull) >> 32);
}

static int is_nan_bits(uint32_t u) {
    return (u & 0x7FFFFFFFu) > 0x7F800000u;
}

// What an Arm FPU (FPSCR.DN=0) returns for a NaN result: a signalling NaN
// operand first (quietened), else the first quiet NaN operand, else the
// default NaN 0x7FC00000 (invalid operation).
static uint32_t arm_nan(uint32_t a, uint32_t b, int binary) {
    const int an = is_nan_bits(a), bn = binary && is_nan_bits(b);
    if (an && !(a & 0x00400000u)) {
        return a | 0x00400000u;
    }
    if (bn && !(b & 0x00400000u)) {
        return b | 0x00400000u;
    }
    if (an) {
        return a;
    }
    if (bn) {
        return b;
    }
    return 0x7FC00000u;
}

static const uint32_t EDGES[] = {
    0x00000000u, 0x80000000u,                            // zeros
    0x00000001u, 0x80000001u, 0x00000002u, 0x00000003u,  // smallest subnormals
    0x007FFFFFu, 0x807FFFFFu, 0x00400000u, 0x00400001u,  // largest subnormals
    0x00800000u, 0x80800000u, 0x00800001u, 0x00FFFFFFu,  // smallest normals
    0x3F800000u, 0xBF800000u, 0x3F800001u, 0x3F7FFFFFu,  // 1 and neighbours
    0x3FC00000u, 0x40000000u, 0x3F000000u, 0x34000000u,  // 1.5, 2, 0.5, 2^-23
    0x33800000u, 0x33800001u, 0x4B000000u, 0x4B800000u,  // 2^-24, 2^23, 2^24
    0x4B7FFFFFu, 0x4B800001u, 0x4EFFFFFFu, 0x4F000000u,  // below 2^24, 2^31
    0xCF000000u, 0xCF000001u, 0x4F800000u, 0x4F7FFFFFu,  // -2^31, 2^32
    0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F000000u, 0x7E800000u,  // largest finite, 2^127, 2^126
    0x7F800000u, 0xFF800000u,                            // infinities
    0x7FC00000u, 0xFFC00000u, 0x7FC12345u, 0xFFFFFFFFu,  // quiet NaNs
    0x7F800001u, 0xFF800001u, 0x7FA00000u, 0x7FBFFFFFu,  // signalling NaNs
    0x1F800000u, 0x20000000u, 0x5F800000u, 0x60000000u,  // 2^-64, 2^-63, 2^64, 2^65 (products at the limits)
    0x3EAAAAABu, 0x3DCCCCCDu, 0x40490FDBu, 0xC2C80000u,  // 1/3, 0.1, pi, -100
};
#define N_EDGES ((uint32_t)(sizeof EDGES / sizeof EDGES[0]))

// A pattern with a random exponent in [lo, hi] and a random sign / fraction,
// the fraction short (low bits cleared) one time in three.
static uint32_t with_exp(int32_t lo, int32_t hi) {
    int32_t e = lo + (int32_t)(rnd() % (uint32_t)(hi - lo + 1));
    if (e < 0) {
        e = 0;
    }
    if (e > 255) {
        e = 255;
    }
    uint32_t frac = rnd() & 0x007FFFFFu;
    const uint32_t r = rnd();
    if (r % 3 == 0) {
        frac &= 0xFFFFFFFFu << (r >> 8) % 24;
    }
    return (rnd() & 0x80000000u) | ((uint32_t)e << 23) | frac;
}

// Operand pair of generator g.
static void gen(int g, uint32_t *a, uint32_t *b) {
    switch (g) {
        case 0:  // uniform bit patterns
            *a = rnd();
            *b = rnd();
            break;
        case 1: {  // close exponents: alignment, cancellation, ties
            const int32_t e = (int32_t)(rnd() % 256);
            const int32_t d = (int32_t)(rnd() % 57) - 28;
            *a = with_exp(e, e);
            *b = with_exp(e + d, e + d);
            break;
        }
        case 2: {  // exponent sums / differences at the underflow and overflow edges
            const int32_t e = (int32_t)(rnd() % 256);
            const int32_t t = (rnd() & 1) ? 127 - 126 - 26 + (int32_t)(rnd() % 30) : 127 + 124 + (int32_t)(rnd() % 6);
            const int32_t f =
                (rnd() & 1) ? t + 127 - e : e - t + 127;  // mul: ea + eb - 127 ~ t; div: ea - eb + 127 ~ t
            *a = with_exp(e, e);
            *b = with_exp(f, f);
            break;
        }
        case 3:  // small / subnormal operands
            *a = with_exp(0, 30);
            *b = with_exp(0, 30);
            break;
        default:  // an edge value against anything
            *a = EDGES[rnd() % N_EDGES];
            *b = (rnd() & 1) ? EDGES[rnd() % N_EDGES] : rnd();
            if (rnd() & 1) {
                const uint32_t t = *a;
                *a = *b;
                *b = t;
            }
            break;
    }
}
#define N_GEN 5

static long failures;

static void fail(const char *op, uint32_t a, uint32_t b, uint32_t got, uint32_t want) {
    if (failures < 20) {
        printf("MISMATCH %s(0x%08" PRIx32 ", 0x%08" PRIx32 "): got 0x%08" PRIx32 " want 0x%08" PRIx32 "\n", op, a, b,
               got, want);
    }
    ++failures;
}

static void check_float(const char *op, uint32_t a, uint32_t b, uint32_t got, float host, int binary) {
    const uint32_t h = bits(host);
#if defined(__ARM_FP)
    // An Arm FPU: its NaNs are the reference too (and the model must agree with
    // it). With two NaN operands of + or *, gcc may give the FPU the operands in
    // either order (commutative), so either order's NaN is the FPU's answer.
    const int swappable = binary && (op[0] == 'a' || op[0] == 'm') && is_nan_bits(a) && is_nan_bits(b);
    if (is_nan_bits(h) && h != arm_nan(a, b, binary) && !(swappable && h == arm_nan(b, a, binary))) {
        fail(op, a, b, arm_nan(a, b, binary), h);
    }
#endif
    if (is_nan_bits(h) || is_nan_bits(got)) {
        if (!is_nan_bits(h)) {
            fail(op, a, b, got, h);
        } else if (got != arm_nan(a, b, binary)) {
            fail(op, a, b, got, arm_nan(a, b, binary));
        }
    } else if (got != h) {
        fail(op, a, b, got, h);
    }
}

// C's float -> int32 is undefined out of range: the Arm VCVT result there.
static int32_t host_to_i32(float f) {
    if (f != f) {
        return 0;
    }
    if (f >= 2147483648.0f) {
        return INT32_MAX;
    }
    if (f < -2147483648.0f) {
        return INT32_MIN;
    }
    return (int32_t)f;
}

static uint32_t host_to_u32(float f) {
    if (f != f || f <= -1.0f) {
        return 0;
    }
    if (f >= 4294967296.0f) {
        return 0xFFFFFFFFu;
    }
    return (uint32_t)f;
}

#if defined(MT_SOFT_FLOAT_LIBGCC)
// RISC-V's names (-DMT_SOFT_FLOAT_LIBGCC; add, sub, div and the conversions are
// the mt_ routines renamed, checked above): __mulsf3's own fast path, and the
// comparisons with libgcc's conventions (a result compared against 0).
uint32_t __mulsf3(uint32_t a, uint32_t b);
int __eqsf2(uint32_t a, uint32_t b);
int __nesf2(uint32_t a, uint32_t b);
int __ltsf2(uint32_t a, uint32_t b);
int __lesf2(uint32_t a, uint32_t b);
int __gtsf2(uint32_t a, uint32_t b);
int __gesf2(uint32_t a, uint32_t b);
int __unordsf2(uint32_t a, uint32_t b);

static void check_libgcc(uint32_t a, uint32_t b) {
    const float fa = flt(a), fb = flt(b);
    volatile float r = fa * fb;
    check_float("__mulsf3", a, b, __mulsf3(a, b), r, 1);
    const int un = fa != fa || fb != fb;
    if ((__eqsf2(a, b) == 0) != (fa == fb) || (__nesf2(a, b) != 0) != (fa != fb) || (__ltsf2(a, b) < 0) != (fa < fb) ||
        (__lesf2(a, b) <= 0) != (fa <= fb) || (__gtsf2(a, b) > 0) != (fa > fb) || (__gesf2(a, b) >= 0) != (fa >= fb) ||
        (__unordsf2(a, b) != 0) != un) {
        fail("libgcc cmp", a, b, (uint32_t)__ltsf2(a, b), fa < fb);
    }
}
#define CHECK_LIBGCC(a, b) check_libgcc(a, b)
#else
#define CHECK_LIBGCC(a, b) ((void)0)
#endif

static void check_pair(uint32_t a, uint32_t b) {
    const float fa = flt(a), fb = flt(b);
    // Each result in a volatile: rounded to float32 once, no contraction.
    volatile float r;
    r = fa + fb;
    check_float("add", a, b, mt_f32_add(a, b), r, 1);
    r = fa - fb;
    check_float("sub", a, b, mt_f32_sub(a, b), r, 1);
    r = fa * fb;
    check_float("mul", a, b, mt_f32_mul(a, b), r, 1);
    r = fa / fb;
    check_float("div", a, b, mt_f32_div(a, b), r, 1);
    // an int8 weight level (and 128) times b: the update's fused conversion and product
    const int32_t w = (int32_t)(a % 257u) - 128;
    r = (float)w * fb;
    check_float("mul_i8", bits((float)w), b, mt_f32_mul_i8(w, b), r, 1);
    // requantisation: a value below 128 in magnitude plus 128 + an offset in [0, 1)
    const uint32_t xs = (a & 0x807FFFFFu) | (((a >> 23) % 134u) << 23), us = 0x43000000u | (b & 0xFFFFu);
    r = flt(xs) + flt(us);
    if (mt_f32_add_trunc(xs, us) != host_to_i32(r)) {
        fail("add_trunc", xs, us, (uint32_t)mt_f32_add_trunc(xs, us), (uint32_t)host_to_i32(r));
    }
    r = fa + fb;
    if (mt_f32_add_trunc(a, b) != host_to_i32(r)) {
        fail("add_trunc", a, b, (uint32_t)mt_f32_add_trunc(a, b), (uint32_t)host_to_i32(r));
    }
    if (mt_f32_eq(a, b) != (fa == fb)) {
        fail("eq", a, b, (uint32_t)mt_f32_eq(a, b), fa == fb);
    }
    if (mt_f32_lt(a, b) != (fa < fb)) {
        fail("lt", a, b, (uint32_t)mt_f32_lt(a, b), fa < fb);
    }
    if (mt_f32_le(a, b) != (fa <= fb)) {
        fail("le", a, b, (uint32_t)mt_f32_le(a, b), fa <= fb);
    }
    if (mt_f32_gt(a, b) != (fa > fb)) {
        fail("gt", a, b, (uint32_t)mt_f32_gt(a, b), fa > fb);
    }
    if (mt_f32_ge(a, b) != (fa >= fb)) {
        fail("ge", a, b, (uint32_t)mt_f32_ge(a, b), fa >= fb);
    }
    if (mt_f32_un(a, b) != (fa != fa || fb != fb)) {
        fail("un", a, b, (uint32_t)mt_f32_un(a, b), fa != fa || fb != fb);
    }
    CHECK_LIBGCC(a, b);
}

static void check_unary(uint32_t a) {
    const float fa = flt(a);
    volatile float r = sqrtf(fa);
    check_float("sqrt", a, 0, mt_f32_sqrt(a), r, 0);
    if (mt_f32_to_i32(a) != host_to_i32(fa)) {
        fail("to_i32", a, 0, (uint32_t)mt_f32_to_i32(a), (uint32_t)host_to_i32(fa));
    }
    if (mt_f32_to_u32(a) != host_to_u32(fa)) {
        fail("to_u32", a, 0, mt_f32_to_u32(a), host_to_u32(fa));
    }
    // a as an integer
    r = (float)(int32_t)a;
    check_float("from_i32", a, 0, mt_f32_from_i32((int32_t)a), r, 0);
    r = (float)a;
    check_float("from_u32", a, 0, mt_f32_from_u32(a), r, 0);
}

#if defined(MT_SF_BAREMETAL)
// Bare-metal build (tests/kernels/test_softfloat.py): the Cortex-M0 object on a
// QEMU Cortex-M4F, its FPU the reference; no command line, so fixed sizes.
int main(void) {
    const long n = MT_SF_BAREMETAL;
    rng_state = 0x9E3779B97F4A7C15ull ^ 21u;
#else
int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s <pairs per generator> <seed>\n", argv[0]);
        return 2;
    }
    const long n = atol(argv[1]);
    rng_state = 0x9E3779B97F4A7C15ull ^ (uint64_t)atol(argv[2]);
#endif
    long pairs = 0, unary = 0;
    // every edge against every edge
    for (uint32_t i = 0; i < N_EDGES; ++i) {
        for (uint32_t j = 0; j < N_EDGES; ++j) {
            check_pair(EDGES[i], EDGES[j]);
            ++pairs;
        }
        check_unary(EDGES[i]);
        ++unary;
    }
    for (int g = 0; g < N_GEN; ++g) {
        for (long k = 0; k < n; ++k) {
            uint32_t a, b;
            gen(g, &a, &b);
            check_pair(a, b);
            ++pairs;
        }
    }
    // unary: random patterns, every integer near a power of two (int -> float
    // rounding), and small integers
    for (long k = 0; k < n; ++k) {
        check_unary(rnd());
        check_unary(with_exp(0, 255));
        unary += 2;
    }
    for (uint32_t sh = 0; sh < 32; ++sh) {
        for (int32_t d = -300; d <= 300; ++d) {
            check_unary((uint32_t)(((uint64_t)1 << sh) + (uint64_t)(int64_t)d));
            check_unary(0u - (uint32_t)(((uint64_t)1 << sh) + (uint64_t)(int64_t)d));
            unary += 2;
        }
    }
    // add_trunc at its rounding points: z = x + u within a few quarter-ulps of
    // every integer (ties included), for offsets u at both ends of [128, 129)
    static const uint32_t US[4] = { 0x43000000u, 0x43008000u, 0x43000001u, 0x4300FFFFu };
    for (int iu = 0; iu < 4; ++iu) {
        const double u = (double)flt(US[iu]);
        for (uint32_t z = 0; z < 2; ++z) {  // +-0 + u
            volatile float r = flt(z << 31) + flt(US[iu]);
            if (mt_f32_add_trunc(z << 31, US[iu]) != host_to_i32(r)) {
                fail("add_trunc", z << 31, US[iu], (uint32_t)mt_f32_add_trunc(z << 31, US[iu]),
                     (uint32_t)host_to_i32(r));
            }
        }
        for (int32_t n = 1; n <= 257; ++n) {
            for (int32_t below = 0; below < 2; ++below) {
                int32_t k = 0;  // the binade of z: [2^k, 2^(k+1)), just below n or at n
                while ((1 << (k + 1)) <= n - below) {
                    ++k;
                }
                for (int32_t d = -6; d <= 6; ++d) {
                    const double x = (double)n + d * ldexp(1.0, k - 26) - u;
                    const float fx = (float)x;
                    if ((double)fx != x) {
                        continue;
                    }
                    volatile float r = fx + flt(US[iu]);
                    const int32_t got = mt_f32_add_trunc(bits(fx), US[iu]);
                    if (got != host_to_i32(r)) {
                        fail("add_trunc", bits(fx), US[iu], (uint32_t)got, (uint32_t)host_to_i32(r));
                    }
                    ++pairs;
                }
            }
        }
    }
    if (failures) {
        printf("softfloat: FAILED %ld mismatches in %ld pairs, %ld unary\n", failures, pairs, unary);
        return 1;
    }
    printf("softfloat: ok pairs=%ld unary=%ld\n", pairs, unary);
    return 0;
}
