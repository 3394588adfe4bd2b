// Entry point of the fwport test interpreter (see Makefile):
//   micropython-fw script.py [args...]
// runs one script with sys.argv = [script, args...], prints an uncaught
// exception and exits 1. Besides the core it offers what the project's
// MicroPython-side test runners need: a binary-file open() (read / write /
// close), time.ticks_us / ticks_ms / ticks_diff. The GC heap size comes from
// MT_FW_HEAP (bytes, default 16 MiB).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "py/builtin.h"
#include "py/compile.h"
#include "py/gc.h"
#include "py/lexer.h"
#include "py/mperrno.h"
#include "py/runtime.h"
#include "py/stackctrl.h"
#include "py/stream.h"
#include "shared/runtime/gchelper.h"

// ---------------------------------------------------------------------------
// open(path, mode="rb"): a binary file on top of stdio.

typedef struct {
    mp_obj_base_t base;
    FILE *fp;
} fw_file_t;

static mp_uint_t fw_file_read(mp_obj_t self_in, void *buf, mp_uint_t size, int *errcode) {
    fw_file_t *self = MP_OBJ_TO_PTR(self_in);
    size_t n = fread(buf, 1, size, self->fp);
    if (n < size && ferror(self->fp)) {
        *errcode = MP_EIO;
        return MP_STREAM_ERROR;
    }
    return n;
}

static mp_uint_t fw_file_write(mp_obj_t self_in, const void *buf, mp_uint_t size, int *errcode) {
    fw_file_t *self = MP_OBJ_TO_PTR(self_in);
    if (fwrite(buf, 1, size, self->fp) != size) {
        *errcode = MP_EIO;
        return MP_STREAM_ERROR;
    }
    return size;
}

static mp_uint_t fw_file_ioctl(mp_obj_t self_in, mp_uint_t request, uintptr_t arg, int *errcode) {
    fw_file_t *self = MP_OBJ_TO_PTR(self_in);
    (void)arg;
    if (request == MP_STREAM_CLOSE) {
        if (self->fp != NULL) {
            fclose(self->fp);
            self->fp = NULL;
        }
        return 0;
    }
    *errcode = MP_EINVAL;
    return MP_STREAM_ERROR;
}

static const mp_stream_p_t fw_file_stream = {
    .read = fw_file_read,
    .write = fw_file_write,
    .ioctl = fw_file_ioctl,
};

static const mp_rom_map_elem_t fw_file_locals_table[] = {
    { MP_ROM_QSTR(MP_QSTR_read), MP_ROM_PTR(&mp_stream_read_obj) },
    { MP_ROM_QSTR(MP_QSTR_write), MP_ROM_PTR(&mp_stream_write_obj) },
    { MP_ROM_QSTR(MP_QSTR_close), MP_ROM_PTR(&mp_stream_close_obj) },
};
static MP_DEFINE_CONST_DICT(fw_file_locals, fw_file_locals_table);

static MP_DEFINE_CONST_OBJ_TYPE(
    fw_type_file,
    MP_QSTR_FileIO,
    MP_TYPE_FLAG_NONE,
    protocol, &fw_file_stream,
    locals_dict, &fw_file_locals
    );

static mp_obj_t fw_open(size_t n_args, const mp_obj_t *args) {
    const char *path = mp_obj_str_get_str(args[0]);
    const char *mode = n_args > 1 ? mp_obj_str_get_str(args[1]) : "rb";
    const char *cmode = strchr(mode, 'w') != NULL ? "wb" : "rb";
    FILE *fp = fopen(path, cmode);
    if (fp == NULL) {
        mp_raise_OSError(errno);
    }
    fw_file_t *f = mp_obj_malloc(fw_file_t, &fw_type_file);
    f->fp = fp;
    return MP_OBJ_FROM_PTR(f);
}
MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(fw_open_obj, 1, 2, fw_open);

// ---------------------------------------------------------------------------
// time: ticks only.

static mp_uint_t fw_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (mp_uint_t)ts.tv_sec * 1000000u + (mp_uint_t)(ts.tv_nsec / 1000);
}

#define FW_TICKS_PERIOD ((mp_uint_t)1 << 30)
#define FW_TICKS_MASK (FW_TICKS_PERIOD - 1)

