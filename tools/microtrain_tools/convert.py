"""PyTorch -> ``.mtm`` converter and the numpy reference runner of ``.mtm`` files.

``convert(module, calib)`` traces the module with torch.fx (so graphs with
residual adds work), folds BatchNorm into the preceding conv/linear (or the
next one), fuses ReLU/ReLU6 into the preceding conv/linear/add, folds zero
padding into the next conv, drops Dropout, no-op reshapes and a final softmax,
calibrates per-tensor activation ranges on ``calib`` and quantises to the int8
scheme of docs/numerics.md, returning an :class:`mtm.Model` (``mtm.write``
gives bytes). ``convert_to_file`` writes atomically: nothing is left behind on
error. ``REGISTRY`` / ``REFUSALS`` are the one list of what converts (and what
to do instead), printed by ``--list-ops`` and generated into docs/ops.md.

``run_mtm(model_bytes, x)`` runs a file through the oracle kernels: it is the
reference the device loader is compared to.

Layouts: PyTorch inputs are ``(N, C, H, W)``, ``(N, C, L)`` (1-D signal, stored
NHWC as ``(1, L, C)``) or ``(N, F)``; file activations are NHWC, one sample.
"""

from __future__ import annotations

import argparse
import copy
import math
import operator
import pickle
import re
import sys
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F
from numpy.typing import ArrayLike, NDArray
from tqdm import tqdm

from microtrain_tools import mtm
from microtrain_tools.mtm import Act, DType, Kind, Layer, Model, Op, Quant, Tensor
from microtrain_tools.reference import oracle as o

__all__ = [
    "REFUSALS",
    "REGISTRY",
    "ConvertError",
    "ConvertWarning",
    "OpEntry",
    "Refusal",
    "convert",
    "convert_to_file",
    "dequantize_output",
    "main",
    "ops_doc",
    "ops_text",
    "quantize_input",
    "run_mtm",
    "to_nhwc",
]


class ConvertError(ValueError):
    """An unsupported op/attribute or bad input: one line naming the layer, the op and what to do."""


class ConvertWarning(UserWarning):
    """The model converted, but something looks wrong (e.g. calibration data in 0..255)."""


# --------------------------------------------------------------------------
# where a node comes from (for messages)

_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_THIS_FILE = str(Path(__file__).resolve())
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n[ \t]*([^\n]*)')


def _internal(filename: str) -> bool:
    f = str(Path(filename).resolve()) if filename and not filename.startswith("<") else filename
    return f.startswith(_TORCH_DIR) or f == _THIS_FILE


def _at(node: torch.fx.Node | None) -> str:
    """`` [at net.py:14]``: the user's source line that made ``node`` (when fx recorded it)."""
    st = getattr(node, "stack_trace", None) if node is not None else None
    if not st:
        return ""
    frames = [f for f in _FRAME.findall(st) if not _internal(f[0])]
    if not frames:
        return ""
    fname, line, _, _ = frames[-1]
    return f" [at {Path(fname).name}:{line}]"


# --------------------------------------------------------------------------
# graph planning


@dataclass(eq=False)
class _Value:
    """An activation tensor of the file: shape (NHWC, one sample) and where its quant comes from."""

    shape: tuple[int, ...]
    signal_1d: bool
    calib: torch.fx.Node | None = None  # node whose float range defines scale/zp
    same_as: _Value | None = None  # pass-through ops share their input's quant
    index: int = -1
    scale: float = 0.0
    zp: int = 0

    def root(self) -> _Value:
        v = self
        while v.same_as is not None:
            v = v.same_as
        return v


@dataclass(frozen=True)
class _Pool:
    """A pooling window in file terms (H, W): from a module or a functional call."""

    is_max: bool
    ks: tuple[int, int]
    st: tuple[int, int]
    pd: tuple[int, int]


@dataclass(frozen=True)
class _PreBn:
    """A BatchNorm folded into the conv/linear that reads its output (it scales the layer's inputs)."""

    module: nn.Module
    name: str
    repeat: int  # a flatten in between: each channel covers this many Linear columns
    where: str
    at: str


@dataclass(eq=False)
class _PLayer:
    kind: str  # conv, linear, relu, relu6, maxpool, avgpool, gap, add, lut, concat, upsample
    name: str
    inputs: list[_Value]
    output: _Value
    module: nn.Module | None = None
    bn: nn.Module | None = None
    act: Act = Act.NONE
    fused: list[str] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    where: str = ""  # "layer 'x' (Type)" + source location, for messages at emit time


def _meta_shape(node: torch.fx.Node) -> tuple[int, ...]:
    shape = node.meta.get("mt_shape")
    if shape is None:
        raise ConvertError(f"layer '{node.name}': output is not a single tensor{_at(node)}")
    return tuple(shape)


def _nhwc_shape(shape: tuple[int, ...], where: str) -> tuple[tuple[int, ...], bool]:
    """Torch batch shape -> (file shape, signal_1d)."""
    if len(shape) == 4:
        return (shape[2], shape[3], shape[1]), False
    if len(shape) == 3:
        return (1, shape[2], shape[1]), True
    if len(shape) == 2:
        return (shape[1],), False
    raise ConvertError(f"{where}: tensors of rank {len(shape)} (with batch) are not supported: "
                       "use (N, C, H, W), (N, C, L) or (N, features)")


def _describe(node: torch.fx.Node, modules: dict[str, nn.Module]) -> str:
    if node.op == "call_module":
        return f"layer '{node.target}' ({type(modules[str(node.target)]).__name__})"
    if node.op == "call_function":
        fn = getattr(node.target, "__name__", str(node.target))
        return f"layer '{node.name}' (function {fn})"
    if node.op == "call_method":
        return f"layer '{node.name}' (method .{node.target}())"
    return f"layer '{node.name}' ({node.op} {node.target})"


def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        return (int(v[0]), int(v[1])) if len(v) == 2 else (int(v[0]), int(v[0]))
    return int(v), int(v)


def _one(v: Any) -> int:
    return int(v[0]) if isinstance(v, (tuple, list)) else int(v)


