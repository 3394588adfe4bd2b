// The one binding layer of microtrain's kernels. It builds two ways:
//  - as a dynamic native module (_microtrain.mpy) when MICROPY_ENABLE_DYNRUNTIME
//    is defined by py/dynruntime.mk (see Makefile in this folder);
//  - as a user C module baked into firmware (micropython.mk / .cmake).
// Every entry point checks each buffer's type, length and alignment and each
// descriptor before a kernel runs, and raises TypeError / ValueError naming
// the function and the argument. Nothing here allocates except the message
// string of an exception that is being raised.
// MicroPython's own headers have unused parameters; our code is held to
// -Wextra, theirs is not.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#ifdef MICROPY_ENABLE_DYNRUNTIME
#include "py/dynruntime.h"
#else
#include "py/runtime.h"
#endif
#pragma GCC diagnostic pop

#include "py/objarray.h"

#include "mt_kernels.h"
#include "mtm_loader.h"

// ---------------------------------------------------------------------------
// Module table. The MP_QSTR_ names are spelled out (not token-pasted)
// because the natmod linker finds qstrs by scanning the raw source.

#if MT_HAS_FLOAT
#define MT_FLOAT_FUNCS(X) \
    X(MP_QSTR_conv2d_s8_grad_weight_f32, mod_conv2d_s8_grad_weight_f32_obj) \
    X(MP_QSTR_linear_s8_grad_weight_f32, mod_linear_s8_grad_weight_f32_obj) \
    X(MP_QSTR_f32_axpy_i32, mod_f32_axpy_i32_obj) \
    X(MP_QSTR_update_f32_check, mod_update_f32_check_obj) \
    X(MP_QSTR_update_f32_decay, mod_update_f32_decay_obj) \
    X(MP_QSTR_update_f32_standardize, mod_update_f32_standardize_obj) \
    X(MP_QSTR_update_f32_axpby, mod_update_f32_axpby_obj) \
    X(MP_QSTR_update_f32_momentum, mod_update_f32_momentum_obj) \
    X(MP_QSTR_update_f32_scale, mod_update_f32_scale_obj) \
    X(MP_QSTR_update_f32_adam, mod_update_f32_adam_obj) \
    X(MP_QSTR_update_s8_apply, mod_update_s8_apply_obj) \
    X(MP_QSTR_update_s8_apply_keep, mod_update_s8_apply_keep_obj) \
    X(MP_QSTR_update_f32_ratios, mod_update_f32_ratios_obj)
#else
#define MT_FLOAT_FUNCS(X)
#endif

#define MT_FUNCS(X) \
    X(MP_QSTR_conv2d_s8_forward, mod_conv2d_s8_forward_obj) \
    X(MP_QSTR_conv2d_s8_grad_input, mod_conv2d_s8_grad_input_obj) \
    X(MP_QSTR_conv2d_s8_grad_weight, mod_conv2d_s8_grad_weight_obj) \
    X(MP_QSTR_linear_s8_forward, mod_linear_s8_forward_obj) \
    X(MP_QSTR_linear_s8_grad_input, mod_linear_s8_grad_input_obj) \
    X(MP_QSTR_linear_s8_grad_weight, mod_linear_s8_grad_weight_obj) \
    X(MP_QSTR_relu_s8_forward, mod_relu_s8_forward_obj) \
    X(MP_QSTR_relu6_s8_forward, mod_relu6_s8_forward_obj) \
    X(MP_QSTR_relu_s8_backward, mod_relu_s8_backward_obj) \
    X(MP_QSTR_relu6_s8_backward, mod_relu6_s8_backward_obj) \
    X(MP_QSTR_maxpool_s8_forward, mod_maxpool_s8_forward_obj) \
    X(MP_QSTR_maxpool_s8_grad_input, mod_maxpool_s8_grad_input_obj) \
    X(MP_QSTR_avgpool_s8_forward, mod_avgpool_s8_forward_obj) \
    X(MP_QSTR_avgpool_s8_grad_input, mod_avgpool_s8_grad_input_obj) \
    X(MP_QSTR_maxpool_s8_grad_input_act, mod_maxpool_s8_grad_input_act_obj) \
    X(MP_QSTR_avgpool_s8_grad_input_act, mod_avgpool_s8_grad_input_act_obj) \
    X(MP_QSTR_global_avgpool_s8_forward, mod_global_avgpool_s8_forward_obj) \
    X(MP_QSTR_global_avgpool_s8_grad_input, mod_global_avgpool_s8_grad_input_obj) \
    X(MP_QSTR_add_s8_forward, mod_add_s8_forward_obj) \
    X(MP_QSTR_add_s8_grad_merge, mod_add_s8_grad_merge_obj) \
    X(MP_QSTR_conv2d_add_s8_forward, mod_conv2d_add_s8_forward_obj) \
    X(MP_QSTR_concat_s8_forward, mod_concat_s8_forward_obj) \
    X(MP_QSTR_concat_s8_grad_input, mod_concat_s8_grad_input_obj) \
    X(MP_QSTR_upsample_s8_forward, mod_upsample_s8_forward_obj) \
    X(MP_QSTR_upsample_s8_grad_input, mod_upsample_s8_grad_input_obj) \
    X(MP_QSTR_softmax_xent_s8, mod_softmax_xent_s8_obj) \
    X(MP_QSTR_l1_norm_s8, mod_l1_norm_s8_obj) \
    X(MP_QSTR_topk_mask, mod_topk_mask_obj) \
    X(MP_QSTR_zo_perturb_s8, mod_zo_perturb_s8_obj) \
    X(MP_QSTR_zo_perturb_h_s8, mod_zo_perturb_h_s8_obj) \
    X(MP_QSTR_zo_update_s8, mod_zo_update_s8_obj) \
    X(MP_QSTR_update_u8_touch, mod_update_u8_touch_obj) \
    X(MP_QSTR_dyn_requant_s8, mod_dyn_requant_s8_obj) \
    X(MP_QSTR_lut_s8_forward, mod_lut_s8_forward_obj) \
    X(MP_QSTR_lut_s8_grad_input, mod_lut_s8_grad_input_obj) \
    X(MP_QSTR_mtm_validate, mod_mtm_validate_obj) \
    X(MP_QSTR_mtm_info, mod_mtm_info_obj) \
    X(MP_QSTR_mtm_tensor, mod_mtm_tensor_obj) \
    X(MP_QSTR_mtm_layer, mod_mtm_layer_obj) \
    X(MP_QSTR_mtm_view, mod_mtm_view_obj)

#ifdef MICROPY_ENABLE_DYNRUNTIME

// mpy_init comes first in the object: on armv6m the loader enters it with a
// Thumb-1 branch that reaches only +-2 KiB.
#define MT_DECLARE(q, obj) static const mp_obj_fun_builtin_var_t obj;
MT_FUNCS(MT_DECLARE)
MT_FLOAT_FUNCS(MT_DECLARE)

#if defined(MT_SOFT_FLOAT)
// A soft-float module (armv6m / armv7m) also loads into hard-float firmware
// (a Cortex-M4F/M7 build accepts armv6m .mpy files), which returns floats in
// s0 where this module reads r0: every scale would be garbage. So read back
// two known floats: the runtime makes them from their bits in memory (no
// float crosses the call boundary on the way in; firmware without float
// support gives a small int, and raises nothing). On a mismatch the float
// entry points are left out and HAS_FLOAT is False, so microtrain uses its
// pure-Python float kernels.
static bool mt_float_abi_probe(uint32_t bits) {
    union { float f; uint32_t u; } v;
    v.u = bits;
    const mp_obj_t o = mp_binary_get_val_array('f', &v.f, 0);
    if (mp_obj_is_small_int(o)) {
        return false;
    }
    v.f = mp_obj_get_float_to_f(o);
    return v.u == bits;
}

static bool mt_float_abi_ok(void) {
    return mt_float_abi_probe(0xC0400000u) && mt_float_abi_probe(0x3EAAAAABu);  // -3.0f, 1/3 rounded
}
#else
static bool mt_float_abi_ok(void) {
    return true;
}
#endif

mp_obj_t mpy_init(mp_obj_fun_bc_t *self, size_t n_args, size_t n_kw, mp_obj_t *args) {
    (void)n_args;
    (void)n_kw;
    (void)args;
    MP_DYNRUNTIME_INIT_ENTRY
    #define MT_STORE(q, obj) mp_store_global(q, MP_OBJ_FROM_PTR(&obj));
    MT_FUNCS(MT_STORE)
    const bool has_float = MT_HAS_FLOAT && mt_float_abi_ok();
    if (has_float) {
        MT_FLOAT_FUNCS(MT_STORE)
    }
    mp_store_global(MP_QSTR_HAS_FLOAT, mp_obj_new_bool(has_float));
    MP_DYNRUNTIME_INIT_EXIT
}

