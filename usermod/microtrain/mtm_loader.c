// `.mtm` validator: see mtm_loader.h and docs/format.md (the accessors are in mtm_access.c).
// The checks follow the "Validation" section step by step; every read is of a range that an earlier
// check proved to lie inside the buffer. Where the Python reader (tools/microtrain_tools/mtm.py) is more
// precise than the page (SIGNAL_1D shape, PER_TENSOR only on activations, -0.0 == 0 for unused scales)
// we follow the reader: both must accept and reject the same files.
#include "mtm_loader.h"
#include "mt_kernels.h"
#include "mtm_read.h"

// Runtime limits the validator enforces so that every accepted file can run inference and a training step.
#define MTM_SET_WORDS (MTM_MAX_TENSORS >> 5)

// ---------------------------------------- little helpers

// a * b without overflow; 0 if the product does not fit in 32 bits.
static int mul_ok(uint32_t a, uint32_t b, uint32_t *r) {
    if (a > 0xFFFFu && b > 0xFFFFu) {
        return 0;
    }
    if (b > 0xFFFFu) {
        const uint32_t t = a;
        a = b;
        b = t;
    }
    const uint32_t hi = (a >> 16) * b;  // b < 2^16: fits
    if (hi > 0xFFFFu) {
        return 0;
    }
    const uint32_t lo = (a & 0xFFFFu) * b;
    const uint32_t s = (hi << 16) + lo;
    if (s < lo) {
        return 0;
    }
    *r = s;
    return 1;
}

// IEEE binary32 bits of a scale in [2^-40, 2^40] (positive floats order as their bits):
// products of two scales stay normal and finite in float32, with room for |bias| 2^30.
static int f32_scale_ok(uint32_t bits) {
    return bits >= MTM_SCALE_MIN_BITS && bits <= MTM_SCALE_MAX_BITS;
}

// IEEE binary32 bits: finite (not inf or NaN).
static int f32_finite(uint32_t bits) {
    return ((bits >> 23) & 0xFFu) != 0xFFu;
}

static int all_zero(const uint8_t *b, uint32_t from, uint32_t to) {
    for (uint32_t k = from; k < to; ++k) {
        if (b[k]) {
            return 0;
        }
    }
    return 1;
}

static void set_clear(uint32_t *s) {
    for (uint32_t k = 0; k < MTM_SET_WORDS; ++k) {
        s[k] = 0;
    }
}
static int set_has(const uint32_t *s, uint32_t i) {
    return (int)((s[i >> 5] >> (i & 31u)) & 1u);
}
static void set_add(uint32_t *s, uint32_t i) {
    s[i >> 5] |= (uint32_t)1 << (i & 31u);
}

// Nibble table of the reflected polynomial 0xEDB88320 (const: no init code).
static const uint32_t mtm_crc_tab[16] = {
    0x00000000u, 0x1DB71064u, 0x3B6E20C8u, 0x26D930ACu, 0x76DC4190u, 0x6B6B51F4u, 0x4DB26158u, 0x5005713Cu,
    0xEDB88320u, 0xF00F9344u, 0xD6D6A3E8u, 0xCB61B38Cu, 0x9B64C2B0u, 0x86D3D2D4u, 0xA00AE278u, 0xBDBDF21Cu,
};

static uint32_t mt_mtm_crc32(const uint8_t *buf, uint32_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (uint32_t k = 0; k < n; ++k) {
        c ^= buf[k];
        c = (c >> 4) ^ mtm_crc_tab[c & 15u];
        c = (c >> 4) ^ mtm_crc_tab[c & 15u];
    }
    return c ^ 0xFFFFFFFFu;
}

// Strict UTF-8 (as Python's decoder): no overlongs, surrogates or > U+10FFFF.
static int utf8_ok(const uint8_t *s, uint32_t n) {
    uint32_t k = 0;
    while (k < n) {
        const uint32_t c = s[k];
        uint32_t need, lo = 0x80u, hi = 0xBFu;
        if (c < 0x80u) {
            ++k;
            continue;
        } else if (c >= 0xC2u && c <= 0xDFu) {
            need = 1;
        } else if (c >= 0xE0u && c <= 0xEFu) {
            need = 2;
            if (c == 0xE0u) {
                lo = 0xA0u;
            } else if (c == 0xEDu) {
                hi = 0x9Fu;
            }
        } else if (c >= 0xF0u && c <= 0xF4u) {
            need = 3;
            if (c == 0xF0u) {
                lo = 0x90u;
            } else if (c == 0xF4u) {
                hi = 0x8Fu;
            }
        } else {
            return 0;
        }
        if (need > n - k - 1) {
            return 0;
        }
        if (s[k + 1] < lo || s[k + 1] > hi) {
            return 0;
        }
        for (uint32_t t = 2; t <= need; ++t) {
            if (s[k + t] < 0x80u || s[k + t] > 0xBFu) {
                return 0;
            }
        }
        k += need + 1;
    }
    return 1;
}

// ---------------------------------------- validation context

typedef struct {
    const uint8_t *b;
    uint32_t len, flags, n_t, n_l, lt_off, s_off, s_len, d_off, d_len, input, output;
} mtm_ctx_t;

// tensor entry field offsets
#define T_ENT(c, i) (MTM_HEADER_SIZE + MTM_TENSOR_ENTRY * (i))
#define T_DTYPE(c, i) rd8((c)->b, T_ENT(c, i) + MTM_T_DTYPE)
#define T_RANK(c, i) rd8((c)->b, T_ENT(c, i) + MTM_T_RANK)
#define T_KIND(c, i) rd8((c)->b, T_ENT(c, i) + MTM_T_KIND)
#define T_QUANT(c, i) rd8((c)->b, T_ENT(c, i) + MTM_T_QUANT)
#define T_DIM(c, i, d) rd32((c)->b, T_ENT(c, i) + MTM_T_SHAPE + 4 * (d))
#define T_OFF(c, i) rd32((c)->b, T_ENT(c, i) + MTM_T_DATA_OFF)
#define T_LEN(c, i) rd32((c)->b, T_ENT(c, i) + MTM_T_DATA_LEN)
#define T_SCALE(c, i) rd32((c)->b, T_ENT(c, i) + MTM_T_SCALE)
#define T_ZP(c, i) rdi32((c)->b, T_ENT(c, i) + MTM_T_ZERO_POINT)
#define T_QS(c, i) rd32((c)->b, T_ENT(c, i) + MTM_T_QSCALES)

