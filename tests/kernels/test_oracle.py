"""Tests of the numpy oracle itself: its integer results mean the right float thing.

Each kernel is checked against (a) a literal loop transcription of the spec
formula on small shapes and (b) PyTorch autograd on dequantised tensors.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from microtrain_tools.reference import oracle as o
from microtrain_tools.reference import torch_ref as tr

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


# --------------------------------------------------------------------------
# helpers


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    assert na > 0 and nb > 0, "degenerate (all-zero) vector in cosine"
    return float(a @ b / (na * nb))


def affine(lo: float, hi: float) -> tuple[float, int]:
    """Asymmetric int8 (scale, zero point) covering [lo, hi] (which includes 0)."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255.0
    zp = int(np.clip(round(-128 - lo / scale), -128, 127))
    return scale, zp


def deq(q: np.ndarray, scale: float, zp: int) -> np.ndarray:
    return scale * (np.asarray(q, dtype=np.float64) - zp)


def quantize(real: np.ndarray, scale: float, zp: int) -> np.ndarray:
    return np.clip(np.round(real / scale) + zp, -128, 127).astype(np.int8)


def rand_s8(rng: np.random.Generator, n: int, lo: int = -128, hi: int = 127) -> np.ndarray:
    return rng.integers(lo, hi + 1, size=n).astype(np.int8)


def out_size(n: int, k: int, s: int, p: int) -> int:
    return (n + 2 * p - k) // s + 1


def conv_desc(in_h, in_w, in_c, out_c, k_h, k_w, s_h=1, s_w=1, p_t=0, p_l=0, groups=1,
              in_zp=0, out_zp=0, act_min=-128, act_max=127) -> list[int]:
    out_h = out_size(in_h, k_h, s_h, p_t)
    out_w = out_size(in_w, k_w, s_w, p_l)
    return [in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, p_t, p_l, groups,
            in_zp, out_zp, act_min, act_max]


def pool_desc(in_h, in_w, c, k_h, k_w, s_h=1, s_w=1, p_t=0, p_l=0) -> list[int]:
    return [in_h, in_w, c, out_size(in_h, k_h, s_h, p_t), out_size(in_w, k_w, s_w, p_l),
            k_h, k_w, s_h, s_w, p_t, p_l]


# (in_h, in_w, in_c, out_c, k_h, k_w, s_h, s_w, p_t, p_l, groups)
CONV_CASES = {
    "3x3": (8, 8, 3, 8, 3, 3, 1, 1, 1, 1, 1),
    "strided": (9, 7, 4, 6, 3, 3, 2, 2, 1, 1, 1),
    "depthwise_x2": (8, 8, 4, 8, 3, 3, 1, 1, 1, 1, 4),
    "grouped_3x1": (6, 6, 6, 4, 3, 1, 1, 1, 1, 0, 2),
    "pointwise": (5, 5, 8, 16, 1, 1, 1, 1, 0, 0, 1),
    "1d": (1, 20, 4, 8, 1, 5, 1, 2, 0, 2, 1),
    "k2s2p1": (7, 7, 3, 5, 2, 2, 2, 2, 1, 1, 1),
    "big_k_stride": (11, 10, 2, 3, 5, 4, 3, 2, 2, 3, 1),
}

POOL_CASES = {
    "2x2s2": (8, 8, 3, 2, 2, 2, 2, 0, 0),
    "3x3s2p1": (7, 7, 2, 3, 3, 2, 2, 1, 1),
    "3x3s1p1": (5, 6, 4, 3, 3, 1, 1, 1, 1),
    "1d": (1, 10, 3, 1, 3, 1, 2, 0, 1),
    "asym": (9, 8, 2, 4, 3, 3, 2, 3, 2),
}


