// The RISC-V twin of loop.c (qemu-system-riscv32 -M virt, picolibc with
// semihosting): mt_loop runs 1 + 2*LOOP_N instructions (nop, then addi/bnez
// per iteration) plus its ret between two mt_mark() calls. The count comes
// through a volatile, so the caller's code is the same for every LOOP_N.
#include <stdio.h>

volatile int loop_n = LOOP_N;

__attribute__((noinline)) void mt_mark(void) {
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline, naked)) void mt_loop(int n) {
    (void)n;
    __asm__ volatile(
        ".option push\n"
        ".option norvc\n"
        "nop\n"
        "1: addi a0, a0, -1\n"
        "bnez a0, 1b\n"
        "ret\n"
        ".option pop\n");
}

int main(void) {
    int n = loop_n;
    mt_mark();
    mt_loop(n);
    mt_mark();
    printf("loop %d done\n", LOOP_N);
    return 0;
}
