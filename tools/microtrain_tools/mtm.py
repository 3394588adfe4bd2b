"""Reader, writer and validator of the ``.mtm`` model file (docs/format.md; the layout: mtm_layout.py).

Pure Python + numpy. ``write`` validates a :class:`Model` and returns the
canonical bytes; ``read`` checks the envelope (length, magic, version, CRC) and
the layout of the bytes, then runs the same semantic validation. Every
rejection is a ``ValueError`` whose message says what is wrong and where
(``tensor 3: ...``, ``layer 2 'conv1': ...``).

``read(write(m))`` equals ``m`` and ``write(read(b)) == b`` for every valid
file ``b`` written by this module (files are canonical).
"""

from __future__ import annotations

import math
import os
import struct
import tempfile
import zlib
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from microtrain_tools import mtm_layout as L

__all__ = [
    "Act",
    "DType",
    "Kind",
    "Layer",
    "Model",
    "Op",
    "Quant",
    "Tensor",
    "load",
    "read",
    "save",
    "save_bytes",
    "summary",
    "validate",
    "write",
]

# The layout (sizes, offsets, codes, limits) is written once, in mtm_layout.py.
MAGIC = L.MAGIC
VERSION_MAJOR = L.VERSION_MAJOR
VERSION_MINOR = L.VERSION_MINOR
HEADER_SIZE = L.HEADER_SIZE
TENSOR_ENTRY = L.TENSOR_ENTRY
LAYER_ENTRY = L.LAYER_ENTRY
N_PARAMS_MAX = L.N_PARAMS_MAX
PARAMS_OFF = L.PARAMS_OFF
MAX_TENSORS = L.MAX_TENSORS
MAX_LAYERS = L.MAX_LAYERS
MAX_DIM = L.MAX_DIM
MAX_ELEMS = L.MAX_ELEMS
MAX_NAME = L.MAX_NAME
# Runtime limits (docs/format.md, "Runtime limits"): a file within them runs inference
# and a training step; the C loader and the device's pure-Python loader check the same.
TRAINER_TAG = L.TRAINER_TAG
ADAM_TAG = L.ADAM_TAG
SCALE_MIN = 2.0**-L.SCALE_EXP
SCALE_MAX = 2.0**L.SCALE_EXP
MAX_GAP_HW = L.MAX_GAP_HW
MAX_GRAD_TERMS = L.MAX_GRAD_TERMS
MAX_CLASSES = L.MAX_CLASSES
# a SOFTMAX layer's output quantisation (softmax_s8_forward's)
SOFTMAX_SCALE = struct.unpack("<f", struct.pack("<I", L.SOFTMAX_SCALE_BITS))[0]
SOFTMAX_ZP = L.SOFTMAX_ZP
MAX_FUSED = L.MAX_FUSED
NONE = L.NONE
INT32_MAX = 2**31 - 1

FLAG_TRAINED = L.FLAG_TRAINED
FLAG_HAS_STATE = L.FLAG_HAS_STATE
TFLAG_SIGNAL_1D = L.TFLAG_SIGNAL_1D
LFLAG_TRAINED = L.LFLAG_TRAINED

_HEADER = struct.Struct(L.HEADER_FMT)
_TENSOR = struct.Struct(L.TENSOR_FMT)
_LAYER = struct.Struct(L.LAYER_FMT)  # the HH: state[4], state[5] (1.3; else a reserved 0)
NONE16 = L.NONE16  # an absent state[4] / state[5] in a 1.3 file
assert _HEADER.size == HEADER_SIZE and _TENSOR.size == TENSOR_ENTRY and _LAYER.size == LAYER_ENTRY

_NP_DTYPE = {"INT8": "<i1", "INT32": "<i4", "FLOAT32": "<f4", "UINT8": "u1"}


class _DType(IntEnum):
    @property
    def np(self) -> np.dtype:
        return np.dtype(_NP_DTYPE[self.name])

    @property
    def itemsize(self) -> int:
        return self.np.itemsize


# The codes, by the host's names (members as in the layout's tables).
DType = _DType("DType", [(h, v) for _, h, v in L.DTYPES], module=__name__)
Kind = IntEnum("Kind", [(h, v) for _, h, v in L.KINDS], module=__name__)
Quant = IntEnum("Quant", [(h, v) for _, h, v in L.QUANTS], module=__name__)
Op = IntEnum("Op", [(o[1], o[2]) for o in L.OPS], module=__name__)
Act = IntEnum("Act", [(h, v) for _, h, v in L.ACTS], module=__name__)

N_PARAMS = {Op(o[2]): o[3] for o in L.OPS}
N_INPUTS = {Op(o[2]): o[4] for o in L.OPS}
# the first minor version of each op newer than 1.0
OP_MINOR = {Op(o[2]): o[5] for o in L.OPS if o[5]}
WEIGHTED = (Op.CONV2D, Op.LINEAR)


def _align8(x: int) -> int:
    return (x + 7) & ~7


@dataclass
class Tensor:
    """One tensor-table entry; ``data`` holds CONST/STATE values (shape ``shape``)."""

    dtype: DType
    shape: tuple[int, ...]
    kind: Kind = Kind.ACTIVATION
    quant: Quant = Quant.NONE
    scale: float = 0.0
    zero_point: int = 0
    qscales: int | None = None
    signal_1d: bool = False
    data: NDArray | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tensor):
            return NotImplemented
        same = (self.dtype, tuple(self.shape), self.kind, self.quant, self.scale, self.zero_point,
                self.qscales, self.signal_1d) == (other.dtype, tuple(other.shape), other.kind,
                                                  other.quant, other.scale, other.zero_point,
                                                  other.qscales, other.signal_1d)
        if not same or (self.data is None) != (other.data is None):
            return False
        return self.data is None or bool(np.array_equal(self.data, other.data))


@dataclass
class Layer:
    """One layer-table entry. ``params`` is the op's int32 block (the kernel descriptor)."""

    op: Op
    name: str
    inputs: list[int]
    output: int
    params: list[int]
    act: Act = Act.NONE
    weight: int | None = None
    bias: int | None = None
    mult: int | None = None
    shift: int | None = None
    # master weight, master bias, 1st moments of weight / bias (SGD momentum, Adam m),
    # Adam's 2nd moments of weight / bias (format 1.3)
    state: list[int | None] = field(default_factory=lambda: [None] * 6)
    fused: str = ""
    trained: bool = False
    aux: int | None = None  # GRU / LSTM: its CONST tables (the in1 field; docs/format.md)