#endif


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
        const int32_t v[MT_MSG_NVALS] = {(int32_t)nelem, n, 0};
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
static void mt_no_overlap(const char *fn, const char *out_name, const void *out, size_t out_bytes,
                          const char *in_name, const void *in, size_t in_bytes) {
    const uintptr_t o0 = (uintptr_t)out, i0 = (uintptr_t)in;
    if (o0 < i0 + in_bytes && i0 < o0 + out_bytes) {
        char what[64];
        const size_t pos = mt_msg_put_str(what, sizeof what, 0, "must not overlap ");
        what[mt_msg_put_str(what, sizeof what, pos, in_name)] = 0;
        MT_VALUE_ERR(fn, out_name, what);
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

// The _act kernels' mask bounds: lo, hi checked in that order, then hi >= lo.
static void mt_act_bounds(const char *fn, mp_obj_t lo_o, mp_obj_t hi_o, int32_t *lo, int32_t *hi) {
    int32_t v[MT_MSG_NVALS];
    *lo = mt_int(fn, "lo", lo_o);
    mt_check_v(fn, "lo", mt_act_lo_check(*lo, v), v);
    *hi = mt_int(fn, "hi", hi_o);
    mt_check_v(fn, "hi", mt_act_hi_check(*hi, v), v);
    mt_check(fn, "hi", mt_act_order_check(*lo, *hi));
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
        mt_act_bounds(fn, args[7], args[8], lo, hi);
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
        const int32_t vl[MT_MSG_NVALS] = {(int32_t)nw, *n * k, 0};
        mt_raise(&mp_type_ValueError, fn, "gw", MT_MSG_LENGTH, vl);
    }
    mt_check_v(fn, "mask", mt_gw_window_mask_check(mask, *c0, *n, out_c, v), v);
}
#endif

// Descriptors: array('i') of exactly N ints copied into the params struct.
typedef union {
    mt_conv2d_params_t s;
    mt_conv2d_dil_params_t d;
    int32_t a[MT_CONV2D_DIL_NPARAMS];
} mt_conv2d_desc_u;
typedef union {
    mt_linear_params_t s;
    int32_t a[MT_LINEAR_NPARAMS];
} mt_linear_desc_u;
typedef union {
    mt_pool_params_t s;
    int32_t a[MT_POOL_NPARAMS];
} mt_pool_desc_u;
typedef union {
    mt_add_params_t s;
    int32_t a[MT_ADD_NPARAMS];
} mt_add_desc_u;
typedef union {
    mt_concat_params_t s;
    int32_t a[MT_CONCAT_NPARAMS];
} mt_concat_desc_u;
typedef union {
    mt_upsample_params_t s;
    int32_t a[MT_UPSAMPLE_NPARAMS];
} mt_upsample_desc_u;

static void mt_desc(const char *fn, mp_obj_t o, int32_t *dst, int32_t n) {
    const int32_t *src = mt_in_i32(fn, "desc", o, n);
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
        const int32_t v[MT_MSG_NVALS] = {(int32_t)(n < 0x7FFFFFFF ? n : 0x7FFFFFFF), MT_CONV2D_NPARAMS, 0};
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
// Fills *u (no struct return: that would need memcpy, absent in natmods).
static const mt_linear_params_t *mt_linear_desc(const char *fn, mp_obj_t o, mt_linear_desc_u *u) {
    mt_desc(fn, o, u->a, MT_LINEAR_NPARAMS);
    mt_check(fn, "desc", mt_linear_check(&u->s));
    return &u->s;
}
// Fills *u (no struct return: that would need memcpy, absent in natmods).
static const mt_pool_params_t *mt_pool_desc(const char *fn, mp_obj_t o, mt_pool_desc_u *u) {
    mt_desc(fn, o, u->a, MT_POOL_NPARAMS);
    mt_check(fn, "desc", mt_pool_check(&u->s));
    return &u->s;
}

// Sizes follow from a checked descriptor and stay below 2^26.
static int32_t mt_conv_in_n(const mt_conv2d_params_t *p) {
    return p->in_h * p->in_w * p->in_c;
}
static int32_t mt_conv_out_n(const mt_conv2d_params_t *p) {
    return p->out_h * p->out_w * p->out_c;
}
static int32_t mt_conv_cpg(const mt_conv2d_params_t *p) {
    return (int32_t)mt_udiv_u32((uint32_t)p->in_c, (uint32_t)p->groups);
}
static int32_t mt_conv_w_n(const mt_conv2d_params_t *p) {
    return p->out_c * p->k_h * p->k_w * mt_conv_cpg(p);
}

// Forward of a conv or linear layer: shared parameter checks.
static void mt_check_qparams(const char *fn, const int32_t *bias, const int32_t *mult, const int32_t *shift,
                             int32_t n) {
    mt_check(fn, "bias", mt_bias_check(bias, n));
    mt_check(fn, "mult/shift", mt_requant_params_check(mult, shift, n));
}

// ---------------------------------------------------------------------------
// conv2d

static mp_obj_t mod_conv2d_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "conv2d_s8_forward";
    (void)n_args;
    mt_conv2d_desc_u pu;
    int dil;
    const mt_conv2d_params_t *p = mt_conv2d_desc(fn, args[0], &pu, &dil);
    const int32_t nin = mt_conv_in_n(p), nout = mt_conv_out_n(p);
    const int8_t *x = mt_in_s8(fn, "x", args[1], nin, NULL);
    const int8_t *w = mt_in_s8(fn, "w", args[2], mt_conv_w_n(p), NULL);
    const int32_t *bias = mt_in_i32(fn, "bias", args[3], p->out_c);
    const int32_t *mult = mt_in_i32(fn, "mult", args[4], p->out_c);
    const int32_t *shift = mt_in_i32(fn, "shift", args[5], p->out_c);
    int8_t *y = mt_out_s8(fn, "y", args[6], nout);
    mt_check_qparams(fn, bias, mult, shift, p->out_c);
    mt_no_overlap(fn, "y", y, (size_t)nout, "x", x, (size_t)nin);
    mt_no_overlap(fn, "y", y, (size_t)nout, "w", w, (size_t)mt_conv_w_n(p));
    if (dil) {
        mt_conv2d_dil_s8_forward(&pu.d, x, w, bias, mult, shift, y);
    } else {
        mt_conv2d_s8_forward(p, x, w, bias, mult, shift, y);
    }
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_conv2d_s8_forward_obj, 7, 7, mod_conv2d_s8_forward);

static mp_obj_t mod_conv2d_s8_grad_input(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "conv2d_s8_grad_input";
    mt_conv2d_desc_u pu;
    int dil;
    const mt_conv2d_params_t *p = mt_conv2d_desc(fn, args[0], &pu, &dil);
    const int32_t nin = mt_conv_in_n(p), nout = mt_conv_out_n(p);
    const int8_t *e = mt_in_s8(fn, "e", args[1], nout, NULL);
    const int8_t *w = mt_in_s8(fn, "w", args[2], mt_conv_w_n(p), NULL);
    const int32_t *wr = mt_in_i32(fn, "wr", args[3], p->out_c);
    const uint8_t *mask = mt_mask(fn, args[4], p->out_c);
    int32_t *acc = mt_out_i32(fn, "acc", args[5], nin);
    int8_t *ein = mt_out_s8(fn, "ein", args[6], nin);
    int32_t lo, hi;
    mt_grad_act(fn, n_args, args, &lo, &hi);
    const int32_t opg = (int32_t)mt_udiv_u32((uint32_t)p->out_c, (uint32_t)p->groups);
    mt_check(fn, "wr", mt_wr_check(wr, p->out_c, p->k_h * p->k_w * opg));
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "e", e, (size_t)nout);
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "acc", acc, (size_t)nin * 4);
    mt_no_overlap(fn, "acc", acc, (size_t)nin * 4, "wr", wr, (size_t)p->out_c * 4);
    mt_no_overlap(fn, "acc", acc, (size_t)nin * 4, "e", e, (size_t)nout);
    mt_no_overlap(fn, "acc", acc, (size_t)nin * 4, "w", w, (size_t)mt_conv_w_n(p));
    if (mask) {
        mt_no_overlap(fn, "acc", acc, (size_t)nin * 4, "mask", mask, (size_t)p->out_c);
        mt_no_overlap(fn, "ein", ein, (size_t)nin, "mask", mask, (size_t)p->out_c);
    }
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "w", w, (size_t)mt_conv_w_n(p));
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "wr", wr, (size_t)p->out_c * 4);
    return mp_obj_new_int(dil ? mt_conv2d_dil_s8_grad_input(&pu.d, e, w, wr, mask, lo, hi, acc, ein)
                              : mt_conv2d_s8_grad_input(p, e, w, wr, mask, lo, hi, acc, ein));
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_conv2d_s8_grad_input_obj, 7, 9, mod_conv2d_s8_grad_input);

static mp_obj_t mod_conv2d_s8_grad_weight(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "conv2d_s8_grad_weight";
    (void)n_args;
    mt_conv2d_desc_u pu;
    int dil;
    const mt_conv2d_params_t *p = mt_conv2d_desc(fn, args[0], &pu, &dil);
    const int8_t *x = mt_in_s8(fn, "x", args[1], mt_conv_in_n(p), NULL);
    const int8_t *e = mt_in_s8(fn, "e", args[2], mt_conv_out_n(p), NULL);
    const uint8_t *mask = mt_mask(fn, args[3], p->out_c);
    int32_t *gw = mt_out_i32(fn, "gw", args[4], mt_conv_w_n(p));
    int32_t *gb = mt_out_i32(fn, "gb", args[5], p->out_c);
    mt_no_overlap_grads(fn, gw, (size_t)mt_conv_w_n(p) * 4, gb, (size_t)p->out_c * 4, x,
                        (size_t)mt_conv_in_n(p), e, (size_t)mt_conv_out_n(p));
    if (dil) {
        mt_conv2d_dil_s8_grad_weight(&pu.d, x, e, mask, gw, gb);
    } else {
        mt_conv2d_s8_grad_weight(p, x, e, mask, gw, gb);
    }
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_conv2d_s8_grad_weight_obj, 6, 6, mod_conv2d_s8_grad_weight);

#if MT_HAS_FLOAT
static mp_obj_t mod_conv2d_s8_grad_weight_f32(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "conv2d_s8_grad_weight_f32";
    mt_conv2d_desc_u pu;
    int dil;
    const mt_conv2d_params_t *p = mt_conv2d_desc(fn, args[0], &pu, &dil);
    const int8_t *x = mt_in_s8(fn, "x", args[1], mt_conv_in_n(p), NULL);
    const int8_t *e = mt_in_s8(fn, "e", args[2], mt_conv_out_n(p), NULL);
    const uint8_t *mask = mt_mask(fn, args[3], p->out_c);
    const float w_scale = mt_float(fn, "w_scale", args[4]);
    const float b_scale = mt_float(fn, "b_scale", args[5]);
    const int32_t k = p->k_h * p->k_w * mt_conv_cpg(p);
    float *gw, *gb;
    int32_t c0, n;
    mt_gw_window(fn, n_args, args, mask, p->out_c, k, &gw, &gb, &c0, &n);
    mt_no_overlap_grads(fn, gw, (size_t)(n * k) * 4, gb, (size_t)n * 4, x, (size_t)mt_conv_in_n(p), e,
                        (size_t)mt_conv_out_n(p));
    if (dil) {
        mt_conv2d_dil_s8_grad_weight_f32(&pu.d, x, e, mask, w_scale, b_scale, gw, gb, c0);
    } else {
        mt_conv2d_s8_grad_weight_f32(p, x, e, mask, w_scale, b_scale, gw, gb, c0);
    }
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_conv2d_s8_grad_weight_f32_obj, 8, 9, mod_conv2d_s8_grad_weight_f32);
#endif