static mp_obj_t fw_ticks_us(void) {
    return MP_OBJ_NEW_SMALL_INT(fw_now_us() & FW_TICKS_MASK);
}
static MP_DEFINE_CONST_FUN_OBJ_0(fw_ticks_us_obj, fw_ticks_us);

static mp_obj_t fw_ticks_ms(void) {
    return MP_OBJ_NEW_SMALL_INT((fw_now_us() / 1000u) & FW_TICKS_MASK);
}
static MP_DEFINE_CONST_FUN_OBJ_0(fw_ticks_ms_obj, fw_ticks_ms);

static mp_obj_t fw_ticks_diff(mp_obj_t end_in, mp_obj_t start_in) {
    mp_uint_t d = ((mp_uint_t)MP_OBJ_SMALL_INT_VALUE(end_in) - (mp_uint_t)MP_OBJ_SMALL_INT_VALUE(start_in))
        & FW_TICKS_MASK;
    mp_int_t diff = (mp_int_t)d;
    if (d >= FW_TICKS_PERIOD / 2) {
        diff -= (mp_int_t)FW_TICKS_PERIOD;
    }
    return MP_OBJ_NEW_SMALL_INT(diff);
}
static MP_DEFINE_CONST_FUN_OBJ_2(fw_ticks_diff_obj, fw_ticks_diff);

static const mp_rom_map_elem_t fw_time_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR_time) },
    { MP_ROM_QSTR(MP_QSTR_ticks_us), MP_ROM_PTR(&fw_ticks_us_obj) },
    { MP_ROM_QSTR(MP_QSTR_ticks_ms), MP_ROM_PTR(&fw_ticks_ms_obj) },
    { MP_ROM_QSTR(MP_QSTR_ticks_diff), MP_ROM_PTR(&fw_ticks_diff_obj) },
};
static MP_DEFINE_CONST_DICT(fw_time_globals, fw_time_globals_table);

const mp_obj_module_t fw_time_module = {
    .base = { &mp_type_module },
    .globals = (mp_obj_dict_t *)&fw_time_globals,
};
MP_REGISTER_MODULE(MP_QSTR_time, fw_time_module);

// ---------------------------------------------------------------------------

static int run_file(const char *path) {
    nlr_buf_t nlr;
    if (nlr_push(&nlr) == 0) {
        qstr name = qstr_from_str(path);
        mp_lexer_t *lex = mp_lexer_new_from_file(name);
        mp_parse_tree_t tree = mp_parse(lex, MP_PARSE_FILE_INPUT);
        mp_obj_t fun = mp_compile(&tree, name, false);
        mp_call_function_0(fun);
        nlr_pop();
        return 0;
    }
    mp_obj_print_exception(&mp_plat_print, MP_OBJ_FROM_PTR(nlr.ret_val));
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s script.py [args...]\n", argv[0]);
        return 2;
    }
    const char *heap_env = getenv("MT_FW_HEAP");
    size_t heap_size = heap_env != NULL ? (size_t)strtoul(heap_env, NULL, 0) : (size_t)16 << 20;
    char *heap = malloc(heap_size);
    if (heap == NULL) {
        fprintf(stderr, "fwport: cannot allocate a %zu-byte heap\n", heap_size);
        return 2;
    }
    int stack_dummy;
    mp_stack_ctrl_init();
    mp_stack_set_top(&stack_dummy);
    mp_stack_set_limit(256 * 1024);
    gc_init(heap, heap + heap_size);
    mp_init();
    for (int i = 1; i < argc; i++) {
        mp_obj_list_append(mp_sys_argv, mp_obj_new_str(argv[i], strlen(argv[i])));
    }
    int ret = run_file(argv[1]);
    fflush(stdout);
    mp_deinit();
    free(heap);
    return ret;
}

void gc_collect(void) {
    gc_collect_start();
    gc_helper_collect_regs_and_stack();
    gc_collect_end();
}

mp_import_stat_t mp_import_stat(const char *path) {
    (void)path;
    return MP_IMPORT_STAT_NO_EXIST;
}

void mp_hal_stdout_tx_strn_cooked(const char *str, size_t len) {
    fwrite(str, 1, len, stdout);
}

void nlr_jump_fail(void *val) {
    (void)val;
    fprintf(stderr, "fwport: uncaught NLR\n");
    abort();
}