@dataclass
class Model:
    tensors: list[Tensor]
    layers: list[Layer]
    input: int
    output: int
    trained: bool = False
    has_state: bool = False
    train_steps: int = 0
    # the trainer record of a checkpoint (docs/format.md, "Trainer record"): Trainer.fit's
    # shuffle-generator state, the string pool's last string; None in other files
    trainer_rng: int | None = None
    # with it, for Adam: the float32 bit patterns of beta1^t and beta2^t (bias correction)
    adam_bt: tuple[int, int] | None = None
    # with it, the epochs Trainer.fit completed (None: a record older than the epoch count)
    trainer_epoch: int | None = None

    def layer(self, name: str) -> Layer:
        for ly in self.layers:
            if ly.name == name:
                return ly
        raise KeyError(name)

    def data(self, idx: int | None) -> NDArray:
        if idx is None or self.tensors[idx].data is None:
            raise ValueError(f"tensor {idx} has no data")
        d = self.tensors[idx].data
        assert d is not None
        return d


# --------------------------------------------------------------------------
# semantic validation (shared by read and write)


class _Check:
    def __init__(self, where: str) -> None:
        self.where = where

    def __call__(self, ok: object, why: str) -> None:
        if not ok:
            raise ValueError(f"{self.where}: {why}")


def _f32(x: float) -> float:
    return float(np.float32(x))


def _validate_tensor(m: Model, i: int, t: Tensor) -> None:
    c = _Check(f"tensor {i}")
    c(isinstance(t.dtype, int) and t.dtype in DType._value2member_map_, f"unknown dtype {t.dtype}")
    c(isinstance(t.kind, int) and t.kind in Kind._value2member_map_, f"unknown kind {t.kind}")
    c(isinstance(t.quant, int) and t.quant in Quant._value2member_map_, f"unknown quant {t.quant}")
    dtype, kind, quant = DType(t.dtype), Kind(t.kind), Quant(t.quant)
    c(1 <= len(t.shape) <= 4, f"rank {len(t.shape)} outside 1..4")
    c(all(isinstance(d, (int, np.integer)) and 1 <= d <= MAX_DIM for d in t.shape),
      f"shape {tuple(t.shape)}: dims must be in 1..{MAX_DIM}")
    if t.signal_1d:
        c(len(t.shape) == 3 and t.shape[0] == 1, "SIGNAL_1D needs shape (1, L, C)")
    if kind == Kind.ACTIVATION:
        c(dtype == DType.INT8, "activation must be int8")
        c(t.data is None, "activation must not have data")
        c(quant == Quant.PER_TENSOR, "activation must be PER_TENSOR quantised")
        c(t.numel <= MAX_ELEMS, f"activation of {t.numel} values: larger than 2^26 values")
    else:
        c(t.data is not None, f"{kind.name} tensor without data")
        assert t.data is not None
        c(t.data.dtype == dtype.np, f"data dtype {t.data.dtype} is not {dtype.name}")
        c(t.data.size == t.numel, f"data has {t.data.size} values, shape needs {t.numel}")
        if kind == Kind.STATE:
            c(m.has_state, "STATE tensor in a file without HAS_STATE")
            c(dtype == DType.FLOAT32 and quant == Quant.NONE, "STATE must be float32, quant NONE")
            c(bool(np.all(np.isfinite(t.data))), "STATE value not finite")
        c(quant != Quant.PER_TENSOR, "PER_TENSOR quant is for activations only")
    if quant == Quant.PER_TENSOR:
        s = _f32(t.scale)
        c(SCALE_MIN <= s <= SCALE_MAX, f"scale {t.scale} outside 2^-40..2^40")
        c(-128 <= t.zero_point <= 127, f"zero point {t.zero_point} outside [-128, 127]")
        c(t.qscales is None, "PER_TENSOR must not have qscales")
    else:
        c(t.scale == 0 and t.zero_point == 0, f"{quant.name} quant needs scale 0 and zero point 0")
    if quant == Quant.PER_CHANNEL:
        c(dtype == DType.INT8 and kind == Kind.CONST, "PER_CHANNEL tensor must be an int8 CONST")
        q = t.qscales
        c(q is not None and 0 <= q < len(m.tensors), f"qscales index {q} out of range")
        assert q is not None
        qt = m.tensors[q]
        c(qt.dtype == DType.FLOAT32 and qt.kind == Kind.CONST and qt.quant == Quant.NONE
          and len(qt.shape) == 1 and qt.shape[0] == t.shape[0],
          f"qscales tensor {q} must be a float32 CONST of shape ({t.shape[0]},)")
        if qt.data is not None:
            v = np.asarray(qt.data, dtype=np.float64)
            c(bool(np.all((v >= SCALE_MIN) & (v <= SCALE_MAX))),
              f"qscales tensor {q}: a weight scale outside 2^-40..2^40 (or not finite)")
    elif quant == Quant.BIAS:
        c(dtype == DType.INT32 and kind == Kind.CONST, "BIAS tensor must be an int32 CONST")
        c(t.qscales is None, "BIAS must not have qscales")
    elif quant == Quant.NONE:
        c(t.qscales is None, "quant NONE must not have qscales")


def _geom_ok(c: _Check, in_h: int, in_w: int, out_h: int, out_w: int, k_h: int, k_w: int,
             s_h: int, s_w: int, p_t: int, p_l: int) -> None:
    c(0 <= p_t < k_h and 0 <= p_l < k_w, "padding must satisfy 0 <= pad < k")
    c((out_h - 1) * s_h - p_t < in_h, "last window row starts outside the input")
    c((out_w - 1) * s_w - p_l < in_w, "last window column starts outside the input")


def _act_ok(c: _Check, act: Act, out_zp: int, act_min: int, act_max: int) -> None:
    c(-128 <= act_min <= act_max <= 127, "need -128 <= act_min <= act_max <= 127")
    if act == Act.NONE:
        c(act_min == -128 and act_max == 127, "act none needs act_min -128, act_max 127")
    elif act == Act.RELU:
        c(act_min == out_zp and act_max == 127, "act relu needs act_min == out_zp, act_max 127")
    else:
        c(act_min == out_zp, "act relu6 needs act_min == out_zp")