// ---------------------------------------------------------------------------
// linear

static mp_obj_t mod_linear_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "linear_s8_forward";
    (void)n_args;
    mt_linear_desc_u pu;
    const mt_linear_params_t *p = mt_linear_desc(fn, args[0], &pu);
    const int8_t *x = mt_in_s8(fn, "x", args[1], p->in_n, NULL);
    const int8_t *w = mt_in_s8(fn, "w", args[2], p->in_n * p->out_n, NULL);
    const int32_t *bias = mt_in_i32(fn, "bias", args[3], p->out_n);
    const int32_t *mult = mt_in_i32(fn, "mult", args[4], p->out_n);
    const int32_t *shift = mt_in_i32(fn, "shift", args[5], p->out_n);
    int8_t *y = mt_out_s8(fn, "y", args[6], p->out_n);
    mt_check_qparams(fn, bias, mult, shift, p->out_n);
    mt_no_overlap(fn, "y", y, (size_t)p->out_n, "x", x, (size_t)p->in_n);
    mt_no_overlap(fn, "y", y, (size_t)p->out_n, "w", w, (size_t)(p->in_n * p->out_n));
    mt_linear_s8_forward(p, x, w, bias, mult, shift, y);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_linear_s8_forward_obj, 7, 7, mod_linear_s8_forward);

static mp_obj_t mod_linear_s8_grad_input(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "linear_s8_grad_input";
    mt_linear_desc_u pu;
    const mt_linear_params_t *p = mt_linear_desc(fn, args[0], &pu);
    const int8_t *e = mt_in_s8(fn, "e", args[1], p->out_n, NULL);
    const int8_t *w = mt_in_s8(fn, "w", args[2], p->in_n * p->out_n, NULL);
    const int32_t *wr = mt_in_i32(fn, "wr", args[3], p->out_n);
    const uint8_t *mask = mt_mask(fn, args[4], p->out_n);
    int32_t *acc = mt_out_i32(fn, "acc", args[5], p->in_n);
    int8_t *ein = mt_out_s8(fn, "ein", args[6], p->in_n);
    int32_t lo, hi;
    mt_grad_act(fn, n_args, args, &lo, &hi);
    mt_check(fn, "wr", mt_wr_check(wr, p->out_n, p->out_n));
    mt_no_overlap(fn, "ein", ein, (size_t)p->in_n, "e", e, (size_t)p->out_n);
    mt_no_overlap(fn, "ein", ein, (size_t)p->in_n, "acc", acc, (size_t)p->in_n * 4);
    mt_no_overlap(fn, "acc", acc, (size_t)p->in_n * 4, "wr", wr, (size_t)p->out_n * 4);
    mt_no_overlap(fn, "acc", acc, (size_t)p->in_n * 4, "e", e, (size_t)p->out_n);
    mt_no_overlap(fn, "acc", acc, (size_t)p->in_n * 4, "w", w, (size_t)(p->in_n * p->out_n));
    if (mask) {
        mt_no_overlap(fn, "acc", acc, (size_t)p->in_n * 4, "mask", mask, (size_t)p->out_n);
        mt_no_overlap(fn, "ein", ein, (size_t)p->in_n, "mask", mask, (size_t)p->out_n);
    }
    mt_no_overlap(fn, "ein", ein, (size_t)p->in_n, "w", w, (size_t)(p->in_n * p->out_n));
    mt_no_overlap(fn, "ein", ein, (size_t)p->in_n, "wr", wr, (size_t)p->out_n * 4);
    return mp_obj_new_int(mt_linear_s8_grad_input(p, e, w, wr, mask, lo, hi, acc, ein));
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_linear_s8_grad_input_obj, 7, 9, mod_linear_s8_grad_input);

static mp_obj_t mod_linear_s8_grad_weight(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "linear_s8_grad_weight";
    (void)n_args;
    mt_linear_desc_u pu;
    const mt_linear_params_t *p = mt_linear_desc(fn, args[0], &pu);
    const int8_t *x = mt_in_s8(fn, "x", args[1], p->in_n, NULL);
    const int8_t *e = mt_in_s8(fn, "e", args[2], p->out_n, NULL);
    const uint8_t *mask = mt_mask(fn, args[3], p->out_n);
    int32_t *gw = mt_out_i32(fn, "gw", args[4], p->in_n * p->out_n);
    int32_t *gb = mt_out_i32(fn, "gb", args[5], p->out_n);
    mt_no_overlap_grads(fn, gw, (size_t)(p->in_n * p->out_n) * 4, gb, (size_t)p->out_n * 4, x,
                        (size_t)p->in_n, e, (size_t)p->out_n);
    mt_linear_s8_grad_weight(p, x, e, mask, gw, gb);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_linear_s8_grad_weight_obj, 6, 6, mod_linear_s8_grad_weight);

#if MT_HAS_FLOAT
static mp_obj_t mod_linear_s8_grad_weight_f32(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "linear_s8_grad_weight_f32";
    mt_linear_desc_u pu;
    const mt_linear_params_t *p = mt_linear_desc(fn, args[0], &pu);
    const int8_t *x = mt_in_s8(fn, "x", args[1], p->in_n, NULL);
    const int8_t *e = mt_in_s8(fn, "e", args[2], p->out_n, NULL);
    const uint8_t *mask = mt_mask(fn, args[3], p->out_n);
    const float w_scale = mt_float(fn, "w_scale", args[4]);
    const float b_scale = mt_float(fn, "b_scale", args[5]);
    float *gw, *gb;
    int32_t c0, n;
    mt_gw_window(fn, n_args, args, mask, p->out_n, p->in_n, &gw, &gb, &c0, &n);
    mt_no_overlap_grads(fn, gw, (size_t)(n * p->in_n) * 4, gb, (size_t)n * 4, x, (size_t)p->in_n, e,
                        (size_t)p->out_n);
    mt_linear_s8_grad_weight_f32(p, x, e, mask, w_scale, b_scale, gw, gb, c0);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_linear_s8_grad_weight_f32_obj, 8, 9, mod_linear_s8_grad_weight_f32);
#endif

// ---------------------------------------------------------------------------
// relu / relu6

static int32_t mt_zp(const char *fn, const char *name, mp_obj_t o) {
    const int32_t x = mt_int(fn, name, o);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, name, mt_level_check(x, v), v);
    return x;
}

// Forward may run in place (y is x) but not on partially overlapping buffers.
static void mt_inplace_ok(const char *fn, const void *y, const void *x, size_t n) {
    if (y != x) {
        mt_no_overlap(fn, "y", y, n, "x", x, n);
    }
}

static mp_obj_t mod_relu_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "relu_s8_forward";
    (void)n_args;
    size_t n;
    const int8_t *x = mt_in_s8(fn, "x", args[0], -1, &n);
    const int32_t zp = mt_zp(fn, "zp", args[1]);
    int8_t *y = mt_out_s8(fn, "y", args[2], (int32_t)n);
    mt_inplace_ok(fn, y, x, n);
    mt_relu_s8_forward(x, y, n, zp);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_relu_s8_forward_obj, 3, 3, mod_relu_s8_forward);

static mp_obj_t mod_relu6_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "relu6_s8_forward";
    (void)n_args;
    size_t n;
    const int8_t *x = mt_in_s8(fn, "x", args[0], -1, &n);
    const int32_t zp = mt_zp(fn, "zp", args[1]);
    const int32_t q6 = mt_zp(fn, "q6", args[2]);
    int8_t *y = mt_out_s8(fn, "y", args[3], (int32_t)n);
    mt_check(fn, "q6", mt_q6_check(q6, zp));
    mt_inplace_ok(fn, y, x, n);
    mt_relu6_s8_forward(x, y, n, zp, q6);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_relu6_s8_forward_obj, 4, 4, mod_relu6_s8_forward);

static mp_obj_t mod_relu_s8_backward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "relu_s8_backward";
    (void)n_args;
    size_t n;
    const int8_t *y = mt_in_s8(fn, "y", args[0], -1, &n);
    const int32_t zp = mt_zp(fn, "zp", args[1]);
    int8_t *e = mt_out_s8(fn, "e", args[2], (int32_t)n);
    if ((const void *)e != (const void *)y) {
        mt_no_overlap(fn, "e", e, n, "y", y, n);
    }
    mt_relu_s8_backward(y, e, n, zp);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_relu_s8_backward_obj, 3, 3, mod_relu_s8_backward);

static mp_obj_t mod_relu6_s8_backward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "relu6_s8_backward";
    (void)n_args;
    size_t n;
    const int8_t *y = mt_in_s8(fn, "y", args[0], -1, &n);
    const int32_t zp = mt_zp(fn, "zp", args[1]);
    const int32_t q6 = mt_zp(fn, "q6", args[2]);
    int8_t *e = mt_out_s8(fn, "e", args[3], (int32_t)n);
    mt_check(fn, "q6", mt_q6_check(q6, zp));
    if ((const void *)e != (const void *)y) {
        mt_no_overlap(fn, "e", e, n, "y", y, n);
    }
    mt_relu6_s8_backward(y, e, n, zp, q6);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_relu6_s8_backward_obj, 4, 4, mod_relu6_s8_backward);

// ---------------------------------------------------------------------------
// pools

// A pool grad-input scratch: None (NULL) where the windows do not overlap.
static int32_t *mt_pool_acc(const char *fn, mp_obj_t o, const mt_pool_params_t *p, int32_t n) {
    if (o == mp_const_none) {
        mt_check(fn, "acc", mt_pool_no_acc_check(p));
        return NULL;
    }
    return mt_out_i32(fn, "acc", o, n);
}

