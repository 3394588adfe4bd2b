// Minimal Cortex-M startup for the plugin self-test: vector table, FPU on,
// .bss cleared, semihosting stdio, main, exit code through semihosting.
#include <stdint.h>
#include <stdlib.h>

extern uint32_t __bss_start__, __bss_end__, __stack_top;
extern void initialise_monitor_handles(void);
extern int main(void);

void reset_handler(void);
static void fault_handler(void) {
    exit(99);
}

__attribute__((section(".vectors"), used)) static const void *const vectors[16] = {
    &__stack_top, (const void *)reset_handler, (const void *)fault_handler, (const void *)fault_handler,
    (const void *)fault_handler, (const void *)fault_handler, (const void *)fault_handler,
};

void reset_handler(void) {
    volatile uint32_t *cpacr = (volatile uint32_t *)0xE000ED88u;
    *cpacr |= 0xFu << 20;  // CP10/CP11 full access: the hard-float ABI needs the FPU
    __asm__ volatile("dsb\n isb");
    for (uint32_t *p = &__bss_start__; p < &__bss_end__; ++p) {
        *p = 0;
    }
    initialise_monitor_handles();
    exit(main());
}

// newlib's exit() runs __libc_fini_array, which calls _fini (crti is not linked).
void _init(void);
void _fini(void);
void _init(void) {
}
void _fini(void) {
}
