// Runtime shared by ports/qemu (Cortex-M firmware, files over semihosting)
// and ports/host (the float32 host twin): the script runner / REPL, the
// stdio HAL, open(), a small `os` and `time`, imports from the host folder.
// Files go through POSIX open/read/write/lseek/close: glibc on the host,
// newlib's rdimon (ARM semihosting) on the boards, so one source serves both.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "py/builtin.h"
#include "py/compile.h"
#include "py/gc.h"
#include "py/lexer.h"
#include "py/mperrno.h"
#include "py/mphal.h"
#include "py/runtime.h"
#include "py/stackctrl.h"
#include "py/stream.h"
#include "shared/readline/readline.h"
#include "shared/runtime/gchelper.h"
#include "shared/runtime/pyexec.h"
#include "mtport.h"

#if !MT_PORT_SEMIHOSTING
#include <dirent.h>
#include <limits.h>
#include <sys/stat.h>
#endif

// The host twin reads its environment (os.getenv, MICROPYPATH) as the unix
// port does; boards have none, nor has a host build standing in for a board
// firmware (make NO_ENV=1).
#ifndef MT_PORT_ENV
#define MT_PORT_ENV (!MT_PORT_SEMIHOSTING)
#endif

// fd 1 / 2 (stdout, stderr): POSIX write, unless the port routes its console
// elsewhere (ports/qemu/rv32: picolibc's semihosting has no fd 1 / 2).
#ifndef MT_PORT_CONSOLE_WRITE
#define MT_PORT_CONSOLE_WRITE write
#endif

// ---------------------------------------------------------------------------
// stdio HAL: fd 0 / 1 (the semihosting console on the boards).

int mp_hal_stdin_rx_chr(void) {
    #if MT_PORT_BOARD
    return mt_board_stdin_chr();
    #elif MT_PORT_SEMIHOSTING
    int c = mt_port_stdin_chr();
    return c < 0 ? CHAR_CTRL_D : c;
    #else
    unsigned char c;
    for (;;) {
        ssize_t n = read(0, &c, 1);
        if (n == 1) {
            return c;
        }
        if (n == 0) {
            return CHAR_CTRL_D;  // end of input ends the REPL
        }
    }
    #endif
}

mp_uint_t mp_hal_stdout_tx_strn(const char *str, size_t len) {
    #if MT_PORT_BOARD
    mt_port_uart_tx(str, len);
    return (mp_uint_t)len;
    #endif
    size_t left = len;
    while (left > 0) {
        ssize_t n = MT_PORT_CONSOLE_WRITE(1, str, left);
        if (n <= 0) {
            break;
        }
        str += n;
        left -= (size_t)n;
    }
    return (mp_uint_t)(len - left);
}

void mp_hal_stdout_tx_str(const char *str) {
    mp_hal_stdout_tx_strn(str, strlen(str));
}

// No "\n" -> "\r\n" here: script output compares byte for byte across ports.
// A board's serial terminal (and mpremote) wants "\r\n", as every board port sends.
void mp_hal_stdout_tx_strn_cooked(const char *str, size_t len) {
    #if MT_PORT_BOARD
    const char *end = str + len;
    while (str < end) {
        const char *nl = memchr(str, '\n', (size_t)(end - str));
        if (nl == NULL) {
            mp_hal_stdout_tx_strn(str, (size_t)(end - str));
            break;
        }
        mp_hal_stdout_tx_strn(str, (size_t)(nl - str));
        mp_hal_stdout_tx_strn("\r\n", 2);
        str = nl + 1;
    }
    #else
    mp_hal_stdout_tx_strn(str, len);
    #endif
}

// sys.stdout is always writable; whether input waits is not known to semihosting.
uintptr_t mp_hal_stdio_poll(uintptr_t poll_flags) {
    return poll_flags & MP_STREAM_POLL_WR;
}

mp_uint_t mp_hal_ticks_ms(void) {
    return mt_port_ticks_us() / 1000u;
}

