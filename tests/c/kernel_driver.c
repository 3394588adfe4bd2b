// Host driver for the microtrain C kernels: reads the case file of
// tests/support/kernel_harness.py, runs every case through the
// mt_*_check functions (descriptors and scalar arguments, in the binding's
// order) and the kernel exactly like the binding
// (usermod/microtrain/modmicrotrain.c) does, and writes the same results file
// as tests/mp/kernel_runner.py. Messages come from the same checks and the
// same formatter (mt_msg_format), so they are the binding's, byte for byte.
// Every buffer is its own exact-size malloc, so ASan sees any out-of-bounds
// access. Python-only argument kinds (eval'd objects) and type errors are
// reported as "DriverError" results.
//
//   kernel_driver CASES RESULTS
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mt_kernels.h"

#define POISON 0xA5
#define MAX_ARGS 16

typedef struct {
    char tag;  // 'N' 'i' 'd' 'T' 'A' 'V' 'E'
    int64_t iv;
    double dv;
    char kind;  // buffers: 'y' 'Y' 'b' 'B' 'i' 'I' 'f'
    int out;
    int hidden;      // a base for views, not an argument of the call
    uint32_t n;      // elements
    uint8_t *buf;    // data
    uint8_t *owned;  // malloc'd block to free (buffers only)
} arg_t;

typedef struct {
    const uint8_t *p, *end;
    int bad;
} reader_t;