def _bind(node: torch.fx.Node, names: tuple[str, ...], defaults: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments by name (``names`` in positional order, the input first)."""
    out = dict(defaults)
    out.update(zip(names, node.args, strict=False))
    out.update(node.kwargs)
    return out


class _Fail(Exception):
    """Raised by an accept check: the message after "layer '...' (...): "."""


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


def _accept_softmax(node: torch.fx.Node, mod: nn.Module | None) -> str:
    dim = mod.dim if mod is not None else _bind(node, ("input", "dim"), {"dim": None})["dim"]
    src = node.args[0]
    rank = len(_meta_shape(src)) if isinstance(src, torch.fx.Node) else 0
    if dim is None:  # PyTorch's implicit (deprecated) choice
        dim = 0 if rank in (0, 1, 3) else 1
    if rank < 2 or int(dim) % rank != 1:
        raise _Fail(f"softmax over dim {dim} of a rank-{rank} tensor: only over the class / channel dim 1")
    return "softmax"


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
    OpEntry("linear", "nn.Linear", "LINEAR", "after a flatten of (C, H, W) the columns are permuted to NHWC",
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
    OpEntry("pad", "nn.ZeroPad2d, nn.ZeroPad1d, nn.ConstantPad2d/1d(p, 0), F.pad(x, p) (constant 0)",
            "folded into the padding of the conv after it (asymmetric: the bottom / right part is the conv's "
            "output size)", "only before a conv; pad top / left + the conv's padding < kernel",
            modules=_CONSTPAD, functions=(F.pad,), accept=_accept_pad),
    OpEntry("reshape", "nn.Flatten, torch.flatten(x, 1), x.view(n, -1), x.reshape(n, -1), x.squeeze(), "
            "x.unsqueeze(), torch.squeeze / unsqueeze / reshape",
            "nothing: a no-op on the device's NHWC tensors",
            "to (N, features) before a Linear; other reshapes only where the NHWC shape stays the same "
            "(e.g. squeezing the 1x1 of a global pool)",
            modules=(nn.Flatten,), functions=(torch.flatten, torch.reshape, torch.squeeze, torch.unsqueeze),
            methods=("flatten", "view", "reshape", "squeeze", "unsqueeze")),
    OpEntry("alias", "nn.Dropout (1d, 2d, 3d), nn.AlphaDropout, F.dropout, nn.Identity, x.contiguous()",
            "nothing (dropped)", "F.dropout needs training=self.training (its default drops at inference)",
            modules=(nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d,
                     nn.AlphaDropout, nn.Identity),
            functions=(F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout),
            methods=("contiguous",), accept=_accept_dropout),
    OpEntry("softmax", "a final nn.Softmax(dim=1), F.softmax, torch.softmax, x.softmax(1), nn.LogSoftmax, "
            "F.log_softmax", "nothing: stripped, the file outputs the logits (recorded in the last layer's "
            "fused names)", "only as the model's last op; predict() (argmax) is unchanged, apply softmax "
            "to the "
            "outputs for probabilities",
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
    Refusal("nn.GRU, nn.LSTM, nn.RNN", "recurrent layers (GRU / LSTM / RNN) are not supported yet: use "
            "nn.Conv1d over time on (N, C, L) windows", modules=(nn.GRU, nn.LSTM, nn.RNN)),
    Refusal("nn.LayerNorm, nn.GroupNorm, nn.InstanceNorm", "per-sample normalisation has no kernel: use "
            "BatchNorm (it is folded into a conv / linear)",
            modules=(nn.LayerNorm, nn.GroupNorm, nn.InstanceNorm1d, nn.InstanceNorm2d)),
    Refusal("x * y, x - y, x / y, torch.mul", "element-wise arithmetic other than add has no kernel: fold "
            "constant scales into the data or into a conv / linear",
            functions=(operator.mul, operator.sub, operator.truediv, torch.mul, torch.sub, torch.div),
            methods=("mul", "sub", "div")),
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


def _single_user(node: torch.fx.Node) -> torch.fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _n(shape: tuple[int, ...]) -> str:
    """A batch shape with its batch dim shown as N (shapes are found on a 2-sample probe)."""
    return "(" + ", ".join(["N", *(str(d) for d in shape[1:])]) + ")"


def _same_nhwc_order(shape: tuple[int, ...]) -> bool:
    """A (C, H, W) / (C, L) sample flattens in the same order in NCHW and NHWC."""
    return len(shape) < 3 or shape[1] == 1 or math.prod(shape[2:]) == 1


class _Planner:
    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm
        self.modules = dict(gm.named_modules())
        self.values: dict[torch.fx.Node, _Value] = {}
        self.layers: list[_PLayer] = []
        self.done: set[torch.fx.Node] = set()
        self.names: set[str] = set()
        self.input: _Value | None = None
        self.output: _Value | None = None
        self.calls: dict[str, int] = {}
        self.pads: dict[torch.fx.Node, tuple[int, int, int, int, list[str]]] = {}  # top, bottom, left, right
        self.pre_bn: dict[torch.fx.Node, _PreBn] = {}
        self.softmax: str | None = None

    def name(self, node: torch.fx.Node) -> str:
        base = str(node.target) if node.op == "call_module" else node.name
        cand = base.encode("utf-8")[-mtm.MAX_NAME:].decode("utf-8", "ignore") or node.name
        k = 1
        name = cand
        while name in self.names:
            k += 1
            name = f"{cand[:mtm.MAX_NAME - 4]}#{k}"
        self.names.add(name)
        return name

    def src_name(self, node: torch.fx.Node) -> str:
        return str(node.target) if node.op == "call_module" else node.name

    def where(self, node: torch.fx.Node) -> str:
        return _describe(node, self.modules)

    def fail(self, node: torch.fx.Node, msg: str) -> ConvertError:
        return ConvertError(f"{self.where(node)}: {msg}{_at(node)}")

    def value_of(self, arg: Any, node: torch.fx.Node) -> _Value:
        if not isinstance(arg, torch.fx.Node) or arg not in self.values:
            raise self.fail(node, "input is not a traced tensor (a constant or a parameter): compute it in "
                                  "a module of its own")
        return self.values[arg]

    def new_value(self, node: torch.fx.Node, calib: torch.fx.Node | None = None,
                  same_as: _Value | None = None) -> _Value:
        shape, s1d = _nhwc_shape(_meta_shape(node), self.where(node) + _at(node))
        return _Value(shape, s1d, calib=calib, same_as=same_as)

    def fuse_act(self, node: torch.fx.Node, pl: _PLayer) -> torch.fx.Node:
        """Fuse a following relu/relu6 if ``node`` is its only producer; return the last node."""
        nxt = _single_user(node)
        if nxt is not None and nxt.op != "output":
            try:
                kind = _classify(nxt, self.modules)
            except ConvertError:
                return node  # refused when its own turn comes
            if kind in ("relu", "relu6") and nxt.args[0] is node:
                pl.act = Act.RELU if kind == "relu" else Act.RELU6
                pl.fused.append(self.src_name(nxt))
                self.done.add(nxt)
                return nxt
        return node

    def plan(self) -> None:
        for node in self.gm.graph.nodes:
            if node in self.done:
                continue
            if node.op == "placeholder":
                if self.input is not None:
                    raise self.fail(node, "a second model input: the file has one input (pass one tensor)")
                self.input = self.values[node] = self.new_value(node, calib=node)
                continue
            if node.op == "output":
                self.plan_output(node)
                continue
            if node.op == "get_attr":
                raise self.fail(node, "a parameter or buffer used outside a module (e.g. F.conv2d(x, "
                                      "self.weight)): use nn.Conv2d / nn.Linear modules")
            self.plan_node(node, _classify(node, self.modules))

    def plan_output(self, node: torch.fx.Node) -> None:
        out = node.args[0]
        if not isinstance(out, torch.fx.Node):
            n = len(out) if isinstance(out, (tuple, list, dict)) else 0
            raise ConvertError(f"the model returns {n or 'no'} tensors: the file has one output; return only "
                               "the tensor the device should compute (e.g. the logits)")
        v = self.value_of(out, node)
        tshape = _meta_shape(out)
        if len(tshape) == 2 and len(v.shape) == 3 and not _same_nhwc_order((0, v.shape[2], v.shape[0],
                                                                              v.shape[1])):
            raise ConvertError(f"{self.where(out)}: the model output is a flattened (C, H, W) map, which the "
                               "device holds in NHWC order, not PyTorch's CHW: end the model with a Linear "
                               f"or a global pool{_at(out)}")
        self.output = v

    def plan_node(self, node: torch.fx.Node, kind: str) -> None:
        if kind == "meta":
            return
        if kind == "concat":  # its first argument is the list of tensors
            self.plan_concat(node)
            return
        x = self.value_of(node.args[0], node)
        arg0 = node.args[0]
        assert isinstance(arg0, torch.fx.Node)
        in_tshape = _meta_shape(arg0)
        if kind in ("conv", "linear"):
            self.plan_weighted(node, kind, x, arg0, in_tshape)
        elif kind == "bn":
            self.plan_bn(node, x, in_tshape)
        elif kind in ("relu", "relu6"):
            pl = self.layer(kind, node, [x])
            pl.output = self.values[node] = _Value(x.shape, x.signal_1d, same_as=x)
        elif kind == "lut":  # own output quantisation: calibrated like a conv's output
            fn, slope = _lut_activation(node, self.modules)
            pl = self.layer(kind, node, [x])
            pl.attrs.update({"fn": fn, "slope": slope})
            pl.output = self.values[node] = self.new_value(node, calib=node)
            if pl.output.shape != x.shape:
                raise self.fail(node, "shape changes")
            pl.fused.append(fn)
        elif kind in ("maxpool", "avgpool", "gap", "gmp"):
            if len(in_tshape) not in (3, 4) or len(x.shape) != 3:
                raise self.fail(node, "pooling needs an (N, C, H, W) or (N, C, L) input")
            mod = self.modules[str(node.target)] if node.op == "call_module" else None
            global_pool = kind in ("gap", "gmp")
            pool: _Pool | None = None
            if kind == "gmp":
                h, w = x.shape[0], x.shape[1]
                if h * w > 255:
                    raise self.fail(node, f"a global max pool over {h} x {w} = {h * w} positions: "
                                          "the max-pool "
                                          "kernel takes at most 255 (pool to a smaller map first)")
                pool, kind = _Pool(True, (h, w), (1, 1), (0, 0)), "maxpool"
            elif kind != "gap":
                pool = _pool_spec(node, mod)
            pl = self.layer(kind, node, [x], module=mod)
            pl.attrs["pool"] = pool
            if global_pool:  # keepdim or not, the pooled map is (1, 1, C) on the device
                pl.output = _Value((1, 1, x.shape[2]), x.signal_1d, same_as=x)
            else:
                pl.output = self.new_value(node, same_as=x)
            self.values[node] = pl.output
        elif kind == "add":
            y = self.value_of(node.args[1], node)
            if x.shape != y.shape:
                raise self.fail(node, f"operands of shapes {x.shape} and {y.shape} (NHWC, no broadcasting)")
            pl = self.layer("add", node, [x, y])
            last = self.fuse_act(node, pl)
            # element-wise: the device shape of its inputs (PyTorch's may be squeezed, e.g. a pooled (N, C))
            pl.output = self.values[last] = _Value(x.shape, x.signal_1d, calib=last)
            self.values[node] = pl.output
        elif kind == "upsample":
            if len(x.shape) != 3:
                raise self.fail(node, "upsampling needs an (N, C, H, W) or (N, C, L) input")
            pl = self.layer("upsample", node, [x])
            pl.attrs["f"] = _up_factors(node, None if node.op != "call_module" else
                                        self.modules[str(node.target)])
            pl.attrs["mode"] = 0
            pl.output = self.values[node] = self.new_value(node, same_as=x)
        elif kind == "convt":
            self.plan_convt(node, x, arg0, in_tshape)
        elif kind == "reshape":
            self.plan_reshape(node, x, in_tshape)
        elif kind == "pad":
            self.plan_pad(node, x, arg0, in_tshape)
        elif kind == "softmax":
            users = list(node.users)
            if len(users) != 1 or users[0].op != "output":
                raise self.fail(node, "softmax is only supported as the model's last op (it is stripped: the "
                                      "file outputs logits): remove it or move it to the end")
            self.softmax = self.src_name(node)
            self.values[node] = x
        else:  # alias
            self.values[node] = x

    def layer(self, kind: str, node: torch.fx.Node, inputs: list[_Value],
              module: nn.Module | None = None) -> _PLayer:
        pl = _PLayer(kind, self.name(node), inputs, inputs[0], module=module,
                     where=f"{self.where(node)}", attrs={"at": _at(node)})
        self.layers.append(pl)
        return pl

    def plan_weighted(self, node: torch.fx.Node, kind: str, x: _Value, arg0: torch.fx.Node,
                      in_tshape: tuple[int, ...]) -> None:
        target = str(node.target)
        mod = self.modules[target]
        if kind == "linear" and len(in_tshape) != 2:
            raise self.fail(node, f"Linear on a rank-{len(in_tshape)} input {in_tshape}: it needs "
                                  "(batch, features): flatten first (torch.flatten(x, 1))")
        if kind == "conv":
            want = 3 if isinstance(mod, nn.Conv1d) else 4
            if len(in_tshape) != want or len(x.shape) != 3:
                raise self.fail(node, f"input of shape {in_tshape}: {type(mod).__name__} needs "
                                      f"{'(N, C, L)' if want == 3 else '(N, C, H, W)'} with the batch dim")
        self.calls[target] = self.calls.get(target, 0) + 1
        if self.calls[target] > 1:
            raise self.fail(node, "module called more than once (shared weights): use one module per call")
        pl = self.layer(kind, node, [x], module=mod)
        pad = self.pads.get(arg0)
        if pad is not None:
            pl.attrs["pad"] = pad[:4]
            pl.fused.extend(pad[4])
        pre = self.pre_bn.get(node)
        if pre is not None:
            if pad is not None:
                raise ConvertError(f"{pre.where}: a BatchNorm before zero padding cannot be folded exactly "
                                   f"(the padding would not see its shift): move it after a conv{pre.at}")
            pl.attrs["pre_bn"] = pre
            pl.fused.insert(0, pre.name + ">")
        last = node
        nxt = _single_user(node)
        if nxt is not None and nxt.op == "call_module" and isinstance(self.modules[str(nxt.target)],
                                                                      (nn.BatchNorm1d, nn.BatchNorm2d)):
            pl.bn = self.modules[str(nxt.target)]
            pl.fused.append(str(nxt.target))
            pl.attrs["bn_where"] = self.where(nxt) + _at(nxt)
            self.done.add(nxt)
            last = nxt
        last = self.fuse_act(last, pl)
        pl.output = self.values[last] = self.new_value(last, calib=last)
        self.values[node] = pl.output

    def plan_concat(self, node: torch.fx.Node) -> None:
        """torch.cat([a, b, ...], 1): a chain of two-input CONCAT layers; the last one is named after the
        node and calibrated on its output, the ones before share its quantisation."""
        ts = _bind(node, ("tensors", "dim"), {"dim": 0})["tensors"]
        vals = [self.value_of(t, node) for t in ts]
        out = self.new_value(node, calib=node)
        feats = len(out.shape) == 1  # (N, F) features: a pooled (1, 1, C) map flattens the same in NHWC
        if feats and any(len(v.shape) != 1 and v.shape[:-1] != (1, 1) for v in vals):
            raise self.fail(node, "joins a flattened (C, H, W) map, which the device holds in NHWC order: "
                                  "concatenate the maps along dim 1 before flattening (or pool them first)")
        if not feats and any(v.shape[:-1] != vals[0].shape[:-1] for v in vals):
            shapes = ", ".join(str(v.shape) for v in vals)
            raise self.fail(node, f"inputs of shapes {shapes} (NHWC) differ outside the channels")
        base = self.name(node)
        cur = vals[0]
        chans = [v.shape[-1] for v in vals]
        c = chans[0]
        for k, v in enumerate(vals[1:], start=1):
            last = k == len(vals) - 1
            c += chans[k]
            shape = (c,) if feats else (*vals[0].shape[:-1], c)
            nxt = out if last else _Value(shape, out.signal_1d, same_as=out)
            name = base if last else f"{base[:mtm.MAX_NAME - 4]}:{k}"
            if not last:
                self.names.add(name)
            pl = _PLayer("concat", name, [cur, v], nxt, where=self.where(node), attrs={"at": _at(node)})
            self.layers.append(pl)
            cur = nxt
        self.values[node] = out

    def plan_convt(self, node: torch.fx.Node, x: _Value, arg0: torch.fx.Node,
                   in_tshape: tuple[int, ...]) -> None:
        """ConvTranspose: a zero-inserting UPSAMPLE (named '<name>:zeros') then a stride-1 conv."""
        target = str(node.target)
        mod = self.modules[target]
        assert isinstance(mod, (nn.ConvTranspose1d, nn.ConvTranspose2d))
        is1d = isinstance(mod, nn.ConvTranspose1d)
        if len(in_tshape) != (3 if is1d else 4) or len(x.shape) != 3:
            raise self.fail(node, f"input of shape {in_tshape}: {type(mod).__name__} needs "
                                  f"{'(N, C, L)' if is1d else '(N, C, H, W)'} with the batch dim")
        if arg0 in self.pads:
            raise self.fail(node, "zero padding before a transposed conv is not supported")
        if node in self.pre_bn:
            raise self.fail(node, "a BatchNorm before a transposed conv cannot be folded: put it after")
        st = (1, mod.stride[0]) if is1d else _pair(mod.stride)
        op = (0, mod.output_padding[0]) if is1d else _pair(mod.output_padding)
        h, w, c = x.shape
        zs = ((h - 1) * st[0] + 1 + op[0], (w - 1) * st[1] + 1 + op[1], c)
        zname = f"{self.src_name(node)[:mtm.MAX_NAME - 6]}:zeros"
        if zname in self.names:
            raise self.fail(node, f"layer name '{zname}' is taken")
        self.names.add(zname)
        z = _Value(zs, x.signal_1d, same_as=x)
        up = _PLayer("upsample", zname, [x], z, where=self.where(node), attrs={"at": _at(node), "f": st,
                                                                              "mode": 1})
        self.layers.append(up)
        self.calls[target] = self.calls.get(target, 0) + 1
        if self.calls[target] > 1:
            raise self.fail(node, "module called more than once (shared weights): use one module per call")
        pl = self.layer("conv", node, [z], module=mod)
        pl.fused.append("conv_transpose")
        pl.attrs["transposed"] = True
        last = node
        nxt = _single_user(node)
        if nxt is not None and nxt.op == "call_module" and isinstance(self.modules[str(nxt.target)],
                                                                      (nn.BatchNorm1d, nn.BatchNorm2d)):
            pl.bn = self.modules[str(nxt.target)]
            pl.fused.append(str(nxt.target))
            pl.attrs["bn_where"] = self.where(nxt) + _at(nxt)
            self.done.add(nxt)
            last = nxt
        last = self.fuse_act(last, pl)
        pl.output = self.values[last] = self.new_value(last, calib=last)
        self.values[node] = pl.output

    def plan_bn(self, node: torch.fx.Node, x: _Value, in_tshape: tuple[int, ...]) -> None:
        """A BatchNorm with no conv/linear right before it: fold it into the next one, if that is exact."""
        where, at = self.where(node), _at(node)
        cur, flat = node, False
        while True:
            users = list(cur.users)
            if len(users) != 1:
                raise ConvertError(f"{where}: its output is used {len(users)} times, so it cannot be folded "
                                   f"into one conv/linear: put it directly after a conv/linear{at}")
            u = users[0]
            kind = "output" if u.op == "output" else _classify(u, self.modules)
            if kind in ("alias", "reshape") and u.args[0] is cur:
                flat = flat or len(_meta_shape(u)) == 2
                cur = u
                continue
            if kind in ("conv", "linear") and u.args[0] is cur:
                break
            what = "the model output" if u.op == "output" else self.where(u)
            raise ConvertError(f"{where}: a BatchNorm that does not follow a conv/linear is folded into the "
                               f"next conv/linear, but {what} comes next: put it directly after a "
                               f"conv/linear (or directly before one){at}")
        repeat = math.prod(in_tshape[2:]) if flat else 1
        self.pre_bn[u] = _PreBn(self.modules[str(node.target)], str(node.target), repeat, where, at)
        self.values[node] = x

    def plan_reshape(self, node: torch.fx.Node, x: _Value, in_tshape: tuple[int, ...]) -> None:
        out = _meta_shape(node)
        if len(out) < 2 or out[0] != in_tshape[0]:
            raise self.fail(node, f"reshape {_n(in_tshape)} -> {_n(out)} changes the batch dim: keep dim 0 "
                                  "(x.view(x.size(0), -1), torch.flatten(x, 1))")
        if len(out) == 2:
            if out[1] != math.prod(in_tshape[1:]):
                raise self.fail(node, f"reshape {_n(in_tshape)} -> {_n(out)}")
            self.values[node] = x  # a Linear reads it with its columns permuted to NHWC
            return
        if _nhwc_shape(out, self.where(node))[0] == x.shape:
            self.values[node] = x
            return
        if x is self.input:
            raise self.fail(node, f"reshapes the model input {_n(in_tshape)} -> {_n(out)}: give the model "
                                  f"its input in the shape its first layer takes, {_n(out)}, and reshape in "
                                  "your data pipeline")
        raise self.fail(node, f"reshape {_n(in_tshape)} -> {_n(out)} moves data on the device (NHWC "
                              f"{x.shape} -> {_nhwc_shape(out, '')[0]}): only reshapes to (N, features) and "
                              "reshapes that keep the NHWC shape (squeeze / unsqueeze of size-1 dims) "
                              "convert")

    def plan_pad(self, node: torch.fx.Node, x: _Value, arg0: torch.fx.Node,
                 in_tshape: tuple[int, ...]) -> None:
        if node.op == "call_module":
            p = self.modules[str(node.target)].padding
            p = tuple(int(v) for v in (p if isinstance(p, (tuple, list)) else (p,) * 4))
        else:
            p = tuple(int(v) for v in _bind(node, ("input", "pad"), {})["pad"])
        rank = len(in_tshape)
        if rank not in (3, 4) or len(p) not in (2, 4) or (rank == 3 and len(p) == 4 and any(p[2:])):
            raise self.fail(node, f"padding {p} of a rank-{rank} tensor: only the spatial dims of "
                                  "(N, C, H, W) / (N, C, L) can be padded")
        if any(v < 0 for v in p):
            raise self.fail(node, f"negative padding {p} (cropping) is not supported")
        left, right = p[0], p[1]
        top, bottom = (p[2], p[3]) if len(p) == 4 else (0, 0)
        names = [self.src_name(node)]
        prev = self.pads.get(arg0)
        if prev is not None:
            top, bottom, left, right = top + prev[0], bottom + prev[1], left + prev[2], right + prev[3]
            names = prev[4] + names
        for u in node.users:
            ok = u.op == "call_module" and isinstance(self.modules[str(u.target)], (nn.Conv1d, nn.Conv2d))
            ok = ok or (u.op != "output" and _classify(u, self.modules) == "pad")
            if not ok or u.args[0] is not node:
                what = "the model output" if u.op == "output" else self.where(u)
                raise self.fail(node, f"zero padding is folded into the conv after it, but {what} reads it: "
                                      "use the pool's own padding, or pad right before a conv")
        self.pads[node] = (top, bottom, left, right, names)
        self.values[node] = x
# --------------------------------------------------------------------------
# calibration


def _batches(calib: Any, batch_size: int) -> list[torch.Tensor]:
    def as_tensor(b: Any) -> torch.Tensor:
        if isinstance(b, (tuple, list)):
            b = b[0]
        return torch.as_tensor(np.asarray(b) if not isinstance(b, torch.Tensor) else b).float()

    if isinstance(calib, (torch.Tensor, np.ndarray)):
        t = as_tensor(calib)
        if t.shape[0] == 0:
            raise ConvertError("calibration data is empty")
        return list(torch.split(t, batch_size))
    out = [as_tensor(b) for b in calib]
    if not out:
        raise ConvertError("calibration data is empty")
    return out


class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule, nodes: set[torch.fx.Node]) -> None:
        super().__init__(gm)
        self.nodes = nodes
        self.lo: dict[torch.fx.Node, float] = {}
        self.hi: dict[torch.fx.Node, float] = {}
        self.hist: dict[torch.fx.Node, NDArray[np.int64]] | None = None
        self.bins = 2048

    def run_node(self, n: torch.fx.Node) -> Any:
        r = super().run_node(n)
        if n in self.nodes:
            v = r.detach()
            if self.hist is None:
                self.lo[n] = min(self.lo.get(n, math.inf), float(v.min()))
                self.hi[n] = max(self.hi.get(n, -math.inf), float(v.max()))
            else:
                lo, hi = self.lo[n], self.hi[n]
                if hi > lo:
                    h = torch.histc(v.double(), bins=self.bins, min=lo, max=hi)
                    self.hist[n] += h.numpy().astype(np.int64)
        return r


def _calibrate(gm: torch.fx.GraphModule, nodes: set[torch.fx.Node], batches: list[torch.Tensor],
               method: str, percentile: float, progress: bool) -> dict[torch.fx.Node, tuple[float, float]]:
    rec = _Recorder(gm, nodes)
    passes = 2 if method == "percentile" else 1
    with torch.no_grad():
        for p in range(passes):
            if p == 1:
                rec.hist = {n: np.zeros(rec.bins, dtype=np.int64) for n in nodes}
            desc = "calibrating" if passes == 1 else f"calibrating ({p + 1}/2)"
            for b in tqdm(batches, desc=desc, unit="batch", disable=not progress, leave=False):
                rec.run(b)
    ranges = {n: (rec.lo[n], rec.hi[n]) for n in nodes}
    if rec.hist is not None:
        q = percentile / 100.0
        for n, h in rec.hist.items():
            lo, hi = ranges[n]
            total = int(h.sum())
            if hi <= lo or total == 0:
                continue
            cum = np.cumsum(h)
            edges = np.linspace(lo, hi, rec.bins + 1)
            i_hi = int(np.searchsorted(cum, q * total))
            i_lo = int(np.searchsorted(cum, (1.0 - q) * total))
            ranges[n] = (lo if lo >= 0 else float(edges[i_lo]), float(edges[min(i_hi + 1, rec.bins)]))
    return ranges


def _act_quant(lo: float, hi: float) -> tuple[float, int]:
    """Asymmetric int8 (scale, zero point) for a float range (0 always representable)."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ConvertError("calibration produced a non-finite activation")
    if hi - lo < 1e-8:
        hi = lo + 1e-8
    scale = float(np.float32((hi - lo) / 255.0))
    zp = int(np.clip(round(-128 - lo / scale), -128, 127))
    return scale, zp


# --------------------------------------------------------------------------
# emit


class _Emitter:
    def __init__(self) -> None:
        self.tensors: list[Tensor] = []

    def add(self, t: Tensor) -> int:
        self.tensors.append(t)
        return len(self.tensors) - 1

    def const(self, data: NDArray, dtype: DType, quant: Quant = Quant.NONE,
              qscales: int | None = None) -> int:
        arr = np.ascontiguousarray(data, dtype=dtype.np)
        return self.add(Tensor(dtype, tuple(arr.shape), Kind.CONST, quant, qscales=qscales, data=arr))


def _act_limits(act: Act, scale: float, zp: int) -> tuple[int, int]:
    if act == Act.RELU:
        return zp, 127
    if act == Act.RELU6:
        return zp, o.relu6_q6(scale, zp)
    return -128, 127


def _bn_affine(bn: nn.Module, where: str) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """BatchNorm in eval mode as ``x * f + c`` per channel."""
    assert isinstance(bn, (nn.BatchNorm1d, nn.BatchNorm2d))
    if bn.running_mean is None or bn.running_var is None:
        raise ConvertError(f"{where}: needs running statistics (track_running_stats=True)")
    mean = bn.running_mean.detach().double().numpy()
    var = bn.running_var.detach().double().numpy()
    gamma = np.ones_like(mean) if bn.weight is None else bn.weight.detach().double().numpy()
    beta = np.zeros_like(mean) if bn.bias is None else bn.bias.detach().double().numpy()
    f = gamma / np.sqrt(var + bn.eps)
    return f, beta - mean * f


def _float_params(pl: _PLayer) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Weight and bias in float64 (PyTorch layout), BatchNorms folded in."""
    mod = pl.module
    assert isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.Linear, nn.ConvTranspose1d, nn.ConvTranspose2d))
    w = mod.weight.detach().double().numpy().copy()
    if pl.attrs.get("transposed"):  # (in, out, k...) -> the equivalent conv's (out, in, k...), flipped
        w = np.flip(w.swapaxes(0, 1), axis=tuple(range(2, w.ndim))).copy()
    b = np.zeros(w.shape[0]) if mod.bias is None else mod.bias.detach().double().numpy().copy()
    pre: _PreBn | None = pl.attrs.get("pre_bn")
    if pre is not None:  # layer(x * f + c) = layer'(x): scale the input columns, move c into the bias
        f, c = _bn_affine(pre.module, pre.where + pre.at)
        f, c = np.repeat(f, pre.repeat), np.repeat(c, pre.repeat)
        if isinstance(mod, nn.Linear):
            b = b + w @ c
            w = w * f[None, :]
        else:  # input channel i of output channel o's group g is channel g * (in_c / groups) + i
            per_in, per_out = w.shape[1], w.shape[0] // mod.groups
            ch = (np.arange(w.shape[0]) // per_out)[:, None] * per_in + np.arange(per_in)[None, :]
            fo = f[ch].reshape(w.shape[:2] + (1,) * (w.ndim - 2))
            b = b + (w * c[ch].reshape(fo.shape)).reshape(w.shape[0], -1).sum(axis=1)
            w = w * fo
    if pl.bn is not None:
        f, c = _bn_affine(pl.bn, pl.attrs.get("bn_where", f"layer '{pl.fused[0]}'"))
        if len(f) != w.shape[0]:
            raise ConvertError(f"{pl.attrs.get('bn_where')}: BatchNorm features != {w.shape[0]}")
        w = w * f.reshape((-1,) + (1,) * (w.ndim - 1))
        b = b * f + c
    return w, b


def _quant_weights(em: _Emitter, pl: _PLayer, w: NDArray[np.float64], b: NDArray[np.float64],
                   s_in: float, s_out: float) -> tuple[int, int, int, int]:
    out_c = w.shape[0]
    absmax = np.abs(w.reshape(out_c, -1)).max(axis=1)
    if not np.all(np.isfinite(absmax)):
        raise ConvertError(f"layer '{pl.name}': weights not finite")
    # A channel whose scale would fall below the format's floor (2^-40) holds weights
    # under 127 * 2^-40, below what int8 at any valid scale represents: it is a dead
    # channel, stored as zeros with the all-zero channel's scale 1.0 (which keeps its bias
    # representable; a floored 2^-40 scale would overflow the int32 bias).
    s_w = (absmax / 127.0).astype(np.float32)
    dead = ~(s_w >= np.float32(mtm.SCALE_MIN))
    s_w = np.where(dead, np.float32(1.0), s_w).astype(np.float32)
    w = np.where(dead.reshape((-1,) + (1,) * (w.ndim - 1)), 0.0, w)
    if not np.all(np.isfinite(s_w) & (s_w > 0)):
        raise ConvertError(f"layer '{pl.name}': weights not finite")
    s_w64 = s_w.astype(np.float64).reshape((-1,) + (1,) * (w.ndim - 1))
    wq = np.clip(np.rint(w / s_w64), -127, 127).astype(np.int8)
    s_b = s_in * s_w.astype(np.float64)
    bq = np.rint(b / s_b)
    if np.any(np.abs(bq) > 2**30):
        warnings.warn(f"layer '{pl.name}': bias clipped to |bias| <= 2^30 int32 units", stacklevel=3)
        bq = np.clip(bq, -(2**30), 2**30)
    mults, shifts = zip(*(o.quantize_multiplier(s_in * float(s) / s_out) for s in s_w), strict=True)
    qs = em.const(s_w, DType.FLOAT32)
    wi = em.const(wq, DType.INT8, Quant.PER_CHANNEL, qscales=qs)
    bi = em.const(bq.astype(np.int32), DType.INT32, Quant.BIAS)
    mi = em.const(np.array(mults, dtype=np.int32), DType.INT32)
    si = em.const(np.array(shifts, dtype=np.int32), DType.INT32)
    return wi, bi, mi, si


def _emit_layer(em: _Emitter, pl: _PLayer) -> Layer:
    x, y = pl.inputs[0].root(), pl.output.root()
    ins = [v.index for v in pl.inputs]
    out = pl.output.index
    fused = ",".join(pl.fused)
    if pl.kind in ("conv", "linear"):
        mod = pl.module
        w, b = _float_params(pl)
        a_min, a_max = _act_limits(pl.act, y.scale, y.zp)
        if pl.kind == "conv":
            assert isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.ConvTranspose1d, nn.ConvTranspose2d))
            where = pl.where
            in_h, in_w, in_c = pl.inputs[0].shape
            out_h, out_w, out_c = pl.output.shape
            is1d = isinstance(mod, (nn.Conv1d, nn.ConvTranspose1d))
            ks = (1, mod.kernel_size[0]) if is1d else _pair(mod.kernel_size)
            st = (1, mod.stride[0]) if is1d else _pair(mod.stride)
            dl = (1, mod.dilation[0]) if is1d else _pair(mod.dilation)
            ke = ((ks[0] - 1) * dl[0] + 1, (ks[1] - 1) * dl[1] + 1)  # the window's extent
            if pl.attrs.get("transposed"):  # stride 1 over the zero-inserted input, padding k - 1 - p
                st = (1, 1)
                tp = (0, mod.padding[0]) if is1d else _pair(mod.padding)
                pd = (ks[0] - 1 - tp[0], ks[1] - 1 - tp[1]) if not is1d else (0, ks[1] - 1 - tp[1])
            elif isinstance(mod.padding, str):
                if mod.padding == "valid":
                    pd = (0, 0)
                else:  # 'same': PyTorch pads total // 2 before, the rest after
                    pd = ((ke[0] - 1) // 2, (ke[1] - 1) // 2)
            else:
                pd = (0, mod.padding[0]) if is1d else _pair(mod.padding)
            pad = pl.attrs.get("pad")
            if pad is not None:  # zero padding before: top / left add, bottom / right is out_h, out_w
                pd = (pd[0] + pad[0], pd[1] + pad[2])
            at = pl.attrs.get("at", "")
            if not (pd[0] < ke[0] and pd[1] < ke[1]):
                what = " (its own plus the zero padding before it)" if pad is not None else ""
                raise ConvertError(f"{where}: padding {pd}{what} must be smaller than the kernel {ke}{at}")
            if (out_h - 1) * st[0] - pd[0] >= in_h or (out_w - 1) * st[1] - pd[1] >= in_w:
                raise ConvertError(f"{where}: the padding leaves whole windows outside the input (output "
                                   f"{out_h} x {out_w} of {in_h} x {in_w}): pad less{at}")
            pre = pl.attrs.get("pre_bn")
            if pre is not None and (pd != (0, 0) or (out_h - 1) * st[0] + ke[0] > in_h
                                    or (out_w - 1) * st[1] + ke[1] > in_w):
                raise ConvertError(f"{pre.where}: cannot be folded exactly into '{pl.name}', which pads its "
                                   "input (the padding would not see the BatchNorm's shift): put the "
                                   f"BatchNorm after a conv, or give '{pl.name}' padding 0{pre.at}")
            if is1d:
                w = w[:, :, None, :]  # (O, I/g, 1, K)
            w = w.transpose(0, 2, 3, 1)  # OIHW -> OHWI
            params = [in_h, in_w, in_c, out_h, out_w, out_c, ks[0], ks[1], st[0], st[1], pd[0], pd[1],
                      int(mod.groups), x.zp, y.zp, a_min, a_max]
            if dl != (1, 1):
                params += list(dl)
        else:
            assert isinstance(mod, nn.Linear)
            xs = pl.inputs[0].shape
            if len(xs) == 3:  # flattened (C, H, W) in PyTorch, (H, W, C) here: permute columns
                h, ww, c = xs
                w = w.reshape(w.shape[0], c, h, ww).transpose(0, 2, 3, 1).reshape(w.shape[0], -1)
            params = [math.prod(xs), w.shape[0], x.zp, y.zp, a_min, a_max]
        wi, bi, mi, si = _quant_weights(em, pl, w, b, x.scale, y.scale)
        op = Op.CONV2D if pl.kind == "conv" else Op.LINEAR
        return Layer(op, pl.name, ins, out, params, pl.act, wi, bi, mi, si, fused=fused)
    n_out = math.prod(pl.output.shape)
    if pl.kind == "lut":  # tables from the float32 scales widened to double, as the contract says
        table, dtable, d_shift = o.lut_tables(pl.attrs["fn"], float(np.float32(x.scale)), x.zp,
                                              float(np.float32(y.scale)), y.zp, pl.attrs["slope"])
        ti, di = em.const(table, DType.INT8), em.const(dtable, DType.INT32)
        return Layer(Op.LUT, pl.name, ins, out, [n_out, x.zp, y.zp, d_shift], weight=ti, bias=di, fused=fused)
    if pl.kind == "relu":
        return Layer(Op.RELU, pl.name, ins, out, [n_out, x.zp], fused=fused)
    if pl.kind == "relu6":
        return Layer(Op.RELU6, pl.name, ins, out, [n_out, x.zp, o.relu6_q6(x.scale, x.zp)], fused=fused)
    if pl.kind == "gap":
        h, ww, c = pl.inputs[0].shape
        return Layer(Op.GLOBAL_AVGPOOL, pl.name, ins, out, [h * ww, c], fused=fused)
    if pl.kind in ("maxpool", "avgpool"):
        pool: _Pool = pl.attrs["pool"]
        in_h, in_w, c = pl.inputs[0].shape
        out_h, out_w, _ = pl.output.shape
        params = [in_h, in_w, c, out_h, out_w, *pool.ks, *pool.st, *pool.pd]
        return Layer(Op.MAXPOOL if pool.is_max else Op.AVGPOOL, pl.name, ins, out, params, fused=fused)
    if pl.kind == "concat":
        x2 = pl.inputs[1].root()
        c1, c2 = pl.inputs[0].shape[-1], pl.inputs[1].shape[-1]
        hw = math.prod(pl.output.shape) // (c1 + c2)
        params = o.concat_params(x.scale, x.zp, x2.scale, x2.zp, y.scale, y.zp, hw, c1, c2)
        return Layer(Op.CONCAT, pl.name, ins, out, params, fused=fused)
    if pl.kind == "upsample":
        in_h, in_w, c = pl.inputs[0].shape
        out_h, out_w, _ = pl.output.shape
        f_h, f_w = pl.attrs["f"]
        params = [in_h, in_w, c, out_h, out_w, f_h, f_w, pl.attrs["mode"], x.zp]
        return Layer(Op.UPSAMPLE, pl.name, ins, out, params, fused=fused)
    assert pl.kind == "add"
    x2 = pl.inputs[1].root()
    a_min, a_max = _act_limits(pl.act, y.scale, y.zp)
    params = o.add_params(x.scale, x.zp, x2.scale, x2.zp, y.scale, y.zp, a_min, a_max, n_out)
    return Layer(Op.ADD, pl.name, ins, out, params, pl.act, fused=fused)


# --------------------------------------------------------------------------
# public API


def _trace(model: nn.Module) -> torch.fx.GraphModule:
    """torch.fx symbolic trace that records each node's source line (for messages)."""
    tracer = torch.fx.Tracer()
    tracer.record_stack_traces = True
    try:
        graph = tracer.trace(model)
    except Exception as e:  # noqa: BLE001 - tracing raises anything
        raise ConvertError(_trace_message(model, e)) from e
    return torch.fx.GraphModule(tracer.root, graph, type(model).__name__)


def _trace_message(model: nn.Module, e: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not _internal(f.filename)]
    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
    where = ""
    if frames:
        f = frames[-1]
        where = f" in {f.name}() at {Path(f.filename).name}:{f.lineno} ({(f.line or '').strip()})"
    msg = f"torch.fx cannot trace {type(model).__name__}{where}: {first}"
    if "control flow" in str(e) or "iteration" in str(e) or isinstance(e, torch.fx.proxy.TraceError):
        msg += (": the converter runs forward() once on symbolic tensors, so an if / while / for on a "
                "tensor's value cannot be traced: decide from constructor arguments or shapes instead, or "
                "compute it outside the model")
    return msg


class _Shapes(torch.fx.Interpreter):
    """Shape propagation that names the node that fails (ShapeProp prints a traceback)."""

    def run_node(self, n: torch.fx.Node) -> Any:
        try:
            r = super().run_node(n)
        except Exception as e:  # noqa: BLE001 - the model's own error, reported with the node
            raise _NodeFailed(n, e) from e
        if isinstance(r, torch.Tensor):
            n.meta["mt_shape"] = tuple(int(d) for d in r.shape)
        return r


class _NodeFailed(Exception):
    def __init__(self, node: torch.fx.Node, error: BaseException) -> None:
        super().__init__(str(error))
        self.node, self.error = node, error


def _first_layer(gm: torch.fx.GraphModule) -> tuple[str, nn.Module] | None:
    for n in gm.graph.nodes:
        if n.op == "call_module":
            mod = gm.get_submodule(str(n.target))
            if isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.Linear)):
                return str(n.target), mod
    return None


