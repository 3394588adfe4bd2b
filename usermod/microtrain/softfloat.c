// IEEE-754 binary32 in integer arithmetic for FPU-less cores: ARM (armv6m,
// armv7m: natmod and firmware) and RISC-V without the F extension (firmware);
// see mt_softfloat.h for the contract. Built where mt_quant.h defines
// MT_SOFT_FLOAT (those cores) or the tests define MT_SOFT_FLOAT_TEST
// (tests/c/softfloat_driver.c); empty elsewhere. On RISC-V it replaces
// libgcc's helpers under their names (MT_SOFT_FLOAT_LIBGCC).
//
// Only 32-bit integer operations: Cortex-M0 has no 32x32->64 multiply, no
// divide and no count-leading-zeros, and a natmod cannot call libgcc's
// __aeabi_lmul / __clzsi2. Every result is rounded once, from an exact value
// or from a value carrying a sticky bit (set when any lower bit was lost),
// so rounding to nearest-even is exact.
#include <stdint.h>
#include "mt_softfloat.h"

#if defined(MT_SOFT_FLOAT) || defined(MT_SOFT_FLOAT_TEST)

// The natmod builds at -Os; these few routines run per element in the float
// kernels, so they are compiled for speed and their helpers inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O2")
#endif
#if defined(__GNUC__)
#define SF_INLINE static inline __attribute__((always_inline))
#define SF_NOINLINE __attribute__((noinline))
#else
#define SF_INLINE static inline
#define SF_NOINLINE
#endif

#define SIGN 0x80000000u
#define EXP_MASK 0x7F800000u
#define FRAC_MASK 0x007FFFFFu
#define HIDDEN 0x00800000u
#define QUIET 0x00400000u
#define INF 0x7F800000u
#define DEFAULT_NAN 0x7FC00000u  // Arm FPU default NaN (FPSCR.DN=0 still uses it for invalid operations)

SF_INLINE int is_nan(uint32_t a) {
    return (a << 1) > 0xFF000000u;
}

// NaN operand(s): the first signalling NaN, else the first quiet NaN, made
// quiet (Arm FPProcessNaNs; x64 SSE instead returns the first NaN operand).
static uint32_t nan_of(uint32_t a, uint32_t b) {
    if (is_nan(a) && !(a & QUIET)) {
        return a | QUIET;
    }
    if (is_nan(b) && !(b & QUIET)) {
        return b | QUIET;
    }
    return is_nan(a) ? a : (b | QUIET);
}

// Leading zeros of x != 0: binary search (Cortex-M0 has no CLZ).
SF_INLINE int32_t clz32(uint32_t x) {
#if defined(__ARM_FEATURE_CLZ) || defined(MT_SOFT_FLOAT_TEST_CLZ)
    return (int32_t)__builtin_clz(x);  // Cortex-M3 (armv7m) has CLZ
#else
    // shift tests, not compares: Thumb-1 compares need each constant built first
    int32_t n = 0;
    if (!(x >> 16)) {
        n = 16;
        x <<= 16;
    }
    if (!(x >> 24)) {
        n += 8;
        x <<= 8;
    }
    if (!(x >> 28)) {
        n += 4;
        x <<= 4;
    }
    if (!(x >> 30)) {
        n += 2;
        x <<= 2;
    }
    return n + 1 - (int32_t)(x >> 31);
#endif
}

// x >> d with every shifted-out bit ORed into bit 0 (d >= 0).
SF_INLINE uint32_t shift_right_jam(uint32_t x, int32_t d) {
    if (d == 0) {
        return x;
    }
    if (d < 32) {
        return (x >> d) | ((x << (32 - d)) != 0 ? 1u : 0u);
    }
    return x != 0 ? 1u : 0u;
}