mp_uint_t mp_hal_ticks_us(void) {
    return mt_port_ticks_us();
}

void mp_hal_delay_ms(mp_uint_t ms) {
    mp_uint_t t0 = mt_port_ticks_us();
    while (mt_port_ticks_us() - t0 < ms * 1000u) {
    }
}

#if !MT_PORT_LFS  // board mode: open, os and imports are mtlfs.c's (the flash)
// ---------------------------------------------------------------------------
// open(path, mode="r"): binary ("b") or text file on a POSIX descriptor.

typedef struct {
    mp_obj_base_t base;
    int fd;
} mt_file_t;

static mt_file_t *mt_file_check(mp_obj_t self_in, int *errcode) {
    mt_file_t *self = MP_OBJ_TO_PTR(self_in);
    if (self->fd < 0) {
        *errcode = MP_EBADF;
        return NULL;
    }
    return self;
}

static mp_uint_t mt_file_read(mp_obj_t self_in, void *buf, mp_uint_t size, int *errcode) {
    mt_file_t *self = mt_file_check(self_in, errcode);
    if (self == NULL) {
        return MP_STREAM_ERROR;
    }
    mp_uint_t got = 0;
    while (got < size) {  // semihosting may return short reads before the end
        ssize_t n = read(self->fd, (char *)buf + got, size - got);
        if (n < 0) {
            *errcode = errno;
            return MP_STREAM_ERROR;
        }
        if (n == 0) {
            break;
        }
        got += (mp_uint_t)n;
    }
    return got;
}

static mp_uint_t mt_file_write(mp_obj_t self_in, const void *buf, mp_uint_t size, int *errcode) {
    mt_file_t *self = mt_file_check(self_in, errcode);
    if (self == NULL) {
        return MP_STREAM_ERROR;
    }
    mp_uint_t put = 0;
    while (put < size) {
        ssize_t n = write(self->fd, (const char *)buf + put, size - put);
        if (n <= 0) {
            *errcode = n < 0 ? errno : MP_EIO;
            return MP_STREAM_ERROR;
        }
        put += (mp_uint_t)n;
    }
    return size;
}

static mp_uint_t mt_file_ioctl(mp_obj_t self_in, mp_uint_t request, uintptr_t arg, int *errcode) {
    mt_file_t *self = MP_OBJ_TO_PTR(self_in);
    if (request == MP_STREAM_CLOSE) {
        if (self->fd >= 0) {
            close(self->fd);
            self->fd = -1;
        }
        return 0;
    }
    if (mt_file_check(self_in, errcode) == NULL) {
        return MP_STREAM_ERROR;
    }
    if (request == MP_STREAM_FLUSH) {
        return 0;  // unbuffered: every write went to the descriptor
    }
    if (request == MP_STREAM_SEEK) {
        struct mp_stream_seek_t *s = (struct mp_stream_seek_t *)arg;
        off_t off = lseek(self->fd, (off_t)s->offset, s->whence);
        if (off < 0) {
            *errcode = errno;
            return MP_STREAM_ERROR;
        }
        s->offset = (mp_off_t)off;
        return 0;
    }
    *errcode = MP_EINVAL;
    return MP_STREAM_ERROR;
}

static const mp_rom_map_elem_t mt_file_locals_table[] = {
    { MP_ROM_QSTR(MP_QSTR_read), MP_ROM_PTR(&mp_stream_read_obj) },
    { MP_ROM_QSTR(MP_QSTR_readinto), MP_ROM_PTR(&mp_stream_readinto_obj) },
    { MP_ROM_QSTR(MP_QSTR_readline), MP_ROM_PTR(&mp_stream_unbuffered_readline_obj) },
    { MP_ROM_QSTR(MP_QSTR_write), MP_ROM_PTR(&mp_stream_write_obj) },
    { MP_ROM_QSTR(MP_QSTR_seek), MP_ROM_PTR(&mp_stream_seek_obj) },
    { MP_ROM_QSTR(MP_QSTR_tell), MP_ROM_PTR(&mp_stream_tell_obj) },
    { MP_ROM_QSTR(MP_QSTR_flush), MP_ROM_PTR(&mp_stream_flush_obj) },
    { MP_ROM_QSTR(MP_QSTR_close), MP_ROM_PTR(&mp_stream_close_obj) },
    { MP_ROM_QSTR(MP_QSTR___enter__), MP_ROM_PTR(&mp_identity_obj) },
    { MP_ROM_QSTR(MP_QSTR___exit__), MP_ROM_PTR(&mp_stream___exit___obj) },
};
static MP_DEFINE_CONST_DICT(mt_file_locals, mt_file_locals_table);