// Product of a (validated) tensor's dims; 0 if it does not fit in 32 bits.
static int numel(const mtm_ctx_t *c, uint32_t i, uint32_t *n) {
    uint32_t r = 1;
    const uint32_t rank = T_RANK(c, i);
    for (uint32_t d = 0; d < rank; ++d) {
        if (!mul_ok(r, T_DIM(c, i, d), &r)) {
            return 0;
        }
    }
    *n = r;
    return 1;
}

// numel == v for an int32 v.
static int numel_is(const mtm_ctx_t *c, uint32_t i, int32_t v) {
    uint32_t n;
    return numel(c, i, &n) && v >= 1 && n == (uint32_t)v;
}

// Tensor i has exactly this shape (rank r, dims as int32 >= 1).
static int shape_is(const mtm_ctx_t *c, uint32_t i, uint32_t r, int32_t d0, int32_t d1, int32_t d2, int32_t d3) {
    const int32_t d[4] = { d0, d1, d2, d3 };
    if (T_RANK(c, i) != r) {
        return 0;
    }
    for (uint32_t k = 0; k < r; ++k) {
        if (d[k] < 1 || T_DIM(c, i, k) != (uint32_t)d[k]) {
            return 0;
        }
    }
    return 1;
}

static int same_shape(const mtm_ctx_t *c, uint32_t i, uint32_t j) {
    if (T_RANK(c, i) != T_RANK(c, j)) {
        return 0;
    }
    for (uint32_t k = 0; k < 4; ++k) {
        if (T_DIM(c, i, k) != T_DIM(c, j, k)) {
            return 0;
        }
    }
    return 1;
}

static int same_quant(const mtm_ctx_t *c, uint32_t i, uint32_t j) {
    return T_SCALE(c, i) == T_SCALE(c, j) && T_ZP(c, i) == T_ZP(c, j);
}

// A string (off, len) of the pool per docs/format.md "String pool".
static int string_ok(const mtm_ctx_t *c, uint32_t off, uint32_t n) {
    if (off >= c->s_len || n >= c->s_len - off) {
        return 0;
    }
    const uint8_t *s = c->b + c->s_off + off;
    if (s[n] != 0) {
        return 0;
    }
    for (uint32_t k = 0; k < n; ++k) {
        if (s[k] == 0) {
            return 0;
        }
    }
    return utf8_ok(s, n);
}

#define FAIL_AT(w, i, msg) \
    do {                   \
        *where = (w);      \
        *index = (i);      \
        return (msg);      \
    } while (0)
#define FAIL(msg) FAIL_AT(MTM_WHERE_FILE, -1, msg)
#define FAIL_T(msg) FAIL_AT(MTM_WHERE_TENSOR, (int32_t)i, msg)
#define FAIL_L(msg) FAIL_AT(MTM_WHERE_LAYER, (int32_t)j, msg)

// ---------------------------------------- step 3: tensors

