// Board mode (MT_PORT_BOARD): the firmware as a board owner meets it. The
// REPL's input and output are the board's UART (the port's mt_port_stdin_chr /
// mt_port_uart_tx), files live on a littlefs flash file system (mtlfs.c), and
// the session loop is a board's: boot.py, then main.py (friendly REPL only),
// then the REPL, whose raw mode and raw-paste mode are what mpremote drives;
// Ctrl-D (or sys.exit) soft-resets: a fresh heap and interpreter, the flash
// mounted again, "MPY: soft reboot" on the UART; Ctrl-C interrupts a program.
#include <stdlib.h>
#include <string.h>

#include "py/gc.h"
#include "py/mphal.h"
#include "py/runtime.h"
#include "py/stackctrl.h"
#include "shared/runtime/pyexec.h"
#include "mtport.h"

#if MT_PORT_BOARD

// Ctrl-C: while a program runs, the VM calls mt_board_poll at its branches;
// every MT_POLL_EVERY-th call looks at the UART. Ctrl-C schedules a
// KeyboardInterrupt; anything else waits in mt_rx for the REPL (and stays in
// the UART, whose sender QEMU holds back, when mt_rx is full).
#define MT_POLL_EVERY 64
#define MT_RX_SIZE 256
static uint8_t mt_rx[MT_RX_SIZE];
static uint32_t mt_rx_head, mt_rx_tail;

void mt_board_poll(void) {
    static unsigned calls;
    if (++calls < MT_POLL_EVERY) {
        return;
    }
    calls = 0;
    while (mt_rx_head - mt_rx_tail < MT_RX_SIZE) {
        int c = mt_port_uart_rx();
        if (c < 0) {
            break;
        }
        if (c == mp_interrupt_char) {
            mp_sched_keyboard_interrupt();
        } else {
            mt_rx[mt_rx_head++ % MT_RX_SIZE] = (uint8_t)c;
        }
    }
}

int mt_board_stdin_chr(void) {
    if (mt_rx_head != mt_rx_tail) {
        return mt_rx[mt_rx_tail++ % MT_RX_SIZE];
    }
    return mt_port_stdin_chr();
}

static int mt_board_usage(void) {
    mp_hal_stdout_tx_str("usage: [-X heapsize=N[k|m]] [-f FLASH.img -B BLOCK_SIZE]\r\n");
    return 2;
}

int mt_board_main(int argc, char **argv, char *heap, size_t heap_max, size_t heap_default) {
    size_t heap_size = heap_default;
    const char *image = NULL;
    size_t block_size = 0;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-X") == 0 && a + 1 < argc && strncmp(argv[a + 1], "heapsize=", 9) == 0) {
            heap_size = mt_port_parse_size(argv[++a] + 9);
        } else if (strcmp(argv[a], "-f") == 0 && a + 1 < argc) {
            image = argv[++a];
        } else if (strcmp(argv[a], "-B") == 0 && a + 1 < argc) {
            block_size = mt_port_parse_size(argv[++a]);
        } else {
            return mt_board_usage();
        }
    }
    if (heap_size < 4096 || heap_size > heap_max || (image != NULL && block_size == 0)) {
        return mt_board_usage();
    }
    int stack_dummy;
    for (;;) {
        mp_stack_ctrl_init();
        mp_stack_set_top(&stack_dummy);
        mp_stack_set_limit(MT_PORT_STACK_LIMIT);
        gc_init(heap, heap + heap_size);
        mp_init();
        // sys.path as on a board: the current folder, frozen modules, /lib
        mp_obj_list_t *path = MP_OBJ_TO_PTR(mp_sys_path);
        path->len = 0;
        mp_obj_list_append(mp_sys_path, MP_OBJ_NEW_QSTR(MP_QSTR_));
        #if MICROPY_MODULE_FROZEN
        mp_obj_list_append(mp_sys_path, MP_OBJ_NEW_QSTR(MP_QSTR__dot_frozen));
        #endif
        mp_obj_list_append(mp_sys_path, mp_obj_new_str("/lib", 4));

        int r = image != NULL ? mt_lfs_mount(image, (uint32_t)block_size) : -19;
        if (r != 0) {
            mp_printf(&mp_plat_print, "mtboard: flash not mounted (error %d): no file system\n", r);
        }
        bool reset = pyexec_file_if_exists("boot.py") & PYEXEC_FORCED_EXIT;
        if (!reset && pyexec_mode_kind == PYEXEC_MODE_FRIENDLY_REPL) {
            reset = pyexec_file_if_exists("main.py") & PYEXEC_FORCED_EXIT;
        }
        while (!reset) {
            if (pyexec_mode_kind == PYEXEC_MODE_RAW_REPL) {
                reset = pyexec_raw_repl() != 0;
            } else {
                reset = pyexec_friendly_repl() != 0;
            }
        }
        mp_printf(&mp_plat_print, "MPY: soft reboot\n");
        gc_sweep_all();  // finalisers close files left open: littlefs forgets none of them
        mp_deinit();
    }
}

#endif // MT_PORT_BOARD
