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
// A natmod of some op families only (make natmod OPS=...) has its own table, written from
// the kernel spec into its build folder; everything else has them all.
#ifdef MT_FUNCS_OPS_H
#include MT_FUNCS_OPS_H
#else
#include "mt_funcs.h"
#endif

#ifdef MICROPY_ENABLE_DYNRUNTIME

// mpy_init comes first in the object: on armv6m the loader enters it with a
// Thumb-1 branch that reaches only +-2 KiB.
#define MT_DECLARE(q, fun, obj, n_min, n_max) static const mp_obj_fun_builtin_var_t obj;
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
    union {
        float f;
        uint32_t u;
    } v;
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

#ifdef MT_OPS
static const mp_obj_fun_builtin_fixed_t mt_getattr_obj;
#endif

mp_obj_t mpy_init(mp_obj_fun_bc_t *self, size_t n_args, size_t n_kw, mp_obj_t *args) {
    (void)n_args;
    (void)n_kw;
    (void)args;
    MP_DYNRUNTIME_INIT_ENTRY
#define MT_STORE(q, fun, obj, n_min, n_max) mp_store_global(q, MP_OBJ_FROM_PTR(&obj));
    MT_FUNCS(MT_STORE)
    const bool has_float = MT_HAS_FLOAT && mt_float_abi_ok();
    if (has_float) {
        MT_FLOAT_FUNCS(MT_STORE)
    }
    mp_store_global(MP_QSTR_HAS_FLOAT, mp_obj_new_bool(has_float));
#ifdef MT_OPS
    mp_store_global(MP_QSTR___getattr__, MP_OBJ_FROM_PTR(&mt_getattr_obj));
#endif
    MP_DYNRUNTIME_INIT_EXIT
}

#ifdef MT_OPS
// The module's __getattr__ (a name it does not hold): a function of a left-out op raises
// AttributeError naming the op and the build that has it, so the package fails on its first
// call with the fix in the message (a missing kernel is no crash, nor a silent slow path).
static size_t mt_op_of(const char *name, size_t n, const char **op, size_t *op_n) {
    const char *e = MT_OPS_LEFT_OUT;  // "op;" or "op parts;" each, longest op first
    while (*e) {
        size_t k = 0;
        while (e[k] != ';' && e[k] != ' ') {
            k++;
        }
        size_t m = 0;
        while (m < k && m < n && name[m] == e[m]) {
            m++;
        }
        const char *end = e + k;
        while (*end != ';') {
            end++;
        }
        if (m == k && k < n && name[k] == '_') {
            *op = e[k] == ' ' ? e + k + 1 : e;
            *op_n = (size_t)(end - *op);
            return 1;
        }
        e = end + 1;
    }
    return 0;
}

// ": op <op> is not in this natmod ... and the build that has it" after buf[0, pos): the message of
// a left-out function (__getattr__) and of a model layer of a left-out op (mtm_validate).
static size_t mt_put_left_out(char *buf, size_t cap, size_t pos, const char *op, size_t op_n) {
    char opbuf[48];
    size_t i;
    for (i = 0; i < op_n && i + 1 < sizeof opbuf; i++) {
        opbuf[i] = op[i];
    }
    opbuf[i] = 0;
    pos = mt_msg_put_str(buf, cap, pos, ": op ");
    pos = mt_msg_put_str(buf, cap, pos, opbuf);
    pos = mt_msg_put_str(buf, cap, pos,
                         " is not in this natmod (OPS=" MT_OPS "); build one with it (make natmod ARCH=" MT_OPS_ARCH
                         " OPS=" MT_OPS ",");
    pos = mt_msg_put_str(buf, cap, pos, opbuf);
    return mt_msg_put_str(buf, cap, pos, ", or OPS=all) or let `microtrain deploy --model` pick the model's ops");
}

static mp_obj_t mt_getattr(mp_obj_t attr) {
    size_t n;
    const char *name = mp_obj_str_get_data(attr, &n);
    char buf[256];
    const char *op;
    size_t op_n;
    size_t pos = mt_msg_put_str(buf, sizeof buf, 0, "_microtrain has no ");
    size_t i = 0;
    while (i < n && pos + 1 < sizeof buf) {
        buf[pos++] = name[i++];
    }
    if (mt_op_of(name, n, &op, &op_n)) {
        pos = mt_put_left_out(buf, sizeof buf, pos, op, op_n);
    } else {
        pos = mt_msg_put_str(buf, sizeof buf, pos, " (this natmod: OPS=" MT_OPS ")");
    }
    const mp_obj_type_t *t = (const mp_obj_type_t *)MP_OBJ_TO_PTR(mp_load_global(MP_QSTR_AttributeError));
    nlr_raise(mp_obj_new_exception_arg1(t, mp_obj_new_str(buf, pos)));
}
static MP_DEFINE_CONST_FUN_OBJ_1(mt_getattr_obj, mt_getattr);
#endif

#endif

#include "mt_bind.h"
#include "mt_bind_mtm.h"
#include "mt_bind_gen.h"
#include "mt_bind_conv.h"
#include "mt_bind_update.h"

// The function objects, with the argument counts of the spec (mt_funcs.h).
#define MT_DEFINE(q, fun, obj, n_min, n_max) static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(obj, n_min, n_max, fun);
MT_FUNCS(MT_DEFINE)
MT_FLOAT_FUNCS(MT_DEFINE)

#ifndef MICROPY_ENABLE_DYNRUNTIME

#define MT_ENTRY(q, fun, obj, n_min, n_max) { MP_ROM_QSTR(q), MP_ROM_PTR(&obj) },
static const mp_rom_map_elem_t mt_module_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR__microtrain) },
    MT_FUNCS(MT_ENTRY) MT_FLOAT_FUNCS(MT_ENTRY)
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