static const char *check_tensors(const mtm_ctx_t *c, int32_t *where, int32_t *index) {
    const uint32_t d_end = c->d_off + c->d_len;
    uint32_t prev_end = c->d_off;
    uint32_t i;
    for (i = 0; i < c->n_t; ++i) {
        const uint32_t e = T_ENT(c, i);
        const uint32_t dt = T_DTYPE(c, i), rank = T_RANK(c, i), kind = T_KIND(c, i), q = T_QUANT(c, i);
        const uint32_t tflags = rd32(c->b, e + MTM_T_FLAGS);
        if (dt < MTM_DT_INT8 || dt > MTM_DT_UINT8) {
            FAIL_T("unknown tensor dtype");
        }
        if (kind > MTM_K_STATE) {
            FAIL_T("unknown tensor kind");
        }
        if (q > MTM_Q_BIAS) {
            FAIL_T("unknown tensor quant");
        }
        if (rank < 1 || rank > 4) {
            FAIL_T("tensor rank outside 1..4");
        }
        for (uint32_t d = 0; d < 4; ++d) {
            const uint32_t v = T_DIM(c, i, d);
            if (d < rank ? (v < 1 || v > MTM_MAX_DIM) : v != 0) {
                FAIL_T("tensor shape: dims must be 1..65535 below rank, 0 beyond");
            }
        }
        if ((tflags & ~MTM_TFLAG_SIGNAL_1D) != 0 || rd32(c->b, e + MTM_T_RESERVED) != 0) {
            FAIL_T("unknown tensor flags or non-zero reserved field");
        }
        if ((tflags & MTM_TFLAG_SIGNAL_1D) && (rank != 3 || T_DIM(c, i, 0) != 1)) {
            FAIL_T("SIGNAL_1D tensor must have shape (1, L, C)");
        }
        const uint32_t off = T_OFF(c, i), ln = T_LEN(c, i);
        if (kind == MTM_K_ACT) {
            if (dt != MTM_DT_INT8) {
                FAIL_T("activation must be int8");
            }
            if (off != 0 || ln != 0) {
                FAIL_T("activation with data offset/length");
            }
            if (q != MTM_Q_TENSOR) {
                FAIL_T("activation must be PER_TENSOR quantised");
            }
            uint32_t n_act;
            if (!numel(c, i, &n_act) || n_act > MTM_MAX_ELEMS) {
                FAIL_T("activation larger than 2^26 values");
            }
        } else {
            if (q == MTM_Q_TENSOR) {
                FAIL_T("PER_TENSOR quant is for activations only");
            }
            if (kind == MTM_K_STATE) {
                if (!(c->flags & MTM_FLAG_HAS_STATE)) {
                    FAIL_T("STATE tensor in a file without HAS_STATE");
                }
                if (dt != MTM_DT_F32 || q != MTM_Q_NONE) {
                    FAIL_T("STATE tensor must be float32, quant NONE");
                }
            }
            uint32_t need;
            if (!numel(c, i, &need) || !mul_ok(need, (dt == MTM_DT_INT8 || dt == MTM_DT_UINT8) ? 1u : 4u, &need) ||
                ln != need) {
                FAIL_T("data_len != numel * itemsize");
            }
            if (off & 7u) {
                FAIL_T("data_off not 8-aligned");
            }
            if (off < prev_end || off > d_end || ln > d_end - off) {
                FAIL_T("data out of the blob, overlapping or out of order");
            }
            if (!all_zero(c->b, prev_end, off)) {
                FAIL_T("non-zero bytes in the data blob gap before this tensor");
            }
            prev_end = off + ln;
            if (kind == MTM_K_STATE) {
                for (uint32_t k = 0; k < ln; k += 4) {
                    if (!f32_finite(rd32(c->b, off + k))) {
                        FAIL_T("STATE value not finite");
                    }
                }
            }
        }
        const uint32_t sc = T_SCALE(c, i);
        const int32_t zp = T_ZP(c, i);
        const uint32_t qs = T_QS(c, i);
        if (q == MTM_Q_TENSOR) {
            if (!f32_scale_ok(sc)) {
                FAIL_T("PER_TENSOR scale outside 2^-40..2^40");
            }
            if (zp < -128 || zp > 127) {
                FAIL_T("zero point outside [-128, 127]");
            }
            if (qs != MTM_NONE) {
                FAIL_T("PER_TENSOR tensor with qscales");
            }
        } else if ((sc & 0x7FFFFFFFu) != 0 || zp != 0) {
            FAIL_T("scale and zero point must be 0 unless PER_TENSOR");
        }
        if (q == MTM_Q_CHANNEL) {
            if (dt != MTM_DT_INT8 || kind != MTM_K_CONST) {
                FAIL_T("PER_CHANNEL tensor must be an int8 CONST");
            }
            if (qs >= c->n_t) {
                FAIL_T("qscales index out of range");
            }
        } else if (q == MTM_Q_BIAS) {
            if (dt != MTM_DT_INT32 || kind != MTM_K_CONST) {
                FAIL_T("BIAS tensor must be an int32 CONST");
            }
            if (qs != MTM_NONE) {
                FAIL_T("BIAS tensor with qscales");
            }
        } else if (q == MTM_Q_NONE && qs != MTM_NONE) {
            FAIL_T("quant NONE tensor with qscales");
        }
    }
    // Every entry is now in range: cross-tensor rules.
    for (i = 0; i < c->n_t; ++i) {
        if (T_QUANT(c, i) != MTM_Q_CHANNEL) {
            continue;
        }
        const uint32_t qt = T_QS(c, i);
        if (T_DTYPE(c, qt) != MTM_DT_F32 || T_KIND(c, qt) != MTM_K_CONST || T_QUANT(c, qt) != MTM_Q_NONE ||
            T_RANK(c, qt) != 1 || T_DIM(c, qt, 0) != T_DIM(c, i, 0)) {
            FAIL_T("qscales tensor must be a float32 CONST quant NONE of shape (shape[0],)");
        }
        const uint32_t off = T_OFF(c, qt), n = T_DIM(c, qt, 0);
        for (uint32_t k = 0; k < n; ++k) {
            if (!f32_scale_ok(rd32(c->b, off + 4 * k))) {
                FAIL_T("weight scale (qscales value) outside 2^-40..2^40");
            }
        }
    }
    if (!all_zero(c->b, prev_end, d_end)) {
        i = c->n_t - 1;
        FAIL_T("non-zero bytes in the data blob after the last tensor");
    }
    return NULL;
}

// ---------------------------------------- step 4: layers

// Layer entry field offsets.
#define L_ENT(c, j) ((c)->lt_off + MTM_LAYER_ENTRY * (j))
#define L_U32(c, j, off) rd32((c)->b, L_ENT(c, j) + (off))
#define L_PARAM(c, j, k) rdi32((c)->b, L_ENT(c, j) + MTM_PARAMS_OFF + 4 * (k))

// params per op, by op code (MATMUL's 12: its descriptor and the factor; 13 with heads before the factor)
static const uint8_t mtm_n_params[18] = { 0,
                                          MT_CONV2D_NPARAMS,
                                          MT_LINEAR_NPARAMS,
                                          2,
                                          3,
                                          MT_POOL_NPARAMS,
                                          MT_POOL_NPARAMS,
                                          2,
                                          MT_ADD_NPARAMS,
                                          4,
                                          MT_CONCAT_NPARAMS,
                                          MT_UPSAMPLE_NPARAMS,
                                          MT_MUL_NPARAMS,
                                          MT_LAYERNORM_NPARAMS,
                                          MT_SOFTMAX_NPARAMS,
                                          12,
                                          MT_GRU_NPARAMS,
                                          MT_LSTM_NPARAMS };

// CONCAT shapes: the last dims of x, x2, y are c1, c2, c1 + c2 and each holds
// hw positions of them (numel = hw * its channels; the kernel reads flat
// NHWC, so a (1, 1, c) pooled map joins (n,) features).
static const char *concat_shapes(const mtm_ctx_t *c, uint32_t x, uint32_t x2, uint32_t y, const int32_t *p) {
    if (T_DIM(c, x, T_RANK(c, x) - 1) != (uint32_t)p[1] || T_DIM(c, x2, T_RANK(c, x2) - 1) != (uint32_t)p[2] ||
        T_DIM(c, y, T_RANK(c, y) - 1) != (uint32_t)p[1] + (uint32_t)p[2]) {
        return "channel (last) dims differ from c1, c2, c1 + c2";
    }
    // the descriptor check bounded hw * (c1 + c2) <= 2^26
    if (!numel_is(c, x, p[0] * p[1]) || !numel_is(c, x2, p[0] * p[2]) || !numel_is(c, y, p[0] * (p[1] + p[2]))) {
        return "numel != hw * channels";
    }
    return NULL;
}

