// The float32 host twin (see Makefile): the configuration shared with the
// QEMU Cortex-M firmware (ports/common), on a 64-bit host. MT_FW_FLOAT_IMPL
// (single like the boards, or double like the unix port) picks the floats.
#include "../common/mpconfigcommon.h"

#ifndef MT_FLOAT_IMPL
#define MT_FLOAT_IMPL                   (MT_FW_FLOAT_IMPL)
#endif
#define MT_PORT_STACK_LIMIT             (256 * 1024)

#define MICROPY_HW_BOARD_NAME           "microtrain-host-twin"
#define MICROPY_HW_MCU_NAME             "host"

typedef intptr_t mp_int_t;
typedef uintptr_t mp_uint_t;
typedef long mp_off_t;

// Piped stdin runs as a script (mp_lexer_new_from_fd), as on the unix port.
#define MICROPY_HELPER_LEXER_UNIX       (1)
