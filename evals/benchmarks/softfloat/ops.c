// Bare-metal Cortex-M0 image for evals/benchmarks/bench_softfloat.py: calls each float
// operation N_CALLS times on operands typical of training (normal numbers,
// int8 products); the QEMU counting plugin attributes the instructions to the
// __aeabi_* functions, so instructions per call come out exactly. Linked with
// usermod/microtrain/softfloat.c (the natmod's routines) or with libgcc's (the
// firmware's), to compare. No .data, no libc: semihosting exit only.
#include <stdint.h>

#define N_CALLS 1024

uint32_t __aeabi_fadd(uint32_t, uint32_t);
uint32_t __aeabi_fsub(uint32_t, uint32_t);
uint32_t __aeabi_fmul(uint32_t, uint32_t);
uint32_t __aeabi_fdiv(uint32_t, uint32_t);
uint32_t __aeabi_i2f(int32_t);
int32_t __aeabi_f2iz(uint32_t);
int __aeabi_fcmplt(uint32_t, uint32_t);
int __aeabi_fcmpeq(uint32_t, uint32_t);

extern uint32_t __stack_top;
void reset_handler(void);

__attribute__((section(".vectors"), used)) static const void *const vectors[16] = {
    &__stack_top, (const void *)reset_handler,
};

volatile uint32_t sink;
static uint32_t A[N_CALLS], B[N_CALLS], V[N_CALLS];
static int8_t W[N_CALLS];  // int8 weight levels
static uint16_t U[N_CALLS];  // stochastic-rounding offsets

// xorshift32: the operands (no .data to copy)
static uint32_t next(uint32_t *s) {
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *s = x;
    return x;
}

// A normal float32 in +-[2^-12, 2^4): the range of scales, gradients and weights.
static uint32_t normal(uint32_t *s) {
    const uint32_t r = next(s);
    return (r & 0x807FFFFFu) | ((115u + ((r >> 24) & 15u)) << 23);
}

// The plugin snapshots the counts each time this runs (evals/benchmarks/bench_softfloat.py).
__attribute__((noinline)) void mt_mark(void) {
    __asm__ volatile("" ::: "memory");
}

static __attribute__((noinline)) void semihost_exit(void) {
    // SYS_EXIT_EXTENDED (0x20): {ADP_Stopped_ApplicationExit, 0}
    static const uint32_t blk[2] = {0x20026u, 0};
    register uint32_t r0 __asm__("r0") = 0x20;
    register const uint32_t *r1 __asm__("r1") = blk;
    __asm__ volatile("bkpt 0xAB" : : "r"(r0), "r"(r1) : "memory");
    for (;;) {
    }
}

// An operation with the calling convention of the ABI ones, doing nothing: the loop's own cost.
__attribute__((noinline)) uint32_t mt_none(uint32_t a, uint32_t b) {
    __asm__ volatile("" ::: "memory");
    return a ^ b;
}

#define LOOP2(f)                                   \
    do {                                           \
        mt_mark();                                 \
        for (int i = 0; i < N_CALLS; ++i) {        \
            acc += (uint32_t)f(A[i], B[i]);        \
        }                                          \
    } while (0)
#define LOOP1(f, X)                                \
    do {                                           \
        mt_mark();                                 \
        for (int i = 0; i < N_CALLS; ++i) {        \
            acc += (uint32_t)f(X[i]);              \
        }                                          \
    } while (0)

#if defined(MT_SOFT_FLOAT)
uint32_t mt_f32_mul_i8(int32_t w, uint32_t s);
int32_t mt_f32_add_trunc(uint32_t x, uint32_t u);
#else
// libgcc has no fused forms: what the C code computes with it
static uint32_t mt_f32_mul_i8(int32_t w, uint32_t s) {
    return __aeabi_fmul(__aeabi_i2f(w), s);
}
static int32_t mt_f32_add_trunc(uint32_t x, uint32_t u) {
    return __aeabi_f2iz(__aeabi_fadd(x, u));
}
#endif

static uint32_t mul_i8(uint32_t w, uint32_t s) {
    return mt_f32_mul_i8((int32_t)w, s);
}
static uint32_t add_trunc(uint32_t x, uint32_t u) {
    return (uint32_t)mt_f32_add_trunc(x, u);
}

static uint32_t to_int(uint32_t a) {
    return (uint32_t)__aeabi_f2iz(a);
}
static uint32_t from_int(uint32_t v) {
    return __aeabi_i2f((int32_t)v);
}

void reset_handler(void) {
    uint32_t s = 2463534242u, acc = 0;
    for (int i = 0; i < N_CALLS; ++i) {
        A[i] = normal(&s);
        B[i] = normal(&s);
        V[i] = (uint32_t)((int32_t)(next(&s) & 0x7FFFu) - 16384);  // about an int8 x int8 product
        W[i] = (int8_t)(next(&s) & 0xFFu);
        U[i] = (uint16_t)next(&s);
    }
    // markers: 0 none, 1 fadd, 2 fsub, 3 fmul, 4 fdiv, 5 i2f, 6 f2iz, 7 fcmplt, 8 fadd(x, 0),
    // 9 fmul(x, 0), 10 mul_i8, 11 add_trunc, then the end
    LOOP2(mt_none);
    LOOP2(__aeabi_fadd);
    LOOP2(__aeabi_fsub);
    LOOP2(__aeabi_fmul);
    LOOP2(__aeabi_fdiv);
    LOOP1(from_int, V);
    LOOP1(to_int, A);
    LOOP2(__aeabi_fcmplt);
    // zero operands (zero gradients, weights): x + 0, x * 0
    mt_mark();
    for (int i = 0; i < N_CALLS; ++i) {
        acc += __aeabi_fadd(A[i], 0u);
    }
    mt_mark();
    for (int i = 0; i < N_CALLS; ++i) {
        acc += __aeabi_fmul(A[i], 0u);
    }
    // the update's int8 path: level x scale, trunc(x + 128.x)
    mt_mark();
    for (int i = 0; i < N_CALLS; ++i) {
        acc += mul_i8((uint32_t)(int32_t)W[i], A[i]);
    }
    mt_mark();
    for (int i = 0; i < N_CALLS; ++i) {
        acc += add_trunc(A[i], 0x43000000u | U[i]);  // x + 128 + r * 2^-16, |x| < 16
    }
    mt_mark();
    sink = acc;
    semihost_exit();
}
