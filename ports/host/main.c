// Entry point of the float32 host twin (see Makefile):
//   micropython-fw [-X heapsize=N[k|m]] [-p DIR]... [-c CODE | script.py] [args...]
// Everything but the clock and the heap is ports/common/mtport.c, shared with
// the QEMU Cortex-M firmware. The default GC heap comes from MT_FW_HEAP
// (bytes, default 16 MiB); -X heapsize= may ask for up to 1 GiB.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "py/mpconfig.h"
#include "../common/mtport.h"

mp_uint_t mt_port_ticks_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (mp_uint_t)ts.tv_sec * 1000000u + (mp_uint_t)(ts.tv_nsec / 1000);
}

int main(int argc, char **argv) {
    const char *heap_env = getenv("MT_FW_HEAP");
    size_t heap_default = heap_env != NULL ? (size_t)strtoul(heap_env, NULL, 0) : (size_t)16 << 20;
    // Reserved, not touched: gc_init only writes the part in use.
    size_t heap_max = (size_t)1 << 30;
    if (heap_default > heap_max) {
        heap_max = heap_default;
    }
    char *heap = malloc(heap_max);
    if (heap == NULL) {
        fprintf(stderr, "host twin: cannot reserve a %zu-byte heap\n", heap_max);
        return 2;
    }
    int ret = mt_port_main(argc, argv, heap, heap_max, heap_default);
    fflush(stdout);
    free(heap);
    return ret;
}
