// The shape and parameter rules of a GRU or an LSTM layer (docs/format.md), over the views of its
// tensors mtm_loader.c fills (its op_rules hands the op here). The two differ only in their gate
// rows, requantisations and lookup tables, so one function takes those from the op.
#include "mt_kernels.h"
#include "mtm_read.h"

static int shape2(const mtm_tview_t *t, uint32_t r, int32_t d0, int32_t d1) {
    return t->rank == r && t->dim[0] == (uint32_t)d0 && (r < 2 || t->dim[1] == (uint32_t)d1);
}

const char *mt_mtm_rnn_rules(const uint8_t *b, uint32_t op, const int32_t *p, const mtm_tview_t *v) {
    const mtm_tview_t *x = &v[0], *tab = &v[1], *y = &v[2], *w = &v[3], *bias = &v[4], *mult = &v[5], *shift = &v[6];
    // a build of one of the two ops (OPS=...) keeps only its own branches
    const int lstm = MTM_RUNS(MTM_OP_LSTM) && (!MTM_RUNS(MTM_OP_GRU) || op == MTM_OP_LSTM);
    // gate rows (r, z, n / i, f, g, o), requantisations, and the 256 B activation tables (sigmoid
    // and tanh each: three / five) before dtanh's 256 int32
    const int32_t g = lstm ? 4 : 3, n_rq = lstm ? 8 : 6;
    const uint32_t lut = lstm ? 1280u : 768u, n_tab = lut + 1024u;
    union {  // the two descriptors share their layout's first four fields: t, d, h, x_zp
        int32_t a[MT_GRU_NPARAMS > MT_LSTM_NPARAMS ? MT_GRU_NPARAMS : MT_LSTM_NPARAMS];
        mt_gru_params_t gru;
        mt_lstm_params_t lstm;
    } u;
    for (uint32_t k = 0; k < (lstm ? MT_LSTM_NPARAMS : MT_GRU_NPARAMS); ++k) {
        u.a[k] = p[k];
    }
    const mt_gru_params_t *d = &u.gru;
    const char *m = lstm ? mt_lstm_check(&u.lstm) : mt_gru_check(d);
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
    if (w->dtype != MTM_DT_INT8 || w->quant != MTM_Q_CHANNEL || !shape2(w, 2, g * d->h, d->d + d->h)) {
        return lstm ? "weight must be int8 PER_CHANNEL of shape (4H, D + H)"
                    : "weight must be int8 PER_CHANNEL of shape (3H, D + H)";
    }
    if (bias->dtype != MTM_DT_INT32 || bias->quant != MTM_Q_BIAS || !shape2(bias, 1, 4 * d->h, 0)) {
        return "bias must be int32 BIAS of shape (4H,)";
    }
    if (mult->dtype != MTM_DT_INT32 || mult->quant != MTM_Q_NONE || !shape2(mult, 1, n_rq * d->h, 0) ||
        shift->dtype != MTM_DT_INT32 || shift->quant != MTM_Q_NONE || !shape2(shift, 1, n_rq * d->h, 0)) {
        return lstm ? "mult / shift must be int32 quant NONE of shape (8H,)"
                    : "mult / shift must be int32 quant NONE of shape (6H,)";
    }
    if (tab->kind != MTM_K_CONST || tab->dtype != MTM_DT_INT8 || tab->quant != MTM_Q_NONE ||
        !shape2(tab, 1, (int32_t)n_tab, 0)) {
        return lstm ? "tables (in1) must be a CONST int8 quant NONE tensor of shape (2304,)"
                    : "tables (in1) must be a CONST int8 quant NONE tensor of shape (1792,)";
    }
    for (int32_t k = 0; k < 4 * d->h; ++k) {
        const int32_t bv = rdi32(b, bias->off + 4u * (uint32_t)k);
        if (bv > (1 << 30) || bv < -(1 << 30)) {
            return "|bias| > 2^30";
        }
    }
    for (int32_t k = 0; k < n_rq * d->h; ++k) {
        const int32_t sv = rdi32(b, shift->off + 4u * (uint32_t)k);
        if (rdi32(b, mult->off + 4u * (uint32_t)k) < 0 || sv < -31 || sv > 31) {
            return "mult < 0 or shift outside [-31, 31]";
        }
    }
    for (uint32_t k = lut; k < n_tab; k += 4) {
        if (rdi32(b, tab->off + k) < 0) {
            return lstm ? "dtanh (tables[1280:]) < 0" : "dtanh (tables[768:]) < 0";
        }
    }
    return NULL;
}
