"""Kernel gradients (run in MicroPython) vs PyTorch autograd on the dequantised tensors.

Well-scaled random problems: the integer kernels' outputs, scaled by the real
scales of docs/numerics.md (including the dynamic 2^shift and the 2^-R of the
weight ratios), must point the same way as float64 autograd (cosine >= 0.99)
and have the same size (norm ratio within 5%). Forward conv/linear outputs are
checked to within one output step where not clamped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from microtrain_tools.reference import oracle, torch_ref
from support.harness import (
    Arg,
    Case,
    Result,
    assert_complete,
    cosine,
    ensure_natmod,
    f32,
    i32,
    inout,
    out,
    run_cases_micropython,
    s8,
    u32,
)
from support.kernel_cases import ConvGeom

COS_MIN = 0.99
Arr = np.ndarray


@dataclass
class Problem:
    name: str
    cases: list[Case]
    check: Callable[[list[Result]], None]


def _close(name: str, got: Arr, ref: Arr | None) -> None:
    assert ref is not None
    c = cosine(got, ref)
    ratio = float(np.linalg.norm(got) / max(np.linalg.norm(ref), 1e-300))
    assert c >= COS_MIN, f"{name}: cosine {c:.5f}"
    assert 0.95 <= ratio <= 1.05, f"{name}: norm ratio {ratio:.4f} (scale convention?)"


def _ok(results: list[Result]) -> None:
    for r in results:
        assert r.status == 0, f"{r.exc_type}: {r.exc_msg}"


# --------------------------------------------------------------------------
# conv2d / linear


CONV_SHAPES = {
    "conv3x3_pad1": ConvGeom(9, 8, 4, 9, 8, 6, 3, 3, 1, 1, 1, 1, 1),
    "conv_stride2_pad": ConvGeom(11, 10, 3, 6, 5, 5, 3, 3, 2, 2, 1, 1, 1),
    "depthwise": ConvGeom(8, 7, 6, 8, 7, 6, 3, 3, 1, 1, 1, 1, 6),
    "depthwise_mult2_stride2": ConvGeom(9, 9, 4, 5, 5, 8, 3, 3, 2, 2, 1, 1, 4),
    "grouped": ConvGeom(7, 7, 6, 5, 5, 4, 3, 3, 1, 1, 0, 0, 2),
    "pointwise": ConvGeom(6, 5, 8, 6, 5, 7, 1, 1, 1, 1, 0, 0, 1),
    "conv1d": ConvGeom(1, 30, 4, 1, 14, 5, 1, 5, 1, 2, 0, 2, 1),
}


def conv_problem(name: str, g: ConvGeom, seed: int) -> Problem:
    rng = np.random.default_rng(seed)
    in_zp = int(rng.choice([-128, -5, 3]))
    s_x, s_e = 0.02, 1e-3
    s_w = 10.0 ** rng.uniform(-3, -2, g.out_c)
    x = np.clip(np.round(in_zp + np.abs(rng.normal(0, 40, g.n_in))), -128, 127).astype(np.int64)
    w = rng.integers(-127, 128, g.n_w)
    e = np.clip(np.round(rng.normal(0, 40, g.n_out)), -128, 127).astype(np.int64)
    terms = g.k_h * g.k_w * g.opg
    wr, big_r = oracle.weight_ratios(s_w, terms)
    # forward: y = conv(x, w) + b in real units, requantised to s_y
    w_real = (w.reshape(g.out_c, -1) * s_w[:, None]).reshape(-1)
    x_real = s_x * (x - in_zp)
    geo = dict(in_h=g.in_h, in_w=g.in_w, in_c=g.in_c, out_h=g.out_h, out_w=g.out_w, out_c=g.out_c,
               k_h=g.k_h, k_w=g.k_w, stride_h=g.stride_h, stride_w=g.stride_w, pad_top=g.pad_top,
               pad_left=g.pad_left, groups=g.groups)
    b_real = rng.normal(0, 0.05, g.out_c)
    y_t, dx_t, dw_t, db_t = torch_ref.conv2d(x_real, w_real, b_real, s_e * e, **geo)
    s_y, out_zp = float(np.abs(y_t).max() / 100.0), int(rng.integers(-20, 21))
    bias = np.round(b_real / (s_x * s_w)).astype(np.int64)
    ms = [oracle.quantize_multiplier(s_x * sw / s_y) for sw in s_w]
    desc = i32(g.desc(in_zp, out_zp, -128, 127))
    cases = [
        Case("conv2d_s8_forward", [desc, s8(x), s8(w), i32(bias), i32([m for m, _ in ms]),
                                   i32([s for _, s in ms]), out("Y", g.n_out)]),
        Case("conv2d_s8_grad_input", [desc, s8(e), s8(w), i32(wr), None, out("i", g.n_in), out("Y", g.n_in)]),
        Case("conv2d_s8_grad_weight", [desc, s8(x), s8(e), None, out("i", g.n_w), out("i", g.out_c)]),
        Case("conv2d_s8_grad_weight_f32", [desc, s8(x), s8(e), None, s_x * s_e, s_e,
                                           inout(f32(np.zeros(g.n_w))), inout(f32(np.zeros(g.out_c)))]),
    ]

    def check(res: list[Result]) -> None:
        _ok(res)
        y = res[0].out_array(0).astype(np.int64)
        y_real = s_y * (y - out_zp)
        inside = (y > -128) & (y < 127)
        assert inside.mean() > 0.9
        err = np.abs(y_real - y_t)[inside].max()
        assert err <= 1.0 * s_y + 1e-9, f"forward off by {err / s_y:.3f} output steps"
        ein, shift = res[1].out_array(1).astype(np.float64), res[1].ret
        assert isinstance(shift, int)
        _close("dx", ein * s_e * s_w.max() * 2.0 ** (shift - big_r), dx_t)
        gw, gb = res[2].out_array(0).astype(np.float64), res[2].out_array(1).astype(np.float64)
        _close("dw", gw * s_x * s_e, dw_t)
        _close("db", gb * s_e, db_t)
        _close("dw_f32", res[3].out_array(0), dw_t)
        _close("db_f32", res[3].out_array(1), db_t)

    return Problem(f"conv2d-{name}", cases, check)


def linear_problem(in_n: int, out_n: int, seed: int) -> Problem:
    rng = np.random.default_rng(seed)
    in_zp = int(rng.choice([-128, 0, 7]))
    s_x, s_e = 0.03, 2e-3
    s_w = 10.0 ** rng.uniform(-3, -2, out_n)
    x = np.clip(np.round(in_zp + np.abs(rng.normal(0, 50, in_n))), -128, 127).astype(np.int64)
    w = rng.integers(-127, 128, in_n * out_n)
    e = rng.integers(-128, 128, out_n)
    wr, big_r = oracle.weight_ratios(s_w, out_n)
    w_real = (w.reshape(out_n, in_n) * s_w[:, None]).reshape(-1)
    b_real = rng.normal(0, 0.05, out_n)
    y_t, dx_t, dw_t, db_t = torch_ref.linear(s_x * (x - in_zp), w_real, b_real, s_e * e)
    s_y, out_zp = float(np.abs(y_t).max() / 100.0), 3
    bias = np.round(b_real / (s_x * s_w)).astype(np.int64)
    ms = [oracle.quantize_multiplier(s_x * sw / s_y) for sw in s_w]
    desc = i32([in_n, out_n, in_zp, out_zp, -128, 127])
    gw_acc, gb_acc = inout(f32(np.zeros(in_n * out_n))), inout(f32(np.zeros(out_n)))
    cases = [
        Case("linear_s8_forward", [desc, s8(x), s8(w), i32(bias), i32([m for m, _ in ms]),
                                   i32([s for _, s in ms]), out("Y", out_n)]),
        Case("linear_s8_grad_input", [desc, s8(e), s8(w), i32(wr), None, out("i", in_n), out("Y", in_n)]),
        Case("linear_s8_grad_weight", [desc, s8(x), s8(e), None, out("i", in_n * out_n), out("i", out_n)]),
        Case("linear_s8_grad_weight_f32", [desc, s8(x), s8(e), None, s_x * s_e, s_e, gw_acc, gb_acc]),
    ]

    def check(res: list[Result]) -> None:
        _ok(res)
        y = res[0].out_array(0).astype(np.int64)
        inside = (y > -128) & (y < 127)
        err = np.abs(s_y * (y - out_zp) - y_t)[inside].max()
        assert err <= 1.0 * s_y + 1e-9, f"forward off by {err / s_y:.3f} output steps"
        ein, shift = res[1].out_array(1).astype(np.float64), res[1].ret
        assert isinstance(shift, int)
        _close("dx", ein * s_e * s_w.max() * 2.0 ** (shift - big_r), dx_t)
        _close("dw", res[2].out_array(0) * s_x * s_e, dw_t)
        _close("db", res[2].out_array(1) * s_e, db_t)
        _close("dw_f32", res[3].out_array(0), dw_t)
        _close("db_f32", res[3].out_array(1), db_t)

    return Problem(f"linear-{in_n}x{out_n}", cases, check)


# --------------------------------------------------------------------------
# pools, activations, residual fan-out, softmax cross-entropy


POOL_SHAPES = {
    "2x2s2": ConvGeom(8, 8, 3, 4, 4, 3, 2, 2, 2, 2, 0, 0, 3),
    "3x3s1_pad_overlap": ConvGeom(7, 9, 4, 7, 9, 4, 3, 3, 1, 1, 1, 1, 4),
    "3x3s2_pad": ConvGeom(9, 9, 2, 5, 5, 2, 3, 3, 2, 2, 1, 1, 2),
}


def _distinct_x(rng: np.random.Generator, g: ConvGeom) -> Arr:
    """Per channel a permutation of distinct int8 values: no ties anywhere."""
    hw = g.in_h * g.in_w
    cols = [rng.permutation(np.arange(-128, 128))[:hw] for _ in range(g.in_c)]
    return np.stack(cols, axis=1).reshape(-1)


def pool_problem(kind: str, name: str, g: ConvGeom, seed: int) -> Problem:
    rng = np.random.default_rng(seed)
    s_x, s_e = 0.05, 1e-2
    x = _distinct_x(rng, g)
    e = rng.integers(-128, 128, g.n_out)
    geo = dict(in_h=g.in_h, in_w=g.in_w, c=g.in_c, out_h=g.out_h, out_w=g.out_w, k_h=g.k_h, k_w=g.k_w,
               stride_h=g.stride_h, stride_w=g.stride_w, pad_top=g.pad_top, pad_left=g.pad_left)
    desc = i32(g.pool_desc())
    args: list[Arg]
    if kind == "max":
        _, dx_t = torch_ref.maxpool2d(s_x * x, s_e * e, **geo)
        args = [desc, s8(x), s8(e), out("i", g.n_in), out("Y", g.n_in)]
        base = s_e
    else:
        _, dx_t = torch_ref.avgpool2d(s_x * x, s_e * e, **geo)
        args = [desc, s8(e), out("i", g.n_in), out("Y", g.n_in)]
        base = s_e * 2.0**-16
    case = Case(f"{kind}pool_s8_grad_input", args)

    def check(res: list[Result]) -> None:
        _ok(res)
        shift = res[0].ret
        assert isinstance(shift, int)
        _close("dx", res[0].out_array(1).astype(np.float64) * base * 2.0**shift, dx_t)

    return Problem(f"{kind}pool-{name}", [case], check)


def global_avgpool_problem(seed: int) -> Problem:
    rng = np.random.default_rng(seed)
    hw, c, s_e = 37, 5, 0.01
    e = rng.integers(-128, 128, c)
    x = rng.integers(-128, 128, hw * c)
    _, dx_t = torch_ref.global_avgpool(0.1 * x, s_e * e, hw, c)

    def check(res: list[Result]) -> None:
        _ok(res)
        _close("dx", res[0].out_array(0).astype(np.float64) * s_e / hw, dx_t)

    case = Case("global_avgpool_s8_grad_input", [s8(e), hw, out("Y", hw * c)])
    return Problem("global_avgpool", [case], check)


def concat_problem(seed: int) -> Problem:
    """torch.cat(dim=1) of two NCHW maps: forward within a step, each input's error its slice."""
    rng = np.random.default_rng(seed)
    h, w, c1, c2 = 5, 6, 3, 4
    s1, z1, s2, z2, so, zo = 0.02, 5, 0.05, -9, 0.11, 3  # so: the output range holds both inputs
    x1, x2 = rng.integers(-128, 128, h * w * c1), rng.integers(-128, 128, h * w * c2)
    e = rng.integers(-128, 128, h * w * (c1 + c2))
    t1 = torch.tensor((s1 * (x1 - z1)).reshape(1, h, w, c1).transpose(0, 3, 1, 2), requires_grad=True)
    t2 = torch.tensor((s2 * (x2 - z2)).reshape(1, h, w, c2).transpose(0, 3, 1, 2), requires_grad=True)
    y_t = torch.cat([t1, t2], 1)
    y_t.backward(torch.tensor((0.01 * e).reshape(1, h, w, c1 + c2).transpose(0, 3, 1, 2)))
    desc = oracle.concat_params(s1, z1, s2, z2, so, zo, h * w, c1, c2)
    cases = [Case("concat_s8_forward", [i32(desc), s8(x1), s8(x2), out("Y", h * w * (c1 + c2))]),
             Case("concat_s8_grad_input", [i32(desc), s8(e), 0, out("Y", h * w * c1)]),
             Case("concat_s8_grad_input", [i32(desc), s8(e), 1, out("Y", h * w * c2)])]

    def nhwc(t: torch.Tensor) -> Arr:
        return t.detach().numpy().transpose(0, 2, 3, 1).reshape(-1)

    def check(res: list[Result]) -> None:
        _ok(res)
        y = so * (res[0].out_array(0).astype(np.float64) - zo)
        assert np.max(np.abs(y - nhwc(y_t))) <= so / 2 + 1e-12  # rounded once to the output grid
        assert t1.grad is not None and t2.grad is not None
        _close("dx1", res[1].out_array(0).astype(np.float64) * 0.01, nhwc(t1.grad))
        _close("dx2", res[2].out_array(0).astype(np.float64) * 0.01, nhwc(t2.grad))

    return Problem("concat", cases, check)