def _layout_hint(gm: torch.fx.GraphModule, shape: tuple[int, ...]) -> str:
    """What the first layer takes, and how to fix ``shape`` when the fix is clear."""
    first = _first_layer(gm)
    if first is None:
        return ""
    name, mod = first
    if isinstance(mod, nn.Linear):
        want, rank, ch = f"(N, {mod.in_features})", 2, -1
    elif isinstance(mod, nn.Conv1d):
        want, rank, ch = f"(N, {mod.in_channels}, L)", 3, mod.in_channels
    else:
        assert isinstance(mod, nn.Conv2d)
        want, rank, ch = f"(N, {mod.in_channels}, H, W)", 4, mod.in_channels
    hint = f"; the first layer '{name}' ({type(mod).__name__}) takes {want} (PyTorch layout)"
    if len(shape) == rank and ch > 0 and shape[-1] == ch and shape[1] != ch:
        hint += (": the data look channels-last, pass x.transpose(0, 3, 1, 2)" if rank == 4
                 else ": the data look channels-last, pass x.transpose(0, 2, 1)")
    elif len(shape) == rank - 1 and ch == 1:
        hint += ": add the channel axis, x[:, None]"
    return hint


def _looks_like_bytes(batches: list[torch.Tensor]) -> tuple[float, float] | None:
    """(min, max) when the calibration values are all integers in 0..255 with max > 1."""
    lo = min(float(b.min()) for b in batches)
    hi = max(float(b.max()) for b in batches)
    if lo >= 0 and 1 < hi <= 255 and all(bool(torch.all(b == torch.round(b))) for b in batches):
        return lo, hi
    return None