// Round and pack. sig holds the significand with its leading 1 at bit 30 and
// 7 bits below the 23 fraction bits (bit 0 sticky); e is the biased exponent
// minus 1 (the leading 1 adds the missing 1 when packed). e < 0 is a result
// below the normal range: denormalise first, then round once (IEEE, FZ=0).
SF_INLINE uint32_t round_pack(uint32_t sign, int32_t e, uint32_t sig) {
    if ((uint32_t)e >= 0xFDu) {
        if (e < 0) {
            sig = shift_right_jam(sig, -e);
            e = 0;
        } else if (e > 0xFD || sig + 0x40u >= 0x80000000u) {
            return sign | INF;  // overflow: nearest-even rounds to infinity
        }
    }
    const uint32_t low = sig & 0x7Fu;
    sig = (sig + 0x40u) >> 7;
    if (low == 0x40u) {
        sig &= ~1u;  // tie: to even
    }
    return sign + ((uint32_t)e << 23) + sig;  // a carry out of the fraction bumps the exponent
}

// round_pack out of line, for the fast paths' rare results out of the normal range.
static SF_NOINLINE uint32_t round_pack_edge(uint32_t sign, int32_t e, uint32_t sig) {
    return round_pack(sign, e, sig);
}

// ---------------------------------------------------------------------------
// add / sub

// a + b for finite a and b: the general path (zeros, subnormals).
static SF_NOINLINE uint32_t add_finite(uint32_t a, uint32_t b) {
    uint32_t ea = (a >> 23) & 0xFFu, eb = (b >> 23) & 0xFFu;
    uint32_t ma = a & FRAC_MASK, mb = b & FRAC_MASK;
    // subnormals: exponent 1 without the hidden bit; zeros: significand 0
    if (ea) {
        ma |= HIDDEN;
    } else {
        ea = 1;
    }
    if (eb) {
        mb |= HIDDEN;
    } else {
        eb = 1;
    }
    if (!((a ^ b) & SIGN)) {
        // same signs: add magnitudes, larger exponent first
        const uint32_t sign = a & SIGN;
        if (ea < eb) {
            uint32_t t = ea;
            ea = eb;
            eb = t;
            t = ma;
            ma = mb;
            mb = t;
        }
        uint32_t s = (ma << 6) + shift_right_jam(mb << 6, (int32_t)(ea - eb));  // leading 1 at bit 29 or 30
        int32_t e = (int32_t)ea;
        if (s < 0x40000000u) {
            s <<= 1;
            --e;
        }
        return round_pack(sign, e, s);
    }
    // opposite signs: larger magnitude minus smaller
    uint32_t sign = a & SIGN;
    const uint32_t abs_a = a & ~SIGN, abs_b = b & ~SIGN;
    if (abs_a == abs_b) {
        return 0;  // x - x = +0 when rounding to nearest
    }
    if (abs_a < abs_b) {
        sign ^= SIGN;
        uint32_t t = ea;
        ea = eb;
        eb = t;
        t = ma;
        ma = mb;
        mb = t;
    }
    // Exponents 2+ apart: at most one bit of cancellation, the sticky bit stays
    // below the rounding point. 0 or 1 apart: nothing is shifted out, exact.
    uint32_t s = (ma << 7) - shift_right_jam(mb << 7, (int32_t)(ea - eb));
    const int32_t n = clz32(s) - 1;
    return round_pack(sign, (int32_t)ea - 1 - n, s << n);
}

// a + b when a or b is an infinity or a NaN.
static SF_NOINLINE uint32_t add_special(uint32_t a, uint32_t b) {
    if (is_nan(a) || is_nan(b)) {
        return nan_of(a, b);
    }
    if ((a << 1) == (b << 1)) {
        return a == b ? a : DEFAULT_NAN;  // inf + inf, inf - inf
    }
    return (a << 1) > (b << 1) ? a : b;  // the infinity
}

