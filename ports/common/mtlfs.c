// The board's flash file system (board mode, MT_PORT_LFS): littlefs, built
// from the C sources of the littlefs-python sdist that `make setup` unpacks,
// on a block device whose bytes live in a flash-image file on the host, plus
// the port's own thin `open` / `os` / import glue (the 1.23 core has no
// extmod VFS). littlefs is power-safe: a reset at any point leaves either the
// old or the new state of every file and directory entry.
//
// The block device is four small functions over a POSIX descriptor (newlib's
// rdimon or picolibc's semihosting on the QEMU boards): a port with real flash
// replaces mt_flash_read / prog / erase / sync with its flash driver's.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "py/builtin.h"
#include "py/gc.h"
#include "py/mperrno.h"
#include "py/reader.h"
#include "py/runtime.h"
#include "py/stream.h"
#include "lfs.h"
#include "mtport.h"

#if MT_PORT_LFS

// Cache and lookahead sizes are RAM-only settings (not stored on the flash):
// what a small board spends, per open file one cache of MT_LFS_CACHE bytes.
#define MT_LFS_RW_SIZE 16
#define MT_LFS_CACHE 256
#define MT_LFS_LOOKAHEAD 32

// ---------------------------------------------------------------------------
// the block device: the flash-image file

static int mt_flash_fd = -1;

static int mt_flash_seek(const struct lfs_config *c, lfs_block_t block, lfs_off_t off) {
    off_t at = (off_t)block * (off_t)c->block_size + (off_t)off;
    return lseek(mt_flash_fd, at, SEEK_SET) == at ? 0 : LFS_ERR_IO;
}

static int mt_flash_read(const struct lfs_config *c, lfs_block_t block, lfs_off_t off, void *buf,
    lfs_size_t size) {
    if (mt_flash_seek(c, block, off) != 0) {
        return LFS_ERR_IO;
    }
    lfs_size_t got = 0;
    while (got < size) {
        ssize_t n = read(mt_flash_fd, (char *)buf + got, size - got);
        if (n <= 0) {
            return LFS_ERR_IO;
        }
        got += (lfs_size_t)n;
    }
    return 0;
}

static int mt_flash_write(const struct lfs_config *c, lfs_block_t block, lfs_off_t off, const void *buf,
    lfs_size_t size) {
    if (mt_flash_seek(c, block, off) != 0) {
        return LFS_ERR_IO;
    }
    lfs_size_t put = 0;
    while (put < size) {
        ssize_t n = write(mt_flash_fd, (const char *)buf + put, size - put);
        if (n <= 0) {
            return LFS_ERR_IO;
        }
        put += (lfs_size_t)n;
    }
    return 0;
}

static int mt_flash_prog(const struct lfs_config *c, lfs_block_t block, lfs_off_t off, const void *buf,
    lfs_size_t size) {
    return mt_flash_write(c, block, off, buf, size);
}

// An erased NOR block reads as 0xFF, as on a board's flash.
static int mt_flash_erase(const struct lfs_config *c, lfs_block_t block) {
    static uint8_t ff[64];
    memset(ff, 0xFF, sizeof(ff));
    for (lfs_off_t off = 0; off < c->block_size; off += sizeof(ff)) {
        int r = mt_flash_write(c, block, off, ff, sizeof(ff));
        if (r != 0) {
            return r;
        }
    }
    return 0;
}

// Each write has reached the host file when it returns: nothing to flush.
static int mt_flash_sync(const struct lfs_config *c) {
    (void)c;
    return 0;
}

// ---------------------------------------------------------------------------
// mounting

static uint8_t mt_lfs_rbuf[MT_LFS_CACHE];
static uint8_t mt_lfs_pbuf[MT_LFS_CACHE];
static uint32_t mt_lfs_lookahead[MT_LFS_LOOKAHEAD / 4];
static lfs_t mt_lfs;
static struct lfs_config mt_lfs_cfg;
static bool mt_lfs_mounted;
static char mt_cwd[MICROPY_ALLOC_PATH_MAX] = "/";

