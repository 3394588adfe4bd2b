// The inlined requant of one output (mt_rq_t of mt_runs.h) for the sequence /
// attention kernels (mul_s8.c, matmul_s8.c, layernorm_s8.c). On Cortex-M0
// (MT_SOFT_MATH) mt_runs.h's requant is plain mt_requant and its register
// blocks, which a natmod keeps in the GC heap, would serve these files nothing:
// there they get the same requant without them.
#ifndef MT_SEQ_H
#define MT_SEQ_H

#include "mt_kernels.h"

#if MT_SOFT_MATH
typedef struct {
    int32_t m, shift, lo, hi, zp;
} mt_rq_t;

static inline void mt_rq_init(mt_rq_t *q, int32_t m, int32_t shift, int32_t lo, int32_t hi, int32_t zp) {
    q->m = m;
    q->shift = shift;
    q->lo = lo;
    q->hi = hi;
    q->zp = zp;
}

static inline int8_t mt_rq_out(int32_t acc, const mt_rq_t *q) {
    return (int8_t)(mt_clamp(mt_requant(acc, q->m, q->shift), q->lo, q->hi) + q->zp);
}
#else
#include "mt_runs.h"
#endif

// mt_doubling_high_mul inline where the core multiplies 32 x 32 -> 64 (the
// same bits: floor((a * b + 2^30) / 2^31)); a call to quant.c's on Cortex-M0.
static inline int32_t mt_seq_dhm(int32_t a, int32_t b) {
#if MT_SOFT_MATH
    return mt_doubling_high_mul(a, b);
#else
    return (int32_t)(((int64_t)a * (int64_t)b + ((int64_t)1 << 30)) >> 31);
#endif
}

#endif