def convert(module: nn.Module, calib: Any, *, method: str = "minmax", percentile: float = 99.99,
            batch_size: int = 64, progress: bool = True, headroom: float = 1.0,
            ranges: dict[str, tuple[float, float]] | None = None) -> Model:
    """Convert ``module`` to an int8 :class:`mtm.Model`, calibrating activations on ``calib``.

    ``calib``: a float tensor / array of inputs in PyTorch layout with a batch
    dimension, or an iterable of such batches (or of ``(x, label)`` tuples).
    ``method``: ``"minmax"`` or ``"percentile"`` (ranges clipped to the
    ``percentile`` / ``100 - percentile`` quantiles, from a 2048-bin histogram;
    a range that starts at >= 0 keeps its minimum). ``headroom`` widens every
    calibrated activation range by that factor: activation scales stay fixed on
    the device, so a model that will be trained from scratch there needs room
    for its activations to grow. Raises ConvertError naming the layer and op for
    anything unsupported (``REGISTRY`` lists what converts); warns
    (:class:`ConvertWarning`) about calibration data that look like 0..255 pixels.
    """
    return _convert(module, calib, method=method, percentile=percentile, batch_size=batch_size,
                    progress=progress, headroom=headroom, ranges=ranges)[0]


def _convert(module: nn.Module, calib: Any, *, method: str = "minmax", percentile: float = 99.99,
             batch_size: int = 64, progress: bool = True, headroom: float = 1.0,
             ranges: dict[str, tuple[float, float]] | None = None) -> tuple[Model, list[str]]:
    """``convert``, also returning notes for the user (e.g. a stripped final softmax)."""
    if not (math.isfinite(headroom) and headroom >= 1.0):
        raise ConvertError("headroom must be a finite number >= 1")
    if method not in ("minmax", "percentile"):
        raise ConvertError(f"unknown calibration method {method!r} (minmax or percentile)")
    if not 50.0 < percentile <= 100.0:
        raise ConvertError("percentile must be in (50, 100]")
    if not isinstance(module, nn.Module):
        raise ConvertError(f"expected a torch.nn.Module, got {type(module).__name__}")
    model = copy.deepcopy(module).cpu().float().eval()
    gm = _trace(model)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    batches = _batches(calib, batch_size)
    first = batches[0]
    probe = first[:2] if len(first) >= 2 else torch.cat([first, first])  # 2 rows: squeeze() keeps the batch
    with torch.no_grad():
        try:
            _Shapes(gm).run(probe)
        except _NodeFailed as e:
            msg = next((ln.strip() for ln in str(e.error).splitlines() if ln.strip()), type(e.error).__name__)
            raise ConvertError(f"calibration data of shape {tuple(first.shape)} do not run through the "
                               f"model: "
                               f"{_describe(e.node, dict(gm.named_modules()))} fails with: {msg}{_at(e.node)}"
                               f"{_layout_hint(gm, tuple(first.shape))}") from None
    shapes = {tuple(b.shape[1:]) for b in batches}
    if len(shapes) > 1:
        raise ConvertError(f"calibration batches differ in shape: {sorted(shapes)}")
    byte_range = _looks_like_bytes(batches)
    if byte_range is not None:
        warnings.warn(f"calibration data are integers in {byte_range[0]:g}..{byte_range[1]:g}: if the model "
                      "was trained on inputs scaled to 0..1, divide the data by 255 (the device's input "
                      "scale is set from this range)", ConvertWarning, stacklevel=3)
    planner = _Planner(gm)
    planner.plan()
    if not planner.layers or planner.input is None or planner.output is None:
        raise ConvertError("the model has no convertible layers (a conv or a linear is needed)")
    if planner.output is not planner.layers[-1].output:
        raise ConvertError("the model output must be produced by its last layer (the file's output is its "
                           "last layer's)")
    notes = []
    if planner.softmax is not None:
        planner.layers[-1].fused.append(planner.softmax)
        notes.append(f"the final softmax '{planner.softmax}' is stripped: the file outputs logits "
                     "(predict() is unchanged; apply softmax to the outputs for probabilities)")
    values = [planner.input] + [pl.output for pl in planner.layers]
    calib_nodes = {v.calib for v in values if v.calib is not None}
    found = _calibrate(gm, calib_nodes, batches, method, percentile, progress)
    found = {n: (lo * headroom, hi * headroom) for n, (lo, hi) in found.items()}
    for name, rng in (ranges or {}).items():
        pls = [pl for pl in planner.layers if pl.name == name]
        node = pls[0].output.root().calib if pls else None
        if node is None:
            raise ConvertError(f"ranges: no layer {name!r} with its own output range")
        lo, hi = float(rng[0]), float(rng[1])
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ConvertError(f"ranges: {name!r}: need finite lo < hi")
        found[node] = (lo, hi)
    em = _Emitter()
    for v in values:
        r = v.root()
        if r.calib is not None and r.scale == 0.0:
            r.scale, r.zp = _act_quant(*found[r.calib])
        v.index = em.add(Tensor(DType.INT8, v.shape, Kind.ACTIVATION, Quant.PER_TENSOR, r.scale, r.zp,
                                signal_1d=v.signal_1d))
    layers = [_emit_layer(em, pl) for pl in planner.layers]
    m = Model(em.tensors, layers, planner.input.index, planner.output.index)
    try:
        mtm.validate(m)
    except ValueError as e:
        raise ConvertError(f"converted model is not representable: {e}") from e
    return m, notes


