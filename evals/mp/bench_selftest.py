# Attribution self-test of the instruction counter (tests/firmware/test_bench_mcu.py):
# regions whose split between native code and the interpreter is known.
#   empty    two markers back to back: no native instruction
#   py_loop  a pure-Python loop: interpreter only, no native instruction
#   fc256    linear_s8_forward 256 -> 64 (16,384 MACs) through the natmod
#   fc512    the same 512 -> 64: twice the MACs, about twice the native count
import array

import _microtrain as K
from bench_mark import code, flush, mark, result


def fc(n_in, c0, c1):
    p = array.array("i", [n_in, 64, 0, 0, -128, 127])
    x = bytearray(i & 0x7F for i in range(n_in))
    w = bytearray((i * 7) & 0x7F for i in range(n_in * 64))
    b = array.array("i", [0] * 64)
    mult = array.array("i", [1 << 30] * 64)
    shift = array.array("i", [-10] * 64)
    y = bytearray(64)
    mark(c0)
    K.linear_s8_forward(p, x, w, b, mult, shift, y)
    mark(c1)
    return sum(y)


def main():
    c = [code(n) for n in ("empty", "empty_end", "py_loop", "py_loop_end", "fc256", "fc256_end",
                           "fc512", "fc512_end")]
    mark(c[0])
    mark(c[1])
    s = 0
    mark(c[2])
    for i in range(1000):
        s += i
    mark(c[3])
    result("py_sum", s)
    result("fc256", fc(256, c[4], c[5]))
    result("fc512", fc(512, c[6], c[7]))
    flush()
    result("done", 1)


main()
