// MicroPython configuration shared by ports/qemu and ports/host (included by
// each port's mpconfigport.h): the "extra features" level of the esp32, rp2
// and stm32 ports, minus what the core-only tree (no extmod/) cannot provide,
// so the board firmware and its host twin run the same interpreter.
#include <stdint.h>
#include <alloca.h>

#define MICROPY_CONFIG_ROM_LEVEL        (MICROPY_CONFIG_ROM_LEVEL_EXTRA_FEATURES)
#define MICROPY_ENABLE_COMPILER         (1)
#define MICROPY_ENABLE_GC               (1)
#define MICROPY_GCREGS_SETJMP           (1)
#define MICROPY_STACK_CHECK             (1)
#define MICROPY_HELPER_REPL             (1)
#define MICROPY_REPL_AUTO_INDENT        (1)
#if MT_PORT_LFS
// board mode: scripts and modules are read from the flash (mtlfs.c's mp_reader_new_file)
#define MICROPY_READER_VFS              (1)
#else
#define MICROPY_READER_POSIX            (1)
#endif
// import of .mpy (bytecode; native code too where the port has the emitter)
#define MICROPY_PERSISTENT_CODE_LOAD    (1)
#define MICROPY_ALLOC_PATH_MAX          (256)
#define MICROPY_LONGINT_IMPL            (MICROPY_LONGINT_IMPL_MPZ)
// 16-bit mpz digits, as on 32-bit boards.
#define MPZ_DIG_SIZE                    (16)
#define MICROPY_ERROR_REPORTING         (MICROPY_ERROR_REPORTING_DETAILED)
// FLOAT=single (MICROPY_FLOAT_IMPL_FLOAT, as esp32/rp2/stm32) or double.
#define MICROPY_FLOAT_IMPL              (MT_FLOAT_IMPL)
#define MICROPY_PY_BUILTINS_MEMORYVIEW  (1)
#define MICROPY_PY_BUILTINS_INPUT       (1)
#define MICROPY_PY_ARRAY                (1)
#define MICROPY_PY_STRUCT               (1)
#define MICROPY_PY_MATH                 (1)
#define MICROPY_PY_GC                   (1)
#define MICROPY_PY_SYS                  (1)
#define MICROPY_PY_SYS_EXIT             (1)
#define MICROPY_PY_MICROPYTHON          (1)
#define MICROPY_PY_MICROPYTHON_MEM_INFO (1)
// Not in the core-only tree (extmod) or not needed: open/os/time are ours (mtport.c);
// sys.stdin/stdout/stderr are shared/runtime/sys_stdio_mphal.c on the HAL.
#define MICROPY_PY_IO                   (0)
#define MICROPY_PY_UCTYPES              (0)
#define MICROPY_PY_SYS_STDFILES         (1)
#if MT_PORT_BOARD
// Board mode: Ctrl-C on the UART interrupts a running program, as on a board;
// mtboard.c looks at the UART every few dozen branches of the VM (no interrupt
// handler), keeping what else arrived for the REPL.
#define MICROPY_KBD_EXCEPTION           (1)
void mt_board_poll(void);
#define MICROPY_VM_HOOK_LOOP            mt_board_poll();
#define MICROPY_VM_HOOK_RETURN          mt_board_poll();
#else
#define MICROPY_KBD_EXCEPTION           (0)
#endif

#define MP_STATE_PORT MP_STATE_VM

// open() is mtport.c's, registered as a builtin.
extern const struct _mp_obj_fun_builtin_var_t mt_open_obj;
#define MICROPY_PORT_BUILTINS { MP_ROM_QSTR(MP_QSTR_open), MP_ROM_PTR(&mt_open_obj) },