static void take(reader_t *r, void *dst, size_t n) {
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = 1;
        memset(dst, 0, n);
        return;
    }
    memcpy(dst, r->p, n);
    r->p += n;
}
static uint8_t rd_u8(reader_t *r) {
    uint8_t v;
    take(r, &v, 1);
    return v;
}
static uint16_t rd_u16(reader_t *r) {
    uint8_t b[2];
    take(r, b, 2);
    return (uint16_t)(b[0] | (b[1] << 8));
}
static uint32_t rd_u32(reader_t *r) {
    uint8_t b[4];
    take(r, b, 4);
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}
static int64_t rd_i64(reader_t *r) {
    uint64_t v = 0;
    uint8_t b[8];
    take(r, b, 8);
    for (int i = 7; i >= 0; --i) {
        v = (v << 8) | b[i];
    }
    return (int64_t)v;
}
static double rd_f64(reader_t *r) {
    int64_t bits = rd_i64(r);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

static size_t item_size(char kind) {
    return (kind == 'y' || kind == 'Y' || kind == 'b' || kind == 'B') ? 1 : 4;
}

// ---------------------------------------------------------------------------
// output

static FILE *g_out;

static void w_bytes(const void *p, size_t n) {
    if (n && fwrite(p, 1, n, g_out) != n) {
        fprintf(stderr, "kernel_driver: write failed\n");
        exit(2);
    }
}
static void w_u8(uint8_t v) {
    w_bytes(&v, 1);
}
static void w_u16(uint16_t v) {
    uint8_t b[2] = { (uint8_t)v, (uint8_t)(v >> 8) };
    w_bytes(b, 2);
}
static void w_u32(uint32_t v) {
    uint8_t b[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
    w_bytes(b, 4);
}
static void w_i64(int64_t v) {
    uint64_t u = (uint64_t)v;
    for (int i = 0; i < 8; ++i) {
        w_u8((uint8_t)(u >> (8 * i)));
    }
}
static void w_str(const char *s) {
    size_t n = strlen(s);
    if (n > 65535) {
        n = 65535;
    }
    w_u16((uint16_t)n);
    w_bytes(s, n);
}

// ---------------------------------------------------------------------------
// argument access (the binding's rules)

typedef struct {
    const char *fn;
    arg_t *a;
    int na;
    const char *err_type;  // NULL = ok
    char msg[MT_MSG_MAX];
} call_t;

static int failed(const call_t *c) {
    return c->err_type != NULL;
}

// The first failure wins; v fills the %d of what (NULL: none).
static void fail_v(call_t *c, const char *type, const char *arg, const char *what, const int32_t *v) {
    if (failed(c)) {
        return;
    }
    c->err_type = type;
    mt_msg_format(c->msg, sizeof c->msg, c->fn, arg, what, v);
}

static void fail(call_t *c, const char *type, const char *arg, const char *what) {
    fail_v(c, type, arg, what, NULL);
}

enum { S8, I32, U32, F32 };

static int kind_ok(int dt, char k) {
    switch (dt) {
        case S8: return k == 'y' || k == 'Y' || k == 'b' || k == 'B';
        case I32: return k == 'i';
        case U32: return k == 'I' || k == 'i';
        default: return k == 'f';
    }
}

// Buffer argument i of dtype dt with exactly n elements (n < 0: any); sets *len.
static void *buf(call_t *c, int i, const char *name, int dt, int64_t n, int writable, uint32_t *len) {
    if (failed(c)) {
        return NULL;
    }
    if (i >= c->na || c->a[i].tag != 'T') {
        fail(c, "DriverError", name, "not a buffer the driver can pass");
        return NULL;
    }
    arg_t *a = &c->a[i];
    if (!kind_ok(dt, a->kind)) {
        fail(c, "DriverError", name, "wrong buffer kind");
        return NULL;
    }
    if (writable && a->kind == 'y') {
        fail(c, "DriverError", name, "read-only buffer");
        return NULL;
    }
    if (n >= 0 && (int64_t)a->n != n) {
        const int32_t v[MT_MSG_NVALS] = { (int32_t)a->n, (int32_t)n, 0 };  // case buffers and checked sizes < 2^31
        fail_v(c, "ValueError", name, MT_MSG_LENGTH, v);
        return NULL;
    }
    if (len) {
        *len = a->n;
    }
    return a->buf;
}

static int32_t int_arg(call_t *c, int i, const char *name) {
    if (failed(c)) {
        return 0;
    }
    if (i >= c->na || c->a[i].tag != 'i') {
        fail(c, "DriverError", name, "not an int");
        return 0;
    }
    const int64_t v = c->a[i].iv;
    if (v < INT32_MIN || v > INT32_MAX) {
        fail(c, "ValueError", name, "out of int32 range");
        return 0;
    }
    return (int32_t)v;
}

static double float_arg(call_t *c, int i, const char *name) {
    if (failed(c)) {
        return 0.0;
    }
    if (i < c->na && c->a[i].tag == 'd') {
        return c->a[i].dv;
    }
    if (i < c->na && c->a[i].tag == 'i') {
        return (double)c->a[i].iv;
    }
    fail(c, "DriverError", name, "not a float");
    return 0.0;
}

static const uint8_t *mask_arg(call_t *c, int i, int32_t n) {
    if (failed(c) || (i < c->na && c->a[i].tag == 'N')) {
        return NULL;
    }
    return (const uint8_t *)buf(c, i, "mask", S8, n, 0, NULL);
}

static void check(call_t *c, const char *arg, const char *msg) {
    if (msg) {
        fail(c, "ValueError", arg, msg);
    }
}

// A scalar check of checks.c (msg, with its %d values in v), unless a check failed before.
static void check_v(call_t *c, const char *arg, const char *msg, const int32_t *v) {
    if (msg) {
        fail_v(c, "ValueError", arg, msg, v);
    }
}

// Scalar int argument i, then its check (skipped once anything failed: the
// binding raises at the first problem, so later checks never run there).
typedef const char *(*scalar_check_t)(int32_t x, int32_t *v);
static int32_t checked_int(call_t *c, int i, const char *name, scalar_check_t chk) {
    const int32_t x = int_arg(c, i, name);
    if (!failed(c)) {
        int32_t v[MT_MSG_NVALS];
        check_v(c, name, chk(x, v), v);
    }
    return x;
}

// Descriptor: array('i') of exactly n ints copied into dst.
static void desc_arg(call_t *c, int32_t *dst, int32_t n) {
    const int32_t *src = (const int32_t *)buf(c, 0, "desc", I32, n, 0, NULL);
    for (int32_t k = 0; k < n; ++k) {
        dst[k] = src ? src[k] : 0;
    }
}

typedef char conv_size_ok[sizeof(mt_conv2d_params_t) == MT_CONV2D_NPARAMS * 4 ? 1 : -1];
typedef char linear_size_ok[sizeof(mt_linear_params_t) == MT_LINEAR_NPARAMS * 4 ? 1 : -1];
typedef char pool_size_ok[sizeof(mt_pool_params_t) == MT_POOL_NPARAMS * 4 ? 1 : -1];
typedef char add_size_ok[sizeof(mt_add_params_t) == MT_ADD_NPARAMS * 4 ? 1 : -1];

// 17 ints, or 19 with dil_h, dil_w (as the binding: *dil when a dilation is above 1).
static int conv_desc(call_t *c, mt_conv2d_dil_params_t *p, int *dil) {
    int32_t d[MT_CONV2D_DIL_NPARAMS] = { 0 };
    uint32_t n = 0;
    const int32_t *src = (const int32_t *)buf(c, 0, "desc", I32, -1, 0, &n);
    if (src && n != MT_CONV2D_NPARAMS && n != MT_CONV2D_DIL_NPARAMS) {
        const int32_t v[MT_MSG_NVALS] = { (int32_t)n, MT_CONV2D_NPARAMS, 0 };
        fail_v(c, "ValueError", "desc", MT_MSG_LENGTH, v);
    }
    d[17] = d[18] = 1;
    for (uint32_t k = 0; !failed(c) && k < n; ++k) {
        d[k] = src[k];
    }
    memcpy(p, d, sizeof *p);
    *dil = n == MT_CONV2D_DIL_NPARAMS && (p->dil_h != 1 || p->dil_w != 1);
    if (!failed(c)) {
        check(c, "desc", *dil ? mt_conv2d_dil_check(p) : mt_conv2d_check(&p->c));
    }
    return !failed(c);
}
static int linear_desc(call_t *c, mt_linear_params_t *p) {
    int32_t d[MT_LINEAR_NPARAMS];
    desc_arg(c, d, MT_LINEAR_NPARAMS);
    memcpy(p, d, sizeof *p);
    if (!failed(c)) {
        check(c, "desc", mt_linear_check(p));
    }
    return !failed(c);
}
static int pool_desc(call_t *c, mt_pool_params_t *p) {
    int32_t d[MT_POOL_NPARAMS];
    desc_arg(c, d, MT_POOL_NPARAMS);
    memcpy(p, d, sizeof *p);
    if (!failed(c)) {
        check(c, "desc", mt_pool_check(p));
    }
    return !failed(c);
}

// ---------------------------------------------------------------------------
// one call per binding function; returns 1 and sets *ret when it returns an int

static int want_args(call_t *c, int n) {
    if (c->na != n) {
        char what[64];
        snprintf(what, sizeof what, "takes %d arguments, got %d", n, c->na);
        fail(c, "TypeError", "args", what);
        return 0;
    }
    return 1;
}

// The binding's mt_grad_act: the conv2d / linear grad input's optional lo, hi (args 7,
// 8, both or neither), checked; (-129, 128) (no mask) without them.
static void grad_act(call_t *c, int32_t *lo, int32_t *hi) {
    *lo = -129;
    *hi = 128;
    if (c->na == 8) {
        fail(c, "TypeError", "hi", MT_MSG_ACT_PAIR);
    } else if (c->na == 9) {
        *lo = checked_int(c, 7, "lo", mt_act_lo_check);
        *hi = checked_int(c, 8, "hi", mt_act_hi_check);
        if (!failed(c)) {
            check(c, "hi", mt_act_order_check(*lo, *hi));
        }
    }
}

// conv2d_add_s8_forward: the binding's checks, in its order, then the kernel.
#if MT_HAS_FLOAT
// gw / gb of a _grad_weight_f32 call (args 6, 7, 8) as the binding's mt_gw_window:
// the whole layer without c0, else the window of len(gb) channels from c0.
static int gw_window(call_t *c, const uint8_t *mask, int32_t out_c, int32_t k, float **gw, float **gb, int32_t *c0) {
    if (c->na < 9) {
        *gw = buf(c, 6, "gw", F32, (int64_t)out_c * k, 1, NULL);
        *gb = buf(c, 7, "gb", F32, out_c, 1, NULL);
        *c0 = 0;
        return !failed(c);
    }
    uint32_t nw = 0, nb = 0;
    *gw = buf(c, 6, "gw", F32, -1, 1, &nw);
    *gb = buf(c, 7, "gb", F32, -1, 1, &nb);
    *c0 = int_arg(c, 8, "c0");
    if (failed(c)) {
        return 0;
    }
    const int32_t n = (int32_t)nb;  // case buffers < 2^31
    int32_t v[MT_MSG_NVALS];
    check_v(c, "c0", mt_gw_window_c0_check(*c0, out_c, v), v);
    if (!failed(c)) {
        check_v(c, "gb", mt_gw_window_n_check(n, *c0, out_c, v), v);
    }
    if (!failed(c) && (int64_t)nw != (int64_t)n * k) {
        const int32_t vl[MT_MSG_NVALS] = { (int32_t)nw, n * k, 0 };
        fail_v(c, "ValueError", "gw", MT_MSG_LENGTH, vl);
    }
    if (!failed(c)) {
        check_v(c, "mask", mt_gw_window_mask_check(mask, *c0, n, out_c, v), v);
    }
    return !failed(c);
}
#endif

static int run_conv_add(call_t *c) {
    mt_conv2d_dil_params_t pd;
    int dil;
    if (!conv_desc(c, &pd, &dil)) {
        return 0;
    }
    if (dil) {
        fail(c, "ValueError", "desc", MT_MSG_NO_ROW_BLOCK);
        return 0;
    }
    const mt_conv2d_params_t p = pd.c;
    const int32_t nin = p.in_h * p.in_w * p.in_c, nout = p.out_h * p.out_w * p.out_c;
    const int32_t nw = p.out_c * p.k_h * p.k_w * (p.in_c / p.groups);
    const int8_t *x = buf(c, 1, "x", S8, nin, 0, NULL);
    const int8_t *w = buf(c, 2, "w", S8, nw, 0, NULL);
    const int32_t *bias = buf(c, 3, "bias", I32, p.out_c, 0, NULL);
    const int32_t *mult = buf(c, 4, "mult", I32, p.out_c, 0, NULL);
    const int32_t *shift = buf(c, 5, "shift", I32, p.out_c, 0, NULL);
    if (failed(c)) {
        return 0;
    }
    check(c, "bias", mt_bias_check(bias, p.out_c));
    check(c, "mult/shift", mt_requant_params_check(mult, shift, p.out_c));
    const int32_t *ad = buf(c, 6, "add_desc", I32, MT_ADD_NPARAMS, 0, NULL);
    if (failed(c)) {
        return 0;
    }
    mt_add_params_t a;
    memcpy(&a, ad, sizeof a);
    check(c, "add_desc", mt_add_check(&a));
    if (!failed(c)) {
        int32_t v[MT_MSG_NVALS];
        check_v(c, "add_desc", mt_conv_add_n_check(a.n, nout, v), v);
    }
    const int32_t side = checked_int(c, 7, "side", mt_part_check);
    int8_t *skip = buf(c, 8, "skip", S8, nout, 1, NULL);
    uint32_t nt = 0;
    int8_t *tile = buf(c, 9, "tile", S8, -1, 1, &nt);
    const int32_t row = p.out_w * p.out_c;
    if (!failed(c)) {
        int32_t v[MT_MSG_NVALS];
        check_v(c, "tile", mt_tile_check(nt, row, v), v);
    }
    if (failed(c)) {
        return 0;
    }
    const int32_t rows = (int32_t)nt / row < p.out_h ? (int32_t)nt / row : p.out_h;
    mt_conv2d_add_s8_forward(&p, x, w, bias, mult, shift, &a, side, skip, tile, rows);
    return 0;
}

static int run_conv(call_t *c, const char *op, int32_t *ret) {
    mt_conv2d_dil_params_t pd;
    int dil;
    if (!conv_desc(c, &pd, &dil)) {
        return 0;
    }
    const mt_conv2d_params_t p = pd.c;
    const int32_t nin = p.in_h * p.in_w * p.in_c, nout = p.out_h * p.out_w * p.out_c;
    const int32_t cpg = p.in_c / p.groups, opg = p.out_c / p.groups;
    const int32_t nw = p.out_c * p.k_h * p.k_w * cpg;
    if (!strcmp(op, "conv2d_s8_forward")) {
        const int8_t *x = buf(c, 1, "x", S8, nin, 0, NULL);
        const int8_t *w = buf(c, 2, "w", S8, nw, 0, NULL);
        const int32_t *bias = buf(c, 3, "bias", I32, p.out_c, 0, NULL);
        const int32_t *mult = buf(c, 4, "mult", I32, p.out_c, 0, NULL);
        const int32_t *shift = buf(c, 5, "shift", I32, p.out_c, 0, NULL);
        int8_t *y = buf(c, 6, "y", S8, nout, 1, NULL);
        if (failed(c)) {
            return 0;
        }
        check(c, "bias", mt_bias_check(bias, p.out_c));
        check(c, "mult/shift", mt_requant_params_check(mult, shift, p.out_c));
        if (!failed(c)) {
            if (dil) {
                mt_conv2d_dil_s8_forward(&pd, x, w, bias, mult, shift, y);
            } else {
                mt_conv2d_s8_forward(&p, x, w, bias, mult, shift, y);
            }
        }
        return 0;
    }
    if (!strcmp(op, "conv2d_s8_grad_input")) {
        const int8_t *e = buf(c, 1, "e", S8, nout, 0, NULL);
        const int8_t *w = buf(c, 2, "w", S8, nw, 0, NULL);
        const int32_t *wr = buf(c, 3, "wr", I32, p.out_c, 0, NULL);
        const uint8_t *mask = mask_arg(c, 4, p.out_c);
        int32_t *acc = buf(c, 5, "acc", I32, nin, 1, NULL);
        int8_t *ein = buf(c, 6, "ein", S8, nin, 1, NULL);
        if (failed(c)) {
            return 0;
        }
        int32_t lo, hi;
        grad_act(c, &lo, &hi);
        if (failed(c)) {
            return 0;
        }
        check(c, "wr", mt_wr_check(wr, p.out_c, p.k_h * p.k_w * opg));
        if (failed(c)) {
            return 0;
        }
        *ret = dil ? mt_conv2d_dil_s8_grad_input(&pd, e, w, wr, mask, lo, hi, acc, ein)
                   : mt_conv2d_s8_grad_input(&p, e, w, wr, mask, lo, hi, acc, ein);
        return 1;
    }
    const int8_t *x = buf(c, 1, "x", S8, nin, 0, NULL);
    const int8_t *e = buf(c, 2, "e", S8, nout, 0, NULL);
    const uint8_t *mask = mask_arg(c, 3, p.out_c);
    if (!strcmp(op, "conv2d_s8_grad_weight")) {
        int32_t *gw = buf(c, 4, "gw", I32, nw, 1, NULL);
        int32_t *gb = buf(c, 5, "gb", I32, p.out_c, 1, NULL);
        if (!failed(c)) {
            if (dil) {
                mt_conv2d_dil_s8_grad_weight(&pd, x, e, mask, gw, gb);
            } else {
                mt_conv2d_s8_grad_weight(&p, x, e, mask, gw, gb);
            }
        }
        return 0;
    }
#if MT_HAS_FLOAT
    const float ws = (float)float_arg(c, 4, "w_scale");
    const float bs = (float)float_arg(c, 5, "b_scale");
    float *gw, *gb;
    int32_t c0;
    if (!failed(c) && gw_window(c, mask, p.out_c, p.k_h * p.k_w * cpg, &gw, &gb, &c0)) {
        if (dil) {
            mt_conv2d_dil_s8_grad_weight_f32(&pd, x, e, mask, ws, bs, gw, gb, c0);
        } else {
            mt_conv2d_s8_grad_weight_f32(&p, x, e, mask, ws, bs, gw, gb, c0);
        }
    }
#else
    fail(c, "DriverError", "op", "no float support");
#endif
    return 0;
}

static int run_linear(call_t *c, const char *op, int32_t *ret) {
    mt_linear_params_t p;
    if (!linear_desc(c, &p)) {
        return 0;
    }
    const int32_t nw = p.in_n * p.out_n;
    if (!strcmp(op, "linear_s8_forward")) {
        const int8_t *x = buf(c, 1, "x", S8, p.in_n, 0, NULL);
        const int8_t *w = buf(c, 2, "w", S8, nw, 0, NULL);
        const int32_t *bias = buf(c, 3, "bias", I32, p.out_n, 0, NULL);
        const int32_t *mult = buf(c, 4, "mult", I32, p.out_n, 0, NULL);
        const int32_t *shift = buf(c, 5, "shift", I32, p.out_n, 0, NULL);
        int8_t *y = buf(c, 6, "y", S8, p.out_n, 1, NULL);
        if (failed(c)) {
            return 0;
        }
        check(c, "bias", mt_bias_check(bias, p.out_n));
        check(c, "mult/shift", mt_requant_params_check(mult, shift, p.out_n));
        if (!failed(c)) {
            mt_linear_s8_forward(&p, x, w, bias, mult, shift, y);
        }
        return 0;
    }
    if (!strcmp(op, "linear_s8_grad_input")) {
        const int8_t *e = buf(c, 1, "e", S8, p.out_n, 0, NULL);
        const int8_t *w = buf(c, 2, "w", S8, nw, 0, NULL);
        const int32_t *wr = buf(c, 3, "wr", I32, p.out_n, 0, NULL);
        const uint8_t *mask = mask_arg(c, 4, p.out_n);
        int32_t *acc = buf(c, 5, "acc", I32, p.in_n, 1, NULL);
        int8_t *ein = buf(c, 6, "ein", S8, p.in_n, 1, NULL);
        if (failed(c)) {
            return 0;
        }
        int32_t lo, hi;
        grad_act(c, &lo, &hi);
        if (failed(c)) {
            return 0;
        }
        check(c, "wr", mt_wr_check(wr, p.out_n, p.out_n));
        if (failed(c)) {
            return 0;
        }
        *ret = mt_linear_s8_grad_input(&p, e, w, wr, mask, lo, hi, acc, ein);
        return 1;
    }
    const int8_t *x = buf(c, 1, "x", S8, p.in_n, 0, NULL);
    const int8_t *e = buf(c, 2, "e", S8, p.out_n, 0, NULL);
    const uint8_t *mask = mask_arg(c, 3, p.out_n);
    if (!strcmp(op, "linear_s8_grad_weight")) {
        int32_t *gw = buf(c, 4, "gw", I32, nw, 1, NULL);
        int32_t *gb = buf(c, 5, "gb", I32, p.out_n, 1, NULL);
        if (!failed(c)) {
            mt_linear_s8_grad_weight(&p, x, e, mask, gw, gb);
        }
        return 0;
    }
#if MT_HAS_FLOAT
    const float ws = (float)float_arg(c, 4, "w_scale");
    const float bs = (float)float_arg(c, 5, "b_scale");
    float *gw, *gb;
    int32_t c0;
    if (!failed(c) && gw_window(c, mask, p.out_n, p.in_n, &gw, &gb, &c0)) {
        mt_linear_s8_grad_weight_f32(&p, x, e, mask, ws, bs, gw, gb, c0);
    }
#else
    fail(c, "DriverError", "op", "no float support");
#endif
    return 0;
}

static int is_none(const call_t *c, int i);

// The binding's mt_pool_acc: None only where the windows do not overlap.
static int32_t *pool_acc(call_t *c, int i, const mt_pool_params_t *p, int32_t n) {
    if (is_none(c, i)) {
        if (!failed(c)) {
            check(c, "acc", mt_pool_no_acc_check(p));
        }
        return NULL;
    }
    return buf(c, i, "acc", I32, n, 1, NULL);
}

static int run_pool(call_t *c, const char *op, int32_t *ret) {
    mt_pool_params_t p;
    if (!pool_desc(c, &p)) {
        return 0;
    }
    const int32_t nin = p.in_h * p.in_w * p.c, nout = p.out_h * p.out_w * p.c;
    if (!strcmp(op, "maxpool_s8_forward") || !strcmp(op, "avgpool_s8_forward")) {
        const int8_t *x = buf(c, 1, "x", S8, nin, 0, NULL);
        int8_t *y = buf(c, 2, "y", S8, nout, 1, NULL);
        if (failed(c)) {
            return 0;
        }
        if (op[0] == 'm') {
            mt_maxpool_s8_forward(&p, x, y);
        } else {
            mt_avgpool_s8_forward(&p, x, y);
        }
        return 0;
    }
    if (strstr(op, "_act") != NULL) {  // the binding's mt_pool_grad_act
        const int is_max = op[0] == 'm';
        check(c, "desc", mt_pool_disjoint_check(&p));
        const int8_t *t = buf(c, 1, is_max ? "x" : "y", S8, nin, 0, NULL);
        const int8_t *e = buf(c, 2, "e", S8, nout, 0, NULL);
        const int32_t lo = checked_int(c, 3, "lo", mt_act_lo_check);
        const int32_t hi = checked_int(c, 4, "hi", mt_act_hi_check);
        if (!failed(c)) {
            check(c, "hi", mt_act_order_check(lo, hi));
        }
        int8_t *ein = buf(c, 5, "ein", S8, nin, 1, NULL);
        if (failed(c)) {
            return 0;
        }
        *ret = is_max ? mt_maxpool_s8_grad_input_act(&p, t, e, lo, hi, ein)
                      : mt_avgpool_s8_grad_input_act(&p, t, e, lo, hi, ein);
        return 1;
    }
    if (!strcmp(op, "maxpool_s8_grad_input")) {
        const int8_t *x = buf(c, 1, "x", S8, nin, 0, NULL);
        const int8_t *e = buf(c, 2, "e", S8, nout, 0, NULL);
        int32_t *acc = pool_acc(c, 3, &p, nin);
        int8_t *ein = buf(c, 4, "ein", S8, nin, 1, NULL);
        if (failed(c)) {
            return 0;
        }
        *ret = mt_maxpool_s8_grad_input(&p, x, e, acc, ein);
        return 1;
    }
    const int8_t *e = buf(c, 1, "e", S8, nout, 0, NULL);
    int32_t *acc = pool_acc(c, 2, &p, nin);
    int8_t *ein = buf(c, 3, "ein", S8, nin, 1, NULL);
    if (failed(c)) {
        return 0;
    }
    *ret = mt_avgpool_s8_grad_input(&p, e, acc, ein);
    return 1;
}

// ---------------------------------------------------------------------------
// update.c: the binding's checks in its order (mt_bind_update.h, mod_update_*)

static int is_none(const call_t *c, int i) {
    return i < c->na && c->a[i].tag == 'N';
}

#if MT_HAS_FLOAT
typedef const char *(*float_check_t)(float x);
static float checked_float(call_t *c, int i, const char *name, float_check_t chk) {
    const float x = (float)float_arg(c, i, name);
    if (!failed(c)) {
        check(c, name, chk(x));
    }
    return x;
}

// g (any length) then k: returns g, sets *n (elements) and *n_ch.
static float *upd_g(call_t *c, int gi, const char *name, int ki, int32_t *k, uint32_t *n, int32_t *n_ch) {
    (void)buf(c, gi, name, F32, -1, 0, n);
    float *g = buf(c, gi, name, F32, *n, 1, NULL);
    *k = int_arg(c, ki, "k");
    if (!failed(c)) {
        int32_t v[MT_MSG_NVALS];
        check_v(c, "k", mt_update_k_check(*k, *n, v), v);
    }
    *n_ch = failed(c) ? 0 : (int32_t)(*n / (uint32_t)*k);
    return g;
}

static const uint8_t *upd_touched(call_t *c, int i, int32_t n_ch) {
    if (failed(c) || is_none(c, i)) {
        return NULL;
    }
    return (const uint8_t *)buf(c, i, "touched", S8, n_ch, 0, NULL);
}
#endif

static int run_update(call_t *c, const char *op, int32_t *ret) {
    uint32_t n = 0;
    if (!strcmp(op, "update_u8_touch")) {
        if (!want_args(c, 2)) {
            return 0;
        }
        (void)buf(c, 0, "touched", S8, -1, 0, &n);
        uint8_t *t = buf(c, 0, "touched", S8, n, 1, NULL);
        const uint8_t *mask = mask_arg(c, 1, (int32_t)n);
        if (!failed(c)) {
            mt_update_u8_touch(t, mask, n);
        }
        return 0;
    }
#if MT_HAS_FLOAT
    int32_t k = 0, n_ch = 0;
    if (!strcmp(op, "update_f32_check")) {
        if (!want_args(c, 1)) {
            return 0;
        }
        const float *x = buf(c, 0, "x", F32, -1, 0, &n);
        if (failed(c)) {
            return 0;
        }
        *ret = mt_update_f32_check(x, n);
        return 1;
    }
    if (!strcmp(op, "update_f32_decay")) {
        if (!want_args(c, 9)) {
            return 0;
        }
        float *g = upd_g(c, 0, "g", 1, &k, &n, &n_ch);
        const uint8_t *touched = upd_touched(c, 2, n_ch);
        const int32_t cnt = checked_int(c, 3, "n", mt_update_n_check);
        const float wd = checked_float(c, 4, "wd", mt_nonneg_check);
        mt_update_src_t src = { NULL, NULL, NULL, NULL, 1.0f };
        if (!failed(c) && !is_none(c, 8)) {
            src.master = buf(c, 8, "master", F32, n, 0, NULL);
        } else if (!failed(c)) {
            if (c->a[5].tag == 'T' && c->a[5].kind == 'i') {
                src.q32 = buf(c, 5, "q", I32, n, 0, NULL);
            } else {
                src.q8 = buf(c, 5, "q", S8, n, 0, NULL);
            }
            src.scale = buf(c, 6, "scale", F32, n_ch, 0, NULL);
            src.f = checked_float(c, 7, "f", mt_finite_check);
        }
        if (!failed(c)) {
            mt_update_f32_decay(g, n_ch, k, touched, cnt, wd, &src);
        }
        return 0;
    }
    if (!strcmp(op, "update_f32_standardize")) {
        if (!want_args(c, 4)) {
            return 0;
        }
        float *g = upd_g(c, 0, "g", 1, &k, &n, &n_ch);
        const uint8_t *touched = upd_touched(c, 2, n_ch);
        const int32_t cnt = checked_int(c, 3, "n", mt_update_n_check);
        if (!failed(c)) {
            mt_update_f32_standardize(g, n_ch, k, touched, cnt);
        }
        return 0;
    }
    if (!strcmp(op, "update_f32_axpby")) {
        if (!want_args(c, 6)) {
            return 0;
        }
        float *y = upd_g(c, 0, "y", 2, &k, &n, &n_ch);
        const float *x = buf(c, 1, "x", F32, n, 0, NULL);
        const uint8_t *touched = upd_touched(c, 3, n_ch);
        const float a = checked_float(c, 4, "a", mt_finite_check);
        const float b = checked_float(c, 5, "b", mt_finite_check);
        if (!failed(c)) {
            mt_update_f32_axpby(y, x, n_ch, k, touched, a, b);
        }
        return 0;
    }
    if (!strcmp(op, "update_f32_momentum")) {
        if (!want_args(c, 5)) {
            return 0;
        }
        float *g = upd_g(c, 0, "g", 2, &k, &n, &n_ch);
        float *v = buf(c, 1, "v", F32, n, 1, NULL);
        const uint8_t *touched = upd_touched(c, 3, n_ch);
        const float mom = checked_float(c, 4, "mom", mt_unit_check);
        if (!failed(c)) {
            mt_update_f32_momentum(g, v, n_ch, k, touched, mom);
        }
        return 0;
    }
    if (!strcmp(op, "update_f32_scale")) {
        if (!want_args(c, 4)) {
            return 0;
        }
        float *x = upd_g(c, 0, "x", 1, &k, &n, &n_ch);
        const uint8_t *touched = upd_touched(c, 2, n_ch);
        const float a = checked_float(c, 3, "a", mt_finite_check);
        if (!failed(c)) {
            mt_update_f32_scale(x, n_ch, k, touched, a);
        }
        return 0;
    }
    if (!strcmp(op, "update_f32_adam")) {
        if (!want_args(c, 10)) {
            return 0;
        }
        float *g = upd_g(c, 0, "g", 3, &k, &n, &n_ch);
        float *m = buf(c, 1, "m", F32, n, 1, NULL);
        float *v = buf(c, 2, "v", F32, n, 1, NULL);
        const uint8_t *touched = upd_touched(c, 4, n_ch);
        const float b1 = checked_float(c, 5, "b1", mt_unit_check);
        const float b2 = checked_float(c, 6, "b2", mt_unit_check);
        const float b1t = checked_float(c, 7, "b1t", mt_unit_check);
        const float b2t = checked_float(c, 8, "b2t", mt_unit_check);
        const float eps = checked_float(c, 9, "eps", mt_positive_check);
        if (!failed(c)) {
            mt_update_f32_adam(g, m, v, n_ch, k, touched, b1, b2, b1t, b2t, eps);
        }
        return 0;
    }
    if (!strcmp(op, "update_s8_apply") || !strcmp(op, "update_s8_apply_keep")) {
        const int keep = op[15] == '_';  // update_s8_apply_keep: gw, gb read only, scratch 2 n_ch
        if (!want_args(c, 15)) {
            return 0;
        }
        mt_update_layer_t L;
        uint32_t nw = 0, nc = 0;
        (void)buf(c, 0, "w", S8, -1, 0, &nw);
        L.w = buf(c, 0, "w", S8, nw, 1, NULL);
        (void)buf(c, 1, "w_scale", F32, -1, 0, &nc);
        if (!failed(c)) {
            check(c, "w_scale", mt_channel_count_check(nc));
        }
        L.w_scale = buf(c, 1, "w_scale", F32, nc, 1, NULL);
        if (!failed(c) && (nw % nc != 0 || nw < nc)) {
            const int32_t v[MT_MSG_NVALS] = { (int32_t)nw, (int32_t)nc, 0 };
            fail_v(c, "ValueError", "w", MT_MSG_CHANNEL_MULTIPLE, v);
        }
        L.n_ch = (int32_t)nc;
        L.k = nc ? (int32_t)(nw / nc) : 0;
        L.b = buf(c, 2, "b", I32, nc, 1, NULL);
        L.mult = buf(c, 3, "mult", I32, nc, 1, NULL);
        L.shift = buf(c, 4, "shift", I32, nc, 1, NULL);
        L.gw = buf(c, 5, "gw", F32, nw, !keep, NULL);
        L.gb = buf(c, 6, "gb", F32, nc, !keep, NULL);
        L.master_w = is_none(c, 7) ? NULL : buf(c, 7, "master_w", F32, nw, 1, NULL);
        L.master_b = is_none(c, 8) ? NULL : buf(c, 8, "master_b", F32, nc, 1, NULL);
        if (!failed(c) && is_none(c, 7) != is_none(c, 8)) {
            fail(c, "ValueError", "master_b", MT_MSG_MASTER_PAIR);
        }
        const uint8_t *touched = upd_touched(c, 9, (int32_t)nc);
        const float lr = checked_float(c, 10, "lr", mt_nonneg_check);
        L.s_in = checked_float(c, 11, "s_in", mt_positive_check);
        L.s_out = checked_float(c, 12, "s_out", mt_positive_check);
        const int32_t rng = checked_int(c, 13, "rng", mt_update_rng_check);
        uint32_t n_scr = 0;  // at least 2 n_ch (keep) / n_ch: a longer one is lent, its tail unused
        float *scratch = buf(c, 14, "scratch", F32, -1, 1, &n_scr);
        if (!failed(c) && n_scr < (uint32_t)(keep ? 2 * nc : nc)) {
            const int32_t v[MT_MSG_NVALS] = { (int32_t)n_scr, (int32_t)(keep ? 2 * nc : nc), 0 };
            fail_v(c, "ValueError", "scratch", MT_MSG_AT_LEAST, v);
        }
        if (failed(c)) {
            return 0;
        }
        const int32_t r = keep ? mt_update_s8_apply_keep(&L, touched, lr, rng, scratch)
                               : mt_update_s8_apply(&L, touched, lr, rng, scratch);
        if (r < -1) {
            const int32_t v[MT_MSG_NVALS] = { -2 - r, 0, 0 };
            fail_v(c, "ValueError", "gw", MT_MSG_BAD_STEP, v);
            return 0;
        }
        *ret = r;
        return 1;
    }
    if (!strcmp(op, "update_f32_ratios")) {
        if (!want_args(c, 3)) {
            return 0;
        }
        const float *sw = buf(c, 0, "w_scale", F32, -1, 0, &n);
        if (!failed(c)) {
            check(c, "w_scale", mt_channel_count_check(n));
        }
        if (!failed(c)) {
            check(c, "w_scale", mt_scales_check(sw, (int32_t)n));
        }
        const int32_t r = checked_int(c, 1, "r", mt_ratio_r_check);
        int32_t *wr = buf(c, 2, "wr", I32, n, 1, NULL);
        if (!failed(c)) {
            *ret = mt_update_f32_ratios(sw, (int32_t)n, r, wr);
            return 1;
        }
        return 0;
    }
#else
    (void)ret;
#endif
    fail(c, "DriverError", "op", "no float support");
    return 0;
}


static int run_misc(call_t *c, const char *op, int32_t *ret) {
    uint32_t n = 0;
    if (!strcmp(op, "relu_s8_forward") || !strcmp(op, "relu6_s8_forward")) {
        const int six = op[4] == '6';
        if (!want_args(c, six ? 4 : 3)) {
            return 0;
        }
        const int8_t *x = buf(c, 0, "x", S8, -1, 0, &n);
        const int32_t zp = checked_int(c, 1, "zp", mt_level_check);
        const int32_t q6 = six ? checked_int(c, 2, "q6", mt_level_check) : 0;
        int8_t *y = buf(c, six ? 3 : 2, "y", S8, n, 1, NULL);
        if (six && !failed(c)) {
            check(c, "q6", mt_q6_check(q6, zp));
        }
        if (failed(c)) {
            return 0;
        }
        if (six) {
            mt_relu6_s8_forward(x, y, n, zp, q6);
        } else {
            mt_relu_s8_forward(x, y, n, zp);
        }
        return 0;
    }
    if (!strcmp(op, "relu_s8_backward") || !strcmp(op, "relu6_s8_backward")) {
        const int six = op[4] == '6';
        if (!want_args(c, six ? 4 : 3)) {
            return 0;
        }
        const int8_t *y = buf(c, 0, "y", S8, -1, 0, &n);
        const int32_t zp = checked_int(c, 1, "zp", mt_level_check);
        const int32_t q6 = six ? checked_int(c, 2, "q6", mt_level_check) : 0;
        int8_t *e = buf(c, six ? 3 : 2, "e", S8, n, 1, NULL);
        if (six && !failed(c)) {
            check(c, "q6", mt_q6_check(q6, zp));
        }
        if (failed(c)) {
            return 0;
        }
        if (six) {
            mt_relu6_s8_backward(y, e, n, zp, q6);
        } else {
            mt_relu_s8_backward(y, e, n, zp);
        }
        return 0;
    }
    if (!strcmp(op, "lut_s8_forward")) {
        if (!want_args(c, 3)) {
            return 0;
        }
        const int8_t *x = buf(c, 0, "x", S8, -1, 0, &n);
        const int8_t *table = buf(c, 1, "table", S8, 256, 0, NULL);
        int8_t *y = buf(c, 2, "y", S8, n, 1, NULL);
        if (failed(c)) {
            return 0;
        }
        mt_lut_s8_forward(x, table, y, n);
        return 0;
    }
    if (!strcmp(op, "lut_s8_grad_input")) {
        if (!want_args(c, 4)) {
            return 0;
        }
        const int8_t *x = buf(c, 0, "x", S8, -1, 0, &n);
        const int8_t *e = buf(c, 1, "e", S8, n, 0, NULL);
        const int32_t *dtable = buf(c, 2, "dtable", I32, 256, 0, NULL);
        if (!failed(c)) {
            int32_t v[MT_MSG_NVALS];
            check_v(c, "dtable", mt_lut_dtable_check(dtable, v), v);
        }
        int8_t *ein = buf(c, 3, "ein", S8, n, 1, NULL);
        if (failed(c)) {
            return 0;
        }
        *ret = mt_lut_s8_grad_input(x, e, dtable, ein, n);
        return 1;
    }
    if (!strcmp(op, "global_avgpool_s8_forward")) {
        if (!want_args(c, 4)) {
            return 0;
        }
        const int32_t hw = checked_int(c, 1, "hw", mt_hw_check);
        const int32_t ch = checked_int(c, 2, "c", mt_channels_check);
        if (!failed(c)) {
            check(c, "x", mt_hw_c_check(hw, ch));
        }
        const int8_t *x = buf(c, 0, "x", S8, (int64_t)hw * ch, 0, NULL);
        int8_t *y = buf(c, 3, "y", S8, ch, 1, NULL);
        if (!failed(c)) {
            mt_global_avgpool_s8_forward(x, hw, ch, y);
        }
        return 0;
    }
    if (!strcmp(op, "global_avgpool_s8_grad_input")) {
        if (!want_args(c, 3)) {
            return 0;
        }
        const int8_t *e = buf(c, 0, "e", S8, -1, 0, &n);
        const int32_t hw = checked_int(c, 1, "hw", mt_hw_check);
        if (!failed(c)) {
            check(c, "e", mt_gap_channels_check(hw, n));
        }
        int8_t *ein = buf(c, 2, "ein", S8, (int64_t)hw * n, 1, NULL);
        if (!failed(c)) {
            mt_global_avgpool_s8_grad_input(e, hw, (int32_t)n, ein);
        }
        return 0;
    }
    if (!strcmp(op, "add_s8_forward")) {
        if (!want_args(c, 4)) {
            return 0;
        }
        int32_t d[MT_ADD_NPARAMS];
        mt_add_params_t p;
        desc_arg(c, d, MT_ADD_NPARAMS);
        memcpy(&p, d, sizeof p);
        if (!failed(c)) {
            check(c, "desc", mt_add_check(&p));
        }
        if (failed(c)) {
            return 0;
        }
        const int8_t *x1 = buf(c, 1, "x1", S8, p.n, 0, NULL);
        const int8_t *x2 = buf(c, 2, "x2", S8, p.n, 0, NULL);
        int8_t *y = buf(c, 3, "y", S8, p.n, 1, NULL);
        if (!failed(c)) {
            mt_add_s8_forward(&p, x1, x2, y);
        }
        return 0;
    }
    if (!strcmp(op, "add_s8_grad_merge")) {
        if (!want_args(c, 5)) {
            return 0;
        }
        const int8_t *ea = buf(c, 0, "ea", S8, -1, 0, &n);
        const int32_t ra = checked_int(c, 1, "ra", mt_ratio_check);
        const int8_t *eb = buf(c, 2, "eb", S8, n, 0, NULL);
        const int32_t rb = checked_int(c, 3, "rb", mt_ratio_check);
        int8_t *o = buf(c, 4, "out", S8, n, 1, NULL);
        if (failed(c)) {
            return 0;
        }
        *ret = mt_add_s8_grad_merge(ea, ra, eb, rb, n, o);
        return 1;
    }
    if (!strcmp(op, "concat_s8_forward") || !strcmp(op, "concat_s8_grad_input")) {
        const int fwd = !strcmp(op, "concat_s8_forward");
        if (!want_args(c, 4)) {
            return 0;
        }
        int32_t d[MT_CONCAT_NPARAMS];
        mt_concat_params_t p;
        desc_arg(c, d, MT_CONCAT_NPARAMS);
        memcpy(&p, d, sizeof p);
        if (!failed(c)) {
            check(c, "desc", mt_concat_check(&p));
        }
        if (failed(c)) {
            return 0;
        }
        const int64_t n1 = (int64_t)p.hw * p.c1, n2 = (int64_t)p.hw * p.c2;
        if (fwd) {
            const int8_t *x1 = buf(c, 1, "x1", S8, n1, 0, NULL);
            const int8_t *x2 = buf(c, 2, "x2", S8, n2, 0, NULL);
            int8_t *y = buf(c, 3, "y", S8, n1 + n2, 1, NULL);
            if (!failed(c)) {
                mt_concat_s8_forward(&p, x1, x2, y);
            }
            return 0;
        }
        const int8_t *e = buf(c, 1, "e", S8, n1 + n2, 0, NULL);
        const int32_t part = checked_int(c, 2, "part", mt_part_check);
        if (failed(c)) {
            return 0;
        }
        int8_t *ein = buf(c, 3, "ein", S8, part ? n2 : n1, 1, NULL);
        if (!failed(c)) {
            mt_concat_s8_grad_input(&p, e, part, ein);
        }
        return 0;
    }
    if (!strcmp(op, "upsample_s8_forward") || !strcmp(op, "upsample_s8_grad_input")) {
        const int fwd = !strcmp(op, "upsample_s8_forward");
        if (!want_args(c, 3)) {
            return 0;
        }
        int32_t d[MT_UPSAMPLE_NPARAMS];
        mt_upsample_params_t p;
        desc_arg(c, d, MT_UPSAMPLE_NPARAMS);
        memcpy(&p, d, sizeof p);
        if (!failed(c)) {
            check(c, "desc", mt_upsample_check(&p));
        }
        if (failed(c)) {
            return 0;
        }
        const int64_t nin = (int64_t)p.in_h * p.in_w * p.c, nout = (int64_t)p.out_h * p.out_w * p.c;
        if (fwd) {
            const int8_t *x = buf(c, 1, "x", S8, nin, 0, NULL);
            int8_t *y = buf(c, 2, "y", S8, nout, 1, NULL);
            if (!failed(c)) {
                mt_upsample_s8_forward(&p, x, y);
            }
            return 0;
        }
        const int8_t *e = buf(c, 1, "e", S8, nout, 0, NULL);
        int8_t *ein = buf(c, 2, "ein", S8, nin, 1, NULL);
        if (failed(c)) {
            return 0;
        }
        *ret = mt_upsample_s8_grad_input(&p, e, ein);
        return 1;
    }
    if (!strcmp(op, "softmax_xent_s8")) {
        if (!want_args(c, 5)) {
            return 0;
        }
        const int8_t *q = buf(c, 0, "logits", S8, -1, 0, &n);
        if (!failed(c)) {
            check(c, "logits", mt_classes_check(n));
        }
        const int32_t label = int_arg(c, 1, "label");
        if (!failed(c)) {
            int32_t v[MT_MSG_NVALS];
            check_v(c, "label", mt_label_check(label, n, v), v);
        }
        uint32_t n_lut = 0;
        const uint32_t *lut = buf(c, 2, "lut", U32, -1, 0, &n_lut);
        if (!failed(c)) {
            int32_t v[MT_MSG_NVALS];
            check_v(c, "lut", mt_softmax_lut_check(lut, n_lut, v), v);
        }
        int8_t *err = buf(c, 3, "err", S8, n, 1, NULL);
        int32_t *stats = buf(c, 4, "stats", I32, 3, 1, NULL);
        if (failed(c)) {
            return 0;
        }
        *ret = mt_softmax_xent_s8(q, (int32_t)n, label, lut, (int32_t)n_lut, err, stats);
        return 1;
    }
    if (!strcmp(op, "l1_norm_s8")) {
        if (!want_args(c, 3)) {
            return 0;
        }
        const int8_t *e = buf(c, 0, "e", S8, -1, 0, &n);
        const int32_t ch = checked_int(c, 1, "c", mt_channels_check);
        if (!failed(c)) {
            int32_t v[MT_MSG_NVALS];
            check_v(c, "e", mt_l1_norm_len_check(n, ch, v), v);
        }
        int32_t *norms = buf(c, 2, "norms", I32, ch, 1, NULL);
        if (!failed(c)) {
            mt_l1_norm_s8(e, n / (uint32_t)ch, ch, norms);
        }
        return 0;
    }
    if (!strcmp(op, "topk_mask")) {
        if (!want_args(c, 3)) {
            return 0;
        }
        const int32_t *norms = buf(c, 0, "norms", I32, -1, 0, &n);
        if (!failed(c)) {
            check(c, "norms", mt_channel_count_check(n));
        }
        const int32_t k = int_arg(c, 1, "k");
        if (!failed(c)) {
            int32_t v[MT_MSG_NVALS];
            check_v(c, "k", mt_topk_k_check(k, n, v), v);
        }
        uint8_t *mask = buf(c, 2, "mask", S8, n, 1, NULL);
        if (!failed(c)) {
            mt_topk_mask(norms, (int32_t)n, k, mask);
        }
        return 0;
    }
    if (!strcmp(op, "zo_perturb_s8") || !strcmp(op, "zo_update_s8")) {
        const int upd = op[3] == 'u';
        if (!want_args(c, 4)) {
            return 0;
        }
        const int8_t *base = buf(c, 0, "base", S8, -1, 0, &n);
        const int32_t s = upd ? checked_int(c, 1, "step", mt_zo_step_check) : checked_int(c, 1, "eps", mt_zo_eps_check);
        uint32_t *rng = buf(c, 2, "rng", U32, upd ? 2 : 1, 1, NULL);
        int8_t *w = buf(c, 3, "w", S8, n, 1, NULL);
        if (failed(c)) {
            return 0;
        }
        if (upd) {
            mt_zo_update_s8(base, n, s, rng, w);
        } else {
            mt_zo_perturb_s8(base, n, s, rng, w);
        }
        return 0;
    }
    if (!strcmp(op, "zo_perturb_h_s8")) {
        if (!want_args(c, 6)) {
            return 0;
        }
        const int8_t *base = buf(c, 0, "base", S8, -1, 0, &n);
        const int32_t eps = checked_int(c, 1, "eps", mt_zo_eps_check);
        uint32_t *rng = buf(c, 2, "rng", U32, 1, 1, NULL);
        const int32_t row = checked_int(c, 3, "row", mt_zo_index_check);
        const int32_t i0 = checked_int(c, 4, "i0", mt_zo_index_check);
        int8_t *w = buf(c, 5, "w", S8, n, 1, NULL);
        if (!failed(c)) {
            mt_zo_perturb_h_s8(base, n, eps, (uint32_t)row, (uint32_t)i0, rng, w);
        }
        return 0;
    }
    if (!strcmp(op, "dyn_requant_s8")) {
        if (!want_args(c, 2)) {
            return 0;
        }
        const int32_t *acc = buf(c, 0, "acc", I32, -1, 0, &n);
        int8_t *o = buf(c, 1, "out", S8, n, 1, NULL);
        if (failed(c)) {
            return 0;
        }
        *ret = mt_dyn_requant_s8(acc, n, o);
        return 1;
    }
    if (!strcmp(op, "f32_axpy_i32")) {
        if (!want_args(c, 3)) {
            return 0;
        }
#if MT_HAS_FLOAT
        const int32_t *x = buf(c, 0, "x", I32, -1, 0, &n);
        const float a = (float)float_arg(c, 1, "a");
        float *y = buf(c, 2, "y", F32, n, 1, NULL);
        if (!failed(c)) {
            mt_f32_axpy_i32(y, x, n, a);
        }
#else
        fail(c, "DriverError", "op", "no float support");
#endif
        return 0;
    }
    if (!strncmp(op, "update_", 7)) {
        return run_update(c, op, ret);
    }
    fail(c, "DriverError", "op", "unknown function");
    return 0;
}

// Driver-only ops (names start with '_'): the integer helpers of mt_quant.h
// element-wise, so both math modes (hardware / MT_FORCE_SOFT_MATH) are tested
// directly and not only through what reaches a kernel's int8 output.
static int run_helper(call_t *c, const char *op) {
    uint32_t n = 0;
    if (!strcmp(op, "_requant")) {
        if (!want_args(c, 4)) {
            return 0;
        }
        const int32_t *acc = buf(c, 0, "acc", I32, -1, 0, &n);
        const int32_t *m = buf(c, 1, "m", I32, n, 0, NULL);
        const int32_t *sh = buf(c, 2, "shift", I32, n, 0, NULL);
        int32_t *o = buf(c, 3, "out", I32, n, 1, NULL);
        for (uint32_t i = 0; i < n && !failed(c); ++i) {
            check(c, "m/shift", mt_requant_params_check(&m[i], &sh[i], 1));
            if (!failed(c)) {
                o[i] = mt_requant(acc[i], m[i], sh[i]);
            }
        }
        return 0;
    }
    if (!strcmp(op, "_doubling_high_mul")) {
        if (!want_args(c, 3)) {
            return 0;
        }
        const int32_t *a = buf(c, 0, "a", I32, -1, 0, &n);
        const int32_t *b = buf(c, 1, "b", I32, n, 0, NULL);
        int32_t *o = buf(c, 2, "out", I32, n, 1, NULL);
        for (uint32_t i = 0; i < n && !failed(c); ++i) {
            o[i] = mt_doubling_high_mul(a[i], b[i]);
        }
        return 0;
    }
    if (!strcmp(op, "_udiv")) {
        if (!want_args(c, 3)) {
            return 0;
        }
        const uint32_t *num = buf(c, 0, "n", U32, -1, 0, &n);
        const uint32_t *den = buf(c, 1, "d", U32, n, 0, NULL);
        uint32_t *o = buf(c, 2, "out", U32, n, 1, NULL);
        for (uint32_t i = 0; i < n && !failed(c); ++i) {
            o[i] = mt_udiv_u32(num[i], den[i]);
        }
        return 0;
    }
    if (!strcmp(op, "_dyn_shift")) {
        if (!want_args(c, 2)) {
            return 0;
        }
        const uint32_t *mx = buf(c, 0, "max_abs", U32, -1, 0, &n);
        int32_t *o = buf(c, 1, "out", I32, n, 1, NULL);
        for (uint32_t i = 0; i < n && !failed(c); ++i) {
            o[i] = mt_dyn_shift(mx[i]);
        }
        return 0;
    }
    fail(c, "DriverError", "op", "unknown helper");
    return 0;
}

static int run_call(call_t *c, const char *op, int32_t *ret) {
    if (op[0] == '_') {
        return run_helper(c, op);
    }
    if (!strcmp(op, "conv2d_add_s8_forward")) {
        return want_args(c, 10) && run_conv_add(c);
    }
    if (!strncmp(op, "conv2d_", 7) || !strncmp(op, "linear_", 7)) {
        const int is_f32 = strstr(op, "_f32") != NULL;
        const int is_wt = strstr(op, "grad_weight") != NULL;
        // the _f32 ones: 8, or 9 with the channel window c0; grad input: 7, or 8 / 9
        // with lo / hi (8: grad_act's error)
        const int n_gi = c->na == 8 || c->na == 9 ? c->na : 7;
        if (!want_args(c, is_f32 ? (c->na == 9 ? 9 : 8) : (is_wt ? 6 : n_gi))) {
            return 0;
        }
        return op[0] == 'c' ? run_conv(c, op, ret) : run_linear(c, op, ret);
    }
    if (!strncmp(op, "maxpool_", 8) || !strncmp(op, "avgpool_", 8)) {
        const int is_max = op[0] == 'm';
        const int is_grad = strstr(op, "grad_input") != NULL;
        const int is_act = strstr(op, "_act") != NULL;
        if (!want_args(c, is_act ? 6 : is_grad ? (is_max ? 5 : 4) : 3)) {
            return 0;
        }
        return run_pool(c, op, ret);
    }
    return run_misc(c, op, ret);
}

// ---------------------------------------------------------------------------

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    uint8_t *data = malloc(cap);
    size_t got;
    while (data && (got = fread(data + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            uint8_t *d2 = realloc(data, cap);
            if (!d2) {
                free(data);
                data = NULL;
            }
            data = d2;
        }
    }
    fclose(f);
    *len = n;
    return data;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s CASES RESULTS\n", argv[0]);
        return 2;
    }
    size_t len = 0;
    uint8_t *data = read_file(argv[1], &len);
    if (!data || len < 8 || memcmp(data, "MTK1", 4) != 0) {
        fprintf(stderr, "kernel_driver: cannot read case file %s\n", argv[1]);
        free(data);
        return 2;
    }
    g_out = fopen(argv[2], "wb");
    if (!g_out) {
        fprintf(stderr, "kernel_driver: cannot write %s\n", argv[2]);
        free(data);
        return 2;
    }
    reader_t r = { data + 4, data + len, 0 };
    const uint32_t ncases = rd_u32(&r);
    w_bytes("MTR1", 4);
    w_u32(ncases);
    int status = 0;
    for (uint32_t ci = 0; ci < ncases && !r.bad; ++ci) {
        char op[256];
        const uint8_t oplen = rd_u8(&r);
        take(&r, op, oplen);
        op[oplen] = 0;
        const uint8_t flags = rd_u8(&r);
        const uint16_t repeat = (flags & 2) ? rd_u16(&r) : 1;
        const uint8_t na = rd_u8(&r);
        arg_t a[MAX_ARGS];
        memset(a, 0, sizeof a);
        if (na > MAX_ARGS) {
            r.bad = 1;
            break;
        }
        int unsupported = 0;
        for (int i = 0; i < na && !r.bad; ++i) {
            a[i].tag = (char)rd_u8(&r);
            switch (a[i].tag) {
                case 'N': break;
                case 'i': a[i].iv = rd_i64(&r); break;
                case 'd': a[i].dv = rd_f64(&r); break;
                case 'T': {
                    a[i].kind = (char)rd_u8(&r);
                    const uint8_t bf = rd_u8(&r);
                    a[i].n = rd_u32(&r);
                    a[i].out = bf & 1;
                    a[i].hidden = (bf & 4) != 0;
                    const size_t nb = (size_t)a[i].n * item_size(a[i].kind);
                    a[i].owned = malloc(nb);  // exact size: ASan flags any overrun
                    a[i].buf = a[i].owned;
                    if (!a[i].owned && nb) {
                        fprintf(stderr, "kernel_driver: out of memory\n");
                        return 2;
                    }
                    if (bf & 2) {
                        take(&r, a[i].buf, nb);
                    } else {
                        memset(a[i].buf, POISON, nb);
                    }
                    break;
                }
                case 'A': {
                    const uint8_t idx = rd_u8(&r);
                    const uint8_t o = rd_u8(&r);
                    if (idx >= i) {
                        r.bad = 1;
                        break;
                    }
                    a[i] = a[idx];
                    a[i].owned = NULL;
                    a[i].hidden = 0;
                    a[i].out = o;
                    break;
                }
                case 'V': {
                    const uint8_t idx = rd_u8(&r);
                    const uint32_t start = rd_u32(&r), stop = rd_u32(&r);
                    const uint8_t o = rd_u8(&r);
                    if (idx >= i || a[idx].tag != 'T' || start > stop || stop > a[idx].n) {
                        unsupported = 1;
                        break;
                    }
                    a[i] = a[idx];
                    a[i].owned = NULL;
                    a[i].buf = a[idx].buf + (size_t)start * item_size(a[idx].kind);
                    a[i].n = stop - start;
                    a[i].hidden = 0;
                    a[i].out = o;
                    break;
                }
                case 'E': {
                    const uint16_t n = rd_u16(&r);
                    char skip[65536];
                    take(&r, skip, n);
                    unsupported = 1;
                    break;
                }
                default: r.bad = 1;
            }
        }
        if (r.bad) {
            break;
        }
        arg_t ca[MAX_ARGS];  // the call's arguments: hidden bases left out
        int nca = 0;
        for (int i = 0; i < na; ++i) {
            if (!a[i].hidden) {
                ca[nca++] = a[i];
            }
        }
        call_t c;
        memset(&c, 0, sizeof c);
        c.fn = op;
        c.a = ca;
        c.na = nca;
        int32_t ret = 0;
        int has_ret = 0;
        double best = -1.0;
        for (uint16_t rep = 0; rep < (repeat ? repeat : 1); ++rep) {
            const double t0 = now_us();
            if (unsupported) {
                fail(&c, "DriverError", "args", "argument kind not supported by the C driver");
            } else {
                has_ret = run_call(&c, op, &ret);
            }
            const double t = now_us() - t0;
            if (best < 0.0 || t < best) {
                best = t;
            }
            if (failed(&c)) {
                break;
            }
        }
        const uint32_t us = (uint32_t)best;
        if (failed(&c)) {
            w_u8(1);
            w_u32(us);
            w_str(c.err_type);
            w_str(c.msg);
        } else {
            w_u8((flags & 1) ? 2 : 0);
            w_u32(us);
            if (has_ret) {
                w_u8('i');
                w_i64(ret);
            } else {
                w_u8('N');
            }
            uint8_t nouts = 0;
            for (int i = 0; i < na; ++i) {
                nouts = (uint8_t)(nouts + (a[i].out ? 1 : 0));
            }
            w_u8(nouts);
            for (int i = 0; i < na; ++i) {
                if (a[i].out) {
                    const uint32_t nb = a[i].n * (uint32_t)item_size(a[i].kind);
                    w_u8((uint8_t)a[i].kind);
                    w_u32(nb);
                    w_bytes(a[i].buf, nb);
                }
            }
        }
        for (int i = 0; i < na; ++i) {
            free(a[i].owned);
        }
    }
    free(data);
    if (fclose(g_out) != 0) {
        return 2;
    }
    if (r.bad) {
        fprintf(stderr, "kernel_driver: malformed case file\n");
        status = 2;
    }
    return status;
}