const char *mt_mtm_act_rule(uint32_t act, int32_t out_zp, int32_t a_min, int32_t a_max) {
    if (a_min < -128 || a_max > 127 || a_min > a_max) {
        return "need -128 <= act_min <= act_max <= 127";
    }
    if (act == 0 && (a_min != -128 || a_max != 127)) {
        return "act none needs act_min -128, act_max 127";
    }
    if (act == 1 && (a_min != out_zp || a_max != 127)) {
        return "act relu needs act_min == out_zp, act_max 127";
    }
    if (act == 2 && a_min != out_zp) {
        return "act relu6 needs act_min == out_zp";
    }
    return NULL;
}

// Values of an int32 CONST tensor (bias / mult / shift), n of them.
static const char *qparams_ok(const mtm_ctx_t *c, uint32_t bias, uint32_t mult, uint32_t shift, uint32_t n) {
    const uint32_t bo = T_OFF(c, bias), mo = T_OFF(c, mult), so = T_OFF(c, shift);
    for (uint32_t k = 0; k < n; ++k) {
        const int32_t b = rdi32(c->b, bo + 4 * k), m = rdi32(c->b, mo + 4 * k), s = rdi32(c->b, so + 4 * k);
        if (b > (1 << 30) || b < -(1 << 30)) {
            return "|bias| > 2^30";
        }
        if (m < 0) {
            return "negative multiplier";
        }
        if (s < -31 || s > 31) {
            return "shift outside [-31, 31]";
        }
    }
    return NULL;
}

// Weighted ops (CONV2D / LINEAR): tensors of the slots given the weight shape.
static const char *weighted_ok(const mtm_ctx_t *c, uint32_t j, uint32_t wr, int32_t w0, int32_t w1, int32_t w2,
                               int32_t w3) {
    const uint32_t w = L_U32(c, j, MTM_L_WEIGHT), b = L_U32(c, j, MTM_L_BIAS), mu = L_U32(c, j, MTM_L_MULT),
                   sh = L_U32(c, j, MTM_L_SHIFT);
    const int32_t oc = w0;
    if (!shape_is(c, w, wr, w0, w1, w2, w3)) {
        return "weight shape does not match the descriptor";
    }
    if (T_DTYPE(c, w) != MTM_DT_INT8 || T_QUANT(c, w) != MTM_Q_CHANNEL) {
        return "weight must be int8 PER_CHANNEL";
    }
    if (T_DTYPE(c, b) != MTM_DT_INT32 || T_QUANT(c, b) != MTM_Q_BIAS || !shape_is(c, b, 1, oc, 0, 0, 0)) {
        return "bias must be int32 BIAS of shape (out_c,)";
    }
    if (T_DTYPE(c, mu) != MTM_DT_INT32 || T_QUANT(c, mu) != MTM_Q_NONE || !shape_is(c, mu, 1, oc, 0, 0, 0)) {
        return "mult must be int32 quant NONE of shape (out_c,)";
    }
    if (T_DTYPE(c, sh) != MTM_DT_INT32 || T_QUANT(c, sh) != MTM_Q_NONE || !shape_is(c, sh, 1, oc, 0, 0, 0)) {
        return "shift must be int32 quant NONE of shape (out_c,)";
    }
    const char *m = qparams_ok(c, b, mu, sh, (uint32_t)oc);
    if (m) {
        return m;
    }
    for (uint32_t s = 0; s < 6; ++s) {
        const uint32_t st = l_state(c->b, L_ENT(c, j), s);
        if (st == MTM_NONE) {
            continue;
        }
        const int ok = (s & 1u) ? shape_is(c, st, 1, oc, 0, 0, 0) : shape_is(c, st, wr, w0, w1, w2, w3);
        if (T_DTYPE(c, st) != MTM_DT_F32 || !ok) {
            return "state tensor must be float32 with the shape of its weight / bias";
        }
    }
    return NULL;
}