SF_INLINE uint32_t add_impl(uint32_t a, uint32_t b) {
    uint32_t a2 = a << 1, b2 = b << 1;  // magnitudes, exponent on top
    if (a2 < b2) {
        if (b2 >= 0xFF000000u) {
            return add_special(a, b);
        }
        const uint32_t t = a;  // |a| >= |b| from here
        a = b;
        b = t;
        b2 = a2;
        a2 = a << 1;
    } else if (a2 >= 0xFF000000u) {
        return add_special(a, b);
    }
    const uint32_t eb = b2 >> 24;
    if (eb == 0) {
        if (b2 == 0) {
            // x + 0 = x exactly (zero gradients and weights are common); two zeros:
            // -0 only when both are -0 (round to nearest)
            return a2 != 0 ? a : (a & b);
        }
        return add_finite(a, b);  // b subnormal
    }
    // Fast path, both normal: significands with the leading 1 at bit 30, the
    // 7 low bits zero, so a shift by up to 7 loses nothing.
    const uint32_t ea = a2 >> 24, d = ea - eb;
    const uint32_t ma = (a2 << 7 >> 1) | 0x40000000u;
    uint32_t mb = (b2 << 7 >> 1) | 0x40000000u;
    if (d > 7) {
        mb = d < 32 ? (mb >> d) | ((mb << (32 - d)) != 0 ? 1u : 0u) : 1u;  // sticky
    } else {
        mb >>= d;
    }
    int32_t e = (int32_t)ea - 1;  // round_pack's exponent for a leading 1 at bit 30
    uint32_t s;
    if (!((a ^ b) & SIGN)) {
        s = ma + mb;
        if (s >= 0x80000000u) {  // carry: leading 1 at bit 31
            s = (s >> 1) | (s & 1u);
            ++e;
        }
    } else {
        s = ma - mb;
        if (s < 0x40000000u) {
            if (d > 1) {
                // Exponents 2+ apart: one place of cancellation at most (s > 2^29);
                // the sticky bit stays far below the rounding point.
                s <<= 1;
                --e;
            } else {
                // 0 or 1 apart: nothing was shifted out, so s is exact; it may be 0.
                if (s == 0) {
                    return 0;  // x - x = +0 when rounding to nearest
                }
                const int32_t n = clz32(s) - 1;
                s <<= n;
                e -= n;
            }
        }
    }
    if ((uint32_t)e < 0xFDu) {
        const uint32_t low = s & 0x7Fu;  // round to nearest-even and pack, carry into the exponent
        s = (s + 0x40u) >> 7;
        if (low == 0x40u) {
            s &= ~1u;
        }
        return (a & SIGN) + ((uint32_t)e << 23) + s;
    }
    return round_pack_edge(a & SIGN, e, s);
}

uint32_t mt_f32_add(uint32_t a, uint32_t b) {
    return add_impl(a, b);
}

uint32_t mt_f32_sub(uint32_t a, uint32_t b) {
    if (is_nan(b)) {
        return nan_of(a, b);  // before the sign flip: a NaN keeps its sign
    }
    return add_impl(a, b ^ SIGN);
}

// ---------------------------------------------------------------------------
// mul

// Normalise a nonzero subnormal's fraction m to [2^23, 2^24): returns the
// exponent (1 - shift) that keeps its value.
SF_INLINE int32_t normalise_sub(uint32_t *m) {
    const int32_t sh = clz32(*m) - 8;
    *m <<= sh;
    return 1 - sh;
}

// sign * ma * mb * 2^(ea + eb - 2 * (127 + 23)), ma and mb in [2^23, 2^24).
SF_INLINE uint32_t mul_sig(uint32_t sign, int32_t ea, int32_t eb, uint32_t ma, uint32_t mb) {
    // 16-bit partial products: ma * mb = hi * 2^32 + mid * 2^16 + lo, all exact in 32 bits
    const uint32_t a1 = ma >> 16, a0 = ma & 0xFFFFu, b1 = mb >> 16, b0 = mb & 0xFFFFu;
    const uint32_t lo = a0 * b0;
    const uint32_t mid = a1 * b0 + a0 * b1;      // < 2^25
    const uint32_t hi = a1 * b1;                 // < 2^16
    uint32_t z = (hi << 16) + mid + (lo >> 16);  // the product >> 16, < 2^32; bits lost: lo & 0xFFFF
    const uint32_t sticky = (lo & 0xFFFFu) != 0 ? 1u : 0u;
    int32_t e = ea + eb - 128;
    if (z >= 0x80000000u) {
        z = (z >> 1) | (z & 1u);
        ++e;
    }
    return round_pack(sign, e, z | sticky);
}