static mp_obj_t mod_maxpool_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "maxpool_s8_forward";
    (void)n_args;
    mt_pool_desc_u pu;
    const mt_pool_params_t *p = mt_pool_desc(fn, args[0], &pu);
    const int32_t nin = p->in_h * p->in_w * p->c, nout = p->out_h * p->out_w * p->c;
    const int8_t *x = mt_in_s8(fn, "x", args[1], nin, NULL);
    int8_t *y = mt_out_s8(fn, "y", args[2], nout);
    mt_no_overlap(fn, "y", y, (size_t)nout, "x", x, (size_t)nin);
    mt_maxpool_s8_forward(p, x, y);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_maxpool_s8_forward_obj, 3, 3, mod_maxpool_s8_forward);

static mp_obj_t mod_maxpool_s8_grad_input(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "maxpool_s8_grad_input";
    (void)n_args;
    mt_pool_desc_u pu;
    const mt_pool_params_t *p = mt_pool_desc(fn, args[0], &pu);
    const int32_t nin = p->in_h * p->in_w * p->c, nout = p->out_h * p->out_w * p->c;
    const int8_t *x = mt_in_s8(fn, "x", args[1], nin, NULL);
    const int8_t *e = mt_in_s8(fn, "e", args[2], nout, NULL);
    int32_t *acc = mt_pool_acc(fn, args[3], p, nin);
    int8_t *ein = mt_out_s8(fn, "ein", args[4], nin);
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "x", x, (size_t)nin);
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "e", e, (size_t)nout);
    if (acc != NULL) {
        mt_no_overlap(fn, "ein", ein, (size_t)nin, "acc", acc, (size_t)nin * 4);
    }
    return mp_obj_new_int(mt_maxpool_s8_grad_input(p, x, e, acc, ein));
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_maxpool_s8_grad_input_obj, 5, 5, mod_maxpool_s8_grad_input);

static mp_obj_t mod_avgpool_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "avgpool_s8_forward";
    (void)n_args;
    mt_pool_desc_u pu;
    const mt_pool_params_t *p = mt_pool_desc(fn, args[0], &pu);
    const int32_t nin = p->in_h * p->in_w * p->c, nout = p->out_h * p->out_w * p->c;
    const int8_t *x = mt_in_s8(fn, "x", args[1], nin, NULL);
    int8_t *y = mt_out_s8(fn, "y", args[2], nout);
    mt_no_overlap(fn, "y", y, (size_t)nout, "x", x, (size_t)nin);
    mt_avgpool_s8_forward(p, x, y);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_avgpool_s8_forward_obj, 3, 3, mod_avgpool_s8_forward);

static mp_obj_t mod_avgpool_s8_grad_input(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "avgpool_s8_grad_input";
    (void)n_args;
    mt_pool_desc_u pu;
    const mt_pool_params_t *p = mt_pool_desc(fn, args[0], &pu);
    const int32_t nin = p->in_h * p->in_w * p->c, nout = p->out_h * p->out_w * p->c;
    const int8_t *e = mt_in_s8(fn, "e", args[1], nout, NULL);
    int32_t *acc = mt_pool_acc(fn, args[2], p, nin);
    int8_t *ein = mt_out_s8(fn, "ein", args[3], nin);
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "e", e, (size_t)nout);
    if (acc != NULL) {
        mt_no_overlap(fn, "ein", ein, (size_t)nin, "acc", acc, (size_t)nin * 4);
    }
    return mp_obj_new_int(mt_avgpool_s8_grad_input(p, e, acc, ein));
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_avgpool_s8_grad_input_obj, 4, 4, mod_avgpool_s8_grad_input);

// Grad input with the activation mask: (desc, t, e, lo, hi, ein), t = x (max) or y
// (avg). ein may be t itself, nothing else may overlap it.
static mp_obj_t mt_pool_grad_act(const char *fn, const char *t_name, const mp_obj_t *args, int is_max) {
    mt_pool_desc_u pu;
    const mt_pool_params_t *p = mt_pool_desc(fn, args[0], &pu);
    mt_check(fn, "desc", mt_pool_disjoint_check(p));
    const int32_t nin = p->in_h * p->in_w * p->c, nout = p->out_h * p->out_w * p->c;
    const int8_t *t = mt_in_s8(fn, t_name, args[1], nin, NULL);
    const int8_t *e = mt_in_s8(fn, "e", args[2], nout, NULL);
    int32_t lo, hi;
    mt_act_bounds(fn, args[3], args[4], &lo, &hi);
    int8_t *ein = mt_out_s8(fn, "ein", args[5], nin);
    if ((const void *)ein != (const void *)t) {
        mt_no_overlap(fn, "ein", ein, (size_t)nin, t_name, t, (size_t)nin);
    }
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "e", e, (size_t)nout);
    return mp_obj_new_int(is_max ? mt_maxpool_s8_grad_input_act(p, t, e, lo, hi, ein)
                                 : mt_avgpool_s8_grad_input_act(p, t, e, lo, hi, ein));
}

static mp_obj_t mod_maxpool_s8_grad_input_act(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    return mt_pool_grad_act("maxpool_s8_grad_input_act", "x", args, 1);
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_maxpool_s8_grad_input_act_obj, 6, 6, mod_maxpool_s8_grad_input_act);

static mp_obj_t mod_avgpool_s8_grad_input_act(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    return mt_pool_grad_act("avgpool_s8_grad_input_act", "y", args, 0);
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_avgpool_s8_grad_input_act_obj, 6, 6, mod_avgpool_s8_grad_input_act);

static int32_t mt_hw(const char *fn, mp_obj_t o) {
    const int32_t hw = mt_int(fn, "hw", o);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "hw", mt_hw_check(hw, v), v);
    return hw;
}

static int32_t mt_channels(const char *fn, mp_obj_t o) {
    const int32_t c = mt_int(fn, "c", o);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "c", mt_channels_check(c, v), v);
    return c;
}

static mp_obj_t mod_global_avgpool_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "global_avgpool_s8_forward";
    (void)n_args;
    const int32_t hw = mt_hw(fn, args[1]);
    const int32_t c = mt_channels(fn, args[2]);
    mt_check(fn, "x", mt_hw_c_check(hw, c));
    const int8_t *x = mt_in_s8(fn, "x", args[0], hw * c, NULL);
    int8_t *y = mt_out_s8(fn, "y", args[3], c);
    mt_no_overlap(fn, "y", y, (size_t)c, "x", x, (size_t)(hw * c));
    mt_global_avgpool_s8_forward(x, hw, c, y);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_global_avgpool_s8_forward_obj, 4, 4, mod_global_avgpool_s8_forward);

static mp_obj_t mod_global_avgpool_s8_grad_input(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "global_avgpool_s8_grad_input";
    (void)n_args;
    size_t c;
    const int8_t *e = mt_in_s8(fn, "e", args[0], -1, &c);
    const int32_t hw = mt_hw(fn, args[1]);
    mt_check(fn, "e", mt_gap_channels_check(hw, (uint32_t)c));
    int8_t *ein = mt_out_s8(fn, "ein", args[2], hw * (int32_t)c);
    mt_no_overlap(fn, "ein", ein, (size_t)hw * c, "e", e, c);
    mt_global_avgpool_s8_grad_input(e, hw, (int32_t)c, ein);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_global_avgpool_s8_grad_input_obj, 3, 3, mod_global_avgpool_s8_grad_input);

// ---------------------------------------------------------------------------
// residual add

static mp_obj_t mod_add_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "add_s8_forward";
    (void)n_args;
    mt_add_desc_u u;
    mt_desc(fn, args[0], u.a, MT_ADD_NPARAMS);
    mt_check(fn, "desc", mt_add_check(&u.s));
    const int32_t n = u.s.n;
    const int8_t *x1 = mt_in_s8(fn, "x1", args[1], n, NULL);
    const int8_t *x2 = mt_in_s8(fn, "x2", args[2], n, NULL);
    int8_t *y = mt_out_s8(fn, "y", args[3], n);
    // Element-wise: y may be exactly x1 or x2 (in place), not partially overlapping.
    if (y != x1) {
        mt_no_overlap(fn, "y", y, (size_t)n, "x1", x1, (size_t)n);
    }
    if (y != x2) {
        mt_no_overlap(fn, "y", y, (size_t)n, "x2", x2, (size_t)n);
    }
    mt_add_s8_forward(&u.s, x1, x2, y);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_add_s8_forward_obj, 4, 4, mod_add_s8_forward);

