// RV32IMC firmware for QEMU `virt` (see README.md): the configuration shared
// with the Cortex-M boards and the host twin (ports/common/mpconfigcommon.h),
// on a 32-bit RISC-V core without an FPU.
#include "mpconfigcommon.h"

// Files, command line and exit go through RISC-V semihosting (picolibc's
// libsemihost), as ARM semihosting does on the Cortex-M boards.
#define MT_PORT_SEMIHOSTING             (1)
// The 1.23 core has no RISC-V NLR in assembly: setjmp/longjmp (picolibc's).
#define MICROPY_NLR_SETJMP              (1)
#define MT_PORT_STACK_LIMIT             (MT_STACK_SIZE - 2048)
// Console writes and rename are this port's (main.c): picolibc's write(1/2)
// has no console behind it, and its rename is not semihosting's.
#define MT_PORT_CONSOLE_WRITE           mt_port_console_write
#define MT_PORT_RENAME                  mt_port_rename

#define MICROPY_HW_BOARD_NAME           "microtrain-qemu-rv32"
#define MICROPY_HW_MCU_NAME             "RV32IMC"

typedef int32_t mp_int_t;
typedef uint32_t mp_uint_t;
typedef long mp_off_t;
#define MP_SSIZE_MAX                    (0x7fffffff)

#include <sys/types.h>
ssize_t mt_port_console_write(int fd, const void *buf, size_t len);
int mt_port_rename(const char *from, const char *to);
