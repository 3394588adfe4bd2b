// The binding's shared helpers: messages ("fn: arg: what", texts in checks.c), buffer,
// int and float arguments, overlap tests, descriptors; the generated prologues
// (mt_bind_gen.h) are made of them.
// Included once, by modmicrotrain.c: the binding is one translation unit, as it was one file.
#ifndef MT_BIND_H
#define MT_BIND_H

// The generated prologues (one caller each) go into their binding: a call and the
// argument struct in memory would cost more code than the prologue saves.
#define MT_INLINE inline __attribute__((always_inline))

// bytearray reports typecode BYTEARRAY_TYPECODE (1) through mp_get_buffer.
#define MT_TC_BYTEARRAY 1

// ---------------------------------------------------------------------------
// Error messages: "func: arg: what", formatted on the stack by mt_msg_format
// (checks.c, shared with the C test driver) then copied into a str (exception
// text must outlive this frame). v fills the %d of `what` (NULL: none).

static NORETURN void mt_raise(const mp_obj_type_t *type, const char *fn, const char *arg, const char *what,
                              const int32_t *v) {
    char buf[MT_MSG_MAX];
    const size_t pos = mt_msg_format(buf, sizeof buf, fn, arg, what, v);
    mp_obj_t msg = mp_obj_new_str(buf, pos);
    nlr_raise(mp_obj_new_exception_arg1(type, msg));
}

#define MT_TYPE_ERR(fn, arg, what) mt_raise(&mp_type_TypeError, fn, arg, what, NULL)
#define MT_VALUE_ERR(fn, arg, what) mt_raise(&mp_type_ValueError, fn, arg, what, NULL)

// ---------------------------------------------------------------------------
// Argument helpers.

typedef enum { MT_S8, MT_I32, MT_U32, MT_F32 } mt_dtype_t;

static const char *mt_dtype_name(mt_dtype_t dt) {
    switch (dt) {
        case MT_S8: return "an int8 buffer (bytes, bytearray or array('b'/'B'))";
        case MT_I32: return "an array('i')";
        case MT_U32: return "an array('I') or array('i')";
        default: return "an array('f')";
    }
}

static int mt_typecode_ok(mt_dtype_t dt, int tc) {
    switch (dt) {
        case MT_S8: return tc == 'b' || tc == 'B' || tc == MT_TC_BYTEARRAY;
        case MT_I32: return tc == 'i';
        case MT_U32: return tc == 'I' || tc == 'i';
        default: return tc == 'f';
    }
}

// Buffer of exactly n elements of dtype dt; writable if asked. Returns data.
static void *mt_buf(const char *fn, const char *name, mp_obj_t o, mt_dtype_t dt, int32_t n, int writable,
                    size_t *len_out) {
    mp_buffer_info_t bi;
    if (o == mp_const_none) {
        MT_TYPE_ERR(fn, name, "expected a buffer, got None");
    }
    // str has the buffer protocol (its UTF-8 bytes) but is text, not an int8 buffer:
    // refused as the pure-Python kernels refuse it
    if (mp_obj_is_str(o) || !mp_get_buffer(o, &bi, writable ? MP_BUFFER_WRITE : MP_BUFFER_READ)) {
        MT_TYPE_ERR(fn, name, writable ? "expected a writable buffer (bytearray or array)" : "expected a buffer");
    }
    if (!mt_typecode_ok(dt, bi.typecode)) {
        char what[96];
        const size_t pos = mt_msg_put_str(what, sizeof what, 0, "expected ");
        what[mt_msg_put_str(what, sizeof what, pos, mt_dtype_name(dt))] = 0;
        MT_TYPE_ERR(fn, name, what);
    }
    const size_t isz = dt == MT_S8 ? 1 : 4;
    if ((((uintptr_t)bi.buf) & (isz - 1)) != 0) {
        MT_VALUE_ERR(fn, name, "buffer is not 4-byte aligned");
    }
    const size_t nelem = isz == 1 ? bi.len : bi.len >> 2;
    if (n >= 0 && (nelem != (size_t)n || (bi.len & (isz - 1)) != 0)) {
        const int32_t v[MT_MSG_NVALS] = { (int32_t)nelem, n, 0 };
        mt_raise(&mp_type_ValueError, fn, name, MT_MSG_LENGTH, v);
    }
    if (nelem > (size_t)(1 << 26)) {
        MT_VALUE_ERR(fn, name, "buffer too large (more than 2^26 elements)");
    }
    if (len_out) {
        *len_out = nelem;
    }
    return bi.buf;
}