int mt_lfs_mount(const char *image, uint32_t block_size) {
    if (mt_lfs_mounted) {
        lfs_unmount(&mt_lfs);  // drops the list of open files of the last session
        mt_lfs_mounted = false;
    }
    if (mt_flash_fd < 0) {
        mt_flash_fd = open(image, O_RDWR);
        if (mt_flash_fd < 0) {
            return -errno;
        }
    }
    off_t size = lseek(mt_flash_fd, 0, SEEK_END);
    if (block_size < 128 || size <= 0 || (uint32_t)size % block_size != 0) {
        return LFS_ERR_INVAL;
    }
    struct lfs_config *c = &mt_lfs_cfg;
    memset(c, 0, sizeof(*c));
    c->read = mt_flash_read;
    c->prog = mt_flash_prog;
    c->erase = mt_flash_erase;
    c->sync = mt_flash_sync;
    c->read_size = MT_LFS_RW_SIZE;
    c->prog_size = MT_LFS_RW_SIZE;
    c->block_size = block_size;
    c->block_count = (lfs_size_t)((uint32_t)size / block_size);
    c->block_cycles = 500;  // wear levelling: move metadata after this many erases
    c->cache_size = MT_LFS_CACHE;
    c->lookahead_size = MT_LFS_LOOKAHEAD;
    c->read_buffer = mt_lfs_rbuf;
    c->prog_buffer = mt_lfs_pbuf;
    c->lookahead_buffer = mt_lfs_lookahead;
    int r = lfs_mount(&mt_lfs, c);
    mt_lfs_mounted = r == 0;
    strcpy(mt_cwd, "/");
    return r;
}

static void mt_lfs_check(int r) {
    if (r < 0) {
        mp_raise_OSError(-r);  // littlefs's error codes are the negated POSIX errnos
    }
}

static void mt_lfs_need_mount(void) {
    if (!mt_lfs_mounted) {
        mp_raise_OSError(MP_ENODEV);
    }
}

// Absolute path of `path` relative to the current folder, with "." and ".."
// resolved (littlefs paths start at the root).
static const char *mt_lfs_path(const char *path, char *out) {
    size_t n = 0;
    const char *parts[2] = { path[0] == '/' ? "" : mt_cwd, path };
    for (int k = 0; k < 2; k++) {
        const char *p = parts[k];
        while (*p != '\0') {
            while (*p == '/') {
                p++;
            }
            const char *e = p;
            while (*e != '\0' && *e != '/') {
                e++;
            }
            size_t len = (size_t)(e - p);
            if (len == 0 || (len == 1 && p[0] == '.')) {
                // nothing
            } else if (len == 2 && p[0] == '.' && p[1] == '.') {
                while (n > 0 && out[--n] != '/') {  // back to the last "/" (the root stays)
                }
            } else {
                if (n + 1 + len + 1 > MICROPY_ALLOC_PATH_MAX) {
                    mp_raise_OSError(-LFS_ERR_NAMETOOLONG);
                }
                out[n++] = '/';
                memcpy(out + n, p, len);
                n += len;
            }
            p = e;
        }
    }
    if (n == 0) {
        out[n++] = '/';
    }
    out[n] = '\0';
    return out;
}