static const mp_stream_p_t mt_fileio_stream = {
    .read = mt_file_read,
    .write = mt_file_write,
    .ioctl = mt_file_ioctl,
};

static const mp_stream_p_t mt_textio_stream = {
    .read = mt_file_read,
    .write = mt_file_write,
    .ioctl = mt_file_ioctl,
    .is_text = true,
};

static MP_DEFINE_CONST_OBJ_TYPE(mt_type_fileio, MP_QSTR_FileIO, MP_TYPE_FLAG_ITER_IS_STREAM,
    protocol, &mt_fileio_stream, locals_dict, &mt_file_locals);
static MP_DEFINE_CONST_OBJ_TYPE(mt_type_textio, MP_QSTR_TextIOWrapper, MP_TYPE_FLAG_ITER_IS_STREAM,
    protocol, &mt_textio_stream, locals_dict, &mt_file_locals);

static mp_obj_t mt_open(size_t n_args, const mp_obj_t *args) {
    const char *path = mp_obj_str_get_str(args[0]);
    const char *mode = n_args > 1 ? mp_obj_str_get_str(args[1]) : "r";
    int flags = O_RDONLY;
    if (strchr(mode, 'w') != NULL) {
        flags = O_WRONLY | O_CREAT | O_TRUNC;
    } else if (strchr(mode, 'a') != NULL) {
        flags = O_WRONLY | O_CREAT | O_APPEND;
    }
    if (strchr(mode, '+') != NULL) {
        flags = (flags & ~(O_RDONLY | O_WRONLY)) | O_RDWR;
    }
    #ifdef O_BINARY
    flags |= O_BINARY;
    #endif
    int fd = open(path, flags, 0644);
    if (fd < 0) {
        mp_raise_OSError(errno);
    }
    const mp_obj_type_t *type = strchr(mode, 'b') != NULL ? &mt_type_fileio : &mt_type_textio;
    mt_file_t *f = mp_obj_malloc(mt_file_t, type);
    f->fd = fd;
    return MP_OBJ_FROM_PTR(f);
}
MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mt_open_obj, 1, 2, mt_open);

// ---------------------------------------------------------------------------
// os: what microtrain's checkpoints and model loader use.

// Size of a regular file, or -1 (semihosting has no stat: open + seek to end).
static long mt_file_size(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        return -1;
    }
    off_t size = lseek(fd, 0, SEEK_END);
    close(fd);
    return (long)size;
}

static mp_obj_t mt_os_stat(mp_obj_t path_in) {
    const char *path = mp_obj_str_get_str(path_in);
    long size = mt_file_size(path);
    if (size < 0) {
        mp_raise_OSError(MP_ENOENT);
    }
    mp_obj_t t[10];
    for (size_t i = 0; i < 10; i++) {
        t[i] = MP_OBJ_NEW_SMALL_INT(0);
    }
    t[0] = MP_OBJ_NEW_SMALL_INT(0x8000);  // S_IFREG
    t[6] = mp_obj_new_int(size);
    return mp_obj_new_tuple(10, t);
}
static MP_DEFINE_CONST_FUN_OBJ_1(mt_os_stat_obj, mt_os_stat);

