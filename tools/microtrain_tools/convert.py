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

The converter's parts, beside this file: ``convert_registry`` (what converts), ``convert_planner``
(the graph plan), ``convert_calib`` (calibration), ``convert_emit`` (quantisation and the file),
``convert_common`` (errors and shared values).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import io
import math
import pickle
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.fx
import torch.nn as nn
from numpy.typing import ArrayLike, NDArray

from microtrain_tools import mtm
from microtrain_tools.convert_calib import _act_quant, _batches, _calibrate, check_samples
from microtrain_tools.convert_common import ConvertError, ConvertWarning, _at, _describe
from microtrain_tools.convert_emit import _emit_layer, _Emitter
from microtrain_tools.convert_lstm import lstm_float, lstm_hidden_scale
from microtrain_tools.convert_planner import _Planner
from microtrain_tools.convert_registry import _BY_FUNCTION as _BY_FUNCTION
from microtrain_tools.convert_registry import _BY_METHOD as _BY_METHOD
from microtrain_tools.convert_registry import _BY_MODULE as _BY_MODULE
from microtrain_tools.convert_registry import REFUSALS, REGISTRY, OpEntry, Refusal
from microtrain_tools.convert_registry import _lookup as _lookup
from microtrain_tools.convert_rnn import gru_float, gru_hidden_scale
from microtrain_tools.convert_trace import expand_attention, trace
from microtrain_tools.mtm import DType, Kind, Layer, Model, Op, Quant, Tensor
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


# --------------------------------------------------------------------------
# public API


def _trace(model: nn.Module, example: Callable[[], torch.Tensor] | None = None) -> torch.fx.GraphModule:
    """torch.fx trace that records each node's source line (for messages); ``example`` lets a
    branch on the input's shape be traced."""
    return trace(model, example)[0]


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


def _any_size(gm: torch.fx.GraphModule, first: torch.Tensor) -> bool:
    """Whether the model also runs on inputs of twice the calibration data's size (global
    pooling): then only the calibration data fix the file's input size."""
    big = torch.zeros((2, first.shape[1], *(2 * d for d in first.shape[2:])))
    try:
        with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):  # fx prints the failing line
            gm(big)
    except Exception:  # noqa: BLE001 - any failure means the size is the model's own
        return False
    return True


def _looks_like_bytes(batches: list[torch.Tensor]) -> tuple[float, float] | None:
    """(min, max) when the calibration values are all integers in 0..255 with max > 1."""
    lo = min(float(b.min()) for b in batches)
    hi = max(float(b.max()) for b in batches)
    if lo >= 0 and 1 < hi <= 255 and all(bool(torch.all(b == torch.round(b))) for b in batches):
        return lo, hi
    return None