#define MT_PATH(var, obj) \
    char var##_buf[MICROPY_ALLOC_PATH_MAX]; \
    const char *var = mt_lfs_path(mp_obj_str_get_str(obj), var##_buf)

// ---------------------------------------------------------------------------
// open(path, mode="r"): a littlefs file, binary ("b") or text

typedef struct {
    mp_obj_base_t base;
    bool open;
    lfs_file_t file;
    struct lfs_file_config cfg;
    uint8_t cache[MT_LFS_CACHE];
} mt_lfs_file_t;

static mt_lfs_file_t *mt_lfs_file_check(mp_obj_t self_in, int *errcode) {
    mt_lfs_file_t *self = MP_OBJ_TO_PTR(self_in);
    if (!self->open || !mt_lfs_mounted) {
        *errcode = MP_EBADF;
        return NULL;
    }
    return self;
}

static mp_uint_t mt_lfs_file_read(mp_obj_t self_in, void *buf, mp_uint_t size, int *errcode) {
    mt_lfs_file_t *self = mt_lfs_file_check(self_in, errcode);
    if (self == NULL) {
        return MP_STREAM_ERROR;
    }
    lfs_ssize_t n = lfs_file_read(&mt_lfs, &self->file, buf, size);
    if (n < 0) {
        *errcode = -n;
        return MP_STREAM_ERROR;
    }
    return (mp_uint_t)n;
}

static mp_uint_t mt_lfs_file_write(mp_obj_t self_in, const void *buf, mp_uint_t size, int *errcode) {
    mt_lfs_file_t *self = mt_lfs_file_check(self_in, errcode);
    if (self == NULL) {
        return MP_STREAM_ERROR;
    }
    lfs_ssize_t n = lfs_file_write(&mt_lfs, &self->file, buf, size);
    if (n < 0) {
        *errcode = -n;
        return MP_STREAM_ERROR;
    }
    return (mp_uint_t)n;
}

static mp_uint_t mt_lfs_file_ioctl(mp_obj_t self_in, mp_uint_t request, uintptr_t arg, int *errcode) {
    mt_lfs_file_t *self = MP_OBJ_TO_PTR(self_in);
    if (request == MP_STREAM_CLOSE) {
        if (self->open) {
            self->open = false;
            if (mt_lfs_mounted) {
                int r = lfs_file_close(&mt_lfs, &self->file);
                if (r < 0) {
                    *errcode = -r;
                    return MP_STREAM_ERROR;
                }
            }
        }
        return 0;
    }
    if (mt_lfs_file_check(self_in, errcode) == NULL) {
        return MP_STREAM_ERROR;
    }
    if (request == MP_STREAM_FLUSH) {
        int r = lfs_file_sync(&mt_lfs, &self->file);
        if (r < 0) {
            *errcode = -r;
            return MP_STREAM_ERROR;
        }
        return 0;
    }
    if (request == MP_STREAM_SEEK) {
        struct mp_stream_seek_t *s = (struct mp_stream_seek_t *)arg;
        lfs_soff_t off = lfs_file_seek(&mt_lfs, &self->file, (lfs_soff_t)s->offset, s->whence);
        if (off < 0) {
            *errcode = -off;
            return MP_STREAM_ERROR;
        }
        s->offset = (mp_off_t)off;
        return 0;
    }
    *errcode = MP_EINVAL;
    return MP_STREAM_ERROR;
}

static const mp_rom_map_elem_t mt_lfs_file_locals_table[] = {
    { MP_ROM_QSTR(MP_QSTR_read), MP_ROM_PTR(&mp_stream_read_obj) },
    { MP_ROM_QSTR(MP_QSTR_readinto), MP_ROM_PTR(&mp_stream_readinto_obj) },
    { MP_ROM_QSTR(MP_QSTR_readline), MP_ROM_PTR(&mp_stream_unbuffered_readline_obj) },
    { MP_ROM_QSTR(MP_QSTR_write), MP_ROM_PTR(&mp_stream_write_obj) },
    { MP_ROM_QSTR(MP_QSTR_seek), MP_ROM_PTR(&mp_stream_seek_obj) },
    { MP_ROM_QSTR(MP_QSTR_tell), MP_ROM_PTR(&mp_stream_tell_obj) },
    { MP_ROM_QSTR(MP_QSTR_flush), MP_ROM_PTR(&mp_stream_flush_obj) },
    { MP_ROM_QSTR(MP_QSTR_close), MP_ROM_PTR(&mp_stream_close_obj) },
    { MP_ROM_QSTR(MP_QSTR___del__), MP_ROM_PTR(&mp_stream_close_obj) },
    { MP_ROM_QSTR(MP_QSTR___enter__), MP_ROM_PTR(&mp_identity_obj) },
    { MP_ROM_QSTR(MP_QSTR___exit__), MP_ROM_PTR(&mp_stream___exit___obj) },
};
static MP_DEFINE_CONST_DICT(mt_lfs_file_locals, mt_lfs_file_locals_table);

static const mp_stream_p_t mt_lfs_fileio_stream = {
    .read = mt_lfs_file_read,
    .write = mt_lfs_file_write,
    .ioctl = mt_lfs_file_ioctl,
};

static const mp_stream_p_t mt_lfs_textio_stream = {
    .read = mt_lfs_file_read,
    .write = mt_lfs_file_write,
    .ioctl = mt_lfs_file_ioctl,
    .is_text = true,
};

static MP_DEFINE_CONST_OBJ_TYPE(mt_lfs_type_fileio, MP_QSTR_FileIO, MP_TYPE_FLAG_ITER_IS_STREAM,
    protocol, &mt_lfs_fileio_stream, locals_dict, &mt_lfs_file_locals);
static MP_DEFINE_CONST_OBJ_TYPE(mt_lfs_type_textio, MP_QSTR_TextIOWrapper, MP_TYPE_FLAG_ITER_IS_STREAM,
    protocol, &mt_lfs_textio_stream, locals_dict, &mt_lfs_file_locals);

// A file object with a finaliser: a file dropped without close() is closed by
// the GC, so littlefs's list of open files never points into freed memory.
static mt_lfs_file_t *mt_lfs_file_open(const char *path, int flags, const mp_obj_type_t *type) {
    mt_lfs_need_mount();
    mt_lfs_file_t *f = mp_obj_malloc_with_finaliser(mt_lfs_file_t, type);
    f->open = false;
    memset(&f->cfg, 0, sizeof(f->cfg));
    f->cfg.buffer = f->cache;
    mt_lfs_check(lfs_file_opencfg(&mt_lfs, &f->file, path, flags, &f->cfg));
    f->open = true;
    return f;
}

static mp_obj_t mt_lfs_open(size_t n_args, const mp_obj_t *args) {
    MT_PATH(path, args[0]);
    const char *mode = n_args > 1 ? mp_obj_str_get_str(args[1]) : "r";
    int flags = LFS_O_RDONLY;
    if (strchr(mode, 'w') != NULL) {
        flags = LFS_O_WRONLY | LFS_O_CREAT | LFS_O_TRUNC;
    } else if (strchr(mode, 'a') != NULL) {
        flags = LFS_O_WRONLY | LFS_O_CREAT | LFS_O_APPEND;
    } else if (strchr(mode, 'x') != NULL) {
        flags = LFS_O_WRONLY | LFS_O_CREAT | LFS_O_EXCL;
    }
    if (strchr(mode, '+') != NULL) {
        flags = (flags & ~(LFS_O_RDONLY | LFS_O_WRONLY)) | LFS_O_RDWR;
    }
    const mp_obj_type_t *type = strchr(mode, 'b') != NULL ? &mt_lfs_type_fileio : &mt_lfs_type_textio;
    return MP_OBJ_FROM_PTR(mt_lfs_file_open(path, flags, type));
}
MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mt_open_obj, 1, 2, mt_lfs_open);