static mp_obj_t mt_os_remove(mp_obj_t path_in) {
    if (unlink(mp_obj_str_get_str(path_in)) != 0) {
        mp_raise_OSError(errno);
    }
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_1(mt_os_remove_obj, mt_os_remove);

#if defined(MT_PORT_RENAME)
#define mt_rename MT_PORT_RENAME
#elif MT_PORT_SEMIHOSTING
// newlib's rename() goes through link(), which semihosting lacks (ENOSYS);
// rdimon's _rename is the SYS_RENAME call.
extern int _rename(const char *from, const char *to);
#define mt_rename _rename
#else
#define mt_rename rename
#endif

static mp_obj_t mt_os_rename(mp_obj_t old_in, mp_obj_t new_in) {
    if (mt_rename(mp_obj_str_get_str(old_in), mp_obj_str_get_str(new_in)) != 0) {
        mp_raise_OSError(errno);
    }
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_2(mt_os_rename_obj, mt_os_rename);

#if MT_PORT_ENV
// microtrain.kern reads MICROTRAIN_PURE through it, as on the unix port.
static mp_obj_t mt_os_getenv(size_t n_args, const mp_obj_t *args) {
    const char *v = getenv(mp_obj_str_get_str(args[0]));
    if (v == NULL) {
        return n_args > 1 ? args[1] : mp_const_none;
    }
    return mp_obj_new_str(v, strlen(v));
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mt_os_getenv_obj, 1, 2, mt_os_getenv);
#endif

#if !MT_PORT_SEMIHOSTING
// Folders exist on the host only (semihosting has none): what the tests of
// checkpoint saving use, as on the unix port.
static mp_obj_t mt_os_listdir(size_t n_args, const mp_obj_t *args) {
    const char *path = n_args > 0 ? mp_obj_str_get_str(args[0]) : ".";
    mp_obj_t list = mp_obj_new_list(0, NULL);
    DIR *dir = opendir(path);
    if (dir == NULL) {
        mp_raise_OSError(errno);
    }
    nlr_buf_t nlr;
    if (nlr_push(&nlr) == 0) {
        struct dirent *e;
        while ((e = readdir(dir)) != NULL) {
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
                mp_obj_list_append(list, mp_obj_new_str(e->d_name, strlen(e->d_name)));
            }
        }
        nlr_pop();
    } else {
        closedir(dir);  // MemoryError while listing: no descriptor leaks
        nlr_jump(nlr.ret_val);
    }
    closedir(dir);
    return list;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mt_os_listdir_obj, 0, 1, mt_os_listdir);

static mp_obj_t mt_os_mkdir(mp_obj_t path_in) {
    if (mkdir(mp_obj_str_get_str(path_in), 0777) != 0) {
        mp_raise_OSError(errno);
    }
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_1(mt_os_mkdir_obj, mt_os_mkdir);
#endif

static const mp_rom_map_elem_t mt_os_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR_os) },
    { MP_ROM_QSTR(MP_QSTR_stat), MP_ROM_PTR(&mt_os_stat_obj) },
    { MP_ROM_QSTR(MP_QSTR_remove), MP_ROM_PTR(&mt_os_remove_obj) },
    { MP_ROM_QSTR(MP_QSTR_rename), MP_ROM_PTR(&mt_os_rename_obj) },
    #if MT_PORT_ENV
    { MP_ROM_QSTR(MP_QSTR_getenv), MP_ROM_PTR(&mt_os_getenv_obj) },
    #endif
    #if !MT_PORT_SEMIHOSTING
    { MP_ROM_QSTR(MP_QSTR_listdir), MP_ROM_PTR(&mt_os_listdir_obj) },
    { MP_ROM_QSTR(MP_QSTR_mkdir), MP_ROM_PTR(&mt_os_mkdir_obj) },
    #endif
};
static MP_DEFINE_CONST_DICT(mt_os_globals, mt_os_globals_table);

const mp_obj_module_t mt_os_module = {
    .base = { &mp_type_module },
    .globals = (mp_obj_dict_t *)&mt_os_globals,
};
MP_REGISTER_MODULE(MP_QSTR_os, mt_os_module);
#endif // !MT_PORT_LFS

