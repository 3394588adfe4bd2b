// A loop of known length between two markers: mt_mark(); 1 + 2*LOOP_N
// instructions in mt_loop (mov, then subs/bne per iteration) plus its bx lr;
// mt_mark(). The plugin must count exactly that difference between builds.
#include <stdio.h>

__attribute__((noinline)) void mt_mark(void) {
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline, naked)) void mt_loop(void) {
    __asm__ volatile(
        "ldr r0, =%c0\n"
        "1: subs r0, r0, #1\n"
        "bne 1b\n"
        "bx lr\n"
        ".ltorg\n" ::"i"(LOOP_N));
}

int main(void) {
    mt_mark();
    mt_loop();
    mt_mark();
    printf("loop %d done\n", LOOP_N);
    return 0;
}