// conv2d_s8_forward into add_s8_forward, over the add's other input, a block of rows at a time
// (add.c): (desc, x, w, bias, mult, shift, add_desc, side, skip, tile).
static mp_obj_t mod_conv2d_add_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "conv2d_add_s8_forward";
    (void)n_args;
    mt_conv2d_desc_u pu;
    int dil;
    const mt_conv2d_params_t *p = mt_conv2d_desc(fn, args[0], &pu, &dil);
    if (dil) {
        MT_VALUE_ERR(fn, "desc", "a dilated conv has no row-block form");
    }
    const int32_t nin = mt_conv_in_n(p), nout = mt_conv_out_n(p), nw = mt_conv_w_n(p);
    const int8_t *x = mt_in_s8(fn, "x", args[1], nin, NULL);
    const int8_t *w = mt_in_s8(fn, "w", args[2], nw, NULL);
    const int32_t *bias = mt_in_i32(fn, "bias", args[3], p->out_c);
    const int32_t *mult = mt_in_i32(fn, "mult", args[4], p->out_c);
    const int32_t *shift = mt_in_i32(fn, "shift", args[5], p->out_c);
    mt_check_qparams(fn, bias, mult, shift, p->out_c);
    mt_add_desc_u u;
    const int32_t *ad = mt_in_i32(fn, "add_desc", args[6], MT_ADD_NPARAMS);
    for (int32_t i = 0; i < MT_ADD_NPARAMS; ++i) {
        u.a[i] = ad[i];
    }
    mt_check(fn, "add_desc", mt_add_check(&u.s));
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "add_desc", mt_conv_add_n_check(u.s.n, nout, v), v);
    const int32_t side = mt_int(fn, "side", args[7]);
    mt_check_v(fn, "side", mt_part_check(side, v), v);
    int8_t *skip = mt_out_s8(fn, "skip", args[8], nout);
    size_t nt;
    int8_t *tile = (int8_t *)mt_buf(fn, "tile", args[9], MT_S8, -1, 1, &nt);
    const int32_t row = p->out_w * p->out_c;
    mt_check_v(fn, "tile", mt_tile_check((uint32_t)nt, row, v), v);
    int32_t rows = (int32_t)mt_udiv_u32((uint32_t)nt, (uint32_t)row);
    if (rows > p->out_h) {
        rows = p->out_h;
    }
    const size_t used = (size_t)rows * (size_t)row;
    // the conv reads x and w while skip and tile are written: no two may share a byte
    mt_no_overlap(fn, "skip", skip, (size_t)nout, "x", x, (size_t)nin);
    mt_no_overlap(fn, "skip", skip, (size_t)nout, "w", w, (size_t)nw);
    mt_no_overlap(fn, "tile", tile, used, "x", x, (size_t)nin);
    mt_no_overlap(fn, "tile", tile, used, "w", w, (size_t)nw);
    mt_no_overlap(fn, "tile", tile, used, "skip", skip, (size_t)nout);
    mt_conv2d_add_s8_forward(p, x, w, bias, mult, shift, &u.s, side, skip, tile, rows);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_conv2d_add_s8_forward_obj, 10, 10, mod_conv2d_add_s8_forward);

static int32_t mt_ratio(const char *fn, const char *name, mp_obj_t o) {
    const int32_t r = mt_int(fn, name, o);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, name, mt_ratio_check(r, v), v);
    return r;
}

static mp_obj_t mod_add_s8_grad_merge(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "add_s8_grad_merge";
    (void)n_args;
    size_t n;
    const int8_t *ea = mt_in_s8(fn, "ea", args[0], -1, &n);
    const int32_t ra = mt_ratio(fn, "ra", args[1]);
    const int8_t *eb = mt_in_s8(fn, "eb", args[2], (int32_t)n, NULL);
    const int32_t rb = mt_ratio(fn, "rb", args[3]);
    int8_t *out = mt_out_s8(fn, "out", args[4], (int32_t)n);
    // out may be exactly ea or eb: each element is read before it is written
    // in the second pass, and the first pass only reads.
    if (out != ea) {
        mt_no_overlap(fn, "out", out, n, "ea", ea, n);
    }
    if (out != eb) {
        mt_no_overlap(fn, "out", out, n, "eb", eb, n);
    }
    return mp_obj_new_int(mt_add_s8_grad_merge(ea, ra, eb, rb, n, out));
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_add_s8_grad_merge_obj, 5, 5, mod_add_s8_grad_merge);

// ---------------------------------------------------------------------------
// channel concatenation, upsampling

static mp_obj_t mod_concat_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "concat_s8_forward";
    (void)n_args;
    mt_concat_desc_u u;
    mt_desc(fn, args[0], u.a, MT_CONCAT_NPARAMS);
    mt_check(fn, "desc", mt_concat_check(&u.s));
    const int32_t n1 = u.s.hw * u.s.c1, n2 = u.s.hw * u.s.c2, n = n1 + n2;
    const int8_t *x1 = mt_in_s8(fn, "x1", args[1], n1, NULL);
    const int8_t *x2 = mt_in_s8(fn, "x2", args[2], n2, NULL);
    int8_t *y = mt_out_s8(fn, "y", args[3], n);
    mt_no_overlap(fn, "y", y, (size_t)n, "x1", x1, (size_t)n1);
    mt_no_overlap(fn, "y", y, (size_t)n, "x2", x2, (size_t)n2);
    mt_concat_s8_forward(&u.s, x1, x2, y);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_concat_s8_forward_obj, 4, 4, mod_concat_s8_forward);

static mp_obj_t mod_concat_s8_grad_input(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "concat_s8_grad_input";
    (void)n_args;
    mt_concat_desc_u u;
    mt_desc(fn, args[0], u.a, MT_CONCAT_NPARAMS);
    mt_check(fn, "desc", mt_concat_check(&u.s));
    const int32_t n = u.s.hw * (u.s.c1 + u.s.c2);
    const int8_t *e = mt_in_s8(fn, "e", args[1], n, NULL);
    const int32_t part = mt_int(fn, "part", args[2]);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "part", mt_part_check(part, v), v);
    const int32_t m = u.s.hw * (part ? u.s.c2 : u.s.c1);
    int8_t *ein = mt_out_s8(fn, "ein", args[3], m);
    mt_no_overlap(fn, "ein", ein, (size_t)m, "e", e, (size_t)n);
    mt_concat_s8_grad_input(&u.s, e, part, ein);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_concat_s8_grad_input_obj, 4, 4, mod_concat_s8_grad_input);

static const mt_upsample_params_t *mt_upsample_desc(const char *fn, mp_obj_t o, mt_upsample_desc_u *u) {
    mt_desc(fn, o, u->a, MT_UPSAMPLE_NPARAMS);
    mt_check(fn, "desc", mt_upsample_check(&u->s));
    return &u->s;
}

static mp_obj_t mod_upsample_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "upsample_s8_forward";
    (void)n_args;
    mt_upsample_desc_u u;
    const mt_upsample_params_t *p = mt_upsample_desc(fn, args[0], &u);
    const int32_t nin = p->in_h * p->in_w * p->c, nout = p->out_h * p->out_w * p->c;
    const int8_t *x = mt_in_s8(fn, "x", args[1], nin, NULL);
    int8_t *y = mt_out_s8(fn, "y", args[2], nout);
    mt_no_overlap(fn, "y", y, (size_t)nout, "x", x, (size_t)nin);
    mt_upsample_s8_forward(p, x, y);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_upsample_s8_forward_obj, 3, 3, mod_upsample_s8_forward);

static mp_obj_t mod_upsample_s8_grad_input(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "upsample_s8_grad_input";
    (void)n_args;
    mt_upsample_desc_u u;
    const mt_upsample_params_t *p = mt_upsample_desc(fn, args[0], &u);
    const int32_t nin = p->in_h * p->in_w * p->c, nout = p->out_h * p->out_w * p->c;
    const int8_t *e = mt_in_s8(fn, "e", args[1], nout, NULL);
    int8_t *ein = mt_out_s8(fn, "ein", args[2], nin);
    mt_no_overlap(fn, "ein", ein, (size_t)nin, "e", e, (size_t)nout);
    return mp_obj_new_int(mt_upsample_s8_grad_input(p, e, ein));
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_upsample_s8_grad_input_obj, 3, 3, mod_upsample_s8_grad_input);

// ---------------------------------------------------------------------------
// softmax cross-entropy

static mp_obj_t mod_softmax_xent_s8(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "softmax_xent_s8";
    (void)n_args;
    size_t c;
    const int8_t *q = mt_in_s8(fn, "logits", args[0], -1, &c);
    mt_check(fn, "logits", mt_classes_check((uint32_t)c));
    const int32_t label = mt_int(fn, "label", args[1]);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "label", mt_label_check(label, (uint32_t)c, v), v);
    size_t n_lut;
    const uint32_t *lut = (const uint32_t *)mt_buf(fn, "lut", args[2], MT_U32, -1, 0, &n_lut);
    mt_check_v(fn, "lut", mt_softmax_lut_check(lut, (uint32_t)n_lut, v), v);
    int8_t *err = mt_out_s8(fn, "err", args[3], (int32_t)c);
    int32_t *stats = mt_out_i32(fn, "stats", args[4], 3);
    mt_no_overlap(fn, "err", err, c, "logits", q, c);
    return mp_obj_new_int(mt_softmax_xent_s8(q, (int32_t)c, label, lut, (int32_t)n_lut, err, stats));
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_softmax_xent_s8_obj, 5, 5, mod_softmax_xent_s8);

// ---------------------------------------------------------------------------
// lookup-table activations

static mp_obj_t mod_lut_s8_forward(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "lut_s8_forward";
    (void)n_args;
    size_t n;
    const int8_t *x = mt_in_s8(fn, "x", args[0], -1, &n);
    const int8_t *table = mt_in_s8(fn, "table", args[1], 256, NULL);
    int8_t *y = mt_out_s8(fn, "y", args[2], (int32_t)n);
    mt_inplace_ok(fn, y, x, n);
    mt_no_overlap(fn, "y", y, n, "table", table, 256);
    mt_lut_s8_forward(x, table, y, n);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_lut_s8_forward_obj, 3, 3, mod_lut_s8_forward);

static mp_obj_t mod_lut_s8_grad_input(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "lut_s8_grad_input";
    (void)n_args;
    size_t n;
    const int8_t *x = mt_in_s8(fn, "x", args[0], -1, &n);
    const int8_t *e = mt_in_s8(fn, "e", args[1], (int32_t)n, NULL);
    const int32_t *dtable = mt_in_i32(fn, "dtable", args[2], 256);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "dtable", mt_lut_dtable_check(dtable, v), v);
    int8_t *ein = mt_out_s8(fn, "ein", args[3], (int32_t)n);
    // ein may be exactly e (each element is read before it is written); x is
    // read again in the second pass, so ein must not touch it.
    if (ein != e) {
        mt_no_overlap(fn, "ein", ein, n, "e", e, n);
    }
    mt_no_overlap(fn, "ein", ein, n, "x", x, n);
    mt_no_overlap(fn, "ein", ein, n, "dtable", dtable, 1024);
    return mp_obj_new_int(mt_lut_s8_grad_input(x, e, dtable, ein, n));
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_lut_s8_grad_input_obj, 4, 4, mod_lut_s8_grad_input);

// ---------------------------------------------------------------------------
// sparse-update helpers