// ---------------------------------------------------------------------------
// imports and scripts from the flash

typedef struct {
    mt_lfs_file_t *f;
    uint16_t len, pos;
    uint8_t buf[32];
} mt_lfs_reader_t;

static mp_uint_t mt_lfs_reader_readbyte(void *data) {
    mt_lfs_reader_t *r = data;
    if (r->pos >= r->len) {
        lfs_ssize_t n = r->f->open ? lfs_file_read(&mt_lfs, &r->f->file, r->buf, sizeof(r->buf)) : 0;
        if (n <= 0) {
            return MP_READER_EOF;
        }
        r->len = (uint16_t)n;
        r->pos = 0;
    }
    return r->buf[r->pos++];
}

static void mt_lfs_reader_close(void *data) {
    mt_lfs_reader_t *r = data;
    if (r->f->open) {
        r->f->open = false;
        lfs_file_close(&mt_lfs, &r->f->file);
    }
    m_del_obj(mt_lfs_reader_t, r);
}

void mp_reader_new_file(mp_reader_t *reader, qstr filename) {
    char buf[MICROPY_ALLOC_PATH_MAX];
    const char *path = mt_lfs_path(qstr_str(filename), buf);
    mt_lfs_reader_t *r = m_new_obj(mt_lfs_reader_t);
    r->len = r->pos = 0;
    r->f = NULL;
    r->f = mt_lfs_file_open(path, LFS_O_RDONLY, &mt_lfs_type_fileio);
    reader->data = r;
    reader->readbyte = mt_lfs_reader_readbyte;
    reader->close = mt_lfs_reader_close;
}

mp_import_stat_t mp_import_stat(const char *path) {
    if (!mt_lfs_mounted) {
        return MP_IMPORT_STAT_NO_EXIST;
    }
    char buf[MICROPY_ALLOC_PATH_MAX];
    struct lfs_info info;
    if (lfs_stat(&mt_lfs, mt_lfs_path(path, buf), &info) < 0) {
        return MP_IMPORT_STAT_NO_EXIST;
    }
    return info.type == LFS_TYPE_DIR ? MP_IMPORT_STAT_DIR : MP_IMPORT_STAT_FILE;
}

// ---------------------------------------------------------------------------
// os: what mpremote's file commands and microtrain's checkpoints use