def convert_to_file(module: nn.Module, calib: Any, path: str | Path, **kw: Any) -> Model:
    """``convert`` then write ``path`` atomically (nothing is written on any error)."""
    m = convert(module, calib, **kw)
    mtm.save(m, path)
    return m


def _model(model: bytes | bytearray | memoryview | Model) -> Model:
    return model if isinstance(model, Model) else mtm.read(model)


def to_nhwc(x: ArrayLike) -> NDArray:
    """PyTorch batch layout -> (N, flat NHWC): (N,C,H,W), (N,C,L), (N,F)."""
    a = np.asarray(x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x)
    if a.ndim == 4:
        a = a.transpose(0, 2, 3, 1)
    elif a.ndim == 3:
        a = a.transpose(0, 2, 1)
    elif a.ndim != 2:
        raise ValueError(f"expected a batch of rank 2..4, got shape {a.shape}")
    return np.ascontiguousarray(a).reshape(a.shape[0], -1)


def quantize_input(model: bytes | Model, x: ArrayLike) -> NDArray[np.int8]:
    """Float batch in PyTorch layout -> int8 (N, input size) with the file's input quantisation."""
    m = _model(model)
    t = m.tensors[m.input]
    a = to_nhwc(x).astype(np.float64)
    if a.shape[1] != t.numel:
        raise ValueError(f"input has {a.shape[1]} values per sample, the model needs {t.numel}")
    return np.clip(np.rint(a / t.scale) + t.zero_point, -128, 127).astype(np.int8)


