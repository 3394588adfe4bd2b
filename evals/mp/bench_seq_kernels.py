# Instructions per element / MAC of the sequence and attention kernels (run on the QEMU
# firmware by evals/benchmarks/bench_seq.py): each kernel called once through the
# _microtrain .mpy between two markers, on fixed shapes:
#   se      mul, 8x8 positions x 32 channels times a (32,) per-channel scale
#   gate    mul, 8x8 x 32 times the same shape
#   qk      matmul Q K^T, 16 x 32 times (16 x 32)^T (tb 1)
#   av      matmul A V, 16 x 16 times 16 x 32 (tb 0)
#   sm      softmax over 16 of 16 rows (attention weights)
#   ln      LayerNorm's normalisation of 16 rows of 64
# Fixed pseudo-random int8 inputs (the bench_kernels.py generator).
import array
import gc

import _microtrain as K
from bench_mark import code, flush, mark, result
from microtrain.quant import zeros

_r = 2463534242


def rand_s8(n, lo=-128, hi=127):
    # xorshift32, as bench_kernels.py (which runs its own benchmark when imported)
    global _r
    b = bytearray(n)
    span = hi - lo + 1
    r = _r
    for i in range(n):
        r ^= (r << 13) & 0xFFFFFFFF
        r ^= r >> 17
        r ^= (r << 5) & 0xFFFFFFFF
        b[i] = (lo + r % span) & 0xFF
    _r = r
    return b


def timed(name, f, *args):
    c0, c1 = code(name), code(name + "_end")
    mark(c0)
    f(*args)
    mark(c1)


def mul(name, hw, c, hw2, c2):
    d = array.array("i", [hw, c, hw2, c2, -3, 5, 2, 1518500250, -9, -128, 127])
    n, n2 = hw * c, hw2 * c2
    x1, x2, e = rand_s8(n), rand_s8(n2), rand_s8(n, -40, 40)
    y, ein, ein2, acc = bytearray(n), bytearray(n), bytearray(n2), zeros("i", n2)
    result(name + ".elems", n)
    timed(name + ".fwd", K.mul_s8_forward, d, x1, x2, y)
    timed(name + ".gx1", K.mul_s8_grad_x1, d, e, x2, ein)
    timed(name + ".gx2", K.mul_s8_grad_x2, d, e, x1, acc, ein2)
    result(name + ".ysum", sum(y))


def matmul(name, rows, inner, cols, tb):
    d = array.array("i", [rows, inner, cols, tb, -3, 5, 2, 1518500250, -12, -128, 127])
    a, b, e = rand_s8(rows * inner), rand_s8(inner * cols), rand_s8(rows * cols, -40, 40)
    y, ea, eb = bytearray(rows * cols), bytearray(rows * inner), bytearray(inner * cols)
    acca, accb = zeros("i", rows * inner), zeros("i", inner * cols)
    result(name + ".macs", rows * inner * cols)
    timed(name + ".fwd", K.matmul_s8_forward, d, a, b, y)
    timed(name + ".ga", K.matmul_s8_grad_a, d, e, b, acca, ea)
    timed(name + ".gb", K.matmul_s8_grad_b, d, e, a, accb, eb)
    result(name + ".ysum", sum(y))


def softmax(name, outer, n):
    d = array.array("i", [outer, n, 1])
    lut = array.array("I", [int(65536 * 0.92 ** i + 0.5) for i in range(256)])
    x, e = rand_s8(outer * n), rand_s8(outer * n, -40, 40)
    y, ein = bytearray(outer * n), bytearray(outer * n)
    result(name + ".elems", outer * n)
    timed(name + ".fwd", K.softmax_s8_forward, d, x, lut, y)
    timed(name + ".gin", K.softmax_s8_grad_input, d, y, e, ein)


def layernorm(name, rows, c):
    d = array.array("i", [rows, c, -3, 2, 40, 1518500250, -18])
    x, e = rand_s8(rows * c), rand_s8(rows * c, -40, 40)
    y, ein = bytearray(rows * c), bytearray(rows * c)
    result(name + ".elems", rows * c)
    timed(name + ".fwd", K.layernorm_s8_forward, d, x, y)
    timed(name + ".gin", K.layernorm_s8_grad_input, d, x, e, ein)


def main():
    c0, c1 = code("empty"), code("empty_end")
    mark(c0)
    mark(c1)
    for f, args in ((mul, ("se", 64, 32, 1, 32)), (mul, ("gate", 64, 32, 64, 32)),
                    (matmul, ("qk", 16, 32, 16, 1)), (matmul, ("av", 16, 16, 32, 0)),
                    (softmax, ("sm", 16, 16)), (layernorm, ("ln", 16, 64))):
        gc.collect()
        f(*args)
        flush()
    result("done", 1)


main()
