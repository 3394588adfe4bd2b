// The GC heap's high-water mark, tracked by the firmware itself (the `mtheap`
// module; only in the HEAPPEAK=1 build that `make mem-mcu` uses, so the
// instruction counts of the bench firmware stay as they are).
//
// peak = the largest live heap (bytes reachable at a collection, as
// gc.mem_alloc() after gc.collect()) at any allocation, the new block
// included: what a heap must hold at least (fragmentation aside). It is found
// without collecting at every allocation: the linker wraps gc_alloc,
// gc_realloc and gc_free (-Wl,--wrap=...), which keep `used`, an upper bound
// of the live bytes (garbage is only subtracted by a collection); only when
// `used` passes peak + MTHEAP_SLACK does the wrapper collect, which makes
// `used` exact (gc_collect_end is wrapped too), and raises peak to it. So the
// reported peak is at most MTHEAP_SLACK below the true one.
#include <stdbool.h>
#include <stddef.h>

#include "py/gc.h"
#include "py/runtime.h"

#define MTHEAP_SLACK 256

static bool tracking;
static size_t used;  // >= live bytes while tracking
static size_t peak;

void *__real_gc_alloc(size_t n_bytes, unsigned int alloc_flags);
void *__real_gc_realloc(void *ptr, size_t n_bytes, bool allow_move);
void __real_gc_free(void *ptr);
void __real_gc_collect_end(void);
void *__wrap_gc_alloc(size_t n_bytes, unsigned int alloc_flags);
void *__wrap_gc_realloc(void *ptr, size_t n_bytes, bool allow_move);
void __wrap_gc_free(void *ptr);
void __wrap_gc_collect_end(void);

static size_t live_bytes(void) {
    gc_info_t info;
    gc_info(&info);
    return info.used;  // bytes (gc_info scales its block counts)
}

void __wrap_gc_collect_end(void) {
    __real_gc_collect_end();
    if (tracking) {
        used = live_bytes();
    }
}

// `p` (the new block) is an argument, so the collection's stack scan keeps it.
static void *check(void *volatile p) {
    if (used > peak + MTHEAP_SLACK && !gc_is_locked()) {
        gc_collect();
        if (used > peak) {
            peak = used;
        }
    }
    return p;
}

void *__wrap_gc_alloc(size_t n_bytes, unsigned int alloc_flags) {
    void *p = __real_gc_alloc(n_bytes, alloc_flags);
    if (!tracking || p == NULL) {
        return p;
    }
    used += gc_nbytes(p);
    return check(p);
}

void *__wrap_gc_realloc(void *ptr, size_t n_bytes, bool allow_move) {
    if (!tracking) {
        return __real_gc_realloc(ptr, n_bytes, allow_move);
    }
    size_t old = ptr != NULL ? gc_nbytes(ptr) : 0;
    void *p = __real_gc_realloc(ptr, n_bytes, allow_move);
    if (p == NULL) {
        return p;
    }
    // a collection inside made `used` exact with the old block still live
    used = used + gc_nbytes(p) - old;
    return check(p);
}

void __wrap_gc_free(void *ptr) {
    if (tracking && ptr != NULL) {
        size_t n = gc_nbytes(ptr);
        used = used >= n ? used - n : 0;
    }
    __real_gc_free(ptr);
}

// mtheap.start(): collect, peak = the live heap now, track from here.
static mp_obj_t mtheap_start(void) {
    tracking = true;
    gc_collect();
    peak = used;
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_0(mtheap_start_obj, mtheap_start);

// mtheap.peak(): the high-water mark in bytes since start() (0 before it).
static mp_obj_t mtheap_peak(void) {
    if (tracking) {  // the heap now may be above the last recorded peak by < slack
        gc_collect();
        if (used > peak) {
            peak = used;
        }
    }
    return mp_obj_new_int_from_uint(peak);
}
static MP_DEFINE_CONST_FUN_OBJ_0(mtheap_peak_obj, mtheap_peak);

static const mp_rom_map_elem_t mtheap_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR_mtheap) },
    { MP_ROM_QSTR(MP_QSTR_start), MP_ROM_PTR(&mtheap_start_obj) },
    { MP_ROM_QSTR(MP_QSTR_peak), MP_ROM_PTR(&mtheap_peak_obj) },
};
static MP_DEFINE_CONST_DICT(mtheap_globals, mtheap_globals_table);

const mp_obj_module_t mtheap_module = {
    .base = { &mp_type_module },
    .globals = (mp_obj_dict_t *)&mtheap_globals,
};
MP_REGISTER_MODULE(MP_QSTR_mtheap, mtheap_module);