def convert(module: nn.Module, calib: Any, *, method: str = "minmax", percentile: float = 99.99,
            batch_size: int = 64, progress: bool = True, headroom: float = 1.0,
            ranges: dict[str, tuple[float, float]] | None = None,
            input_shape: tuple[int, ...] | None = None) -> Model:
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
    (:class:`ConvertWarning`) about calibration data that look like 0..255 pixels. Calibration
    data with a NaN or an infinity, samples of different shapes (or not of ``input_shape``, one
    sample's shape without the batch axis, when given) or data constant as a whole are refused
    naming the first such sample.
    """
    return _convert(module, calib, method=method, percentile=percentile, batch_size=batch_size,
                    progress=progress, headroom=headroom, ranges=ranges, input_shape=input_shape)[0]


def _convert(module: nn.Module, calib: Any, *, method: str = "minmax", percentile: float = 99.99,
             batch_size: int = 64, progress: bool = True, headroom: float = 1.0,
             ranges: dict[str, tuple[float, float]] | None = None,
             input_shape: tuple[int, ...] | None = None) -> tuple[Model, list[str]]:
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
    expand_attention(model)  # nn.MultiheadAttention as the hand-written attention it computes

    @functools.cache
    def data() -> tuple[list[torch.Tensor], torch.Tensor]:  # the model's own problems are named first
        batches = _batches(calib, batch_size)
        check_samples(batches, input_shape)
        first = batches[0]
        probe = first[:2] if len(first) >= 2 else torch.cat([first, first])  # 2 rows: squeeze keeps the batch
        return batches, probe

    gm, shape_known = trace(model, lambda: data()[1])
    batches, probe = data()
    first = batches[0]
    gm.graph.eliminate_dead_code()
    gm.recompile()
    with torch.no_grad():
        try:
            _Shapes(gm).run(probe)
        except _NodeFailed as e:
            msg = next((ln.strip() for ln in str(e.error).splitlines() if ln.strip()), type(e.error).__name__)
            raise ConvertError(f"calibration data of shape {tuple(first.shape)} do not run through the "
                               f"model: "
                               f"{_describe(e.node, dict(gm.named_modules()))} fails with: {msg}{_at(e.node)}"
                               f"{_layout_hint(gm, tuple(first.shape))}") from None
    notes = []
    if shape_known:
        notes.append(f"forward() branches on its input's shape: converted for inputs of shape "
                     f"{tuple(first.shape[1:])}")
    if input_shape is None and first.dim() >= 3 and _any_size(gm, first):
        notes.append(f"the model runs on inputs of any size: the calibration data fix the file's input to "
                     f"{tuple(first.shape[1:])} (pass --input-shape to have the data checked against the "
                     "size you train with)")
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
    _gru_calibration(gm, planner.layers, batches)
    _lstm_calibration(gm, planner.layers, batches)
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


def _gru_calibration(gm: torch.fx.GraphModule, layers: list[Any], batches: list[torch.Tensor]) -> None:
    """A GRU layer's inputs over the calibration data (its gates' scales come from a float forward on
    them, convert_rnn) and its output's symmetric quantisation (zero point 0, |h| <= 1)."""
    grus = [pl for pl in layers if pl.kind == "gru"]
    if not grus:
        return
    seen: dict[int, list[torch.Tensor]] = {id(pl.module): [] for pl in grus}
    hooks = [pl.module.register_forward_pre_hook(
        lambda m, a: seen[id(m)].append(a[0].detach().double())) for pl in grus]
    try:
        with torch.no_grad():
            for b in batches:
                gm(b)
    finally:
        for hk in hooks:
            hk.remove()
    for pl in grus:
        xs = pl.attrs["calib_x"] = torch.cat(seen[id(pl.module)]).numpy()
        p = {n: v.detach().double().numpy() for n, v in pl.module.named_parameters()}
        zeros = np.zeros(3 * pl.module.hidden_size)
        f = gru_float(p["weight_ih_l0"], p["weight_hh_l0"], p.get("bias_ih_l0", zeros),
                      p.get("bias_hh_l0", zeros), xs)
        r = pl.output.root()
        r.scale, r.zp = gru_hidden_scale(f), 0


def _lstm_calibration(gm: torch.fx.GraphModule, layers: list[Any], batches: list[torch.Tensor]) -> None:
    """An LSTM layer's inputs over the calibration data (its gates' and cell's scales come from a float
    forward on them, convert_lstm) and its output's symmetric quantisation (zero point 0, |h| <= 1)."""
    lstms = [pl for pl in layers if pl.kind == "lstm"]
    if not lstms:
        return
    seen: dict[int, list[torch.Tensor]] = {id(pl.module): [] for pl in lstms}
    hooks = [pl.module.register_forward_pre_hook(
        lambda m, a: seen[id(m)].append(a[0].detach().double())) for pl in lstms]
    try:
        with torch.no_grad():
            for b in batches:
                gm(b)
    finally:
        for hk in hooks:
            hk.remove()
    for pl in lstms:
        xs = pl.attrs["calib_x"] = torch.cat(seen[id(pl.module)]).numpy()
        p = {n: v.detach().double().numpy() for n, v in pl.module.named_parameters()}
        zeros = np.zeros(4 * pl.module.hidden_size)
        f = lstm_float(p["weight_ih_l0"], p["weight_hh_l0"], p.get("bias_ih_l0", zeros),
                       p.get("bias_hh_l0", zeros), xs)
        r = pl.output.root()
        r.scale, r.zp = lstm_hidden_scale(f), 0


def convert_to_file(module: nn.Module, calib: Any, path: str | Path, **kw: Any) -> Model:
    """``convert`` then write ``path`` atomically (nothing is written on any error)."""
    m = convert(module, calib, **kw)
    mtm.save(m, path)
    return m


