// The shape and parameter rules of the sequence / attention layers (docs/format.md): MUL,
// LAYERNORM, SOFTMAX, MATMUL, over the views of their tensors mtm_loader.c fills (its
// op_rules hands these ops here).
#include "mt_kernels.h"
#include "mtm_read.h"

static int same_shape(const mtm_tview_t *a, const mtm_tview_t *b) {
    if (a->rank != b->rank) {
        return 0;
    }
    for (uint32_t k = 0; k < 4; ++k) {
        if (a->dim[k] != b->dim[k]) {
            return 0;
        }
    }
    return 1;
}

// numel == v for an int32 v (numel 0: too many to count).
static int numel_is(const mtm_tview_t *t, int32_t v) {
    return v >= 1 && t->numel == (uint32_t)v;
}

// The last dim (a validated tensor has rank 1..4).
static uint32_t last(const mtm_tview_t *t) {
    return t->dim[t->rank - 1];
}

const char *mt_mtm_seq_rules(uint32_t op, uint32_t act, const int32_t *p, uint32_t n_p, const mtm_tview_t *x,
                             const mtm_tview_t *x2, const mtm_tview_t *y) {
    // the params read into the kernels' descriptor structs (a union: no struct copies)
    union {
        int32_t a[MTM_N_PARAMS_MAX];
        mt_mul_params_t mul;
        mt_layernorm_params_t ln;
        mt_softmax_params_t sm;
        mt_matmul_params_t mm;
    } u;
    for (uint32_t k = 0; k < MTM_N_PARAMS_MAX; ++k) {
        u.a[k] = p[k];
    }
    const char *m;
    if (op == MTM_OP_MUL) {
        const mt_mul_params_t *d = &u.mul;
        if ((m = mt_mul_check(d)) != NULL) {
            return m;
        }
        if (!same_shape(x, y) || !numel_is(x, d->hw * d->c) || last(x) != (uint32_t)d->c) {
            return "input / output shapes differ from each other or from hw, c";
        }
        if (!numel_is(x2, d->hw2 * d->c2) || last(x2) != (uint32_t)d->c2) {
            return "second input's shape does not match hw2, c2";
        }
        if (d->in1_zp != x->zp || d->in2_zp != x2->zp || d->out_zp != y->zp) {
            return "zero points differ from the tensors'";
        }
        return mt_mtm_act_rule(act, d->out_zp, d->act_min, d->act_max);
    }

    if (op == MTM_OP_LAYERNORM) {
        const mt_layernorm_params_t *d = &u.ln;
        if ((m = mt_layernorm_check(d)) != NULL) {
            return m;
        }
        if (!numel_is(x, d->rows * d->c) || !numel_is(y, d->rows * d->c) || last(x) != (uint32_t)d->c ||
            last(y) != (uint32_t)d->c) {
            return "input / output numel != rows * c or last dim != c";
        }
        if (d->in_zp != x->zp || d->out_zp != y->zp) {
            return "zero points differ from the tensors'";
        }
        return NULL;
    }

    if (op == MTM_OP_SOFTMAX) {
        const mt_softmax_params_t *d = &u.sm;
        if ((m = mt_softmax_check(d)) != NULL) {
            return m;
        }
        if (!same_shape(x, y) || !numel_is(x, d->outer * d->n * d->inner)) {
            return "input and output shapes differ or numel != outer * n * inner";
        }
        if (y->scale != MTM_SOFTMAX_SCALE_BITS || y->zp != -128) {
            return "output quantisation must be scale 1/256, zero point -128";
        }
        return NULL;
    }

    if (op == MTM_OP_MATMUL) {  // the descriptor (heads only with 13 params), then the factor's float32 bits
        mt_matmul_params_t *d = &u.mm;
        const uint32_t f = (uint32_t)p[n_p - 1];
        d->heads = n_p == MT_MATMUL_NPARAMS + 1 ? p[MT_MATMUL_NPARAMS - 1] : 1;
        if ((m = mt_matmul_check(d)) != NULL) {
            return m;
        }
        // the last dims of the head layouts (numerics.md): tb 1 splits a's and b's values into
        // the heads and stacks y's; tb 0 stacks a's and splits b's and y's columns
        const int32_t nh = d->heads, split = d->tb ? nh : 1;
        // (one row: a vector of inner values, also as a column of one value per token)
        if (!numel_is(x, nh * d->rows * d->inner) ||
            (last(x) != (uint32_t)(split * d->inner) && !(d->rows == 1 && last(x) == 1))) {
            return "first input's numel != heads * rows * inner or last dim != inner (heads * inner with tb, 1 or "
                   "inner for one row)";
        }
        if (!numel_is(x2, nh * d->inner * d->cols) || last(x2) != (uint32_t)(d->tb ? nh * d->inner : nh * d->cols)) {
            return "second input's numel != heads * inner * cols or last dim != heads * cols (heads * inner with tb)";
        }
        if (!numel_is(y, nh * d->rows * d->cols) || last(y) != (uint32_t)(d->tb ? d->cols : nh * d->cols)) {
            return "output numel != heads * rows * cols or last dim != cols (heads * cols without tb)";
        }
        if (d->a_zp != x->zp || d->b_zp != x2->zp || d->out_zp != y->zp) {
            return "zero points differ from the tensors'";
        }
        if (f < MTM_SCALE_MIN_BITS || f > MTM_SCALE_MAX_BITS) {
            return "factor outside [2^-40, 2^40]";
        }
        return mt_mtm_act_rule(act, d->out_zp, d->act_min, d->act_max);
    }
    return "unknown op";
}