// ---------------------------------------------------------------------------
// binascii.crc32 and uctypes.addressof / bytearray_at: the two pieces of
// extmod (absent from the core-only tree) that microtrain uses on boards
// (checkpoint CRCs; zero-copy model loading), so that memory use and speed
// are the boards', not those of the pure-Python fallbacks.

static mp_obj_t mt_crc32(size_t n_args, const mp_obj_t *args) {
    mp_buffer_info_t bi;
    mp_get_buffer_raise(args[0], &bi, MP_BUFFER_READ);
    uint32_t crc = n_args > 1 ? (uint32_t)mp_obj_get_int_truncated(args[1]) : 0;
    crc = ~crc;
    const uint8_t *p = bi.buf;
    for (size_t i = 0; i < bi.len; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) {
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
        }
    }
    return mp_obj_new_int_from_uint(~crc);
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mt_crc32_obj, 1, 2, mt_crc32);

static const mp_rom_map_elem_t mt_binascii_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR_binascii) },
    { MP_ROM_QSTR(MP_QSTR_crc32), MP_ROM_PTR(&mt_crc32_obj) },
};
static MP_DEFINE_CONST_DICT(mt_binascii_globals, mt_binascii_globals_table);

const mp_obj_module_t mt_binascii_module = {
    .base = { &mp_type_module },
    .globals = (mp_obj_dict_t *)&mt_binascii_globals,
};
MP_REGISTER_MODULE(MP_QSTR_binascii, mt_binascii_module);

static mp_obj_t mt_addressof(mp_obj_t obj) {
    mp_buffer_info_t bi;
    mp_get_buffer_raise(obj, &bi, MP_BUFFER_READ);
    return mp_obj_new_int_from_uint((uintptr_t)bi.buf);
}
static MP_DEFINE_CONST_FUN_OBJ_1(mt_addressof_obj, mt_addressof);

static mp_obj_t mt_bytearray_at(mp_obj_t addr_in, mp_obj_t size_in) {
    return mp_obj_new_bytearray_by_ref((size_t)mp_obj_get_int(size_in),
        (void *)(uintptr_t)mp_obj_int_get_truncated(addr_in));
}
static MP_DEFINE_CONST_FUN_OBJ_2(mt_bytearray_at_obj, mt_bytearray_at);

static const mp_rom_map_elem_t mt_uctypes_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR_uctypes) },
    { MP_ROM_QSTR(MP_QSTR_addressof), MP_ROM_PTR(&mt_addressof_obj) },
    { MP_ROM_QSTR(MP_QSTR_bytearray_at), MP_ROM_PTR(&mt_bytearray_at_obj) },
};
static MP_DEFINE_CONST_DICT(mt_uctypes_globals, mt_uctypes_globals_table);

const mp_obj_module_t mt_uctypes_module = {
    .base = { &mp_type_module },
    .globals = (mp_obj_dict_t *)&mt_uctypes_globals,
};
MP_REGISTER_MODULE(MP_QSTR_uctypes, mt_uctypes_module);

// ---------------------------------------------------------------------------
// time: ticks only (the 30-bit wrap of the boards' ports).

#define MT_TICKS_PERIOD ((mp_uint_t)1 << 30)
#define MT_TICKS_MASK (MT_TICKS_PERIOD - 1)

static mp_obj_t mt_ticks_us(void) {
    return MP_OBJ_NEW_SMALL_INT(mt_port_ticks_us() & MT_TICKS_MASK);
}
static MP_DEFINE_CONST_FUN_OBJ_0(mt_ticks_us_obj, mt_ticks_us);

static mp_obj_t mt_ticks_ms(void) {
    return MP_OBJ_NEW_SMALL_INT((mt_port_ticks_us() / 1000u) & MT_TICKS_MASK);
}
static MP_DEFINE_CONST_FUN_OBJ_0(mt_ticks_ms_obj, mt_ticks_ms);

