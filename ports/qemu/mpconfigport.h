// Cortex-M firmware for QEMU (see README.md): the shared configuration plus
// what a 32-bit Thumb board needs to load dynamic native modules (.mpy with
// native code for armv6m .. the core's own arch, py/persistentcode.h).
#include "mpconfigcommon.h"

// Files are the host's, through newlib's rdimon (ARM semihosting).
#define MT_PORT_SEMIHOSTING             (1)
#define MICROPY_EMIT_THUMB              (1)
#define MICROPY_EMIT_INLINE_THUMB       (0)
#if defined(__ARM_ARCH_6M__)
#define MICROPY_EMIT_THUMB_ARMV7M       (0)
#endif
// Native code runs in Thumb state: set bit 0 of its address before calling.
#define MICROPY_MAKE_POINTER_CALLABLE(p) ((void *)((uintptr_t)(p) | 1))
// The semihosting stack limit: the linker script's stack minus a margin.
#define MT_PORT_STACK_LIMIT             (MT_STACK_SIZE - 2048)

#define MICROPY_HW_BOARD_NAME           "microtrain-qemu-" MT_BOARD
#define MICROPY_HW_MCU_NAME             MT_MCU

typedef int32_t mp_int_t;
typedef uint32_t mp_uint_t;
typedef long mp_off_t;
#define MP_SSIZE_MAX                    (0x7fffffff)
