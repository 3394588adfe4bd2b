"""PyTorch -> ``.mtm`` converter and the numpy reference runner of ``.mtm`` files.

``convert(module, calib)`` traces the module with torch.fx (so graphs with
residual adds work), folds BatchNorm into the preceding conv/linear, fuses
ReLU/ReLU6 into the preceding conv/linear/add, drops Dropout/Flatten, calibrates
per-tensor activation ranges on ``calib`` and quantises to the int8 scheme of
docs/numerics.md, returning an :class:`mtm.Model` (``mtm.write`` gives bytes).
``convert_to_file`` writes atomically: nothing is left behind on error.

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
import sys
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
from torch.fx.passes.shape_prop import ShapeProp
from tqdm import tqdm

from microtrain_tools import mtm
from microtrain_tools.mtm import Act, DType, Kind, Layer, Model, Op, Quant, Tensor
from microtrain_tools.reference import oracle as o

__all__ = [
    "ConvertError",
    "convert",
    "convert_to_file",
    "dequantize_output",
    "main",
    "quantize_input",
    "run_mtm",
    "to_nhwc",
]


class ConvertError(ValueError):
    """An unsupported op/attribute (the message names the layer and op) or bad input."""


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


@dataclass(eq=False)
class _PLayer:
    kind: str  # conv, linear, relu, relu6, maxpool, avgpool, gap, add
    name: str
    inputs: list[_Value]
    output: _Value
    module: nn.Module | None = None
    bn: nn.Module | None = None
    act: Act = Act.NONE
    fused: list[str] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)


_RELU_FNS: tuple[Any, ...] = (F.relu, torch.relu, torch.relu_, F.relu_)
_ADD_FNS: tuple[Any, ...] = (operator.add, operator.iadd, torch.add)
_FLATTEN_METHODS = ("flatten", "view", "reshape")


def _meta_shape(node: torch.fx.Node) -> tuple[int, ...]:
    tm = node.meta.get("tensor_meta")
    if tm is None or not hasattr(tm, "shape"):
        raise ConvertError(f"layer '{node.name}': output is not a single tensor")
    return tuple(int(d) for d in tm.shape)


def _nhwc_shape(shape: tuple[int, ...], where: str) -> tuple[tuple[int, ...], bool]:
    """Torch batch shape -> (file shape, signal_1d)."""
    if len(shape) == 4:
        return (shape[2], shape[3], shape[1]), False
    if len(shape) == 3:
        return (1, shape[2], shape[1]), True
    if len(shape) == 2:
        return (shape[1],), False
    raise ConvertError(f"{where}: tensors of rank {len(shape)} (with batch) are not supported")


def _describe(node: torch.fx.Node, modules: dict[str, nn.Module]) -> str:
    if node.op == "call_module":
        return f"layer '{node.target}' ({type(modules[str(node.target)]).__name__})"
    if node.op == "call_function":
        fn = getattr(node.target, "__name__", str(node.target))
        return f"layer '{node.name}' (function {fn})"
    if node.op == "call_method":
        return f"layer '{node.name}' (method .{node.target}())"
    return f"layer '{node.name}' ({node.op} {node.target})"


# Lookup-table activations (op LUT, docs/numerics.md): module class / function /
# method -> the oracle's function name (oracle.LUT_FUNCTIONS). One entry each.
_LUT_MODULES: dict[type, str] = {nn.Sigmoid: "sigmoid", nn.Tanh: "tanh", nn.Hardswish: "hardswish",
                                 nn.Hardsigmoid: "hardsigmoid", nn.LeakyReLU: "leaky_relu", nn.SiLU: "silu",
                                 nn.GELU: "gelu"}
_LUT_FUNCTIONS: dict[Any, str] = {torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", torch.tanh: "tanh",
                                  F.tanh: "tanh", F.hardswish: "hardswish", F.hardsigmoid: "hardsigmoid",
                                  F.leaky_relu: "leaky_relu", F.silu: "silu", F.gelu: "gelu"}
_LUT_METHODS: dict[str, str] = {"sigmoid": "sigmoid", "tanh": "tanh"}


def _lut_activation(node: torch.fx.Node, modules: dict[str, nn.Module]) -> tuple[str, float] | None:
    """(function name, LeakyReLU slope) if ``node`` is a lookup-table activation, else None."""
    where = _describe(node, modules)
    if node.op == "call_module":
        mod = modules[str(node.target)]
        fn = _LUT_MODULES.get(type(mod))
        slope = float(getattr(mod, "negative_slope", 0.01))
        approx = getattr(mod, "approximate", "none")
    elif node.op == "call_function" and node.target in _LUT_FUNCTIONS:
        fn = _LUT_FUNCTIONS[node.target]
        slope = float(node.kwargs.get("negative_slope", node.args[1] if len(node.args) > 1 else 0.01)) \
            if fn == "leaky_relu" else 0.01
        approx = node.kwargs.get("approximate", "none")
    elif node.op == "call_method" and node.target in _LUT_METHODS:
        fn, slope, approx = _LUT_METHODS[str(node.target)], 0.01, "none"
    else:
        return None
    if fn is None:
        return None
    if fn == "gelu" and approx != "none":
        raise ConvertError(f"{where}: GELU(approximate={approx!r}) is not supported: use approximate='none'")
    return fn, slope


def _classify(node: torch.fx.Node, modules: dict[str, nn.Module]) -> str:
    where = _describe(node, modules)
    if _lut_activation(node, modules) is not None:
        return "lut"
    if node.op == "call_module":
        mod = modules[str(node.target)]
        if isinstance(mod, (nn.Conv2d, nn.Conv1d)):
            return "conv"
        if isinstance(mod, nn.Linear):
            return "linear"
        if isinstance(mod, (nn.BatchNorm2d, nn.BatchNorm1d)):
            return "bn"
        if isinstance(mod, nn.ReLU):
            return "relu"
        if isinstance(mod, nn.ReLU6) or (isinstance(mod, nn.Hardtanh) and mod.min_val == 0
                                          and mod.max_val == 6):
            return "relu6"
        if isinstance(mod, (nn.MaxPool2d, nn.MaxPool1d)):
            return "maxpool"
        if isinstance(mod, (nn.AvgPool2d, nn.AvgPool1d)):
            return "avgpool"
        if isinstance(mod, (nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool1d)):
            size = mod.output_size
            sizes = size if isinstance(size, (tuple, list)) else (size,)
            if any(s != 1 for s in sizes):
                raise ConvertError(f"{where}: only output_size 1 (global average pool) is supported")
            return "gap"
        if isinstance(mod, nn.Flatten):
            return "flatten"
        if isinstance(mod, (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Identity)):
            return "alias"
        raise ConvertError(f"{where}: unsupported op")
    if _is_meta(node):
        return "meta"
    if node.op == "call_function":
        t = node.target
        if t in _ADD_FNS:
            if len(node.args) != 2 or not all(isinstance(a, torch.fx.Node) for a in node.args) \
                    or node.kwargs.get("alpha", 1) != 1:
                raise ConvertError(f"{where}: add needs exactly two tensor operands (no alpha)")
            return "add"
        if t in _RELU_FNS:
            return "relu"
        if t is F.relu6:
            return "relu6"
        if t is F.hardtanh and tuple(node.args[1:3]) == (0.0, 6.0):
            return "relu6"
        if t is torch.flatten:
            return "flatten"
        if t is F.dropout:
            return "alias"
        raise ConvertError(f"{where}: unsupported op")
    if node.op == "call_method":
        if node.target in ("relu", "relu_"):
            return "relu"
        if node.target in _FLATTEN_METHODS:
            return "flatten"
        if node.target == "contiguous":
            return "alias"
        raise ConvertError(f"{where}: unsupported op")
    raise ConvertError(f"{where}: unsupported graph node")


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


def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        return (int(v[0]), int(v[1])) if len(v) == 2 else (int(v[0]), int(v[0]))
    return int(v), int(v)


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

    def value_of(self, arg: Any, node: torch.fx.Node) -> _Value:
        if not isinstance(arg, torch.fx.Node) or arg not in self.values:
            raise ConvertError(f"{_describe(node, self.modules)}: input is not a traced tensor")
        return self.values[arg]

    def new_value(self, node: torch.fx.Node, calib: torch.fx.Node | None = None,
                  same_as: _Value | None = None) -> _Value:
        shape, s1d = _nhwc_shape(_meta_shape(node), _describe(node, self.modules))
        return _Value(shape, s1d, calib=calib, same_as=same_as)

    def fuse_act(self, node: torch.fx.Node, pl: _PLayer) -> torch.fx.Node:
        """Fuse a following relu/relu6 if ``node`` is its only producer; return the last node."""
        nxt = _single_user(node)
        if nxt is not None and nxt.op != "output":
            kind = _classify(nxt, self.modules)
            if kind in ("relu", "relu6") and nxt.args[0] is node:
                pl.act = Act.RELU if kind == "relu" else Act.RELU6
                pl.fused.append(str(nxt.target) if nxt.op == "call_module" else nxt.name)
                self.done.add(nxt)
                return nxt
        return node

    def plan(self) -> None:
        for node in self.gm.graph.nodes:
            if node in self.done:
                continue
            if node.op == "placeholder":
                if self.input is not None:
                    raise ConvertError(f"layer '{node.name}': only one model input is supported")
                self.input = self.values[node] = self.new_value(node, calib=node)
                continue
            if node.op == "output":
                out = node.args[0]
                if not isinstance(out, torch.fx.Node):
                    raise ConvertError("the model must return a single tensor")
                self.output = self.value_of(out, node)
                continue
            if node.op == "get_attr":
                raise ConvertError(f"{_describe(node, self.modules)}: parameters used outside a module "
                                   "are not supported")
            self.plan_node(node, _classify(node, self.modules))

    def plan_node(self, node: torch.fx.Node, kind: str) -> None:
        if kind == "meta":
            return
        where = _describe(node, self.modules)
        x = self.value_of(node.args[0], node)
        if kind in ("conv", "linear"):
            in_rank = len(_meta_shape(node.args[0])) if isinstance(node.args[0], torch.fx.Node) else 0
            if kind == "linear" and in_rank != 2:
                raise ConvertError(f"{where}: Linear needs a (batch, features) input (flatten first)")
            if kind == "conv" and len(x.shape) != 3:
                raise ConvertError(f"{where}: conv needs an (N, C, H, W) or (N, C, L) input")
            target = str(node.target)
            self.calls[target] = self.calls.get(target, 0) + 1
            if self.calls[target] > 1:
                raise ConvertError(f"{where}: module called more than once (shared weights)")
            pl = _PLayer(kind, self.name(node), [x], x, module=self.modules[target])
            last = node
            nxt = _single_user(node)
            if nxt is not None and nxt.op == "call_module" and _classify(nxt, self.modules) == "bn":
                pl.bn = self.modules[str(nxt.target)]
                pl.fused.append(str(nxt.target))
                self.done.add(nxt)
                last = nxt
            last = self.fuse_act(last, pl)
            pl.output = self.values[last] = self.new_value(last, calib=last)
            self.values[node] = pl.output
            self.layers.append(pl)
        elif kind == "bn":
            raise ConvertError(f"{where}: BatchNorm must directly follow a conv/linear whose output "
                               "has no other use (it is folded into it)")
        elif kind in ("relu", "relu6"):
            pl = _PLayer(kind, self.name(node), [x], x)
            pl.output = self.values[node] = self.new_value(node, same_as=x)
            if pl.output.shape != x.shape:
                raise ConvertError(f"{where}: shape changes")
            self.layers.append(pl)
        elif kind == "lut":  # own output quantisation: calibrated like a conv's output
            fn, slope = _lut_activation(node, self.modules) or ("", 0.0)
            pl = _PLayer(kind, self.name(node), [x], x, attrs={"fn": fn, "slope": slope})
            pl.output = self.values[node] = self.new_value(node, calib=node)
            if pl.output.shape != x.shape:
                raise ConvertError(f"{where}: shape changes")
            pl.fused.append(fn)
            self.layers.append(pl)
        elif kind in ("maxpool", "avgpool", "gap"):
            if len(x.shape) != 3:
                raise ConvertError(f"{where}: pooling needs an (N, C, H, W) or (N, C, L) input")
            pl = _PLayer(kind, self.name(node), [x], x, module=self.modules[str(node.target)])
            pl.output = self.values[node] = self.new_value(node, same_as=x)
            self.layers.append(pl)
        elif kind == "add":
            y = self.value_of(node.args[1], node)
            if x.shape != y.shape:
                raise ConvertError(f"{where}: operands of shapes {x.shape} and {y.shape} (no broadcasting)")
            pl = _PLayer("add", self.name(node), [x, y], x)
            last = self.fuse_act(node, pl)
            pl.output = self.values[last] = self.new_value(last, calib=last)
            self.values[node] = pl.output
            self.layers.append(pl)
        elif kind == "flatten":
            in_shape = _meta_shape(node.args[0]) if isinstance(node.args[0], torch.fx.Node) else ()
            out_shape = _meta_shape(node)
            if len(out_shape) != 2 or out_shape[0] != in_shape[0] or \
                    out_shape[1] != math.prod(in_shape[1:]):
                raise ConvertError(f"{where}: only flattening to (batch, features) is supported, "
                                   f"got {in_shape} -> {out_shape}")
            self.values[node] = x
        else:  # alias
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


def _float_params(pl: _PLayer) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Weight and bias in float64, BatchNorm folded in."""
    mod = pl.module
    assert isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.Linear))
    w = mod.weight.detach().double().numpy().copy()
    b = np.zeros(w.shape[0]) if mod.bias is None else mod.bias.detach().double().numpy().copy()
    bn = pl.bn
    if bn is not None:
        assert isinstance(bn, (nn.BatchNorm1d, nn.BatchNorm2d))
        if bn.running_mean is None or bn.running_var is None:
            raise ConvertError(f"layer '{pl.fused[0]}' ({type(bn).__name__}): needs running statistics "
                               "(track_running_stats=True)")
        if bn.num_features != w.shape[0]:
            raise ConvertError(f"layer '{pl.fused[0]}': BatchNorm features != {w.shape[0]}")
        mean = bn.running_mean.detach().double().numpy()
        var = bn.running_var.detach().double().numpy()
        gamma = np.ones_like(mean) if bn.weight is None else bn.weight.detach().double().numpy()
        beta = np.zeros_like(mean) if bn.bias is None else bn.bias.detach().double().numpy()
        f = gamma / np.sqrt(var + bn.eps)
        w = w * f.reshape((-1,) + (1,) * (w.ndim - 1))
        b = (b - mean) * f + beta
    return w, b