static const int8_t *mt_in_s8(const char *fn, const char *name, mp_obj_t o, int32_t n, size_t *len) {
    return (const int8_t *)mt_buf(fn, name, o, MT_S8, n, 0, len);
}
static int8_t *mt_out_s8(const char *fn, const char *name, mp_obj_t o, int32_t n) {
    return (int8_t *)mt_buf(fn, name, o, MT_S8, n, 1, NULL);
}
static const int32_t *mt_in_i32(const char *fn, const char *name, mp_obj_t o, int32_t n) {
    return (const int32_t *)mt_buf(fn, name, o, MT_I32, n, 0, NULL);
}
static int32_t *mt_out_i32(const char *fn, const char *name, mp_obj_t o, int32_t n) {
    return (int32_t *)mt_buf(fn, name, o, MT_I32, n, 1, NULL);
}
#if MT_HAS_FLOAT
static float *mt_out_f32(const char *fn, const char *name, mp_obj_t o, int32_t n) {
    return (float *)mt_buf(fn, name, o, MT_F32, n, 1, NULL);
}
#endif

static const uint8_t *mt_mask(const char *fn, mp_obj_t o, int32_t n) {
    if (o == mp_const_none) {
        return NULL;
    }
    return (const uint8_t *)mt_buf(fn, "mask", o, MT_S8, n, 0, NULL);
}

static int32_t mt_int(const char *fn, const char *name, mp_obj_t o) {
    // Only small ints: mp_obj_get_int would silently wrap a big int modulo
    // 2^64 in a natmod. Every scalar int argument is far below 2^30.
    if (mp_obj_is_small_int(o)) {
        const mp_int_t v = MP_OBJ_SMALL_INT_VALUE(o);
#if INTPTR_MAX > 2147483647
        if (v < -2147483647 - 1 || v > 2147483647) {
            MT_VALUE_ERR(fn, name, "out of int32 range");
        }
#endif
        return (int32_t)v;
    }
    if (mp_obj_is_int(o)) {
        MT_VALUE_ERR(fn, name, "out of range");
    }
    MT_TYPE_ERR(fn, name, "expected an int");
}

// An int argument and its scalar check of checks.c (msg with its %d from v).
static int32_t mt_int_v(const char *fn, const char *name, mp_obj_t o, const char *(*chk)(int32_t, int32_t *)) {
    const int32_t x = mt_int(fn, name, o);
    int32_t v[MT_MSG_NVALS];
    const char *msg = chk(x, v);
    if (msg) {
        mt_raise(&mp_type_ValueError, fn, name, msg, v);
    }
    return x;
}

#if MT_HAS_FLOAT
// A float scale argument: float or int, else a TypeError naming it.
static float mt_float(const char *fn, const char *name, mp_obj_t o) {
#ifdef MICROPY_ENABLE_DYNRUNTIME
    const mp_obj_type_t *ft = (const mp_obj_type_t *)MP_OBJ_TO_PTR(mp_load_global(MP_QSTR_float));
#else
    const mp_obj_type_t *ft = &mp_type_float;
#endif
    if (!mp_obj_is_int(o) && mp_obj_get_type(o) != ft) {
        MT_TYPE_ERR(fn, name, "expected a float");
    }
    return (float)mp_obj_get_float(o);
}
#endif

// Outputs must not overlap inputs (kernels read inputs after writing outputs).
static void mt_no_overlap(const char *fn, const char *out_name, const void *out, size_t out_bytes, const char *in_name,
                          const void *in, size_t in_bytes) {
    const uintptr_t o0 = (uintptr_t)out, i0 = (uintptr_t)in;
    if (o0 < i0 + in_bytes && i0 < o0 + out_bytes) {
        char what[64];
        const size_t pos = mt_msg_put_str(what, sizeof what, 0, "must not overlap ");
        what[mt_msg_put_str(what, sizeof what, pos, in_name)] = 0;
        MT_VALUE_ERR(fn, out_name, what);
    }
}

// An output that may be the very same buffer as an input (element-wise, read before
// written), but not overlap it partially.
static void mt_no_overlap_unless_same(const char *fn, const char *out_name, const void *out, size_t out_bytes,
                                      const char *in_name, const void *in, size_t in_bytes) {
    if (out != in) {
        mt_no_overlap(fn, out_name, out, out_bytes, in_name, in, in_bytes);
    }
}

// Weight-gradient outputs must not alias the activations or errors they read.
static void mt_no_overlap_grads(const char *fn, const void *gw, size_t gw_bytes, const void *gb, size_t gb_bytes,
                                const void *x, size_t x_bytes, const void *e, size_t e_bytes) {
    mt_no_overlap(fn, "gw", gw, gw_bytes, "gb", gb, gb_bytes);
    mt_no_overlap(fn, "gw", gw, gw_bytes, "x", x, x_bytes);
    mt_no_overlap(fn, "gw", gw, gw_bytes, "e", e, e_bytes);
    mt_no_overlap(fn, "gb", gb, gb_bytes, "x", x, x_bytes);
    mt_no_overlap(fn, "gb", gb, gb_bytes, "e", e, e_bytes);
}

