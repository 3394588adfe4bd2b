"""Seeded random kernel cases for every ``_microtrain`` binding function.

Each generator ``gen(rng, i)`` builds one call (``Case``: op, binding arguments
with output placeholders) for variant ``i`` (variants cycle through the edge
cases: 1x1 kernels, stride 2, padding, depthwise with channel multiplier,
grouped, odd sizes, H = 1 (conv1d), zero points -128/127, saturation, every
mask kind, relu6, overlapping pools, ties, in-place calls, empty tensors, ...)
and ``make_case`` attaches what the numpy oracle says the call must return.

    cases = generate_all(seed=1, per_op=100)   # {op: [Case, ...]}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from microtrain_tools.reference import oracle
from support import kernel_cases_seq
from support.kernel_harness import (
    Alias,
    Arg,
    Buf,
    Case,
    Expected,
    f32,
    i32,
    inout,
    out,
    s8,
    u8,
    u32,
)

Rng = np.random.Generator
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


# --------------------------------------------------------------------------
# op table: which arguments are outputs, and how the oracle's answer maps to them


@dataclass(frozen=True)
class OpSpec:
    nargs: int
    outs: tuple[int, ...]  # pure outputs (placeholders): not passed to the oracle
    adapt: Callable[[object], tuple[int | None, list[NDArray[np.generic]]]]
    inouts: tuple[int, ...] = ()  # read and written: passed to the oracle with their contents
    needs_float: bool = False
    optional: int = 0  # trailing optional arguments (nargs .. nargs + optional)
    # an output the optional arguments make an input too (the grad input's ein holding
    # the activation with lo, hi): passed to the oracle with its contents then
    act_in: int | None = None


def _one(r: object) -> tuple[int | None, list[NDArray[np.generic]]]:
    return None, [np.asarray(r)]


def _two(r: object) -> tuple[int | None, list[NDArray[np.generic]]]:
    a, b = r  # type: ignore[misc]
    return None, [np.asarray(a), np.asarray(b)]


def _grad_in(r: object) -> tuple[int | None, list[NDArray[np.generic]]]:
    ein, sh, acc = r  # type: ignore[misc]
    return int(sh), [np.asarray(acc), np.asarray(ein)]


def _three(r: object) -> tuple[int | None, list[NDArray[np.generic]]]:
    a, b, c = r  # type: ignore[misc]
    return None, [np.asarray(a), np.asarray(b), np.asarray(c)]


def _ret(r: object) -> tuple[int | None, list[NDArray[np.generic]]]:
    return int(r), []  # type: ignore[call-overload]


def _ret_list(r: object) -> tuple[int | None, list[NDArray[np.generic]]]:
    ret, outs = r  # type: ignore[misc]
    return int(ret), [np.asarray(o) for o in outs]


def _ret_rest(r: object) -> tuple[int | None, list[NDArray[np.generic]]]:
    ret, *outs = r  # type: ignore[misc]
    return int(ret), [np.asarray(o) for o in outs]


def _ret_one(r: object) -> tuple[int | None, list[NDArray[np.generic]]]:
    ret, o = r  # type: ignore[misc]
    return int(ret), [np.asarray(o)]


def _shifted(r: object) -> tuple[int | None, list[NDArray[np.generic]]]:
    o, sh = r  # type: ignore[misc]
    return int(sh), [np.asarray(o)]


def _shifted_l1(r: object) -> tuple[int | None, list[NDArray[np.generic]]]:
    o, sh, norms = r  # type: ignore[misc]
    return int(sh), [np.asarray(o), np.asarray(norms)]


def _softmax(r: object) -> tuple[int | None, list[NDArray[np.generic]]]:
    err, sh, stats = r  # type: ignore[misc]
    return int(sh), [np.asarray(err), np.asarray(stats)]


def _zo(r: object) -> tuple[int | None, list[NDArray[np.generic]]]:
    w, state = r  # type: ignore[misc]
    return None, [np.asarray(state), np.asarray(w)]  # argument order: rng, then w


OPS: dict[str, OpSpec] = {
    "conv2d_s8_forward": OpSpec(7, (6,), _one),
    "conv2d_s8_grad_input": OpSpec(7, (5, 6), _grad_in, optional=2, act_in=6),
    "conv2d_s8_grad_weight": OpSpec(6, (4, 5), _two),
    "conv2d_s8_grad_weight_f32": OpSpec(8, (), _two, (6, 7), True, 1),
    "linear_s8_forward": OpSpec(7, (6,), _one),
    "linear_s8_grad_input": OpSpec(7, (5, 6), _grad_in, optional=2, act_in=6),
    "linear_s8_grad_weight": OpSpec(6, (4, 5), _two),
    "linear_s8_grad_weight_f32": OpSpec(8, (), _two, (6, 7), True, 1),
    "relu_s8_forward": OpSpec(3, (2,), _one),
    "relu6_s8_forward": OpSpec(4, (3,), _one),
    "relu_s8_backward": OpSpec(3, (), _one, (2,)),
    "relu6_s8_backward": OpSpec(4, (), _one, (3,)),
    "maxpool_s8_forward": OpSpec(3, (2,), _one),
    "maxpool_s8_grad_input": OpSpec(5, (3, 4), _grad_in),
    "avgpool_s8_forward": OpSpec(3, (2,), _one),
    "avgpool_s8_grad_input": OpSpec(4, (2, 3), _grad_in),
    "maxpool_s8_grad_input_act": OpSpec(6, (5,), _shifted),
    "maxpool_s8_grad_input_act_l1": OpSpec(7, (5, 6), _shifted_l1),
    "avgpool_s8_grad_input_act": OpSpec(6, (5,), _shifted),
    "global_avgpool_s8_forward": OpSpec(4, (3,), _one),
    "global_avgpool_s8_grad_input": OpSpec(3, (2,), _one),
    "add_s8_forward": OpSpec(4, (3,), _one),
    "add_s8_grad_merge": OpSpec(5, (4,), _shifted),
    "conv2d_add_s8_forward": OpSpec(10, (), _one, (8,)),
    "softmax_xent_s8": OpSpec(5, (3, 4), _softmax),
    "l1_norm_s8": OpSpec(3, (2,), _one),
    "topk_mask": OpSpec(3, (2,), _one),
    "zo_perturb_s8": OpSpec(4, (3,), _zo, (2,)),
    "zo_perturb_h_s8": OpSpec(6, (5,), _zo, (2,)),
    "zo_update_s8": OpSpec(4, (3,), _zo, (2,)),
    "dyn_requant_s8": OpSpec(2, (1,), _shifted),
    "f32_axpy_i32": OpSpec(3, (), _one, (2,), True),
    "update_u8_touch": OpSpec(2, (), _one, (0,)),
    "update_f32_check": OpSpec(1, (), _ret, (), True),
    "update_f32_decay": OpSpec(9, (), _one, (0,), True),
    "update_f32_standardize": OpSpec(4, (), _one, (0,), True),
    "update_f32_axpby": OpSpec(6, (), _one, (0,), True),
    "update_f32_momentum": OpSpec(5, (), _two, (0, 1), True),
    "update_f32_scale": OpSpec(4, (), _one, (0,), True),
    "update_f32_adam": OpSpec(10, (), _three, (0, 1, 2), True),
    "update_bf16_momentum": OpSpec(5, (), _two, (0, 1), True),
    "update_bf16_adam": OpSpec(10, (), _three, (0, 1, 2), True),
    "update_s8_apply": OpSpec(15, (), _ret_list, (0, 1, 2, 3, 4, 5, 6, 7, 8, 14), True),
    # gw and gb compared too: they must come back unchanged
    "update_s8_apply_keep": OpSpec(15, (), _ret_list, (0, 1, 2, 3, 4, 5, 6, 7, 8, 14), True),
    "update_f32_ratios": OpSpec(3, (2,), _ret_one, (), True),
    "lut_s8_forward": OpSpec(3, (2,), _one),
    "lut_s8_grad_input": OpSpec(4, (3,), _shifted),
    "concat_s8_forward": OpSpec(4, (3,), _one),
    "concat_s8_grad_input": OpSpec(4, (3,), _one),
    "upsample_s8_forward": OpSpec(3, (2,), _one),
    "upsample_s8_grad_input": OpSpec(3, (2,), _shifted),
    # sequence / attention kernels (their generators: kernel_cases_seq.py)
    "mul_s8_forward": OpSpec(4, (3,), _one),
    "mul_s8_grad_x1": OpSpec(4, (3,), _shifted),
    "mul_s8_grad_x2": OpSpec(5, (3, 4), _grad_in),
    "matmul_s8_forward": OpSpec(4, (3,), _one),
    "matmul_s8_grad_a": OpSpec(5, (3, 4), _grad_in),
    "matmul_s8_grad_b": OpSpec(5, (3, 4), _grad_in),
    "softmax_s8_forward": OpSpec(4, (3,), _one),
    "softmax_s8_grad_input": OpSpec(4, (3,), _shifted),
    "layernorm_s8_forward": OpSpec(3, (2,), _one),
    "layernorm_s8_grad_input": OpSpec(4, (3,), _shifted),
    "gru_s8_forward": OpSpec(9, (7, 8), _two),
    "gru_s8_backward": OpSpec(13, (8, 9, 10, 11, 12), _ret_rest, (6,)),
    "lstm_s8_forward": OpSpec(9, (7, 8), _two),
    "lstm_s8_backward": OpSpec(13, (8, 9, 10, 11, 12), _ret_rest, (6,)),
}
ALL_OPS: tuple[str, ...] = tuple(OPS)


def _resolve(args: Sequence[Arg], a: Arg) -> object:
    while isinstance(a, Alias):
        a = args[a.index]
    if isinstance(a, Buf):
        if a.data is None:
            raise ValueError("an oracle input has no data")
        return a.data
    return a


def oracle_call(op: str, args: Sequence[Arg]) -> Expected:
    """Run the oracle on a call's inputs; outputs in argument order."""
    spec = OPS[op]
    if not spec.nargs <= len(args) <= spec.nargs + spec.optional:
        raise ValueError(f"{op}: {len(args)} args, expected {spec.nargs}")
    outs = spec.outs
    if spec.act_in is not None and len(args) > spec.nargs:
        outs = tuple(i for i in outs if i != spec.act_in)
    oargs = [_resolve(args, a) for i, a in enumerate(args) if i not in outs]
    ret, outs = spec.adapt(getattr(oracle, op)(*oargs))
    if spec.outs and len(outs) == len(spec.outs) and not spec.inouts:
        # an optional output passed as None (a pool's grad-input scratch) is not compared
        outs = [o for i, o in zip(spec.outs, outs, strict=True) if args[i] is not None]
    return Expected(ret, outs)


def make_case(op: str, args: list[Arg], label: str = "") -> Case:
    """A valid call with its oracle expectation; marks output arguments."""
    spec = OPS[op]
    fixed: list[Arg] = []
    for i, a in enumerate(args):
        if i in spec.outs or i in spec.inouts:
            if isinstance(a, Buf) and not a.out:
                a = inout(a)
            elif isinstance(a, Alias) and not a.out:
                a = Alias(a.index, out=True)
        fixed.append(a)
    return Case(op, fixed, label, expected=oracle_call(op, fixed))


# --------------------------------------------------------------------------
# random pieces


def _kind_in(rng: Rng) -> str:
    """Any accepted read-only int8 buffer kind."""
    return str(rng.choice(["y", "y", "Y", "b", "B"]))


def _kind_out(rng: Rng) -> str:
    """Any accepted writable int8 buffer kind."""
    return str(rng.choice(["Y", "Y", "b", "B"]))


def _int8(rng: Rng, n: int, style: str = "uniform") -> NDArray[np.int8]:
    if style == "small":
        v = np.clip(np.round(rng.normal(0, 20, n)), -128, 127)
    elif style == "sparse":
        v = rng.integers(-128, 128, n) * (rng.random(n) < 0.3)
    elif style == "ties":
        v = rng.choice(np.array([-128, -1, 0, 7, 127]), n)
    elif style == "const":
        v = np.full(n, int(rng.integers(-128, 128)))
    else:
        v = rng.integers(-128, 128, n)
    return np.asarray(v).astype(np.int8)


def _zp(rng: Rng, i: int) -> int:
    return [-128, 127, 0, int(rng.integers(-128, 128)), int(rng.integers(-20, 21))][i % 5]


def _scales(rng: Rng, n: int, per_channel: bool, lo: float = -3.0, hi: float = -1.0) -> NDArray[np.float64]:
    if per_channel:
        return np.asarray(10.0 ** rng.uniform(lo, hi, n))
    return np.full(n, 10.0 ** rng.uniform(lo, hi))


def _mask(rng: Rng, n: int, i: int) -> Buf | None:
    """None, all-zero, random (0 or any non-zero byte), all-one (1 or 255)."""
    kind = ["none", "random", "zero", "random", "one", "none"][i % 6]
    bk = str(rng.choice(["y", "Y", "b", "B"]))
    if kind == "none":
        return None
    if kind == "zero":
        return u8(np.zeros(n), bk)
    if kind == "one":
        return u8(np.full(n, 1 if rng.random() < 0.5 else 255), bk)
    keep = rng.random(n) < rng.uniform(0.25, 0.75)
    if n >= 2:  # at least one channel kept and one dropped
        idx = rng.permutation(n)[:2]
        keep[idx[0]], keep[idx[1]] = True, False
    vals = rng.choice(np.array([1, 1, 1, 2, 128, 255]), n)
    return u8(np.where(keep, vals, 0), bk)


def _multipliers(rng: Rng, n: int, real: NDArray[np.float64], mode: str) -> tuple[Buf, Buf]:
    """Per-channel (mult, shift): from quantize_multiplier, or extreme values."""
    m = np.zeros(n, dtype=np.int64)
    s = np.zeros(n, dtype=np.int64)
    for c in range(n):
        if mode == "extreme":
            choice = int(rng.integers(0, 6))
            if choice == 0:
                m[c], s[c] = INT32_MAX, int(rng.integers(20, 32))
            elif choice == 1:
                m[c], s[c] = int(rng.integers(0, 2**31)), -31
            elif choice == 2:
                m[c], s[c] = 0, int(rng.integers(-31, 32))
            elif choice == 3:
                m[c], s[c] = int(rng.integers(2**30, 2**31)), 31
            else:
                m[c], s[c] = int(rng.integers(0, 2**31)), int(rng.integers(-31, 32))
        else:
            m[c], s[c] = oracle.quantize_multiplier(float(real[c]))
    return i32(m), i32(s)


def _act(rng: Rng, out_zp: int, i: int) -> tuple[int, int]:
    kind = i % 7  # 0, 4, 5, 6: the full int8 range
    if kind == 1:  # fused relu
        return out_zp, 127
    if kind == 2:  # fused relu6
        return out_zp, min(127, out_zp + int(rng.integers(0, 120)))
    if kind == 3:  # arbitrary narrow window (possibly a single value)
        lo = int(rng.integers(-128, 128))
        return lo, int(rng.integers(lo, min(127, lo + 10) + 1))
    return -128, 127


# --------------------------------------------------------------------------
# geometry


class ConvGeom(oracle._Geom):
    """The oracle's conv / pool geometry, with the kernels' descriptors and the harness's names."""

    @property
    def n_in(self) -> int:
        return self.in_size

    @property
    def n_out(self) -> int:
        return self.out_size

    @property
    def n_w(self) -> int:
        return self.w_size

    def desc(self, in_zp: int, out_zp: int, act_min: int, act_max: int) -> list[int]:
        return [self.in_h, self.in_w, self.in_c, self.out_h, self.out_w, self.out_c, self.k_h, self.k_w,
                self.stride_h, self.stride_w, self.pad_top, self.pad_left, self.groups,
                in_zp, out_zp, act_min, act_max] + ([self.dil_h, self.dil_w] if self.dilated else [])

    @property
    def dilated(self) -> bool:
        return self.dil_h != 1 or self.dil_w != 1

    def pool_desc(self) -> list[int]:
        return [self.in_h, self.in_w, self.in_c, self.out_h, self.out_w, self.k_h, self.k_w,
                self.stride_h, self.stride_w, self.pad_top, self.pad_left]