static mp_obj_t mod_l1_norm_s8(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "l1_norm_s8";
    (void)n_args;
    size_t n;
    const int8_t *e = mt_in_s8(fn, "e", args[0], -1, &n);
    const int32_t c = mt_channels(fn, args[1]);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "e", mt_l1_norm_len_check((uint32_t)n, c, v), v);
    const uint32_t npos = mt_udiv_u32((uint32_t)n, (uint32_t)c);
    int32_t *norms = mt_out_i32(fn, "norms", args[2], c);
    mt_l1_norm_s8(e, npos, c, norms);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_l1_norm_s8_obj, 3, 3, mod_l1_norm_s8);

static mp_obj_t mod_topk_mask(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "topk_mask";
    (void)n_args;
    size_t c;
    const int32_t *norms = (const int32_t *)mt_buf(fn, "norms", args[0], MT_I32, -1, 0, &c);
    mt_check(fn, "norms", mt_topk_channels_check((uint32_t)c));
    const int32_t k = mt_int(fn, "k", args[1]);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "k", mt_topk_k_check(k, (uint32_t)c, v), v);
    uint8_t *mask = (uint8_t *)mt_out_s8(fn, "mask", args[2], (int32_t)c);
    mt_topk_mask(norms, (int32_t)c, k, mask);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_topk_mask_obj, 3, 3, mod_topk_mask);

// ---------------------------------------------------------------------------
// zeroth-order (SPSA) perturbation and update: base, a scalar, the generator
// state (in place), w (may be base itself, else disjoint from it).

// Checks in argument order: base, the scalar (eps of the perturbation, n_rng 1;
// step of the update, n_rng 2), rng (n_rng states), w; then the overlaps. Runs
// the kernel.
static void mt_zo_call(const char *fn, const char *sname, const mp_obj_t *args, int32_t n_rng) {
    size_t n;
    const int8_t *base = mt_in_s8(fn, "base", args[0], -1, &n);
    const int32_t s = mt_int(fn, sname, args[1]);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, sname, n_rng == 1 ? mt_zo_eps_check(s, v) : mt_zo_step_check(s, v), v);
    uint32_t *rng = (uint32_t *)mt_buf(fn, "rng", args[2], MT_U32, n_rng, 1, NULL);
    int8_t *w = mt_out_s8(fn, "w", args[3], (int32_t)n);
    if ((const int8_t *)w != base) {  // the very same buffer is fine: read before written
        mt_no_overlap(fn, "w", w, n, "base", base, n);
    }
    mt_no_overlap(fn, "w", w, n, "rng", rng, (size_t)n_rng * 4);
    mt_no_overlap(fn, "rng", rng, (size_t)n_rng * 4, "base", base, n);
    if (n_rng == 1) {
        mt_zo_perturb_s8(base, n, s, rng, w);
    } else {
        mt_zo_update_s8(base, n, s, rng, w);
    }
}

static mp_obj_t mod_zo_perturb_s8(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    mt_zo_call("zo_perturb_s8", "eps", args, 1);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_zo_perturb_s8_obj, 4, 4, mod_zo_perturb_s8);

// zo_perturb_h_s8(base, eps, rng, row, i0, w): checks in argument order, then the
// overlaps (as mt_zo_call).
static mp_obj_t mod_zo_perturb_h_s8(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "zo_perturb_h_s8";
    (void)n_args;
    size_t n;
    int32_t v[MT_MSG_NVALS];
    const int8_t *base = mt_in_s8(fn, "base", args[0], -1, &n);
    const int32_t eps = mt_int(fn, "eps", args[1]);
    mt_check_v(fn, "eps", mt_zo_eps_check(eps, v), v);
    uint32_t *rng = (uint32_t *)mt_buf(fn, "rng", args[2], MT_U32, 1, 1, NULL);
    const int32_t row = mt_int(fn, "row", args[3]);
    mt_check_v(fn, "row", mt_zo_index_check(row, v), v);
    const int32_t i0 = mt_int(fn, "i0", args[4]);
    mt_check_v(fn, "i0", mt_zo_index_check(i0, v), v);
    int8_t *w = mt_out_s8(fn, "w", args[5], (int32_t)n);
    if ((const int8_t *)w != base) {
        mt_no_overlap(fn, "w", w, n, "base", base, n);
    }
    mt_no_overlap(fn, "w", w, n, "rng", rng, 4);
    mt_no_overlap(fn, "rng", rng, 4, "base", base, n);
    mt_zo_perturb_h_s8(base, n, eps, (uint32_t)row, (uint32_t)i0, rng, w);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_zo_perturb_h_s8_obj, 6, 6, mod_zo_perturb_h_s8);

static mp_obj_t mod_zo_update_s8(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    mt_zo_call("zo_update_s8", "step", args, 2);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_zo_update_s8_obj, 4, 4, mod_zo_update_s8);

static mp_obj_t mod_dyn_requant_s8(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "dyn_requant_s8";
    const mp_obj_t acc_in = args[0], out_in = args[1];
    (void)n_args;
    size_t n;
    const int32_t *acc = (const int32_t *)mt_buf(fn, "acc", acc_in, MT_I32, -1, 0, &n);
    int8_t *out = mt_out_s8(fn, "out", out_in, (int32_t)n);
    mt_no_overlap(fn, "out", out, n, "acc", acc, n * 4);
    return mp_obj_new_int(mt_dyn_requant_s8(acc, n, out));
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_dyn_requant_s8_obj, 2, 2, mod_dyn_requant_s8);

// ---------------------------------------------------------------------------
// .mtm model files (mtm_loader.c, docs/format.md): validation and zero-copy
// accessors. `buf` is any byte buffer (bytes, bytearray, memoryview slice).

static const uint8_t *mt_mtm_buf(const char *fn, mp_obj_t o, uint32_t *len) {
    size_t n;
    const uint8_t *b = (const uint8_t *)mt_buf(fn, "buf", o, MT_S8, -1, 0, &n);
    *len = (uint32_t)n;  // mt_buf caps buffers at 2^26 bytes
    return b;
}

// Buffer whose header and tables can be read (accessors; no CRC / semantics).
static const uint8_t *mt_mtm_tables(const char *fn, mp_obj_t o) {
    uint32_t len;
    const uint8_t *b = mt_mtm_buf(fn, o, &len);
    mt_check(fn, "buf", mt_mtm_check_tables(b, len));
    return b;
}

static mp_obj_t mod_mtm_validate(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "mtm_validate";
    (void)n_args;
    uint32_t len;
    const uint8_t *b = mt_mtm_buf(fn, args[0], &len);
    int32_t where, index;
    const char *msg = mt_mtm_validate(b, len, &where, &index);
    if (!msg) {
        return mp_const_none;
    }
    char what[MT_MSG_MAX];
    size_t pos = mt_msg_put_str(what, sizeof what, 0, msg);
    if (where == MTM_WHERE_TENSOR) {
        pos = mt_msg_put_str(what, sizeof what, pos, " (tensor ");
        pos = mt_msg_put_int(what, sizeof what, pos, index);
        pos = mt_msg_put_str(what, sizeof what, pos, ")");
    } else if (where == MTM_WHERE_LAYER) {
        uint32_t nlen = 0;
        const uint8_t *name = mt_mtm_layer_name(b, len, (uint32_t)index, &nlen);
        pos = mt_msg_put_str(what, sizeof what, pos, " (layer ");
        pos = mt_msg_put_int(what, sizeof what, pos, index);
        if (name) {
            pos = mt_msg_put_str(what, sizeof what, pos, " '");
            for (uint32_t k = 0; k < nlen && name[k] && pos < MT_MSG_MAX - 3; ++k) {
                // the name is not validated yet: non-ASCII bytes as '?' keep the message valid UTF-8
                what[pos++] = name[k] < 0x80 ? (char)name[k] : '?';
            }
            pos = mt_msg_put_str(what, sizeof what, pos, "'");
        }
        pos = mt_msg_put_str(what, sizeof what, pos, ")");
    }
    what[pos < MT_MSG_MAX ? pos : MT_MSG_MAX - 1] = 0;
    MT_VALUE_ERR(fn, NULL, what);
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_mtm_validate_obj, 1, 1, mod_mtm_validate);

// mtm_view(view, typecode): `view`, a memoryview of 1-byte items over 4 * n bytes of a
// model (memoryview(buf)[off:off + 4 * n]), retyped in place to n int32 (typecode
// ord('i')) or float32 (ord('f')) items: the zero-copy int32 / float32 tensors of a
// model loaded from a bytes-like object (frozen bytes, flash), which Python cannot
// make (no memoryview.cast). The items pointer stays at the start of the buffer
// (the GC keeps a block alive only through pointers to its start); the offset,
// counted in items, is what changes. Returns `view`.
static mp_obj_t mod_mtm_view(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "mtm_view";
    (void)n_args;
    if (mp_obj_get_type(args[0])->name != MP_QSTR_memoryview) {
        MT_TYPE_ERR(fn, "view", "must be a memoryview");
    }
    const int32_t code = mt_int(fn, "typecode", args[1]);
    if (code != 'i' && code != 'f') {
        MT_VALUE_ERR(fn, "typecode", "must be ord('i') or ord('f')");
    }
    mp_obj_array_t *o = MP_OBJ_TO_PTR(args[0]);
    const int tc = (int)(o->typecode & ~(size_t)MP_OBJ_ARRAY_TYPECODE_FLAG_RW);
    if (!mt_typecode_ok(MT_S8, tc)) {
        MT_VALUE_ERR(fn, "view", "must have 1-byte items");
    }
    if (o->len % 4 != 0 || o->free % 4 != 0 || ((uintptr_t)o->items & 3u) != 0) {
        MT_VALUE_ERR(fn, "view", "must be 4-byte aligned, a multiple of 4 bytes long");
    }
    o->typecode = (o->typecode & MP_OBJ_ARRAY_TYPECODE_FLAG_RW) | (size_t)code;
    o->free /= 4;
    o->len /= 4;
    return args[0];
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_mtm_view_obj, 2, 2, mod_mtm_view);

