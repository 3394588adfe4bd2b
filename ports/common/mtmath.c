// Single-precision exp, log, sin, cos and pow for the project's ports
// (ports/qemu boards and the ports/host twin), linked ahead of the C
// library's libm as MicroPython's own lib/libm is on its bare-metal ports.
//
// Why: with MICROPY_FLOAT_IMPL_FLOAT, math.exp/log/cos/sin and float `**`
// call expf/logf/cosf/sinf/powf. newlib uses one implementation of these on a
// double-precision FPU (Cortex-M7) and another (fdlibm's float code) on
// Cortex-M4F / M0, glibc a third: results differ in the last bit, and a
// training run (softmax table, loss, Adam's bias correction, the cosine
// schedule) stops being reproducible across boards and the host. Here each
// function is evaluated in IEEE double with + - * / only (hardware double on
// M7 and x86-64 SSE2, libgcc's soft double on M0/M4F: all correctly rounded)
// and rounded once to float, so every port gets the same bits. Accuracy:
// the double result is within a few 1e-16 relative, so the float result is
// the correctly rounded one except in rare near-halfway cases.
// The other libm functions (tan, atan, ...) are the C library's.
#include <math.h>

#include "py/mpconfig.h"

#if MICROPY_FLOAT_IMPL == MICROPY_FLOAT_IMPL_FLOAT

#define MT_LN2_HI 6.93147180369123816490e-01  // upper bits of ln 2 (k * MT_LN2_HI is exact)
#define MT_LN2_LO 1.90821492927058770002e-10
#define MT_INV_LN2 1.44269504088896338700e+00
#define MT_PIO2_1 1.57079632673412561417e+00  // pi/2 in three pieces (Cody-Waite)
#define MT_PIO2_2 6.07710050630396597660e-11
#define MT_PIO2_3 2.02226624879595063154e-21
#define MT_INV_PIO2 6.36619772367581382433e-01
#define MT_SQRT_HALF 7.07106781186547524401e-01

static int mt_isnan(double x) {
    return x != x;
}

static int mt_isinf(double x) {
    return x - x != x - x && !mt_isnan(x);
}

// Nearest integer of |x| < 2^30, as an int (ties away from zero).
static int mt_round_int(double x) {
    return (int)(x < 0.0 ? x - 0.5 : x + 0.5);
}

// e^x for -110 <= x <= 90: x = k ln2 + r, |r| <= ln2/2, e^r by Taylor to r^14.
static double mt_exp(double x) {
    int k = mt_round_int(x * MT_INV_LN2);
    double r = (x - k * MT_LN2_HI) - k * MT_LN2_LO;
    double p = 1.0 / 87178291200.0;  // 1/14!
    static const double inv_fact[] = {
        1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
        1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0,
    };
    for (unsigned i = 0; i < sizeof(inv_fact) / sizeof(inv_fact[0]); i++) {
        p = p * r + inv_fact[i];
    }
    return ldexp(p, k);
}

// ln x for finite x > 0: x = m 2^e, sqrt(1/2) <= m < sqrt(2),
// ln m = 2 atanh(s), s = (m-1)/(m+1), |s| <= 0.172, series to s^23.
static double mt_log(double x) {
    int e;
    double m = frexp(x, &e);
    if (m < MT_SQRT_HALF) {
        m *= 2.0;
        e -= 1;
    }
    double f = m - 1.0;
    double s = f / (2.0 + f);
    double z = s * s;
    double q = 1.0 / 23.0;
    for (int n = 21; n >= 1; n -= 2) {
        q = q * z + 1.0 / (double)n;
    }
    return e * MT_LN2_HI + (2.0 * s * q + e * MT_LN2_LO);
}

// p(z) = c[0] + c[1] z + c[2] z^2 + ..., summed in this order (the reference port,
// tools/microtrain_tools/reference/mpfloat.py _poly, sums the same way).
static double mt_series(const double *c, unsigned n, double z) {
    double p = 0.0, t = 1.0;
    for (unsigned i = 0; i < n; i++) {
        p += c[i] * t;
        t *= z;
    }
    return p;
}