def _model(model: bytes | bytearray | memoryview | Model) -> Model:
    return model if isinstance(model, Model) else mtm.read(model)


def to_nhwc(x: ArrayLike, tokens: bool = False) -> NDArray:
    """PyTorch batch layout -> (N, flat NHWC): (N,C,H,W), (N,C,L), (N,F); tokens: a sequence model's
    (N, T, D), already in device order."""
    a = np.asarray(x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x)
    if a.ndim == 4:
        a = a.transpose(0, 2, 3, 1)
    elif a.ndim == 3 and not tokens:
        a = a.transpose(0, 2, 1)
    elif a.ndim not in (2, 3):
        raise ValueError(f"expected a batch of rank 2..4, got shape {a.shape}")
    return np.ascontiguousarray(a).reshape(a.shape[0], -1)


def quantize_input(model: bytes | Model, x: ArrayLike) -> NDArray[np.int8]:
    """Float batch in PyTorch layout -> int8 (N, input size) with the file's input quantisation."""
    m = _model(model)
    t = m.tensors[m.input]
    a = to_nhwc(x, tokens=np.ndim(x) == 3 and len(t.shape) == 3 and not t.signal_1d).astype(np.float64)
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
    if ly.op == Op.MUL:
        return o.mul_s8_forward(p, x, vals[ly.inputs[1]])
    if ly.op == Op.LAYERNORM:
        return o.layernorm_s8_forward(p, x)
    if ly.op == Op.MATMUL:  # the descriptor, then the factor (backward's)
        return o.matmul_s8_forward(p[:-1], x, vals[ly.inputs[1]])
    if ly.op == Op.GRU:  # the tables: the three activations' 768 bytes, then dtanh
        assert ly.aux is not None
        return o.gru_s8_forward(p, x, m.data(ly.weight).reshape(-1), m.data(ly.bias), m.data(ly.mult),
                                m.data(ly.shift), m.data(ly.aux)[:768])[0]
    if ly.op == Op.LSTM:  # the tables: the five activations' 1280 bytes, then dtanh
        assert ly.aux is not None
        return o.lstm_s8_forward(p, x, m.data(ly.weight).reshape(-1), m.data(ly.bias), m.data(ly.mult),
                                 m.data(ly.shift), m.data(ly.aux)[:1280])[0]
    if ly.op == Op.SOFTMAX:  # the device makes the exp table of the input's scale (double floats here)
        from microtrain_tools.reference.train_ref_config import softmax_lut

        return o.softmax_s8_forward(p, x, softmax_lut(m.tensors[ly.inputs[0]].scale))
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


def _built_with_random_weights(spec: str) -> bool:
    """Whether MODULE:FACTORY builds its weights from the random generator (two builds under two
    seeds differ): weights nobody loaded or trained. A factory that loads a checkpoint itself, or a
    torch.save()d module file, gives the same weights both times."""
    if ":" not in spec or Path(spec).exists():
        return False
    builds = []
    with torch.random.fork_rng():  # the caller's generator is left as it was
        for seed in (1, 2):
            torch.manual_seed(seed)
            builds.append(_load_module(spec, None).state_dict())
    a, b = builds
    return any(a[k].is_floating_point() and not torch.equal(a[k], b[k]) for k in a)


def _input_shape(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        shape = tuple(int(v) for v in text.replace("x", ",").split(","))
    except ValueError:
        shape = ()
    if not 1 <= len(shape) <= 3 or min(shape) < 1:
        raise ConvertError(f"--input-shape {text!r}: expected one sample's shape in PyTorch layout, "
                           "C,H,W or C,L or F (positive integers, e.g. 3,128)")
    return shape


def _load_calib(path: str, key: str | None, limit: int | None) -> np.ndarray:
    p = Path(path)
    try:
        if p.suffix == ".npy":
            arr = np.load(p)
        else:
            with np.load(p) as z:
                if key is not None and key not in z.files:
                    raise ConvertError(f"--calib {path}: no array {key!r} (it has {', '.join(z.files)})")
                k = key or ("x" if "x" in z.files else z.files[0])
                arr = z[k]
    except ValueError as e:
        if "allow_pickle" not in str(e):
            raise
        raise ConvertError(f"--calib {path}: holds Python objects, not one array of numbers (windows of "
                           "different lengths?): cut or pad them to one length and save one array "
                           "(N, C, L)") from None
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
`tools/microtrain_tools/convert_registry.py`): `microtrain convert --list-ops` prints the
same table, and `microtrain convert --write-doc docs/ops.md` rewrites this page
(a test checks that it is current).