// a * b when an operand is not a normal number.
static SF_NOINLINE uint32_t mul_slow(uint32_t a, uint32_t b) {
    const uint32_t sign = (a ^ b) & SIGN;
    int32_t ea = (int32_t)(a << 1 >> 24), eb = (int32_t)(b << 1 >> 24);
    uint32_t ma = a & FRAC_MASK, mb = b & FRAC_MASK;
    if (ea == 0xFF || eb == 0xFF) {
        if (is_nan(a) || is_nan(b)) {
            return nan_of(a, b);
        }
        if ((a << 1) == 0 || (b << 1) == 0) {
            return DEFAULT_NAN;  // inf * 0
        }
        return sign | INF;
    }
    if (ma == 0 && ea == 0) {
        return sign;
    }
    if (mb == 0 && eb == 0) {
        return sign;
    }
    if (ea == 0) {
        ea = normalise_sub(&ma);
    } else {
        ma |= HIDDEN;
    }
    if (eb == 0) {
        eb = normalise_sub(&mb);
    } else {
        mb |= HIDDEN;
    }
    return mul_sig(sign, ea, eb, ma, mb);
}

uint32_t mt_f32_mul(uint32_t a, uint32_t b) {
    if ((uint32_t)((a << 1 >> 24) - 1) >= 0xFEu || (uint32_t)((b << 1 >> 24) - 1) >= 0xFEu) {
        // a zero times a finite number (common in training: zero gradients,
        // zero weights) is a signed zero; everything else out of line
        if (((a << 1) == 0 && (b << 1) < 0xFF000000u) || ((b << 1) == 0 && (a << 1) < 0xFF000000u)) {
            return (a ^ b) & SIGN;
        }
        return mul_slow(a, b);
    }
    const int32_t e = (int32_t)(a << 1 >> 24) + (int32_t)(b << 1 >> 24) - 128;
    if ((uint32_t)e >= 0xFCu) {
        return mul_slow(a, b);  // the result may leave the normal range
    }
    // Fast path, both normal, the result normal: sign and exponent first (the
    // operands are dead after that, fewer registers live on Thumb-1).
    // Significands as 8 high + 16 low bits: the partial products fit 32 bits;
    // z = the 48-bit product >> 16, sticky for the rest.
    uint32_t base = ((a ^ b) & SIGN) + ((uint32_t)e << 23);
    const uint32_t a0 = a & 0xFFFFu, b0 = b & 0xFFFFu;
    const uint32_t a1 = (a << 9 >> 25) + 0x80u, b1 = (b << 9 >> 25) + 0x80u;
    const uint32_t lo = a0 * b0;
    uint32_t z = (a1 * b1) << 16;
    z += a1 * b0;
    z += a0 * b1;
    z += lo >> 16;
    if (lo << 16) {
        z |= 1u;
    }
    if ((int32_t)z < 0) {  // product in [2, 4)
        z = (z >> 1) | (z & 1u);
        base += 1u << 23;
    }
    // round to nearest-even and pack (a carry bumps the exponent, at most to 0xFE)
    const uint32_t low = z & 0x7Fu;
    z = (z + 0x40u) >> 7;
    if (low == 0x40u) {
        z &= ~1u;
    }
    return base + z;
}