def upsample_problem(seed: int, mode: int) -> Problem:
    """F.interpolate(nearest) (mode 0) and the zero insertion of conv_transpose2d (mode 1), backward."""
    rng = np.random.default_rng(seed)
    h, w, c, f, s_e = 4, 5, 3, 2, 0.01
    e = rng.integers(-128, 128, h * f * w * f * c)
    x_t = torch.tensor(rng.normal(0, 1, (1, c, h, w)), requires_grad=True)
    e_t = torch.tensor((s_e * e).reshape(1, h * f, w * f, c).transpose(0, 3, 1, 2))
    if mode == 0:
        y_t = F.interpolate(x_t, scale_factor=f, mode="nearest")
    else:  # a 1x1 identity transposed conv with stride f: values at multiples of f, zeros between
        y_t = F.conv_transpose2d(x_t, torch.eye(c, dtype=torch.float64)[:, :, None, None], stride=f,
                                 output_padding=f - 1)
    y_t.backward(e_t)
    desc = [h, w, c, h * f, w * f, f, f, mode, 0]
    case = Case("upsample_s8_grad_input", [i32(desc), s8(e), out("Y", h * w * c)])

    def check(res: list[Result]) -> None:
        _ok(res)
        shift = res[0].ret
        assert isinstance(shift, int) and x_t.grad is not None
        got = res[0].out_array(0).astype(np.float64) * s_e * 2.0**shift
        _close("dx", got, x_t.grad.numpy().transpose(0, 2, 3, 1).reshape(-1))

    return Problem(f"upsample-mode{mode}", [case], check)