static mp_obj_t mod_mtm_info(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "mtm_info";
    (void)n_args;
    const uint8_t *b = mt_mtm_tables(fn, args[0]);
    int32_t *out = mt_out_i32(fn, "out", args[1], MTM_INFO_N);
    mt_mtm_info(b, out);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_mtm_info_obj, 2, 2, mod_mtm_info);

static mp_obj_t mod_mtm_tensor(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "mtm_tensor";
    (void)n_args;
    const uint8_t *b = mt_mtm_tables(fn, args[0]);
    const int32_t i = mt_int(fn, "i", args[1]);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "i", mt_index_check(i, mt_mtm_n_tensors(b), v), v);
    int32_t *out = mt_out_i32(fn, "out", args[2], MTM_TENSOR_N);
    mt_mtm_tensor(b, (uint32_t)i, out);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_mtm_tensor_obj, 3, 3, mod_mtm_tensor);

static mp_obj_t mod_mtm_layer(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "mtm_layer";
    (void)n_args;
    const uint8_t *b = mt_mtm_tables(fn, args[0]);
    const int32_t i = mt_int(fn, "i", args[1]);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "i", mt_index_check(i, mt_mtm_n_layers(b), v), v);
    int32_t *out = mt_out_i32(fn, "out", args[2], MTM_LAYER_N);
    mt_mtm_layer(b, (uint32_t)i, out);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_mtm_layer_obj, 3, 3, mod_mtm_layer);

#if MT_HAS_FLOAT
static mp_obj_t mod_f32_axpy_i32(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "f32_axpy_i32";
    const mp_obj_t x_in = args[0], a_in = args[1], y_in = args[2];
    (void)n_args;
    size_t n;
    const int32_t *x = (const int32_t *)mt_buf(fn, "x", x_in, MT_I32, -1, 0, &n);
    const float a = mt_float(fn, "a", a_in);
    float *y = mt_out_f32(fn, "y", y_in, (int32_t)n);
    mt_no_overlap(fn, "y", y, n * 4, "x", x, n * 4);
    mt_f32_axpy_i32(y, x, n, a);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_f32_axpy_i32_obj, 3, 3, mod_f32_axpy_i32);
#endif


// ---------------------------------------------------------------------------
// update (update.c): the optimiser-update primitives. Every buffer and scalar
// is checked before anything is written.

static mp_obj_t mod_update_u8_touch(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_u8_touch";
    (void)n_args;
    size_t n;
    (void)mt_in_s8(fn, "touched", args[0], -1, &n);
    uint8_t *t = (uint8_t *)mt_out_s8(fn, "touched", args[0], (int32_t)n);
    const uint8_t *mask = mt_mask(fn, args[1], (int32_t)n);
    if (mask != NULL) {
        mt_no_overlap(fn, "touched", t, n, "mask", mask, n);
    }
    mt_update_u8_touch(t, mask, n);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_update_u8_touch_obj, 2, 2, mod_update_u8_touch);

#if MT_HAS_FLOAT
// A float scalar passing one of checks.c's float checks.
static float mt_fscalar(const char *fn, const char *name, mp_obj_t o, const char *(*chk)(float)) {
    const float x = mt_float(fn, name, o);
    mt_check(fn, name, chk(x));
    return x;
}

static const float *mt_opt_in_f32(const char *fn, const char *name, mp_obj_t o, int32_t n) {
    return o == mp_const_none ? NULL : (const float *)mt_buf(fn, name, o, MT_F32, n, 0, NULL);
}
static float *mt_opt_out_f32(const char *fn, const char *name, mp_obj_t o, int32_t n) {
    return o == mp_const_none ? NULL : mt_out_f32(fn, name, o, n);
}

static const uint8_t *mt_touched(const char *fn, mp_obj_t o, int32_t n) {
    return o == mp_const_none ? NULL : (const uint8_t *)mt_buf(fn, "touched", o, MT_S8, n, 0, NULL);
}

// g (array('f') of n_ch * k values) and k: returns n_ch.
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

static int32_t mt_update_count(const char *fn, mp_obj_t o) {
    const int32_t n = mt_int(fn, "n", o);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "n", mt_update_n_check(n, v), v);
    return n;
}

static mp_obj_t mod_update_f32_check(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_check";
    (void)n_args;
    size_t n;
    const float *x = (const float *)mt_buf(fn, "x", args[0], MT_F32, -1, 0, &n);
    return mp_obj_new_int(mt_update_f32_check(x, n));
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_update_f32_check_obj, 1, 1, mod_update_f32_check);

// update_f32_decay(g, k, touched, n, wd, q, scale, f, master)
static mp_obj_t mod_update_f32_decay(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_decay";
    (void)n_args;
    int32_t k;
    size_t n_all;
    float *g = mt_update_g(fn, "g", args[0], args[1], &k, &n_all);
    const int32_t n_ch = (int32_t)mt_udiv_u32((uint32_t)n_all, (uint32_t)k);
    const uint8_t *touched = mt_touched(fn, args[2], n_ch);
    const int32_t n = mt_update_count(fn, args[3]);
    const float wd = mt_fscalar(fn, "wd", args[4], mt_nonneg_check);
    mt_update_src_t src;
    src.master = mt_opt_in_f32(fn, "master", args[8], (int32_t)n_all);
    src.q8 = NULL;
    src.q32 = NULL;
    src.scale = NULL;
    src.f = 1.0f;
    if (src.master == NULL) {
        mp_buffer_info_t bi;
        if (args[5] != mp_const_none && mp_get_buffer(args[5], &bi, MP_BUFFER_READ) && bi.typecode == 'i') {
            src.q32 = mt_in_i32(fn, "q", args[5], (int32_t)n_all);
        } else {
            src.q8 = mt_in_s8(fn, "q", args[5], (int32_t)n_all, NULL);
        }
        src.scale = (const float *)mt_buf(fn, "scale", args[6], MT_F32, n_ch, 0, NULL);
        src.f = mt_fscalar(fn, "f", args[7], mt_finite_check);
        mt_no_overlap(fn, "g", g, n_all * 4, "scale", src.scale, (size_t)n_ch * 4);
    } else {
        mt_no_overlap(fn, "g", g, n_all * 4, "master", src.master, n_all * 4);
    }
    if (touched != NULL) {
        mt_no_overlap(fn, "g", g, n_all * 4, "touched", touched, (size_t)n_ch);
    }
    mt_update_f32_decay(g, n_ch, k, touched, n, wd, &src);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_update_f32_decay_obj, 9, 9, mod_update_f32_decay);

// update_f32_standardize(g, k, touched, n)
static mp_obj_t mod_update_f32_standardize(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_standardize";
    (void)n_args;
    int32_t k;
    size_t n_all;
    float *g = mt_update_g(fn, "g", args[0], args[1], &k, &n_all);
    const int32_t n_ch = (int32_t)mt_udiv_u32((uint32_t)n_all, (uint32_t)k);
    const uint8_t *touched = mt_touched(fn, args[2], n_ch);
    const int32_t n = mt_update_count(fn, args[3]);
    if (touched != NULL) {
        mt_no_overlap(fn, "g", g, n_all * 4, "touched", touched, (size_t)n_ch);
    }
    mt_update_f32_standardize(g, n_ch, k, touched, n);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_update_f32_standardize_obj, 4, 4, mod_update_f32_standardize);

// update_f32_axpby(y, x, k, touched, a, b)
static mp_obj_t mod_update_f32_axpby(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_axpby";
    (void)n_args;
    int32_t k;
    size_t n_all;
    float *y = mt_update_g(fn, "y", args[0], args[2], &k, &n_all);
    const float *x = (const float *)mt_buf(fn, "x", args[1], MT_F32, (int32_t)n_all, 0, NULL);
    const int32_t n_ch = (int32_t)mt_udiv_u32((uint32_t)n_all, (uint32_t)k);
    const uint8_t *touched = mt_touched(fn, args[3], n_ch);
    const float a = mt_fscalar(fn, "a", args[4], mt_finite_check);
    const float b = mt_fscalar(fn, "b", args[5], mt_finite_check);
    mt_no_overlap(fn, "y", y, n_all * 4, "x", x, n_all * 4);
    if (touched != NULL) {
        mt_no_overlap(fn, "y", y, n_all * 4, "touched", touched, (size_t)n_ch);
    }
    mt_update_f32_axpby(y, x, n_ch, k, touched, a, b);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_update_f32_axpby_obj, 6, 6, mod_update_f32_axpby);

// update_f32_momentum(g, v, k, touched, mom)
static mp_obj_t mod_update_f32_momentum(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_momentum";
    (void)n_args;
    int32_t k;
    size_t n_all;
    float *g = mt_update_g(fn, "g", args[0], args[2], &k, &n_all);
    float *v = mt_out_f32(fn, "v", args[1], (int32_t)n_all);
    const int32_t n_ch = (int32_t)mt_udiv_u32((uint32_t)n_all, (uint32_t)k);
    const uint8_t *touched = mt_touched(fn, args[3], n_ch);
    const float mom = mt_fscalar(fn, "mom", args[4], mt_unit_check);
    mt_no_overlap(fn, "v", v, n_all * 4, "g", g, n_all * 4);
    if (touched != NULL) {
        mt_no_overlap(fn, "g", g, n_all * 4, "touched", touched, (size_t)n_ch);
        mt_no_overlap(fn, "v", v, n_all * 4, "touched", touched, (size_t)n_ch);
    }
    mt_update_f32_momentum(g, v, n_ch, k, touched, mom);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_update_f32_momentum_obj, 5, 5, mod_update_f32_momentum);

