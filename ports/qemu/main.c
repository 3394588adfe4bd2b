// Cortex-M firmware for QEMU: startup (vector table, .data/.bss, FPU), the
// command line and clock from ARM semihosting, then the shared runner
// (ports/common/mtport.c). newlib's rdimon turns POSIX file calls and stdio
// into semihosting calls, so scripts, modules and .mtm files come from the
// folder QEMU runs in. See README.md.
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "py/mpconfig.h"
#include "mtport.h"

// ---------------------------------------------------------------------------
// semihosting

#define SEMI_SYS_GET_CMDLINE 0x15
#define SEMI_SYS_ELAPSED 0x30
#define SEMI_SYS_TICKFREQ 0x31

static uintptr_t semi_call(uintptr_t op, void *arg) {
    register uintptr_t r0 __asm__ ("r0") = op;
    register void *r1 __asm__ ("r1") = arg;
    __asm__ volatile ("bkpt 0xab" : "+r" (r0) : "r" (r1) : "memory");
    return r0;
}

// REPL input: the machine's UART 0 (QEMU's serial0: the terminal with
// -nographic, or a pseudo-terminal with -serial pty), as on a board; output
// stays on the semihosting console (the same terminal), except in board mode
// (MT_PORT_BOARD), where it goes out of the UART too. Semihosting's own
// console input (SYS_READC) does not deliver characters typed into QEMU 7.2.
// Waiting is WFI with the UART's receive interrupt enabled but masked
// (PRIMASK): no handler, no busy loop. The UART of each machine is three
// small functions: uart_init, uart_rx (-1: nothing yet), uart_tx.
#define REG(addr) (*(volatile uint32_t *)(addr))
#define NVIC_ISER0 0xE000E100u

#if defined(MT_UART_NRF51)
#define UART 0x40002000u  // nRF51 UART0, IRQ 2
static void uart_init(void) {
    REG(UART + 0x500) = 4;  // ENABLE
    REG(UART + 0x304) = 1u << 2;  // INTENSET: RXDRDY
    REG(UART + 0x000) = 1;  // TASKS_STARTRX
    #if MT_PORT_BOARD
    REG(UART + 0x008) = 1;  // TASKS_STARTTX
    #endif
    REG(NVIC_ISER0) = 1u << 2;
}
__attribute__((unused)) static void uart_tx(int c) {  // board mode's output
    REG(UART + 0x11C) = 0;  // EVENTS_TXDRDY
    REG(UART + 0x51C) = (uint32_t)c;  // TXD
    while (REG(UART + 0x11C) == 0) {
    }
}
static int uart_rx(void) {
    if (REG(UART + 0x108) == 0) {  // EVENTS_RXDRDY
        return -1;
    }
    REG(UART + 0x108) = 0;
    return (int)(REG(UART + 0x518) & 0xFF);  // RXD
}
#else
#define UART 0x40004000u  // CMSDK APB UART0 of the MPS2 boards, RX IRQ 0
static void uart_init(void) {
    REG(UART + 0x10) = 16;  // BAUDDIV
    REG(UART + 0x08) = 0x3u | 0x8u;  // CTRL: TX, RX enable, RX interrupt
    REG(NVIC_ISER0) = 1u << 0;
}
static int uart_rx(void) {
    if ((REG(UART + 0x04) & 2u) == 0) {  // STATE: RX full
        return -1;
    }
    int c = (int)(REG(UART + 0x00) & 0xFF);
    REG(UART + 0x0C) = 2u;  // INTCLEAR: RX
    return c;
}
__attribute__((unused)) static void uart_tx(int c) {  // board mode's output
    while (REG(UART + 0x04) & 1u) {  // STATE: TX full
    }
    REG(UART + 0x00) = (uint32_t)c;
}
#endif

static void uart_start(void) {
    static bool started;
    if (!started) {
        __asm__ volatile ("cpsid i" ::: "memory");
        uart_init();
        started = true;
    }
}

int mt_port_stdin_chr(void) {
    uart_start();
    for (;;) {
        int c = uart_rx();
        if (c >= 0) {
            return c;
        }
        __asm__ volatile ("wfi" ::: "memory");
    }
}

#if MT_PORT_BOARD
int mt_port_uart_rx(void) {
    uart_start();
    return uart_rx();
}

void mt_port_uart_tx(const char *str, size_t len) {
    uart_start();
    for (size_t i = 0; i < len; i++) {
        uart_tx((unsigned char)str[i]);
    }
}
#endif

static uint32_t tick_div;  // SYS_ELAPSED ticks per microsecond

mp_uint_t mt_port_ticks_us(void) {
    uint32_t t[2];
    if (tick_div == 0 || semi_call(SEMI_SYS_ELAPSED, t) != 0) {
        return 0;
    }
    uint64_t ticks = ((uint64_t)t[1] << 32) | t[0];
    return (mp_uint_t)(ticks / tick_div);
}

// ---------------------------------------------------------------------------
// GC heap: HEAP_MAX_KB reserved, HEAP_KB used unless -X heapsize= says otherwise.

static char gc_heap[MT_HEAP_MAX_KB * 1024] __attribute__((aligned(8)));

extern void initialise_monitor_handles(void);

#define MT_MAX_ARGS 32
static char cmdline[1024];

static int split_cmdline(char **argv) {
    struct {
        char *buf;
        uint32_t len;
    } block = { cmdline, sizeof(cmdline) - 1 };
    if (semi_call(SEMI_SYS_GET_CMDLINE, &block) != 0) {
        block.len = 0;
    }
    cmdline[block.len < sizeof(cmdline) ? block.len : sizeof(cmdline) - 1] = '\0';
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

static void mt_start(void) {
    initialise_monitor_handles();
    uintptr_t hz = semi_call(SEMI_SYS_TICKFREQ, NULL);
    if (hz != (uintptr_t)-1 && hz != 0) {
        tick_div = hz >= 1000000u ? (uint32_t)(hz / 1000000u) : 1;
    }
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
    exit(ret);  // newlib: SYS_EXIT(_EXTENDED) with the code
}

// ---------------------------------------------------------------------------
// startup

extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _estack;

void Reset_Handler(void) __attribute__((noreturn));
void Reset_Handler(void) {
    const uint32_t *src = &_sidata;
    for (uint32_t *dst = &_sdata; dst < &_edata;) {
        *dst++ = *src++;
    }
    for (uint32_t *dst = &_sbss; dst < &_ebss;) {
        *dst++ = 0;
    }
    #if defined(__ARM_FP)
    // CPACR: full access to CP10/CP11 before any floating-point instruction.
    *(volatile uint32_t *)0xE000ED88 |= 0xFu << 20;
    __asm__ volatile ("dsb\n\tisb" ::: "memory");
    #endif
    mt_start();
    for (;;) {
    }
}

static void fault(const char *msg) {
    ssize_t r = write(2, msg, strlen(msg));
    (void)r;
    _exit(3);
}

static void HardFault_Handler(void) {
    fault("FATAL: HardFault\n");
}

static void Other_Handler(void) {
    fault("FATAL: unexpected exception\n");
}

typedef void (*vector_t)(void);

__attribute__((section(".isr_vector"), used))
static const vector_t vectors[16] = {
    (vector_t)&_estack,
    Reset_Handler,
    Other_Handler,     // NMI
    HardFault_Handler,
    Other_Handler,     // MemManage
    Other_Handler,     // BusFault
    Other_Handler,     // UsageFault
    0, 0, 0, 0,
    Other_Handler,     // SVC
    Other_Handler,     // DebugMon
    0,
    Other_Handler,     // PendSV
    Other_Handler,     // SysTick
};