// w * s for an integer |w| <= 128 (an int8 weight level), exactly as
// mt_f32_mul(mt_f32_from_i32(w), s) (the conversion is exact): for a normal s
// the product of w and s's 24-bit significand is exact in 32 bits, so it is
// normalised and rounded once, with no 16-bit partial products.
uint32_t mt_f32_mul_i8(int32_t w, uint32_t s) {
    const uint32_t es = s << 1 >> 24;
    if (es - 1u >= 0xFEu || w == 0) {
        if (w == 0 && es != 0xFFu) {
            return s & SIGN;  // +0 * finite s
        }
        return mt_f32_mul(mt_f32_from_i32(w), s);  // zero or subnormal s, infinities, NaN
    }
    uint32_t sign = s & SIGN, aw = (uint32_t)w;
    if (w < 0) {
        aw = 0u - aw;
        sign ^= SIGN;
    }
    uint32_t m = ((s & FRAC_MASK) | HIDDEN) * aw;  // in [2^23, 2^31)
    int32_t e = (int32_t)es + 6;                   // round_pack's exponent for the leading 1 at bit 30
    // shift tests, not compares (Thumb-1 builds each compare's constant first)
    if (!(m >> 27)) {
        m <<= 4;
        e -= 4;
    }
    if (!(m >> 29)) {
        m <<= 2;
        e -= 2;
    }
    if (!(m >> 30)) {
        m <<= 1;
        e -= 1;
    }
    if ((uint32_t)e < 0xFDu) {
        const uint32_t low = m & 0x7Fu;  // exact: nothing below bit 0 was lost
        m = (m + 0x40u) >> 7;
        if (low == 0x40u) {
            m &= ~1u;
        }
        return sign + ((uint32_t)e << 23) + m;
    }
    return round_pack_edge(sign, e, m);
}

// (int32_t)(x + u), the sum rounded once to float32 and truncated, for u in
// [128, 129) (the update's 128 + rounding offset) and |x| < 128; other
// operands take the general path. With z = x + u exact and 1 <= z < 256 in
// [2^k, 2^(k+1)), round-to-nearest-even gives an integer n exactly when
// z >= n - 2^(k-24) (half an ulp; the tie goes to n, whose significand is
// even), so trunc(fl(z)) = floor(z + 2^(k-24)). z is held in fixed point with
// 24 fraction bits, rounded down (x's lower bits only push z up within one
// 2^-24 step, which cannot cross an integer after adding a multiple of 2^-24).
int32_t mt_f32_add_trunc(uint32_t x, uint32_t u) {
    const uint32_t ex = x << 1 >> 24;
    if ((u >> 16) == 0x4300u) {
        if (ex - 1u < 133u) {  // x normal, |x| < 128
            const uint32_t top = 0x80000000u;
            const uint32_t zu = (u << 8) | top;  // u * 2^24: 2^31 + the fraction
            const uint32_t mx = (x << 8) | top;  // |x| = mx * 2^(ex - 158)
            const uint32_t d = 134u - ex;        // |x| * 2^24 = mx >> d, d >= 1
            uint32_t xf = 0, lost = 1, z;
            if (d < 32u) {
                xf = mx >> d;
                lost = (mx << (32u - d)) != 0 ? 1u : 0u;
            }
            if (x & SIGN) {
                z = zu - xf - lost;  // floor of u - |x| (> 0: |x| < 128 <= u)
            } else {
                z = zu + xf;
                if (z < zu) {
                    z = 0;  // z >= 256: general path
                }
            }
            const uint32_t n = z >> 24;
            if (n != 0) {
                uint32_t h = 128;  // 2^k, the largest power of two <= n
                while (h > n) {
                    h >>= 1;
                }
                const uint32_t r = z + h;
                if (r >= z) {
                    return (int32_t)(r >> 24);
                }
            }
        } else if ((x << 1) == 0) {
            return 128;  // +-0 + u = u
        }
    }
    return mt_f32_to_i32(mt_f32_add(x, u));
}

// ---------------------------------------------------------------------------
// div

