# Instructions per MAC of the native kernels (run on the QEMU firmware by
# evals/benchmarks/bench_mcu.py): each kernel is called once through the _microtrain
# .mpy between two markers, on four fixed shapes (docs/performance.md):
#   conv3x3  16 -> 32 on 16x16, stride 1, pad 1
#   dw3x3    depthwise 3x3 x32 on 16x16, stride 1, pad 1
#   pw       pointwise 32 -> 64 on 8x8
#   fc       linear 256 -> 64
# and, per output element, the pooling and residual add forwards:
#   avgpool, maxpool  2x2 stride 2 on 16x16x32
#   add               8,192 elements
# Input data are fixed pseudo-random int8 (xorshift32); kernels run the same
# instruction path for any data except the data-dependent requant / saturation
# branches, which these data exercise as a model does.
import array
import gc

import _microtrain as K
from bench_mark import code, flush, mark, result
from microtrain.quant import zeros

_r = 2463534242


def rand_s8(n, lo=-128, hi=127):
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


def ints(n, v):
    return array.array("i", [v] * n)


def conv_desc(h, w, cin, cout, k, pad, groups):
    return array.array("i", [h, w, cin, h, w, cout, k, k, 1, 1, pad, pad, groups, -3, 5, -128, 127])


SHAPES = [
    ("conv3x3", "conv", conv_desc(16, 16, 16, 32, 3, 1, 1)),
    ("dw3x3", "conv", conv_desc(16, 16, 32, 32, 3, 1, 32)),
    ("pw", "conv", conv_desc(8, 8, 32, 64, 1, 0, 1)),
    ("fc", "linear", array.array("i", [256, 64, -3, 5, -128, 127])),
]


def run(name, kind, p):
    gc.collect()
    if kind == "conv":
        nin, nout, cout = p[0] * p[1] * p[2], p[3] * p[4] * p[5], p[5]
        nw = cout * p[6] * p[7] * (p[2] // p[12])
        macs = p[3] * p[4] * cout * p[6] * p[7] * (p[2] // p[12])
        terms = p[6] * p[7] * (p[5] // p[12])
        fwd, gin, gw, gwf = (K.conv2d_s8_forward, K.conv2d_s8_grad_input, K.conv2d_s8_grad_weight,
                             getattr(K, "conv2d_s8_grad_weight_f32", None))
    else:
        nin, nout, cout = p[0], p[1], p[1]
        nw = nin * nout
        macs = nw
        terms = nout
        fwd, gin, gw, gwf = (K.linear_s8_forward, K.linear_s8_grad_input, K.linear_s8_grad_weight,
                             getattr(K, "linear_s8_grad_weight_f32", None))
    x = rand_s8(nin)
    w = rand_s8(nw)
    e = rand_s8(nout, -40, 40)
    bias = array.array("i", [((i * 7919) % 4001) - 2000 for i in range(cout)])
    mult = ints(cout, 1518500250)  # ~0.707 * 2^31
    shift = ints(cout, -11)  # outputs mostly inside int8, some saturating
    y = bytearray(nout)
    r = 15
    while r > 0 and (1 << r) * terms * 16384 > 2147483647:
        r -= 1
    wr = ints(cout, 1 << r)
    acc = zeros("i", nin)
    ein = bytearray(nin)
    gwi = zeros("i", nw)
    gbi = zeros("i", cout)
    result(name + ".macs", macs)
    c = [code(name + s) for s in (".fwd", ".fwd_end", ".gi", ".gi_end", ".gw_i32", ".gw_i32_end",
                                  ".gw_f32", ".gw_f32_end")]
    mark(c[0])
    fwd(p, x, w, bias, mult, shift, y)
    mark(c[1])
    mark(c[2])
    gin(p, e, w, wr, None, acc, ein)
    mark(c[3])
    mark(c[4])
    gw(p, x, e, None, gwi, gbi)
    mark(c[5])
    gwi = gbi = None
    gc.collect()
    if gwf is not None:
        gwff = zeros("f", nw)
        gbf = zeros("f", cout)
        mark(c[6])
        gwf(p, x, e, None, 0.001, 0.01, gwff, gbf)
        mark(c[7])
    # a checksum of the outputs, so a kernel that did nothing shows
    result(name + ".ysum", sum(y))


# the pool descriptor: in_h, in_w, c, out_h, out_w, k_h, k_w, stride_h, stride_w, pad_top, pad_left
POOL = array.array("i", [16, 16, 32, 8, 8, 2, 2, 2, 2, 0, 0])
# n, in1_zp, in2_zp, out_zp, m1, sh1, m2, sh2, m_out, sh_out, left_shift, act_min, act_max (TFLite's
# add: both inputs rescaled to twice the larger scale, left_shift 20)
ADD = array.array("i", [8192, -3, 7, -5, 1073741824, 0, 1518500250, -1, 1789569707, -20, 20, -128, 127])


def run_elementwise():
    gc.collect()
    x = rand_s8(16 * 16 * 32)
    y = bytearray(8 * 8 * 32)
    for name, f in (("avgpool", K.avgpool_s8_forward), ("maxpool", K.maxpool_s8_forward)):
        result(name + ".macs", len(y))
        c0, c1 = code(name + ".fwd"), code(name + ".fwd_end")
        mark(c0)
        f(POOL, x, y)
        mark(c1)
        result(name + ".ysum", sum(y))
    x2 = rand_s8(ADD[0])
    y = bytearray(ADD[0])
    result("add.macs", ADD[0])
    c0, c1 = code("add.fwd"), code("add.fwd_end")
    mark(c0)
    K.add_s8_forward(ADD, x, x2, y)
    mark(c1)
    result("add.ysum", sum(y))


def main():
    result("has_float", int(K.HAS_FLOAT))
    # an empty marker pair: the cost of the markers themselves
    c0, c1 = code("empty"), code("empty_end")
    mark(c0)
    mark(c1)
    for name, kind, p in SHAPES:
        run(name, kind, p)
        flush()
    run_elementwise()
    flush()
    result("done", 1)


main()
