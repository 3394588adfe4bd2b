// Innermost runs shared by conv2d.c and linear.c. They are static and kept
// out of line on purpose: on Cortex-M0 (8 low registers) the accumulator and
// pointers stay in registers instead of being spilled by the enclosing loop
// nest. Each including file gets its own copy.
#ifndef MT_RUNS_H
#define MT_RUNS_H

#include <stdint.h>

#if defined(__GNUC__)
#define MT_NOINLINE __attribute__((noinline))
#else
#define MT_NOINLINE
#endif

// sum (x[i] - zp) * w[i], i < n. x and w end at most one past their run.
static MT_NOINLINE int32_t dot_run(const int8_t *x, const int8_t *w, int32_t n, int32_t zp) {
    int32_t acc = 0;
    for (const int8_t *end = w + n; w != end; ++w, ++x) {
        acc += ((int32_t)*x - zp) * (int32_t)*w;
    }
    return acc;
}

// a[i] += s * w[i], i < n.
static MT_NOINLINE void axpy_w_run(int32_t *a, const int8_t *w, int32_t n, int32_t s) {
    for (const int8_t *end = w + n; w != end; ++w, ++a) {
        *a += s * (int32_t)*w;
    }
}

#endif
