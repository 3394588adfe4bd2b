// The lab's own MicroPython WebAssembly build (see Makefile): the runtime of
// ports/common (open, os, time on emscripten's in-memory file system) with
// microtrain's C kernels built in, driven from JavaScript (mtlab.mjs) through
// three exported functions:
//   mtw_init(heap_bytes)  the interpreter with a GC heap of that size
//   mtw_exec(code)        runs code as a script in __main__; 0, or 1 after an
//                         exception (its traceback is printed)
//   mtw_eval(expr)        evaluates an expression in __main__; a tagged string
//                         ("s" + str, "b1"/"b0", "n" + repr, "0" None, "e" error)
//                         valid until the next call
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emscripten.h>

#include "py/compile.h"
#include "py/gc.h"
#include "py/runtime.h"
#include "py/stackctrl.h"
#include "../common/mtport.h"

mp_uint_t mt_port_ticks_us(void) {
    return (mp_uint_t)(emscripten_get_now() * 1000.0);
}

// Asked for while Python code runs: only noted, since values in WebAssembly
// locals are not in memory the GC can scan. The collection runs at the next
// call from JavaScript (mtw_collect_pending), when no Python frame is live.
static bool mtw_gc_pending;

void gc_collect(void) {
    mtw_gc_pending = true;
}

// The C heap (malloc) grows with WebAssembly memory: a full GC heap gains an area.
size_t gc_get_max_new_split(void) {
    return (size_t)128 << 20;
}

static void mtw_collect_pending(void) {
    if (mtw_gc_pending) {
        mtw_gc_pending = false;
        gc_collect_start();
        gc_collect_end();
    }
}

// The result of mtw_eval, kept reachable (a root pointer of the VM state is not
// available to a port without extmod): the __main__ global "_mtw".
static mp_obj_t mtw_keep(mp_obj_t s) {
    mp_store_global(MP_QSTR__mtw, s);
    return s;
}

EMSCRIPTEN_KEEPALIVE int mtw_init(size_t heap_bytes) {
    int stack_dummy;
    mp_stack_ctrl_init();
    mp_stack_set_top(&stack_dummy);
    mp_stack_set_limit(MT_PORT_STACK_LIMIT);
    char *heap = malloc(heap_bytes);
    if (heap == NULL) {
        return 1;
    }
    gc_init(heap, heap + heap_bytes);
    mp_init();
    mp_obj_list_t *path = MP_OBJ_TO_PTR(mp_sys_path);
    path->len = 0;
    mp_obj_list_append(mp_sys_path, MP_OBJ_NEW_QSTR(MP_QSTR_));
    mp_obj_list_append(mp_sys_path, mp_obj_new_str("/lib", 4));
    return 0;
}

static mp_obj_t mtw_compile(const char *src, mp_parse_input_kind_t kind) {
    mp_lexer_t *lex = mp_lexer_new_from_str_len(MP_QSTR__lt_stdin_gt_, src, strlen(src), 0);
    qstr name = lex->source_name;
    mp_parse_tree_t tree = mp_parse(lex, kind);
    return mp_compile(&tree, name, false);
}

EMSCRIPTEN_KEEPALIVE int mtw_exec(const char *code) {
    mtw_collect_pending();
    // The stack top of this call (JavaScript may enter at another depth).
    int stack_dummy;
    mp_stack_set_top(&stack_dummy);
    nlr_buf_t nlr;
    if (nlr_push(&nlr) == 0) {
        mp_call_function_0(mtw_compile(code, MP_PARSE_FILE_INPUT));
        nlr_pop();
        return 0;
    }
    mp_obj_print_exception(&mp_plat_print, MP_OBJ_FROM_PTR(nlr.ret_val));
    return 1;
}

EMSCRIPTEN_KEEPALIVE const char *mtw_eval(const char *expr) {
    mtw_collect_pending();
    int stack_dummy;
    mp_stack_set_top(&stack_dummy);
    nlr_buf_t nlr;
    if (nlr_push(&nlr) == 0) {
        mp_obj_t r = mp_call_function_0(mtw_compile(expr, MP_PARSE_EVAL_INPUT));
        vstr_t v;
        mp_print_t pr;
        vstr_init_print(&v, 16, &pr);
        if (r == mp_const_none) {
            vstr_add_char(&v, '0');
        } else if (mp_obj_is_bool(r)) {
            vstr_add_str(&v, r == mp_const_true ? "b1" : "b0");
        } else if (mp_obj_is_str(r)) {
            vstr_add_char(&v, 's');
            size_t n;
            const char *s = mp_obj_str_get_data(r, &n);
            vstr_add_strn(&v, s, n);
        } else {
            vstr_add_char(&v, 'n');
            mp_obj_print_helper(&pr, r, PRINT_REPR);
        }
        mp_obj_t s = mtw_keep(mp_obj_new_str_from_vstr(&v));
        nlr_pop();
        return mp_obj_str_get_str(s);
    }
    mp_obj_print_exception(&mp_plat_print, MP_OBJ_FROM_PTR(nlr.ret_val));
    return "e";
}
