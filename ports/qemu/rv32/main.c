// RV32IMC firmware for QEMU `virt`: the command line, console, clock, UART
// input and faults of this machine, then the shared runner
// (ports/common/mtport.c). picolibc's crt0 copies .data, zeroes .bss, sets
// up the stack and the TLS block (errno) and calls main; its libsemihost
// turns open/read/write/lseek/close/unlink into RISC-V semihosting calls
// that QEMU executes on the host, relative to the folder QEMU runs in.
// See README.md.
#include <semihost.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "py/mpconfig.h"
#include "mtport.h"

#define REG8(addr) (*(volatile uint8_t *)(uintptr_t)(addr))
#define REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))

// ---------------------------------------------------------------------------
// semihosting: the few calls the port makes itself, each behind one function.

static int con_out = -1, con_err = -1;  // semihosting handles of ":tt"

static void semi_console_open(void) {
    // ":tt" opened for writing is the host's stdout, for appending its stderr.
    con_out = sys_semihost_open(":tt", SH_OPEN_W);
    con_err = sys_semihost_open(":tt", SH_OPEN_A);
}

ssize_t mt_port_console_write(int fd, const void *buf, size_t len) {
    int h = fd == 2 ? con_err : con_out;
    return h < 0 ? -1 : write(h, buf, len);
}

int mt_port_rename(const char *from, const char *to) {
    return sys_semihost_rename(from, to) == 0 ? 0 : -1;
}

static size_t semi_cmdline(char *buf, size_t size) {
    if (sys_semihost_get_cmdline(buf, (int)size) != 0) {
        buf[0] = '\0';
    }
    buf[size - 1] = '\0';
    return strlen(buf);
}

static void semi_exit(int code) __attribute__((noreturn));
static void semi_exit(int code) {
    _exit(code);  // picolibc: SYS_EXIT_EXTENDED with the code
}

// ---------------------------------------------------------------------------
// UART: the virt machine's NS16550A (QEMU's serial0), the REPL's input as on
// the Cortex-M boards; output stays on the semihosting console. Waiting is
// WFI with the UART's interrupt routed through the PLIC to machine mode but
// mstatus.MIE clear: WFI wakes, no handler runs, no busy loop.

#define UART0 0x10000000u
#define UART0_IRQ 10
#define PLIC 0x0c000000u
#define PLIC_ENABLE_CTX0 (PLIC + 0x2000u)
#define PLIC_CLAIM_CTX0 (PLIC + 0x200004u)
#define MIE_MEIE (1u << 11)

static void uart_init(void) {
    REG8(UART0 + 1) = 0x01;  // IER: received data available
    REG32(PLIC + 4u * UART0_IRQ) = 1;  // priority
    REG32(PLIC_ENABLE_CTX0) |= 1u << UART0_IRQ;  // hart 0, machine mode
    REG32(PLIC + 0x200000u) = 0;  // threshold
    __asm__ volatile ("csrc mstatus, %0\n\tcsrs mie, %1" : : "r" (8u), "r" (MIE_MEIE) : "memory");
}

static int uart_getc(void) {
    if ((REG8(UART0 + 5) & 1u) == 0) {  // LSR: data ready
        return -1;
    }
    int c = REG8(UART0);
    uint32_t irq = REG32(PLIC_CLAIM_CTX0);  // claim + complete: WFI waits again
    if (irq != 0) {
        REG32(PLIC_CLAIM_CTX0) = irq;
    }
    return c;
}

// One character out of the UART (waits for room: LSR bit 5, THR empty): the
// REPL's output in board mode (BOARDMODE=1, ports/common/mtboard.c); otherwise
// the console is semihosting's.
void mt_port_uart_putc(int c);
void mt_port_uart_putc(int c) {
    while ((REG8(UART0 + 5) & 0x20u) == 0) {
    }
    REG8(UART0) = (uint8_t)c;
}

#if MT_PORT_BOARD
int mt_port_uart_rx(void) {
    return uart_getc();
}

void mt_port_uart_tx(const char *str, size_t len) {
    for (size_t i = 0; i < len; i++) {
        mt_port_uart_putc((unsigned char)str[i]);
    }
}
#endif

int mt_port_stdin_chr(void) {
    static bool started;
    if (!started) {
        uart_init();
        started = true;
    }
    for (;;) {
        int c = uart_getc();
        if (c >= 0) {
            return c;
        }
        __asm__ volatile ("wfi" ::: "memory");
    }
}

// ---------------------------------------------------------------------------
// clock: the CLINT's mtime (10 MHz on virt), read as a board reads its timer.

#define CLINT_MTIME 0x0200bff8u

mp_uint_t mt_port_ticks_us(void) {
    uint32_t hi, lo;
    do {
        hi = REG32(CLINT_MTIME + 4);
        lo = REG32(CLINT_MTIME);
    } while (hi != REG32(CLINT_MTIME + 4));
    return (mp_uint_t)((((uint64_t)hi << 32) | lo) / 10u);
}

// ---------------------------------------------------------------------------
// faults: any trap is fatal (nothing is enabled to interrupt).

static void fault_print_hex(char *p, uint32_t v) {
    for (int i = 7; i >= 0; i--) {
        p[7 - i] = "0123456789abcdef"[(v >> (4 * i)) & 0xF];
    }
}

__attribute__((interrupt("machine"), aligned(4)))
static void trap_handler(void) {
    uint32_t cause, epc;
    __asm__ volatile ("csrr %0, mcause\n\tcsrr %1, mepc" : "=r" (cause), "=r" (epc));
    char msg[] = "FATAL: trap mcause=0x00000000 mepc=0x00000000\n";
    fault_print_hex(msg + 21, cause);
    fault_print_hex(msg + 37, epc);
    mt_port_console_write(2, msg, sizeof(msg) - 1);
    semi_exit(3);
}

// ---------------------------------------------------------------------------
// GC heap: HEAP_MAX_KB reserved, HEAP_KB used unless -X heapsize= says otherwise.

static char gc_heap[MT_HEAP_MAX_KB * 1024] __attribute__((aligned(8)));

#define MT_MAX_ARGS 32
static char cmdline[1024];

static int split_cmdline(char **argv) {
    semi_cmdline(cmdline, sizeof(cmdline));
    int argc = 0;
    char *p = cmdline;
    while (*p != '\0' && argc < MT_MAX_ARGS) {
        while (*p == ' ') {
            *p++ = '\0';
        }
        if (*p == '\0') {
            break;
        }
        argv[argc++] = p;
        while (*p != '\0' && *p != ' ') {
            p++;
        }
    }
    return argc;
}

int main(void) {
    __asm__ volatile ("csrw mtvec, %0" : : "r" (&trap_handler));
    semi_console_open();
    // QEMU passes "<kernel> <-append text>": argv[0] is the firmware.
    static char *argv[MT_MAX_ARGS + 1];
    int argc = split_cmdline(argv);
    if (argc == 0) {
        argv[argc++] = (char *)"firmware.elf";
    }
    argv[argc] = NULL;
    #if MT_PORT_BOARD
    int ret = mt_board_main(argc, argv, gc_heap, sizeof(gc_heap), (size_t)MT_HEAP_KB * 1024);
    #else
    int ret = mt_port_main(argc, argv, gc_heap, sizeof(gc_heap), (size_t)MT_HEAP_KB * 1024);
    #endif
    semi_exit(ret);
}