def relu_problem(six: bool, seed: int) -> Problem:
    rng = np.random.default_rng(seed)
    n, zp, s = 500, -20, 0.05
    q6 = oracle.relu6_q6(s, zp) if six else 127
    y = rng.integers(-128, 128, n)
    y[:40] = zp  # the kinks themselves
    y[40:80] = q6
    e = rng.integers(-128, 128, n)
    yt = torch.tensor(s * (y - zp), dtype=torch.float64, requires_grad=True)
    out_t = F.hardtanh(yt, 0.0, s * (q6 - zp)) if six else F.relu(yt)
    out_t.backward(torch.tensor(e, dtype=torch.float64))
    assert yt.grad is not None
    dx_t = yt.grad.numpy()
    op = "relu6_s8_backward" if six else "relu_s8_backward"
    args: list[Arg] = [s8(y), zp, q6, inout(s8(e, "Y"))] if six else [s8(y), zp, inout(s8(e, "Y"))]

    def check(res: list[Result]) -> None:
        _ok(res)
        got = res[0].out_array(0).astype(np.float64)
        assert np.array_equal(got, dx_t), "relu gradient mask differs from autograd"

    return Problem(op, [Case(op, args)], check)


def merge_problem(seed: int) -> Problem:
    """add_s8_grad_merge is the adjoint of a fan-out: x feeds two consumers."""
    rng = np.random.default_rng(seed)
    n, s_a, s_b = 300, 0.004, 0.0013
    ea, eb = rng.integers(-128, 128, n), rng.integers(-128, 128, n)
    ra, rb = oracle.merge_ratios(s_a, s_b)
    xt = torch.zeros(n, dtype=torch.float64, requires_grad=True)
    ((xt * 1.0) @ torch.tensor(s_a * ea, dtype=torch.float64)
     + (xt * 1.0) @ torch.tensor(s_b * eb, dtype=torch.float64)).backward()
    assert xt.grad is not None
    dx_t = xt.grad.numpy()

    def check(res: list[Result]) -> None:
        _ok(res)
        shift = res[0].ret
        assert isinstance(shift, int)
        _close("dx", res[0].out_array(0).astype(np.float64) * max(s_a, s_b) * 2.0 ** (shift - 15), dx_t)

    case = Case("add_s8_grad_merge", [s8(ea), ra, s8(eb), rb, out("Y", n)])
    return Problem("add_grad_merge", [case], check)