static mp_obj_t mt_ticks_diff(mp_obj_t end_in, mp_obj_t start_in) {
    mp_uint_t d = ((mp_uint_t)mp_obj_get_int(end_in) - (mp_uint_t)mp_obj_get_int(start_in)) & MT_TICKS_MASK;
    mp_int_t diff = (mp_int_t)d;
    if (d >= MT_TICKS_PERIOD / 2) {
        diff -= (mp_int_t)MT_TICKS_PERIOD;
    }
    return MP_OBJ_NEW_SMALL_INT(diff);
}
static MP_DEFINE_CONST_FUN_OBJ_2(mt_ticks_diff_obj, mt_ticks_diff);

static mp_obj_t mt_sleep_ms(mp_obj_t ms_in) {
    mp_hal_delay_ms((mp_uint_t)mp_obj_get_int(ms_in));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_1(mt_sleep_ms_obj, mt_sleep_ms);

static const mp_rom_map_elem_t mt_time_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR_time) },
    { MP_ROM_QSTR(MP_QSTR_ticks_us), MP_ROM_PTR(&mt_ticks_us_obj) },
    { MP_ROM_QSTR(MP_QSTR_ticks_ms), MP_ROM_PTR(&mt_ticks_ms_obj) },
    { MP_ROM_QSTR(MP_QSTR_ticks_diff), MP_ROM_PTR(&mt_ticks_diff_obj) },
    { MP_ROM_QSTR(MP_QSTR_sleep_ms), MP_ROM_PTR(&mt_sleep_ms_obj) },
};
static MP_DEFINE_CONST_DICT(mt_time_globals, mt_time_globals_table);

const mp_obj_module_t mt_time_module = {
    .base = { &mp_type_module },
    .globals = (mp_obj_dict_t *)&mt_time_globals,
};
MP_REGISTER_MODULE(MP_QSTR_time, mt_time_module);

#if !MT_PORT_LFS
// ---------------------------------------------------------------------------
// imports from the host folder. Semihosting cannot tell a directory from a
// file (and opening a directory succeeds on Linux), so a package is a folder
// holding __init__.py / __init__.mpy; the host twin uses the same rule.

static bool mt_exists_with(const char *path, const char *suffix) {
    char buf[MICROPY_ALLOC_PATH_MAX + 16];
    size_t n = strlen(path), m = strlen(suffix);
    if (n + m + 1 > sizeof(buf)) {
        return false;
    }
    memcpy(buf, path, n);
    memcpy(buf + n, suffix, m + 1);
    int fd = open(buf, O_RDONLY);
    if (fd < 0) {
        return false;
    }
    close(fd);
    return true;
}

mp_import_stat_t mp_import_stat(const char *path) {
    if (mt_exists_with(path, "/__init__.py") || mt_exists_with(path, "/__init__.mpy")) {
        return MP_IMPORT_STAT_DIR;
    }
    if (mt_exists_with(path, "")) {
        return MP_IMPORT_STAT_FILE;
    }
    return MP_IMPORT_STAT_NO_EXIST;
}
#endif // !MT_PORT_LFS

// ---------------------------------------------------------------------------
// the runner

#if !MT_PORT_OWN_GC_COLLECT  // (the WebAssembly build cannot scan its stack: ports/webassembly/main.c)
void gc_collect(void) {
    gc_collect_start();
    gc_helper_collect_regs_and_stack();
    gc_collect_end();
}
#endif

void nlr_jump_fail(void *val) {
    (void)val;
    static const char msg[] = "mtport: uncaught NLR\n";
    ssize_t r = MT_PORT_CONSOLE_WRITE(2, msg, sizeof(msg) - 1);
    (void)r;
    exit(3);
}

// Messages of the runner itself (bad arguments, a missing script, a
// SystemExit message) go to stderr, as the unix port's; tracebacks go to
// stdout, as the unix port's do too.
static void mt_stderr_strn(void *env, const char *str, size_t len) {
    (void)env;
    #if MT_PORT_BOARD
    mp_hal_stdout_tx_strn(str, len);  // a board has one serial line
    return;
    #endif
    ssize_t r = MT_PORT_CONSOLE_WRITE(2, str, len);
    (void)r;
}
static const mp_print_t mt_stderr_print = { NULL, mt_stderr_strn };