def _axis(rng: Rng, k: int, stride: int, max_in: int, pad: bool) -> tuple[int, int, int]:
    """(in, out, pad_before) of one valid axis; bottom/right padding implied."""
    p0 = int(rng.integers(0, k)) if pad else 0
    p1 = int(rng.integers(0, k)) if pad else 0
    n_in = int(rng.integers(1, max_in + 1))
    if n_in + p0 + p1 < k:
        n_in = k - p0 - p1
    out_max = (n_in + p0 + p1 - k) // stride + 1
    n_out = out_max if rng.random() < 0.8 else int(rng.integers(1, out_max + 1))
    return n_in, n_out, p0


CONV_VARIANTS = ("generic", "pointwise", "stride2", "padded", "depthwise", "depthwise_mult",
                 "grouped", "conv1d", "odd", "large", "generic", "big", "dilated")


def conv_geom(rng: Rng, variant: str) -> ConvGeom:
    k_h, k_w = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    s_h, s_w = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    pad = rng.random() < 0.5
    max_in = 7
    groups, in_c, out_c = 1, int(rng.integers(1, 6)), int(rng.integers(1, 6))
    if variant == "pointwise":
        k_h = k_w = 1
    elif variant == "stride2":
        s_h = s_w = 2
        k_h = k_w = 3
    elif variant == "padded":
        pad = True
        k_h, k_w = int(rng.integers(2, 6)), int(rng.integers(2, 6))
    elif variant in ("depthwise", "depthwise_mult"):
        in_c = int(rng.integers(1, 9))
        if variant == "depthwise" and in_c % 2 == 0:  # 8..32 channels: eight a vector on x64 (no extra draw)
            in_c *= 4
        groups = in_c
        out_c = in_c * (1 if variant == "depthwise" else int(rng.integers(2, 4)))
        k_h = k_w = 3
    elif variant == "grouped":
        groups = int(rng.integers(2, 4))
        in_c = groups * int(rng.integers(1, 4))
        out_c = groups * int(rng.integers(1, 4))
    elif variant == "odd":
        k_h, k_w = int(rng.choice([1, 3, 5])), int(rng.choice([2, 4]))
        s_h, s_w = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        in_c, out_c = int(rng.choice([3, 5, 7])), int(rng.choice([1, 3, 7]))
        max_in = 11
    elif variant == "large":
        in_c, out_c = int(rng.integers(8, 17)), int(rng.integers(8, 17))
        max_in = 12
    elif variant == "big":  # a realistic small-CNN layer (in_c 1: a first layer on a one-channel image)
        in_c, out_c = int(rng.choice([1, 8, 16])), int(rng.choice([8, 16, 24]))
        k_h = k_w = 3
        pad = True
        max_in = 24
    if variant == "dilated":  # dilation 1..4 per axis (19-int descriptor; 1, 1 as well), padded or not
        d_h, d_w = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        if d_h == d_w == 1:
            d_w = 2
        k_h, k_w = int(rng.integers(1, 4)), int(rng.integers(2, 4))
        groups = int(rng.choice([1, in_c]))
        out_c = groups * int(rng.integers(1, 3))
        in_h, out_h, p_t = _axis(rng, (k_h - 1) * d_h + 1, s_h, 12, pad)
        in_w, out_w, p_l = _axis(rng, (k_w - 1) * d_w + 1, s_w, 12, pad)
        return ConvGeom(in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, p_t, p_l, groups, d_h, d_w)
    if variant == "conv1d":
        in_h, out_h, p_t, k_h, s_h = 1, 1, 0, 1, 1
        k_w = int(rng.integers(1, 6))
        in_w, out_w, p_l = _axis(rng, k_w, s_w, 24, pad)
    else:
        in_h, out_h, p_t = _axis(rng, k_h, s_h, max_in, pad)
        in_w, out_w, p_l = _axis(rng, k_w, s_w, max_in, pad)
    return ConvGeom(in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, p_t, p_l, groups)


POOL_VARIANTS = ("generic", "overlap", "padded", "global_like", "ties", "stride2", "odd")
# the grad-input kernels with the activation mask take windows that do not overlap only
POOL_DISJOINT_VARIANTS = tuple(v for v in POOL_VARIANTS if v != "overlap")


def pool_geom(rng: Rng, variant: str, disjoint: bool = False) -> ConvGeom:
    """A pool geometry of the variant; disjoint: stride >= k on both axes (any gaps
    between the windows included), drawn after the variant's own draws."""
    c = int(rng.integers(1, 7))
    k_h, k_w = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    s_h, s_w = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    pad = rng.random() < 0.4
    max_in = 9
    if variant == "overlap":
        k_h = k_w = 3
        s_h = s_w = int(rng.integers(1, 3))
    elif variant == "padded":
        pad = True
        k_h, k_w = int(rng.integers(2, 5)), int(rng.integers(2, 5))
    elif variant == "stride2":
        k_h = k_w = s_h = s_w = 2
        c = 5 * c + 1  # 6..31 channels: 16 a vector on x64, then a tail (no extra draw)
    elif variant == "odd":
        k_h, k_w = int(rng.choice([1, 3, 5])), int(rng.choice([2, 7]))
        max_in = 13
    if disjoint and variant != "global_like":
        gap = rng.random() < 0.3  # stride > k: inputs between the windows that no window covers
        s_h = max(s_h, k_h + (int(rng.integers(1, 3)) if gap else 0))
        s_w = max(s_w, k_w + (int(rng.integers(0, 3)) if gap else 0))
    in_h, out_h, p_t = _axis(rng, k_h, s_h, max_in, pad)
    in_w, out_w, p_l = _axis(rng, k_w, s_w, max_in, pad)
    if variant == "global_like":
        in_h, in_w = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        k_h, k_w, s_h, s_w, p_t, p_l, out_h, out_w = in_h, in_w, 1, 1, 0, 0, 1, 1
        if k_h * k_w > 255:
            k_h = in_h = 15
            k_w = in_w = 15
        if disjoint:  # one window: any stride >= k
            s_h, s_w = k_h, k_w
    return ConvGeom(in_h, in_w, c, out_h, out_w, c, k_h, k_w, s_h, s_w, p_t, p_l, c)


# --------------------------------------------------------------------------
# conv2d / linear


def _fwd_qparams(rng: Rng, g: ConvGeom, i: int, s_w: NDArray[np.float64], x: NDArray[np.int8],
                 in_zp: int, w: NDArray[np.int8]) -> tuple[Buf, Buf, Buf, str]:
    """Bias and per-channel requant multipliers: realistic (outputs spread over
    about +-40 around out_zp), saturating, or extreme."""
    terms = g.k_h * g.k_w * g.cpg
    mode = ["real", "real", "saturate", "real", "extreme", "real"][i % 6]
    rms_x = max(1.0, float(np.sqrt(np.mean((x.astype(np.float64) - in_zp) ** 2))))
    rms_w = max(1.0, float(np.sqrt(np.mean(w.astype(np.float64) ** 2))))
    acc_std = math.sqrt(terms) * rms_x * rms_w
    real = (40.0 / acc_std) * (s_w / s_w.mean())
    if mode == "saturate":
        real = real * 10.0 ** rng.uniform(1.5, 3.0)
    mult, shift = _multipliers(rng, g.out_c, real, "extreme" if mode == "extreme" else "real")
    if mode == "extreme" or i % 7 == 3:
        bias = rng.integers(-(2**30), 2**30 + 1, g.out_c)
        bias[rng.random(g.out_c) < 0.3] = 2**30
        bias[rng.random(g.out_c) < 0.3] = -(2**30)
    else:
        bias = np.round(rng.normal(0, acc_std * 0.3, g.out_c))
    return i32(bias), mult, shift, mode


def _activations(rng: Rng, n: int, zp: int, i: int) -> NDArray[np.int8]:
    """Input activations: around their zero point (realistic) or uniform."""
    if i % 3 == 2:
        return _int8(rng, n)
    noise = rng.normal(0, rng.uniform(10, 60), n)
    if zp <= -100:  # typical after a relu: non-negative real values
        noise = np.abs(noise)
    return np.clip(np.round(zp + noise), -128, 127).astype(np.int8)


def _weights(rng: Rng, n: int, i: int) -> NDArray[np.int8]:
    w = rng.integers(-127, 128, n)
    if i % 4 == 2:
        w[rng.random(n) < 0.1] = -128
    return w.astype(np.int8)


def _wr(rng: Rng, n: int, terms: int, i: int) -> Buf:
    mode = i % 4
    if mode == 3:  # the largest ratios the overflow rule allows
        top = 131071 // terms
        wr = rng.integers(0, top + 1, n)
        wr[int(rng.integers(0, n))] = top
        return i32(wr)
    wr, _ = oracle.weight_ratios(_scales(rng, n, mode != 0), terms)
    return i32(wr)


@dataclass
class ConvLayer:
    """A conv forward case's layer: geometry, zero points, clamp, input, weights, qparams."""

    g: ConvGeom
    in_zp: int
    out_zp: int
    act_min: int
    act_max: int
    x: NDArray[np.generic]
    w: NDArray[np.generic]
    bias: Arg
    mult: Arg
    shift: Arg
    mode: str

    def head(self, rng: Rng) -> list[Arg]:
        """desc, x, w, bias, mult, shift (the kernels' first six arguments)."""
        return [i32(self.g.desc(self.in_zp, self.out_zp, self.act_min, self.act_max)),
                s8(self.x, _kind_in(rng)), s8(self.w, _kind_in(rng)), self.bias, self.mult, self.shift]


