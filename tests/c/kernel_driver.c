// Host driver for the microtrain C kernels: reads the case file of
// tests/support/kernel_harness.py, runs every case through the
// mt_*_check functions (descriptors and scalar arguments, in the binding's
// order: the prologues of kernel_driver_gen.h, generated from the kernel spec
// like the binding's) and the kernel exactly like the binding
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

static int is_none(const call_t *c, int i) {
    return i < c->na && c->a[i].tag == 'N';
}

// Buffer argument i of dtype dt with exactly n elements (n < 0: any); sets *len.
static void *buf(call_t *c, int i, const char *name, int dt, int64_t n, int writable, size_t *len) {
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
    if (failed(c) || is_none(c, i)) {
        return NULL;
    }
    return (const uint8_t *)buf(c, i, "mask", S8, n, 0, NULL);
}

// A check of checks.c (msg, with its %d values in v; NULL: none), unless a check failed before.
static void check_v(call_t *c, const char *arg, const char *msg, const int32_t *v) {
    if (msg) {
        fail_v(c, "ValueError", arg, msg, v);
    }
}

static void check(call_t *c, const char *arg, const char *msg) {
    check_v(c, arg, msg, NULL);
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
static void desc_arg(call_t *c, int i, const char *name, int32_t *dst, int32_t n) {
    const int32_t *src = (const int32_t *)buf(c, i, name, I32, n, 0, NULL);
    for (int32_t k = 0; k < n; ++k) {
        dst[k] = src ? src[k] : 0;
    }
}

// 17 ints, or 19 with dil_h, dil_w (as the binding: *dil when a dilation is above 1).
static const mt_conv2d_params_t *conv_desc(call_t *c, int i, mt_conv2d_desc_u *u, int *dil) {
    size_t n = 0;
    const int32_t *src = (const int32_t *)buf(c, i, "desc", I32, -1, 0, &n);
    if (src && n != MT_CONV2D_NPARAMS && n != MT_CONV2D_DIL_NPARAMS) {
        const int32_t v[MT_MSG_NVALS] = { (int32_t)n, MT_CONV2D_NPARAMS, 0 };
        fail_v(c, "ValueError", "desc", MT_MSG_LENGTH, v);
    }
    memset(u, 0, sizeof *u);
    u->a[17] = u->a[18] = 1;
    for (size_t k = 0; !failed(c) && k < n; ++k) {
        u->a[k] = src[k];
    }
    *dil = n == MT_CONV2D_DIL_NPARAMS && (u->d.dil_h != 1 || u->d.dil_w != 1);
    if (!failed(c)) {
        check(c, "desc", *dil ? mt_conv2d_dil_check(&u->d) : mt_conv2d_check(&u->s));
    }
    return &u->s;
}

// 11 ints, or 12 with heads (as the binding: 1 when absent), then the check.
static const mt_matmul_params_t *matmul_desc(call_t *c, int i, mt_matmul_desc_u *u) {
    size_t n = 0;
    const int32_t *src = (const int32_t *)buf(c, i, "desc", I32, -1, 0, &n);
    if (src && n != MT_MATMUL_NPARAMS - 1 && n != MT_MATMUL_NPARAMS) {
        const int32_t v[MT_MSG_NVALS] = { (int32_t)n, MT_MATMUL_NPARAMS - 1, 0 };
        fail_v(c, "ValueError", "desc", MT_MSG_LENGTH, v);
    }
    memset(u, 0, sizeof *u);
    u->a[MT_MATMUL_NPARAMS - 1] = 1;
    for (size_t k = 0; !failed(c) && k < n; ++k) {
        u->a[k] = src[k];
    }
    if (!failed(c)) {
        check(c, "desc", mt_matmul_check(&u->s));
    }
    return &u->s;
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

static const uint8_t *upd_touched(call_t *c, int i, int32_t n_ch) {
    if (failed(c) || is_none(c, i)) {
        return NULL;
    }
    return (const uint8_t *)buf(c, i, "touched", S8, n_ch, 0, NULL);
}

#if MT_HAS_FLOAT
// gw / gb of a _grad_weight_f32 call (args 6, 7, 8) as the binding's mt_gw_window:
// the whole layer without c0, else the window of *n = len(gb) channels from c0.
static void gw_window(call_t *c, const uint8_t *mask, int32_t out_c, int32_t k, float **gw, float **gb, int32_t *c0,
                      int32_t *n) {
    if (c->na < 9) {
        *gw = buf(c, 6, "gw", F32, (int64_t)out_c * k, 1, NULL);
        *gb = buf(c, 7, "gb", F32, out_c, 1, NULL);
        *c0 = 0;
        *n = out_c;
        return;
    }
    size_t nw = 0, nb = 0;
    *gw = buf(c, 6, "gw", F32, -1, 1, &nw);
    *gb = buf(c, 7, "gb", F32, -1, 1, &nb);
    *c0 = int_arg(c, 8, "c0");
    *n = (int32_t)nb;  // case buffers < 2^31
    if (failed(c)) {
        return;
    }
    int32_t v[MT_MSG_NVALS];
    check_v(c, "c0", mt_gw_window_c0_check(*c0, out_c, v), v);
    if (!failed(c)) {
        check_v(c, "gb", mt_gw_window_n_check(*n, *c0, out_c, v), v);
    }
    if (!failed(c) && (int64_t)nw != (int64_t)*n * k) {
        const int32_t vl[MT_MSG_NVALS] = { (int32_t)nw, *n * k, 0 };
        fail_v(c, "ValueError", "gw", MT_MSG_LENGTH, vl);
    }
    if (!failed(c)) {
        check_v(c, "mask", mt_gw_window_mask_check(mask, *c0, *n, out_c, v), v);
    }
}

typedef const char *(*float_check_t)(float x);
static float checked_float(call_t *c, int i, const char *name, float_check_t chk) {
    const float x = (float)float_arg(c, i, name);
    if (!failed(c)) {
        check(c, name, chk(x));
    }
    return x;
}

// g (any length, written) then k: returns g, sets *n (elements) and *n_ch.
static float *upd_g(call_t *c, int gi, const char *name, int ki, int32_t *k, size_t *n, int32_t *n_ch) {
    (void)buf(c, gi, name, F32, -1, 0, n);
    float *g = buf(c, gi, name, F32, (int64_t)*n, 1, NULL);
    *k = int_arg(c, ki, "k");
    if (!failed(c)) {
        int32_t v[MT_MSG_NVALS];
        check_v(c, "k", mt_update_k_check(*k, (uint32_t)*n, v), v);
    }
    *n_ch = failed(c) ? 0 : (int32_t)(*n / (uint32_t)*k);
    return g;
}
#endif

// ---------------------------------------------------------------------------
// one runner per kernel (kernel_driver_gen.h; by hand below where the binding's body is);
// returns 1 and sets *ret when it returns an int

typedef struct {
    const char *name;
    int (*run)(call_t *c, int32_t *ret);
    int n_min, n_max;
} run_t;

static int run_conv2d_add_s8_forward(call_t *c, int32_t *ret);
#if MT_HAS_FLOAT
static int run_update_f32_decay(call_t *c, int32_t *ret);
static int run_update_s8_apply(call_t *c, int32_t *ret);
static int run_update_s8_apply_keep(call_t *c, int32_t *ret);
#endif

#include "kernel_driver_gen.h"

static int run_conv2d_add_s8_forward(call_t *c, int32_t *ret) {
    (void)ret;
    mt_conv2d_add_s8_forward_args_t a;
    if (!drv_conv2d_add_s8_forward_args(c, &a)) {
        return 0;
    }
    const int32_t row = a.p->out_w * a.p->out_c;
    const int32_t rows = (int32_t)a.tile_n / row < a.p->out_h ? (int32_t)a.tile_n / row : a.p->out_h;
    mt_conv2d_add_s8_forward(a.p, a.x, a.w, a.bias, a.mult, a.shift, a.add_desc, a.side, a.skip, a.tile, rows);
    return 0;
}

#if MT_HAS_FLOAT
// The binding's mod_update_f32_decay after the prologue: master, else q (int8 or int32),
// scale and f.
static int run_update_f32_decay(call_t *c, int32_t *ret) {
    (void)ret;
    mt_update_f32_decay_args_t a;
    if (!drv_update_f32_decay_args(c, &a)) {
        return 0;
    }
    mt_update_src_t src = { NULL, NULL, NULL, NULL, 1.0f };
    if (!is_none(c, 8)) {
        src.master = buf(c, 8, "master", F32, (int64_t)a.g_n, 0, NULL);
    } else {
        if (c->a[5].tag == 'T' && c->a[5].kind == 'i') {
            src.q32 = buf(c, 5, "q", I32, (int64_t)a.g_n, 0, NULL);
        } else {
            src.q8 = buf(c, 5, "q", S8, (int64_t)a.g_n, 0, NULL);
        }
        src.scale = buf(c, 6, "scale", F32, a.n_ch, 0, NULL);
        src.f = checked_float(c, 7, "f", mt_finite_check);
    }
    if (!failed(c)) {
        mt_update_f32_decay(a.g, a.n_ch, a.k, a.touched, a.n, a.wd, &src);
    }
    return 0;
}

// The binding's mt_s8_apply_call (keep: update_s8_apply_keep, gw and gb read only,
// scratch of at least 2 n_ch).
static int s8_apply(call_t *c, int32_t *ret, int keep) {
    mt_update_layer_t L;
    size_t nw = 0, nc = 0;
    (void)buf(c, 0, "w", S8, -1, 0, &nw);
    L.w = buf(c, 0, "w", S8, (int64_t)nw, 1, NULL);
    (void)buf(c, 1, "w_scale", F32, -1, 0, &nc);
    if (!failed(c)) {
        check(c, "w_scale", mt_channel_count_check((uint32_t)nc));
    }
    L.w_scale = buf(c, 1, "w_scale", F32, (int64_t)nc, 1, NULL);
    if (!failed(c) && (nw % nc != 0 || nw < nc)) {
        const int32_t v[MT_MSG_NVALS] = { (int32_t)nw, (int32_t)nc, 0 };
        fail_v(c, "ValueError", "w", MT_MSG_CHANNEL_MULTIPLE, v);
    }
    L.n_ch = (int32_t)nc;
    L.k = nc ? (int32_t)(nw / nc) : 0;
    L.b = buf(c, 2, "b", I32, (int64_t)nc, 1, NULL);
    L.mult = buf(c, 3, "mult", I32, (int64_t)nc, 1, NULL);
    L.shift = buf(c, 4, "shift", I32, (int64_t)nc, 1, NULL);
    L.gw = buf(c, 5, "gw", F32, (int64_t)nw, !keep, NULL);
    L.gb = buf(c, 6, "gb", F32, (int64_t)nc, !keep, NULL);
    L.master_w = is_none(c, 7) ? NULL : buf(c, 7, "master_w", F32, (int64_t)nw, 1, NULL);
    L.master_b = is_none(c, 8) ? NULL : buf(c, 8, "master_b", F32, (int64_t)nc, 1, NULL);
    if (!failed(c) && is_none(c, 7) != is_none(c, 8)) {
        fail(c, "ValueError", "master_b", MT_MSG_MASTER_PAIR);
    }
    const uint8_t *touched = upd_touched(c, 9, (int32_t)nc);
    const float lr = checked_float(c, 10, "lr", mt_nonneg_check);
    L.s_in = checked_float(c, 11, "s_in", mt_positive_check);
    L.s_out = checked_float(c, 12, "s_out", mt_positive_check);
    const int32_t rng = checked_int(c, 13, "rng", mt_update_rng_check);
    size_t n_scr = 0;  // at least 2 n_ch (keep) / n_ch: a longer one is lent, its tail unused
    float *scratch = buf(c, 14, "scratch", F32, -1, 1, &n_scr);
    if (!failed(c) && n_scr < (keep ? 2 * nc : nc)) {
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

static int run_update_s8_apply(call_t *c, int32_t *ret) {
    return s8_apply(c, ret, 0);
}

static int run_update_s8_apply_keep(call_t *c, int32_t *ret) {
    return s8_apply(c, ret, 1);
}
#endif

static int want_args(call_t *c, int n_min, int n_max) {
    if (c->na < n_min || c->na > n_max) {
        char what[64];
        snprintf(what, sizeof what, "takes %d arguments, got %d", n_min, c->na);
        fail(c, "TypeError", "args", what);
        return 0;
    }
    return 1;
}

// Driver-only ops (names start with '_'): the integer helpers of mt_quant.h
// element-wise, so both math modes (hardware / MT_FORCE_SOFT_MATH) are tested
// directly and not only through what reaches a kernel's int8 output.
static int run_helper(call_t *c, const char *op) {
    size_t n = 0;
    if (!strcmp(op, "_requant")) {
        if (!want_args(c, 4, 4)) {
            return 0;
        }
        const int32_t *acc = buf(c, 0, "acc", I32, -1, 0, &n);
        const int32_t *m = buf(c, 1, "m", I32, n, 0, NULL);
        const int32_t *sh = buf(c, 2, "shift", I32, n, 0, NULL);
        int32_t *o = buf(c, 3, "out", I32, n, 1, NULL);
        for (size_t i = 0; i < n && !failed(c); ++i) {
            check(c, "m/shift", mt_requant_params_check(&m[i], &sh[i], 1));
            if (!failed(c)) {
                o[i] = mt_requant(acc[i], m[i], sh[i]);
            }
        }
        return 0;
    }
    if (!strcmp(op, "_doubling_high_mul") || !strcmp(op, "_udiv")) {  // out[i] = f(a[i], b[i])
        const int udiv = op[1] == 'u';
        if (!want_args(c, 3, 3)) {
            return 0;
        }
        const int dt = udiv ? U32 : I32;  // the signed and unsigned views of the same words
        const int32_t *a = buf(c, 0, udiv ? "n" : "a", dt, -1, 0, &n);
        const int32_t *b = buf(c, 1, udiv ? "d" : "b", dt, (int64_t)n, 0, NULL);
        int32_t *o = buf(c, 2, "out", dt, (int64_t)n, 1, NULL);
        for (size_t i = 0; i < n && !failed(c); ++i) {
            o[i] = udiv ? (int32_t)mt_udiv_u32((uint32_t)a[i], (uint32_t)b[i]) : mt_doubling_high_mul(a[i], b[i]);
        }
        return 0;
    }
    if (!strcmp(op, "_dyn_shift")) {
        if (!want_args(c, 2, 2)) {
            return 0;
        }
        const uint32_t *mx = buf(c, 0, "max_abs", U32, -1, 0, &n);
        int32_t *o = buf(c, 1, "out", I32, n, 1, NULL);
        for (size_t i = 0; i < n && !failed(c); ++i) {
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
    for (size_t i = 0; i < sizeof RUNS / sizeof RUNS[0]; ++i) {
        if (!strcmp(op, RUNS[i].name)) {
            if (!want_args(c, RUNS[i].n_min, RUNS[i].n_max)) {
                return 0;
            }
            if (!RUNS[i].run) {
                fail(c, "DriverError", "op", "no float support");
                return 0;
            }
            return RUNS[i].run(c, ret);
        }
    }
    fail(c, "DriverError", "op", "unknown function");
    return 0;
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