// 0 or the SystemExit code; other exceptions are printed and give 1.
static int mt_handle_exc(mp_obj_t exc) {
    if (mp_obj_is_subclass_fast(MP_OBJ_FROM_PTR(mp_obj_get_type(exc)), MP_OBJ_FROM_PTR(&mp_type_SystemExit))) {
        mp_obj_t code = mp_obj_exception_get_value(exc);
        if (code == mp_const_none) {
            return 0;
        }
        mp_int_t v;
        if (mp_obj_get_int_maybe(code, &v)) {
            return (int)(v & 255);
        }
        mp_obj_print_helper(&mt_stderr_print, code, PRINT_STR);  // sys.exit("msg")
        mp_print_str(&mt_stderr_print, "\n");
        return 1;
    }
    mp_obj_print_exception(&mp_plat_print, exc);
    return 1;
}

enum { MT_SRC_FILE, MT_SRC_STR, MT_SRC_STDIN };

// Compiles and runs a script file, a -c string or (host) standard input.
static int mt_run(int kind, const char *src) {
    nlr_buf_t nlr;
    if (nlr_push(&nlr) == 0) {
        mp_lexer_t *lex;
        if (kind == MT_SRC_FILE) {
            lex = mp_lexer_new_from_file(qstr_from_str(src));
        #if !MT_PORT_SEMIHOSTING
        } else if (kind == MT_SRC_STDIN) {
            lex = mp_lexer_new_from_fd(MP_QSTR__lt_stdin_gt_, 0, false);
        #endif
        } else {
            lex = mp_lexer_new_from_str_len(MP_QSTR__lt_stdin_gt_, src, strlen(src), 0);
        }
        qstr name = lex->source_name;
        mp_parse_tree_t tree = mp_parse(lex, MP_PARSE_FILE_INPUT);
        mp_obj_t fun = mp_compile(&tree, name, false);
        mp_call_function_0(fun);
        nlr_pop();
        return 0;
    }
    return mt_handle_exc(MP_OBJ_FROM_PTR(nlr.ret_val));
}

static int mt_usage(void) {
    mp_print_str(&mt_stderr_print,
        "usage: [-X heapsize=N[k|m]] [-p DIR]... [-c CODE | script.py] [args...]\n");
    return 2;
}

// sys.path entries from a colon-separated list (MICROPYPATH); an empty
// entry is "" (the current folder), as on the unix port.
static void mt_path_append_list(const char *list) {
    for (;;) {
        const char *colon = strchr(list, ':');
        size_t n = colon != NULL ? (size_t)(colon - list) : strlen(list);
        mp_obj_list_append(mp_sys_path, mp_obj_new_str(list, n));
        if (colon == NULL) {
            return;
        }
        list = colon + 1;
    }
}

