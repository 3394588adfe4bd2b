// The shape and parameter rules of an LSTM layer (docs/format.md), over the views of its
// tensors mtm_loader.c fills (its op_rules hands the op here), as the GRU's.
#include "mt_kernels.h"
#include "mtm_read.h"

// LSTM's lookup tables (in1): sigmoid i, sigmoid f, tanh g, sigmoid o, tanh c (256 int8
// each), then dtanh (256 int32).
#define MTM_LSTM_LUT 1280u
#define MTM_LSTM_TABLES 2304u

static int mtm_lstm_shape(const mtm_tview_t *t, uint32_t r, int32_t d0, int32_t d1) {
    return t->rank == r && t->dim[0] == (uint32_t)d0 && (r < 2 || t->dim[1] == (uint32_t)d1);
}

static const char *mt_mtm_lstm_rules(const uint8_t *b, const int32_t *p, const mtm_tview_t *v) {
    const mtm_tview_t *x = &v[0], *tab = &v[1], *y = &v[2], *w = &v[3], *bias = &v[4], *mult = &v[5], *shift = &v[6];
    union {
        int32_t a[MT_LSTM_NPARAMS];
        mt_lstm_params_t s;
    } u;
    for (uint32_t k = 0; k < MT_LSTM_NPARAMS; ++k) {
        u.a[k] = p[k];
    }
    const mt_lstm_params_t *d = &u.s;
    const char *m = mt_lstm_check(d);
    if (m) {
        return m;
    }
    if (x->numel != (uint32_t)(d->t * d->d) || x->dim[x->rank - 1] != (uint32_t)d->d) {
        return "input numel != T * D or last dim != D";
    }
    if (y->numel != (uint32_t)(d->t * d->h) || y->dim[y->rank - 1] != (uint32_t)d->h) {
        return "output numel != T * H or last dim != H";
    }
    if (d->x_zp != x->zp || y->zp != 0) {
        return "x_zp differs from the input's zero point or the output's is not 0";
    }
    if (w->dtype != MTM_DT_INT8 || w->quant != MTM_Q_CHANNEL || !mtm_lstm_shape(w, 2, 4 * d->h, d->d + d->h)) {
        return "weight must be int8 PER_CHANNEL of shape (4H, D + H)";
    }
    if (bias->dtype != MTM_DT_INT32 || bias->quant != MTM_Q_BIAS || !mtm_lstm_shape(bias, 1, 4 * d->h, 0)) {
        return "bias must be int32 BIAS of shape (4H,)";
    }
    if (mult->dtype != MTM_DT_INT32 || mult->quant != MTM_Q_NONE || !mtm_lstm_shape(mult, 1, 8 * d->h, 0) ||
        shift->dtype != MTM_DT_INT32 || shift->quant != MTM_Q_NONE || !mtm_lstm_shape(shift, 1, 8 * d->h, 0)) {
        return "mult / shift must be int32 quant NONE of shape (8H,)";
    }
    if (tab->kind != MTM_K_CONST || tab->dtype != MTM_DT_INT8 || tab->quant != MTM_Q_NONE ||
        !mtm_lstm_shape(tab, 1, MTM_LSTM_TABLES, 0)) {
        return "tables (in1) must be a CONST int8 quant NONE tensor of shape (2304,)";
    }
    for (int32_t k = 0; k < 4 * d->h; ++k) {
        const int32_t bv = rdi32(b, bias->off + 4u * (uint32_t)k);
        if (bv > (1 << 30) || bv < -(1 << 30)) {
            return "|bias| > 2^30";
        }
    }
    for (int32_t k = 0; k < 8 * d->h; ++k) {
        const int32_t sv = rdi32(b, shift->off + 4u * (uint32_t)k);
        if (rdi32(b, mult->off + 4u * (uint32_t)k) < 0 || sv < -31 || sv > 31) {
            return "mult < 0 or shift outside [-31, 31]";
        }
    }
    for (uint32_t k = MTM_LSTM_LUT; k < MTM_LSTM_TABLES; k += 4) {
        if (rdi32(b, tab->off + k) < 0) {
            return "dtanh (tables[1280:]) < 0";
        }
    }
    return NULL;
}

const char *mt_mtm_rnn_rules(const uint8_t *b, uint32_t op, const int32_t *p, const mtm_tview_t *v) {
    return op == MTM_OP_LSTM ? mt_mtm_lstm_rules(b, p, v) : mt_mtm_gru_rules(b, p, v);
}