// The op's shape and parameter rules (after the index / kind rules passed).
static const char *op_rules(const mtm_ctx_t *c, uint32_t j, uint32_t op, uint32_t act) {
    // The params block read into the kernels' descriptor structs (a union:
    // no struct copies, which could turn into memcpy calls in a natmod).
    union {
        int32_t a[MTM_N_PARAMS_MAX];
        mt_conv2d_params_t conv;
        mt_conv2d_dil_params_t dconv;
        mt_linear_params_t lin;
        mt_pool_params_t pool;
        mt_add_params_t add;
        mt_concat_params_t cat;
        mt_upsample_params_t up;
    } u;
    for (uint32_t k = 0; k < MTM_N_PARAMS_MAX; ++k) {
        u.a[k] = L_PARAM(c, j, k);
    }
    const int32_t *p = u.a;
    const uint32_t x = L_U32(c, j, MTM_L_IN0), x2 = L_U32(c, j, MTM_L_IN1), y = L_U32(c, j, MTM_L_OUT);
    const char *m;
    // the sequence / attention ops: mtm_rules_seq.c; GRU, LSTM (the last): mt_mtm_rnn_rules
    if (op >= MTM_OP_MUL && (MTM_RUNS_SEQ | MTM_RUNS_RNN)) {
        mtm_tview_t v[7];
        const uint32_t ts[7] = { x,
                                 op == MTM_OP_MUL || op == MTM_OP_MATMUL || op >= MTM_OP_GRU ? x2 : x,
                                 y,
                                 L_U32(c, j, MTM_L_WEIGHT),
                                 L_U32(c, j, MTM_L_BIAS),
                                 L_U32(c, j, MTM_L_MULT),
                                 L_U32(c, j, MTM_L_SHIFT) };
        for (uint32_t k = 0; k < (op >= MTM_OP_GRU ? 7u : 3u); ++k) {
            v[k].rank = T_RANK(c, ts[k]);
            for (uint32_t d = 0; d < 4; ++d) {
                v[k].dim[d] = T_DIM(c, ts[k], d);
            }
            uint32_t n = 0;
            v[k].numel = numel(c, ts[k], &n) ? n : 0;
            v[k].scale = T_SCALE(c, ts[k]);
            v[k].zp = T_ZP(c, ts[k]);
            v[k].dtype = T_DTYPE(c, ts[k]);
            v[k].kind = T_KIND(c, ts[k]);
            v[k].quant = T_QUANT(c, ts[k]);
            v[k].off = T_OFF(c, ts[k]);
        }
        if (op >= MTM_OP_GRU) {
            return MTM_RUNS_RNN ? mt_mtm_rnn_rules(c->b, op, p, v) : NULL;
        }
        return MTM_RUNS_SEQ ? mt_mtm_seq_rules(op, act, p, rd8(c->b, L_ENT(c, j) + MTM_L_N_PARAMS), &v[0], &v[1], &v[2])
                            : NULL;
    }
    if (op == MTM_OP_LUT && MTM_RUNS(MTM_OP_LUT)) {  // params: n, in_zp, out_zp, d_shift; table, dtable
        const uint32_t t = L_U32(c, j, MTM_L_WEIGHT), d = L_U32(c, j, MTM_L_BIAS);
        if (!same_shape(c, x, y)) {
            return "input and output shapes differ";
        }
        if (!numel_is(c, x, p[0])) {
            return "n != numel";
        }
        if (p[1] != T_ZP(c, x) || p[2] != T_ZP(c, y)) {
            return "zero points differ from the tensors'";
        }
        if (p[3] < 0 || p[3] > 24) {
            return "d_shift outside [0, 24]";
        }
        if (T_DTYPE(c, t) != MTM_DT_INT8 || T_QUANT(c, t) != MTM_Q_NONE || !shape_is(c, t, 1, 256, 0, 0, 0)) {
            return "table must be int8 quant NONE of shape (256,)";
        }
        if (T_DTYPE(c, d) != MTM_DT_INT32 || T_QUANT(c, d) != MTM_Q_NONE || !shape_is(c, d, 1, 256, 0, 0, 0)) {
            return "dtable must be int32 quant NONE of shape (256,)";
        }
        const uint32_t o = T_OFF(c, d);
        for (uint32_t k = 0; k < 256; ++k) {
            const int32_t v = rdi32(c->b, o + 4 * k);
            if (v > MT_LUT_DMAX || v < -MT_LUT_DMAX) {
                return "|dtable| > 2^24 - 1";
            }
        }
        return NULL;
    }
    if (op == MTM_OP_CONV2D) {
        const mt_conv2d_params_t *d = &u.conv;
        // 19 params: dil_h, dil_w follow (a dilated conv, format 1.2)
        if ((m = rd8(c->b, L_ENT(c, j) + MTM_L_N_PARAMS) == MT_CONV2D_DIL_NPARAMS ? mt_conv2d_dil_check(&u.dconv)
                                                                                  : mt_conv2d_check(d)) != NULL) {
            return m;
        }
        if (!shape_is(c, x, 3, d->in_h, d->in_w, d->in_c, 0)) {
            return "input shape != (in_h, in_w, in_c)";
        }
        if (!shape_is(c, y, 3, d->out_h, d->out_w, d->out_c, 0)) {
            return "output shape != (out_h, out_w, out_c)";
        }
        const int32_t cpg = (int32_t)mt_udiv_u32((uint32_t)d->in_c, (uint32_t)d->groups);
        const uint32_t opg = mt_udiv_u32((uint32_t)d->out_c, (uint32_t)d->groups);
        uint32_t terms;  // grad-input sum terms; k_h * k_w <= 32768 (conv check)
        if (!mul_ok((uint32_t)d->k_h * (uint32_t)d->k_w, opg, &terms) || terms > MTM_MAX_GRAD_TERMS) {
            return "k_h * k_w * out_c / groups must be <= 131071 (grad-input bound)";
        }
        if ((m = weighted_ok(c, j, 4, d->out_c, d->k_h, d->k_w, cpg)) != NULL) {
            return m;
        }
        if (d->in_zp != T_ZP(c, x) || d->out_zp != T_ZP(c, y)) {
            return "in_zp / out_zp differ from the tensors' zero points";
        }
        return mt_mtm_act_rule(act, d->out_zp, d->act_min, d->act_max);
    }
    if (op == MTM_OP_LINEAR) {
        const mt_linear_params_t *d = &u.lin;
        if ((m = mt_linear_check(d)) != NULL) {
            return m;
        }
        if (!numel_is(c, x, d->in_n)) {
            return "input numel != in_n";
        }
        if (!shape_is(c, y, 1, d->out_n, 0, 0, 0)) {
            return "output shape != (out_n,)";
        }
        if ((m = weighted_ok(c, j, 2, d->out_n, d->in_n, 0, 0)) != NULL) {
            return m;
        }
        if (d->in_zp != T_ZP(c, x) || d->out_zp != T_ZP(c, y)) {
            return "in_zp / out_zp differ from the tensors' zero points";
        }
        return mt_mtm_act_rule(act, d->out_zp, d->act_min, d->act_max);
    }
    if (op == MTM_OP_ADD) {
        const mt_add_params_t *d = &u.add;
        if (!same_shape(c, x, x2) || !same_shape(c, x, y)) {
            return "inputs and output shapes differ";
        }
        if (!numel_is(c, y, d->n)) {
            return "n != numel";
        }
        if (d->in1_zp != T_ZP(c, x) || d->in2_zp != T_ZP(c, x2) || d->out_zp != T_ZP(c, y)) {
            return "zero points differ from the tensors'";
        }
        if ((m = mt_add_check(d)) != NULL) {
            return m;
        }
        return mt_mtm_act_rule(act, d->out_zp, d->act_min, d->act_max);
    }
    if (op == MTM_OP_CONCAT && MTM_RUNS(MTM_OP_CONCAT)) {
        const mt_concat_params_t *d = &u.cat;
        if ((m = mt_concat_check(d)) != NULL) {
            return m;
        }
        if ((m = concat_shapes(c, x, x2, y, p)) != NULL) {
            return m;
        }
        if (d->in1_zp != T_ZP(c, x) || d->in2_zp != T_ZP(c, x2) || d->out_zp != T_ZP(c, y)) {
            return "zero points differ from the tensors'";
        }
        return NULL;
    }
    if (op == MTM_OP_UPSAMPLE && MTM_RUNS(MTM_OP_UPSAMPLE)) {
        const mt_upsample_params_t *d = &u.up;
        if ((m = mt_upsample_check(d)) != NULL) {
            return m;
        }
        if (!shape_is(c, x, 3, d->in_h, d->in_w, d->c, 0)) {
            return "input shape != (in_h, in_w, c)";
        }
        if (!shape_is(c, y, 3, d->out_h, d->out_w, d->c, 0)) {
            return "output shape != (out_h, out_w, c)";
        }
        if (d->zp != T_ZP(c, x)) {
            return "zp != input zero point";
        }
    } else if (op == MTM_OP_RELU || op == MTM_OP_RELU6) {
        if (!same_shape(c, x, y)) {
            return "input and output shapes differ";
        }
        if (!numel_is(c, x, p[0])) {
            return "n != numel";
        }
        if (p[1] != T_ZP(c, x)) {
            return "zp != input zero point";
        }
        if (op == MTM_OP_RELU6 && (p[2] < p[1] || p[2] > 127)) {
            return "need zp <= q6 <= 127";
        }
    } else if (op == MTM_OP_GAP) {
        if (p[0] < 1 || p[1] < 1) {
            return "hw and c must be >= 1";
        }
        if ((uint32_t)p[0] > MTM_MAX_GAP_HW) {
            return "hw must be <= 65536 (global_avgpool positions)";
        }
        if (T_RANK(c, x) != 3 || T_DIM(c, x, 0) * T_DIM(c, x, 1) != (uint32_t)p[0] ||
            T_DIM(c, x, 2) != (uint32_t)p[1]) {
            return "input shape does not match hw, c";
        }
        if (!shape_is(c, y, 3, 1, 1, p[1], 0)) {
            return "output shape != (1, 1, c)";
        }
    } else {  // MAXPOOL / AVGPOOL
        const mt_pool_params_t *d = &u.pool;
        if ((m = mt_pool_check(d)) != NULL) {
            return m;
        }
        if (!shape_is(c, x, 3, d->in_h, d->in_w, d->c, 0)) {
            return "input shape != (in_h, in_w, c)";
        }
        if (!shape_is(c, y, 3, d->out_h, d->out_w, d->c, 0)) {
            return "output shape != (out_h, out_w, c)";
        }
    }
    if (!same_quant(c, x, y)) {
        return "input and output quantisation differ";
    }
    return NULL;
}

