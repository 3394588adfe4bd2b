"""Seeded cases of the sequence / attention kernels (element-wise mul, matmul of two
activations, softmax inside a model), registered into kernel_cases.OPS / GENERATORS / generate_limits.

Variants: every broadcast shape of mul (same shape, per channel as squeeze-and-excitation,
per position, one value), zero points at the int8 ends, saturating and extreme
multipliers, fused-relu clamps, in-place calls; matmul with both layouts of b (A B and
A B^T), one to four heads, odd inner sizes (the four-byte steps and their tails), sizes of one.
"""

from __future__ import annotations

import numpy as np

import support.kernel_cases as kc
from microtrain_tools.reference import oracle
from support.kernel_harness import Alias, Arg, Case, i32, out, s8, u32

Rng = np.random.Generator

# mul's broadcast kinds, cycled: x2 is (hw2, c2) =
MUL_KINDS = ("same", "channel", "position", "scalar")


def _mul_desc(rng: Rng, i: int) -> tuple[list[int], str]:
    hw = [1, int(rng.integers(2, 30)), int(rng.integers(30, 120)), 7][(i // 4) % 4]
    c = [1, int(rng.integers(2, 9)), int(rng.integers(9, 40))][(i // 3) % 3]
    kind = MUL_KINDS[i % 4]
    hw2, c2 = {"same": (hw, c), "channel": (1, c), "position": (hw, 1), "scalar": (1, 1)}[kind]
    z1, z2, zo = kc._zp(rng, i), kc._zp(rng, i // 5 + 1), kc._zp(rng, i // 25 + 2)
    act_min, act_max = kc._act(rng, zo, i // 2)
    s1, s2, so = (float(10.0 ** rng.uniform(-2.5, -0.5)) for _ in range(3))
    d = oracle.mul_params(s1, z1, s2, z2, so, zo, hw, c, hw2, c2, act_min, act_max)
    label = "tflite"
    if i % 6 == 5:  # extreme multipliers within the descriptor rules
        d[7], d[8] = int(rng.integers(0, 2**31)), int(rng.integers(-31, 16))
        label = "extreme"
    return d, f"{kind}/{label}"


def gen_mul_s8_forward(rng: Rng, i: int) -> Case:
    d, label = _mul_desc(rng, i)
    n, n2 = d[0] * d[1], d[2] * d[3]
    x1, x2 = kc._int8(rng, n), kc._int8(rng, n2)
    if i % 5 == 3:  # in place: y is x1 (or x2 when it has y's shape)
        which = 2 if n2 == n and rng.random() < 0.5 else 1
        args: list[Arg] = [i32(d), s8(x1, kc._kind_out(rng)), s8(x2, kc._kind_out(rng)), Alias(which)]
        return kc.make_case("mul_s8_forward", args, f"{label}/y-is-x{which}")
    return kc.make_case("mul_s8_forward", [i32(d), s8(x1, kc._kind_in(rng)), s8(x2, kc._kind_in(rng)),
                                           out(kc._kind_out(rng), n)], label)


def gen_mul_s8_grad_x1(rng: Rng, i: int) -> Case:
    d, label = _mul_desc(rng, i)
    n, n2 = d[0] * d[1], d[2] * d[3]
    e = kc._int8(rng, n, ["uniform", "small", "sparse"][i % 3])
    x2 = kc._int8(rng, n2)
    if i % 7 == 6:  # the largest products: e = -128, x2 - zp = -255
        e[:] = -128
        d[5], x2[:] = 127, -128
    if i % 5 == 2:  # ein is e
        return kc.make_case("mul_s8_grad_x1", [i32(d), s8(e, kc._kind_out(rng)), s8(x2, kc._kind_in(rng)),
                                               Alias(1)], f"{label}/ein-is-e")
    return kc.make_case("mul_s8_grad_x1", [i32(d), s8(e, kc._kind_in(rng)), s8(x2, kc._kind_in(rng)),
                                           out(kc._kind_out(rng), n)], label)


def gen_mul_s8_grad_x2(rng: Rng, i: int) -> Case:
    d, label = _mul_desc(rng, i)
    n, n2 = d[0] * d[1], d[2] * d[3]
    e = kc._int8(rng, n, ["uniform", "small", "sparse"][i % 3])
    x1 = kc._int8(rng, n)
    if i % 7 == 6:
        e[:] = -128
        d[4], x1[:] = 127, -128
    return kc.make_case("mul_s8_grad_x2", [i32(d), s8(e, kc._kind_in(rng)), s8(x1, kc._kind_in(rng)),
                                           out("i", n2), out(kc._kind_out(rng), n2)], label)


def _matmul_desc(rng: Rng, i: int) -> tuple[list[int], str]:
    rows = [1, int(rng.integers(2, 9)), int(rng.integers(9, 33)), 4][(i // 2) % 4]
    inner = [1, 3, 4, int(rng.integers(5, 40)), int(rng.integers(40, 130))][(i // 3) % 5]
    cols = [1, int(rng.integers(2, 9)), int(rng.integers(9, 33))][(i // 4) % 3]
    tb = i % 2
    za, zb, zo = kc._zp(rng, i), kc._zp(rng, i // 5 + 1), kc._zp(rng, i // 25 + 2)
    act_min, act_max = kc._act(rng, zo, i // 2)
    sa, sb = (float(10.0 ** rng.uniform(-2.5, -1)) for _ in range(2))
    so = sa * sb * float(10.0 ** rng.uniform(0.5, 3.5))
    heads = [1, 1, 2, 3, 4][(i // 7) % 5]  # several heads: the strided layouts
    d = oracle.matmul_params(sa, za, sb, zb, so, zo, rows, inner, cols, tb, act_min, act_max, heads)
    label = "tflite"
    if i % 6 == 5:
        d[7], d[8] = int(rng.integers(0, 2**31)), int(rng.integers(-31, 32))
        label = "extreme"
    if i % 11 == 10 and heads == 1:
        d.append(1)  # one head written out
    return d, f"tb{tb}/h{heads}/{label}"


def _heads(d: list[int]) -> int:
    return d[11] if len(d) > 11 else 1


def gen_matmul_s8_forward(rng: Rng, i: int) -> Case:
    d, label = _matmul_desc(rng, i)
    rows, inner, cols, h = *d[:3], _heads(d)
    a, b = kc._int8(rng, h * rows * inner), kc._int8(rng, h * inner * cols)
    return kc.make_case("matmul_s8_forward", [i32(d), s8(a, kc._kind_in(rng)), s8(b, kc._kind_in(rng)),
                                              out(kc._kind_out(rng), h * rows * cols)], label)


def gen_matmul_s8_grad_a(rng: Rng, i: int) -> Case:
    d, label = _matmul_desc(rng, i)
    rows, inner, cols, h = *d[:3], _heads(d)
    e = kc._int8(rng, h * rows * cols, ["uniform", "small", "sparse"][i % 3])
    b = kc._int8(rng, h * inner * cols)
    n = h * rows * inner
    return kc.make_case("matmul_s8_grad_a", [i32(d), s8(e, kc._kind_in(rng)), s8(b, kc._kind_in(rng)),
                                             out("i", n), out(kc._kind_out(rng), n)], label)


def gen_matmul_s8_grad_b(rng: Rng, i: int) -> Case:
    d, label = _matmul_desc(rng, i)
    rows, inner, cols, h = *d[:3], _heads(d)
    e = kc._int8(rng, h * rows * cols, ["uniform", "small", "sparse"][i % 3])
    a = kc._int8(rng, h * rows * inner)
    n = h * inner * cols
    return kc.make_case("matmul_s8_grad_b", [i32(d), s8(e, kc._kind_in(rng)), s8(a, kc._kind_in(rng)),
                                             out("i", n), out(kc._kind_out(rng), n)], label)


def _softmax_desc(rng: Rng, i: int) -> list[int]:
    n = [1, 2, int(rng.integers(3, 17)), int(rng.integers(17, 129)), 256, 10][i % 6]
    outer = [1, int(rng.integers(2, 9)), 3][(i // 6) % 3]
    inner = [1, 1, int(rng.integers(2, 6))][(i // 2) % 3]
    return [outer, n, inner]


def _softmax_lut(rng: Rng, i: int) -> np.ndarray:
    """The exp table of a logit scale (trimmed or not), or any non-increasing table from 2^16."""
    kind = i % 4
    if kind == 3:
        m = int(rng.integers(1, 257))
        return np.r_[65536, -np.sort(-rng.integers(0, 65537, m - 1))].astype(np.uint32)
    lut = oracle.make_softmax_lut(float(10.0 ** rng.uniform(-2.5, 0.5)))
    return oracle.trim_softmax_lut(lut) if kind == 1 else lut


def gen_softmax_s8_forward(rng: Rng, i: int) -> Case:
    d = _softmax_desc(rng, i)
    n = d[0] * d[1] * d[2]
    x = kc._int8(rng, n, ["uniform", "small", "const", "ties"][i % 4])
    lut = u32(_softmax_lut(rng, i), "I" if i % 2 else "i")
    if i % 5 == 4:  # y is x
        return kc.make_case("softmax_s8_forward", [i32(d), s8(x, kc._kind_out(rng)), lut, Alias(1)],
                            f"n={d[1]}/y-is-x")
    args: list[Arg] = [i32(d), s8(x, kc._kind_in(rng)), lut, out(kc._kind_out(rng), n)]
    return kc.make_case("softmax_s8_forward", args, f"n={d[1]}")


def gen_softmax_s8_grad_input(rng: Rng, i: int) -> Case:
    d = _softmax_desc(rng, i)
    n = d[0] * d[1] * d[2]
    # a real softmax output, or any int8 (the bounds hold for every y)
    x = kc._int8(rng, n)
    y = oracle.softmax_s8_forward(d, x, _softmax_lut(rng, i)) if i % 3 else kc._int8(rng, n)
    e = kc._int8(rng, n, ["uniform", "small", "sparse"][i % 3])
    if i % 7 == 6:
        y[:], e[:] = 127, -128
    if i % 5 == 2:  # ein is e
        args: list[Arg] = [i32(d), s8(y, kc._kind_in(rng)), s8(e, kc._kind_out(rng)), Alias(2)]
        return kc.make_case("softmax_s8_grad_input", args, f"n={d[1]}/ein-is-e")
    return kc.make_case("softmax_s8_grad_input", [i32(d), s8(y, kc._kind_in(rng)), s8(e, kc._kind_in(rng)),
                                                  out(kc._kind_out(rng), n)], f"n={d[1]}")


def _ln_desc(rng: Rng, i: int) -> list[int]:
    c = [1, 2, int(rng.integers(3, 33)), int(rng.integers(33, 256)), 256, 64][i % 6]
    rows = [1, int(rng.integers(2, 9)), 3][(i // 6) % 3]
    zi, zo = kc._zp(rng, i), kc._zp(rng, i // 5 + 1)
    s_x = float(10.0 ** rng.uniform(-2.5, -0.5))
    d = oracle.layernorm_params(s_x, zi, float(10.0 ** rng.uniform(-2, -1)), zo, c, rows,
                                [1e-5, 1e-3, 1.0][i % 3])
    if i % 7 == 6:  # extreme multipliers and eps within the descriptor rules
        d[4], d[5] = int(rng.integers(1, 2**31)), int(rng.integers(0, 2**31))
        d[6] = int(rng.integers(-31, 32))
    return d


def _ln_x(rng: Rng, i: int, d: list[int]) -> np.ndarray:
    n = d[0] * d[1]
    style = ["uniform", "small", "const", "ties", "sparse"][i % 5]
    x = kc._int8(rng, n, style)
    if i % 11 == 10:  # one outlier in a flat row: the largest normalised value (sqrt(c - 1))
        x[:] = -128
        x[:: d[1]] = 127
    return x


def gen_layernorm_s8_forward(rng: Rng, i: int) -> Case:
    d = _ln_desc(rng, i)
    x = _ln_x(rng, i, d)
    if i % 5 == 3:  # y is x
        return kc.make_case("layernorm_s8_forward", [i32(d), s8(x, kc._kind_out(rng)), Alias(1)],
                            f"c={d[1]}/y-is-x")
    args: list[Arg] = [i32(d), s8(x, kc._kind_in(rng)), out(kc._kind_out(rng), len(x))]
    return kc.make_case("layernorm_s8_forward", args, f"c={d[1]}")


def gen_layernorm_s8_grad_input(rng: Rng, i: int) -> Case:
    d = _ln_desc(rng, i)
    x = _ln_x(rng, i, d)
    e = kc._int8(rng, len(x), ["uniform", "small", "sparse"][i % 3])
    if i % 4 == 1:
        e[:] = np.where(np.arange(len(x)) % 2, 127, -128)
    if i % 5 == 2:  # ein is e
        args: list[Arg] = [i32(d), s8(x, kc._kind_in(rng)), s8(e, kc._kind_out(rng)), Alias(2)]
        return kc.make_case("layernorm_s8_grad_input", args, f"c={d[1]}/ein-is-e")
    return kc.make_case("layernorm_s8_grad_input", [i32(d), s8(x, kc._kind_in(rng)), s8(e, kc._kind_in(rng)),
                                                    out(kc._kind_out(rng), len(x))], f"c={d[1]}")



def _gru(rng: Rng, i: int) -> tuple[list[int], dict[str, np.ndarray]]:
    """A GRU layer's descriptor, tensors and tables from random scales (or extreme ones)."""
    t = [1, int(rng.integers(2, 9)), int(rng.integers(9, 24))][i % 3]
    d = [1, int(rng.integers(2, 7)), 9][(i // 3) % 3]
    h = [1, int(rng.integers(2, 7)), 16][(i // 9) % 3]
    s_w = 10.0 ** rng.uniform(-3, -1.5, 3 * h)
    s_h = float(rng.uniform(0.3, 1.0)) / 127
    sc = [float(10.0 ** rng.uniform(-2, -0.8)) for _ in range(4)]
    k = [0, 1, int(rng.integers(0, t + 3)), t][(i // 2) % 4]
    desc, mult, shift, lut, wr, dtanh = oracle.gru_params(t, d, h, float(10.0 ** rng.uniform(-2.5, -0.5)),
                                                          kc._zp(rng, i), s_w, *sc, s_h, k)
    if i % 7 == 6:  # extreme multipliers within the descriptor rules
        mult = rng.integers(0, 2**31, 6 * h).astype(np.int32)
        shift = rng.integers(-31, 32, 6 * h).astype(np.int32)
        desc[4], desc[5] = int(rng.integers(0, 2**31)), int(rng.integers(-31, 16))
        for j in (7, 9, 11):
            desc[j], desc[j + 1] = int(rng.integers(0, 2**31)), int(rng.integers(-31, 1))
        lut = kc._int8(rng, 768)
    w = kc._int8(rng, 3 * h * (d + h), ["uniform", "small"][i % 2])
    bias = rng.integers(-(2**14), 2**14, 4 * h).astype(np.int32)
    if i % 11 == 10:  # the largest sums
        w[:], bias[:] = -128, -(2**30)
    return desc, {"w": w, "bias": bias, "mult": mult, "shift": shift, "lut": lut, "wr": wr, "dtanh": dtanh}


def gen_gru_s8_forward(rng: Rng, i: int) -> Case:
    d, a = _gru(rng, i)
    x = kc._int8(rng, d[0] * d[1])
    args: list[Arg] = [i32(d), s8(x, kc._kind_in(rng)), s8(a["w"], kc._kind_in(rng)), i32(a["bias"]),
                       i32(a["mult"]), i32(a["shift"]), s8(a["lut"], kc._kind_in(rng)),
                       out(kc._kind_out(rng), d[0] * d[2]), out(kc._kind_out(rng), d[0] * 4 * d[2])]
    return kc.make_case("gru_s8_forward", args, f"T={d[0]}/D={d[1]}/H={d[2]}")


def gen_gru_s8_backward(rng: Rng, i: int) -> Case:
    d, a = _gru(rng, i)
    t, dd, h = d[:3]
    x = kc._int8(rng, t * dd)
    if i % 4 == 3:  # any bytes (the bounds hold for every y and keep)
        y, keep = kc._int8(rng, t * h), kc._int8(rng, t * 4 * h)
    else:
        y, keep = oracle.gru_s8_forward(d, x, a["w"], a["bias"], a["mult"], a["shift"], a["lut"])
    e = kc._int8(rng, t * h, ["uniform", "small", "sparse"][i % 3])
    if i % 5 == 4:  # only the last step's output used (x[:, -1])
        e[: (t - 1) * h] = 0
    if i % 13 == 12:
        e[:], keep[:] = -128, -128
    if i % 9 == 8:  # the largest ratios the rule allows
        a["wr"][:] = 131071 // (3 * h)
    args: list[Arg] = [i32(d), s8(x, kc._kind_in(rng)), s8(a["w"], kc._kind_in(rng)), i32(a["wr"]),
                       i32(a["dtanh"]), s8(y, kc._kind_in(rng)), s8(keep, kc._kind_out(rng)),
                       s8(e, kc._kind_in(rng)), out("i", t), out("i", 5 * h), out("i", 3 * h * (dd + h)),
                       out("i", 4 * h), out(kc._kind_out(rng), t * dd)]
    return kc.make_case("gru_s8_backward", args, f"T={t}/D={dd}/H={h}/k={d[6]}")

def _lstm(rng: Rng, i: int) -> tuple[list[int], dict[str, np.ndarray]]:
    """An LSTM layer's descriptor, tensors and tables from random scales (or extreme ones)."""
    t = [1, int(rng.integers(2, 9)), int(rng.integers(9, 24))][i % 3]
    d = [1, int(rng.integers(2, 7)), 9][(i // 3) % 3]
    h = [1, int(rng.integers(2, 7)), 16][(i // 9) % 3]
    s_w = 10.0 ** rng.uniform(-3, -1.5, 4 * h)
    s_h = float(rng.uniform(0.3, 1.0)) / 127
    sc = [float(10.0 ** rng.uniform(-2, -0.8)) for _ in range(5)]
    k = [0, 1, int(rng.integers(0, t + 3)), t][(i // 2) % 4]
    desc, mult, shift, lut, wr, dtanh = oracle.lstm_params(t, d, h, float(10.0 ** rng.uniform(-2.5, -0.5)),
                                                           kc._zp(rng, i), s_w, *sc, s_h, k)
    if i % 7 == 6:  # extreme multipliers within the descriptor rules
        mult = rng.integers(0, 2**31, 8 * h).astype(np.int32)
        shift = rng.integers(-31, 32, 8 * h).astype(np.int32)
        desc[4], desc[5] = int(rng.integers(0, 2**31)), int(rng.integers(-31, 16))
        for j in (7, 9, 11):
            desc[j], desc[j + 1] = int(rng.integers(0, 2**31)), int(rng.integers(-31, 1))
        lut = kc._int8(rng, 1280)
    w = kc._int8(rng, 4 * h * (d + h), ["uniform", "small"][i % 2])
    bias = rng.integers(-(2**14), 2**14, 4 * h).astype(np.int32)
    if i % 11 == 10:  # the largest sums
        w[:], bias[:] = -128, -(2**30)
    return desc, {"w": w, "bias": bias, "mult": mult, "shift": shift, "lut": lut, "wr": wr, "dtanh": dtanh}


def gen_lstm_s8_forward(rng: Rng, i: int) -> Case:
    d, a = _lstm(rng, i)
    x = kc._int8(rng, d[0] * d[1])
    args: list[Arg] = [i32(d), s8(x, kc._kind_in(rng)), s8(a["w"], kc._kind_in(rng)), i32(a["bias"]),
                       i32(a["mult"]), i32(a["shift"]), s8(a["lut"], kc._kind_in(rng)),
                       out(kc._kind_out(rng), d[0] * d[2]), out(kc._kind_out(rng), d[0] * 6 * d[2])]
    return kc.make_case("lstm_s8_forward", args, f"T={d[0]}/D={d[1]}/H={d[2]}")


def gen_lstm_s8_backward(rng: Rng, i: int) -> Case:
    d, a = _lstm(rng, i)
    t, dd, h = d[:3]
    x = kc._int8(rng, t * dd)
    if i % 4 == 3:  # any bytes (the bounds hold for every y and keep)
        y, keep = kc._int8(rng, t * h), kc._int8(rng, t * 6 * h)
    else:
        y, keep = oracle.lstm_s8_forward(d, x, a["w"], a["bias"], a["mult"], a["shift"], a["lut"])
    e = kc._int8(rng, t * h, ["uniform", "small", "sparse"][i % 3])
    if i % 5 == 4:  # only the last step's output used (x[:, -1])
        e[: (t - 1) * h] = 0
    if i % 13 == 12:
        e[:], keep[:] = -128, -128
    if i % 9 == 8:  # the largest ratios the rule allows
        a["wr"][:] = 131071 // (4 * h)
    args: list[Arg] = [i32(d), s8(x, kc._kind_in(rng)), s8(a["w"], kc._kind_in(rng)), i32(a["wr"]),
                       i32(a["dtanh"]), s8(y, kc._kind_in(rng)), s8(keep, kc._kind_out(rng)),
                       s8(e, kc._kind_in(rng)), out("i", t), out("i", 6 * h), out("i", 4 * h * (dd + h)),
                       out("i", 4 * h), out(kc._kind_out(rng), t * dd)]
    return kc.make_case("lstm_s8_backward", args, f"T={t}/D={dd}/H={h}/k={d[6]}")


GENERATORS = {
    "mul_s8_forward": gen_mul_s8_forward,
    "mul_s8_grad_x1": gen_mul_s8_grad_x1,
    "mul_s8_grad_x2": gen_mul_s8_grad_x2,
    "matmul_s8_forward": gen_matmul_s8_forward,
    "matmul_s8_grad_a": gen_matmul_s8_grad_a,
    "matmul_s8_grad_b": gen_matmul_s8_grad_b,
    "softmax_s8_forward": gen_softmax_s8_forward,
    "softmax_s8_grad_input": gen_softmax_s8_grad_input,
    "layernorm_s8_forward": gen_layernorm_s8_forward,
    "layernorm_s8_grad_input": gen_layernorm_s8_grad_input,
    "gru_s8_forward": gen_gru_s8_forward,
    "gru_s8_backward": gen_gru_s8_backward,
    "lstm_s8_forward": gen_lstm_s8_forward,
    "lstm_s8_backward": gen_lstm_s8_backward,
}


def limits() -> list[Case]:
    """The accumulator bounds of docs/numerics.md, hit with the extreme operands."""
    cases = []
    # mul: 65535 elements per x2 value (per channel over 65535 positions), e = -128, x1 - zp = -255
    d = [65535, 1, 1, 1, 127, 0, 0, 2**30, 0, -128, 127]
    cases.append(kc.make_case("mul_s8_grad_x2", [i32(d), s8(np.full(65535, -128)), s8(np.full(65535, -128)),
                                                 out("i", 1), out("Y", 1)], "limit: 65535 elements per x2"))
    # mul forward: the largest product at sh 15
    d = [2, 2, 1, 2, 127, 127, 0, 2**31 - 1, 15, -128, 127]
    cases.append(kc.make_case("mul_s8_forward", [i32(d), s8([-128] * 4), s8([-128] * 2), out("Y", 4)],
                              "limit: sh 15"))
    # matmul forward: inner 32768 of (-128 - 127) * (-128 - 127), both layouts
    for tb in (0, 1):
        d = [1, 32768, 2, tb, 127, 127, 0, 2**31 - 1, -31, -128, 127]
        b = np.full(65536, -128)
        cases.append(kc.make_case("matmul_s8_forward", [i32(d), s8(np.full(32768, -128)), s8(b), out("Y", 2)],
                                  f"limit: inner 32768 tb{tb}"))
    # matmul grads: 65535 terms of -128 * (-128 - 127)
    big = s8(np.full(65535, -128))
    for tb in (0, 1):
        d = [1, 1, 65535, tb, 127, 127, 0, 2**30, 0, -128, 127]
        cases.append(kc.make_case("matmul_s8_grad_a", [i32(d), big, big, out("i", 1), out("Y", 1)],
                                  f"limit: cols 65535 tb{tb}"))
        d = [65535, 1, 1, tb, 127, 127, 0, 2**30, 0, -128, 127]
        cases.append(kc.make_case("matmul_s8_grad_b", [i32(d), big, big, out("i", 1), out("Y", 1)],
                                  f"limit: rows 65535 tb{tb}"))
    # softmax grad: n = 256, every u = 255 and e = -128 at one end, 127 elsewhere
    d = [1, 256, 1]
    e = np.r_[-128, np.full(255, 127)]
    y = s8(np.full(256, 127))
    cases.append(kc.make_case("softmax_s8_grad_input", [i32(d), y, s8(e), out("Y", 256)], "limit: n 256"))
    cases.append(kc.make_case("softmax_s8_grad_input", [i32(d), y, s8(-e - 1), out("Y", 256)],
                              "limit: n 256, signs swapped"))
    # LayerNorm at c = 256: the largest row sums (|x - zp| = 255 everywhere, S1^2 near 2^32),
    # one outlier (the largest normalised value), eps_q 1 and 2^31 - 1, errors at the int8 ends
    one = np.r_[127, np.full(255, -128)]
    half = np.r_[np.full(128, 127), np.full(128, -128)]
    for xs, eps_q in ((np.full(256, -128), 1), (one, 1), (one, 2**31 - 1), (half, 1)):
        d = [1, 256, 127, 0, eps_q, 2**31 - 1, -20]
        cases.append(kc.make_case("layernorm_s8_forward", [i32(d), s8(xs), out("Y", 256)],
                                  f"limit: c 256 eps {eps_q}"))
        for e in (np.r_[-128, np.full(255, 127)], np.r_[127, np.full(255, -128)]):
            cases.append(kc.make_case("layernorm_s8_grad_input", [i32(d), s8(xs), s8(e), out("Y", 256)],
                                      f"limit: c 256 eps {eps_q}"))
    return cases