def _quant_weights(em: _Emitter, pl: _PLayer, w: NDArray[np.float64], b: NDArray[np.float64],
                   s_in: float, s_out: float) -> tuple[int, int, int, int]:
    out_c = w.shape[0]
    absmax = np.abs(w.reshape(out_c, -1)).max(axis=1)
    s_w = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)
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
            assert isinstance(mod, (nn.Conv1d, nn.Conv2d))
            where = f"layer '{pl.name}' ({type(mod).__name__})"
            if any(d != 1 for d in mod.dilation):
                raise ConvertError(f"{where}: dilation {tuple(mod.dilation)} is not supported (only 1)")
            if mod.padding_mode != "zeros":
                raise ConvertError(f"{where}: padding_mode '{mod.padding_mode}' is not supported "
                                   "(only 'zeros')")
            in_h, in_w, in_c = pl.inputs[0].shape
            out_h, out_w, out_c = pl.output.shape
            is1d = isinstance(mod, nn.Conv1d)
            ks = (1, mod.kernel_size[0]) if is1d else _pair(mod.kernel_size)
            st = (1, mod.stride[0]) if is1d else _pair(mod.stride)
            if isinstance(mod.padding, str):
                if mod.padding == "valid":
                    pd = (0, 0)
                else:  # 'same': PyTorch pads total // 2 before, the rest after
                    pd = ((ks[0] - 1) // 2, (ks[1] - 1) // 2)
            else:
                pd = (0, mod.padding[0]) if is1d else _pair(mod.padding)
            if not (pd[0] < ks[0] and pd[1] < ks[1]):
                raise ConvertError(f"{where}: padding {pd} must be smaller than the kernel {ks}")
            if is1d:
                w = w[:, :, None, :]  # (O, I/g, 1, K)
            w = w.transpose(0, 2, 3, 1)  # OIHW -> OHWI
            params = [in_h, in_w, in_c, out_h, out_w, out_c, ks[0], ks[1], st[0], st[1], pd[0], pd[1],
                      int(mod.groups), x.zp, y.zp, a_min, a_max]
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
        mod = pl.module
        assert isinstance(mod, (nn.MaxPool1d, nn.MaxPool2d, nn.AvgPool1d, nn.AvgPool2d))
        where = f"layer '{pl.name}' ({type(mod).__name__})"
        is1d = isinstance(mod, (nn.MaxPool1d, nn.AvgPool1d))

        def one(v: Any) -> int:
            return int(v[0]) if isinstance(v, (tuple, list)) else int(v)

        if is1d:
            ks, st = (1, one(mod.kernel_size)), (1, one(mod.stride or mod.kernel_size))
            pd = (0, one(mod.padding))
        else:
            ks, st, pd = _pair(mod.kernel_size), _pair(mod.stride or mod.kernel_size), _pair(mod.padding)
        if isinstance(mod, (nn.MaxPool1d, nn.MaxPool2d)):
            dil = mod.dilation if isinstance(mod.dilation, (tuple, list)) else (mod.dilation,)
            if any(int(d) != 1 for d in dil):
                raise ConvertError(f"{where}: dilation {mod.dilation} is not supported (only 1)")
            if mod.return_indices:
                raise ConvertError(f"{where}: return_indices is not supported")
            op = Op.MAXPOOL
        else:
            if mod.ceil_mode:
                raise ConvertError(f"{where}: ceil_mode=True is not supported for average pooling")
            if (pd[0] or pd[1]) and mod.count_include_pad:
                raise ConvertError(f"{where}: padding with count_include_pad=True is not supported "
                                   "(the kernel averages the valid taps: use count_include_pad=False)")
            if getattr(mod, "divisor_override", None):
                raise ConvertError(f"{where}: divisor_override is not supported")
            op = Op.AVGPOOL
        if not (pd[0] < ks[0] and pd[1] < ks[1]):
            raise ConvertError(f"{where}: padding {pd} must be smaller than the kernel {ks}")
        in_h, in_w, c = pl.inputs[0].shape
        out_h, out_w, _ = pl.output.shape
        params = [in_h, in_w, c, out_h, out_w, ks[0], ks[1], st[0], st[1], pd[0], pd[1]]
        return Layer(op, pl.name, ins, out, params, fused=fused)
    assert pl.kind == "add"
    x2 = pl.inputs[1].root()
    a_min, a_max = _act_limits(pl.act, y.scale, y.zp)
    params = o.add_params(x.scale, x.zp, x2.scale, x2.zp, y.scale, y.zp, a_min, a_max, n_out)
    return Layer(Op.ADD, pl.name, ins, out, params, pl.act, fused=fused)


# --------------------------------------------------------------------------
# public API


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
    anything unsupported.
    """
    if not (math.isfinite(headroom) and headroom >= 1.0):
        raise ConvertError("headroom must be a finite number >= 1")
    if method not in ("minmax", "percentile"):
        raise ConvertError(f"unknown calibration method {method!r} (minmax or percentile)")
    if not 50.0 < percentile <= 100.0:
        raise ConvertError("percentile must be in (50, 100]")
    model = copy.deepcopy(module).cpu().float().eval()
    try:
        gm = torch.fx.symbolic_trace(model)
    except Exception as e:  # noqa: BLE001 - tracing raises anything
        raise ConvertError(f"torch.fx could not trace the model: {e}") from e
    gm.graph.eliminate_dead_code()
    gm.recompile()
    batches = _batches(calib, batch_size)
    with torch.no_grad():
        try:
            ShapeProp(gm).propagate(batches[0][:1])
        except Exception as e:  # noqa: BLE001
            raise ConvertError(f"the model does not run on the calibration data: {e}") from e
    planner = _Planner(gm)
    planner.plan()
    if not planner.layers or planner.input is None or planner.output is None:
        raise ConvertError("the model has no convertible layers")
    if planner.output is not planner.layers[-1].output:
        raise ConvertError("the model output must be produced by its last layer")
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
    return m


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

    module: nn.Module = load_module(spec, state_dict, what="model")
    return module


def _load_calib(path: str, key: str | None, limit: int | None) -> np.ndarray:
    p = Path(path)
    if p.suffix == ".npy":
        arr = np.load(p)
    else:
        with np.load(p) as z:
            k = key or ("x" if "x" in z.files else z.files[0])
            arr = z[k]
    return arr[:limit] if limit else arr


def build_parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="microtrain convert")
    p.description = ("Convert a PyTorch model to an int8 .mtm file (docs/format.md): BatchNorm folded, "
                     "ReLU fused, per-channel int8 weights, activations calibrated on CALIB.")
    p.add_argument("model", help="a torch.save()d nn.Module (.pt), or PKG.MODULE:FACTORY building one")
    p.add_argument("-o", "--output", required=True, help="the .mtm file to write (atomically)")
    p.add_argument("--calib", required=True,
                   help="calibration inputs in PyTorch layout (N,C,H,W) / (N,C,L) / (N,F): .npy or .npz")
    p.add_argument("--calib-key", default=None, help="array name inside the .npz (default 'x' or the first)")
    p.add_argument("--limit", type=int, default=None, help="use only the first N calibration samples")
    p.add_argument("--state-dict", default=None, help="checkpoint to load into MODULE:FACTORY's module")
    p.add_argument("--method", choices=("minmax", "percentile"), default="minmax",
                   help="activation range calibration (default minmax)")
    p.add_argument("--percentile", type=float, default=99.99, help="for --method percentile (default 99.99)")
    p.add_argument("--batch-size", type=int, default=64, help="calibration batch size (default 64)")
    p.add_argument("--headroom", type=float, default=1.0,
                   help="widen activation ranges by this factor (>= 1; for training from scratch on device)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary")
    return p


def main(argv: list[str] | None = None, args: argparse.Namespace | None = None) -> int:
    if args is None:
        args = build_parser().parse_args(argv)
    try:
        module = _load_module(args.model, args.state_dict)
        calib = _load_calib(args.calib, args.calib_key, args.limit)
        m = convert_to_file(module, calib, args.output, method=args.method, percentile=args.percentile,
                            batch_size=args.batch_size, progress=not args.quiet, headroom=args.headroom)
    except (ValueError, OSError) as e:
        print(f"microtrain convert: error: {e}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(mtm.summary(m))
        print(f"wrote {args.output} ({Path(args.output).stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