static void mt_check(const char *fn, const char *arg, const char *msg) {
    if (msg) {
        MT_VALUE_ERR(fn, arg, msg);
    }
}

// A scalar check of checks.c: msg with its %d filled from v.
static void mt_check_v(const char *fn, const char *arg, const char *msg, const int32_t *v) {
    if (msg) {
        mt_raise(&mp_type_ValueError, fn, arg, msg, v);
    }
}

// The conv2d / linear grad-input activation mask: the optional args 7, 8 (lo, hi, both
// or neither; ein then holds the activation), checked; without them (-129, 128), which
// masks nothing and leaves ein unread (mt_dyn_requant_act_s8).
static void mt_grad_act(const char *fn, size_t n_args, const mp_obj_t *args, int32_t *lo, int32_t *hi) {
    *lo = -129;
    *hi = 128;
    if (n_args == 8) {
        MT_TYPE_ERR(fn, "hi", MT_MSG_ACT_PAIR);
    }
    if (n_args == 9) {
        int32_t v[MT_MSG_NVALS];
        *lo = mt_int(fn, "lo", args[7]);
        mt_check_v(fn, "lo", mt_act_lo_check(*lo, v), v);
        *hi = mt_int(fn, "hi", args[8]);
        mt_check_v(fn, "hi", mt_act_hi_check(*hi, v), v);
        mt_check(fn, "hi", mt_act_order_check(*lo, *hi));
    }
}

#if MT_HAS_FLOAT
// gw / gb of a _grad_weight_f32 call (args 6, 7, 8): without c0 the whole
// layer (out_c rows of k floats), as before the window existed; with c0 the
// window of n = len(gb) channels from c0, whose outside channels must all be
// masked (the kernels write only rows of the window).
static void mt_gw_window(const char *fn, size_t n_args, const mp_obj_t *args, const uint8_t *mask, int32_t out_c,
                         int32_t k, float **gw, float **gb, int32_t *c0, int32_t *n) {
    if (n_args < 9) {
        *gw = mt_out_f32(fn, "gw", args[6], out_c * k);
        *gb = mt_out_f32(fn, "gb", args[7], out_c);
        *c0 = 0;
        *n = out_c;
        return;
    }
    size_t nw, nb;
    *gw = (float *)mt_buf(fn, "gw", args[6], MT_F32, -1, 1, &nw);
    *gb = (float *)mt_buf(fn, "gb", args[7], MT_F32, -1, 1, &nb);
    *c0 = mt_int(fn, "c0", args[8]);
    *n = (int32_t)nb;  // <= 2^26 (mt_buf)
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "c0", mt_gw_window_c0_check(*c0, out_c, v), v);
    mt_check_v(fn, "gb", mt_gw_window_n_check(*n, *c0, out_c, v), v);
    if (nw != (size_t)(*n * k)) {  // n <= out_c: n * k <= the layer's weight count
        const int32_t vl[MT_MSG_NVALS] = { (int32_t)nw, *n * k, 0 };
        mt_raise(&mp_type_ValueError, fn, "gw", MT_MSG_LENGTH, vl);
    }
    mt_check_v(fn, "mask", mt_gw_window_mask_check(mask, *c0, *n, out_c, v), v);
}
#endif

static void mt_desc(const char *fn, const char *name, mp_obj_t o, int32_t *dst, int32_t n) {
    const int32_t *src = mt_in_i32(fn, name, o, n);
    for (int32_t i = 0; i < n; ++i) {
        dst[i] = src[i];
    }
}

// Fills *u (no struct return: that would need memcpy, absent in natmods): 17
// ints, or 19 with dil_h, dil_w; *dil is set when a dilation is above 1 (the
// dilated kernels run; dilation 1, 1 is the plain conv).
static const mt_conv2d_params_t *mt_conv2d_desc(const char *fn, mp_obj_t o, mt_conv2d_desc_u *u, int *dil) {
    size_t n;
    const int32_t *src = (const int32_t *)mt_buf(fn, "desc", o, MT_I32, -1, 0, &n);
    if (n != MT_CONV2D_NPARAMS && n != MT_CONV2D_DIL_NPARAMS) {
        const int32_t v[MT_MSG_NVALS] = { (int32_t)(n < 0x7FFFFFFF ? n : 0x7FFFFFFF), MT_CONV2D_NPARAMS, 0 };
        mt_raise(&mp_type_ValueError, fn, "desc", MT_MSG_LENGTH, v);
    }
    u->a[17] = u->a[18] = 1;
    for (size_t i = 0; i < n; ++i) {
        u->a[i] = src[i];
    }
    *dil = n == MT_CONV2D_DIL_NPARAMS && (u->d.dil_h != 1 || u->d.dil_w != 1);
    mt_check(fn, "desc", *dil ? mt_conv2d_dil_check(&u->d) : mt_conv2d_check(&u->s));
    return &u->s;
}