def dequantize_output(model: bytes | Model, q: ArrayLike) -> NDArray[np.float64]:
    """int8 outputs -> real values with the file's output quantisation."""
    m = _model(model)
    t = m.tensors[m.output]
    return t.scale * (np.asarray(q).astype(np.float64) - t.zero_point)


def _run_layer(m: Model, ly: Layer, vals: dict[int, NDArray[np.int8]]) -> NDArray[np.int8]:
    x = vals[ly.inputs[0]]
    p = ly.params
    if ly.op in (Op.CONV2D, Op.LINEAR):
        fn: Callable[..., NDArray[np.int8]] = (o.conv2d_s8_forward if ly.op == Op.CONV2D
                                                else o.linear_s8_forward)
        return fn(p, x, m.data(ly.weight).reshape(-1), m.data(ly.bias), m.data(ly.mult), m.data(ly.shift))
    if ly.op == Op.LUT:
        return o.lut_s8_forward(x, m.data(ly.weight))
    if ly.op == Op.RELU:
        return o.relu_s8_forward(x, p[1])
    if ly.op == Op.RELU6:
        return o.relu6_s8_forward(x, p[1], p[2])
    if ly.op == Op.MAXPOOL:
        return o.maxpool_s8_forward(p, x)
    if ly.op == Op.AVGPOOL:
        return o.avgpool_s8_forward(p, x)
    if ly.op == Op.GLOBAL_AVGPOOL:
        return o.global_avgpool_s8_forward(x, p[0], p[1])
    if ly.op == Op.ADD:
        return o.add_s8_forward(p, x, vals[ly.inputs[1]])
    if ly.op == Op.CONCAT:
        return o.concat_s8_forward(p, x, vals[ly.inputs[1]])
    if ly.op == Op.UPSAMPLE:
        return o.upsample_s8_forward(p, x)
    raise ValueError(f"layer '{ly.name}': unknown op {ly.op}")