static const char *check_layers(const mtm_ctx_t *c, uint32_t *produced, uint32_t *consumed, int32_t *where,
                                int32_t *index) {
    uint32_t j = 0;
    const int has_state = (c->flags & MTM_FLAG_HAS_STATE) != 0;
    if (T_KIND(c, c->input) != MTM_K_ACT) {
        FAIL("model input is not an activation");
    }
    set_add(produced, c->input);
    for (j = 0; j < c->n_l; ++j) {
        const uint32_t e = L_ENT(c, j);
        const uint32_t op = rd8(c->b, e + MTM_L_OP), act = rd8(c->b, e + MTM_L_ACT);
        const uint32_t n_p = rd8(c->b, e + MTM_L_N_PARAMS), n_in = rd8(c->b, e + MTM_L_N_INPUTS);
        const uint32_t lflags = L_U32(c, j, MTM_L_FLAGS);
        const uint32_t noff = L_U32(c, j, MTM_L_NAME_OFF), nlen = L_U32(c, j, MTM_L_NAME_LEN);
        const uint32_t foff = L_U32(c, j, MTM_L_FUSED_OFF), flen = L_U32(c, j, MTM_L_FUSED_LEN);
        if (op < MTM_OP_CONV2D || op > MTM_OP_LAST) {
            FAIL_L("unknown op");
        }
        if (!MTM_RUNS(op)) {
            FAIL_AT(MTM_WHERE_LEFT_OUT, (int32_t)j, "layer op not in this build");
        }
        if (op == MTM_OP_LUT && rd16(c->b, MTM_H_VERSION_MINOR) < 1) {
            FAIL_L("LUT layer in a version 1.0 file (needs 1.1)");
        }
        if (op >= MTM_OP_CONCAT && rd16(c->b, MTM_H_VERSION_MINOR) < 2) {
            FAIL_L("CONCAT / UPSAMPLE layer in a version 1.0 / 1.1 file (needs 1.2)");
        }
        if (op >= MTM_OP_MUL && rd16(c->b, MTM_H_VERSION_MINOR) < (op >= MTM_OP_GRU ? 5u : 4u)) {
            FAIL_L(op >= MTM_OP_GRU ? "GRU / LSTM layer in a file before version 1.5"
                                    : "MUL / LAYERNORM / SOFTMAX / MATMUL layer in a file before version 1.4");
        }
        const int two_in = op == MTM_OP_ADD || op == MTM_OP_CONCAT || op == MTM_OP_MUL || op == MTM_OP_MATMUL;
        if (n_in != (two_in ? 2u : 1u)) {
            FAIL_L("n_inputs does not match the op");
        }
        const int dilated = op == MTM_OP_CONV2D && n_p == MT_CONV2D_DIL_NPARAMS;
        const int multi_head = MTM_RUNS(MTM_OP_MATMUL) && op == MTM_OP_MATMUL && n_p == MT_MATMUL_NPARAMS + 1;
        if (n_p != mtm_n_params[op] && !dilated && !multi_head) {
            FAIL_L("n_params does not match the op");
        }
        if (multi_head && (rd16(c->b, MTM_H_VERSION_MINOR) < 5 || L_PARAM(c, j, MT_MATMUL_NPARAMS - 1) < 2)) {
            FAIL_L("13-param MATMUL needs version 1.5 and heads above 1");
        }
        if (dilated && (rd16(c->b, MTM_H_VERSION_MINOR) < 2 ||
                        (L_PARAM(c, j, MT_CONV2D_NPARAMS) == 1 && L_PARAM(c, j, MT_CONV2D_NPARAMS + 1) == 1))) {
            FAIL_L("19-param CONV2D needs version 1.2 and a dilation above 1");
        }
        for (uint32_t k = n_p; k < MTM_N_PARAMS_MAX; ++k) {
            if (L_PARAM(c, j, k) != 0) {
                FAIL_L("unused params not zero");
            }
        }
        const int weighted = op == MTM_OP_CONV2D || op == MTM_OP_LINEAR;
        if (act > 2) {
            FAIL_L("unknown act");
        }
        if (act != 0 && !weighted && op != MTM_OP_ADD) {
            FAIL_L("fused activation on an op without one");
        }
        if ((lflags & ~MTM_LFLAG_TRAINED) != 0 ||
            (rd16(c->b, MTM_H_VERSION_MINOR) < 3 && L_U32(c, j, MTM_L_STATE4) != 0)) {
            FAIL_L("unknown layer flags or non-zero reserved field");
        }
        if ((lflags & MTM_LFLAG_TRAINED) && !(c->flags & MTM_FLAG_TRAINED)) {
            FAIL_L("TRAINED layer in a file without TRAINED");
        }
        if (nlen < 1 || nlen > MTM_MAX_NAME || !string_ok(c, noff, nlen)) {
            FAIL_L("bad layer name (1..63 bytes of UTF-8, NUL-terminated in the pool)");
        }
        for (uint32_t k = 0; k < j; ++k) {
            if (L_U32(c, k, MTM_L_NAME_LEN) == nlen) {
                const uint8_t *a = c->b + c->s_off + noff, *b2 = c->b + c->s_off + L_U32(c, k, MTM_L_NAME_OFF);
                uint32_t t = 0;
                while (t < nlen && a[t] == b2[t]) {
                    ++t;
                }
                if (t == nlen) {
                    FAIL_L("duplicate layer name");
                }
            }
        }
        if (flen > MTM_MAX_FUSED || !string_ok(c, foff, flen)) {
            FAIL_L("bad fused string (0..255 bytes of UTF-8, NUL-terminated in the pool)");
        }
        // graph: inputs available, output fresh, kinds of referenced tensors
        const uint32_t in0 = L_U32(c, j, MTM_L_IN0), in1 = L_U32(c, j, MTM_L_IN1), out = L_U32(c, j, MTM_L_OUT);
        if (two_in || op >= MTM_OP_GRU ? in1 >= c->n_t : in1 != MTM_NONE) {
            FAIL_L("in1 must be a tensor for ADD / CONCAT / MUL / MATMUL / GRU / LSTM and NONE otherwise");
        }
        if (in0 >= c->n_t || out >= c->n_t) {
            FAIL_L("tensor index out of range");
        }
        if (T_KIND(c, in0) != MTM_K_ACT || T_KIND(c, out) != MTM_K_ACT || (two_in && T_KIND(c, in1) != MTM_K_ACT)) {
            FAIL_L("input / output tensor is not an activation");
        }
        if (!set_has(produced, in0) || (two_in && !set_has(produced, in1))) {
            FAIL_L("input tensor is neither the model input nor an earlier output");
        }
        if (set_has(produced, out)) {
            FAIL_L("output tensor is already produced");
        }
        for (uint32_t s = 0; s < 4; ++s) {
            const uint32_t t = L_U32(c, j, MTM_L_WEIGHT + 4 * s);
            if (op == MTM_OP_LUT) {
                if (s < 2 ? (t >= c->n_t || T_KIND(c, t) != MTM_K_CONST) : t != MTM_NONE) {
                    FAIL_L("LUT needs CONST weight (table) and bias (dtable), and mult/shift NONE");
                }
            } else if (weighted || op >= MTM_OP_GRU ? (t >= c->n_t || T_KIND(c, t) != MTM_K_CONST) : t != MTM_NONE) {
                FAIL_L("weight/bias/mult/shift must be CONST tensors for CONV2D/LINEAR/GRU/LSTM and NONE otherwise");
            }
        }
        for (uint32_t s = 0; s < 6; ++s) {
            const uint32_t t = l_state(c->b, e, s);
            if (t == MTM_NONE) {
                continue;
            }
            if (s >= 4 && l_state(c->b, e, s - 2) == MTM_NONE) {
                FAIL_L("state[4] / state[5] set without state[2] / state[3]");
            }
            if (!has_state || !weighted) {
                FAIL_L("state slot set without HAS_STATE or on a non-weighted op");
            }
            if (t >= c->n_t || T_KIND(c, t) != MTM_K_STATE) {
                FAIL_L("state slot tensor is not a STATE tensor");
            }
        }
        const char *m = op_rules(c, j, op, act);
        if (m) {
            FAIL_L(m);
        }
        set_add(produced, out);
        set_add(consumed, in0);
        if (two_in) {
            set_add(consumed, in1);
        }
    }
    return NULL;
}