// update_f32_scale(x, k, touched, a)
static mp_obj_t mod_update_f32_scale(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_scale";
    (void)n_args;
    int32_t k;
    size_t n_all;
    float *x = mt_update_g(fn, "x", args[0], args[1], &k, &n_all);
    const int32_t n_ch = (int32_t)mt_udiv_u32((uint32_t)n_all, (uint32_t)k);
    const uint8_t *touched = mt_touched(fn, args[2], n_ch);
    const float a = mt_fscalar(fn, "a", args[3], mt_finite_check);
    if (touched != NULL) {
        mt_no_overlap(fn, "x", x, n_all * 4, "touched", touched, (size_t)n_ch);
    }
    mt_update_f32_scale(x, n_ch, k, touched, a);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_update_f32_scale_obj, 4, 4, mod_update_f32_scale);

// update_f32_adam(g, m, v, k, touched, b1, b2, b1t, b2t, eps)
static mp_obj_t mod_update_f32_adam(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_adam";
    (void)n_args;
    int32_t k;
    size_t n_all;
    float *g = mt_update_g(fn, "g", args[0], args[3], &k, &n_all);
    float *m = mt_out_f32(fn, "m", args[1], (int32_t)n_all);
    float *v = mt_out_f32(fn, "v", args[2], (int32_t)n_all);
    const int32_t n_ch = (int32_t)mt_udiv_u32((uint32_t)n_all, (uint32_t)k);
    const uint8_t *touched = mt_touched(fn, args[4], n_ch);
    const float b1 = mt_fscalar(fn, "b1", args[5], mt_unit_check);
    const float b2 = mt_fscalar(fn, "b2", args[6], mt_unit_check);
    const float b1t = mt_fscalar(fn, "b1t", args[7], mt_unit_check);
    const float b2t = mt_fscalar(fn, "b2t", args[8], mt_unit_check);
    const float eps = mt_fscalar(fn, "eps", args[9], mt_positive_check);
    mt_no_overlap(fn, "m", m, n_all * 4, "g", g, n_all * 4);
    mt_no_overlap(fn, "v", v, n_all * 4, "g", g, n_all * 4);
    mt_no_overlap(fn, "v", v, n_all * 4, "m", m, n_all * 4);
    if (touched != NULL) {
        mt_no_overlap(fn, "g", g, n_all * 4, "touched", touched, (size_t)n_ch);
        mt_no_overlap(fn, "m", m, n_all * 4, "touched", touched, (size_t)n_ch);
        mt_no_overlap(fn, "v", v, n_all * 4, "touched", touched, (size_t)n_ch);
    }
    mt_update_f32_adam(g, m, v, n_ch, k, touched, b1, b2, b1t, b2t, eps);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_update_f32_adam_obj, 10, 10, mod_update_f32_adam);

// update_s8_apply(w, w_scale, b, mult, shift, gw, gb, master_w, master_b, touched, lr, s_in, s_out, rng,
// scratch) -> the new rng; update_s8_apply_keep (keep = 1): the same arguments, gw and gb
// only read, scratch of at least 2 * n_ch (n_ch without keep).
static mp_obj_t mt_s8_apply_call(const char *fn, const mp_obj_t *args, int keep) {
    mt_update_layer_t L;
    size_t nw, nc;
    (void)mt_in_s8(fn, "w", args[0], -1, &nw);
    L.w = mt_out_s8(fn, "w", args[0], (int32_t)nw);
    (void)mt_buf(fn, "w_scale", args[1], MT_F32, -1, 0, &nc);
    if (nc < 1 || nc > 65535) {
        MT_VALUE_ERR(fn, "w_scale", "must have 1..65535 channels");
    }
    L.w_scale = mt_out_f32(fn, "w_scale", args[1], (int32_t)nc);
    const uint32_t kq = mt_udiv_u32((uint32_t)nw, (uint32_t)nc);
    if (kq < 1 || kq * (uint32_t)nc != (uint32_t)nw) {
        const int32_t v[MT_MSG_NVALS] = {(int32_t)nw, (int32_t)nc, 0};
        mt_raise(&mp_type_ValueError, fn, "w", "has %d elements, not a positive multiple of %d channels", v);
    }
    L.n_ch = (int32_t)nc;
    L.k = (int32_t)kq;
    L.b = mt_out_i32(fn, "b", args[2], L.n_ch);
    L.mult = mt_out_i32(fn, "mult", args[3], L.n_ch);
    L.shift = mt_out_i32(fn, "shift", args[4], L.n_ch);
    // keep: read only (mt_update_s8_apply_keep never writes them)
    L.gw = (float *)mt_buf(fn, "gw", args[5], MT_F32, (int32_t)nw, !keep, NULL);
    L.gb = (float *)mt_buf(fn, "gb", args[6], MT_F32, L.n_ch, !keep, NULL);
    L.master_w = mt_opt_out_f32(fn, "master_w", args[7], (int32_t)nw);
    L.master_b = mt_opt_out_f32(fn, "master_b", args[8], L.n_ch);
    if ((L.master_w == NULL) != (L.master_b == NULL)) {
        MT_VALUE_ERR(fn, "master_b", "must be given with master_w (both or neither)");
    }
    const uint8_t *touched = mt_touched(fn, args[9], L.n_ch);
    const float lr = mt_fscalar(fn, "lr", args[10], mt_nonneg_check);  // a schedule may end at 0
    L.s_in = mt_fscalar(fn, "s_in", args[11], mt_positive_check);
    L.s_out = mt_fscalar(fn, "s_out", args[12], mt_positive_check);
    const int32_t rng = mt_int(fn, "rng", args[13]);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "rng", mt_update_rng_check(rng, v), v);
    // scratch: at least n_scr floats (a caller may lend a longer buffer: no slice per call);
    // the kernel uses the first n_scr
    const size_t n_scr = keep ? 2 * nc : nc;
    size_t n_have;
    float *scratch = (float *)mt_buf(fn, "scratch", args[14], MT_F32, -1, 1, &n_have);
    if (n_have < n_scr) {
        const int32_t vs[MT_MSG_NVALS] = {(int32_t)n_have, (int32_t)n_scr, 0};
        mt_raise(&mp_type_ValueError, fn, "scratch", "has %d elements, expected at least %d", vs);
    }
    // every written buffer apart from every other one and from the buffers only read
    // (touched; keep: gw and gb too, which may share memory with each other)
    const void *p[11] = {L.w, L.w_scale, L.b, L.mult, L.shift, L.gw, L.gb, L.master_w, L.master_b, scratch,
                         touched};
    const size_t sz[11] = {nw, nc * 4, nc * 4, nc * 4, nc * 4, nw * 4, nc * 4, nw * 4, nc * 4, n_scr * 4, nc};
    static const char *const nm[11] = {"w", "w_scale", "b", "mult", "shift", "gw", "gb", "master_w", "master_b",
                                       "scratch", "touched"};
    for (int i = 0; i < 10; ++i) {
        const int ro_i = keep && (i == 5 || i == 6);
        for (int j = i + 1; j < 11; ++j) {
            const int ro_j = j == 10 || (keep && (j == 5 || j == 6));
            if (p[i] != NULL && p[j] != NULL && !(ro_i && ro_j)) {
                mt_no_overlap(fn, nm[i], p[i], sz[i], nm[j], p[j], sz[j]);
            }
        }
    }
    const int32_t r = keep ? mt_update_s8_apply_keep(&L, touched, lr, rng, scratch)
                           : mt_update_s8_apply(&L, touched, lr, rng, scratch);
    if (r < -1) {
        const int32_t vv[MT_MSG_NVALS] = {-2 - r, 0, 0};
        mt_raise(&mp_type_ValueError, fn, "gw",
                 "channel %d: the step gives non-finite weights or a scale out of float32 range", vv);
    }
    return mp_obj_new_int(r);
}

static mp_obj_t mod_update_s8_apply(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    return mt_s8_apply_call("update_s8_apply", args, 0);
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_update_s8_apply_obj, 15, 15, mod_update_s8_apply);

static mp_obj_t mod_update_s8_apply_keep(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    return mt_s8_apply_call("update_s8_apply_keep", args, 1);
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_update_s8_apply_keep_obj, 15, 15, mod_update_s8_apply_keep);

// update_f32_ratios(w_scale, r, wr) -> index of the first max(w_scale)
static mp_obj_t mod_update_f32_ratios(size_t n_args, const mp_obj_t *args) {
    static const char fn[] = "update_f32_ratios";
    (void)n_args;
    size_t n;
    const float *s = (const float *)mt_buf(fn, "w_scale", args[0], MT_F32, -1, 0, &n);
    if (n < 1 || n > 65535) {
        MT_VALUE_ERR(fn, "w_scale", "must have 1..65535 channels");
    }
    mt_check(fn, "w_scale", mt_scales_check(s, (int32_t)n));
    const int32_t r = mt_int(fn, "r", args[1]);
    int32_t v[MT_MSG_NVALS];
    mt_check_v(fn, "r", mt_ratio_r_check(r, v), v);
    int32_t *wr = mt_out_i32(fn, "wr", args[2], (int32_t)n);
    mt_no_overlap(fn, "wr", wr, n * 4, "w_scale", s, n * 4);
    return mp_obj_new_int(mt_update_f32_ratios(s, (int32_t)n, r, wr));
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mod_update_f32_ratios_obj, 3, 3, mod_update_f32_ratios);
#endif

#ifndef MICROPY_ENABLE_DYNRUNTIME

#define MT_ENTRY(q, obj) { MP_ROM_QSTR(q), MP_ROM_PTR(&obj) },
static const mp_rom_map_elem_t mt_module_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR__microtrain) },
    MT_FUNCS(MT_ENTRY)
    MT_FLOAT_FUNCS(MT_ENTRY)
    #if MT_HAS_FLOAT
    { MP_ROM_QSTR(MP_QSTR_HAS_FLOAT), MP_ROM_TRUE },
    #else
    { MP_ROM_QSTR(MP_QSTR_HAS_FLOAT), MP_ROM_FALSE },
    #endif
};
static MP_DEFINE_CONST_DICT(mt_module_globals, mt_module_globals_table);

const mp_obj_module_t mt_user_cmodule = {
    .base = { &mp_type_module },
    .globals = (mp_obj_dict_t *)&mt_module_globals,
};

MP_REGISTER_MODULE(MP_QSTR__microtrain, mt_user_cmodule);

#endif
