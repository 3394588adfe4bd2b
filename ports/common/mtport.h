// Shared by the project's own MicroPython ports (ports/qemu: Cortex-M under
// QEMU with semihosting; ports/host: the float32 host twin). Both are built
// from the same sources so that a script behaves the same bit for bit; only
// the clock (mt_port_ticks_us) and the exit path differ per port.
#ifndef MT_PORT_H
#define MT_PORT_H

#include <stddef.h>
#include "py/mpconfig.h"

// Monotonic microseconds (wraps); provided by each port.
mp_uint_t mt_port_ticks_us(void);

#if MT_PORT_SEMIHOSTING
// One character of the semihosting console (blocking; -1 at its end).
int mt_port_stdin_chr(void);
#endif

// Runs `[-X heapsize=N[k|m]] [-p DIR]... [-c CODE | script.py] [args...]`
// (neither: the REPL, or on the host piped stdin as a script). On the host
// MICROPYPATH and sys.argv follow the unix port's conventions with the GC heap carved from heap[0:heap_max] (default size
// heap_default). Returns the process exit code.
int mt_port_main(int argc, char **argv, char *heap, size_t heap_max, size_t heap_default);

#endif