uint32_t mt_f32_div(uint32_t a, uint32_t b) {
    const uint32_t sign = (a ^ b) & SIGN;
    int32_t ea = (int32_t)((a >> 23) & 0xFFu), eb = (int32_t)((b >> 23) & 0xFFu);
    uint32_t ma = a & FRAC_MASK, mb = b & FRAC_MASK;
    if (ea == 0xFF || eb == 0xFF) {
        if (is_nan(a) || is_nan(b)) {
            return nan_of(a, b);
        }
        if (ea == eb) {
            return DEFAULT_NAN;  // inf / inf
        }
        return ea == 0xFF ? (sign | INF) : sign;
    }
    if (eb == 0 && mb == 0) {
        return (ea == 0 && ma == 0) ? DEFAULT_NAN : (sign | INF);  // 0 / 0, x / 0
    }
    if (ea == 0 && ma == 0) {
        return sign;
    }
    if (ea == 0) {
        ea = normalise_sub(&ma);
    } else {
        ma |= HIDDEN;
    }
    if (eb == 0) {
        eb = normalise_sub(&mb);
    } else {
        mb |= HIDDEN;
    }
    int32_t e = ea - eb + 126;
    if (ma < mb) {
        ma <<= 1;  // quotient in [1, 2)
        --e;
    }
    // Restoring division, two quotient bits per pass: 26 bits, leading 1 at bit 25.
    uint32_t r = ma, q = 0;
    for (int32_t i = 0; i < 13; ++i) {
        q <<= 2;
        if (r >= mb) {
            r -= mb;
            q |= 2u;
        }
        r <<= 1;
        if (r >= mb) {
            r -= mb;
            q |= 1u;
        }
        r <<= 1;
    }
    return round_pack(sign, e, (q << 5) | (r != 0 ? 1u : 0u));
}

// ---------------------------------------------------------------------------
// sqrt

uint32_t mt_f32_sqrt(uint32_t a) {
    if (is_nan(a)) {
        return a | QUIET;
    }
    if ((a << 1) == 0) {
        return a;  // +-0
    }
    if (a & SIGN) {
        return DEFAULT_NAN;
    }
    if (a == INF) {
        return a;
    }
    int32_t ea = (int32_t)(a >> 23);
    uint32_t m = a & FRAC_MASK;
    if (ea == 0) {
        ea = normalise_sub(&m);
    } else {
        m |= HIDDEN;
    }
    // a = m * 2^x, x = ea - 150; make x even so the root's exponent is x / 2
    int32_t x = ea - 150;
    if (x & 1) {
        m <<= 1;  // < 2^25
        --x;
    }
    // q = floor(sqrt(m * 2^26)), one bit per pass, the radicand's bit pairs
    // taken from the top of mm (m's 26 bits, then zeros).
    uint32_t mm = m << 6, rem = 0, q = 0;
    for (int32_t i = 0; i < 26; ++i) {
        rem = (rem << 2) | (mm >> 30);
        mm <<= 2;
        const uint32_t t = (q << 2) | 1u;
        q <<= 1;
        if (rem >= t) {
            rem -= t;
            q |= 1u;
        }
    }
    // root = q(+sticky) * 2^((x - 26) / 2); q has 25 or 26 bits
    const int32_t n = clz32(q) - 1;
    return round_pack(0, (x - 26) / 2 + 156 - n, (q << n) | (rem != 0 ? 1u : 0u));
}

// ---------------------------------------------------------------------------
// conversions

// |x| as a float with sign bit `sign`.
SF_INLINE uint32_t from_mag(uint32_t sign, uint32_t mag) {
    if (mag == 0) {
        return 0;
    }
    const int32_t n = clz32(mag);
    if (mag < 0x1000000u) {
        return sign + ((uint32_t)(157 - n) << 23) + (mag << (n - 8));  // exact
    }
    const uint32_t s = mag << n;  // leading 1 at bit 31
    return round_pack(sign, 157 - n, (s >> 1) | (s & 1u));
}

uint32_t mt_f32_from_i32(int32_t x) {
    return x < 0 ? from_mag(SIGN, 0u - (uint32_t)x) : from_mag(0, (uint32_t)x);
}

uint32_t mt_f32_from_u32(uint32_t x) {
    return from_mag(0, x);
}