def _rnn_ok(c: _Check, m: Model, ly: Layer, p: list[int], x: Tensor, y: Tensor) -> None:
    """A GRU or LSTM layer's rules (docs/format.md, mtm_rules_rnn.c). They differ
    in their gate rows (GRU r, z, n; LSTM i, f, g, o), the bytes each step keeps (4H, 6H), the
    requantisations (6H, 8H) and the activation tables before dtanh (768, 1280 bytes)."""
    g, keep, n_rq, lut = (4, 6, 8, 1280) if ly.op == Op.LSTM else (3, 4, 6, 768)
    t_n, d_n, h_n, xzp, _, sh_0, k, m_h, sh_h, m_2, sh_2, m_w, sh_w = p
    c(1 <= t_n <= 32768 and 1 <= d_n <= 32768 and h_n >= 1 and d_n + h_n <= MAX_DIM,
      "T, D, H must be >= 1 with T <= 32768, D <= 32768 and D + H <= 65535")
    c(max(t_n * d_n, t_n * keep * h_n, g * h_n * (d_n + h_n)) <= MAX_ELEMS, "a tensor over 2^26 elements")
    c(-128 <= xzp <= 127 and k >= 0 and min(p[4], m_h, m_2, m_w) >= 0 and -31 <= sh_0 <= 15
      and max(sh_h, sh_2, sh_w) <= 0 and min(sh_h, sh_2, sh_w) >= -31, "descriptor out of range")
    c(x.numel == t_n * d_n and x.shape[-1] == d_n, "input numel != T * D or last dim != D")
    c(y.numel == t_n * h_n and y.shape[-1] == h_n, "output numel != T * H or last dim != H")
    c(xzp == x.zero_point and y.zero_point == 0,
      "x_zp differs from the input's zero point or the output's is not 0")
    assert ly.weight is not None and ly.bias is not None and ly.mult is not None and ly.shift is not None
    w, b, mu, sh = (m.tensors[i] for i in (ly.weight, ly.bias, ly.mult, ly.shift))
    c(w.dtype == DType.INT8 and w.quant == Quant.PER_CHANNEL and tuple(w.shape) == (g * h_n, d_n + h_n),
      f"weight must be int8 PER_CHANNEL of shape ({g}H, D + H)")
    c(b.dtype == DType.INT32 and b.quant == Quant.BIAS and tuple(b.shape) == (4 * h_n,),
      "bias must be int32 BIAS of shape (4H,)")
    c(all(t.dtype == DType.INT32 and t.quant == Quant.NONE and tuple(t.shape) == (n_rq * h_n,)
          for t in (mu, sh)), f"mult / shift must be int32 quant NONE of shape ({n_rq}H,)")
    c(ly.aux is not None and 0 <= ly.aux < len(m.tensors), "tables (in1) missing")
    assert ly.aux is not None
    tab = m.tensors[ly.aux]
    c(tab.kind == Kind.CONST and tab.dtype == DType.INT8 and tab.quant == Quant.NONE
      and tuple(tab.shape) == (lut + 1024,),
      f"tables (in1) must be a CONST int8 quant NONE tensor of shape ({lut + 1024},)")
    assert b.data is not None and mu.data is not None and sh.data is not None and tab.data is not None
    c(bool(np.all(np.abs(b.data.astype(np.int64)) <= 2**30)), "|bias| > 2^30")
    c(bool(np.all(mu.data >= 0) and np.all(np.abs(sh.data.astype(np.int64)) <= 31)),
      "mult < 0 or shift outside [-31, 31]")
    dtanh = np.frombuffer(tab.data.astype(np.int8).tobytes()[lut:], "<i4")
    c(bool(np.all(dtanh >= 0)), f"dtanh (tables[{lut}:]) < 0")


