"""What converts: the op registry (``REGISTRY``) and what does not and what to do instead
(``REFUSALS``), by module class, function and method, with each op's acceptance checks.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

from microtrain_tools.convert_common import (
    ConvertError,
    _at,
    _bind,
    _describe,
    _Fail,
    _meta_shape,
    _one,
    _pair,
    _Pool,
)

# --------------------------------------------------------------------------
# what converts: one registry (``microtrain convert --list-ops`` and docs/ops.md are made from it)


_Accept = Callable[[torch.fx.Node, "nn.Module | None"], str]


@dataclass(frozen=True)
class OpEntry:
    """PyTorch forms that map onto one kind of file layer (or onto nothing, like Dropout).

    ``kind`` is how the planner handles them; ``accept(node, module)`` checks the
    attributes (raising ``_Fail`` with what is wrong and what to do) and returns the
    kind, possibly refined (``clamp(0, 6)`` -> ``relu6``). Adding a PyTorch module,
    function or tensor method to an existing kind is one entry here.
    """

    kind: str
    forms: str  # as written in PyTorch (docs)
    becomes: str  # what the file holds (docs)
    notes: str = ""
    modules: tuple[type, ...] = ()
    functions: tuple[Any, ...] = ()
    methods: tuple[str, ...] = ()
    accept: _Accept | None = None
    lut: str = ""  # kind "lut": the activation's name in oracle.LUT_FUNCTIONS (its table is built from it)


@dataclass(frozen=True)
class Refusal:
    """PyTorch forms that do not convert, with what to do instead."""

    forms: str
    advice: str
    modules: tuple[type, ...] = ()
    functions: tuple[Any, ...] = ()
    methods: tuple[str, ...] = ()


_POOL_FN_ARGS = {  # functional pooling: argument names in order, and defaults
    F.max_pool2d: (("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
                   {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False,
                    "return_indices": False}),
    F.max_pool1d: (("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
                   {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False,
                    "return_indices": False}),
    F.avg_pool2d: (("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                    "divisor_override"),
                   {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True,
                    "divisor_override": None}),
    F.avg_pool1d: (("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"),
                   {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True}),
}


def _pool_spec(node: torch.fx.Node, mod: nn.Module | None) -> _Pool:
    """The pooling window of a pool module or a functional pool call; refuses what the kernels lack."""
    if mod is not None:
        is_max = isinstance(mod, (nn.MaxPool1d, nn.MaxPool2d))
        is1d = isinstance(mod, (nn.MaxPool1d, nn.AvgPool1d))
        a: dict[str, Any] = {k: getattr(mod, k, d) for k, d in (
            ("kernel_size", None), ("stride", None), ("padding", 0), ("dilation", 1), ("ceil_mode", False),
            ("return_indices", False), ("count_include_pad", True), ("divisor_override", None))}
    else:
        names, defaults = _POOL_FN_ARGS[node.target]
        a = _bind(node, names, defaults)
        is_max = node.target in (F.max_pool1d, F.max_pool2d)
        is1d = node.target in (F.max_pool1d, F.avg_pool1d)
    stride = a["stride"] if a["stride"] not in (None, (), []) else a["kernel_size"]
    if is1d:
        ks, st, pd = (1, _one(a["kernel_size"])), (1, _one(stride)), (0, _one(a["padding"]))
    else:
        ks, st, pd = _pair(a["kernel_size"]), _pair(stride), _pair(a["padding"])
    if is_max:
        dil = a["dilation"] if isinstance(a["dilation"], (tuple, list)) else (a["dilation"],)
        if any(int(d) != 1 for d in dil):
            raise _Fail(f"dilation {a['dilation']} is not supported (only 1)")
        if a["return_indices"]:
            raise _Fail("return_indices is not supported (the device keeps no indices): drop it")
    else:
        if a["ceil_mode"]:
            raise _Fail("ceil_mode=True is not supported for average pooling: use ceil_mode=False")
        if (pd[0] or pd[1]) and a["count_include_pad"]:
            raise _Fail("padding with count_include_pad=True is not supported "
                        "(the kernel averages the valid taps: use count_include_pad=False)")
        if a.get("divisor_override"):
            raise _Fail("divisor_override is not supported: drop it")
    if not (pd[0] < ks[0] and pd[1] < ks[1]):
        raise _Fail(f"padding {pd} must be smaller than the kernel {ks}")
    return _Pool(is_max, ks, st, pd)


def _accept_pool(node: torch.fx.Node, mod: nn.Module | None) -> str:
    return "maxpool" if _pool_spec(node, mod).is_max else "avgpool"


def _accept_conv(node: torch.fx.Node, mod: nn.Module | None) -> str:
    assert isinstance(mod, (nn.Conv1d, nn.Conv2d))
    if any(not 1 <= d <= 255 for d in mod.dilation):
        raise _Fail(f"dilation {tuple(mod.dilation)}: only 1..255 converts")
    if mod.padding_mode != "zeros":
        raise _Fail(f"padding_mode '{mod.padding_mode}' is not supported (only 'zeros')")
    return "conv"


def _accept_adaptive(node: torch.fx.Node, mod: nn.Module | None) -> str:
    size = mod.output_size if mod is not None else _bind(node, ("input", "output_size"), {})["output_size"]
    sizes = size if isinstance(size, (tuple, list)) else (size,)
    if any(s != 1 for s in sizes):
        raise _Fail(f"output_size {size}: only output_size 1 (global pooling) is supported")
    is_max = isinstance(mod, (nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d)) or node.target in (
        F.adaptive_max_pool1d, F.adaptive_max_pool2d)
    if is_max and (mod.return_indices if mod is not None else
                   _bind(node, ("input", "output_size", "return_indices"), {}).get("return_indices")):
        raise _Fail("return_indices is not supported: drop it")
    return "gmp" if is_max else "gap"


def _reduced_dims(node: torch.fx.Node) -> tuple[dict[str, Any], tuple[int, ...]]:
    a = _bind(node, ("input", "dim", "keepdim"), {"dim": None, "keepdim": False})
    src = node.args[0]
    rank = len(_meta_shape(src)) if isinstance(src, torch.fx.Node) else 0
    dim = a["dim"]
    dims = tuple(dim) if isinstance(dim, (tuple, list)) else (() if dim is None else (dim,))
    return a, tuple(sorted({int(d) % rank for d in dims})) if rank else ()


def _accept_mean(node: torch.fx.Node, mod: nn.Module | None) -> str:
    a, dims = _reduced_dims(node)
    if a.get("dtype") is not None:
        raise _Fail("dtype= is not supported: drop it")
    src = node.args[0]
    rank = len(_meta_shape(src)) if isinstance(src, torch.fx.Node) else 0
    if rank == 3 and dims == (1,):
        return "gap_tokens"  # the mean over the tokens of (N, T, D) (a sequence model's)
    if rank not in (3, 4) or dims != tuple(range(2, rank)):
        raise _Fail(f"a mean over dims {a['dim']} of a rank-{rank} tensor: only the mean over all "
                    "spatial dims ((2, 3) of (N, C, H, W), 2 of (N, C, L)) converts (global average pooling)")
    return "gap"


def _accept_amax(node: torch.fx.Node, mod: nn.Module | None) -> str:
    a, dims = _reduced_dims(node)
    src = node.args[0]
    rank = len(_meta_shape(src)) if isinstance(src, torch.fx.Node) else 0
    if rank not in (3, 4) or dims != tuple(range(2, rank)):
        raise _Fail(f"a max over dims {a['dim']} of a rank-{rank} tensor: only the max over all spatial "
                    "dims converts (global max pooling)")
    return "gmp"


def _accept_hardtanh(node: torch.fx.Node, mod: nn.Module | None) -> str:
    if mod is not None:
        lo, hi = mod.min_val, mod.max_val
    else:
        a = _bind(node, ("input", "min_val", "max_val", "inplace"), {"min_val": -1.0, "max_val": 1.0})
        lo, hi = a["min_val"], a["max_val"]
    if (lo, hi) != (0, 6):
        raise _Fail(f"Hardtanh({lo}, {hi}): only Hardtanh(0, 6) (= ReLU6) converts")
    return "relu6"


def _accept_clamp(node: torch.fx.Node, mod: nn.Module | None) -> str:
    a = _bind(node, ("input", "min", "max"), {"min": None, "max": None})
    lo, hi = a["min"], a["max"]
    if isinstance(lo, torch.fx.Node) or isinstance(hi, torch.fx.Node):
        raise _Fail("clamp with tensor bounds is not supported: use clamp(0, 6) or clamp(min=0)")
    if lo == 0 and hi is None:
        return "relu"
    if lo == 0 and hi == 6:
        return "relu6"
    raise _Fail(f"clamp({lo}, {hi}): only clamp(0, 6) (= ReLU6) and clamp(min=0) (= ReLU) convert")


def _accept_add(node: torch.fx.Node, mod: nn.Module | None) -> str:
    a = _bind(node, ("input", "other"), {"alpha": 1})
    if len(node.args) != 2 or not all(isinstance(x, torch.fx.Node) for x in node.args) or a["alpha"] != 1:
        raise _Fail("add needs exactly two tensor operands (no constants, no alpha): fold a constant "
                    "into the bias of the layer before")
    return "add"


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _accept_scale(node: torch.fx.Node, mod: nn.Module | None) -> str:
    if len(node.args) != 2 or node.kwargs or not isinstance(node.args[0], torch.fx.Node) or not _number(
            node.args[1]) or not float(node.args[1]) > 0.0:
        raise _Fail("division only by a positive constant, right after a matmul (folded into it)")
    return "scale"


def _accept_mul(node: torch.fx.Node, mod: nn.Module | None) -> str:
    if len(node.args) == 2 and not node.kwargs and sum(isinstance(x, torch.fx.Node) for x in node.args) == 1 \
            and any(_number(x) and float(x) > 0.0 for x in node.args):
        return "scale"  # a positive constant factor: folded into the matmul before it
    if len(node.args) != 2 or node.kwargs or not all(isinstance(x, torch.fx.Node) for x in node.args):
        raise _Fail("mul needs exactly two tensor operands: fold a constant factor into the conv / linear "
                    "before it")
    return "mul"


def _accept_pad(node: torch.fx.Node, mod: nn.Module | None) -> str:
    if mod is not None:
        value = getattr(mod, "value", 0.0)
        if value != 0:
            raise _Fail(f"padding value {value}: only zero padding converts")
        return "pad"
    a = _bind(node, ("input", "pad", "mode", "value"), {"mode": "constant", "value": None})
    if a["mode"] != "constant" or a["value"] not in (None, 0, 0.0):
        raise _Fail(f"F.pad mode={a['mode']!r} value={a['value']}: only zero padding (mode 'constant', "
                    "value 0) converts")
    return "pad"


def softmax_dim(node: torch.fx.Node, mod: nn.Module | None) -> int:
    """The dim (>= 1) a softmax / log_softmax node reduces over."""
    dim = mod.dim if mod is not None else _bind(node, ("input", "dim"), {"dim": None})["dim"]
    src = node.args[0]
    rank = len(_meta_shape(src)) if isinstance(src, torch.fx.Node) else 0
    if dim is None:  # PyTorch's implicit (deprecated) choice
        dim = 0 if rank in (0, 1, 3) else 1
    if rank < 2 or rank > 4 or int(dim) % rank == 0:
        raise _Fail(f"softmax over dim {dim} of a rank-{rank} tensor: only over a dim after the batch dim of "
                    "(N, F), (N, C, L) or (N, C, H, W)")
    return int(dim) % rank


def _accept_softmax(node: torch.fx.Node, mod: nn.Module | None) -> str:
    softmax_dim(node, mod)
    return "softmax"


def _accept_layernorm(node: torch.fx.Node, mod: nn.Module | None) -> str:
    src = node.args[0]
    shape = _meta_shape(src) if isinstance(src, torch.fx.Node) else ()
    if mod is not None:
        ns = tuple(mod.normalized_shape)
    else:
        a = _bind(node, ("input", "normalized_shape", "weight", "bias", "eps"),
                  {"weight": None, "bias": None, "eps": 1e-5})
        if a["weight"] is not None or a["bias"] is not None:
            raise _Fail("F.layer_norm with explicit weight / bias: use an nn.LayerNorm module (the file "
                        "stores module weights)")
        v = a["normalized_shape"]
        ns = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if len(shape) not in (2, 3) or ns != (shape[-1],):
        raise _Fail(f"LayerNorm over {ns} of a tensor of shape {tuple(shape)}: only over the features of an "
                    "(N, F) tensor (the device normalises its channel dim)")
    if shape[-1] > 256:
        raise _Fail(f"LayerNorm over {shape[-1]} features: at most 256 (its integer statistics)")
    return "layernorm"


def _accept_gru(node: torch.fx.Node, mod: nn.Module | None) -> str:
    assert isinstance(mod, nn.GRU)
    if mod.num_layers != 1 or mod.bidirectional or not mod.batch_first:
        raise _Fail(f"nn.GRU with num_layers={mod.num_layers}, bidirectional={mod.bidirectional}, "
                    f"batch_first={mod.batch_first}: only one layer, one direction, batch_first=True")
    if len(node.args) + len(node.kwargs) != 1:
        raise _Fail("nn.GRU called with an initial state: the device starts every sequence from h_0 = 0")
    src = node.args[0]
    if not isinstance(src, torch.fx.Node) or len(_meta_shape(src)) != 3:
        raise _Fail("nn.GRU needs an (N, T, D) input")
    for u in node.users:
        if not (u.op == "call_function" and u.target is operator.getitem and u.args[1] == 0):
            raise _Fail("only the output sequence of nn.GRU converts (out, _ = gru(x); then out.mean(1) or a "
                        "Linear on the tokens): h_n is not an output of the layer")
        if any(v.op == "call_function" and v.target is operator.getitem for v in u.users):
            raise _Fail("one step of the GRU's output (out[:, -1]) does not convert yet: use out.mean(1) or "
                        "a Linear over all the steps (torch.flatten(out, 1))")
    return "gru"


def _accept_lstm(node: torch.fx.Node, mod: nn.Module | None) -> str:
    assert isinstance(mod, nn.LSTM)
    if mod.num_layers != 1 or mod.bidirectional or not mod.batch_first or mod.proj_size:
        raise _Fail(f"nn.LSTM with num_layers={mod.num_layers}, bidirectional={mod.bidirectional}, "
                    f"batch_first={mod.batch_first}, proj_size={mod.proj_size}: only one layer, one "
                    "direction, batch_first=True, no projection")
    if len(node.args) + len(node.kwargs) != 1:
        raise _Fail("nn.LSTM called with an initial state: the device starts every sequence from "
                    "h_0 = c_0 = 0")
    src = node.args[0]
    if not isinstance(src, torch.fx.Node) or len(_meta_shape(src)) != 3:
        raise _Fail("nn.LSTM needs an (N, T, D) input")
    for u in node.users:
        if not (u.op == "call_function" and u.target is operator.getitem and u.args[1] == 0):
            raise _Fail("only the output sequence of nn.LSTM converts (out, _ = lstm(x); then out.mean(1) or "
                        "a Linear on the tokens): h_n, c_n are not outputs of the layer")
        if any(v.op == "call_function" and v.target is operator.getitem for v in u.users):
            raise _Fail("one step of the LSTM's output (out[:, -1]) does not convert yet: use out.mean(1) or "
                        "a Linear over all the steps (torch.flatten(out, 1))")
    return "lstm"


def _accept_matmul(node: torch.fx.Node, mod: nn.Module | None) -> str:
    a = _bind(node, ("input", "other"), {})
    x, y = a["input"], a["other"]
    if len(node.args) != 2 or not isinstance(x, torch.fx.Node) or not isinstance(y, torch.fx.Node):
        raise _Fail("matmul needs two traced tensors: a constant matrix belongs in an nn.Linear")
    if len(_meta_shape(x)) not in (3, 4) or len(_meta_shape(y)) != len(_meta_shape(x)):
        raise _Fail(f"matmul of shapes {_meta_shape(x)} and {_meta_shape(y)}: only (N, T, K) @ (N, K, M) "
                    "or, split into heads, (N, H, T, K) @ (N, H, K, M)")
    return "matmul"


def _accept_transpose(node: torch.fx.Node, mod: nn.Module | None) -> str:
    a = _bind(node, ("input", "dim0", "dim1"), {})
    src = node.args[0]
    rank = len(_meta_shape(src)) if isinstance(src, torch.fx.Node) else 0
    dims = {int(a["dim0"]) % max(rank, 1), int(a["dim1"]) % max(rank, 1)}
    if not (rank == 3 and dims == {1, 2}) and not (rank == 4 and dims in ({1, 2}, {2, 3})):
        raise _Fail("only the transpose of the last two dims of (N, T, D), as a matmul's second operand, "
                    "and the transposes of attention heads ((N, T, H, D) <-> (N, H, T, D), a key's "
                    "(N, H, T, D) -> (N, H, D, T)) convert")
    return "transpose"


def _accept_dropout(node: torch.fx.Node, mod: nn.Module | None) -> str:
    if node.op == "call_function":
        default = node.target is not F.alpha_dropout  # F.dropout*: training=True unless given
        a = _bind(node, ("input", "p", "training", "inplace"), {"training": default})
        if a["training"] is True:
            raise _Fail("training=True (F.dropout's default) drops values at inference too: pass "
                        "training=self.training")
    return "alias"


def _accept_cat(node: torch.fx.Node, mod: nn.Module | None) -> str:
    a = _bind(node, ("tensors", "dim"), {"dim": 0})
    ts = a["tensors"]
    if not isinstance(ts, (tuple, list)) or len(ts) < 2 or not all(isinstance(t, torch.fx.Node) for t in ts):
        raise _Fail("cat needs a list of at least two traced tensors")
    rank = len(_meta_shape(ts[0]))
    if rank not in (2, 3, 4) or int(a["dim"]) % rank != 1:
        raise _Fail(f"cat over dim {a['dim']} of rank-{rank} tensors: only the channel / feature dim 1 "
                    "converts (the device concatenates channels)")
    return "concat"


def _up_factors(node: torch.fx.Node, mod: nn.Module | None) -> tuple[int, int]:
    """Integer (f_h, f_w) of a nearest upsampling; refuses other modes and fractional factors."""
    if mod is not None:
        mode, sf = getattr(mod, "mode", "nearest"), getattr(mod, "scale_factor", None)
    else:
        a = _bind(node, ("input", "size", "scale_factor", "mode"), {"size": None, "scale_factor": None,
                                                                   "mode": "nearest"})
        mode, sf = a["mode"], a["scale_factor"]
    if mode not in ("nearest", "nearest-exact"):
        raise _Fail(f"mode {mode!r}: only mode 'nearest' converts (integer factors)")
    for f in (sf if isinstance(sf, (tuple, list)) else () if sf is None else (sf,)):
        if float(f) != int(f) or int(f) < 1:
            raise _Fail(f"scale_factor {sf}: only integer factors convert")
    src = node.args[0]
    assert isinstance(src, torch.fx.Node)
    i, o_ = _meta_shape(src), _meta_shape(node)
    if len(i) not in (3, 4):
        raise _Fail("upsampling needs an (N, C, H, W) or (N, C, L) input")
    ins = (1, *i[2:]) if len(i) == 3 else i[2:]
    outs = (1, *o_[2:]) if len(o_) == 3 else o_[2:]
    fs = tuple(b // a_ for a_, b in zip(ins, outs, strict=True))
    if any(b != a_ * f for a_, b, f in zip(ins, outs, fs, strict=True)) or not all(1 <= f <= 255 for f in fs):
        raise _Fail(f"size {tuple(o_[2:])} from {tuple(i[2:])}: only integer factors 1..255 convert")
    return fs[0], fs[1]


def _accept_upsample(node: torch.fx.Node, mod: nn.Module | None) -> str:
    _up_factors(node, mod)
    return "upsample"


def _accept_convt(node: torch.fx.Node, mod: nn.Module | None) -> str:
    assert isinstance(mod, (nn.ConvTranspose1d, nn.ConvTranspose2d))
    if any(d != 1 for d in mod.dilation):
        raise _Fail(f"dilation {tuple(mod.dilation)} is not supported (only 1)")
    if mod.groups != 1:
        raise _Fail(f"groups {mod.groups}: only groups 1 converts for a transposed conv")
    if mod.padding_mode != "zeros":
        raise _Fail(f"padding_mode '{mod.padding_mode}' is not supported (only 'zeros')")
    if any(p > k - 1 for p, k in zip(mod.padding, mod.kernel_size, strict=True)):  # type: ignore[arg-type]
        raise _Fail(f"padding {tuple(mod.padding)} must be below the kernel {tuple(mod.kernel_size)}")
    return "convt"


_ADAPTIVE = (nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d)
_CONSTPAD = (nn.ZeroPad1d, nn.ZeroPad2d, nn.ConstantPad1d, nn.ConstantPad2d)

def _accept_lut(node: torch.fx.Node, mod: nn.Module | None) -> str:
    approx = mod.approximate if isinstance(mod, nn.GELU) else node.kwargs.get("approximate", "none")
    if approx != "none":
        raise _Fail(f"GELU(approximate={approx!r}) is not supported: use approximate='none'")
    return "lut"


_LUT_BECOMES = "LUT: a 256-entry int8 table (and its derivative table for backward), built by the converter"
_LUT_NOTES = "its own output scale, calibrated like a conv's output"


def _lut(forms: str, fn: str, modules: tuple[type, ...], functions: tuple[Any, ...],
         methods: tuple[str, ...] = (), notes: str = _LUT_NOTES) -> OpEntry:
    return OpEntry("lut", forms, _LUT_BECOMES, notes, modules=modules, functions=functions, methods=methods,
                   accept=_accept_lut, lut=fn)


REGISTRY: tuple[OpEntry, ...] = (
    OpEntry("conv", "nn.Conv2d, nn.Conv1d (groups: depthwise / grouped; padding int, tuple, 'same', 'valid')",
            "CONV2D (a Conv1d is a conv with H = 1; a dilated conv has dil_h, dil_w, format 1.2)",
            "dilation 1..255, padding_mode 'zeros'",
            modules=(nn.Conv1d, nn.Conv2d), accept=_accept_conv),
    OpEntry("linear", "nn.Linear", "LINEAR; on the (N, T, D) tokens of a sequence model a 1x1 CONV2D (the "
            "same weights for every token)", "after a flatten of (C, H, W) the columns are permuted to NHWC",
            modules=(nn.Linear,)),
    OpEntry("bn", "nn.BatchNorm2d, nn.BatchNorm1d",
            "folded into the conv / linear before it (or, when there is none, into the conv / linear "
            "after it)",
            "needs running statistics; folding into the next layer needs that layer unpadded and nothing "
            "but reshapes / dropout in between",
            modules=(nn.BatchNorm1d, nn.BatchNorm2d)),
    OpEntry("relu", "nn.ReLU, F.relu, torch.relu, x.relu(), clamp(min=0)",
            "fused into the conv / linear / add before it, else a RELU layer",
            modules=(nn.ReLU,), functions=(F.relu, torch.relu, torch.relu_),
            methods=("relu", "relu_")),
    OpEntry("relu6", "nn.ReLU6, F.relu6",
            "fused like ReLU, else a RELU6 layer", modules=(nn.ReLU6,), functions=(F.relu6,)),
    OpEntry("relu6", "nn.Hardtanh(0, 6), F.hardtanh(x, 0, 6)", "as ReLU6", "only the bounds (0, 6)",
            modules=(nn.Hardtanh,), functions=(F.hardtanh,), accept=_accept_hardtanh),
    OpEntry("relu", "torch.clamp(x, 0, 6), x.clamp(0, 6), x.clamp(min=0), torch.clip",
            "as ReLU6 (0, 6) or ReLU (min=0)", "other bounds are refused",
            functions=(torch.clamp, torch.clip, torch.clamp_), methods=("clamp", "clip", "clamp_", "clip_"),
            accept=_accept_clamp),
    OpEntry("maxpool", "nn.MaxPool2d, nn.MaxPool1d, F.max_pool2d, F.max_pool1d", "MAXPOOL",
            "dilation 1, no return_indices; padding < kernel",
            modules=(nn.MaxPool1d, nn.MaxPool2d), functions=(F.max_pool1d, F.max_pool2d),
            accept=_accept_pool),
    OpEntry("avgpool", "nn.AvgPool2d, nn.AvgPool1d, F.avg_pool2d, F.avg_pool1d", "AVGPOOL",
            "ceil_mode False; with padding only count_include_pad=False (the kernel averages valid taps)",
            modules=(nn.AvgPool1d, nn.AvgPool2d), functions=(F.avg_pool1d, F.avg_pool2d),
            accept=_accept_pool),
    OpEntry("gap", "nn.AdaptiveAvgPool2d(1), nn.AdaptiveAvgPool1d(1), F.adaptive_avg_pool2d(x, 1), "
            "nn.AdaptiveMaxPool2d(1), F.adaptive_max_pool2d(x, 1)",
            "GLOBAL_AVGPOOL (max: a MAXPOOL over the whole map)", "output_size 1 only; a global max pool "
            "needs H * W <= 255",
            modules=_ADAPTIVE, functions=(F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_max_pool1d,
                                          F.adaptive_max_pool2d), accept=_accept_adaptive),
    OpEntry("gap", "x.mean((2, 3)), x.mean([-1, -2]), torch.mean(x, 2) (keepdim or not)", "GLOBAL_AVGPOOL",
            "the mean over all spatial dims only", functions=(torch.mean,), methods=("mean",),
            accept=_accept_mean),
    OpEntry("gmp", "x.amax((2, 3)), torch.amax(x, (2, 3))", "MAXPOOL over the whole map", "H * W <= 255",
            functions=(torch.amax,), methods=("amax",), accept=_accept_amax),
    OpEntry("add", "x + y, torch.add(x, y), x.add(y), x += y", "ADD (ReLU after it fused)",
            "two tensors of the same shape; no broadcasting, no alpha",
            functions=(operator.add, operator.iadd, torch.add), methods=("add", "add_"), accept=_accept_add),
    OpEntry("mul", "x * y, torch.mul(x, y), x.mul(y), x *= y (two activations)",
            "MUL (format 1.4; squeeze-and-excitation: x * sigmoid(fc(pool(x))))",
            "the same shape, or the second operand broadcast over the positions (N, C, 1, 1) or over the "
            "channels (N, 1, H, W); trained through (the errors of both inputs)",
            functions=(operator.mul, operator.imul, torch.mul), methods=("mul", "mul_"), accept=_accept_mul),
    OpEntry("matmul", "a @ b, torch.matmul(a, b), torch.bmm(a, b), a.matmul(b) of two activations "
            "(N, T, K) @ (N, K, M), or per head (N, H, T, K) @ (N, H, K, M); nn.MultiheadAttention("
            "batch_first=True) without masks (its q, k, v, out projections as Linears on the tokens)",
            "MATMUL (format 1.4; a "
            "constant factor right after it, e.g. / math.sqrt(d), is folded into it; trained through: the "
            "errors of both inputs; several heads: its heads field, format 1.5)",
            "sequence models: (N, T, D) tensors are T tokens of D values; heads: q @ k.transpose(-2, -1) of "
            "(N, H, T, Dh) views of tokens, then (scores or their softmax) @ v",
            functions=(operator.matmul, torch.matmul, torch.bmm), methods=("matmul", "bmm"),
            accept=_accept_matmul),
    OpEntry("scale", "x / c, x * c, torch.div(x, c) with a positive number c", "nothing: folded into the "
            "MATMUL before it (its requantisation and its backward)", "only right after a matmul",
            functions=(operator.truediv, torch.div), methods=("div",), accept=_accept_scale),
    OpEntry("transpose", "b.transpose(-2, -1), b.transpose(1, 2), torch.transpose(b, 1, 2)",
            "nothing: the MATMUL reads b as it lies (its tb flag); the tokens as the map / signal lies",
            "only as a matmul's second operand (or its first, making one row of an (N, T, 1) column), "
            "between the (N, T, H, Dh) and (N, H, T, Dh) views of attention heads, after flatten(2) of a "
            "conv's (N, C, H, W) map (its H * W positions are the tokens), of a Conv1d's (N, C, L) (its L "
            "positions are the tokens), or around a LayerNorm over an (N, C, L) signal's channels",
            functions=(torch.transpose,), methods=("transpose",), accept=_accept_transpose),
    OpEntry("pad", "nn.ZeroPad2d, nn.ZeroPad1d, nn.ConstantPad2d/1d(p, 0), F.pad(x, p) (constant 0)",
            "folded into the padding of the conv after it (asymmetric: the bottom / right part is the conv's "
            "output size)", "only before a conv; pad top / left + the conv's padding < kernel",
            modules=_CONSTPAD, functions=(F.pad,), accept=_accept_pad),
    OpEntry("reshape", "nn.Flatten, torch.flatten(x, 1), x.view(n, -1), x.reshape(n, -1), x.squeeze(), "
            "x.unsqueeze(), torch.squeeze / unsqueeze / reshape",
            "nothing: a no-op on the device's NHWC tensors",
            "to (N, features) before a Linear; other reshapes only where the NHWC shape stays the same "
            "(e.g. squeezing the 1x1 of a global pool), (N, T, D) <-> (N, T, H, Dh) views of attention "
            "heads, and flatten(2) of an (N, C, H, W) map before transpose(1, 2) (a conv tokenizer)",
            modules=(nn.Flatten,), functions=(torch.flatten, torch.reshape, torch.squeeze, torch.unsqueeze),
            methods=("flatten", "view", "reshape", "squeeze", "unsqueeze")),
    OpEntry("alias", "nn.Dropout (1d, 2d, 3d), nn.AlphaDropout, F.dropout, nn.Identity, x.contiguous()",
            "nothing (dropped)", "F.dropout needs training=self.training (its default drops at inference)",
            modules=(nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d,
                     nn.AlphaDropout, nn.Identity),
            functions=(F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout),
            methods=("contiguous",), accept=_accept_dropout),
    OpEntry("gru", "nn.GRU(D, H, batch_first=True) (one layer, one direction), its output sequence "
            "(out, _ = gru(x))",
            "GRU (format 1.5): the whole sequence in one layer, h_0 = 0; trained with backward through time "
            "(truncation: k in its params)",
            "sequence models: (N, T, D) tensors are T tokens of D values; h_n unused; then out.mean(1) "
            "(GLOBAL_AVGPOOL) or a Linear on the tokens", modules=(nn.GRU,), accept=_accept_gru),
    OpEntry("lstm", "nn.LSTM(D, H, batch_first=True) (one layer, one direction, no projection), its output "
            "sequence (out, _ = lstm(x))",
            "LSTM (format 1.5): the whole sequence in one layer, h_0 = c_0 = 0, the cell state int8 at one "
            "calibrated scale; trained with backward through time (truncation: k in its params)",
            "as nn.GRU: (N, T, D) tokens; h_n, c_n unused; then out.mean(1) (GLOBAL_AVGPOOL) or a Linear "
            "on the tokens", modules=(nn.LSTM,), accept=_accept_lstm),
    OpEntry("layernorm", "nn.LayerNorm(F), F.layer_norm(x, (F,)) over the features of (N, F), the D of "
            "(N, T, D) tokens, or the C of an (N, C, L) signal as ln(x.transpose(1, 2)).transpose(1, 2)",
            "LAYERNORM (format 1.4, integer statistics) then, with elementwise_affine, a depthwise 1x1 "
            "CONV2D holding its weight and bias (trained like a conv)", "F <= 256; the normalised value "
            "gets its own calibrated quantisation",
            modules=(nn.LayerNorm,), functions=(F.layer_norm,), accept=_accept_layernorm),
    OpEntry("softmax", "a final nn.Softmax(dim=1), F.softmax, torch.softmax, x.softmax(1), nn.LogSoftmax, "
            "F.log_softmax; nn.Softmax / F.softmax inside the model",
            "nothing at the end: stripped, the file outputs the logits (recorded in the last layer's "
            "fused names); inside: SOFTMAX (format 1.4, output scale 1/256)",
            "at the end: predict() (argmax) is unchanged, apply softmax to the outputs for probabilities; "
            "inside: over any dim after the batch dim, <= 256 values, not log_softmax",
            modules=(nn.Softmax, nn.LogSoftmax), functions=(F.softmax, torch.softmax, F.log_softmax,
                                                            torch.log_softmax),
            methods=("softmax", "log_softmax"), accept=_accept_softmax),
    OpEntry("concat", "torch.cat / torch.concat([a, b, ...], dim=1)",
            "CONCAT (two inputs; more are a chain of CONCATs)",
            "along the channel / feature dim 1 only; each input keeps its own quantisation",
            functions=(torch.cat, torch.concat), accept=_accept_cat),
    OpEntry("upsample", "nn.Upsample(scale_factor=k), nn.UpsamplingNearest2d, F.interpolate(x, "
            "scale_factor=k or size=...)", "UPSAMPLE (mode 0, nearest)",
            "mode 'nearest' only, integer factors 1..255 (2-D maps and 1-D signals)",
            modules=(nn.Upsample, nn.UpsamplingNearest2d), functions=(F.interpolate,),
            accept=_accept_upsample),
    OpEntry("convt", "nn.ConvTranspose2d, nn.ConvTranspose1d",
            "UPSAMPLE (mode 1, zero insertion) then CONV2D (stride 1, flipped kernel): trained like a conv",
            "groups 1, dilation 1, padding <= kernel - 1, any stride and output_padding",
            modules=(nn.ConvTranspose1d, nn.ConvTranspose2d), accept=_accept_convt),
    _lut("nn.Sigmoid, torch.sigmoid, F.sigmoid, x.sigmoid()", "sigmoid", (nn.Sigmoid,),
         (torch.sigmoid, F.sigmoid), ("sigmoid",)),
    _lut("nn.Tanh, torch.tanh, F.tanh, x.tanh()", "tanh", (nn.Tanh,), (torch.tanh, F.tanh), ("tanh",)),
    _lut("nn.Hardswish, F.hardswish", "hardswish", (nn.Hardswish,), (F.hardswish,)),
    _lut("nn.Hardsigmoid, F.hardsigmoid", "hardsigmoid", (nn.Hardsigmoid,), (F.hardsigmoid,)),
    _lut("nn.LeakyReLU, F.leaky_relu (any negative_slope)", "leaky_relu", (nn.LeakyReLU,), (F.leaky_relu,)),
    _lut("nn.SiLU, F.silu", "silu", (nn.SiLU,), (F.silu,)),
    _lut("nn.GELU, F.gelu", "gelu", (nn.GELU,), (F.gelu,), notes=f"approximate='none' only; {_LUT_NOTES}"),
)

REFUSALS: tuple[Refusal, ...] = (
    Refusal("F.conv_transpose2d / 1d with explicit weights", "use nn.ConvTranspose2d / 1d modules (the file "
            "stores module weights)", functions=(F.conv_transpose1d, F.conv_transpose2d)),
    Refusal("nn.UpsamplingBilinear2d", "bilinear upsampling has no kernel: use nn.Upsample(mode='nearest') "
            "(optionally followed by a conv)", modules=(nn.UpsamplingBilinear2d,)),
    Refusal("torch.stack", "stacking adds a dim the device does not have: torch.cat along dim 1",
            functions=(torch.stack,)),
    Refusal("nn.RNN", "this recurrent layer is not supported yet: use nn.GRU or nn.LSTM (batch_first, one "
            "layer) or nn.Conv1d over time on (N, C, L) windows", modules=(nn.RNN,)),
    Refusal("nn.GroupNorm, nn.InstanceNorm", "per-sample normalisation over groups or positions has no "
            "kernel: use BatchNorm (it is folded into a conv / linear) or nn.LayerNorm over (N, F) features",
            modules=(nn.GroupNorm, nn.InstanceNorm1d, nn.InstanceNorm2d)),
    Refusal("x - y", "element-wise subtraction has no kernel: fold constant shifts into the bias of a conv / "
            "linear", functions=(operator.sub, torch.sub), methods=("sub",)),
    Refusal("F.conv2d, F.linear with explicit weights", "use nn.Conv2d / nn.Linear modules (the file "
            "stores module weights)", functions=(F.conv1d, F.conv2d, F.linear)),
)


def _tables() -> tuple[dict[type, OpEntry | Refusal], dict[Any, OpEntry | Refusal],
                       dict[str, OpEntry | Refusal]]:
    mods: dict[type, OpEntry | Refusal] = {}
    fns: dict[Any, OpEntry | Refusal] = {}
    meths: dict[str, OpEntry | Refusal] = {}
    for e in (*REGISTRY, *REFUSALS):
        mods.update(dict.fromkeys(e.modules, e))
        fns.update(dict.fromkeys(e.functions, e))
        meths.update(dict.fromkeys(e.methods, e))
    return mods, fns, meths


_BY_MODULE, _BY_FUNCTION, _BY_METHOD = _tables()


def _lookup(node: torch.fx.Node, modules: dict[str, nn.Module]) -> OpEntry | Refusal | None:
    if node.op == "call_module":
        for cls in type(modules[str(node.target)]).__mro__:
            if cls in _BY_MODULE:
                return _BY_MODULE[cls]
        return None
    if node.op == "call_function":
        try:
            return _BY_FUNCTION.get(node.target)
        except TypeError:  # an unhashable callable
            return None
    if node.op == "call_method":
        return _BY_METHOD.get(str(node.target))
    return None
def _lut_activation(node: torch.fx.Node, modules: dict[str, nn.Module]) -> tuple[str, float]:
    """(function name, LeakyReLU slope) of a node the registry classified as "lut"."""
    e = _lookup(node, modules)
    assert isinstance(e, OpEntry) and e.lut, node
    slope = 0.01  # PyTorch's default negative_slope
    if node.op == "call_module":
        slope = float(getattr(modules[str(node.target)], "negative_slope", slope))
    elif e.lut == "leaky_relu":
        slope = float(_bind(node, ("input", "negative_slope", "inplace"), {"negative_slope": slope})
                      ["negative_slope"])
    return e.lut, slope


def _classify(node: torch.fx.Node, modules: dict[str, nn.Module]) -> str:
    where = _describe(node, modules)
    if _is_meta(node):
        return "meta"
    if node.op not in ("call_module", "call_function", "call_method"):
        raise ConvertError(f"{where}: unsupported graph node{_at(node)}")
    e = _lookup(node, modules)
    if e is None:
        raise ConvertError(f"{where}: unsupported op: no device kernel for it (see `microtrain convert "
                           f"--list-ops` for what converts){_at(node)}")
    if isinstance(e, Refusal):
        raise ConvertError(f"{where}: unsupported op: {e.advice}{_at(node)}")
    if e.accept is None:
        return e.kind
    mod = modules[str(node.target)] if node.op == "call_module" else None
    try:
        return e.accept(node, mod)
    except _Fail as f:
        raise ConvertError(f"{where}: {f}{_at(node)}") from None


def _is_meta(node: torch.fx.Node) -> bool:
    """Shape arithmetic (``x.shape``, ``x.size()``, indexing them): no tensor, no layer."""
    if node.op == "call_function" and node.target is getattr and node.args[1:2] == ("shape",):
        return True
    if node.op == "call_method" and node.target == "size":
        return True
    return (node.op == "call_function" and node.target is operator.getitem
            and isinstance(node.args[0], torch.fx.Node) and _is_meta(node.args[0]))
