// The lab's WebAssembly build (see Makefile): the configuration shared with the
// QEMU Cortex-M firmware and the host twin (ports/common), with double floats as
// the unix port whose results the lab test compares with.
#include <stdlib.h>  // (malloc / free of the heap areas)
#include "../common/mpconfigcommon.h"

#define MT_FLOAT_IMPL                   (MICROPY_FLOAT_IMPL_DOUBLE)
#define MT_PORT_STACK_LIMIT             (1024 * 1024)
// The C stack of WebAssembly is partly out of reach (values held in wasm locals):
// the GC runs between calls from JavaScript only, when no Python frame is live
// (main.c), and a full heap grows by a new area from the C heap meanwhile.
#define MICROPY_GC_SPLIT_HEAP           (1)
#define MICROPY_GC_SPLIT_HEAP_AUTO      (1)
#define MT_PORT_OWN_GC_COLLECT          (1)

#define MICROPY_HW_BOARD_NAME           "microtrain-lab"
#define MICROPY_HW_MCU_NAME             "wasm32"

typedef intptr_t mp_int_t;
typedef uintptr_t mp_uint_t;
typedef long mp_off_t;

// (mtport.c's runner reads piped stdin through it; unused here but compiled)
#define MICROPY_HELPER_LEXER_UNIX       (1)