// ---------------------------------------- step 5: whole graph

static void ref(uint32_t *once, uint32_t *twice, uint32_t t) {
    if (t == MTM_NONE) {
        return;
    }
    if (set_has(once, t)) {
        set_add(twice, t);
    }
    set_add(once, t);
}

static const char *check_graph(const mtm_ctx_t *c, uint32_t *produced, uint32_t *consumed, int32_t *where,
                               int32_t *index) {
    uint32_t i;
    if (L_U32(c, c->n_l - 1, MTM_L_OUT) != c->output) {
        FAIL("output is not the last layer's output");
    }
    uint32_t n_out;
    if (!numel(c, c->output, &n_out) || n_out > MTM_MAX_CLASSES) {
        FAIL("model output larger than 32767 values (cross_entropy class limit)");
    }
    for (i = 0; i < c->n_t; ++i) {
        if (T_KIND(c, i) != MTM_K_ACT) {
            continue;
        }
        if (!set_has(produced, i)) {
            FAIL_T("activation is never produced");
        }
        if (i != c->output && !set_has(consumed, i)) {
            FAIL_T("activation is never consumed");
        }
    }
    // Reuse the two sets as "referenced once" / "referenced again".
    set_clear(produced);
    set_clear(consumed);
    for (uint32_t j = 0; j < c->n_l; ++j) {
        for (uint32_t s = 0; s < 4; ++s) {
            ref(produced, consumed, L_U32(c, j, MTM_L_WEIGHT + 4 * s));
        }
        for (uint32_t s = 0; s < 6; ++s) {
            ref(produced, consumed, l_state(c->b, L_ENT(c, j), s));
        }
        if (MTM_RUNS_RNN && rd8(c->b, L_ENT(c, j) + MTM_L_OP) >= MTM_OP_GRU) {  // a GRU's / LSTM's tables
            ref(produced, consumed, L_U32(c, j, MTM_L_IN1));
        }
    }
    for (i = 0; i < c->n_t; ++i) {
        if (T_QUANT(c, i) == MTM_Q_CHANNEL) {
            ref(produced, consumed, T_QS(c, i));
        }
    }
    for (i = 0; i < c->n_t; ++i) {
        if (T_KIND(c, i) != MTM_K_ACT && (!set_has(produced, i) || set_has(consumed, i))) {
            FAIL_T("CONST/STATE tensor not referenced exactly once");
        }
    }
    return NULL;
}