// 11 ints, or 12 with heads (a multi-head attention's; 1 when absent).
static const mt_matmul_params_t *mt_matmul_desc(const char *fn, mp_obj_t o, mt_matmul_desc_u *u) {
    size_t n;
    const int32_t *src = (const int32_t *)mt_buf(fn, "desc", o, MT_I32, -1, 0, &n);
    if (n != MT_MATMUL_NPARAMS - 1 && n != MT_MATMUL_NPARAMS) {
        const int32_t v[MT_MSG_NVALS] = { (int32_t)(n < 0x7FFFFFFF ? n : 0x7FFFFFFF), MT_MATMUL_NPARAMS - 1, 0 };
        mt_raise(&mp_type_ValueError, fn, "desc", MT_MSG_LENGTH, v);
    }
    u->a[MT_MATMUL_NPARAMS - 1] = 1;
    for (size_t i = 0; i < n; ++i) {
        u->a[i] = src[i];
    }
    mt_check(fn, "desc", mt_matmul_check(&u->s));
    return &u->s;
}

// The other descriptors: exactly N ints, then the op's check. Each fills *u (no struct
// return: that would need memcpy, absent in natmods).
#define MT_DESC_READER(op, N)                                                                          \
    static const mt_##op##_params_t *mt_##op##_desc(const char *fn, mp_obj_t o, mt_##op##_desc_u *u) { \
        mt_desc(fn, "desc", o, u->a, N);                                                               \
        mt_check(fn, "desc", mt_##op##_check(&u->s));                                                  \
        return &u->s;                                                                                  \
    }
MT_DESC_READER(linear, MT_LINEAR_NPARAMS)
MT_DESC_READER(pool, MT_POOL_NPARAMS)
MT_DESC_READER(add, MT_ADD_NPARAMS)
MT_DESC_READER(concat, MT_CONCAT_NPARAMS)
MT_DESC_READER(upsample, MT_UPSAMPLE_NPARAMS)
MT_DESC_READER(mul, MT_MUL_NPARAMS)
MT_DESC_READER(softmax, MT_SOFTMAX_NPARAMS)
MT_DESC_READER(layernorm, MT_LAYERNORM_NPARAMS)
MT_DESC_READER(gru, MT_GRU_NPARAMS)
MT_DESC_READER(lstm, MT_LSTM_NPARAMS)

// Forward of a conv or linear layer: shared parameter checks.
static void mt_check_qparams(const char *fn, const int32_t *bias, const int32_t *mult, const int32_t *shift,
                             int32_t n) {
    mt_check(fn, "bias", mt_bias_check(bias, n));
    mt_check(fn, "mult/shift", mt_requant_params_check(mult, shift, n));
}


// A pool grad-input scratch: None (NULL) where the windows do not overlap.
static int32_t *mt_pool_acc(const char *fn, mp_obj_t o, const mt_pool_params_t *p, int32_t n) {
    if (o == mp_const_none) {
        mt_check(fn, "acc", mt_pool_no_acc_check(p));
        return NULL;
    }
    return mt_out_i32(fn, "acc", o, n);
}

// The optimiser-update primitives' touched channels: None (every channel) or n bytes.
static const uint8_t *mt_touched(const char *fn, mp_obj_t o, int32_t n) {
    return o == mp_const_none ? NULL : (const uint8_t *)mt_buf(fn, "touched", o, MT_S8, n, 0, NULL);
}

#if MT_HAS_FLOAT
// A float scalar passing one of checks.c's float checks.
static float mt_fscalar(const char *fn, const char *name, mp_obj_t o, const char *(*chk)(float)) {
    const float x = mt_float(fn, name, o);
    mt_check(fn, name, chk(x));
    return x;
}

// g (array('f') of n_ch * k values, written) and k: returns g, sets *k_out and *n_out.
static float *mt_update_g(const char *fn, const char *name, mp_obj_t g_in, mp_obj_t k_in, int32_t *k_out,
                          size_t *n_out) {
    size_t n;
    (void)mt_buf(fn, name, g_in, MT_F32, -1, 0, &n);
    float *g = mt_out_f32(fn, name, g_in, (int32_t)n);
    const int32_t k = mt_int(fn, "k", k_in);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "k", mt_update_k_check(k, (uint32_t)n, v), v);
    *k_out = k;
    *n_out = n;
    return g;
}
#endif

#endif