def run_mtm(model_bytes: bytes | bytearray | memoryview | Model, x: ArrayLike) -> NDArray[np.int8]:
    """Run a ``.mtm`` file through the oracle kernels -> int8 outputs.

    ``x``: int8 input(s) already quantised and in flat NHWC order, shape
    ``(in_size,)`` (-> ``(out_size,)``) or ``(N, in_size)`` (-> ``(N, out_size)``);
    or a float batch in PyTorch layout, quantised with the file's input params
    (-> ``(N, out_size)``).
    """
    m = _model(model_bytes)
    a = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    single = False
    if a.dtype.kind == "f":
        q = quantize_input(m, a)
    else:
        if a.dtype != np.int8:
            if a.size and (a.min() < -128 or a.max() > 127):
                raise ValueError("integer input outside int8")
            a = a.astype(np.int8)
        single = a.ndim == 1
        q = a.reshape(1, -1) if single else a.reshape(a.shape[0], -1)
    n_in = m.tensors[m.input].numel
    if q.shape[1] != n_in:
        raise ValueError(f"input has {q.shape[1]} values per sample, the model needs {n_in}")
    outs = np.empty((q.shape[0], m.tensors[m.output].numel), dtype=np.int8)
    for i, sample in enumerate(q):
        vals: dict[int, NDArray[np.int8]] = {m.input: sample}
        for ly in m.layers:
            vals[ly.output] = _run_layer(m, ly, vals)
        outs[i] = vals[m.output]
    return outs[0] if single else outs