def softmax_problem(c: int, scale: float, seed: int) -> Problem:
    rng = np.random.default_rng(seed)
    q = np.clip(np.round(rng.normal(0, 1.5 / scale, c)), -128, 127).astype(np.int64)
    label = int(rng.integers(0, c))
    loss_t, g_t = torch_ref.softmax_xent(scale * q, label)
    lut = oracle.make_softmax_lut(scale)
    case = Case("softmax_xent_s8", [s8(q), label, u32(lut), out("Y", c), out("i", 3)])

    def check(res: list[Result]) -> None:
        _ok(res)
        shift = res[0].ret
        assert isinstance(shift, int)
        _close("dlogits", res[0].out_array(0).astype(np.float64) * 2.0 ** (shift - 15), g_t)
        stats = res[0].out_array(1)
        assert int(stats[0]) == shift
        loss = oracle.xent_loss(q, label, scale, stats)
        assert abs(loss - loss_t) <= 1e-3 + 1e-3 * abs(loss_t), (loss, loss_t)

    return Problem(f"softmax_xent-C{c}", [case], check)


_TORCH_ACTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid,
    "leaky_relu": lambda t: F.leaky_relu(t, 0.1), "silu": F.silu, "gelu": F.gelu}


def lut_problem(fn: str, seed: int) -> Problem:
    """lut forward within one output step of PyTorch's function, lut grad input vs its autograd,
    both on the dequantised input (the tables come from the oracle, the reference from torch)."""
    rng = np.random.default_rng(seed)
    n, s_in, z_in, s_e = 600, 7.0 / 255, -5, 0.003
    f = _TORCH_ACTS[fn]
    grid = torch.tensor(s_in * (np.arange(-128, 128) - z_in), dtype=torch.float64)
    lo, hi = min(float(f(grid).min()), 0.0), max(float(f(grid).max()), 0.0)
    s_out = float(np.float32((hi - lo) / 255))
    z_out = int(np.clip(round(-128 - lo / s_out), -128, 127))
    table, dtable, d_shift = oracle.lut_tables(fn, s_in, z_in, s_out, z_out, 0.1)
    x = rng.integers(-128, 128, n)
    e = rng.integers(-128, 128, n)
    xt = torch.tensor(s_in * (x - z_in), dtype=torch.float64, requires_grad=True)
    yt = f(xt)
    yt.backward(torch.tensor(s_e * e, dtype=torch.float64))
    assert xt.grad is not None
    dx_t, y_t = xt.grad.numpy(), yt.detach().numpy()
    cases = [Case("lut_s8_forward", [s8(x), s8(table), out("Y", n)]),
             Case("lut_s8_grad_input", [s8(x), s8(e), i32(dtable), out("Y", n)])]

    def check(res: list[Result]) -> None:
        _ok(res)
        y = s_out * (res[0].out_array(0).astype(np.float64) - z_out)
        assert np.max(np.abs(y - y_t)) <= 0.5 * s_out * (1 + 1e-9), f"{fn}: forward off by more than 1/2 step"
        shift = res[1].ret
        assert isinstance(shift, int)
        _close(f"{fn} dx", res[1].out_array(0).astype(np.float64) * s_e * 2.0 ** (shift - d_shift), dx_t)

    return Problem(f"lut-{fn}", cases, check)