def conv_layer(rng: Rng, i: int, variant: str) -> ConvLayer:
    g = conv_geom(rng, variant)
    in_zp, out_zp = _zp(rng, i), _zp(rng, i // 5 + 1)
    act_min, act_max = _act(rng, out_zp, i // 3)
    s_w = _scales(rng, g.out_c, i % 2 == 0)
    x, w = _activations(rng, g.n_in, in_zp, i // 2), _weights(rng, g.n_w, i)
    bias, mult, shift, mode = _fwd_qparams(rng, g, i, s_w, x, in_zp, w)
    return ConvLayer(g, in_zp, out_zp, act_min, act_max, x, w, bias, mult, shift, mode)


def gen_conv2d_s8_forward(rng: Rng, i: int) -> Case:
    variant = CONV_VARIANTS[i % len(CONV_VARIANTS)]
    c = conv_layer(rng, i, variant)
    args: list[Arg] = [*c.head(rng), out(_kind_out(rng), c.g.n_out)]
    return make_case("conv2d_s8_forward", args, f"{variant}/{c.mode}")


def _grad_act(rng: Rng, args: list[Arg], n_in: int, i: int) -> str:
    """Every other case of the conv2d / linear grad input with the activation mask: ein
    holds the producer's activation (clustered on the bounds), then lo, hi of its relu
    (zp, 128), relu6 (zp, q6) or none (-129, 128). Returns the label's suffix."""
    if i % 2 == 0:
        return ""
    kind = (i // 2) % 3
    zp = _zp(rng, i // 6)
    lo, hi = [(-129, 128), (zp, 128), (zp, _q6(rng, zp, i // 6))][kind]
    args[6] = s8(_near(rng, n_in, [lo, hi, zp]), _kind_out(rng))
    args += [lo, hi]
    return "/act " + ["none", "relu", "relu6"][kind]


def gen_conv2d_s8_grad_input(rng: Rng, i: int) -> Case:
    variant = CONV_VARIANTS[i % len(CONV_VARIANTS)]
    g = conv_geom(rng, variant)
    desc = g.desc(_zp(rng, i), _zp(rng, i + 1), -128, 127)
    e = _int8(rng, g.n_out, ["uniform", "small", "sparse"][i % 3])
    args: list[Arg] = [i32(desc), s8(e, _kind_in(rng)), s8(_weights(rng, g.n_w, i), _kind_in(rng)),
                       _wr(rng, g.out_c, g.k_h * g.k_w * g.opg, i // 2), _mask(rng, g.out_c, i // 3),
                       out("i", g.n_in), out(_kind_out(rng), g.n_in)]
    act = _grad_act(rng, args, g.n_in, i)
    return make_case("conv2d_s8_grad_input", args, variant + act)


def gen_conv2d_s8_grad_weight(rng: Rng, i: int) -> Case:
    variant = CONV_VARIANTS[i % len(CONV_VARIANTS)]
    g = conv_geom(rng, variant)
    desc = g.desc(_zp(rng, i), _zp(rng, i + 2), -128, 127)
    args: list[Arg] = [i32(desc), s8(_int8(rng, g.n_in), _kind_in(rng)),
                       s8(_int8(rng, g.n_out, ["uniform", "sparse"][i % 2]), _kind_in(rng)),
                       _mask(rng, g.out_c, i // 2), out("i", g.n_w), out("i", g.out_c)]
    return make_case("conv2d_s8_grad_weight", args, variant)


def _f32_scales(rng: Rng, i: int) -> tuple[float, float]:
    if i % 7 == 6:
        return float(rng.choice([0.0, -0.0, 1.0, -3.5])), float(rng.choice([1e-30, 2.0**-20, 1e20]))
    return float(10.0 ** rng.uniform(-7, -1)), float(10.0 ** rng.uniform(-5, -1) * rng.choice([1, -1]))


def _f32_acc(rng: Rng, n: int, i: int) -> Buf:
    if i % 5 == 4:
        return f32(np.zeros(n))
    a = rng.normal(0, 10.0 ** rng.uniform(-4, 0), n)
    if i % 5 == 3:  # negative zeros: a zero term must add +0 (-0 + +0 = +0, -0 + -0 = -0)
        a[::3] = -0.0
    return f32(a)


def gen_conv2d_s8_grad_weight_f32(rng: Rng, i: int) -> Case:
    variant = CONV_VARIANTS[i % len(CONV_VARIANTS)]
    g = conv_geom(rng, variant)
    desc = g.desc(_zp(rng, i), _zp(rng, i + 3), -128, 127)
    ws, bs = _f32_scales(rng, i)
    args: list[Arg] = [i32(desc), s8(_int8(rng, g.n_in), _kind_in(rng)),
                       s8(_int8(rng, g.n_out), _kind_in(rng)), _mask(rng, g.out_c, i // 2), ws, bs,
                       _f32_acc(rng, g.n_w, i), _f32_acc(rng, g.out_c, i + 1)]
    return make_case("conv2d_s8_grad_weight_f32", args, variant)


def _linear_sizes(rng: Rng, i: int) -> tuple[int, int]:
    kind = i % 5
    if kind == 0:
        return 1, int(rng.integers(1, 5))
    if kind == 1:
        return int(rng.integers(1, 5)), 1
    if kind == 4:
        return int(rng.integers(200, 700)), int(rng.integers(10, 40))
    return int(rng.integers(1, 80)), int(rng.integers(1, 30))


def requant_probe(rng: Rng, out_n: int) -> Case:
    """linear_s8_forward as a probe of requant(acc, m, shift) itself: one input
    (x - zp = 1, w = 1) and per-channel (m, shift) over the whole legal range,
    with the bias picked so that most outputs land inside int8 (the rounding of
    every stage shows), including exact rounding ties (m = 2^30)."""
    special = rng.random(out_n)
    m = np.where(special < 0.85, rng.integers(2**30, 2**31, out_n), rng.integers(0, 2**31, out_n))
    sh = np.where(special < 0.85, rng.integers(-10, 9, out_n), rng.integers(-31, 32, out_n))
    m[special < 0.25] = 2**30  # real = 2^(shift-1): ties in both rounding steps
    m[(special >= 0.25) & (special < 0.35)] = INT32_MAX
    m[(special >= 0.35) & (special < 0.4)] = 2**30 + 1
    sh[special < 0.25] = rng.integers(-12, 2, int(np.sum(special < 0.25)))
    real = m / 2.0**31 * 2.0 ** sh.astype(np.float64)
    target = rng.uniform(-127, 127, out_n)
    with np.errstate(divide="ignore", invalid="ignore"):
        acc = np.where(real > 0, np.round(target / np.where(real > 0, real, 1.0)), 0)
    acc = np.clip(acc + rng.integers(-2, 3, out_n), -(2**30) + 1, 2**30 - 1)
    ties = special < 0.25
    acc[ties] = (acc[ties] // 2) * 2 + 1  # odd: exact halves at the doubling step
    bias = acc.astype(np.int64) - 1
    args: list[Arg] = [i32([1, out_n, 0, 0, -128, 127]), s8([1]), s8(np.ones(out_n)), i32(bias), i32(m),
                       i32(sh), out(_kind_out(rng), out_n)]
    return make_case("linear_s8_forward", args, "requant-probe")


def gen_linear_s8_forward(rng: Rng, i: int) -> Case:
    if i % 6 == 5:
        return requant_probe(rng, int(rng.integers(8, 65)))
    in_n, out_n = _linear_sizes(rng, i)
    g = ConvGeom(1, 1, in_n, 1, 1, out_n, 1, 1, 1, 1, 0, 0, 1)
    in_zp, out_zp = _zp(rng, i), _zp(rng, i // 5 + 2)
    act_min, act_max = _act(rng, out_zp, i // 3)
    x, w = _activations(rng, in_n, in_zp, i // 2), _weights(rng, in_n * out_n, i)
    bias, mult, shift, mode = _fwd_qparams(rng, g, i, _scales(rng, out_n, i % 2 == 0), x, in_zp, w)
    args: list[Arg] = [i32([in_n, out_n, in_zp, out_zp, act_min, act_max]), s8(x, _kind_in(rng)),
                       s8(w, _kind_in(rng)), bias, mult, shift, out(_kind_out(rng), out_n)]
    return make_case("linear_s8_forward", args, f"{in_n}x{out_n}/{mode}")


def gen_linear_s8_grad_input(rng: Rng, i: int) -> Case:
    in_n, out_n = _linear_sizes(rng, i)
    e = _int8(rng, out_n, ["uniform", "small", "sparse"][i % 3])
    args: list[Arg] = [i32([in_n, out_n, _zp(rng, i), _zp(rng, i + 1), -128, 127]), s8(e, _kind_in(rng)),
                       s8(_weights(rng, in_n * out_n, i), _kind_in(rng)), _wr(rng, out_n, out_n, i // 2),
                       _mask(rng, out_n, i // 3), out("i", in_n), out(_kind_out(rng), in_n)]
    act = _grad_act(rng, args, in_n, i)
    return make_case("linear_s8_grad_input", args, f"{in_n}x{out_n}" + act)


def gen_linear_s8_grad_weight(rng: Rng, i: int) -> Case:
    in_n, out_n = _linear_sizes(rng, i)
    args: list[Arg] = [i32([in_n, out_n, _zp(rng, i), _zp(rng, i + 1), -128, 127]),
                       s8(_int8(rng, in_n), _kind_in(rng)), s8(_int8(rng, out_n), _kind_in(rng)),
                       _mask(rng, out_n, i // 2), out("i", in_n * out_n), out("i", out_n)]
    return make_case("linear_s8_grad_weight", args, f"{in_n}x{out_n}")


def gen_linear_s8_grad_weight_f32(rng: Rng, i: int) -> Case:
    in_n, out_n = _linear_sizes(rng, i)
    ws, bs = _f32_scales(rng, i)
    if i % 5 == 3:  # past the kernels' column blocks
        in_n += 40
    zp = _zp(rng, i)
    x = _int8(rng, in_n)
    if i % 5 == 3:  # with _f32_acc's negative zeros: zero terms (x == zp) of negative errors
        x[::4] = zp
    args: list[Arg] = [i32([in_n, out_n, zp, _zp(rng, i + 1), -128, 127]),
                       s8(x, _kind_in(rng)), s8(_int8(rng, out_n), _kind_in(rng)),
                       _mask(rng, out_n, i // 2), ws, bs,
                       _f32_acc(rng, in_n * out_n, i), _f32_acc(rng, out_n, i + 2)]
    return make_case("linear_s8_grad_weight_f32", args, f"{in_n}x{out_n}")


# --------------------------------------------------------------------------
# relu / relu6


def _len(rng: Rng, i: int) -> int:
    return [0, 1, int(rng.integers(2, 64)), int(rng.integers(64, 600)), int(rng.integers(2, 20))][i % 5]


def _q6(rng: Rng, zp: int, i: int) -> int:
    kind = i % 4
    if kind == 0:
        return oracle.relu6_q6(float(10.0 ** rng.uniform(-2, -0.5)), zp)
    if kind == 1:
        return zp
    if kind == 2:
        return 127
    return int(rng.integers(zp, 128))


def _near(rng: Rng, n: int, points: Sequence[int]) -> NDArray[np.int8]:
    """int8 values clustered on and next to the given points (boundary tests)."""
    cand = np.clip(np.array([p + d for p in points for d in (-1, 0, 1)]), -128, 127)
    v = np.where(rng.random(n) < 0.6, rng.choice(cand, n), rng.integers(-128, 128, n))
    return v.astype(np.int8)


def gen_relu_s8_forward(rng: Rng, i: int) -> Case:
    n, zp = _len(rng, i), _zp(rng, i // 5)
    x = _near(rng, n, [zp])
    if i % 3 == 2:  # in place: y is x
        return make_case("relu_s8_forward", [s8(x, _kind_out(rng)), zp, Alias(0)], "in-place")
    return make_case("relu_s8_forward", [s8(x, _kind_in(rng)), zp, out(_kind_out(rng), n)])


def gen_relu6_s8_forward(rng: Rng, i: int) -> Case:
    n, zp = _len(rng, i), _zp(rng, i // 5)
    q6 = _q6(rng, zp, i // 2)
    x = _near(rng, n, [zp, q6])
    if i % 3 == 2:
        return make_case("relu6_s8_forward", [s8(x, _kind_out(rng)), zp, q6, Alias(0)], "in-place")
    return make_case("relu6_s8_forward", [s8(x, _kind_in(rng)), zp, q6, out(_kind_out(rng), n)])


def gen_relu_s8_backward(rng: Rng, i: int) -> Case:
    n, zp = _len(rng, i), _zp(rng, i // 5)
    y = _near(rng, n, [zp])
    e = _int8(rng, n)
    if i % 7 == 6:  # e is y (in place on the stored output itself)
        return make_case("relu_s8_backward", [s8(y, _kind_out(rng)), zp, Alias(0)], "e-is-y")
    return make_case("relu_s8_backward", [s8(y, _kind_in(rng)), zp, s8(e, _kind_out(rng))])


def gen_relu6_s8_backward(rng: Rng, i: int) -> Case:
    n, zp = _len(rng, i), _zp(rng, i // 5)
    q6 = _q6(rng, zp, i // 2)
    y = _near(rng, n, [zp, q6])
    e = _int8(rng, n)
    if i % 7 == 6:
        return make_case("relu6_s8_backward", [s8(y, _kind_out(rng)), zp, q6, Alias(0)], "e-is-y")
    return make_case("relu6_s8_backward", [s8(y, _kind_in(rng)), zp, q6, s8(e, _kind_out(rng))])


# --------------------------------------------------------------------------
# pools


def _pool_x(rng: Rng, n: int, variant: str, i: int) -> NDArray[np.int8]:
    if variant == "ties" or i % 4 == 3:
        return _int8(rng, n, "ties")
    if i % 9 == 5:
        return _int8(rng, n, "const")
    return _int8(rng, n)


def _pool_acc(rng: Rng, g: ConvGeom) -> Buf | None:
    """The grad-input scratch: None (no scratch) half the time where the windows do not overlap."""
    if g.stride_h >= g.k_h and g.stride_w >= g.k_w and rng.random() < 0.5:
        return None
    return out("i", g.n_in)


def gen_maxpool_s8_forward(rng: Rng, i: int) -> Case:
    variant = POOL_VARIANTS[i % len(POOL_VARIANTS)]
    g = pool_geom(rng, variant)
    args: list[Arg] = [i32(g.pool_desc()), s8(_pool_x(rng, g.n_in, variant, i), _kind_in(rng)),
                       out(_kind_out(rng), g.n_out)]
    return make_case("maxpool_s8_forward", args, variant)


def gen_maxpool_s8_grad_input(rng: Rng, i: int) -> Case:
    variant = POOL_VARIANTS[i % len(POOL_VARIANTS)]
    g = pool_geom(rng, variant)
    e = _int8(rng, g.n_out, ["uniform", "small", "const"][i % 3])
    args: list[Arg] = [i32(g.pool_desc()), s8(_pool_x(rng, g.n_in, variant, i), _kind_in(rng)),
                       s8(e, _kind_in(rng)), _pool_acc(rng, g), out(_kind_out(rng), g.n_in)]
    return make_case("maxpool_s8_grad_input", args, variant + ("/no acc" if args[3] is None else ""))


def gen_avgpool_s8_forward(rng: Rng, i: int) -> Case:
    variant = POOL_VARIANTS[i % len(POOL_VARIANTS)]
    g = pool_geom(rng, variant)
    x = _int8(rng, g.n_in, ["uniform", "const", "small"][i % 3])
    args: list[Arg] = [i32(g.pool_desc()), s8(x, _kind_in(rng)), out(_kind_out(rng), g.n_out)]
    return make_case("avgpool_s8_forward", args, variant)


def gen_avgpool_s8_grad_input(rng: Rng, i: int) -> Case:
    variant = POOL_VARIANTS[i % len(POOL_VARIANTS)]
    g = pool_geom(rng, variant)
    e = _int8(rng, g.n_out, ["uniform", "small", "const"][i % 3])
    args: list[Arg] = [i32(g.pool_desc()), s8(e, _kind_in(rng)), _pool_acc(rng, g),
                       out(_kind_out(rng), g.n_in)]
    return make_case("avgpool_s8_grad_input", args, variant + ("/no acc" if args[2] is None else ""))


def _pool_act(rng: Rng, i: int) -> tuple[int, int, str]:
    """(lo, hi) of the _act kernels' mask: none (-129, 128), the producer's fused relu
    (zp, 128) or relu6 (zp, q6), and the edges: an upper bound only, any range (hi = lo:
    nothing kept)."""
    kind = i % 5
    zp = _zp(rng, i // 5)
    if kind == 0:
        return -129, 128, "none"
    if kind == 1:
        return zp, 128, "relu"
    if kind == 2:
        return zp, _q6(rng, zp, i // 5), "relu6"
    if kind == 3:
        return -129, int(rng.integers(-128, 129)), "upper only"
    return (zp, zp, "empty") if i % 10 == 4 else (zp, int(rng.integers(zp, 129)), "range")


def _gen_pool_act(op: str, rng: Rng, i: int) -> Case:
    """Disjoint windows only (every pool variant but overlap); in place (ein is the
    activation) or not, for each variant; the activation clustered on the mask's
    bounds, or the pool cases' own values (ties)."""
    nv = len(POOL_DISJOINT_VARIANTS)
    variant = POOL_DISJOINT_VARIANTS[i % nv]
    g = pool_geom(rng, variant, disjoint=True)
    lo, hi, kind = _pool_act(rng, i)
    t = _near(rng, g.n_in, [lo, hi]) if i % 7 in (1, 4) else _pool_x(rng, g.n_in, variant, i)
    e = _int8(rng, g.n_out, ["uniform", "small", "const", "sparse"][i % 4])
    if i % 7 == 3 and g.n_out:
        e[int(rng.integers(0, g.n_out))] = -128  # maxpool: the requantisation pass
    inplace = (i // nv) % 2 == 1
    ts = s8(t, _kind_out(rng) if inplace else _kind_in(rng))
    ein: Arg = Alias(1) if inplace else out(_kind_out(rng), g.n_in)
    args: list[Arg] = [i32(g.pool_desc()), ts, s8(e, _kind_in(rng)), lo, hi, ein]
    return make_case(op, args, f"{variant}/{kind}/" + ("in-place" if inplace else "own ein"))


def gen_maxpool_s8_grad_input_act(rng: Rng, i: int) -> Case:
    return _gen_pool_act("maxpool_s8_grad_input_act", rng, i)


def gen_maxpool_s8_grad_input_act_l1(rng: Rng, i: int) -> Case:
    """The _act cases with the norms' buffer; every fourth a 2x2 pool of stride 2 over whole
    quads of channels (armv7e-m: a quad at a time through the windows)."""
    if i % 4 == 3:
        oh, ow = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        c = 4 * int(rng.integers(1, 9))
        g = ConvGeom(2 * oh + int(rng.integers(0, 2)), 2 * ow + int(rng.integers(0, 2)), c, oh, ow, c,
                     2, 2, 2, 2, 0, 0, c)
        lo, hi, kind = _pool_act(rng, i)
        t = _near(rng, g.n_in, [lo, hi]) if i % 7 in (1, 4) else _int8(rng, g.n_in, "ties")
        e = _int8(rng, g.n_out, ["uniform", "small", "const", "sparse"][i % 4])
        if i % 5 == 2 and g.n_out:
            e[int(rng.integers(0, g.n_out))] = -128
        inplace = i % 8 == 3
        args: list[Arg] = [i32(g.pool_desc()), s8(t, "Y" if inplace else _kind_in(rng)), s8(e, _kind_in(rng)),
                           lo, hi, Alias(1) if inplace else out(_kind_out(rng), g.n_in), out("i", c)]
        return make_case("maxpool_s8_grad_input_act_l1", args,
                         f"2x2 s2 {g.in_h}x{g.in_w}x{c}/{kind}" + (" in place" if inplace else ""))
    case = _gen_pool_act("maxpool_s8_grad_input_act", rng, i)
    desc = case.args[0]
    assert isinstance(desc, Buf) and desc.data is not None
    return make_case("maxpool_s8_grad_input_act_l1", [*case.args, out("i", int(desc.data[2]))], case.label)


def gen_avgpool_s8_grad_input_act(rng: Rng, i: int) -> Case:
    return _gen_pool_act("avgpool_s8_grad_input_act", rng, i)


def gen_global_avgpool_s8_forward(rng: Rng, i: int) -> Case:
    kind = i % 5
    hw = [1, int(rng.integers(2, 50)), int(rng.integers(50, 300)), 4096, int(rng.integers(2, 10))][kind]
    c = int(rng.integers(1, 17)) if kind != 3 else 3
    style = "const" if kind == 3 else ["uniform", "small"][i % 2]
    x = _int8(rng, hw * c, style)
    return make_case("global_avgpool_s8_forward", [s8(x, _kind_in(rng)), hw, c, out(_kind_out(rng), c)])


def gen_global_avgpool_s8_grad_input(rng: Rng, i: int) -> Case:
    hw = [1, int(rng.integers(2, 50)), int(rng.integers(50, 300))][i % 3]
    c = int(rng.integers(1, 17))
    return make_case("global_avgpool_s8_grad_input",
                     [s8(_int8(rng, c), _kind_in(rng)), hw, out(_kind_out(rng), hw * c)])


# --------------------------------------------------------------------------
# residual add


def gen_add_s8_forward(rng: Rng, i: int) -> Case:
    n = _len(rng, i)
    s1, s2, so = (float(10.0 ** rng.uniform(-2.5, -0.5)) for _ in range(3))
    z1, z2, zo = _zp(rng, i), _zp(rng, i // 5 + 1), _zp(rng, i // 25 + 2)
    act_min, act_max = _act(rng, zo, i // 2)
    ls = 20 if i % 4 else int(rng.integers(0, 23))
    desc = oracle.add_params(s1, z1, s2, z2, so, zo, act_min, act_max, n, ls)
    label = "tflite"
    if i % 6 == 5:  # saturating / extreme multipliers within the descriptor rules
        desc[8], desc[9] = int(rng.integers(0, 2**31)), int(rng.integers(-31, 32))
        desc[4], desc[5] = int(rng.integers(0, 2**31)), int(rng.integers(-31, 1))
        label = "extreme"
    x1, x2 = _int8(rng, n), _int8(rng, n)
    inplace = i % 5 == 3
    if inplace and n:
        which = 1 + int(rng.integers(0, 2))
        args: list[Arg] = [i32(desc), s8(x1, _kind_out(rng)), s8(x2, _kind_out(rng)), Alias(which)]
        return make_case("add_s8_forward", args, f"{label}/y-is-x{which}")
    args = [i32(desc), s8(x1, _kind_in(rng)), s8(x2, _kind_in(rng)), out(_kind_out(rng), n)]
    return make_case("add_s8_forward", args, label)


def gen_conv2d_add_s8_forward(rng: Rng, i: int) -> Case:
    """A conv case's layer (no dilation) into an add over skip, with tiles of one row, a
    few rows (not dividing out_h), a size that is no multiple of a row, the whole output
    and more; the conv output as x1 or x2."""
    variant = [v for v in CONV_VARIANTS if v != "dilated"][i % (len(CONV_VARIANTS) - 1)]
    c = conv_layer(rng, i, variant)
    g, out_zp, mode = c.g, c.out_zp, c.mode
    n = g.n_out
    s1, s2, so = (float(10.0 ** rng.uniform(-2.5, -0.5)) for _ in range(3))
    zs, zo = _zp(rng, i // 7 + 2), _zp(rng, i // 3 + 3)
    a_min, a_max = _act(rng, zo, i // 4)
    side = i % 2
    z1, z2 = (out_zp, zs) if side == 0 else (zs, out_zp)
    add = oracle.add_params(s1, z1, s2, z2, so, zo, a_min, a_max, n, 20)
    row = g.out_w * g.out_c
    kind = i % 5
    rows = [1, 2, 3, g.out_h, g.out_h + 2][kind]
    nt = rows * row + (int(rng.integers(1, row)) if kind == 2 and row > 1 else 0)
    args: list[Arg] = [*c.head(rng), i32(add), side,
                       s8(_int8(rng, n), _kind_out(rng)), s8(np.zeros(nt), _kind_out(rng))]
    return make_case("conv2d_add_s8_forward", args, f"{variant}/{mode}/tile{rows}/side{side}")


def gen_add_s8_grad_merge(rng: Rng, i: int) -> Case:
    n = _len(rng, i)
    kind = i % 4
    if kind == 0:
        ra, rb = oracle.merge_ratios(float(10.0 ** rng.uniform(-3, 0)), float(10.0 ** rng.uniform(-3, 0)))
    elif kind == 1:
        ra, rb = 32768, 32768
    elif kind == 2:
        ra, rb = int(rng.choice([0, 1, 32768])), int(rng.integers(0, 32769))
    else:
        ra, rb = int(rng.integers(0, 32769)), int(rng.integers(0, 32769))
    ea, eb = _int8(rng, n), _int8(rng, n, ["uniform", "sparse"][i % 2])
    if i % 5 == 2:
        which = 0 if rng.random() < 0.5 else 2
        args: list[Arg] = [s8(ea, _kind_out(rng)), ra, s8(eb, _kind_out(rng)), rb, Alias(which)]
        return make_case("add_s8_grad_merge", args, f"out-is-{'ea' if which == 0 else 'eb'}")
    args = [s8(ea, _kind_in(rng)), ra, s8(eb, _kind_in(rng)), rb, out(_kind_out(rng), n)]
    return make_case("add_s8_grad_merge", args)


# --------------------------------------------------------------------------
# softmax cross-entropy


def gen_softmax_xent_s8(rng: Rng, i: int) -> Case:
    kind = i % 6
    c = [1, 2, int(rng.integers(3, 12)), int(rng.integers(10, 100)), int(rng.integers(100, 1000)), 10][kind]
    scale = float(10.0 ** rng.uniform(-2.5, 0.5))
    if i % 29 == 28:  # the largest class count, every table entry 2^16
        c, scale = 32767, 1e-9
    style = ["uniform", "small", "const", "uniform"][i % 4]
    q = _int8(rng, c, style)
    label = int(rng.integers(0, c))
    if i % 3 == 1:  # label at the max logit
        label = int(np.argmax(q))
    lut = oracle.make_softmax_lut(scale)
    return make_case("softmax_xent_s8", [s8(q, _kind_in(rng)), label, u32(lut, "I" if i % 2 else "i"),
                                         out(_kind_out(rng), c), out("i", 3)], f"C={c}")


def softmax_trimmed_cases(seed: int = 5150) -> list[Case]:
    """softmax_xent_s8 with tables shorter than 256 entries (d >= len(lut) reads as 0): lengths
    1..256, the exp table cut anywhere (a nonzero last entry) or after its last nonzero entry, and
    random non-increasing tables; logits over the whole int8 range, so that some distances to the
    max exceed the length, and labels among them. Deterministic."""
    rng = np.random.default_rng(seed)
    cases = []
    lengths = [1, 1, 2, 3, 7, 17, 64, 86, 128, 200, 255, 256, 256]
    for i in range(40):
        n = lengths[i] if i < len(lengths) else int(rng.integers(1, 257))
        c = [2, 10, int(rng.integers(3, 40)), int(rng.integers(40, 600))][i % 4]
        kind = ["exp", "random", "trimmed"][i % 3]
        if kind == "random":  # any non-increasing table from 2^16, its last entry often far from 0
            lut = np.r_[65536, -np.sort(-rng.integers(0, 65537, n - 1))].astype(np.int64)
        elif kind == "exp":
            lut = oracle.make_softmax_lut(float(10.0 ** rng.uniform(-2.5, 0.5)))[:n]
        else:  # up to its last nonzero entry (about n long): the full table's results (oracle test)
            top = np.log(131072.0)  # entry d is nonzero while d <= top / scale
            scale = float(rng.uniform(top / (n + 0.5), top / max(n - 0.5, 0.5)))
            lut = oracle.trim_softmax_lut(oracle.make_softmax_lut(scale))
        q = _int8(rng, c)
        q[int(rng.integers(0, c))] = 127  # distances up to 255
        q[int(rng.integers(0, c))] = -128
        far = np.flatnonzero(127 - q.astype(np.int64) >= lut.size)
        label = int(rng.choice(far)) if far.size and i % 2 == 0 else int(rng.integers(0, c))
        args: list[Arg] = [s8(q, _kind_in(rng)), label, u32(lut, "I" if i % 2 else "i"),
                           out(_kind_out(rng), c), out("i", 3)]
        cases.append(make_case("softmax_xent_s8", args, f"trimmed lut n={lut.size} {kind}"))
    return cases


# --------------------------------------------------------------------------
# sparse-update helpers and misc


def gen_l1_norm_s8(rng: Rng, i: int) -> Case:
    c = [1, int(rng.integers(2, 9)), int(rng.integers(9, 65))][i % 3]
    npos = [1, int(rng.integers(2, 50)), int(rng.integers(50, 400))][(i // 3) % 3]
    e = _int8(rng, c * npos, ["uniform", "sparse", "const"][i % 3])
    if i % 11 == 10:
        e[:] = -128
    return make_case("l1_norm_s8", [s8(e, _kind_in(rng)), c, out("i", c)])


def gen_topk_mask(rng: Rng, i: int) -> Case:
    c = [1, int(rng.integers(2, 10)), int(rng.integers(10, 200))][i % 3]
    kind = (i // 3) % 4
    if kind == 0:
        norms = rng.integers(0, 4, c)  # many ties
    elif kind == 1:
        norms = np.full(c, int(rng.integers(0, 100)))
    elif kind == 2:
        norms = rng.integers(INT32_MIN, INT32_MAX, c, endpoint=True)
        norms[rng.random(c) < 0.2] = INT32_MAX
        norms[rng.random(c) < 0.2] = INT32_MIN
    else:
        norms = rng.integers(0, 100000, c)
    k = [0, c, int(rng.integers(0, c + 1)), 1][i % 4]
    return make_case("topk_mask", [i32(norms), k, out(_kind_out(rng), c)], f"c={c},k={k}")


def gen_dyn_requant_s8(rng: Rng, i: int) -> Case:
    n = [0, 1, int(rng.integers(2, 40)), int(rng.integers(40, 500))][i % 4]
    kind = (i // 4) % 6
    if kind == 0:
        acc = rng.integers(-127, 128, n)
    elif kind == 1:
        acc = rng.integers(INT32_MIN, INT32_MAX, n, endpoint=True)
        if n:
            acc[int(rng.integers(0, n))] = int(rng.choice([INT32_MIN, INT32_MAX]))
    elif kind == 2:
        acc = np.zeros(n, dtype=np.int64)
    elif kind == 3:  # rounding boundaries: (2k+1) * 2^(s-1) and neighbours
        s = int(rng.integers(1, 24))
        base = (2 * rng.integers(-128, 128, n) + 1) * (1 << (s - 1))
        acc = np.clip(base + rng.integers(-1, 2, n), INT32_MIN, INT32_MAX)
    elif kind == 4:  # the shift boundary: max |acc| just around 127.5 * 2^s
        s = int(rng.integers(0, 24))
        top = int(127.5 * (1 << s)) if s else 127
        acc = rng.integers(-top, top + 1, n)
        if n:
            acc[0] = int(rng.choice([top - 1, top, top + 1, -top, -top - 1]))
    else:
        acc = np.round(rng.normal(0, 10.0 ** rng.uniform(1, 9), n)).clip(INT32_MIN, INT32_MAX)
    return make_case("dyn_requant_s8", [i32(acc), out(_kind_out(rng), n)])


def gen_f32_axpy_i32(rng: Rng, i: int) -> Case:
    n = [0, 1, int(rng.integers(2, 60)), int(rng.integers(60, 500))][i % 4]
    kind = (i // 4) % 4
    if kind == 0:
        x = rng.integers(INT32_MIN, INT32_MAX, n, endpoint=True)  # not exactly representable in f32
    else:
        x = rng.integers(-(2**16), 2**16, n)
    a = [float(rng.normal() * 10.0 ** rng.uniform(-8, 2)), 0.0, -1.0,
         float(10.0 ** rng.uniform(-30, -20))][kind]
    y = rng.normal(0, 10.0 ** rng.uniform(-3, 3), n) if kind != 2 else np.zeros(n)
    return make_case("f32_axpy_i32", [i32(x), a, f32(y)])


def _zo_state(rng: Rng, i: int, n: int) -> list[int]:
    # any 32-bit state, a state with bit 31 set (signed array('i') storage), or 1
    return [[int(rng.integers(1, 2**32)), 0x80000001 + int(rng.integers(0, 2**30)), 1][(i + k) % 3]
            for k in range(n)]


def _zo_base(rng: Rng, i: int, n: int) -> NDArray[np.int8]:
    b = _int8(rng, n, ["uniform", "small", "ties", "const"][i % 4])
    if i % 7 == 3:
        b[: n // 2] = -128  # off the weight range: clamped to -127 as every result
    return b


def gen_zo_perturb_s8(rng: Rng, i: int) -> Case:
    n = [0, 1, 31, 32, 33, int(rng.integers(2, 64)), int(rng.integers(64, 700))][i % 7]
    eps = [1, -1, 0, 127, -127, int(rng.integers(-127, 128)), 4][(i // 2) % 7]
    state = u32(_zo_state(rng, i, 1), ["I", "i"][(i // 3) % 2])
    b = _zo_base(rng, i, n)
    if i % 5 == 4:  # in place: w is base
        return make_case("zo_perturb_s8", [s8(b, _kind_out(rng)), eps, state, Alias(0)], "in-place")
    return make_case("zo_perturb_s8", [s8(b, _kind_in(rng)), eps, state, out(_kind_out(rng), n)],
                     f"n={n},eps={eps}")


def gen_zo_perturb_h_s8(rng: Rng, i: int) -> Case:
    n = [0, 1, 31, 32, 33, int(rng.integers(2, 64)), int(rng.integers(64, 700))][i % 7]
    eps = [1, -1, 0, 127, -127, int(rng.integers(-127, 128)), 4][(i // 2) % 7]
    state = u32(_zo_state(rng, i, 1), ["I", "i"][(i // 3) % 2])
    row = [0, 1, 63, int(rng.integers(0, 2**10)), 2**24 - 1, int(rng.integers(0, 2**24))][(i // 4) % 6]
    i0 = [0, 0, 7, int(rng.integers(0, 2**12)), 2**24 - 1, int(rng.integers(0, 2**24))][(i // 5) % 6]
    b = _zo_base(rng, i, n)
    if i % 5 == 4:
        return make_case("zo_perturb_h_s8", [s8(b, _kind_out(rng)), eps, state, row, i0, Alias(0)],
                         "in-place")
    return make_case("zo_perturb_h_s8", [s8(b, _kind_in(rng)), eps, state, row, i0, out(_kind_out(rng), n)],
                     f"n={n},eps={eps},row={row},i0={i0}")


def gen_zo_update_s8(rng: Rng, i: int) -> Case:
    n = [0, 1, 31, 32, 33, int(rng.integers(2, 64)), int(rng.integers(64, 700))][i % 7]
    mag = [0, 1, 65535, 65536, 65537, int(rng.integers(0, 4 * 65536)), 255 * 65536,
           int(rng.integers(0, 255 * 65536 + 1)), 32768][(i // 2) % 9]
    step = mag if (i // 3) % 2 else -mag
    state = u32(_zo_state(rng, i, 2), ["I", "i"][(i // 5) % 2])
    b = _zo_base(rng, i, n)
    if i % 5 == 4:
        return make_case("zo_update_s8", [s8(b, _kind_out(rng)), step, state, Alias(0)], "in-place")
    return make_case("zo_update_s8", [s8(b, _kind_in(rng)), step, state, out(_kind_out(rng), n)],
                     f"n={n},step={step}")


# --------------------------------------------------------------------------
# optimiser-update primitives (update.c)


def _upd_shape(rng: Rng, i: int) -> tuple[int, int]:
    """(channels, values per channel): single values, a bias (k = 1), small and larger layers."""
    return [(1, 1), (int(rng.integers(1, 9)), 1), (int(rng.integers(1, 6)), int(rng.integers(2, 12))),
            (int(rng.integers(4, 33)), int(rng.integers(9, 80)))][i % 4]


def _touched(rng: Rng, n_ch: int, i: int) -> Buf | None:
    """None (all), none touched, random (0 or any non-zero byte), all touched."""
    v = (i // 4) % 4
    if v == 0:
        return None
    if v == 1:
        t = np.zeros(n_ch, np.uint8)
    elif v == 2:
        t = (rng.integers(0, 2, n_ch) * rng.choice([1, 7, 255])).astype(np.uint8)
    else:
        t = np.full(n_ch, rng.choice([1, 255]), np.uint8)
    return u8(t) if rng.integers(2) else Buf("Y", t)


def _grads(rng: Rng, n: int, i: int) -> NDArray[np.float32]:
    """Gradient-like float32 values: spread over magnitudes, with zeros, tiny and signed values."""
    g = rng.normal(0, 10.0 ** rng.uniform(-6, 1), n)
    if i % 5 == 3:
        g[rng.random(n) < 0.3] = 0.0
    if i % 7 == 5:
        g = g * 1e-38  # subnormal float32 values
    return g.astype(np.float32)


def _state(rng: Rng, n: int, i: int, a: float) -> NDArray[np.float32]:
    """Optimiser-state values; every third case around the smallest normal, where the decay a * v
    leaves the normal range (flushed to zero, docs/numerics.md "Update"): subnormals, values from
    2^-128 to 2^-116, and the float32 neighbours of 2^-126 / a (a product on either side of 2^-126)."""
    if i % 3 != 1 or n == 0:
        return _grads(rng, n, i + 2)
    v = rng.choice([-1.0, 1.0], n) * 2.0 ** rng.uniform(-128, -116, n)
    if a != 0 and np.isfinite(np.float32(2.0 ** -126 / abs(a))):
        edge = np.float32(2.0 ** -126 / abs(a))
        near = np.nextafter(edge, np.float32(np.inf) * rng.choice([-1, 1], n)).astype(np.float32)
        pick = rng.random(n) < 0.3
        v[pick] = (np.where(rng.random(n) < 0.5, edge, near) * rng.choice([-1.0, 1.0], n))[pick]
    v[rng.random(n) < 0.1] = 0.0
    return v.astype(np.float32)


def gen_update_u8_touch(rng: Rng, i: int) -> Case:
    n = [1, int(rng.integers(2, 20)), int(rng.integers(20, 300))][i % 3]
    t = (rng.integers(0, 2, n) * rng.choice([1, 255])).astype(np.uint8)
    mask = None if i % 4 == 0 else s8((rng.integers(0, 2, n) * rng.choice([1, 255])).astype(np.uint8),
                                      _kind_in(rng))
    return make_case("update_u8_touch", [Buf("Y", t), mask])


def gen_update_f32_check(rng: Rng, i: int) -> Case:
    n = [0, 1, int(rng.integers(2, 50)), int(rng.integers(50, 400))][i % 4]
    x = _grads(rng, n, i)
    if n and i % 3:
        x[int(rng.integers(0, n))] = rng.choice([np.inf, -np.inf, np.nan])
    return make_case("update_f32_check", [f32(x)])


def gen_update_f32_decay(rng: Rng, i: int) -> Case:
    n_ch, k = _upd_shape(rng, i)
    g = _grads(rng, n_ch * k, i)
    wd = [0.0, float(10.0 ** rng.uniform(-5, -1)), 1.0][i % 3]
    n = [1, int(rng.integers(2, 70)), 3][(i // 3) % 3]
    scale = f32(10.0 ** rng.uniform(-4, -1, n_ch))
    src = (i // 2) % 3
    if src == 0:  # weights: int8, f = 1
        q: Arg = s8(_int8(rng, n_ch * k), _kind_in(rng))
        f = 1.0
        master = None
    elif src == 1:  # bias: int32 up to 2^30, f = s_in
        q = i32(rng.integers(-(2**30), 2**30, n_ch * k, endpoint=True))
        f = float(10.0 ** rng.uniform(-3, 0))
        master = None
    else:
        q, f = s8(_int8(rng, n_ch * k)), 1.0
        master = f32(rng.normal(0, 0.1, n_ch * k))
    return make_case("update_f32_decay", [f32(g), k, _touched(rng, n_ch, i), n, wd, q, scale, f, master])


def gen_update_f32_standardize(rng: Rng, i: int) -> Case:
    n_ch, k = _upd_shape(rng, i)
    n = [1, int(rng.integers(2, 40))][i % 2]
    return make_case("update_f32_standardize", [f32(_grads(rng, n_ch * k, i)), k, _touched(rng, n_ch, i), n])


def gen_update_f32_axpby(rng: Rng, i: int) -> Case:
    n_ch, k = _upd_shape(rng, i)
    a, b = [(float(rng.uniform(0, 1)), 1.0), (1.0, float(rng.uniform(0, 1))), (0.0, -1.0),
            (float(rng.normal()), float(rng.normal()))][(i // 2) % 4]
    return make_case("update_f32_axpby", [f32(_grads(rng, n_ch * k, i)), f32(_grads(rng, n_ch * k, i + 1)),
                                          k, _touched(rng, n_ch, i), a, b])


def gen_update_f32_momentum(rng: Rng, i: int) -> Case:
    n_ch, k = _upd_shape(rng, i)
    mom = [0.9, 0.0, float(rng.uniform(0, 1)), 0.99][(i // 2) % 4]
    g = _grads(rng, n_ch * k, i) * (np.float32(1e-36) if i % 6 == 4 else np.float32(1))  # decay-sized terms
    v = _state(rng, n_ch * k, i, mom)
    return make_case("update_f32_momentum", [f32(g), f32(v), k, _touched(rng, n_ch, i), mom])


def gen_update_f32_scale(rng: Rng, i: int) -> Case:
    n_ch, k = _upd_shape(rng, i)
    a = [0.9, 0.0, float(rng.uniform(0, 1)), -1.5, float(rng.normal(0, 10)), 1.0, 1e-30, 3e37][(i // 2) % 8]
    return make_case("update_f32_scale", [f32(_state(rng, n_ch * k, i, a)), k, _touched(rng, n_ch, i), a])


def gen_update_f32_adam(rng: Rng, i: int) -> Case:
    n_ch, k = _upd_shape(rng, i)
    b1, b2 = [(0.9, 0.999), (float(rng.uniform(0, 1)), float(rng.uniform(0, 1))), (0.0, 0.0)][(i // 2) % 3]
    t = int(rng.integers(1, 50))
    b1t, b2t = float(np.float32(b1) ** t), float(np.float32(b2) ** t)
    eps = [1e-8, float(10.0 ** rng.uniform(-10, -2))][i % 2]
    m = _state(rng, n_ch * k, i, b1) if i % 3 == 1 else _grads(rng, n_ch * k, i + 1)
    v = np.abs(_state(rng, n_ch * k, i, b2)) if i % 3 == 1 else np.abs(_grads(rng, n_ch * k, i + 2)) ** 2
    return make_case("update_f32_adam", [f32(_grads(rng, n_ch * k, i)), f32(m), f32(v.astype(np.float32)), k,
                                         _touched(rng, n_ch, i), b1, b2, b1t, b2t, eps])


def _bf16_state(rng: Rng, n: int, i: int, a: float) -> Buf:
    """bfloat16 state bytes in any writable byte buffer: _state's values with their lower halves
    dropped, and every fifth case quiet and signalling NaNs and the largest finite values (no
    infinity: 0 * inf makes the default NaN, whose sign differs between x64 and the boards)."""
    v = _state(rng, n, i, a).view(np.uint32)
    if i % 5 == 2 and n:
        pick = rng.random(n) < 0.2
        v = np.where(pick, rng.choice(np.array([0x7FC00000, 0xFFC10000, 0x7F810000, 0x7F7F0000, 0xFF7F0000],
                                               np.uint32), n), v)
    u16 = (v >> np.uint32(16)).astype("<u2")
    return Buf(_kind_out(rng), np.frombuffer(u16.tobytes(), np.uint8).astype(np.int8), out=False)


def _bf16_grads(rng: Rng, n: int, i: int) -> NDArray[np.float32]:
    """Gradients, with values whose sum's lower half is a tie every fourth case (the rounding's
    even rule): multiples of 2^-8 of the state's scale."""
    g = _grads(rng, n, i)
    if i % 4 == 3:
        g = (rng.integers(-512, 512, n) * 2.0 ** -16).astype(np.float32)
    return g


def gen_update_bf16_momentum(rng: Rng, i: int) -> Case:
    n_ch, k = _upd_shape(rng, i)
    # (1: a bfloat16 momentum adding a batch's later gradients into itself, or widened at the step)
    mom = [0.9, 0.0, float(rng.uniform(0, 1)), 0.99, 1.0][(i // 2) % 5]
    v = _bf16_state(rng, n_ch * k, i, mom)
    g = _bf16_grads(rng, n_ch * k, i)
    return make_case("update_bf16_momentum", [f32(g), v, k, _touched(rng, n_ch, i), mom])


def gen_update_bf16_adam(rng: Rng, i: int) -> Case:
    n_ch, k = _upd_shape(rng, i)
    b1, b2 = [(0.9, 0.999), (float(rng.uniform(0, 1)), float(rng.uniform(0, 1))), (0.0, 0.0)][(i // 2) % 3]
    t = int(rng.integers(1, 50))
    b1t, b2t = float(np.float32(b1) ** t), float(np.float32(b2) ** t)
    eps = [1e-8, float(10.0 ** rng.uniform(-10, -2))][i % 2]
    m = _bf16_state(rng, n_ch * k, i, b1)
    v = _bf16_state(rng, n_ch * k, i + 1, b2)
    assert v.data is not None
    v.data[1::2] &= 0x7F  # second moments are >= 0 (their sign bit clear)
    return make_case("update_bf16_adam", [f32(_bf16_grads(rng, n_ch * k, i)), m, v, k, _touched(rng, n_ch, i),
                                          b1, b2, b1t, b2t, eps])


def gen_update_s8_apply(rng: Rng, i: int) -> Case:
    return _apply_case(rng, i, "update_s8_apply")


def gen_update_s8_apply_keep(rng: Rng, i: int) -> Case:
    """update_s8_apply's cases with gw / gb kept and a 2 n_ch scratch of random values (the
    untouched channels' entries must stay); every 7th case makes a touched channel fail (inf / NaN
    in its gw or gb, or an inf scale): the oracle's ValueError."""
    return _apply_case(rng, i, "update_s8_apply_keep")


def _apply_case(rng: Rng, i: int, op: str) -> Case:
    keep = op == "update_s8_apply_keep"
    n_ch, k = _upd_shape(rng, i)
    n = n_ch * k
    sw = (10.0 ** rng.uniform(-4, -1, n_ch)).astype(np.float32)
    if i % 6 == 5:
        sw[0] = 1e-38  # tiny scales: multipliers below 2^-32 (shift -31, denormal m)
    w = _int8(rng, n, ["uniform", "sparse"][i % 2]).astype(np.int8)
    if i % 9 == 4:
        w[:] = 0  # all-zero rows: the scale is kept when the step is zero too
    s_in = float(10.0 ** rng.uniform(-3, 0))
    s_out = float(10.0 ** rng.uniform(-2, 0)) if i % 6 != 2 else float(rng.choice([1e8, 1e30]))  # m < 2^30
    b = rng.integers(-(2**20), 2**20, n_ch)
    if i % 8 == 7:
        b[0] = 2**30
    real = s_in * sw.astype(np.float64) / s_out
    mult = [oracle.quantize_multiplier(float(r))[0] for r in real]
    shift = [oracle.quantize_multiplier(float(r))[1] for r in real]
    gw = _grads(rng, n, i) * np.float32(rng.choice([1.0, 0.0, 30.0]) if i % 10 == 9 else 1.0)
    if i % 6 == 5:  # the tiny scale gets a step large enough for a normal new scale
        gw = rng.normal(0, 1e-2, n).astype(np.float32)
    gb = _grads(rng, n_ch, i + 1)
    master = (i // 2) % 3 == 1
    mw = f32(w.astype(np.float32) * np.repeat(sw, k) + rng.normal(0, 1e-4, n).astype(np.float32)) if master \
        else None
    mb = f32(rng.normal(0, 0.01, n_ch)) if master else None
    lr = [0.01, float(10.0 ** rng.uniform(-4, 0)), 1.0][(i // 3) % 3]
    r = [-1, int(rng.integers(1, 65536)), 0xACE1][i % 3]
    touched = _touched(rng, n_ch, i)
    scratch = rng.normal(0, 1, 2 * n_ch).astype(np.float32) if keep else np.zeros(n_ch)
    if i % 5 == 3:  # a longer scratch (a lent buffer): its tail stays as it was
        scratch = np.concatenate([scratch, rng.normal(0, 1, 1 + i % 7).astype(np.float32)])
    args: list[Arg]
    if keep and i % 7 == 6:
        hit = np.flatnonzero(np.ones(n_ch) if touched is None else np.asarray(touched.data) != 0)
        if hit.size:
            c = int(rng.choice(hit))
            how = int(rng.integers(0, 2 if master else 3))
            bad = float(rng.choice([np.inf, -np.inf, np.nan]))
            if how == 0:
                gw[c * k + int(rng.integers(0, k))] = bad
            elif how == 1:
                gb = gb.copy()
                gb[c] = bad
            else:
                sw[c] = np.inf  # no master: the old weights (float)w * inf
            args = [s8(w, ["b", "Y", "b", "B"][i % 4]), f32(sw), i32(b), i32(mult), i32(shift),
                    f32(gw), f32(gb), mw, mb, touched, lr, s_in, s_out, r, f32(scratch)]
            try:
                oracle_call(op, args)
            except ValueError as e:
                return Case(op, args, "failing channel", expect_error=True, error_type="ValueError",
                            error_has=(str(e),))
            raise AssertionError(f"{op}: channel {c} was made to fail but the oracle accepts the call")
    for _ in range(2):
        try:
            args = [s8(w, ["b", "Y", "b", "B"][i % 4]), f32(sw), i32(b), i32(mult), i32(shift),
                    f32(gw), f32(gb), mw, mb, touched, lr, s_in, s_out, r, f32(scratch)]
            return make_case(op, args)
        except ValueError:  # a subnormal new scale (1 / s = inf): take a larger step
            gw = rng.normal(0, 1e-2, n).astype(np.float32)
            s_out = 1.0
    raise AssertionError("unreachable")


def gen_update_f32_ratios(rng: Rng, i: int) -> Case:
    n = [1, int(rng.integers(2, 10)), int(rng.integers(10, 300))][i % 3]
    s = (10.0 ** rng.uniform(-6, -1, n)).astype(np.float32)
    if i % 4 == 1:
        s[rng.random(n) < 0.3] = 0.0
        s[0] = 1e-3
    if i % 5 == 2:
        s[:] = s[0]  # ties: every ratio 2^r
    r = [15, int(rng.integers(0, 16)), 0][i % 3]
    return make_case("update_f32_ratios", [f32(s), r, out("i", n)])
# lookup-table activations


def _lut_tables(rng: Rng, i: int) -> tuple[NDArray[np.int8], NDArray[np.int32]]:
    """Tables of a real activation (every function, random quantisation), or random ones."""
    names = list(oracle.LUT_FUNCTIONS)
    if i % 4 == 3:
        table = rng.integers(-128, 128, 256).astype(np.int8)
        top = int(rng.choice([1, 2**15, oracle.LUT_DMAX]))
        dtable = rng.integers(-top, top + 1, 256).astype(np.int32)
        if i % 8 == 7:  # the bound itself, both signs
            dtable[rng.integers(0, 256, 8)] = oracle.LUT_DMAX
            dtable[rng.integers(0, 256, 8)] = -oracle.LUT_DMAX
        return table, dtable
    name = names[(i // 4) % len(names)]
    s_in = float(np.float32(10.0 ** rng.uniform(-2.5, -0.5)))
    s_out = float(np.float32(10.0 ** rng.uniform(-2.5, -0.5)))
    table, dtable, _ = oracle.lut_tables(name, s_in, _zp(rng, i), s_out, _zp(rng, i + 1),
                                         float(rng.uniform(0.01, 0.3)))
    return table, dtable


def gen_lut_s8_forward(rng: Rng, i: int) -> Case:
    n = _len(rng, i)
    table, _ = _lut_tables(rng, i)
    x = _int8(rng, n)
    if i % 3 == 2:  # in place: y is x
        return make_case("lut_s8_forward", [s8(x, _kind_out(rng)), s8(table, _kind_in(rng)), Alias(0)],
                         "in-place")
    return make_case("lut_s8_forward", [s8(x, _kind_in(rng)), s8(table, _kind_in(rng)),
                                        out(_kind_out(rng), n)])


def gen_lut_s8_grad_input(rng: Rng, i: int) -> Case:
    n = _len(rng, i)
    _, dtable = _lut_tables(rng, i)
    x = _int8(rng, n)
    e = _int8(rng, n, ["uniform", "small", "sparse"][i % 3])
    if i % 5 == 4 and n:  # extreme errors on the extreme table entries
        e[:] = -128
    if i % 7 == 6:  # ein is e (in place)
        return make_case("lut_s8_grad_input", [s8(x, _kind_in(rng)), s8(e, _kind_out(rng)), i32(dtable),
                                               Alias(1)], "ein-is-e")
    return make_case("lut_s8_grad_input", [s8(x, _kind_in(rng)), s8(e, _kind_in(rng)), i32(dtable),
                                           out(_kind_out(rng), n)])


# --------------------------------------------------------------------------
# channel concatenation, upsampling


def _concat_desc(rng: Rng, i: int) -> tuple[list[int], str]:
    hw = [1, int(rng.integers(2, 40)), int(rng.integers(40, 200)), 3][i % 4]
    c1 = [1, int(rng.integers(1, 9)), int(rng.integers(9, 40))][i % 3]
    c2 = [int(rng.integers(1, 9)), 1, int(rng.integers(9, 40))][(i // 3) % 3]
    z1, z2, zo = _zp(rng, i), _zp(rng, i // 5 + 1), _zp(rng, i // 25 + 2)
    kind = i % 5
    if kind == 0:  # same quantisation: a copy
        s = float(10.0 ** rng.uniform(-2.5, -0.5))
        return oracle.concat_params(s, zo, s, zo, s, zo, hw, c1, c2), "copy"
    if kind == 4:  # extreme multipliers and shifts within the rules
        return [hw, c1, c2, z1, z2, zo, int(rng.integers(0, 2**31)), int(rng.integers(-31, 8)),
                int(rng.integers(0, 2**31)), int(rng.choice([-31, 7]))], "extreme"
    s1, s2, so = (float(10.0 ** rng.uniform(-2.5, -0.5)) for _ in range(3))
    return oracle.concat_params(s1, z1, s2, z2, so, zo, hw, c1, c2), "rescale"


def gen_concat_s8_forward(rng: Rng, i: int) -> Case:
    desc, label = _concat_desc(rng, i)
    hw, c1, c2 = desc[:3]
    args: list[Arg] = [i32(desc), s8(_int8(rng, hw * c1), _kind_in(rng)),
                       s8(_int8(rng, hw * c2), _kind_in(rng)), out(_kind_out(rng), hw * (c1 + c2))]
    return make_case("concat_s8_forward", args, label)


def gen_concat_s8_grad_input(rng: Rng, i: int) -> Case:
    desc, label = _concat_desc(rng, i)
    hw, c1, c2 = desc[:3]
    part = i % 2
    args: list[Arg] = [i32(desc), s8(_int8(rng, hw * (c1 + c2)), _kind_in(rng)), part,
                       out(_kind_out(rng), hw * (c2 if part else c1))]
    return make_case("concat_s8_grad_input", args, f"{label}/part{part}")


def _upsample_desc(rng: Rng, i: int) -> list[int]:
    in_h = [1, int(rng.integers(1, 6)), int(rng.integers(2, 12))][i % 3]
    in_w = [int(rng.integers(1, 6)), 1, int(rng.integers(2, 12))][(i // 3) % 3]
    c = int(rng.integers(1, 9))
    f_h = [2, 1, 3, int(rng.integers(1, 6)), 255 if in_h == 1 else 4][i % 5]
    f_w = [2, 3, 1, int(rng.integers(1, 6)), 255 if in_w == 1 else 2][(i // 2) % 5]
    # out from the smallest (in - 1) * f + 1 (a transposed conv, no output_padding) to in * f
    out_h = in_h * f_h - int(rng.integers(0, f_h)) if i % 4 == 1 else in_h * f_h
    out_w = in_w * f_w - int(rng.integers(0, f_w)) if i % 4 == 1 else in_w * f_w
    return [in_h, in_w, c, out_h, out_w, f_h, f_w, (i // 2) % 2, _zp(rng, i)]


def gen_upsample_s8_forward(rng: Rng, i: int) -> Case:
    d = _upsample_desc(rng, i)
    n_in, n_out = d[0] * d[1] * d[2], d[3] * d[4] * d[2]
    args: list[Arg] = [i32(d), s8(_int8(rng, n_in), _kind_in(rng)), out(_kind_out(rng), n_out)]
    return make_case("upsample_s8_forward", args, f"mode{d[7]}")


def gen_upsample_s8_grad_input(rng: Rng, i: int) -> Case:
    d = _upsample_desc(rng, i)
    n_in, n_out = d[0] * d[1] * d[2], d[3] * d[4] * d[2]
    e = _int8(rng, n_out, ["uniform", "small", "ties", "const", "sparse"][i % 5])
    args: list[Arg] = [i32(d), s8(e, _kind_in(rng)), out(_kind_out(rng), n_in)]
    return make_case("upsample_s8_grad_input", args, f"mode{d[7]}")


GENERATORS: dict[str, Callable[[Rng, int], Case]] = {
    "conv2d_s8_forward": gen_conv2d_s8_forward,
    "conv2d_s8_grad_input": gen_conv2d_s8_grad_input,
    "conv2d_s8_grad_weight": gen_conv2d_s8_grad_weight,
    "conv2d_s8_grad_weight_f32": gen_conv2d_s8_grad_weight_f32,
    "linear_s8_forward": gen_linear_s8_forward,
    "linear_s8_grad_input": gen_linear_s8_grad_input,
    "linear_s8_grad_weight": gen_linear_s8_grad_weight,
    "linear_s8_grad_weight_f32": gen_linear_s8_grad_weight_f32,
    "relu_s8_forward": gen_relu_s8_forward,
    "relu6_s8_forward": gen_relu6_s8_forward,
    "relu_s8_backward": gen_relu_s8_backward,
    "relu6_s8_backward": gen_relu6_s8_backward,
    "maxpool_s8_forward": gen_maxpool_s8_forward,
    "maxpool_s8_grad_input": gen_maxpool_s8_grad_input,
    "avgpool_s8_forward": gen_avgpool_s8_forward,
    "avgpool_s8_grad_input": gen_avgpool_s8_grad_input,
    "maxpool_s8_grad_input_act": gen_maxpool_s8_grad_input_act,
    "maxpool_s8_grad_input_act_l1": gen_maxpool_s8_grad_input_act_l1,
    "avgpool_s8_grad_input_act": gen_avgpool_s8_grad_input_act,
    "global_avgpool_s8_forward": gen_global_avgpool_s8_forward,
    "global_avgpool_s8_grad_input": gen_global_avgpool_s8_grad_input,
    "add_s8_forward": gen_add_s8_forward,
    "add_s8_grad_merge": gen_add_s8_grad_merge,
    "conv2d_add_s8_forward": gen_conv2d_add_s8_forward,
    "softmax_xent_s8": gen_softmax_xent_s8,
    "l1_norm_s8": gen_l1_norm_s8,
    "topk_mask": gen_topk_mask,
    "zo_perturb_s8": gen_zo_perturb_s8,
    "zo_perturb_h_s8": gen_zo_perturb_h_s8,
    "zo_update_s8": gen_zo_update_s8,
    "dyn_requant_s8": gen_dyn_requant_s8,
    "f32_axpy_i32": gen_f32_axpy_i32,
    "update_u8_touch": gen_update_u8_touch,
    "update_f32_check": gen_update_f32_check,
    "update_f32_decay": gen_update_f32_decay,
    "update_f32_standardize": gen_update_f32_standardize,
    "update_f32_axpby": gen_update_f32_axpby,
    "update_f32_momentum": gen_update_f32_momentum,
    "update_f32_scale": gen_update_f32_scale,
    "update_f32_adam": gen_update_f32_adam,
    "update_bf16_momentum": gen_update_bf16_momentum,
    "update_bf16_adam": gen_update_bf16_adam,
    "update_s8_apply": gen_update_s8_apply,
    "update_s8_apply_keep": gen_update_s8_apply_keep,
    "update_f32_ratios": gen_update_f32_ratios,
    "lut_s8_forward": gen_lut_s8_forward,
    "lut_s8_grad_input": gen_lut_s8_grad_input,
    "concat_s8_forward": gen_concat_s8_forward,
    "concat_s8_grad_input": gen_concat_s8_grad_input,
    "upsample_s8_forward": gen_upsample_s8_forward,
    "upsample_s8_grad_input": gen_upsample_s8_grad_input,
}
GENERATORS.update(kernel_cases_seq.GENERATORS)
assert set(GENERATORS) == set(OPS)


# --------------------------------------------------------------------------
# the documented accumulator bounds, hit exactly (docs/numerics.md)


def generate_limits() -> list[Case]:
    """Calls at the overflow bounds the descriptor checks allow, with the extreme
    operands (x - zp = -255, w = e = -128): every int32 accumulator at its
    largest legal magnitude; then generate_forward_blocks() and
    backward_block_cases(). Deterministic; a few large tensors."""
    cases = []
    # linear forward: in_n = 32768, |bias| = 2^30
    n = 32768
    w = np.r_[np.full(n, -128), np.full(n, 127)]
    args: list[Arg] = [i32([n, 2, 127, 0, -128, 127]), s8(np.full(n, -128)), s8(w), i32([2**30, -(2**30)]),
                       i32([2**31 - 1, 2**31 - 1]), i32([-25, -25]), out("Y", 2)]
    cases.append(make_case("linear_s8_forward", args, "limit: in_n 32768, |bias| 2^30"))
    # conv2d forward: k_h * k_w * cpg = 32768
    g = ConvGeom(16, 16, 128, 1, 1, 2, 16, 16, 1, 1, 0, 0, 1)
    args = [i32(g.desc(127, 0, -128, 127)), s8(np.full(g.n_in, -128)), s8(w), i32([2**30, -(2**30)]),
            i32([2**31 - 1, 2**31 - 1]), i32([-25, -25]), out("Y", 2)]
    cases.append(make_case("conv2d_s8_forward", args, "limit: k*k*cpg 32768"))
    # conv2d grad weight: out_h * out_w = 65536 (1x1, 256 x 256)
    g = ConvGeom(256, 256, 1, 256, 256, 1, 1, 1, 1, 1, 0, 0, 1)
    d = i32(g.desc(127, 0, -128, 127))
    xs, es = s8(np.full(g.n_in, -128)), s8(np.full(g.n_out, -128))
    cases.append(make_case("conv2d_s8_grad_weight", [d, xs, es, None, out("i", 1), out("i", 1)],
                           "limit: out_h*out_w 65536"))
    cases.append(make_case("conv2d_s8_grad_weight_f32", [d, xs, es, None, 1.0, 1.0, f32([0.5]), f32([0.25])],
                           "limit: out_h*out_w 65536"))
    # grad input: max(wr) * terms * 16384 <= 2^31 - 1 with e = w = -128 everywhere
    for out_n in (1, 7):
        top = 131071 // out_n
        args = [i32([3, out_n, 0, 0, -128, 127]), s8(np.full(out_n, -128)), s8(np.full(3 * out_n, -128)),
                i32(np.full(out_n, top)), None, out("i", 3), out("Y", 3)]
        cases.append(make_case("linear_s8_grad_input", args, f"limit: wr {top} x {out_n}"))
    g = ConvGeom(5, 5, 4, 5, 5, 8, 3, 3, 1, 1, 1, 1, 2)  # terms = 3*3*4 = 36
    top = 131071 // (g.k_h * g.k_w * g.opg)
    args = [i32(g.desc(0, 0, -128, 127)), s8(np.full(g.n_out, -128)), s8(np.full(g.n_w, -128)),
            i32(np.full(g.out_c, top)), None, out("i", g.n_in), out("Y", g.n_in)]
    cases.append(make_case("conv2d_s8_grad_input", args, f"limit: wr {top}, terms 36"))
    # avg-pool grad: k_h * k_w = 255, stride 1, maximal padding: corner windows
    # have one valid tap (recip 2^16) and every input tap is in 255 windows
    g = ConvGeom(15, 17, 1, 29, 33, 1, 15, 17, 1, 1, 14, 16, 1)
    args = [i32(g.pool_desc()), s8(np.full(g.n_out, -128)), out("i", g.n_in), out("Y", g.n_in)]
    cases.append(make_case("avgpool_s8_grad_input", args, "limit: 255-tap windows, full overlap"))
    args = [i32(g.pool_desc()), s8(np.full(g.n_in, -128)), s8(np.full(g.n_out, -128)), out("i", g.n_in),
            out("Y", g.n_in)]
    cases.append(make_case("maxpool_s8_grad_input", args, "limit: 255-tap windows, full overlap"))
    # no scratch (acc None): disjoint 255-tap windows with a padded border (recip of 1..255)
    # and errors of -128 (maxpool: the requantisation pass over ein)
    g = ConvGeom(20, 24, 3, 2, 2, 3, 15, 17, 15, 17, 7, 8, 1)
    args = [i32(g.pool_desc()), s8(np.full(g.n_out, -128)), None, out("Y", g.n_in)]
    cases.append(make_case("avgpool_s8_grad_input", args, "limit: no acc, 255-tap disjoint windows"))
    args = [i32(g.pool_desc()), s8(np.full(g.n_in, -128)), s8(np.r_[np.full(g.n_out - 1, -128), 5]), None,
            out("Y", g.n_in)]
    cases.append(make_case("maxpool_s8_grad_input", args, "limit: no acc, 255-tap disjoint windows"))
    # and with the activation mask, in place over the activation (relu6 at the int8 ends)
    t = np.where(np.arange(g.n_in) % 3 == 0, -128, 127)
    t[::7] = 5
    for op in ("maxpool_s8_grad_input_act", "avgpool_s8_grad_input_act"):
        args = [i32(g.pool_desc()), s8(t, "Y"), s8(np.r_[np.full(g.n_out - 1, -128), 5]), -128, 127, Alias(1)]
        cases.append(make_case(op, args, "limit: act in place, 255-tap disjoint windows"))
    args = [i32(g.pool_desc()), s8(t, "Y"), s8(np.r_[np.full(g.n_out - 1, -128), 5]), -128, 127, Alias(1),
            out("i", g.in_c)]
    cases.append(make_case("maxpool_s8_grad_input_act_l1", args,
                           "limit: act in place, 255-tap disjoint windows"))
    # the L1 norms' 16-bit lanes (armv7e-m, 2x2 windows of stride 2, a quad of channels at a time):
    # 511 windows of 127 (the most a run takes), 1,100 (three runs)
    for oh, ow in ((7, 73), (22, 50)):
        g = ConvGeom(2 * oh, 2 * ow, 4, oh, ow, 4, 2, 2, 2, 2, 0, 0, 4)
        args = [i32(g.pool_desc()), s8(np.full(g.n_in, 9)), s8(np.full(g.n_out, 127)), -129, 128,
                out("Y", g.n_in), out("i", 4)]
        cases.append(make_case("maxpool_s8_grad_input_act_l1", args, f"limit: {oh * ow} windows of 127"))
    # global average pool: hw = 65536
    cases.append(make_case("global_avgpool_s8_forward", [s8(np.full(65536 * 2, -128)), 65536, 2, out("Y", 2)],
                           "limit: hw 65536"))
    # add: |x - zp| = 255 at left_shift 22 with the largest input multipliers
    desc = [4, 127, 127, -128, 2**31 - 1, 0, 2**31 - 1, 0, 2**31 - 1, -31, 22, -128, 127]
    cases.append(make_case("add_s8_forward", [i32(desc), s8([-128] * 4), s8([-128] * 4), out("Y", 4)],
                           "limit: left_shift 22"))
    # concat: |x - zp| * 2^16 = 255 * 2^16 at shift 7 with the largest multiplier (saturates)
    desc = [2, 2, 1, 127, -128, 0, 2**31 - 1, 7, 2**31 - 1, 7]
    cases.append(make_case("concat_s8_forward", [i32(desc), s8([-128] * 4), s8([127] * 2), out("Y", 6)],
                           "limit: shift 7"))
    # upsample grad: a 255 x 255 block of -128 per input (|acc| = 128 * 255^2)
    desc = [1, 2, 1, 255, 510, 255, 255, 0, 0]
    cases.append(make_case("upsample_s8_grad_input", [i32(desc), s8(np.full(255 * 510, -128)), out("Y", 2)],
                           "limit: 255 x 255 block"))
    # softmax: C = 32767 classes, every table entry 2^16 (S just below 2^31)
    cases.append(make_case("softmax_xent_s8", [s8(np.zeros(32767)), 5, u32(np.full(256, 65536)),
                                               out("Y", 32767), out("i", 3)], "limit: C 32767"))
    # l1 norm: 2^24 - 1 positions of -128 in one channel (2^31 - 128)
    cases.append(make_case("l1_norm_s8", [s8(np.full(2**24 - 1, -128)), 1, out("i", 1)],
                           "limit: 2^24 - 1 positions"))
    # zeroth order: the largest step (255 quanta) and eps from both ends of int8 saturates
    ends = np.r_[np.full(40, -128), np.full(40, 127), np.zeros(40)]
    for st in (255 * 65536, -255 * 65536):
        cases.append(make_case("zo_update_s8", [s8(ends), st, u32([0x12345678, 0xFFFFFFFF]), out("Y", 120)],
                               f"limit: step {st}"))
    for e in (127, -127):
        cases.append(make_case("zo_perturb_s8", [s8(ends), e, u32([0xFFFFFFFF]), out("Y", 120)],
                               f"limit: eps {e}"))
    # l1 norm of channel quads: 16-bit lanes flushed every 511 positions (511 * 128
    # is the most a lane takes); position counts around the multiples of 511
    for npos, c in ((511, 4), (512, 8), (1533, 5), (1534, 12), (3000, 7)):
        cases.append(make_case("l1_norm_s8", [s8(np.full(npos * c, -128)), c, out("i", c)],
                               f"limit: {npos} positions of -128, {c} channels"))
    # conv2d forward with the zero point folded out (interior windows): the
    # dense path (two interior positions) and the depthwise path (one 128 x
    # 256 window per channel), x - zp = -255, w = -128 (channel 0) / 127
    ones = np.r_[np.full(32768, -128), np.full(32768, 127)]
    g = ConvGeom(16, 17, 128, 1, 2, 2, 16, 16, 1, 1, 0, 0, 1)
    args = [i32(g.desc(127, 0, -128, 127)), s8(np.full(g.n_in, -128)), s8(ones), i32([2**30, -(2**30)]),
            i32([2**31 - 1, 2**31 - 1]), i32([-25, -25]), out("Y", g.n_out)]
    cases.append(make_case("conv2d_s8_forward", args, "limit: k*k*cpg 32768, folded zero point"))
    g = ConvGeom(128, 256, 2, 1, 1, 2, 128, 256, 1, 1, 0, 0, 2)
    args = [i32(g.desc(127, 0, -128, 127)), s8(np.full(g.n_in, -128)), s8(ones), i32([2**30, -(2**30)]),
            i32([2**31 - 1, 2**31 - 1]), i32([-25, -25]), out("Y", g.n_out)]
    cases.append(make_case("conv2d_s8_forward", args, "limit: depthwise k*k 32768, folded zero point"))
    # depthwise with stride * in_c and stride * in_w * in_c beyond int32 (one output: never stepped)
    c = 60000
    g = ConvGeom(1, 1, c, 1, 1, c, 1, 1, 65535, 65535, 0, 0, c)
    rng = np.random.default_rng(5)
    args = [i32(g.desc(-128, 3, -128, 127)), s8(_int8(rng, c)), s8(_int8(rng, c)),
            i32(rng.integers(-(2**20), 2**20, c)), i32(np.full(c, 1 << 30)), i32(rng.integers(-12, -3, c)),
            out("Y", c)]
    cases.append(make_case("conv2d_s8_forward", args, "limit: depthwise stride * in_c > 2^31"))
    # conv2d grad weight at the bound through the channel-block paths (4 oc x 4 ci)
    g = ConvGeom(256, 256, 4, 256, 256, 4, 1, 1, 1, 1, 0, 0, 1)
    d = i32(g.desc(127, 0, -128, 127))
    xs, es = s8(np.full(g.n_in, -128)), s8(np.full(g.n_out, -128))
    cases.append(make_case("conv2d_s8_grad_weight", [d, xs, es, None, out("i", g.n_w), out("i", 4)],
                           "limit: out_h*out_w 65536, 4x4 channel block"))
    cases.append(make_case("conv2d_s8_grad_weight_f32",
                           [d, xs, es, None, 1.0, 1.0, f32(np.zeros(g.n_w)), f32(np.zeros(4))],
                           "limit: out_h*out_w 65536, 4x4 channel block"))
    # depthwise grad input at the wr bound (every channel sum scaled by wr once)
    g = ConvGeom(6, 6, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1, 8)  # terms = 9
    top = 131071 // 9
    args = [i32(g.desc(0, 0, -128, 127)), s8(np.full(g.n_out, -128)), s8(np.full(g.n_w, -128)),
            i32(np.full(g.out_c, top)), None, out("i", g.n_in), out("Y", g.n_in)]
    cases.append(make_case("conv2d_s8_grad_input", args, f"limit: depthwise wr {top}"))
    return (cases + generate_forward_blocks() + backward_block_cases() + window_cases() + grad_act_cases()
            + packed_select_cases() + softmax_trimmed_cases() + kernel_cases_seq.limits())


def _fwd_case(rng: Rng, g: ConvGeom, i: int, label: str) -> Case:
    """conv2d_s8_forward on geometry g; i picks zero points (-128 / 127 / 0 /
    random), activation window and requant mode as gen_conv2d_s8_forward."""
    in_zp, out_zp = _zp(rng, i), _zp(rng, i // 5 + 1)
    act_min, act_max = _act(rng, out_zp, i // 3)
    x, w = _activations(rng, g.n_in, in_zp, i // 2), _weights(rng, g.cpg * g.k_h * g.k_w * g.out_c, i)
    bias, mult, shift, mode = _fwd_qparams(rng, g, i, _scales(rng, g.out_c, i % 2 == 0), x, in_zp, w)
    args: list[Arg] = [i32(g.desc(in_zp, out_zp, act_min, act_max)), s8(x, _kind_in(rng)),
                       s8(w, _kind_in(rng)), bias, mult, shift, out(_kind_out(rng), g.n_out)]
    return make_case("conv2d_s8_forward", args, f"{label}/{mode}")


def _geom(in_h: int, in_w: int, in_c: int, out_c: int, k_h: int, k_w: int, s_h: int, s_w: int, p_t: int,
          p_l: int, groups: int, p_b: int | None = None, p_r: int | None = None) -> ConvGeom:
    """A geometry with the largest output the padding allows (bottom / right
    padding p_b / p_r, by default as top / left)."""
    p_b = p_t if p_b is None else p_b
    p_r = p_l if p_r is None else p_r
    out_h = (in_h + p_t + p_b - k_h) // s_h + 1
    out_w = (in_w + p_l + p_r - k_w) // s_w + 1
    return ConvGeom(in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, p_t, p_l, groups)


def generate_forward_blocks(seed: int = 4242) -> list[Case]:
    """The register-blocked forward paths (conv2d_s8_forward.c, linear.c, mt_runs.h) at
    their edges: channel counts 1..5 and not multiples of 4 (odd last output
    channel, byte tails after the 4-byte steps), interior runs of odd length
    (a lone last pair member), 1x1 runs merged over rows, border rows and
    columns (masked 3x3 depthwise runs, corners), inputs smaller than the
    kernel, strides, groups, long runs, zero points at the extremes and every
    requant mode. Deterministic."""
    rng = np.random.default_rng(seed)
    geoms: list[tuple[str, ConvGeom]] = []
    # dense: 3x3 pad 1 over odd widths, every small channel count
    for ci, co in ((1, 1), (2, 3), (3, 5), (5, 2), (7, 4), (9, 1), (4, 5), (6, 3)):
        geoms.append(("blk-dense3x3", _geom(6, 9, ci, co, 3, 3, 1, 1, 1, 1, 1)))
    # dense: stride 2, asymmetric kernels and padding, no padding
    geoms += [("blk-dense-s2", _geom(9, 10, 3, 3, 3, 3, 2, 2, 1, 0, 1)),
              ("blk-dense-s2", _geom(7, 11, 5, 2, 3, 2, 2, 1, 0, 1, 1)),
              ("blk-dense-asym", _geom(8, 7, 2, 5, 2, 3, 1, 1, 1, 2, 1, 0, 0)),
              ("blk-dense-nopad", _geom(5, 8, 4, 3, 3, 3, 1, 1, 0, 0, 1)),
              ("blk-dense-small", _geom(2, 2, 3, 3, 3, 3, 1, 1, 1, 1, 1)),  # no interior window
              ("blk-dense-small", _geom(3, 4, 5, 1, 3, 3, 1, 1, 0, 0, 1, 0, 0)),  # 1x2 outputs, both interior
              ("blk-dense-long", _geom(5, 6, 37, 3, 3, 3, 1, 1, 1, 1, 1)),  # 111-byte rows
              ("blk-dense-long", _geom(3, 5, 64, 5, 3, 3, 1, 2, 1, 1, 1))]
    # dense 1x1: rows merged into one run (stride 1) or not (stride 2)
    for ci, co in ((1, 1), (3, 2), (4, 5), (5, 3), (33, 7)):
        geoms.append(("blk-pw", _geom(5, 7, ci, co, 1, 1, 1, 1, 0, 0, 1)))
    geoms.append(("blk-pw-s2", _geom(6, 7, 6, 3, 1, 1, 2, 2, 0, 0, 1)))
    # depthwise 3x3: every border shape, strides, channel counts 1..5 and 13
    for c, (h, w), (s_h, s_w), (p_t, p_l, p_b, p_r) in (
            (1, (6, 9), (1, 1), (1, 1, 1, 1)), (2, (5, 8), (1, 1), (2, 2, 0, 0)),
            (3, (7, 7), (2, 2), (1, 1, 1, 1)), (4, (9, 6), (1, 2), (1, 0, 1, 2)),
            (5, (6, 10), (2, 1), (0, 2, 2, 1)), (13, (8, 8), (1, 1), (1, 1, 1, 1)),
            (3, (3, 3), (1, 1), (1, 1, 1, 1)), (2, (2, 2), (1, 1), (1, 1, 1, 1)),
            (4, (1, 1), (1, 1), (1, 1, 1, 1)), (5, (1, 7), (1, 1), (1, 1, 1, 1)),
            (3, (6, 2), (1, 1), (2, 1, 0, 1)), (2, (4, 5), (1, 1), (0, 0, 0, 0))):
        geoms.append(("blk-dw3x3", _geom(h, w, c, c, 3, 3, s_h, s_w, p_t, p_l, c, p_b, p_r)))
    # depthwise, other kernels (plain interior loop), and channel multiplier / groups (general path)
    geoms += [("blk-dw-k", _geom(9, 8, 3, 3, 5, 5, 1, 1, 2, 2, 3)),
              ("blk-dw-k", _geom(6, 9, 5, 5, 1, 3, 1, 1, 0, 1, 5)),
              ("blk-dw-k", _geom(7, 5, 2, 2, 3, 1, 2, 1, 1, 0, 2)),
              ("blk-dw-k", _geom(5, 5, 4, 4, 1, 1, 1, 1, 0, 0, 4)),
              ("blk-dw-mult", _geom(6, 6, 3, 6, 3, 3, 1, 1, 1, 1, 3)),
              ("blk-grouped", _geom(6, 7, 6, 4, 3, 3, 1, 1, 1, 1, 2))]
    cases = [_fwd_case(rng, g, i, label) for i, (label, g) in enumerate(geoms)]
    # linear: 4-row blocks, then 2 and 1; byte tails after the 4- and 8-byte steps
    sizes = ((1, 1), (3, 2), (4, 3), (5, 4), (7, 5), (9, 6), (13, 7), (37, 9), (255, 11), (64, 8))
    for i, (in_n, out_n) in enumerate(sizes):
        in_zp, out_zp = _zp(rng, i), _zp(rng, i // 5 + 2)
        act_min, act_max = _act(rng, out_zp, i // 3)
        x, w = _activations(rng, in_n, in_zp, i // 2), _weights(rng, in_n * out_n, i)
        g = ConvGeom(1, 1, in_n, 1, 1, out_n, 1, 1, 1, 1, 0, 0, 1)
        bias, mult, shift, mode = _fwd_qparams(rng, g, i, _scales(rng, out_n, i % 2 == 0), x, in_zp, w)
        args: list[Arg] = [i32([in_n, out_n, in_zp, out_zp, act_min, act_max]), s8(x, _kind_in(rng)),
                           s8(w, _kind_in(rng)), bias, mult, shift, out(_kind_out(rng), out_n)]
        cases.append(make_case("linear_s8_forward", args, f"blk-linear {in_n}x{out_n}/{mode}"))
    return cases


def _window(rng: Rng, out_c: int, i: int) -> tuple[int, int, Buf | None]:
    """(c0, n, mask) of a _grad_weight_f32 window of n channels from c0: the
    whole layer given as c0 = 0 (mask None or not), its first or last rows, or
    rows inside it; the mask dense (every channel of the window set) or sparse
    inside the window, 0 outside it."""
    kind = ["inside", "inside", "tail", "head", "whole"][(i // 5) % 5] if out_c > 1 else "whole"
    if kind == "whole":
        c0, n = 0, out_c
    elif kind == "head":
        c0, n = 0, int(rng.integers(1, out_c))
    elif kind == "tail":
        n = int(rng.integers(1, out_c))
        c0 = out_c - n
    else:
        c0 = int(rng.integers(1, out_c))
        n = int(rng.integers(1, out_c - c0 + 1))
    if kind == "whole" and i % 2 == 0:
        return c0, n, None
    inside = np.zeros(out_c, dtype=bool)
    if i % 3 == 0:  # dense window
        inside[c0:c0 + n] = True
    else:
        inside[c0:c0 + n] = rng.random(n) < rng.uniform(0.3, 0.8)
        inside[c0 + int(rng.integers(0, n))] = True
    vals = rng.choice(np.array([1, 1, 2, 128, 255]), out_c)
    return c0, n, u8(np.where(inside, vals, 0), str(rng.choice(["y", "Y", "b", "B"])))


def window_cases(n: int = 50, seed: int = 2207) -> list[Case]:
    """The _grad_weight_f32 kernels with their channel window c0 (gw / gb row r =
    channel c0 + r, every channel outside masked): dense, depthwise, grouped,
    dilated convs (channel counts across the blocks of 4 and the masked pairs)
    and linear layers. Deterministic."""
    rng = np.random.default_rng(seed)
    cases = []
    for i in range(n):
        kind = ["large", "depthwise_mult", "grouped", "dilated", "linear"][i % 5]
        ws, bs = _f32_scales(rng, i)
        if kind == "linear":
            in_n, out_c = int(rng.choice([1, 3, 4, 9, 64])), int(rng.choice([2, 3, 5, 8, 13, 17]))
            c0, nw, mask = _window(rng, out_c, i)
            d = i32([in_n, out_c, _zp(rng, i), 0, -128, 127])
            cases.append(make_case("linear_s8_grad_weight_f32",
                                   [d, s8(_int8(rng, in_n)), s8(_int8(rng, out_c)), mask, ws, bs,
                                    _f32_acc(rng, nw * in_n, i), _f32_acc(rng, nw, i + 1), c0],
                                   f"window: linear {in_n}x{out_c} c0={c0} n={nw}"))
            continue
        g = conv_geom(rng, "big" if kind == "large" and i % 2 else kind)
        k = g.n_w // g.out_c
        c0, nw, mask = _window(rng, g.out_c, i)
        dg = i32(g.desc(_zp(rng, i), 0, -128, 127))
        e = _int8(rng, g.n_out, ["uniform", "sparse"][i % 2])
        cases.append(make_case("conv2d_s8_grad_weight_f32",
                               [dg, s8(_int8(rng, g.n_in)), s8(e), mask, ws, bs, _f32_acc(rng, nw * k, i),
                                _f32_acc(rng, nw, i + 1), c0],
                               f"window: {kind} {g.in_c}->{g.out_c} c0={c0} n={nw}"))
    return cases


def grad_act_cases(seed: int = 3301) -> list[Case]:
    """conv2d / linear grad input with the activation mask (ein holds the producer's
    activation): dense, depthwise, grouped and dilated convs (the blocked kernels' shapes
    and the plain loops) and linear layers, each with the masks of relu (zp, 128), relu6
    (zp, q6) and none (-129, 128), with no channel mask and a sparse one, and the largest
    grad-input ratios (the shift from the whole accumulator). Deterministic."""
    rng = np.random.default_rng(seed)
    geoms = {"dense": ConvGeom(6, 7, 5, 6, 7, 9, 3, 3, 1, 1, 1, 1, 1),
             "depthwise": ConvGeom(7, 7, 8, 4, 4, 8, 3, 3, 2, 2, 1, 1, 8),
             "grouped": ConvGeom(5, 6, 6, 5, 6, 9, 3, 1, 1, 1, 1, 0, 3),
             "dilated": ConvGeom(9, 9, 4, 5, 5, 6, 3, 3, 1, 1, 0, 0, 1, 2, 2)}
    cases = []
    for j, (name, g) in enumerate([*geoms.items(), ("linear", ConvGeom(1, 1, 37, 1, 1, 11, 1, 1, 1, 1,
                                                                          0, 0, 1))]):
        for m, (act, zp) in enumerate((("relu", -128), ("relu", 3), ("relu6", -128), ("relu6", -20),
                                       ("none", 0))):
            lo, hi = {"relu": (zp, 128), "relu6": (zp, oracle.relu6_q6(0.04, zp)), "none": (-129, 128)}[act]
            for sparse in (False, True):
                k = (j + m + sparse) % 4
                terms = g.k_h * g.k_w * g.opg
                mask = None
                if sparse:  # about a quarter of the channels kept, at least one
                    keep = rng.random(g.out_c) < 0.25
                    keep[int(rng.integers(0, g.out_c))] = True
                    mask = u8(keep.astype(np.uint8))
                e = _int8(rng, g.n_out, ["uniform", "sparse", "small", "uniform"][k])
                y = _near(rng, g.n_in, [lo, hi, zp])
                wr = i32(np.full(g.out_c, 131071 // terms)) if k == 3 else _wr(rng, g.out_c, terms, k)
                if name == "linear":
                    desc = i32([g.in_c, g.out_c, zp, 0, -128, 127])
                else:
                    desc = i32(g.desc(zp, 0, -128, 127))
                args: list[Arg] = [desc, s8(e), s8(_weights(rng, g.n_w, k)), wr, mask, out("i", g.n_in),
                                   s8(y, ["Y", "b", "B", "Y"][k]), lo, hi]
                op = "linear_s8_grad_input" if name == "linear" else "conv2d_s8_grad_input"
                cases.append(make_case(op, args, f"grad act: {name} {act} ({lo}, {hi})"
                                       + (" sparse mask" if sparse else "")))
    return cases


def packed_select_cases(seed: int = 2911) -> list[Case]:
    """conv2d grad input with a channel mask whose kept ratios are at most 256 (the armv7e-m
    packed path, band by band of output rows with each band's zero map): maps of more
    positions than one band holds, errors mostly zero as after a pool's routing, a quad
    with a larger ratio beside packed ones, with and without the activation mask, and rows
    wider than the zero map (the 32-bit path). Deterministic."""
    rng = np.random.default_rng(seed)
    geoms = [("3x3 26x26", ConvGeom(26, 26, 8, 26, 26, 8, 3, 3, 1, 1, 1, 1, 1)),
             ("pointwise 30x20", ConvGeom(30, 20, 12, 30, 20, 9, 1, 1, 1, 1, 0, 0, 1)),
             ("3x3 40x14", ConvGeom(40, 14, 3, 40, 14, 10, 3, 3, 1, 1, 1, 1, 1)),
             ("wide 1x600", ConvGeom(1, 602, 4, 1, 600, 5, 1, 3, 1, 1, 0, 0, 1))]
    cases = []
    for j, (name, g) in enumerate(geoms):
        for act in (False, True):
            keep = rng.random(g.out_c) < 0.5
            keep[int(rng.integers(0, g.out_c))] = True
            wr = rng.integers(1, 257, g.out_c)
            wr[int(rng.integers(0, g.out_c))] = 256
            if j == 2 and act:  # one kept channel past 256: its quad takes the 32-bit path
                big = int(np.flatnonzero(keep)[-1])
                wr[big] = 300
            e = _int8(rng, g.n_out, "uniform") * (rng.random(g.n_out) < 0.25)
            args: list[Arg] = [i32(g.desc(-3, 0, -128, 127)), s8(e.astype(np.int8)),
                               s8(_weights(rng, g.n_w, j)), i32(wr), u8(keep.astype(np.uint8)),
                               out("i", g.n_in)]
            if act:
                zp = -128
                args += [s8(_near(rng, g.n_in, [zp, 127]), "Y"), zp, 128]
            else:
                args += [out("Y", g.n_in)]
            cases.append(make_case("conv2d_s8_grad_input", args,
                                   f"packed select: {name}" + (" relu" if act else "")))
    return cases


def backward_block_cases(n: int = 48, seed: int = 1109) -> list[Case]:
    """Shapes that exercise the blocked backward kernels' edges: channel counts
    around their blocks of 4 (1..5, odd, > 16), depthwise and grouped layers,
    strides up to 3, kernels up to 5 wide, borders, masks, zero points
    -128 / 127 and the largest grad-input ratios. Deterministic."""
    rng = np.random.default_rng(seed)
    chans = [1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 17, 33]
    cases = []
    for i in range(n):
        kind = ["dense", "dense", "depthwise", "grouped"][i % 4]
        k_h, k_w = int(rng.integers(1, 6)), int(rng.integers(1, 4))
        s_h, s_w = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        groups = 1
        in_c, out_c = int(rng.choice(chans)), int(rng.choice(chans))
        if kind == "depthwise":
            in_c = out_c = groups = int(rng.choice([4, 5, 7, 8, 9, 12, 13, 33]))
        elif kind == "grouped":
            groups = int(rng.integers(2, 4))
            in_c, out_c = groups * int(rng.integers(3, 7)), groups * int(rng.integers(3, 9))
        in_h, out_h, p_t = _axis(rng, k_h, s_h, 9, rng.random() < 0.7)
        in_w, out_w, p_l = _axis(rng, k_w, s_w, 9, rng.random() < 0.7)
        g = ConvGeom(in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, p_t, p_l, groups)
        in_zp = [-128, 127, int(rng.integers(-128, 128))][i % 3]
        label = f"blocks: {kind} {in_c}->{out_c} k{k_h}x{k_w} s{s_h}x{s_w}"
        e = _int8(rng, g.n_out, ["uniform", "small", "sparse", "ties"][i % 4])
        terms = g.k_h * g.k_w * g.opg
        cases.append(make_case("conv2d_s8_grad_input",
                               [i32(g.desc(in_zp, 0, -128, 127)), s8(e), s8(_weights(rng, g.n_w, i)),
                                _wr(rng, g.out_c, terms, i), _mask(rng, g.out_c, i // 4), out("i", g.n_in),
                                out("Y", g.n_in)], label))
        x = _int8(rng, g.n_in, ["uniform", "ties"][i % 2])
        dg = i32(g.desc(in_zp, 0, -128, 127))
        cases.append(make_case("conv2d_s8_grad_weight",
                               [dg, s8(x), s8(e), _mask(rng, g.out_c, i // 4 + 1), out("i", g.n_w),
                                out("i", g.out_c)], label))
        ws, bs = _f32_scales(rng, i)
        cases.append(make_case("conv2d_s8_grad_weight_f32",
                               [dg, s8(x), s8(e), _mask(rng, g.out_c, i // 4 + 2), ws, bs,
                                _f32_acc(rng, g.n_w, i), _f32_acc(rng, g.out_c, i + 1)], label))
        in_n = int(rng.choice([1, 2, 3, 4, 5, 7, 9, 13, 64]))
        out_n = int(rng.choice([1, 2, 3, 4, 5, 7, 9, 13]))
        lab = f"blocks: linear {in_n}x{out_n}"
        el, xl = _int8(rng, out_n, ["uniform", "sparse"][i % 2]), _int8(rng, in_n)
        d = i32([in_n, out_n, in_zp, 0, -128, 127])
        cases.append(make_case("linear_s8_grad_input", [d, s8(el), s8(_weights(rng, in_n * out_n, i)),
                                                        _wr(rng, out_n, out_n, i), _mask(rng, out_n, i // 4),
                                                        out("i", in_n), out("Y", in_n)], lab))
        cases.append(make_case("linear_s8_grad_weight", [d, s8(xl), s8(el), _mask(rng, out_n, i // 4 + 1),
                                                         out("i", in_n * out_n), out("i", out_n)], lab))
        cases.append(make_case("linear_s8_grad_weight_f32", [d, s8(xl), s8(el), _mask(rng, out_n, i // 4 + 2),
                                                             ws, bs, _f32_acc(rng, in_n * out_n, i),
                                                             _f32_acc(rng, out_n, i + 2)], lab))
    # max-pool grad with disjoint windows (stride >= kernel: the kernel's direct
    # path): full and border-clipped 2x2 windows, inputs no window covers
    # (7 -> 3), other kernel sizes; errors with and without a routed -128 (shift
    # 1 then), ties in x (the first maximum wins)
    for j, (in_h, in_w, k, s, pad) in enumerate([(14, 14, 2, 2, 0), (7, 7, 2, 2, 0), (7, 6, 2, 2, 1),
                                                 (9, 8, 3, 3, 1), (5, 9, 2, 3, 0), (6, 6, 1, 2, 0)]):
        out_h, out_w = (in_h + 2 * pad - k) // s + 1, (in_w + 2 * pad - k) // s + 1
        c = [16, 3, 5, 4, 1, 7][j]
        g = ConvGeom(in_h, in_w, c, out_h, out_w, c, k, k, s, s, pad, pad, c)
        for ek in ("uniform", "sparse", "no-128"):
            e = _int8(rng, g.n_out, "sparse" if ek == "sparse" else "uniform")
            if ek == "no-128":
                e = np.maximum(e, -127).astype(np.int8)
            else:
                e[0] = -128
            x = _int8(rng, g.n_in, ["uniform", "ties"][(j + len(ek)) % 2])
            args = [i32(g.pool_desc()), s8(x), s8(e), out("i", g.n_in), out("Y", g.n_in)]
            label = f"disjoint: {in_h}x{in_w}x{c} k{k} s{s} p{pad} {ek}"
            cases.append(make_case("maxpool_s8_grad_input", args, label))
    # the same windows with the activation mask (the 2x2 path four channels a word on
    # armv7e-m): relu, relu6 and none, partly kept; in place over the activation and not
    ra = np.random.default_rng(seed + 1)
    for j, (in_h, in_w, k, s, pad) in enumerate([(14, 14, 2, 2, 0), (7, 7, 2, 2, 0), (7, 6, 2, 2, 1),
                                                 (9, 8, 3, 3, 1), (5, 9, 2, 3, 0), (6, 6, 1, 2, 0),
                                                 (4, 8, 2, 2, 0)]):
        out_h, out_w = (in_h + 2 * pad - k) // s + 1, (in_w + 2 * pad - k) // s + 1
        c = [16, 3, 5, 4, 1, 7, 8][j]
        g = ConvGeom(in_h, in_w, c, out_h, out_w, c, k, k, s, s, pad, pad, c)
        for mi, (lo, hi) in enumerate(((-20, 128), (-20, 60), (-129, 128), (0, 1))):
            e = _int8(ra, g.n_out, ["uniform", "sparse"][mi % 2])
            if mi == 1:
                e[0] = -128
            t = _int8(ra, g.n_in, "ties") if (j + mi) % 3 == 2 else _near(ra, g.n_in, [lo, hi, 0])
            for op in ("maxpool_s8_grad_input_act", "avgpool_s8_grad_input_act",
                       "maxpool_s8_grad_input_act_l1"):
                l1 = op.endswith("_l1")
                inplace = (j + mi + (op[0] == "m") + l1) % 2 == 0
                args = [i32(g.pool_desc()), s8(t, "Y" if inplace else "y"), s8(e), lo, hi,
                        Alias(1) if inplace else out("Y", g.n_in)] + ([out("i", c)] if l1 else [])
                label = f"disjoint act: {in_h}x{in_w}x{c} k{k} s{s} p{pad} ({lo}, {hi})" + (
                    " in place" if inplace else "")
                cases.append(make_case(op, args, label))
    # lut grad: e = -128 on |dtable| = 2^24 - 1, both signs (|acc| = 2^31 - 128)
    dt = np.r_[np.full(128, oracle.LUT_DMAX), np.full(128, -oracle.LUT_DMAX)]
    xs8 = s8(np.array([-128, -1, 0, 127, 5]))
    cases.append(make_case("lut_s8_grad_input", [xs8, s8(np.full(5, -128)), i32(dt), out("Y", 5)],
                           "limit: |dtable| 2^24 - 1"))
    return cases


# --------------------------------------------------------------------------
# driver-only cases: the integer helpers of mt_quant.h, element-wise (C driver only)


def _spec_dyn_shift(m: int) -> int:
    s = 0
    while (m + (1 << (s - 1) if s else 0)) >> s > 127:
        s += 1
    return s


def _mixed_i32(rng: Rng, n: int) -> NDArray[np.int64]:
    v = np.where(rng.random(n) < 0.5, rng.integers(INT32_MIN, INT32_MAX, n, endpoint=True),
                 rng.integers(-(2**16), 2**16, n) >> rng.integers(0, 16, n))
    v[rng.random(n) < 0.05] = INT32_MIN
    v[rng.random(n) < 0.05] = INT32_MAX
    v[rng.random(n) < 0.03] = 0
    return v


def _multiplier_values(rng: Rng, n: int) -> NDArray[np.int64]:
    m = rng.integers(0, 2**31, n)
    pick = rng.random(n)
    m[pick < 0.3] = rng.integers(2**30, 2**31, int(np.sum(pick < 0.3)))
    special = np.array([0, 1, 2**30 - 1, 2**30, 2**30 + 1, INT32_MAX])
    m[pick > 0.85] = rng.choice(special, int(np.sum(pick > 0.85)))
    return m


def gen_helper_requant(rng: Rng, i: int) -> Case:
    n = 4000
    acc, m = _mixed_i32(rng, n), _multiplier_values(rng, n)
    sh = np.where(rng.random(n) < 0.5, rng.integers(-31, 32, n), rng.integers(-3, 4, n))
    exp = oracle.requant(acc, m, sh)
    return Case("_requant", [i32(acc), i32(m), i32(sh), out("i", n)], "helper",
                expected=Expected(None, [exp.astype(np.int32)]))


def gen_helper_doubling_high_mul(rng: Rng, i: int) -> Case:
    n = 4000
    a, b = _mixed_i32(rng, n), _multiplier_values(rng, n)
    exp = (a * b + 2**30) >> 31
    return Case("_doubling_high_mul", [i32(a), i32(b), out("i", n)], "helper",
                expected=Expected(None, [exp.astype(np.int32)]))


def gen_helper_udiv(rng: Rng, i: int) -> Case:
    n = 4000
    num = rng.integers(0, 2**32, n)
    num[rng.random(n) < 0.05] = 2**32 - 1
    den = np.where(rng.random(n) < 0.5, rng.integers(1, 2**32, n), rng.integers(1, 1000, n))
    den[rng.random(n) < 0.05] = 1
    den[rng.random(n) < 0.05] = 2**32 - 1
    pick = rng.random(n) < 0.1  # exact multiples and off-by-one numerators
    num[pick] = np.minimum(den[pick] * rng.integers(0, 5, int(pick.sum())), 2**32 - 1)
    exp = num // den
    return Case("_udiv", [u32(num), u32(den), out("I", n)], "helper",
                expected=Expected(None, [exp.astype(np.uint32)]))


def gen_helper_dyn_shift(rng: Rng, i: int) -> Case:
    s = np.arange(0, 26)
    bounds = np.concatenate([(255 << s) >> 1, ((255 << s) >> 1) + 1, ((255 << s) >> 1) - 1])
    m = np.concatenate([bounds, rng.integers(0, 2**32, 1000), 2**32 - 1 - rng.integers(0, 2**25, 200),
                        [0, 1, 127, 128, 2**31, 2**32 - 1]])
    m = m[(m >= 0) & (m < 2**32)]
    exp = np.array([_spec_dyn_shift(int(v)) for v in m])
    return Case("_dyn_shift", [u32(m), out("i", m.size)], "helper",
                expected=Expected(None, [exp.astype(np.int32)]))


HELPERS: dict[str, Callable[[Rng, int], Case]] = {
    "_requant": gen_helper_requant,
    "_doubling_high_mul": gen_helper_doubling_high_mul,
    "_udiv": gen_helper_udiv,
    "_dyn_shift": gen_helper_dyn_shift,
}


def generate_helpers(n: int, seed: int) -> list[Case]:
    """n cases per integer helper (each a few thousand values); C driver only."""
    out_cases = []
    for k, gen in enumerate(HELPERS.values()):
        rng = np.random.default_rng([seed, 1000 + k])
        out_cases += [gen(rng, i) for i in range(n)]
    return out_cases


def generate(op: str, n: int, seed: int) -> list[Case]:
    """n seeded cases of one op (independent of the other ops' counts)."""
    rng = np.random.default_rng([seed, ALL_OPS.index(op)])
    return [GENERATORS[op](rng, i) for i in range(n)]


def generate_all(seed: int, per_op: int, ops: Sequence[str] = ALL_OPS) -> dict[str, list[Case]]:
    return {op: generate(op, per_op, seed) for op in ops}