class ConvProblem:
    """A random, well-scaled quantised conv problem and its float meaning."""

    def __init__(self, geo: tuple[int, ...], seed: int, relu: bool = False) -> None:
        rng = np.random.default_rng(seed)
        in_h, in_w, in_c, out_c, k_h, k_w, s_h, s_w, p_t, p_l, groups = geo
        cpg = in_c // groups
        self.rng = rng
        x_real = rng.normal(0.3, 1.0, in_h * in_w * in_c)
        self.s_x, self.in_zp = affine(x_real.min(), x_real.max())
        self.x = quantize(x_real, self.s_x, self.in_zp)
        self.xr = self.s_x * (self.x.astype(np.float64) - self.in_zp)

        w_real = rng.normal(0, 1, (out_c, k_h * k_w * cpg)) * rng.uniform(0.1, 1.0, (out_c, 1))
        self.s_w = np.abs(w_real).max(axis=1) / 127.0
        self.w = np.round(w_real / self.s_w[:, None]).astype(np.int8).reshape(-1)
        self.wr_real = (self.w.reshape(out_c, -1) * self.s_w[:, None]).reshape(-1)

        s_b = self.s_x * self.s_w
        self.bias = np.round(rng.normal(0, 0.5, out_c) / s_b).astype(np.int32)
        self.br = self.bias * s_b

        geom = conv_desc(in_h, in_w, in_c, out_c, k_h, k_w, s_h, s_w, p_t, p_l, groups)[:13]
        self.geom = geom
        self.y_real, *_ = tr.conv2d(self.xr, self.wr_real, self.br, None, *geom)
        self.s_y, self.out_zp = affine(self.y_real.min(), self.y_real.max())
        qm = [o.quantize_multiplier(self.s_x * s / self.s_y) for s in self.s_w]
        self.mult = np.array([m for m, _ in qm], dtype=np.int32)
        self.shift = np.array([s for _, s in qm], dtype=np.int32)
        act_min = self.out_zp if relu else -128
        self.desc = geom + [self.in_zp, self.out_zp, act_min, 127]
        self.out_c, self.terms = out_c, k_h * k_w * (out_c // groups)

        self.s_e = float(rng.uniform(0.001, 0.1))
        self.e = np.clip(np.round(rng.normal(0, 40, self.y_real.size)), -128, 127).astype(np.int8)
        _, self.dx, self.dw, self.db = tr.conv2d(self.xr, self.wr_real, self.br,
                                                 self.e * self.s_e, *geom)


# --------------------------------------------------------------------------
# literal transcriptions of the spec (slow loops, small shapes)


def requant_ref(acc: int, m: int, shift: int) -> int:
    left, right = max(shift, 0), max(-shift, 0)
    a = ((acc * 2**left + 2**31) % 2**32) - 2**31
    h = (a * m + 2**30) // 2**31
    mask = 2**right - 1
    rem = h & mask
    thr = (mask >> 1) + (1 if h < 0 else 0)
    return (h >> right) + (1 if rem > thr else 0)


def dyn_requant_ref(acc: list[int]) -> tuple[list[int], int]:
    big = max((abs(v) for v in acc), default=0)

    def half(s: int) -> int:
        return 2 ** (s - 1) if s > 0 else 0

    s = 0
    while (big + half(s)) >> s > 127:
        s += 1
    return [(1 if v > 0 else -1 if v < 0 else 0) * ((abs(v) + half(s)) >> s) for v in acc], s


def conv_loops(desc, x, w, bias, mult, shift, e, wr):
    """Forward y, grad-input acc, grad-weight gw/gb, straight from the spec text."""
    (in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, p_t, p_l, groups,
     in_zp, out_zp, act_min, act_max) = desc
    cpg, opg = in_c // groups, out_c // groups
    x, w, e = (np.asarray(a, dtype=np.int64).tolist() for a in (x, w, e))
    y = []
    gi = [0] * (in_h * in_w * in_c)
    gw = [0] * len(w)
    gb = [0] * out_c
    for oy in range(out_h):
        for ox in range(out_w):
            for oc in range(out_c):
                g = oc // opg
                acc = int(bias[oc])
                ev = e[(oy * out_w + ox) * out_c + oc]
                gb[oc] += ev
                for ky in range(k_h):
                    for kx in range(k_w):
                        iy, ix = oy * s_h - p_t + ky, ox * s_w - p_l + kx
                        if not (0 <= iy < in_h and 0 <= ix < in_w):
                            continue
                        for ci in range(cpg):
                            xi = (iy * in_w + ix) * in_c + g * cpg + ci
                            wi = ((oc * k_h + ky) * k_w + kx) * cpg + ci
                            acc += (x[xi] - in_zp) * w[wi]
                            gi[xi] += ev * int(wr[oc]) * w[wi]
                            gw[wi] += ev * (x[xi] - in_zp)
                r = requant_ref(acc, int(mult[oc]), int(shift[oc]))
                y.append(min(max(r + out_zp, act_min), act_max))
    return y, gi, gw, gb


def pool_loops(desc, x, e):
    """Max/avg forward and grad-input accumulators, straight from the spec text."""
    in_h, in_w, c, out_h, out_w, k_h, k_w, s_h, s_w, p_t, p_l = desc
    x, e = np.asarray(x, dtype=np.int64).tolist(), np.asarray(e, dtype=np.int64).tolist()
    ymax, yavg = [], []
    gmax = [0] * len(x)
    gavg = [0] * len(x)
    for oy in range(out_h):
        for ox in range(out_w):
            for ch in range(c):
                taps = []
                for ky in range(k_h):
                    for kx in range(k_w):
                        iy, ix = oy * s_h - p_t + ky, ox * s_w - p_l + kx
                        if 0 <= iy < in_h and 0 <= ix < in_w:
                            taps.append((iy * in_w + ix) * c + ch)
                vals = [x[i] for i in taps]
                best = max(vals)
                ymax.append(best)
                ev = e[(oy * out_w + ox) * c + ch]
                gmax[taps[vals.index(best)]] += ev
                n, s = len(taps), sum(vals)
                yavg.append((1 if s > 0 else -1 if s < 0 else 0) * ((abs(s) + n // 2) // n))
                for i in taps:
                    gavg[i] += ev * ((2**16 + n // 2) // n)
    return ymax, yavg, gmax, gavg


# --------------------------------------------------------------------------
# integer helpers


def test_requant_matches_bigint_formula():
    rng = np.random.default_rng(1)
    n = 20000
    acc = rng.integers(INT32_MIN, INT32_MAX, n, endpoint=True)
    acc[: n // 2] >>= rng.integers(0, 31, n // 2)  # many magnitudes
    acc[:8] = [INT32_MIN, INT32_MAX, 0, 1, -1, 2**30, -(2**30), -(2**30) - 1]
    m = rng.integers(0, 2**31, n)
    m[8:16] = [0, 1, 2**30, 2**31 - 1, 2**30, 2**31 - 1, 2**30 + 1, 3 << 29]
    shift = rng.integers(-31, 32, n)
    shift[16:24] = [-31, 31, 0, -1, 1, -30, 30, -31]
    got = o.requant(acc, m, shift)
    want = [requant_ref(int(a), int(b), int(c)) for a, b, c in zip(acc, m, shift, strict=True)]
    assert got.tolist() == want


def test_requant_means_rounded_product():
    """Without wrap, requant is acc * m * 2^(shift-31) within the two roundings."""
    rng = np.random.default_rng(2)
    for _ in range(3000):
        shift = int(rng.integers(-31, 8))
        lim = 2 ** (31 - max(shift, 0)) - 1
        acc = int(rng.integers(-lim, lim, endpoint=True))
        m = int(rng.integers(2**30, 2**31))
        exact = Fraction(acc * m) * Fraction(2) ** (shift - 31)
        got = int(o.requant(acc, m, shift))
        assert abs(got - exact) <= Fraction(1, 2) + Fraction(1, 2 ** (max(-shift, 0) + 1))
    assert int(o.requant(12345, 2**30, 1)) == 12345
    # the high multiply rounds half up, the divide by 2^right half away from zero
    assert int(o.requant(-5, 2**30, 0)) == -2  # -2.5
    assert int(o.requant(5, 2**30, 0)) == 3  # 2.5
    assert int(o.requant(-6, 2**30, -1)) == -2  # -1.5
    assert int(o.requant(-7, 2**30, -1)) == -2  # -1.75
    with pytest.raises(ValueError):
        o.requant(1, 2**30, 32)


def test_rounding_divide_by_pot_half_away_from_zero():
    xs = np.arange(-300, 301)
    for e in range(0, 6):
        got = o.rounding_divide_by_pot(xs, e)
        want = [int(math.copysign(math.floor(abs(x) / 2**e + 0.5), x)) for x in xs]
        assert got.tolist() == want


def test_dyn_requant_matches_reference_and_is_minimal():
    rng = np.random.default_rng(3)
    cases = [np.array([], dtype=np.int64), np.zeros(5, dtype=np.int64),
             np.array([127, -127]), np.array([128]), np.array([-128]),
             np.array([INT32_MIN, 5]), np.array([INT32_MAX, -1]), np.array([191, -190, 64])]
    for _ in range(300):
        mag = 2 ** int(rng.integers(0, 31))
        cases.append(rng.integers(-mag, mag, int(rng.integers(1, 40))))
    for acc in cases:
        out, shift = o.dyn_requant_s8(acc.astype(np.int64))
        want_out, want_shift = dyn_requant_ref([int(v) for v in acc])
        assert shift == want_shift and out.tolist() == want_out
        assert out.dtype == np.int8
        if acc.size and np.abs(acc).max() > 127:
            assert shift > 0 and np.abs(out).max() >= 64  # shift - 1 would not fit
    out, shift = o.dyn_requant_s8(np.array([INT32_MIN]))
    assert (out.tolist(), shift) == ([-64], 25)


def test_quantize_multiplier_round_trip():
    rng = np.random.default_rng(4)
    for real in 10.0 ** rng.uniform(-9, 6, 2000):
        m, shift = o.quantize_multiplier(real)
        assert 2**30 <= m < 2**31 and -31 <= shift <= 31
        assert abs(m * 2.0 ** (shift - 31) - real) <= real * 2.0**-31
    assert o.quantize_multiplier(0.0) == (0, 0)
    assert o.quantize_multiplier(1.0) == (2**30, 1)
    assert o.quantize_multiplier(0.5) == (2**30, 0)
    assert o.quantize_multiplier(0.75) == (3 << 29, 0)
    assert o.quantize_multiplier(1 - 2.0**-33) == (2**30, 1)  # m == 2^31 fix-up
    assert o.quantize_multiplier(2.0**-40) == (2**22, -31)  # shift clamp, denormal m
    assert o.quantize_multiplier(2.0**-70) == (0, 0)
    assert o.quantize_multiplier(2.0**40) == (2**31 - 1, 31)
    with pytest.raises(ValueError):
        o.quantize_multiplier(-1.0)
    # requant with a quantised multiplier scales like the real number
    m, shift = o.quantize_multiplier(0.0123)
    assert int(o.requant(1_000_000, m, shift)) == round(12300)


def test_weight_ratios_rule():
    rng = np.random.default_rng(5)
    for terms in [1, 3, 9, 72, 1000, 8191, 131071]:
        s_w = rng.uniform(0.001, 0.05, 16)
        wr, r = o.weight_ratios(s_w, terms)
        assert wr.dtype == np.int32 and int(wr.max()) == 2**r
        assert int(wr.max()) * terms * 16384 <= INT32_MAX
        assert r == 15 or 2 ** (r + 1) * terms * 16384 > INT32_MAX
        np.testing.assert_allclose(wr, 2.0**r * s_w / s_w.max(), atol=0.5)
    wr, r = o.weight_ratios(np.full(4, 0.02), 9)
    assert r == 13 and wr.tolist() == [2**13] * 4
    with pytest.raises(ValueError):
        o.weight_ratios([0.1], 131072)


def test_add_params_and_lut_helpers():
    d = o.add_params(0.02, 3, 0.05, -7, 0.06, 1, -128, 127, n=10)
    assert len(d) == 13 and d[0] == 10 and d[1:4] == [3, -7, 1] and d[10] == 20
    assert d[5] <= 0 and d[7] <= 0
    assert abs(d[4] * 2.0 ** (d[5] - 31) - 0.2) < 1e-9 and (d[6], d[7]) == (2**30, 0)
    assert abs(d[8] * 2.0 ** (d[9] - 31) - 0.1 / (2**20 * 0.06)) < 1e-15
    lut = o.make_softmax_lut(0.1)
    assert lut.dtype == np.uint32 and lut.shape == (256,) and lut[0] == 65536
    assert np.all(np.abs(lut - 65536 * np.exp(-0.1 * np.arange(256))) <= 0.5)


# --------------------------------------------------------------------------
# conv2d


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv_matches_spec_loops(name):
    p = ConvProblem(CONV_CASES[name], seed=10)
    wr, _ = o.weight_ratios(p.s_w, p.terms)
    y, gi, gw, gb = conv_loops(p.desc, p.x, p.w, p.bias, p.mult, p.shift, p.e, wr)
    assert o.conv2d_s8_forward(p.desc, p.x, p.w, p.bias, p.mult, p.shift).tolist() == y
    ein, shift, acc = o.conv2d_s8_grad_input(p.desc, p.e, p.w, wr, None)
    assert acc.dtype == np.int32 and acc.tolist() == gi
    assert (ein.tolist(), shift) == dyn_requant_ref(gi)
    got_gw, got_gb = o.conv2d_s8_grad_weight(p.desc, p.x, p.e, None)
    assert got_gw.dtype == np.int32 and got_gw.tolist() == gw and got_gb.tolist() == gb


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv_forward_vs_torch(name, relu):
    p = ConvProblem(CONV_CASES[name], seed=11, relu=relu)
    y = o.conv2d_s8_forward(p.desc, p.x, p.w, p.bias, p.mult, p.shift)
    assert y.dtype == np.int8 and y.size == p.y_real.size
    want = np.maximum(p.y_real, 0) if relu else p.y_real
    err = np.abs(deq(y, p.s_y, p.out_zp) - want)
    assert err.max() <= 1.0 * p.s_y
    assert err.mean() <= 0.35 * p.s_y


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv_backward_vs_torch(name):
    p = ConvProblem(CONV_CASES[name], seed=12)
    wr, r = o.weight_ratios(p.s_w, p.terms)
    ein, shift, acc = o.conv2d_s8_grad_input(p.desc, p.e, p.w, wr, None)
    base = p.s_e * p.s_w.max() * 2.0**-r
    assert cosine(ein * base * 2.0**shift, p.dx) >= 0.99
    assert cosine(acc * base, p.dx) >= 0.9999
    np.testing.assert_allclose(acc * base, p.dx, atol=1e-3 * np.abs(p.dx).max())
    gw, gb = o.conv2d_s8_grad_weight(p.desc, p.x, p.e, None)
    assert cosine(gw * p.s_x * p.s_e, p.dw) >= 0.99
    np.testing.assert_allclose(gw * p.s_x * p.s_e, p.dw, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gb * p.s_e, p.db, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", ["3x3", "depthwise_x2", "grouped_3x1"])
def test_conv_mask_equals_zeroed_error(name):
    p = ConvProblem(CONV_CASES[name], seed=13)
    wr, _ = o.weight_ratios(p.s_w, p.terms)
    mask = (p.rng.random(p.out_c) < 0.5).astype(np.uint8)
    mask[0], mask[-1] = 1, 0
    e0 = (p.e.reshape(-1, p.out_c) * mask).astype(np.int8).reshape(-1)
    masked = o.conv2d_s8_grad_input(p.desc, p.e, p.w, wr, mask)
    dense = o.conv2d_s8_grad_input(p.desc, e0, p.w, wr, None)
    assert masked[1] == dense[1]
    assert masked[0].tolist() == dense[0].tolist() and masked[2].tolist() == dense[2].tolist()
    gw, gb = o.conv2d_s8_grad_weight(p.desc, p.x, p.e, mask)
    gw0, gb0 = o.conv2d_s8_grad_weight(p.desc, p.x, e0, None)
    assert gw.tolist() == gw0.tolist() and gb.tolist() == gb0.tolist()
    assert not gw.reshape(p.out_c, -1)[mask == 0].any() and not gb[mask == 0].any()

    gw_in = p.rng.normal(0, 1, gw.size).astype(np.float32)
    gb_in = p.rng.normal(0, 1, gb.size).astype(np.float32)
    w_scale, b_scale = 1.7e-4, 3.1e-3
    gwf, gbf = o.conv2d_s8_grad_weight_f32(p.desc, p.x, p.e, mask, w_scale, b_scale,
                                           gw_in, gb_in)
    assert gwf.dtype == np.float32 and gbf.dtype == np.float32
    rows = np.repeat(mask, gw.size // p.out_c)
    want = [np.float32(gi + np.float32(w_scale) * np.float32(g)) if k else gi
            for gi, g, k in zip(gw_in, gw, rows, strict=True)]
    assert gwf.tobytes() == np.array(want, dtype=np.float32).tobytes()
    wantb = [np.float32(gi + np.float32(b_scale) * np.float32(g)) if k else gi
             for gi, g, k in zip(gb_in, gb, mask, strict=True)]
    assert gbf.tobytes() == np.array(wantb, dtype=np.float32).tobytes()


def test_conv_grad_input_overflow_rule():
    desc = conv_desc(4, 4, 2, 4, 3, 3, p_t=1, p_l=1)
    e, w = np.zeros(64, np.int8), np.zeros(72, np.int8)
    ok = np.full(4, (INT32_MAX // (9 * 4 * 16384)), np.int32)
    o.conv2d_s8_grad_input(desc, e, w, ok, None)
    with pytest.raises(ValueError):
        o.conv2d_s8_grad_input(desc, e, w, ok + 1, None)
    # the worst case allowed by the rule does not overflow int32
    wr = ok
    _, _, acc = o.conv2d_s8_grad_input(desc, np.full(64, -128, np.int8),
                                       np.full(72, -128, np.int8), wr, None)
    assert acc.max() == 9 * 4 * 16384 * int(wr[0])


@pytest.mark.parametrize("bad", [
    {2: 3, 12: 2},  # in_c not divisible by groups
    {10: 3},  # pad_top >= k_h
    {3: 10},  # last window starts outside
    {15: 10, 16: 5},  # act_min > act_max
    {13: 128},  # zero point out of range
])
def test_conv_rejects_bad_desc(bad):
    desc = conv_desc(8, 8, 4, 4, 3, 3, p_t=1, p_l=1)
    o.conv2d_s8_grad_weight(desc, np.zeros(256, np.int8), np.zeros(256, np.int8), None)
    for k, v in bad.items():
        desc[k] = v
    with pytest.raises(ValueError):
        o.conv2d_s8_grad_weight(desc, np.zeros(256, np.int8), np.zeros(256, np.int8), None)


# --------------------------------------------------------------------------
# linear


def test_linear_vs_torch_and_conv():
    rng = np.random.default_rng(20)
    in_n, out_n = 48, 10
    x_real = rng.normal(0, 1, in_n)
    s_x, zp_x = affine(x_real.min(), x_real.max())
    x = quantize(x_real, s_x, zp_x)
    xr = s_x * (x.astype(np.float64) - zp_x)
    w_real = rng.normal(0, 0.3, (out_n, in_n)) * rng.uniform(0.2, 1, (out_n, 1))
    s_w = np.abs(w_real).max(axis=1) / 127
    w = np.round(w_real / s_w[:, None]).astype(np.int8)
    wq = (w * s_w[:, None]).reshape(-1)
    bias = np.round(rng.normal(0, 0.3, out_n) / (s_x * s_w)).astype(np.int32)
    br = bias * s_x * s_w
    y_real, *_ = tr.linear(xr, wq, br, None)
    s_y, zp_y = affine(y_real.min(), y_real.max())
    qm = [o.quantize_multiplier(s_x * s / s_y) for s in s_w]
    mult, shift = np.array(qm, dtype=np.int32).T
    desc = [in_n, out_n, zp_x, zp_y, -128, 127]
    y = o.linear_s8_forward(desc, x, w.reshape(-1), bias, mult, shift)
    assert np.abs(deq(y, s_y, zp_y) - y_real).max() <= s_y

    s_e = 0.02
    e = rand_s8(rng, out_n)
    _, dx, dw, db = tr.linear(xr, wq, br, e * s_e)
    wr, r = o.weight_ratios(s_w, out_n)
    ein, sh, acc = o.linear_s8_grad_input(desc, e, w.reshape(-1), wr, None)
    assert cosine(ein * s_e * s_w.max() * 2.0 ** (sh - r), dx) >= 0.99
    gw, gb = o.linear_s8_grad_weight(desc, x, e, None)
    np.testing.assert_allclose(gw * s_x * s_e, dw, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gb * s_e, db, rtol=1e-9, atol=1e-12)

    cdesc = [1, 1, in_n, 1, 1, out_n, 1, 1, 1, 1, 0, 0, 1, zp_x, zp_y, -128, 127]
    assert y.tolist() == o.conv2d_s8_forward(cdesc, x, w, bias, mult, shift).tolist()
    c_ein, c_sh, c_acc = o.conv2d_s8_grad_input(cdesc, e, w, wr, None)
    assert (c_ein.tolist(), c_sh, c_acc.tolist()) == (ein.tolist(), sh, acc.tolist())
    gwf, gbf = o.linear_s8_grad_weight_f32(desc, x, e, None, 0.5, 0.25,
                                           np.ones(gw.size, np.float32), np.zeros(out_n, np.float32))
    np.testing.assert_array_equal(gwf, np.float32(1) + np.float32(0.5) * gw.astype(np.float32))
    np.testing.assert_array_equal(gbf, np.float32(0.25) * gb.astype(np.float32))
    with pytest.raises(ValueError):
        o.linear_s8_forward([32769, 1, 0, 0, -128, 127], np.zeros(32769, np.int8),
                            np.zeros(32769, np.int8), [0], [2**30], [0])


# --------------------------------------------------------------------------
# relu


def test_relu_forward_backward():
    rng = np.random.default_rng(30)
    x, e = rand_s8(rng, 500), rand_s8(rng, 500)
    zp, q6 = -20, 90
    y = o.relu_s8_forward(x, zp)
    assert y.tolist() == [max(v, zp) for v in x.tolist()]
    assert o.relu_s8_backward(y, zp, e).tolist() == [
        ev if yv > zp else 0 for yv, ev in zip(y.tolist(), e.tolist(), strict=True)]
    y6 = o.relu6_s8_forward(x, zp, q6)
    assert y6.tolist() == [min(max(v, zp), q6) for v in x.tolist()]
    assert o.relu6_s8_backward(y6, zp, q6, e).tolist() == [
        ev if zp < yv < q6 else 0 for yv, ev in zip(y6.tolist(), e.tolist(), strict=True)]
    assert o.relu6_q6(0.05, -20) == 100 and o.relu6_q6(0.01, 0) == 127


# --------------------------------------------------------------------------
# pools


@pytest.mark.parametrize("name", list(POOL_CASES))
def test_pools_match_spec_loops(name):
    rng = np.random.default_rng(40)
    desc = pool_desc(*POOL_CASES[name])
    n_in = desc[0] * desc[1] * desc[2]
    n_out = desc[3] * desc[4] * desc[2]
    for x in (rand_s8(rng, n_in), rand_s8(rng, n_in, -2, 1)):  # the second is full of ties
        e = rand_s8(rng, n_out)
        ymax, yavg, gmax, gavg = pool_loops(desc, x, e)
        assert o.maxpool_s8_forward(desc, x).tolist() == ymax
        assert o.avgpool_s8_forward(desc, x).tolist() == yavg
        ein, sh, acc = o.maxpool_s8_grad_input(desc, x, e)
        assert acc.tolist() == gmax and (ein.tolist(), sh) == dyn_requant_ref(gmax)
        ein, sh, acc = o.avgpool_s8_grad_input(desc, e)
        assert acc.tolist() == gavg and (ein.tolist(), sh) == dyn_requant_ref(gavg)


@pytest.mark.parametrize("name", list(POOL_CASES))
def test_pools_vs_torch(name):
    rng = np.random.default_rng(41)
    desc = pool_desc(*POOL_CASES[name])
    n_in = desc[0] * desc[1] * desc[2]
    n_out = desc[3] * desc[4] * desc[2]
    x_real = rng.normal(0, 1, n_in)
    s, zp = affine(x_real.min(), x_real.max())
    x = quantize(x_real, s, zp)
    xr = s * (x.astype(np.float64) - zp)
    s_e = 0.03
    e = rand_s8(rng, n_out)

    ymax_real, dx_max = tr.maxpool2d(xr, e * s_e, *desc)
    y = o.maxpool_s8_forward(desc, x)
    assert y.tolist() == quantize(ymax_real, s, zp).tolist()
    ein, sh, _ = o.maxpool_s8_grad_input(desc, x, e)
    assert cosine(ein * s_e * 2.0**sh, dx_max) >= 0.99

    yavg_real, dx_avg = tr.avgpool2d(xr, e * s_e, *desc)
    y = o.avgpool_s8_forward(desc, x)
    assert np.abs(deq(y, s, zp) - yavg_real).max() <= 0.5 * s + 1e-9
    ein, sh, acc = o.avgpool_s8_grad_input(desc, e)
    assert cosine(ein * s_e * 2.0 ** (sh - 16), dx_avg) >= 0.99
    # each tap's recip(n) is within 1/2 of 2^16/n: bound the summed rounding error
    bound = desc[5] * desc[6] * 128 * s_e * 2.0**-17
    np.testing.assert_allclose(acc * s_e * 2.0**-16, dx_avg, rtol=0, atol=bound)


def test_global_avgpool_vs_torch():
    rng = np.random.default_rng(42)
    hw, c = 25, 6
    x_real = rng.normal(0.5, 1, hw * c)
    s, zp = affine(x_real.min(), x_real.max())
    x = quantize(x_real, s, zp)
    xr = s * (x.astype(np.float64) - zp)
    e, s_e = rand_s8(rng, c), 0.05
    y_real, dx = tr.global_avgpool(xr, e * s_e, hw, c)
    y = o.global_avgpool_s8_forward(x, hw, c)
    assert np.abs(deq(y, s, zp) - y_real).max() <= 0.5 * s + 1e-9
    sums = x.astype(np.int64).reshape(hw, c).sum(axis=0)
    assert y.tolist() == [int(math.copysign((abs(v) + hw // 2) // hw, v)) for v in sums]
    ein = o.global_avgpool_s8_grad_input(e, hw)
    assert ein.dtype == np.int8 and ein.size == hw * c
    np.testing.assert_allclose(ein * s_e / hw, dx, rtol=1e-12)


def test_pool_rejects_big_kernel():
    with pytest.raises(ValueError):
        o.avgpool_s8_forward([16, 16, 1, 1, 1, 16, 16, 1, 1, 0, 0], np.zeros(256, np.int8))


# --------------------------------------------------------------------------
# residual add


@pytest.mark.parametrize("seed", range(4))
def test_add_forward_vs_float(seed):
    rng = np.random.default_rng(50 + seed)
    n = 400
    a_real, b_real = rng.normal(0, rng.uniform(0.3, 3), n), rng.normal(1, rng.uniform(0.3, 3), n)
    s1, z1 = affine(a_real.min(), a_real.max())
    s2, z2 = affine(b_real.min(), b_real.max())
    x1, x2 = quantize(a_real, s1, z1), quantize(b_real, s2, z2)
    ar, br = s1 * (x1.astype(np.float64) - z1), s2 * (x2.astype(np.float64) - z2)
    y_real, d1, d2 = tr.add(ar, br, np.ones(n))
    assert np.all(d1 == 1) and np.all(d2 == 1)
    s_o, z_o = affine(y_real.min(), y_real.max())
    desc = o.add_params(s1, z1, s2, z2, s_o, z_o, -128, 127, n)
    y = o.add_s8_forward(desc, x1, x2)
    assert y.dtype == np.int8
    err = np.abs(deq(y, s_o, z_o) - y_real)
    assert err.max() <= 1.0 * s_o and err.mean() <= 0.35 * s_o
    # fused clamp
    desc_relu = o.add_params(s1, z1, s2, z2, s_o, z_o, z_o, 127, n)
    assert o.add_s8_forward(desc_relu, x1, x2).tolist() == np.maximum(y, z_o).tolist()
    # bit-exact against the scalar formula
    _, zz1, zz2, zo, m1, sh1, m2, sh2, mo, sho, ls, lo, hi = desc
    want = []
    for u, v in zip(x1.tolist(), x2.tolist(), strict=True):
        a = requant_ref((u - zz1) * 2**ls, m1, sh1)
        b = requant_ref((v - zz2) * 2**ls, m2, sh2)
        want.append(min(max(requant_ref(a + b, mo, sho) + zo, lo), hi))
    assert y.tolist() == want


def test_add_grad_merge():
    rng = np.random.default_rng(55)
    ea, eb = rand_s8(rng, 300), rand_s8(rng, 300)
    s_a, s_b = 0.013, 0.004
    ra, rb = o.merge_ratios(s_a, s_b)
    assert ra == 2**15 and rb == round(2**15 * s_b / s_a)
    out, sh = o.add_s8_grad_merge(ea, ra, eb, rb)
    acc = [u * ra + v * rb for u, v in zip(ea.tolist(), eb.tolist(), strict=True)]
    assert (out.tolist(), sh) == dyn_requant_ref(acc)
    real = ea * s_a + eb * s_b
    assert cosine(out * max(s_a, s_b) * 2.0 ** (sh - 15), real) >= 0.99
    with pytest.raises(ValueError):
        o.add_s8_grad_merge(ea, 2**15 + 1, eb, 0)


# --------------------------------------------------------------------------
# softmax cross-entropy


@pytest.mark.parametrize("scale", [0.02, 0.08, 0.25])
def test_softmax_xent_vs_torch(scale):
    rng = np.random.default_rng(int(scale * 1000))
    lut = o.make_softmax_lut(scale)
    for _ in range(20):
        c = int(rng.integers(2, 40))
        q = rand_s8(rng, c)
        label = int(rng.integers(0, c))
        err, sh, stats = o.softmax_xent_s8(q, label, lut)
        assert err.dtype == np.int8 and stats.dtype == np.int32 and stats[0] == sh
        loss = o.xent_loss(q, label, scale, stats)
        t_loss, dz = tr.softmax_xent(scale * q.astype(np.float64), label)
        assert abs(loss - t_loss) <= 1e-3 * max(1.0, t_loss)
        assert cosine(err * 2.0 ** (sh - 15), dz) >= 0.99
        # bit-exact against the formula
        qmax = int(q.max())
        d = [qmax - v for v in q.tolist()]
        s_sum = sum(int(lut[k]) for k in d)
        g = [(int(lut[k]) * 2**15 + s_sum // 2) // s_sum for k in d]
        # zero-sum errors: smallest shift whose rounded non-label terms sum to <= 127
        others = [v for i, v in enumerate(g) if i != label]
        shift = next(k for k in range(32) if sum((v + (2**k >> 1)) // 2**k for v in others) <= 127)
        want = [(v + (2**shift >> 1)) // 2**shift for v in g]
        want[label] = -sum(w for i, w in enumerate(want) if i != label)
        assert (err.tolist(), sh) == (want, shift)
        assert sum(err.tolist()) == 0
        assert stats.tolist() == [sh, s_sum, qmax]


@pytest.mark.parametrize("scale", [0.004, 0.05, 0.138, 1.0, 30.0])
def test_softmax_trimmed_table_same_bits(scale):
    """A table cut after its last nonzero entry (d >= len reads as 0) gives the full table's
    results, also for logits farther from the max than its length; a table of n entries is the
    full table with zeros from n on."""
    full = o.make_softmax_lut(scale)
    lut = o.trim_softmax_lut(full)
    n = lut.size
    assert 1 <= n <= 256 and lut[-1] > 0 and np.array_equal(lut, full[:n]) and not full[n:].any()
    rng = np.random.default_rng(int(scale * 1000))
    for _ in range(30):
        c = int(rng.integers(1, 60))
        q = rand_s8(rng, c)
        q[0] = 127
        q[-1] = -128 if c > 1 else q[-1]
        label = int(rng.integers(0, c))
        for a, b in zip(o.softmax_xent_s8(q, label, full), o.softmax_xent_s8(q, label, lut), strict=True):
            assert np.array_equal(a, b)
        cut = int(rng.integers(1, 257))  # any length: its zero-padded full table
        padded = np.r_[full[:cut], np.zeros(256 - cut, np.uint32)]
        for a, b in zip(o.softmax_xent_s8(q, label, full[:cut]), o.softmax_xent_s8(q, label, padded),
                        strict=True):
            assert np.array_equal(a, b)
    for bad in (np.zeros(0, np.uint32), np.full(257, 65536, np.uint32)):
        with pytest.raises(ValueError, match="lut"):
            o.softmax_xent_s8(rand_s8(rng, 4), 0, bad)


# --------------------------------------------------------------------------
# sparse update, misc


def test_l1_norm_and_topk():
    rng = np.random.default_rng(60)
    c = 12
    e = rand_s8(rng, 7 * c)
    norms = o.l1_norm_s8(e, c)
    assert norms.dtype == np.int32
    assert norms.tolist() == [sum(abs(int(v)) for v in e[k::c]) for k in range(c)]
    for _ in range(200):
        nv = rng.integers(0, 5, int(rng.integers(1, 12)))  # many ties
        k = int(rng.integers(0, nv.size + 1))
        mask = o.topk_mask(nv.astype(np.int32), k)
        want = [int(sum(1 for j in range(nv.size)
                        if nv[j] > nv[i] or (nv[j] == nv[i] and j < i)) < k)
                for i in range(nv.size)]
        assert mask.dtype == np.uint8 and mask.tolist() == want and int(mask.sum()) == k
    with pytest.raises(ValueError):
        o.l1_norm_s8(e[:-1], c)


def test_f32_axpy():
    rng = np.random.default_rng(70)
    x = rng.integers(INT32_MIN, INT32_MAX, 200).astype(np.int32)
    y0 = rng.normal(0, 1e6, 200).astype(np.float32)
    y = o.f32_axpy_i32(x, 1e-3, y0)
    want = [np.float32(b + np.float32(1e-3) * np.float32(a)) for a, b in zip(x, y0, strict=True)]
    assert y.dtype == np.float32 and y.tobytes() == np.array(want, np.float32).tobytes()


def test_checks_have_teeth():
    """The float comparisons reject a plausible layout bug (NCHW instead of NHWC)."""
    p = ConvProblem(CONV_CASES["3x3"], seed=80)
    wr, r = o.weight_ratios(p.s_w, p.terms)
    ein, shift, _ = o.conv2d_s8_grad_input(p.desc, p.e, p.w, wr, None)
    real = ein * p.s_e * p.s_w.max() * 2.0 ** (shift - r)
    wrong = real.reshape(8, 8, 3).transpose(2, 0, 1).reshape(-1)
    assert cosine(wrong, p.dx) < 0.9
    gw, _ = o.conv2d_s8_grad_weight(p.desc, p.x, p.e, None)
    wrong = (gw * p.s_x * p.s_e).reshape(8, 3, 3, 3).transpose(0, 3, 1, 2).reshape(-1)
    assert cosine(wrong, p.dw) < 0.9
    y = o.conv2d_s8_forward(p.desc, p.x, p.w, p.bias, p.mult, p.shift)
    assert np.abs(deq(y, p.s_y, p.out_zp + 1) - p.y_real).mean() > 0.5 * p.s_y