int32_t mt_f32_to_i32(uint32_t a) {
    const int32_t e = (int32_t)((a >> 23) & 0xFFu);
    if (e < 127) {
        return 0;  // |a| < 1 (zeros, subnormals included)
    }
    if (e >= 127 + 31) {
        if (is_nan(a)) {
            return 0;
        }
        return (a & SIGN) ? INT32_MIN : INT32_MAX;  // saturate (exactly -2^31 included)
    }
    const uint32_t m = (a & FRAC_MASK) | HIDDEN;
    const uint32_t v = e >= 150 ? m << (e - 150) : m >> (150 - e);
    return (a & SIGN) ? (int32_t)(0u - v) : (int32_t)v;
}

uint32_t mt_f32_to_u32(uint32_t a) {
    const int32_t e = (int32_t)((a >> 23) & 0xFFu);
    if (e < 127) {
        return 0;
    }
    if (a & SIGN) {
        return 0;  // negative (NaN included) saturates to 0
    }
    if (e >= 127 + 32) {
        return is_nan(a) ? 0u : 0xFFFFFFFFu;
    }
    const uint32_t m = (a & FRAC_MASK) | HIDDEN;
    return e >= 150 ? m << (e - 150) : m >> (150 - e);
}

// ---------------------------------------------------------------------------
// comparisons

SF_INLINE int ordered_lt(uint32_t a, uint32_t b) {
    if (((a | b) << 1) == 0) {
        return 0;  // -0 == +0
    }
    if ((int32_t)(a & b) < 0) {
        return a > b;  // both negative: larger pattern, larger magnitude, smaller value
    }
    return (int32_t)a < (int32_t)b;  // a negative and b not, or both non-negative
}

int mt_f32_un(uint32_t a, uint32_t b) {
    return is_nan(a) || is_nan(b);
}

int mt_f32_eq(uint32_t a, uint32_t b) {
    if (is_nan(a) || is_nan(b)) {
        return 0;
    }
    return a == b || ((a | b) << 1) == 0;
}

int mt_f32_lt(uint32_t a, uint32_t b) {
    return !mt_f32_un(a, b) && ordered_lt(a, b);
}

int mt_f32_le(uint32_t a, uint32_t b) {
    return !mt_f32_un(a, b) && !ordered_lt(b, a);
}

int mt_f32_gt(uint32_t a, uint32_t b) {
    return !mt_f32_un(a, b) && ordered_lt(b, a);
}

int mt_f32_ge(uint32_t a, uint32_t b) {
    return !mt_f32_un(a, b) && !ordered_lt(a, b);
}

#if defined(MT_SOFT_FLOAT_AEABI) && !defined(MICROPY_ENABLE_DYNRUNTIME) && defined(__GNUC__)
// Firmware: the run-time ABI names as weak aliases of the routines above.
// Linked as an object they win over libgcc's archive members, so the whole
// firmware's float arithmetic runs on these routines; should the link hold
// another definition (a libgcc member pulled in for a name defined beside
// ours, e.g. __aeabi_l2f on armv7m, or a port's own float library), that one
// serves every caller instead of failing with duplicate symbols. Aliases, not
// weak functions: calls between the routines stay direct and inlined.
// `used`: with -flto, gcc emits its calls to these names after the link-time
// optimiser decided what is referenced, which would otherwise drop them. (A
// natmod's linker, mpy_ld.py, takes global symbols only: there the functions
// carry the ABI names, mt_softfloat.h.)
#define MT_SF_ABI(aeabi, mt) __typeof__(mt) aeabi __attribute__((weak, used, alias(#mt)));
MT_SF_ABI(__aeabi_fadd, mt_f32_add)
MT_SF_ABI(__aeabi_fsub, mt_f32_sub)
MT_SF_ABI(__aeabi_fmul, mt_f32_mul)
MT_SF_ABI(__aeabi_fdiv, mt_f32_div)
MT_SF_ABI(__aeabi_i2f, mt_f32_from_i32)
MT_SF_ABI(__aeabi_ui2f, mt_f32_from_u32)
MT_SF_ABI(__aeabi_f2iz, mt_f32_to_i32)
MT_SF_ABI(__aeabi_f2uiz, mt_f32_to_u32)
MT_SF_ABI(__aeabi_fcmpeq, mt_f32_eq)
MT_SF_ABI(__aeabi_fcmplt, mt_f32_lt)
MT_SF_ABI(__aeabi_fcmple, mt_f32_le)
MT_SF_ABI(__aeabi_fcmpgt, mt_f32_gt)
MT_SF_ABI(__aeabi_fcmpge, mt_f32_ge)
MT_SF_ABI(__aeabi_fcmpun, mt_f32_un)
#endif