// sin and cos of |r| <= pi/4 (Taylor to r^21 / r^20).
static double mt_sin_k(double r) {
    static const double c[] = {
        1.0, -1.0 / 6.0, 1.0 / 120.0, -1.0 / 5040.0, 1.0 / 362880.0, -1.0 / 39916800.0,
        1.0 / 6227020800.0, -1.0 / 1307674368000.0, 1.0 / 355687428096000.0,
        -1.0 / 121645100408832000.0, 1.0 / 51090942171709440000.0,
    };
    return r * mt_series(c, sizeof(c) / sizeof(c[0]), r * r);
}

static double mt_cos_k(double r) {
    static const double c[] = {
        1.0, -1.0 / 2.0, 1.0 / 24.0, -1.0 / 720.0, 1.0 / 40320.0, -1.0 / 3628800.0,
        1.0 / 479001600.0, -1.0 / 87178291200.0, 1.0 / 20922789888000.0,
        -1.0 / 6402373705728000.0, 1.0 / 2432902008176640000.0,
    };
    return mt_series(c, sizeof(c) / sizeof(c[0]), r * r);
}

// x = n pi/2 + r; returns n mod 4 (accurate for |x| < 2^28, deterministic beyond).
static int mt_reduce(double x, double *r) {
    double n = (double)mt_round_int(x * MT_INV_PIO2);
    *r = ((x - n * MT_PIO2_1) - n * MT_PIO2_2) - n * MT_PIO2_3;
    return (int)((long long)n & 3);
}

float expf(float x) {
    double d = (double)x;
    if (mt_isnan(d)) {
        return x;
    }
    if (d > 90.0) {
        return (float)HUGE_VAL;
    }
    if (d < -110.0) {
        return 0.0f;
    }
    return (float)mt_exp(d);
}

float logf(float x) {
    double d = (double)x;
    if (mt_isnan(d) || d < 0.0) {
        return (float)NAN;
    }
    if (d == 0.0) {
        return (float)-HUGE_VAL;
    }
    if (mt_isinf(d)) {
        return x;
    }
    return (float)mt_log(d);
}

static float mt_sincos(float x, int cos) {
    double d = (double)x, r;
    if (mt_isnan(d) || mt_isinf(d)) {
        return (float)NAN;
    }
    if (d > 1.0e9 || d < -1.0e9) {
        d = fmod(d, 2.0 * 3.14159265358979311600e+00);  // keep n in int range; exact
    }
    int n = (mt_reduce(d, &r) + cos) & 3;
    double v = (n & 1) ? mt_cos_k(r) : mt_sin_k(r);
    return (float)(n & 2 ? -v : v);
}

float sinf(float x) {
    return mt_sincos(x, 0);
}

float cosf(float x) {
    return mt_sincos(x, 1);
}

// y is an integer: 0 no, 1 even, 2 odd.
static int mt_int_kind(double y) {
    if (floor(y) != y) {
        return 0;
    }
    return fmod(y, 2.0) == 0.0 ? 1 : 2;
}

float powf(float x, float y) {
    double dx = (double)x, dy = (double)y;
    if (dy == 0.0 || dx == 1.0) {
        return 1.0f;
    }
    if (mt_isnan(dx) || mt_isnan(dy)) {
        return (float)NAN;
    }
    int yk = mt_isinf(dy) ? 1 : mt_int_kind(dy);
    if (mt_isinf(dy)) {
        double ax = fabs(dx);
        if (ax == 1.0) {
            return 1.0f;
        }
        return (float)((ax < 1.0) == (dy > 0.0) ? 0.0 : HUGE_VAL);
    }
    if (dx == 0.0 || mt_isinf(dx)) {
        // |x|^y is 0 or inf; the sign of x survives odd integer powers
        double mag = (dx == 0.0) == (dy > 0.0) ? 0.0 : HUGE_VAL;
        return (float)(yk == 2 ? copysign(mag, dx) : mag);
    }
    double sign = 1.0;
    if (dx < 0.0) {
        if (yk == 0) {
            return (float)NAN;
        }
        sign = yk == 2 ? -1.0 : 1.0;
        dx = -dx;
    }
    double t = dy * mt_log(dx);
    if (t > 90.0) {
        return (float)(sign * HUGE_VAL);
    }
    if (t < -110.0) {
        return (float)(sign * 0.0);
    }
    return (float)(sign * mt_exp(t));
}

#endif