def _problems() -> list[Problem]:
    probs = [conv_problem(n, g, 100 + i) for i, (n, g) in enumerate(CONV_SHAPES.items())]
    probs += [linear_problem(64, 10, 1), linear_problem(300, 32, 2), linear_problem(7, 3, 3)]
    probs += [pool_problem(k, n, g, 200 + i) for i, (n, g) in enumerate(POOL_SHAPES.items())
              for k in ("max", "avg")]
    probs += [global_avgpool_problem(5), relu_problem(False, 6), relu_problem(True, 7), merge_problem(8)]
    probs += [concat_problem(21), upsample_problem(22, 0), upsample_problem(23, 1)]
    probs += [softmax_problem(10, 0.1, 9), softmax_problem(100, 0.05, 10), softmax_problem(3, 0.5, 11)]
    probs += [lut_problem(fn, 300 + i) for i, fn in enumerate(_TORCH_ACTS)]
    return probs


PROBLEMS = _problems()


@pytest.fixture(scope="module")
def results() -> dict[str, list[Result]]:
    ensure_natmod()
    flat = [c for p in PROBLEMS for c in p.cases]
    outcome = run_cases_micropython(flat, name="vs-torch")
    assert_complete(outcome, flat, "micropython")
    got, k = {}, 0
    for p in PROBLEMS:
        got[p.name] = outcome.results[k:k + len(p.cases)]
        k += len(p.cases)
    return got


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.name for p in PROBLEMS])
def test_backward_matches_autograd(problem: Problem, results: dict[str, list[Result]]) -> None:
    problem.check(results[problem.name])