// ---------------------------------------------------------------------------
// RISC-V without an FPU: libgcc's comparison entry points, which gcc calls for
// float comparisons. Their results are compared against 0: eq / ne give 0 iff
// a == b, lt < 0 iff a < b, le <= 0 iff a <= b, gt > 0 iff a > b, ge >= 0 iff
// a >= b; with a NaN operand every one of them is false (eq / ne / lt / le
// give 1, gt / ge -1), unord nonzero.

#if defined(MT_SOFT_FLOAT_LIBGCC)
uint32_t __mulsf3(uint32_t a, uint32_t b);
int __eqsf2(uint32_t a, uint32_t b);
int __nesf2(uint32_t a, uint32_t b);
int __ltsf2(uint32_t a, uint32_t b);
int __lesf2(uint32_t a, uint32_t b);
int __gtsf2(uint32_t a, uint32_t b);
int __gesf2(uint32_t a, uint32_t b);
int __unordsf2(uint32_t a, uint32_t b);

// -1, 0, 1 for ordered operands; nan for a NaN operand.
SF_INLINE int cmp3(uint32_t a, uint32_t b, int nan) {
    if (is_nan(a) || is_nan(b)) {
        return nan;
    }
    return ordered_lt(a, b) ? -1 : (ordered_lt(b, a) ? 1 : 0);
}

// mt_f32_mul with the significands' product from one 32x32->64 multiply
// (MUL + MULHU on rv32im), not four 16-bit partial products.
uint32_t __mulsf3(uint32_t a, uint32_t b) {
    if ((uint32_t)((a << 1 >> 24) - 1) >= 0xFEu || (uint32_t)((b << 1 >> 24) - 1) >= 0xFEu) {
        return mt_f32_mul(a, b);  // zeros, subnormals, infinities, NaNs
    }
    const int32_t e = (int32_t)(a << 1 >> 24) + (int32_t)(b << 1 >> 24) - 128;
    if ((uint32_t)e >= 0xFCu) {
        return mt_f32_mul(a, b);  // the result may leave the normal range
    }
    uint32_t base = ((a ^ b) & SIGN) + ((uint32_t)e << 23);
    const uint64_t p = (uint64_t)((a & FRAC_MASK) | HIDDEN) * ((b & FRAC_MASK) | HIDDEN);  // [2^46, 2^48)
    uint32_t z = (uint32_t)(p >> 16);
    if ((uint32_t)p << 16) {
        z |= 1u;
    }
    if ((int32_t)z < 0) {  // product in [2, 4)
        z = (z >> 1) | (z & 1u);
        base += 1u << 23;
    }
    const uint32_t low = z & 0x7Fu;
    z = (z + 0x40u) >> 7;
    if (low == 0x40u) {
        z &= ~1u;
    }
    return base + z;
}

int __eqsf2(uint32_t a, uint32_t b) {
    return cmp3(a, b, 1);
}

int __nesf2(uint32_t a, uint32_t b) {
    return cmp3(a, b, 1);
}

int __ltsf2(uint32_t a, uint32_t b) {
    return cmp3(a, b, 1);
}

int __lesf2(uint32_t a, uint32_t b) {
    return cmp3(a, b, 1);
}

int __gtsf2(uint32_t a, uint32_t b) {
    return cmp3(a, b, -1);
}

int __gesf2(uint32_t a, uint32_t b) {
    return cmp3(a, b, -1);
}

int __unordsf2(uint32_t a, uint32_t b) {
    return mt_f32_un(a, b);
}
#endif

#else
typedef int mt_softfloat_unused_t;  // ISO C: a translation unit is not empty
#endif