int mt_port_main(int argc, char **argv, char *heap, size_t heap_max, size_t heap_default) {
    size_t heap_size = heap_default;
    const char *paths[8];
    size_t n_paths = 0;
    const char *code = NULL;
    int a = 1;
    for (; a < argc && argv[a][0] == '-'; a++) {
        if (strcmp(argv[a], "-X") == 0 && a + 1 < argc && strncmp(argv[a + 1], "heapsize=", 9) == 0) {
            heap_size = mt_port_parse_size(argv[++a] + 9);
        } else if (strcmp(argv[a], "-p") == 0 && a + 1 < argc && n_paths < MP_ARRAY_SIZE(paths)) {
            paths[n_paths++] = argv[++a];
        } else if (strcmp(argv[a], "-c") == 0 && a + 1 < argc) {
            code = argv[++a];
            break;  // what follows CODE is sys.argv[1:]
        } else {
            return mt_usage();
        }
    }
    if (heap_size < 4096 || heap_size > heap_max) {
        mp_printf(&mt_stderr_print, "mtport: heapsize must be 4096..%u bytes\n", (unsigned)heap_max);
        return 2;
    }
    // argv[a] is the script or CODE; sys.argv is [script, args...] or ["-c", args...]
    // (as CPython and the unix port).
    const char *script = code == NULL && a < argc ? argv[a] : NULL;
    if (script != NULL) {
        int fd = open(script, O_RDONLY);
        if (fd < 0) {
            mp_printf(&mt_stderr_print, "%s: can't open file '%s': [Errno %d]\n", argv[0], script, errno);
            return 2;
        }
        close(fd);
    }

    int stack_dummy;
    mp_stack_ctrl_init();
    mp_stack_set_top(&stack_dummy);
    mp_stack_set_limit(MT_PORT_STACK_LIMIT);
    gc_init(heap, heap + heap_size);
    mp_init();

    // sys.path: the script's folder (as CPython and the unix port: on the
    // host its real path instead of ""; on boards next to "", the host
    // folder), then MICROPYPATH's entries (they replace the default ".frozen"
    // as on the unix port), each -p folder, and the host's own library
    // folder (json; the unix port has it built in).
    mp_obj_list_t *path = MP_OBJ_TO_PTR(mp_sys_path);
    path->len = 0;
    #if MT_PORT_SEMIHOSTING
    if (script != NULL) {
        const char *slash = strrchr(script, '/');
        if (slash != NULL) {
            mp_obj_list_append(mp_sys_path, mp_obj_new_str(script, (size_t)(slash - script)));
        }
    }
    mp_obj_list_append(mp_sys_path, MP_OBJ_NEW_QSTR(MP_QSTR_));
    #else
    static char real[PATH_MAX];  // not on the stack the GC scans; only used here
    if (script != NULL && realpath(script, real) != NULL) {
        mp_obj_list_append(mp_sys_path, mp_obj_new_str(real, (size_t)(strrchr(real, '/') - real)));
    } else {
        mp_obj_list_append(mp_sys_path, MP_OBJ_NEW_QSTR(MP_QSTR_));
    }
    #endif
    #if MT_PORT_ENV
    const char *env_path = getenv("MICROPYPATH");
    #else
    const char *env_path = NULL;
    #endif
    if (env_path != NULL) {
        if (env_path[0] != '\0') {
            mt_path_append_list(env_path);
        }
    } else {
        #if MICROPY_MODULE_FROZEN
        mp_obj_list_append(mp_sys_path, MP_OBJ_NEW_QSTR(MP_QSTR__dot_frozen));
        #endif
    }
    for (size_t i = 0; i < n_paths; i++) {
        mp_obj_list_append(mp_sys_path, mp_obj_new_str(paths[i], strlen(paths[i])));
    }
    #ifdef MT_PORT_LIBDIR
    mp_obj_list_append(mp_sys_path, mp_obj_new_str(MT_PORT_LIBDIR, strlen(MT_PORT_LIBDIR)));
    #endif
    if (code != NULL) {
        mp_obj_list_append(mp_sys_argv, mp_obj_new_str("-c", 2));
        a++;
    }
    for (int i = a; i < argc; i++) {
        mp_obj_list_append(mp_sys_argv, mp_obj_new_str(argv[i], strlen(argv[i])));
    }

    int ret = 0;
    if (script != NULL) {
        ret = mt_run(MT_SRC_FILE, script);
    } else if (code != NULL) {
        ret = mt_run(MT_SRC_STR, code);
    #if !MT_PORT_SEMIHOSTING
    } else if (!isatty(0)) {
        ret = mt_run(MT_SRC_STDIN, NULL);  // piped input runs as a script, as on the unix port
    #endif
    } else {
        for (;;) {
            if (pyexec_mode_kind == PYEXEC_MODE_RAW_REPL) {
                if (pyexec_raw_repl() != 0) {
                    break;
                }
            } else if (pyexec_friendly_repl() != 0) {
                break;
            }
        }
    }
    mp_deinit();
    return ret;
}
