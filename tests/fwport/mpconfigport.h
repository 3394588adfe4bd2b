// Configuration of the fwport test interpreter (see Makefile): the
// "extra features" level that the esp32, rp2 and stm32 ports use, minus what
// the core-only tree cannot provide, with the float implementation chosen by
// MT_FW_FLOAT_IMPL (single like those boards, or double like the unix port).
#include <stdint.h>
#include <alloca.h>

#define MICROPY_CONFIG_ROM_LEVEL        (MICROPY_CONFIG_ROM_LEVEL_EXTRA_FEATURES)
#define MICROPY_ENABLE_COMPILER         (1)
#define MICROPY_ENABLE_GC               (1)
#define MICROPY_GCREGS_SETJMP           (1)
#define MICROPY_HELPER_REPL             (0)
#define MICROPY_READER_POSIX            (1)
#define MICROPY_LONGINT_IMPL            (MICROPY_LONGINT_IMPL_MPZ)
// 16-bit mpz digits, as on 32-bit boards: frozen big-int constants need it.
#define MPZ_DIG_SIZE                    (16)
#define MICROPY_ERROR_REPORTING         (MICROPY_ERROR_REPORTING_DETAILED)
#define MICROPY_FLOAT_IMPL              (MT_FW_FLOAT_IMPL)
#define MICROPY_PY_BUILTINS_MEMORYVIEW  (1)
#define MICROPY_PY_ARRAY                (1)
#define MICROPY_PY_STRUCT               (1)
#define MICROPY_PY_MATH                 (1)
#define MICROPY_PY_GC                   (1)
#define MICROPY_PY_SYS                  (1)
#define MICROPY_PY_MICROPYTHON          (1)
#define MICROPY_PY_IO                   (0)
// Not in the core-only tree (extmod, readline) or not needed here.
#define MICROPY_PY_UCTYPES              (0)
#define MICROPY_PY_BUILTINS_INPUT       (0)
#define MICROPY_PY_SYS_STDFILES         (0)

#define MICROPY_HW_BOARD_NAME           "fwport"
#define MICROPY_HW_MCU_NAME             "host"

typedef intptr_t mp_int_t;
typedef uintptr_t mp_uint_t;
typedef long mp_off_t;

#define MP_STATE_PORT MP_STATE_VM

// open() is the port's (main.c), registered as a builtin.
extern const struct _mp_obj_fun_builtin_var_t fw_open_obj;
#define MICROPY_PORT_BUILTINS { MP_ROM_QSTR(MP_QSTR_open), MP_ROM_PTR(&fw_open_obj) },
