// Shared by the project's own MicroPython ports (ports/qemu: Cortex-M under
// QEMU with semihosting; ports/host: the float32 host twin). Both are built
// from the same sources so that a script behaves the same bit for bit; only
// the clock (mt_port_ticks_us) and the exit path differ per port.
#ifndef MT_PORT_H
#define MT_PORT_H

#include <stddef.h>
#include <stdlib.h>
#include "py/mpconfig.h"

// Monotonic microseconds (wraps); provided by each port.
mp_uint_t mt_port_ticks_us(void);

#if MT_PORT_SEMIHOSTING
// One character of the REPL's input, the board's UART (blocking; -1 at its end).
int mt_port_stdin_chr(void);
#endif

#if MT_PORT_BOARD
// Board mode (mtboard.c): REPL output to the board's UART and one received
// character without waiting (-1: none), provided by each port.
void mt_port_uart_tx(const char *str, size_t len);
int mt_port_uart_rx(void);
// The REPL's input: what mt_board_poll kept while a program ran, then the UART.
int mt_board_stdin_chr(void);
// The board's session loop (never returns): `[-X heapsize=N] [-f FLASH.img -B BLOCK_SIZE]`.
int mt_board_main(int argc, char **argv, char *heap, size_t heap_max, size_t heap_default);
#endif

#if MT_PORT_LFS
// Mounts the littlefs image file (mtlfs.c) again; 0 or a negative littlefs error.
int mt_lfs_mount(const char *image, uint32_t block_size);
#endif

// "256k", "1m", "4096": a size in bytes.
static inline size_t mt_port_parse_size(const char *s) {
    char *end;
    unsigned long v = strtoul(s, &end, 0);
    if (*end == 'k' || *end == 'K') {
        v <<= 10;
    } else if (*end == 'm' || *end == 'M') {
        v <<= 20;
    }
    return (size_t)v;
}

// Runs `[-X heapsize=N[k|m]] [-p DIR]... [-c CODE | script.py] [args...]`
// (neither: the REPL, or on the host piped stdin as a script). On the host
// MICROPYPATH and sys.argv follow the unix port's conventions with the GC heap carved from heap[0:heap_max] (default size
// heap_default). Returns the process exit code.
int mt_port_main(int argc, char **argv, char *heap, size_t heap_max, size_t heap_default);

#endif