// ---------------------------------------------------------------------------

const char *mt_mtm_validate(const uint8_t *b, uint32_t len, int32_t *where, int32_t *index) {
    mtm_ctx_t cx;
    mtm_ctx_t *c = &cx;
    // 1. envelope
    if (len < MTM_HEADER_SIZE + 4) {
        FAIL("file too short (< 68 bytes)");
    }
    if (len > 0x7FFFFFF0u) {
        FAIL("file too large");
    }
    if (b[0] != 'M' || b[1] != 'T' || b[2] != 'M' || b[3] != 'F') {
        FAIL("bad magic (expected MTMF)");
    }
    if (rd16(b, MTM_H_VERSION_MAJOR) != MTM_VERSION_MAJOR || rd16(b, MTM_H_VERSION_MINOR) > MTM_VERSION_MINOR) {
        FAIL("unsupported version (reader is 1.5)");
    }
    if (rd32(b, MTM_H_HEADER_SIZE) != MTM_HEADER_SIZE) {
        FAIL("header_size != 64");
    }
    if (rd32(b, MTM_H_TOTAL_LEN) != len) {
        FAIL("total_len != file length (truncated or padded file)");
    }
    if (mt_mtm_crc32(b, len - 4) != rd32(b, len - 4)) {
        FAIL("CRC32 mismatch");
    }
    // 2. header
    c->b = b;
    c->len = len;
    c->flags = rd32(b, MTM_H_FLAGS);
    c->n_t = rd32(b, MTM_H_N_TENSORS);
    c->n_l = rd32(b, MTM_H_N_LAYERS);
    c->lt_off = rd32(b, MTM_H_LAYER_TABLE_OFF);
    c->s_off = rd32(b, MTM_H_STRINGS_OFF);
    c->s_len = rd32(b, MTM_H_STRINGS_LEN);
    c->d_off = rd32(b, MTM_H_DATA_OFF);
    c->d_len = rd32(b, MTM_H_DATA_LEN);
    c->input = rd32(b, MTM_H_INPUT);
    c->output = rd32(b, MTM_H_OUTPUT);
    if (c->flags & ~(MTM_FLAG_TRAINED | MTM_FLAG_HAS_STATE)) {
        FAIL("unknown header flags");
    }
    if (c->n_t < 1 || c->n_t > MTM_MAX_TENSORS) {
        FAIL("n_tensors outside 1..4096");
    }
    if (c->n_l < 1 || c->n_l > MTM_MAX_LAYERS) {
        FAIL("n_layers outside 1..1024");
    }
    if (rd32(b, MTM_H_TENSOR_TABLE_OFF) != MTM_HEADER_SIZE) {
        FAIL("tensor_table_off != 64");
    }
    if (c->lt_off != MTM_HEADER_SIZE + MTM_TENSOR_ENTRY * c->n_t) {
        FAIL("layer_table_off != 64 + 48 * n_tensors");
    }
    if (c->s_off != c->lt_off + MTM_LAYER_ENTRY * c->n_l) {
        FAIL("strings_off != layer_table_off + 152 * n_layers");
    }
    if (c->s_len < 1 || c->s_off > len - 4 || c->s_len > len - 4 - c->s_off) {
        FAIL("strings_len out of range");
    }
    const uint32_t s_end = c->s_off + c->s_len;  // <= len - 4 < 2^31
    if (c->d_off != ((s_end + 7u) & ~7u)) {
        FAIL("data_off != align8(strings_off + strings_len)");
    }
    if (c->d_off > len - 4 || c->d_len != len - 4 - c->d_off || (c->d_len & 7u)) {
        FAIL("data_len inconsistent with total_len or not a multiple of 8");
    }
    if (c->input >= c->n_t || c->output >= c->n_t) {
        FAIL("input/output tensor index out of range");
    }
    if (rd32(b, MTM_H_TRAIN_STEPS) != 0 && !(c->flags & MTM_FLAG_TRAINED)) {
        FAIL("train_steps without TRAINED");
    }
    if (b[c->s_off] != 0) {
        FAIL("string pool does not start with NUL");
    }
    if (!all_zero(b, s_end, c->d_off)) {
        FAIL("non-zero padding after the string pool");
    }
    // 3. tensors
    const char *m = check_tensors(c, where, index);
    if (m) {
        return m;
    }
    // 4. layers; 5. whole graph
    uint32_t produced[MTM_SET_WORDS], consumed[MTM_SET_WORDS];
    set_clear(produced);
    set_clear(consumed);
    m = check_layers(c, produced, consumed, where, index);
    if (m) {
        return m;
    }
    m = check_graph(c, produced, consumed, where, index);
    if (m) {
        return m;
    }
    *where = MTM_WHERE_FILE;
    *index = -1;
    return NULL;
}