static mp_obj_t mt_os_stat(mp_obj_t path_in) {
    mt_lfs_need_mount();
    MT_PATH(path, path_in);
    struct lfs_info info;
    mt_lfs_check(lfs_stat(&mt_lfs, path, &info));
    mp_obj_t t[10];
    for (size_t i = 0; i < 10; i++) {
        t[i] = MP_OBJ_NEW_SMALL_INT(0);
    }
    t[0] = MP_OBJ_NEW_SMALL_INT(info.type == LFS_TYPE_DIR ? 0x4000 : 0x8000);  // S_IFDIR / S_IFREG
    t[6] = mp_obj_new_int_from_uint(info.type == LFS_TYPE_DIR ? 0 : info.size);
    return mp_obj_new_tuple(10, t);
}
static MP_DEFINE_CONST_FUN_OBJ_1(mt_os_stat_obj, mt_os_stat);

static mp_obj_t mt_os_statvfs(mp_obj_t path_in) {
    (void)path_in;
    mt_lfs_need_mount();
    lfs_ssize_t used = lfs_fs_size(&mt_lfs);
    mt_lfs_check((int)used);
    mp_uint_t avail = mt_lfs_cfg.block_count - (mp_uint_t)used;
    mp_obj_t t[10] = {
        mp_obj_new_int_from_uint(mt_lfs_cfg.block_size), mp_obj_new_int_from_uint(mt_lfs_cfg.block_size),
        mp_obj_new_int_from_uint(mt_lfs_cfg.block_count), mp_obj_new_int_from_uint(avail),
        mp_obj_new_int_from_uint(avail), MP_OBJ_NEW_SMALL_INT(0), MP_OBJ_NEW_SMALL_INT(0),
        MP_OBJ_NEW_SMALL_INT(0), MP_OBJ_NEW_SMALL_INT(0), MP_OBJ_NEW_SMALL_INT(LFS_NAME_MAX),
    };
    return mp_obj_new_tuple(10, t);
}
static MP_DEFINE_CONST_FUN_OBJ_1(mt_os_statvfs_obj, mt_os_statvfs);