def _validate_layer(m: Model, j: int, ly: Layer, produced: set[int]) -> None:
    c = _Check(f"layer {j} '{ly.name}'")
    c(isinstance(ly.op, int) and ly.op in Op._value2member_map_, f"unknown op {ly.op}")
    op = Op(ly.op)
    c = _Check(f"layer {j} '{ly.name}' ({op.name})")
    c(isinstance(ly.act, int) and ly.act in Act._value2member_map_, f"unknown act {ly.act}")
    act = Act(ly.act)
    c(act == Act.NONE or op in (*WEIGHTED, Op.ADD), "fused activation on an op without one")
    dilated = op == Op.CONV2D and len(ly.params) == 19  # dil_h, dil_w after the 17 (format 1.2)
    c(not dilated or tuple(ly.params[17:]) != (1, 1), "19-param CONV2D needs a dilation above 1")
    multi = op == Op.MATMUL and len(ly.params) == 13  # heads before the factor (format 1.5)
    c(len(ly.params) == N_PARAMS[op] or dilated or multi, f"{len(ly.params)} params, expected {N_PARAMS[op]}")
    c(not multi or int(ly.params[11]) >= 2, "13-param MATMUL needs heads above 1")
    c(all(-(2**31) <= int(v) <= INT32_MAX for v in ly.params), "param outside int32")
    c(len(ly.inputs) == N_INPUTS[op], f"{len(ly.inputs)} inputs, expected {N_INPUTS[op]}")
    c(not ly.trained or m.trained, "TRAINED layer in a file without TRAINED")
    n_t = len(m.tensors)
    for k, idx in enumerate([*ly.inputs, ly.output]):
        c(isinstance(idx, (int, np.integer)) and 0 <= idx < n_t, f"tensor index {idx} out of range")
        c(m.tensors[idx].kind == Kind.ACTIVATION, f"tensor {idx} is not an activation")
        if k < len(ly.inputs):
            c(idx in produced, f"input tensor {idx} is neither the model input nor an earlier output")
    c(ly.output not in produced, f"output tensor {ly.output} is already produced")
    slots = {"weight": ly.weight, "bias": ly.bias, "mult": ly.mult, "shift": ly.shift}
    for nm, idx in slots.items():
        if op == Op.LUT and nm in ("weight", "bias"):  # the table and the derivative table
            c(idx is not None and 0 <= idx < n_t, f"{nm} tensor index {idx} out of range")
            assert idx is not None
            c(m.tensors[idx].kind == Kind.CONST, f"{nm} tensor {idx} is not a CONST")
        elif op in WEIGHTED or op in (Op.GRU, Op.LSTM):
            c(idx is not None and 0 <= idx < n_t, f"{nm} tensor index {idx} out of range")
            assert idx is not None
            c(m.tensors[idx].kind == Kind.CONST, f"{nm} tensor {idx} is not a CONST")
        else:
            c(idx is None, f"{nm} given for an op without one")
    c(len(ly.state) == 6, "state must have 6 slots")
    for s, idx in enumerate(ly.state):
        if idx is None:
            continue
        c(s < 4 or ly.state[s - 2] is not None, f"state[{s}] (second moments) set without state[{s - 2}]")
        c(m.has_state and op in WEIGHTED, f"state[{s}] set without HAS_STATE or on a non-weighted op")
        c(s < 4 or idx < NONE16, f"state[{s}] tensor index {idx} does not fit its u16")
        c(0 <= idx < n_t and m.tensors[idx].kind == Kind.STATE, f"state[{s}] tensor {idx} is not STATE")

    p = [int(v) for v in ly.params]
    x = m.tensors[ly.inputs[0]]
    y = m.tensors[ly.output]
    if op in WEIGHTED:
        assert ly.weight is not None and ly.bias is not None and ly.mult is not None
        assert ly.shift is not None
        w, b = m.tensors[ly.weight], m.tensors[ly.bias]
        mu, sh = m.tensors[ly.mult], m.tensors[ly.shift]
        if op == Op.CONV2D:
            in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, p_t, p_l, g = p[:13]
            in_zp, out_zp, a_min, a_max = p[13:17]
            d_h, d_w = p[17:19] if dilated else (1, 1)
            c(1 <= d_h <= 255 and 1 <= d_w <= 255, "dil_h, dil_w must be in 1..255")
            c(min(in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w, g) >= 1, "sizes must be >= 1")
            # The kernels' own limits (checks.c): dims and strides <= 65535, tensors <= 2^26 values.
            c(max(in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, s_h, s_w) <= MAX_DIM,
              "k_h, k_w, stride_h, stride_w must be in 1..65535")
            c(max(in_h * in_w * in_c, out_h * out_w * out_c) <= MAX_ELEMS, "tensor larger than 2^26 values")
            c(out_c * k_h * k_w * (in_c // g) <= MAX_ELEMS, "weight larger than 2^26 values")
            c(in_c % g == 0 and out_c % g == 0, "in_c and out_c must be divisible by groups")
            ke_h, ke_w = (k_h - 1) * d_h + 1, (k_w - 1) * d_w + 1  # the dilated window's extent
            _geom_ok(c, in_h, in_w, out_h, out_w, ke_h, ke_w, s_h, s_w, p_t, p_l)
            c(k_h * k_w * (in_c // g) <= 32768, "k_h * k_w * in_c / groups > 32768")
            c(out_h * out_w <= 65536, "out_h * out_w > 65536")
            terms = k_h * k_w * (out_c // g)
            c(terms <= MAX_GRAD_TERMS,
              f"k_h * k_w * out_c / groups = {terms} > {MAX_GRAD_TERMS} (grad-input bound)")
            c(tuple(x.shape) == (in_h, in_w, in_c), f"input shape {tuple(x.shape)} != {(in_h, in_w, in_c)}")
            c(tuple(y.shape) == (out_h, out_w, out_c),
              f"output shape {tuple(y.shape)} != {(out_h, out_w, out_c)}")
            wshape: tuple[int, ...] = (out_c, k_h, k_w, in_c // g)
        else:
            in_n, out_c, in_zp, out_zp, a_min, a_max = p
            c(in_n >= 1 and out_c >= 1, "sizes must be >= 1")
            c(in_n <= 32768, "in_n > 32768")
            c(out_c <= MAX_DIM and in_n * out_c <= MAX_ELEMS,
              "out_n > 65535 or weight larger than 2^26 values")
            c(x.numel == in_n, f"input has {x.numel} values, in_n is {in_n}")
            c(tuple(y.shape) == (out_c,), f"output shape {tuple(y.shape)} != {(out_c,)}")
            wshape = (out_c, in_n)
        c(tuple(w.shape) == wshape, f"weight shape {tuple(w.shape)} != {wshape}")
        c(w.dtype == DType.INT8 and w.quant == Quant.PER_CHANNEL, "weight must be int8 PER_CHANNEL")
        c(b.dtype == DType.INT32 and b.quant == Quant.BIAS and tuple(b.shape) == (out_c,),
          f"bias must be int32 BIAS of shape ({out_c},)")
        for nm, t in (("mult", mu), ("shift", sh)):
            c(t.dtype == DType.INT32 and t.quant == Quant.NONE and tuple(t.shape) == (out_c,),
              f"{nm} must be int32 quant NONE of shape ({out_c},)")
        assert b.data is not None and mu.data is not None and sh.data is not None
        c(bool(np.all(np.abs(b.data.astype(np.int64)) <= 2**30)), "|bias| > 2^30")
        c(bool(np.all(mu.data >= 0)), "negative multiplier")
        c(bool(np.all((sh.data >= -31) & (sh.data <= 31))), "shift outside [-31, 31]")
        c(in_zp == x.zero_point, f"in_zp {in_zp} != input zero point {x.zero_point}")
        c(out_zp == y.zero_point, f"out_zp {out_zp} != output zero point {y.zero_point}")
        _act_ok(c, act, out_zp, a_min, a_max)
        shapes = [wshape, (out_c,)] * 3
        for s, idx in enumerate(ly.state):
            if idx is not None:
                st = m.tensors[idx]
                c(st.dtype == DType.FLOAT32 and tuple(st.shape) == shapes[s],
                  f"state[{s}] must be float32 of shape {shapes[s]}")
    elif op == Op.LUT:
        assert ly.weight is not None and ly.bias is not None
        n, z_in, z_out, d_shift = p
        c(tuple(x.shape) == tuple(y.shape), "input and output shapes differ")
        c(n == x.numel, f"n {n} != {x.numel}")
        c((z_in, z_out) == (x.zero_point, y.zero_point), "zero points differ from the tensors'")
        c(0 <= d_shift <= 24, "d_shift outside [0, 24]")
        tb, dt = m.tensors[ly.weight], m.tensors[ly.bias]
        c(tb.dtype == DType.INT8 and tb.quant == Quant.NONE and tuple(tb.shape) == (256,),
          "table must be int8 quant NONE of shape (256,)")
        c(dt.dtype == DType.INT32 and dt.quant == Quant.NONE and tuple(dt.shape) == (256,),
          "dtable must be int32 quant NONE of shape (256,)")
        assert dt.data is not None
        c(bool(np.all(np.abs(dt.data.astype(np.int64)) <= 2**24 - 1)), "|dtable| > 2^24 - 1")
    elif op == Op.CONCAT:
        x2 = m.tensors[ly.inputs[1]]
        hw, c1, c2, z1, z2, zo, m1, sh1, m2, sh2 = p
        c(1 <= hw <= MAX_ELEMS and c1 >= 1 and c2 >= 1 and c1 + c2 <= MAX_DIM
          and hw * (c1 + c2) <= MAX_ELEMS, "sizes outside the limits")
        c((x.shape[-1], x2.shape[-1], y.shape[-1]) == (c1, c2, c1 + c2),
          "channel (last) dims differ from c1, c2, c1 + c2")
        c((x.numel, x2.numel, y.numel) == (hw * c1, hw * c2, hw * (c1 + c2)), "numel != hw * channels")
        c((z1, z2, zo) == (x.zero_point, x2.zero_point, y.zero_point), "zero points differ from the tensors'")
        c(m1 >= 0 and m2 >= 0, "negative multiplier")
        c(-31 <= sh1 <= 7 and -31 <= sh2 <= 7, "shift outside [-31, 7]")
    elif op == Op.MUL:
        x2 = m.tensors[ly.inputs[1]]
        hw, ch, hw2, c2, z1, z2, zo, mu, shm, a_min, a_max = p
        c(1 <= hw and 1 <= ch <= MAX_DIM and hw * ch <= MAX_ELEMS, "hw, c outside the limits")
        c(hw2 in (1, hw) and c2 in (1, ch), "hw2 must be 1 or hw, c2 1 or c")
        c((hw // hw2) * (ch // c2) <= MAX_DIM, "a broadcast x2 value may be read by at most 65535 elements")
        c(tuple(x.shape) == tuple(y.shape) and x.numel == hw * ch and x.shape[-1] == ch,
          "input / output shapes differ from each other or from hw, c")
        c(x2.numel == hw2 * c2 and x2.shape[-1] == c2, "second input's shape does not match hw2, c2")
        c((z1, z2, zo) == (x.zero_point, x2.zero_point, y.zero_point), "zero points differ from the tensors'")
        c(mu >= 0 and -31 <= shm <= 15, "multiplier negative or shift outside [-31, 15]")
        _act_ok(c, act, zo, a_min, a_max)
    elif op == Op.LAYERNORM:
        rows, ch, zi, zo, eps_q, mu, shm = p
        c(1 <= ch <= 256 and rows >= 1 and rows * ch <= MAX_ELEMS, "need 1 <= c <= 256, rows * c <= 2^26")
        c(x.numel == y.numel == rows * ch and x.shape[-1] == y.shape[-1] == ch,
          "input / output numel != rows * c or last dim != c")
        c((zi, zo) == (x.zero_point, y.zero_point), "zero points differ from the tensors'")
        c(1 <= eps_q <= INT32_MAX and mu >= 0 and -31 <= shm <= 31, "eps_q, m or sh out of range")
    elif op == Op.SOFTMAX:
        outer, n, inner = p
        c(1 <= n <= 256 and outer >= 1 and inner >= 1 and outer * n * inner <= MAX_ELEMS,
          "need 1 <= n <= 256, outer, inner >= 1, outer * n * inner <= 2^26")
        c(tuple(x.shape) == tuple(y.shape) and x.numel == outer * n * inner,
          "input and output shapes differ or numel != outer * n * inner")
        c(_f32(y.scale) == SOFTMAX_SCALE and y.zero_point == SOFTMAX_ZP,
          "output quantisation must be scale 1/256, zero point -128")  # (SOFTMAX_SCALE, SOFTMAX_ZP)
    elif op in (Op.GRU, Op.LSTM):
        _rnn_ok(c, m, ly, p, x, y)
    elif op == Op.MATMUL:  # the descriptor (heads only with 13 params), then the factor's float32 bits
        x2 = m.tensors[ly.inputs[1]]
        rows, inner, cols, tb, za, zb, zo, mu, shm, a_min, a_max = p[:11]
        nh, fbits = (p[11], p[12]) if len(p) == 13 else (1, p[11])
        c(1 <= rows <= MAX_DIM and 1 <= cols <= MAX_DIM and 1 <= inner <= 32768,
          "rows, cols, inner out of range")
        c(1 <= nh <= 256, "heads must be in 1..256")
        c(nh * max(rows * inner, cols * inner, rows * cols) <= MAX_ELEMS,
          "tensor too large (more than 2^26 elements)")
        c(tb in (0, 1), "tb must be 0 or 1")
        # the last dims of the head layouts (numerics.md): tb 1 splits a's and b's values into the
        # heads and stacks y's; tb 0 stacks a's and splits b's and y's columns
        # (one row: a vector, also as a column of one value per token)
        a_last = x.shape[-1] == (nh if tb else 1) * inner or (rows, x.shape[-1]) == (1, 1)
        c(x.numel == nh * rows * inner and a_last, "first input's numel != heads * rows * inner or last dim "
          "!= inner (heads * inner with tb, 1 or inner for one row)")
        c(x2.numel == nh * inner * cols and x2.shape[-1] == nh * (inner if tb else cols),
          "second input's numel != heads * inner * cols or last dim != heads * cols (heads * inner with tb)")
        c(y.numel == nh * rows * cols and y.shape[-1] == (1 if tb else nh) * cols,
          "output numel != heads * rows * cols or last dim != cols (heads * cols without tb)")
        c((za, zb, zo) == (x.zero_point, x2.zero_point, y.zero_point), "zero points differ from the tensors'")
        c(mu >= 0 and -31 <= shm <= 31, "multiplier negative or shift outside [-31, 31]")
        c(L.SCALE_MIN_BITS <= (fbits & 0xFFFFFFFF) <= L.SCALE_MAX_BITS, "factor outside [2^-40, 2^40]")
        _act_ok(c, act, zo, a_min, a_max)
    elif op == Op.UPSAMPLE:
        in_h, in_w, ch, out_h, out_w, f_h, f_w, mode, zp = p
        c(min(in_h, in_w, ch, out_h, out_w) >= 1 and max(in_h, in_w, ch, out_h, out_w) <= MAX_DIM,
          "sizes outside 1..65535")
        c(1 <= f_h <= 255 and 1 <= f_w <= 255 and (in_h - 1) * f_h + 1 <= out_h <= in_h * f_h
          and (in_w - 1) * f_w + 1 <= out_w <= in_w * f_w, "factors outside 1..255 or out size not matching")
        c(max(in_h * in_w * ch, out_h * out_w * ch) <= MAX_ELEMS, "tensor larger than 2^26 values")
        c(mode in (0, 1), f"mode {mode} not 0 or 1")
        c(zp == x.zero_point, f"zp {zp} != input zero point {x.zero_point}")
        c(tuple(x.shape) == (in_h, in_w, ch), f"input shape {tuple(x.shape)} != {(in_h, in_w, ch)}")
        c(tuple(y.shape) == (out_h, out_w, ch), f"output shape {tuple(y.shape)} != {(out_h, out_w, ch)}")
    elif op in (Op.RELU, Op.RELU6):
        c(tuple(x.shape) == tuple(y.shape), "input and output shapes differ")
        c(p[0] == x.numel, f"n {p[0]} != {x.numel}")
        c(p[1] == x.zero_point, f"zp {p[1]} != input zero point {x.zero_point}")
        if op == Op.RELU6:
            c(p[1] <= p[2] <= 127, "need zp <= q6 <= 127")
    elif op in (Op.MAXPOOL, Op.AVGPOOL):
        in_h, in_w, ch, out_h, out_w, k_h, k_w, s_h, s_w, p_t, p_l = p
        c(min(in_h, in_w, ch, out_h, out_w, k_h, k_w, s_h, s_w) >= 1, "sizes must be >= 1")
        c(max(in_h, in_w, ch, out_h, out_w, k_h, k_w, s_h, s_w) <= MAX_DIM,
          "k_h, k_w, stride_h, stride_w must be in 1..65535")
        c(max(in_h * in_w * ch, out_h * out_w * ch) <= MAX_ELEMS, "tensor larger than 2^26 values")
        _geom_ok(c, in_h, in_w, out_h, out_w, k_h, k_w, s_h, s_w, p_t, p_l)
        c(k_h * k_w <= 255, "k_h * k_w > 255")
        c(tuple(x.shape) == (in_h, in_w, ch), f"input shape {tuple(x.shape)} != {(in_h, in_w, ch)}")
        c(tuple(y.shape) == (out_h, out_w, ch), f"output shape {tuple(y.shape)} != {(out_h, out_w, ch)}")
    elif op == Op.GLOBAL_AVGPOOL:
        hw, ch = p
        c(hw >= 1 and ch >= 1, "sizes must be >= 1")
        c(hw <= MAX_GAP_HW, f"hw {hw} > {MAX_GAP_HW} (global_avgpool positions)")
        c(len(x.shape) == 3 and x.shape[0] * x.shape[1] == hw and x.shape[2] == ch,
          f"input shape {tuple(x.shape)} does not match hw={hw}, c={ch}")
        c(tuple(y.shape) == (1, 1, ch), f"output shape {tuple(y.shape)} != {(1, 1, ch)}")
    else:  # ADD
        x2 = m.tensors[ly.inputs[1]]
        n, z1, z2, zo, m1, sh1, m2, sh2, mo, sho, ls, a_min, a_max = p
        c(tuple(x.shape) == tuple(x2.shape) == tuple(y.shape), "inputs and output shapes differ")
        c(n == y.numel, f"n {n} != {y.numel}")
        c(n <= MAX_ELEMS, "n larger than 2^26")
        c((z1, z2, zo) == (x.zero_point, x2.zero_point, y.zero_point), "zero points differ from the tensors'")
        c(0 <= ls <= 22, "left_shift outside [0, 22]")
        c(sh1 <= 0 and sh2 <= 0, "input shifts must be <= 0")
        c(all(-31 <= s <= 31 for s in (sh1, sh2, sho)), "shift outside [-31, 31]")
        c(min(m1, m2, mo) >= 0, "negative multiplier")
        _act_ok(c, act, zo, a_min, a_max)
    if op in (Op.RELU, Op.RELU6, Op.MAXPOOL, Op.AVGPOOL, Op.GLOBAL_AVGPOOL, Op.UPSAMPLE):
        c(_f32(x.scale) == _f32(y.scale) and x.zero_point == y.zero_point,
          "input and output quantisation differ")


def validate(m: Model) -> None:
    """Raise ValueError naming the first rule of docs/format.md that ``m`` breaks."""
    c = _Check("model")
    c(1 <= len(m.tensors) <= MAX_TENSORS, f"{len(m.tensors)} tensors, need 1..{MAX_TENSORS}")
    c(1 <= len(m.layers) <= MAX_LAYERS, f"{len(m.layers)} layers, need 1..{MAX_LAYERS}")
    c(0 <= m.input < len(m.tensors), f"input index {m.input} out of range")
    c(0 <= m.output < len(m.tensors), f"output index {m.output} out of range")
    c(m.tensors[m.input].kind == Kind.ACTIVATION, "input is not an activation")
    c(0 <= m.train_steps <= 0xFFFFFFFF, "train_steps outside u32")
    c(m.trained or m.train_steps == 0, "train_steps without TRAINED")
    c(m.adam_bt is None or m.trainer_rng is not None, "adam_bt without trainer_rng (its record holds both)")
    for i, t in enumerate(m.tensors):
        _validate_tensor(m, i, t)
    names: set[str] = set()
    for j, ly in enumerate(m.layers):
        c = _Check(f"layer {j}")
        c(isinstance(ly.name, str) and ly.name, "empty name")
        raw = ly.name.encode("utf-8")
        c(len(raw) <= MAX_NAME and b"\0" not in raw, f"name {ly.name!r} too long or contains NUL")
        c(ly.name not in names, f"duplicate name {ly.name!r}")
        names.add(ly.name)
        fraw = ly.fused.encode("utf-8")
        c(len(fraw) <= MAX_FUSED and b"\0" not in fraw, "fused string too long or contains NUL")
    produced = {m.input}
    consumed: set[int] = set()
    for j, ly in enumerate(m.layers):
        _validate_layer(m, j, ly, produced)
        produced.add(ly.output)
        consumed.update(ly.inputs)
    c = _Check("model")
    c(m.output == m.layers[-1].output, "output is not the last layer's output")
    n_out = m.tensors[m.output].numel
    c(n_out <= MAX_CLASSES, f"output of {n_out} values: more than {MAX_CLASSES} (cross_entropy class limit)")
    for i, t in enumerate(m.tensors):
        if t.kind == Kind.ACTIVATION:
            c(i in produced, f"activation tensor {i} is never produced")
            c(i == m.output or i in consumed, f"activation tensor {i} is never consumed")
    refs: dict[int, int] = {}
    for ly in m.layers:
        for idx in (ly.weight, ly.bias, ly.mult, ly.shift, *ly.state, ly.aux):
            if idx is not None:
                refs[idx] = refs.get(idx, 0) + 1
    for t in m.tensors:
        if t.qscales is not None:
            refs[t.qscales] = refs.get(t.qscales, 0) + 1
    for i, t in enumerate(m.tensors):
        if t.kind != Kind.ACTIVATION:
            c(refs.get(i, 0) == 1, f"tensor {i} is referenced {refs.get(i, 0)} times, expected once")


# --------------------------------------------------------------------------
# bytes


def _idx(v: int | None) -> int:
    return NONE if v is None else int(v)


def _opt(v: int) -> int | None:
    return None if v == NONE else v


def write(m: Model) -> bytes:
    """Validate ``m`` and return its canonical ``.mtm`` bytes."""
    validate(m)
    pool = bytearray(b"\0")
    pool_idx: dict[str, int] = {"": 0}

    def intern(s: str) -> tuple[int, int]:
        raw = s.encode("utf-8")
        if s not in pool_idx:
            pool_idx[s] = len(pool)
            pool.extend(raw + b"\0")
        return pool_idx[s], len(raw)

    minor = max((2 if ly.op == Op.CONV2D and len(ly.params) == 19 else 5 if ly.op == Op.MATMUL and len(
        ly.params) == 13 else OP_MINOR.get(Op(ly.op), 0) for ly in m.layers), default=0)
    # (the oldest version with every op: a dilated conv 1.2, a multi-head MATMUL 1.5)
    if any(s is not None for ly in m.layers for s in ly.state[4:]):
        minor = max(minor, 3)  # Adam's second moments
    layer_bytes = bytearray()
    for ly in m.layers:
        noff, nlen = intern(ly.name)
        foff, flen = intern(ly.fused)
        params = [int(v) for v in ly.params] + [0] * (N_PARAMS_MAX - len(ly.params))
        layer_bytes += _LAYER.pack(
            int(ly.op), int(ly.act), len(ly.params), len(ly.inputs), LFLAG_TRAINED if ly.trained else 0,
            noff, nlen, foff, flen, int(ly.inputs[0]), _idx(ly.inputs[1] if len(ly.inputs) > 1 else ly.aux),
            int(ly.output), _idx(ly.weight), _idx(ly.bias), _idx(ly.mult), _idx(ly.shift),
            *[_idx(s) for s in ly.state[:4]],
            *[(NONE16 if s is None else int(s)) if minor >= 3 else 0 for s in ly.state[4:]], *params)
    if m.trainer_rng is not None:
        pool.extend(TRAINER_TAG + b"%08x" % (m.trainer_rng & 0xFFFFFFFF))
        if m.trainer_epoch is not None:  # right after the state (older records: none)
            pool.extend(b"%08x" % (m.trainer_epoch & 0xFFFFFFFF))
        if m.adam_bt is not None:
            pool.extend(ADAM_TAG + b"%08x%08x" % (m.adam_bt[0] & 0xFFFFFFFF, m.adam_bt[1] & 0xFFFFFFFF))
        pool.extend(b"\0")
    n_t, n_l = len(m.tensors), len(m.layers)
    tt_off = HEADER_SIZE
    lt_off = tt_off + TENSOR_ENTRY * n_t
    s_off = lt_off + LAYER_ENTRY * n_l
    d_off = _align8(s_off + len(pool))
    blob = bytearray()
    tensor_bytes = bytearray()
    for t in m.tensors:
        off = ln = 0
        if t.data is not None:
            raw = np.ascontiguousarray(t.data, dtype=DType(t.dtype).np).tobytes()
            off, ln = d_off + len(blob), len(raw)
            blob += raw + b"\0" * (_align8(len(raw)) - len(raw))
        shape = list(t.shape) + [0] * (4 - len(t.shape))
        tensor_bytes += _TENSOR.pack(int(t.dtype), len(t.shape), int(t.kind), int(t.quant),
                                     TFLAG_SIGNAL_1D if t.signal_1d else 0, *shape, off, ln,
                                     float(t.scale), int(t.zero_point), _idx(t.qscales), 0)
    total = d_off + len(blob) + 4
    flags = (FLAG_TRAINED if m.trained else 0) | (FLAG_HAS_STATE if m.has_state else 0)
    header = _HEADER.pack(MAGIC, VERSION_MAJOR, minor, HEADER_SIZE, flags, total, n_t, tt_off,
                          n_l, lt_off, s_off, len(pool), d_off, len(blob), m.input, m.output,
                          m.train_steps)
    body = header + tensor_bytes + layer_bytes + pool + b"\0" * (d_off - s_off - len(pool)) + blob
    assert len(body) == total - 4
    return bytes(body) + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)


def _string(pool: bytes, off: int, ln: int, what: str) -> str:
    if not (0 <= off and off + ln < len(pool)):
        raise ValueError(f"{what}: string (off {off}, len {ln}) outside the string pool")
    raw = pool[off:off + ln]
    if pool[off + ln] != 0 or b"\0" in raw:
        raise ValueError(f"{what}: string not NUL-terminated or contains NUL")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what}: string is not valid UTF-8") from None


def read(buf: bytes | bytearray | memoryview) -> Model:
    """Parse and fully validate ``.mtm`` bytes (ValueError with the reason otherwise).

    Tensor data are read-only numpy views into (a copy of) ``buf``."""
    b = bytes(buf)
    n = len(b)
    if n < HEADER_SIZE + 4:
        raise ValueError(f"file too short ({n} bytes)")
    (magic, vmaj, vmin, hsize, flags, total, n_t, tt_off, n_l, lt_off, s_off, s_len, d_off, d_len,
     inp, outp, steps) = _HEADER.unpack_from(b, 0)
    if magic != MAGIC:
        raise ValueError(f"bad magic {magic!r}, expected {MAGIC!r}")
    if vmaj != VERSION_MAJOR or vmin > VERSION_MINOR:
        raise ValueError(f"unsupported version {vmaj}.{vmin} (reader is {VERSION_MAJOR}.{VERSION_MINOR})")
    if hsize != HEADER_SIZE:
        raise ValueError(f"header_size {hsize}, expected {HEADER_SIZE}")
    if total != n:
        raise ValueError(f"total_len {total} != file length {n} (truncated or padded file)")
    crc = struct.unpack_from("<I", b, n - 4)[0]
    if zlib.crc32(b[:n - 4]) & 0xFFFFFFFF != crc:
        raise ValueError("CRC32 mismatch")
    if flags & ~(FLAG_TRAINED | FLAG_HAS_STATE):
        raise ValueError(f"unknown header flags 0x{flags:x}")
    if not 1 <= n_t <= MAX_TENSORS:
        raise ValueError(f"n_tensors {n_t} outside 1..{MAX_TENSORS}")
    if not 1 <= n_l <= MAX_LAYERS:
        raise ValueError(f"n_layers {n_l} outside 1..{MAX_LAYERS}")
    if tt_off != HEADER_SIZE:
        raise ValueError(f"tensor_table_off {tt_off} != {HEADER_SIZE}")
    if lt_off != tt_off + TENSOR_ENTRY * n_t:
        raise ValueError(f"layer_table_off {lt_off} != {tt_off + TENSOR_ENTRY * n_t}")
    if s_off != lt_off + LAYER_ENTRY * n_l:
        raise ValueError(f"strings_off {s_off} != {lt_off + LAYER_ENTRY * n_l}")
    if s_len < 1 or s_off + s_len > n - 4:
        raise ValueError(f"strings_len {s_len} out of range")
    if d_off != _align8(s_off + s_len):
        raise ValueError(f"data_off {d_off} != {_align8(s_off + s_len)}")
    if d_len % 8 or d_off + d_len + 4 != n:
        raise ValueError(f"data_len {d_len} inconsistent with total_len {n}")
    if any(b[s_off + s_len:d_off]):
        raise ValueError("non-zero padding after the string pool")
    pool = b[s_off:s_off + s_len]
    if pool[0] != 0:
        raise ValueError("string pool does not start with NUL")
    flags_trained = bool(flags & FLAG_TRAINED)
    if not flags_trained and steps:
        raise ValueError("train_steps without TRAINED")
    if inp >= n_t or outp >= n_t:
        raise ValueError("input/output tensor index out of range")

    tensors: list[Tensor] = []
    prev_end = d_off
    covered = np.zeros(d_len, dtype=bool)
    for i in range(n_t):
        (dt, rank, kind, quant, tflags, s0, s1, s2, s3, off, ln, scale, zp, qs,
         res) = _TENSOR.unpack_from(b, tt_off + TENSOR_ENTRY * i)
        where = f"tensor {i}"
        if dt not in DType._value2member_map_:
            raise ValueError(f"{where}: unknown dtype {dt}")
        if kind not in Kind._value2member_map_:
            raise ValueError(f"{where}: unknown kind {kind}")
        if quant not in Quant._value2member_map_:
            raise ValueError(f"{where}: unknown quant {quant}")
        if not 1 <= rank <= 4:
            raise ValueError(f"{where}: rank {rank} outside 1..4")
        dims = [s0, s1, s2, s3]
        if any(not 1 <= d <= MAX_DIM for d in dims[:rank]) or any(dims[rank:]):
            raise ValueError(f"{where}: bad shape {dims} for rank {rank}")
        if tflags & ~TFLAG_SIGNAL_1D or res:
            raise ValueError(f"{where}: unknown flags or non-zero reserved field")
        dtype = DType(dt)
        shape = tuple(dims[:rank])
        data = None
        if kind == Kind.ACTIVATION:
            if off or ln:
                raise ValueError(f"{where}: activation with data offset/length")
        else:
            need = math.prod(shape) * dtype.itemsize
            if ln != need:
                raise ValueError(f"{where}: data_len {ln} != {need} for shape {shape}")
            if off % 8:
                raise ValueError(f"{where}: data offset {off} not 8-aligned")
            if off < prev_end or off + ln > d_off + d_len:
                raise ValueError(f"{where}: data [{off}, {off + ln}) out of range or overlapping")
            prev_end = off + ln
            covered[off - d_off:off + ln - d_off] = True
            data = np.frombuffer(b, dtype=dtype.np, count=math.prod(shape), offset=off).reshape(shape)
        if not math.isfinite(scale) and quant == Quant.PER_TENSOR:
            raise ValueError(f"{where}: scale not finite")
        tensors.append(Tensor(dtype, shape, Kind(kind), Quant(quant), float(scale), zp, _opt(qs),
                              bool(tflags & TFLAG_SIGNAL_1D), data))
    blob = np.frombuffer(b, dtype=np.uint8, count=d_len, offset=d_off)
    if np.any(blob[~covered]):
        raise ValueError("non-zero bytes in data blob gaps")

    layers: list[Layer] = []
    for j in range(n_l):
        f = _LAYER.unpack_from(b, lt_off + LAYER_ENTRY * j)
        op, act, n_p, n_in, lflags, noff, nlen, foff, flen, in0, in1, out, w, bi, mu, sh = f[:16]
        state, res, params = list(f[16:20]), f[20] | (f[21] << 16), list(f[22:])
        where = f"layer {j}"
        name = _string(pool, noff, nlen, f"{where} name")
        where = f"layer {j} '{name}'"
        fused = _string(pool, foff, flen, f"{where} fused")
        if op not in Op._value2member_map_:
            raise ValueError(f"{where}: unknown op {op}")
        if n_p > N_PARAMS_MAX or any(params[n_p:]):
            raise ValueError(f"{where}: n_params {n_p} bad or unused params not zero")
        if n_in not in (1, 2) or (n_in == 1 and in1 != NONE and op not in (Op.GRU, Op.LSTM)):
            raise ValueError(f"{where}: n_inputs {n_in} inconsistent with in1")
        if lflags & ~LFLAG_TRAINED or (res and vmin < 3):
            raise ValueError(f"{where}: unknown flags or non-zero reserved field")
        state += [v if vmin >= 3 and v != NONE16 else NONE for v in f[20:22]]
        if act not in Act._value2member_map_:
            raise ValueError(f"{where}: unknown act {act}")
        ins = [in0] if n_in == 1 else [in0, in1]
        if op == Op.LUT and vmin < 1:
            raise ValueError(f"{where}: LUT layer in a version 1.0 file (needs 1.1)")
        if op == Op.CONV2D and n_p == 19 and vmin < 2:
            raise ValueError(f"{where}: dilated CONV2D (19 params) in a version 1.0 / 1.1 file (needs 1.2)")
        if op in (Op.CONCAT, Op.UPSAMPLE) and vmin < 2:
            raise ValueError(f"{where}: {Op(op).name} layer in a version 1.0 / 1.1 file (needs 1.2)")
        if op >= Op.MUL and vmin < OP_MINOR[Op(op)]:
            raise ValueError(f"{where}: {Op(op).name} layer in a file before version 1.{OP_MINOR[Op(op)]}")
        if op == Op.MATMUL and n_p == 13 and (vmin < 5 or params[11] < 2):
            raise ValueError(f"{where}: 13-param MATMUL needs version 1.5 and heads above 1")
        layers.append(Layer(Op(op), name, ins, out, params[:n_p], Act(act), _opt(w), _opt(bi), _opt(mu),
                            _opt(sh), [_opt(s) for s in state], fused, bool(lflags & LFLAG_TRAINED),
                            _opt(in1) if op in (Op.GRU, Op.LSTM) else None))
    rec = trainer_record(pool)
    m = Model(tensors, layers, inp, outp, flags_trained, bool(flags & FLAG_HAS_STATE), steps,
              None if rec is None else rec[0], None if rec is None else rec[1],
              None if rec is None else rec[2])
    validate(m)
    return m


def trainer_record(pool: bytes) -> tuple[int, tuple[int, int] | None, int | None] | None:
    """(shuffle-generator seed state, Adam's (beta1^t, beta2^t) f32 bits or None, epochs done
    or None) of a string pool ending with the trainer record, else None."""
    hexd = b"0123456789abcdef"
    for n_ep in (8, 0):
        for n_adam in (len(ADAM_TAG) + 16, 0):
            n = len(TRAINER_TAG) + 8 + n_ep + n_adam + 1
            tail = bytes(pool[-n:])
            if len(pool) < n + 1 or pool[-n - 1] != 0 or not tail.startswith(TRAINER_TAG) or tail[-1] != 0:
                continue
            q = len(TRAINER_TAG)
            digits = tail[q:q + 8 + n_ep]
            adam = tail[q + 8 + n_ep:-1]
            if any(c not in hexd for c in digits) or (n_adam and (not adam.startswith(ADAM_TAG) or any(
                    c not in hexd for c in adam[len(ADAM_TAG):]))):
                continue
            bt = None
            if n_adam:
                a = adam[len(ADAM_TAG):]
                bt = (int(a[:8], 16), int(a[8:], 16))
            return int(digits[:8], 16), bt, int(digits[8:], 16) if n_ep else None
    return None


def save(m: Model, path: str | os.PathLike[str]) -> None:
    """Write ``m`` to ``path`` atomically (temporary file in the same directory, then rename)."""
    save_bytes(write(m), path)


def save_bytes(data: bytes, path: str | os.PathLike[str]) -> None:
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent or ".")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a model file is an ordinary file
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load(path: str | os.PathLike[str]) -> Model:
    return read(Path(path).read_bytes())


def summary(m: Model) -> str:
    """Readable table of layers, shapes and parameter counts."""
    lines = [f"mtm v{VERSION_MAJOR}.{VERSION_MINOR}: {len(m.layers)} layers, {len(m.tensors)} tensors,"
             f" input {m.tensors[m.input].shape} -> output {m.tensors[m.output].shape}"]
    total = 0
    for ly in m.layers:
        wb = (ly.weight, ly.bias) if ly.op in WEIGHTED else ()  # LUT tables are not parameters
        np_ = sum(m.tensors[i].numel for i in wb if i is not None)
        total += np_
        act = "" if ly.act == Act.NONE else f"+{Act(ly.act).name.lower()}"
        ins = ",".join(str(m.tensors[i].shape) for i in ly.inputs)
        lines.append(f"  {ly.name:<16} {Op(ly.op).name + act:<18} {ins} -> {m.tensors[ly.output].shape}"
                     f"  params={np_}")
    lines.append(f"  total params {total}")
    return "\n".join(lines)