Anything else is refused with one line naming the layer (its module path, or
the traced function / method and the source line), the op, and what to do
instead; nothing is written. Every refused op of a model is listed in one
error (one line each), so all of them can be fixed in one go. Inputs are
`(N, C, H, W)` images, `(N, C, L)` 1-D signals or `(N, features)` vectors in
PyTorch layout; the device holds activations as NHWC. The model has one input
and one output. The input may be reshaped first when that leaves the device's
bytes in place (flat vectors viewed as a one-channel image): the file then
takes the reshaped tensor, and data in either shape quantise to the same bytes.

`forward()` may branch on its input's rank and shape (`if x.dim() == 3:`):
the model is then traced with the calibration data's shape known, every dim
but the batch a plain integer, and the file is made for that shape. A branch
on a tensor's values or on the batch size cannot be traced.
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
    p.add_argument("-o", "--output", metavar="OUT.mtm", help="the .mtm file to write (atomically) (required)")
    p.add_argument("--calib", metavar="X.npz",
                   help="calibration inputs in PyTorch layout (N,C,H,W) / (N,C,L) / (N,F): .npy or .npz "
                        "(required)")
    p.add_argument("--calib-key", default=None, metavar="NAME",
                   help="array name inside the .npz (default 'x' or the first)")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="use only the first N calibration samples")
    p.add_argument("--state-dict", default=None, metavar="W.pt",
                   help="checkpoint to load into MODULE:FACTORY's module")
    p.add_argument("--random-weights", action="store_true",
                   help="convert MODULE:FACTORY's initial random weights on purpose (to train from "
                        "scratch on the device)")
    p.add_argument("--input-shape", default=None, metavar="C,L",
                   help="one sample's shape, e.g. 3,128 or 1,28,28: every calibration sample must have it")
    p.add_argument("--method", choices=("minmax", "percentile"), default="minmax",
                   help="activation range calibration (default minmax)")
    p.add_argument("--percentile", type=float, default=99.99, metavar="P",
                   help="for --method percentile (default 99.99)")
    p.add_argument("--batch-size", type=int, default=64, metavar="N",
                   help="calibration batch size (default 64)")
    p.add_argument("--headroom", type=float, default=1.0, metavar="F",
                   help="widen activation ranges by this factor (>= 1; for training from scratch on device)")
    p.add_argument("--list-ops", action="store_true",
                   help="print what converts (as docs/ops.md) and exit")
    p.add_argument("--write-doc", metavar="OPS.md", default=None,
                   help="write that table as Markdown (docs/ops.md) and exit")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary")
    return p


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def main(argv: list[str] | None = None, args: argparse.Namespace | None = None) -> int:
    """Run ``microtrain convert``: an error is one line on stderr (several refused ops: one line
    each), exit code 2."""
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
            shape = _input_shape(args.input_shape)
            if not args.state_dict and not args.random_weights and _built_with_random_weights(args.model):
                raise ConvertError(
                    f"model {args.model!r}: built here with its random initial weights (no --state-dict): "
                    "the file would predict at chance. Pass --state-dict with the trained weights "
                    "(torch.save(model.state_dict(), 'model.pt')), or --random-weights to convert the "
                    "initial weights on purpose (training from scratch on the device)")
            module = _load_module(args.model, args.state_dict)
            calib = _load_calib(args.calib, args.calib_key, args.limit)
            m, notes = _convert(module, calib, method=args.method, percentile=args.percentile,
                                batch_size=args.batch_size, progress=not args.quiet, headroom=args.headroom,
                                input_shape=shape)
            mtm.save(m, args.output)
    except ConvertError as e:
        if len(e.problems) == 1:
            print(f"microtrain convert: error: {_one_line(e)}", file=sys.stderr)
        else:  # one line each: a user fixes them all in one go
            print(f"microtrain convert: error: {len(e.problems)} problems, all listed:", file=sys.stderr)
            for p in e.problems:
                print(f"  - {_one_line(Exception(p))}", file=sys.stderr)
        return 2
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