static mp_obj_t mt_os_remove(mp_obj_t path_in) {
    mt_lfs_need_mount();
    MT_PATH(path, path_in);
    struct lfs_info info;
    mt_lfs_check(lfs_stat(&mt_lfs, path, &info));
    if (info.type == LFS_TYPE_DIR) {
        mp_raise_OSError(MP_EISDIR);  // os.remove never removes a folder (that is rmdir)
    }
    mt_lfs_check(lfs_remove(&mt_lfs, path));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_1(mt_os_remove_obj, mt_os_remove);

static mp_obj_t mt_os_rmdir(mp_obj_t path_in) {
    mt_lfs_need_mount();
    MT_PATH(path, path_in);
    struct lfs_info info;
    mt_lfs_check(lfs_stat(&mt_lfs, path, &info));
    if (info.type != LFS_TYPE_DIR) {
        mp_raise_OSError(MP_ENOTDIR);
    }
    mt_lfs_check(lfs_remove(&mt_lfs, path));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_1(mt_os_rmdir_obj, mt_os_rmdir);

// littlefs renames atomically, over an existing file too.
static mp_obj_t mt_os_rename(mp_obj_t old_in, mp_obj_t new_in) {
    mt_lfs_need_mount();
    MT_PATH(from, old_in);
    MT_PATH(to, new_in);
    mt_lfs_check(lfs_rename(&mt_lfs, from, to));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_2(mt_os_rename_obj, mt_os_rename);

static mp_obj_t mt_os_mkdir(mp_obj_t path_in) {
    mt_lfs_need_mount();
    MT_PATH(path, path_in);
    mt_lfs_check(lfs_mkdir(&mt_lfs, path));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_1(mt_os_mkdir_obj, mt_os_mkdir);

static mp_obj_t mt_os_getcwd(void) {
    return mp_obj_new_str(mt_cwd, strlen(mt_cwd));
}
static MP_DEFINE_CONST_FUN_OBJ_0(mt_os_getcwd_obj, mt_os_getcwd);

static mp_obj_t mt_os_chdir(mp_obj_t path_in) {
    mt_lfs_need_mount();
    MT_PATH(path, path_in);
    struct lfs_info info;
    mt_lfs_check(lfs_stat(&mt_lfs, path, &info));
    if (info.type != LFS_TYPE_DIR) {
        mp_raise_OSError(MP_ENOTDIR);
    }
    strcpy(mt_cwd, path);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_1(mt_os_chdir_obj, mt_os_chdir);

// The folder's entries as (name, type, inode, size) tuples, or names only.
static mp_obj_t mt_os_list(size_t n_args, const mp_obj_t *args, bool tuples) {
    mt_lfs_need_mount();
    MT_PATH(path, n_args > 0 ? args[0] : MP_OBJ_NEW_QSTR(MP_QSTR_));
    lfs_dir_t dir;
    mt_lfs_check(lfs_dir_open(&mt_lfs, &dir, path));
    mp_obj_t list = mp_obj_new_list(0, NULL);
    nlr_buf_t nlr;
    if (nlr_push(&nlr) == 0) {
        struct lfs_info info;
        int r;
        while ((r = lfs_dir_read(&mt_lfs, &dir, &info)) > 0) {
            if (strcmp(info.name, ".") == 0 || strcmp(info.name, "..") == 0) {
                continue;
            }
            mp_obj_t name = mp_obj_new_str(info.name, strlen(info.name));
            if (tuples) {
                mp_obj_t t[4] = {
                    name, MP_OBJ_NEW_SMALL_INT(info.type == LFS_TYPE_DIR ? 0x4000 : 0x8000),
                    MP_OBJ_NEW_SMALL_INT(0), mp_obj_new_int_from_uint(info.type == LFS_TYPE_DIR ? 0 : info.size),
                };
                name = mp_obj_new_tuple(4, t);
            }
            mp_obj_list_append(list, name);
        }
        mt_lfs_check(r);
        nlr_pop();
    } else {
        lfs_dir_close(&mt_lfs, &dir);  // MemoryError while listing: the folder is closed
        nlr_jump(nlr.ret_val);
    }
    lfs_dir_close(&mt_lfs, &dir);
    return list;
}

static mp_obj_t mt_os_listdir(size_t n_args, const mp_obj_t *args) {
    return mt_os_list(n_args, args, false);
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mt_os_listdir_obj, 0, 1, mt_os_listdir);

static mp_obj_t mt_os_ilistdir(size_t n_args, const mp_obj_t *args) {
    return mp_getiter(mt_os_list(n_args, args, true), NULL);
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mt_os_ilistdir_obj, 0, 1, mt_os_ilistdir);

// Files are committed on close / flush and renames at once; the block device
// keeps nothing back, so there is nothing more to write out.
static mp_obj_t mt_os_sync(void) {
    mt_lfs_need_mount();
    mt_lfs_check(mt_flash_sync(&mt_lfs_cfg));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_0(mt_os_sync_obj, mt_os_sync);

static const mp_rom_map_elem_t mt_os_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR_os) },
    { MP_ROM_QSTR(MP_QSTR_stat), MP_ROM_PTR(&mt_os_stat_obj) },
    { MP_ROM_QSTR(MP_QSTR_statvfs), MP_ROM_PTR(&mt_os_statvfs_obj) },
    { MP_ROM_QSTR(MP_QSTR_remove), MP_ROM_PTR(&mt_os_remove_obj) },
    { MP_ROM_QSTR(MP_QSTR_rename), MP_ROM_PTR(&mt_os_rename_obj) },
    { MP_ROM_QSTR(MP_QSTR_mkdir), MP_ROM_PTR(&mt_os_mkdir_obj) },
    { MP_ROM_QSTR(MP_QSTR_rmdir), MP_ROM_PTR(&mt_os_rmdir_obj) },
    { MP_ROM_QSTR(MP_QSTR_listdir), MP_ROM_PTR(&mt_os_listdir_obj) },
    { MP_ROM_QSTR(MP_QSTR_ilistdir), MP_ROM_PTR(&mt_os_ilistdir_obj) },
    { MP_ROM_QSTR(MP_QSTR_getcwd), MP_ROM_PTR(&mt_os_getcwd_obj) },
    { MP_ROM_QSTR(MP_QSTR_chdir), MP_ROM_PTR(&mt_os_chdir_obj) },
    { MP_ROM_QSTR(MP_QSTR_sync), MP_ROM_PTR(&mt_os_sync_obj) },
};
static MP_DEFINE_CONST_DICT(mt_os_globals, mt_os_globals_table);

const mp_obj_module_t mt_os_module = {
    .base = { &mp_type_module },
    .globals = (mp_obj_dict_t *)&mt_os_globals,
};
MP_REGISTER_MODULE(MP_QSTR_os, mt_os_module);

#endif // MT_PORT_LFS