# --------------------------------------------------------------------------
# command line (``microtrain convert``)


def _load_module(spec: str, state_dict: str | None) -> nn.Module:
    from microtrain_tools.to_torch import load_module  # one way to name a user's module, for both commands

    try:
        module: nn.Module = load_module(spec, state_dict, what="model")
    except AttributeError as e:  # unpickling a class that is not importable here
        m = re.search(r"Can't get attribute '([^']+)' on <module '([^']+)'", str(e))
        if m is None:
            raise ConvertError(f"model {spec!r}: cannot be loaded: {e}") from None
        cls, where = m.group(1), m.group(2)
        where = "__main__" if where.endswith("__main__") else where  # sys.modules' __main__ may be renamed
        raise ConvertError(f"model {spec!r}: the pickled model's class {cls!r} was defined in {where!r} (the "
                           "script that saved it), which cannot be imported here: move the class into a "
                           f"module and pass MODULE:{cls} (the file in the current folder or on PYTHONPATH) "
                           "with --state-dict of model.state_dict(), or save it from that module") from None
    except ModuleNotFoundError as e:
        raise ConvertError(f"model {spec!r}: the pickled model needs the module {e.name!r}, which is not "
                           "importable here: run from its folder or put it on PYTHONPATH") from None
    except ValueError as e:
        if "without arguments" in str(e):
            raise ConvertError(f"{e}: pass a factory that takes no arguments instead (e.g. def make(): "
                               "return "
                               "Net(10), as MODULE:make)") from None
        raise
    return module


def _load_calib(path: str, key: str | None, limit: int | None) -> np.ndarray:
    p = Path(path)
    if p.suffix == ".npy":
        arr = np.load(p)
    else:
        with np.load(p) as z:
            if key is not None and key not in z.files:
                raise ConvertError(f"--calib {path}: no array {key!r} (it has {', '.join(z.files)})")
            k = key or ("x" if "x" in z.files else z.files[0])
            arr = z[k]
    if arr.dtype.kind not in "fiub":
        raise ConvertError(f"--calib {path}: array of dtype {arr.dtype}, expected numbers")
    return arr[:limit] if limit else arr


# --------------------------------------------------------------------------
# the table of what converts (docs/ops.md, ``--list-ops``)

OPS_DOC_HEADER = """\
# What converts

`microtrain convert` traces a PyTorch `nn.Module` with torch.fx and maps each
op onto the device's int8 kernels. This page is generated from the
converter's own registry (`REGISTRY` and `REFUSALS` in
`tools/microtrain_tools/convert.py`): `microtrain convert --list-ops` prints the
same table, and `microtrain convert --write-doc docs/ops.md` rewrites this page
(a test checks that it is current).

Anything else is refused with one line naming the layer (its module path, or
the traced function / method and the source line), the op, and what to do
instead; nothing is written. Inputs are `(N, C, H, W)` images, `(N, C, L)`
1-D signals or `(N, features)` vectors in PyTorch layout; the device holds
activations as NHWC. The model has one input and one output.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def ops_doc() -> str:
    """docs/ops.md: the registry as Markdown."""
    lines = [OPS_DOC_HEADER, "## Supported", "", "| PyTorch | on the device | conditions |", "|---|---|---|"]
    lines += [f"| {_cell(e.forms)} | {_cell(e.becomes)} | {_cell(e.notes)} |" for e in REGISTRY]
    lines += ["", "Shape arithmetic (`x.shape`, `x.size(0)`) is allowed where reshapes take it.", "",
              "## Refused, with what to do instead", "", "| PyTorch | instead |", "|---|---|"]
    lines += [f"| {_cell(r.forms)} | {_cell(r.advice)} |" for r in REFUSALS]
    lines += ["", "Any other module, function or method is refused as an unsupported op.", ""]
    return "\n".join(lines)


def ops_text() -> str:
    """``--list-ops``: the registry as plain text."""
    out = ["Supported (PyTorch -> on the device; conditions):"]
    for e in REGISTRY:
        out.append(f"  {e.forms}\n      -> {e.becomes}" + (f"; {e.notes}" if e.notes else ""))
    out.append("Refused (what to do instead):")
    out += [f"  {r.forms}\n      -> {r.advice}" for r in REFUSALS]
    return "\n".join(out)


def build_parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="microtrain convert")
    p.description = ("Convert a PyTorch model to an int8 .mtm file (docs/format.md): BatchNorm folded, "
                     "ReLU fused, per-channel int8 weights, activations calibrated on CALIB. "
                     "--list-ops (or docs/ops.md) says which PyTorch modules, functions and idioms convert.")
    p.add_argument("model", nargs="?",
                   help="a torch.save()d nn.Module (.pt), or PKG.MODULE:FACTORY building one")
    p.add_argument("-o", "--output", help="the .mtm file to write (atomically) (required)")
    p.add_argument("--calib",
                   help="calibration inputs in PyTorch layout (N,C,H,W) / (N,C,L) / (N,F): .npy or .npz "
                        "(required)")
    p.add_argument("--calib-key", default=None, help="array name inside the .npz (default 'x' or the first)")
    p.add_argument("--limit", type=int, default=None, help="use only the first N calibration samples")
    p.add_argument("--state-dict", default=None, help="checkpoint to load into MODULE:FACTORY's module")
    p.add_argument("--method", choices=("minmax", "percentile"), default="minmax",
                   help="activation range calibration (default minmax)")
    p.add_argument("--percentile", type=float, default=99.99, help="for --method percentile (default 99.99)")
    p.add_argument("--batch-size", type=int, default=64, help="calibration batch size (default 64)")
    p.add_argument("--headroom", type=float, default=1.0,
                   help="widen activation ranges by this factor (>= 1; for training from scratch on device)")
    p.add_argument("--list-ops", action="store_true",
                   help="print the PyTorch modules, functions and idioms that convert, and exit")
    p.add_argument("--write-doc", metavar="OPS.md", default=None,
                   help="write that table as Markdown (docs/ops.md) and exit")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary")
    return p


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def main(argv: list[str] | None = None, args: argparse.Namespace | None = None) -> int:
    """Run ``microtrain convert``: errors are one line on stderr, exit code 2."""
    if args is None:
        args = build_parser().parse_args(argv)
    if args.list_ops or args.write_doc:
        if args.write_doc:
            Path(args.write_doc).write_text(ops_doc())
        if args.list_ops:
            print(ops_text())
        return 0
    missing = [n for n, v in (("MODEL", args.model), ("-o/--output", args.output), ("--calib", args.calib))
               if not v]
    if missing:
        print(f"microtrain convert: error: the following arguments are required: {', '.join(missing)} "
              "(see microtrain convert --help)", file=sys.stderr)
        return 2
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = _load_module(args.model, args.state_dict)
            calib = _load_calib(args.calib, args.calib_key, args.limit)
            m, notes = _convert(module, calib, method=args.method, percentile=args.percentile,
                                batch_size=args.batch_size, progress=not args.quiet, headroom=args.headroom)
            mtm.save(m, args.output)
    except (ValueError, OSError, RuntimeError, ImportError, pickle.UnpicklingError) as e:
        print(f"microtrain convert: error: {_one_line(e)}", file=sys.stderr)
        return 2
    for w in caught:  # one line each, no source location: they are about the user's model and data
        print(f"microtrain convert: warning: {_one_line(Exception(str(w.message)))}", file=sys.stderr)
    if not args.quiet:
        print(mtm.summary(m))
        for n in notes:
            print(f"note: {n}")
        print(f"wrote {args.output} ({Path(args.output).stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
