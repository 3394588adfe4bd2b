"""``microtrain info``: what a ``.mtm`` file holds and how much RAM it needs.

The RAM model it applies (the buffers the device runtime allocates, item by item, and the
peak heap of a 32-bit board) is written out in docs/memory.md, "The RAM model of microtrain
info"; ``report`` computes it.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from microtrain_tools import mtm
from microtrain_tools.mtm import Act, Kind, Model, Op
from microtrain_tools.paths import NATMOD, PYTHON_LIB
from microtrain_tools.reference import oracle

__all__ = ["MODES", "build_parser", "forward_plan_bytes", "inference_ram", "layer_rows", "main", "train_ram"]

MODES = ("int8", "mixed", "float32")
STATS_BYTES = 3 * 4  # softmax_xent_s8's stats
COPY_BYTES_PER_CHANNEL = 5 * 4
SPARSE_BYTES_PER_CHANNEL = 4 + 1
# a split conv's objects (python_lib/microtrain/over.py: its list, descriptor copies, the plan table's
# entries) and the frames and views alive while its gradient runs by windows (make mem-mcu)
SPLIT_BYTES = 704
WINDOW_FLOATS = 2048  # python_lib/microtrain/stepwise.py WINDOW


class _Graph:
    """A .mtm model as the device's plan.py reads one (the names of the device's Model):
    layers with index, op, act, inputs, output and params; tensors with numel; input.index
    and output.index."""

    def __init__(self, m: Model) -> None:
        self.tensors = m.tensors
        self.layers = [SimpleNamespace(index=j, op=int(ly.op), act=int(ly.act), inputs=tuple(ly.inputs),
                                       output=ly.output, params=ly.params) for j, ly in enumerate(m.layers)]
        self.input = SimpleNamespace(index=m.input)
        self.output = SimpleNamespace(index=m.output)
        self._split = -1  # the first trained layer where over.py may split a conv (train_ram)


@functools.cache
def device_module(name: str) -> ModuleType:
    """python_lib/microtrain/<name>.py run by CPython: plan.py (the device's memory plan of
    training) or place.py (its inference placement), so that `info` counts by the rules the
    device allocates by."""
    if name == "place":  # (place.py takes over.py from sys.modules under CPython)
        device_module("over")
    mod = "microtrain_device_" + name
    spec = importlib.util.spec_from_file_location(mod, PYTHON_LIB / "microtrain" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod] = module
    spec.loader.exec_module(module)
    return module


def device_plan() -> ModuleType:
    return device_module("plan")


def forward_plan_bytes(m: Model, keep: set[int]) -> int:
    """Bytes of the activation buffers of a forward plan of whole buffers whose tensors in
    ``keep`` are never freed (module doc; plan.forward_fit), the model input's included."""
    _, size, _ = device_plan().forward_fit(_Graph(m), keep)
    return int(m.tensors[m.input].numel + sum(size))


def inference_plan_bytes(m: Model) -> int:
    """Bytes of the inference plan's buffers (module doc): the device's own placement
    (python_lib/microtrain/place.py) run on this model with host buffers."""
    last_use: dict[int, int] = {}
    for j, ly in enumerate(m.layers):
        for t in ly.inputs:
            last_use[t] = j
    n_in = m.tensors[m.input].numel
    bufs: dict[int, Any] = {m.input: bytearray(n_in)}
    owner: dict[int, Any] = {}
    device_module("place").place(_Graph(m), bufs, owner, last_use, (), None, None)
    made: dict[int, int] = {id(b): len(b) for b in owner.values()}  # (one arena holds most tensors)
    return sum(made.values())


def inference_ram(m: Model) -> int:
    """Bytes of activation buffers of one forward pass (see the module doc), a GRU's kept gates included."""
    return inference_plan_bytes(m) + seq_bytes(m)


def seq_bytes(m: Model, trained: Sequence[int] = ()) -> int:
    """Bytes each GRU layer keeps from its forward for backward (r, z, n, hn of every step: T x 4H;
    an LSTM layer: i, f, g, o, c, tanh(c), T x 6H), and a trained one's backward scratch (shifts,
    acc, int32 gw and gb, an input error, dtanh), the views of its rows backward adds the sums
    through and the update's copies of its scales (g gate blocks: 3 for a GRU, 4 for an LSTM)."""
    n = 0
    for j, ly in enumerate(m.layers):
        if ly.op in (Op.GRU, Op.LSTM):
            t, d, h = ly.params[:3]
            g = 3 if ly.op == Op.GRU else 4
            n += (4 if g == 3 else 6) * t * h
            if j in trained:  # (+ the row views backward adds the sums through, the update's copies)
                n += 4 * t + 4 * (g + 2) * h + 4 * g * h * (d + h) + 16 * h + t * d + 1024 + 188 * g * h // 3
    return n


def weighted_layers(m: Model) -> list[int]:
    """The layers a Trainer can train: conv, linear, GRU, LSTM."""
    return [j for j, ly in enumerate(m.layers) if ly.op in mtm.WEIGHTED or ly.op in (Op.GRU, Op.LSTM)]


def _params(m: Model, ly: mtm.Layer) -> int:
    if ly.op not in mtm.WEIGHTED and ly.op not in (Op.GRU, Op.LSTM):  # a LUT layer: constant tables
        return 0
    return sum(m.tensors[i].numel for i in (ly.weight, ly.bias) if i is not None)


def train_ram(m: Model, train_last: int, momentum: bool = False, mode: str = "int8", adam: bool = False,
              sparse: bool = False, batch: int = 1, sums: bool | None = None,
              recompute: bool = False, bf16: bool = False, layers: Sequence[int] = ()) -> dict[str, Any]:
    """RAM (bytes, per item of the module doc) to train the last ``train_last`` weighted layers, or
    the weighted layers of indices ``layers`` (Trainer(train=[...]): the frozen ones between them
    pass errors on); bf16: a 16-bit optimiser state (SGD / Adam state='bf16': 2 B a value; the
    gradient sums kept unless sums=False with SGD momentum: then the gradients go into it through
    a float32 window)."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (one of {', '.join(MODES)})")
    if momentum and adam:
        raise ValueError("--momentum and --adam exclude each other (Adam keeps two moments)")
    wl = weighted_layers(m)
    if not 1 <= train_last <= len(wl):
        raise ValueError(f"--train-last {train_last}: the model has {len(wl)} conv/linear layers "
                         f"(use 1..{len(wl)})")
    picked = sorted(set(layers)) if layers else wl[-train_last:]
    if any(j not in wl for j in picked):
        raise ValueError(f"layers {list(layers)}: not all are conv/linear layers ({wl})")
    first = picked[0]
    trained = [m.layers[j] for j in picked]
    if any(ly.op in (Op.GRU, Op.LSTM) for ly in trained):
        sums = True  # a trained GRU or LSTM keeps the gradient sums (Trainer)
    path = m.layers[first:]
    region = {ly.output for ly in path}
    # batch 1: into the momentum (optim.IntoMomentum), or plain SGD steps each layer during
    # backward (stepwise.StepInBackward, its window placed with backward's buffers); by default
    # without a sparse policy.
    # A larger batch with sums=False: each gradient / batch into the momentum (SGD momentum only,
    # no sparse policy: the Trainer refuses the rest)
    if batch > 1 and sums is False and (adam or not momentum or sparse):
        raise ValueError(f"--no-sums at --batch {batch}: needs --momentum (SGD momentum) and no --sparse "
                         "(the Trainer refuses the rest)")
    if bf16 and sums is False and adam:
        raise ValueError("--no-sums with --bf16 --adam: a 16-bit Adam state keeps the gradient sums")
    half = bf16 and momentum  # (a bfloat16 SGD momentum: the gradient sums by default)
    nosums = not adam and ((batch == 1 and (sums is False or (sums is None and not sparse and not half)))
                           or (batch > 1 and sums is False))
    now = nosums and not momentum
    plan, g = device_plan(), _Graph(m)
    if recompute and nosums and momentum and not sparse:  # the gradient into the momentum by windows: a
        g._split = first  # split conv may make its output a window of channels at a time (over.py)
    inplace = plan.inplace_errors(g, first, region, not now)  # their errors overwrite the activations
    place = device_module("place").place
    # recompute: the plan placed through backward, each layer's scratch inside it, where smaller
    bwd = plan.redo_plan(g, first, region, inplace, place) if recompute else None
    sizes, idle = plan.buffers(g, first, place, bwd)
    forward = sum(sizes)
    split = g._split if g._split >= 0 and forward < sum(plan.buffers(_Graph(m), first, place, bwd)[0]) else -1
    if split >= 0:  # (a split conv: its output never whole, no recompute host either)
        forward += SPLIT_BYTES
    need, acc_n, host = plan.scratch_plan(g, first, region, inplace)
    # (host: an idle error buffer holds it)
    scratch = 4 * acc_n if need and host is None and bwd is None else 0
    lent = acc_n > 0 and not scratch  # in an idle error buffer: retyped bytes (the update's row too)
    # errors and scratch in the forward buffers idle during backward where they fit: RAM only
    # for the rest (the scratch, else, in an activation made again: plan.recompute_host)
    params = [_params(m, ly) for ly in trained]
    state = 4 * sum(params)
    grads, window = state, 0
    if now:
        grads, window = now_window_bytes(m, trained)
    elif nosums and half:  # backward.IntoMomentum's float32 window over the bfloat16 momentum
        grads, window = half_window_bytes(m, trained)
    elif nosums:
        grads = 0
        if batch == 1 and sums is None:  # backward.IntoMomentum's copy of the momentum (all but the
            window = 4 * sum(params[1:])  # lowest layer): a failed step puts it back
    placed, where = plan.pack(g, first, region, inplace, scratch, idle, window)
    items = [n for n, _, _ in placed]
    at = [where.get(i) for i in range(len(items))]
    hosted = sum(n for n, a in zip(items, at, strict=True) if a is not None)
    own_window = bool(window) and at[1 if scratch else 0] is None  # not hosted: a buffer of its own
    if scratch and at[0] is not None:
        scratch = 0
        lent = True
    errors = sum(n for n, a in zip(items, at, strict=True) if a is None) - scratch
    errors -= window if own_window else 0
    # Trainer(recompute=True)
    if scratch and recompute and plan.recompute_host(g, first, inplace, need, acc_n, True, split) is not None:
        hosted += scratch
        scratch = 0
        lent = True
    if own_window:
        grads += window
    out_c = [m.tensors[ly.bias].numel for ly in trained if ly.bias is not None]
    weights = [m.tensors[ly.weight].numel for ly in trained if ly.weight is not None]
    master = {"int8": 0, "mixed": 4 * params[-1], "float32": 4 * sum(params)}[mode]
    copies = sum(w + COPY_BYTES_PER_CHANNEL * c for w, c in zip(weights, out_c, strict=True))
    copies -= 4 * out_c[0]  # (the first trained layer has no grad-input ratios: no error goes below it)
    # the optimiser's update row (stepwise.StepInBackward has its own): the widest layer's
    # channels, twice that where the gradient goes into the momentum; backward's scratch where
    # it is long enough
    row = 0 if now else max(out_c, default=0) << (1 if nosums and not half else 0)
    if row and not (lent and acc_n >= row):
        copies += 4 * row
    r: dict[str, Any] = {
        "train_last": train_last,
        "layers": [ly.name for ly in trained],
        "first": m.layers[first].name,
        "mode": mode,
        "optimizer": ("adam" if adam else "sgd+momentum" if momentum else "sgd") + ("+bf16" if bf16 else ""),
        "sparse": sparse,
        "batch": batch,
        "forward": forward,
        "errors": errors,
        "scratch": scratch,
        "hosted": hosted,
        "grads": grads,
        "optimizer_state": (state // 2 if bf16 else state) * (2 if adam else 1 if momentum else 0),
        "master": master,
        "copies": copies,
        "sparse_bytes": SPARSE_BYTES_PER_CHANNEL * sum(out_c) if sparse else 0,
        "loss": loss_bytes(m),
        "seq": seq_bytes(m, [m.layers.index(ly) for ly in trained]),
    }
    r["seq_kept"] = seq_bytes(m)  # (the rest of "seq": a trained GRU / LSTM's backward scratch)
    r["total"] = sum(r[k] for k in TRAIN_ITEMS) + r["seq"]
    return r


def loss_bytes(m: Model) -> int:
    """Cross-entropy's buffers: the trimmed exp table at the output scale, stats, the logits' error."""
    out = m.tensors[m.output]
    return 4 * oracle.trim_softmax_lut(oracle.make_softmax_lut(out.scale)).size + STATS_BYTES + out.numel


def now_window_bytes(m: Model, trained: list[mtm.Layer]) -> tuple[int, int]:
    """stepwise.StepInBackward's buffers: (its window's bias and update row, the zero / ones masks and the
    per-layer window masks; the float32 window of at most WINDOW_FLOATS weight gradients, one
    output channel at least, placed with backward's buffers)."""
    n, w_max, c_max, masks = _windows(m, trained, WINDOW_FLOATS)
    return 8 * w_max + 2 * max(c_max, 256) + masks, 4 * n  # (the rest, the window)


def _windows(m: Model, trained: list[mtm.Layer], floats: int) -> tuple[int, int, int, int]:
    """A gradient window of at most `floats` weights (one output channel at least) over the trained
    layers: (its weights, its channels, the most channels of a layer, the bytes of the per-layer
    masks of layers that need more than one window)."""
    n = w_max = c_max = masks = 0
    for ly in trained:
        assert ly.weight is not None and ly.bias is not None
        nc = m.tensors[ly.bias].numel
        k = m.tensors[ly.weight].numel // nc
        cc = min(nc, max(1, floats // k))
        n = max(n, cc * k)
        w_max = max(w_max, cc)
        c_max = max(c_max, nc)
        masks += nc if cc < nc else 0
    return n, w_max, c_max, masks


def device_const(module: str, name: str) -> int:
    """The value of ``NAME = const(N)`` in python_lib/microtrain/<module>.py (a device module
    that CPython cannot import)."""
    text = (PYTHON_LIB / "microtrain" / f"{module}.py").read_text()
    found = re.search(rf"^{name} = const\((\d+)\)", text, re.M)
    assert found is not None, (module, name)
    return int(found.group(1))


def half_window_bytes(m: Model, trained: list[mtm.Layer]) -> tuple[int, int]:
    """halfwin.HalfWindow's buffers: (its window's biases, the zero / ones masks (the float32
    zeros a view of the zero mask) and the per-layer window masks; the float32 window of at most
    HALF_WINDOW weights, one output channel at least, placed with backward's buffers)."""
    hw = device_const("halfwin", "HALF_WINDOW")
    n, w_max, c_max, masks = _windows(m, trained, hw)
    return 4 * w_max + max(c_max, hw) + c_max + masks, 4 * n  # (the rest, the window; hw bytes of zeros)


TRAIN_ITEMS = ("forward", "errors", "scratch", "grads", "optimizer_state", "master", "copies", "sparse_bytes",
               "loss")


# Peak heap on a 32-bit board (MicroPython's 16-byte GC blocks), measured with `make mem-mcu` on
# the Cortex-M7 QEMU firmware (docs/memory.md): the interpreter, the script and `import
# microtrain` per deployment (kernels and package built into the firmware, or the natmod .mpy
# and the package's .mpy files, both read into the heap); then per model object: a Tensor (the
# layers' constants have none), a Layer (with its descriptor view) and, for a conv / linear,
# the views of its constants; per layer the forward plan's step and buffer objects. Training
# adds its first objects (trainer, optimiser, loss), the sparse module with a sparse policy, and
# per trained layer the optimiser's objects (scale tuples, update rows). Fitted to the four
# cases of mem-mcu.
PACKAGE_BYTES = {"builtin": 9_176, "natmod": 149_288}
# The natmod's part of that: mem-mcu's board read the whole armv7emdp natmod of the fit into its
# heap, this many bytes; a deployment's own natmod (deploy's: its model's ops only, natmod.py)
# takes its place, its size read from the build.
NATMOD_FIT_BYTES = 98_451
NATMOD_ARCH = "armv7emdp"  # mem-mcu's board
TRAIN_PACKAGE_BYTES = {"builtin": 2_587, "natmod": 10_115}
SPARSE_PACKAGE_BYTES = {"builtin": 5_302, "natmod": 6_746}
TENSOR_OBJ_BYTES = 156
LAYER_OBJ_BYTES = 50
WEIGHTED_LAYER_BYTES = 322
TRAINED_LAYER_BYTES = 320
PLAN_BYTES_PER_LAYER = 140
DEPLOYS = tuple(PACKAGE_BYTES)


def layer_consts(m: Model) -> set[int]:
    """The constant tensors the device's layers hold views of (weights, bias, mult, shift,
    weight scales, LUT tables): it drops their Tensor objects until a layer is trained."""
    out: set[int] = set()
    for ly in m.layers:
        for i in (ly.weight, ly.bias, ly.mult, ly.shift):
            if i is not None and m.tensors[i].kind == Kind.CONST:
                out.add(i)
        if ly.weight is not None and ly.op != Op.LUT:
            q = m.tensors[ly.weight].qscales
            if q is not None and m.tensors[q].kind == Kind.CONST:
                out.add(q)
    return out


def natmod_bytes(m: Model, arch: str = NATMOD_ARCH) -> tuple[str, int | None]:
    """(folder, bytes) of the natmod ``microtrain deploy`` gives ``m`` (its layers' ops) under
    build/natmod/; bytes None when it is not built."""
    from microtrain_tools import natmod

    ops = natmod.resolve(",".join(sorted({Op(ly.op).name.lower() for ly in m.layers})))
    f = natmod.folder(arch, ops)
    p = NATMOD / f / natmod.NAME
    return f, (p.stat().st_size if p.is_file() else None)


def peak_heap(m: Model, file_bytes: int, deploy: str = "builtin", model_in: str = "flash",
              train: dict[str, Any] | None = None, natmod: int | None = None) -> dict[str, int]:
    """Peak heap (bytes per item, and "total") of: import, load (the model in flash, i.e. a
    bytes-like object, or read from a file), inference of one sample from a FileDataset, then
    a Trainer with ``train`` (a :func:`train_ram` result) and its training steps. ``natmod``:
    the bytes of the natmod deployment's module (None: the whole one of the fit)."""
    if deploy not in PACKAGE_BYTES:
        raise ValueError(f"deploy must be one of {', '.join(DEPLOYS)}")
    n_l = len(m.layers)
    n_w = sum(1 for ly in m.layers if ly.weight is not None and ly.op != Op.LUT)
    training = 0
    if train:
        training = (int(train["total"]) + PLAN_BYTES_PER_LAYER * n_l + TRAIN_PACKAGE_BYTES[deploy]
                    + TRAINED_LAYER_BYTES * len(train["layers"])
                    + (SPARSE_PACKAGE_BYTES[deploy] if train["sparse"] else 0))
    r = {
        "package": PACKAGE_BYTES[deploy] + (natmod - NATMOD_FIT_BYTES if natmod and deploy == "natmod"
                                            else 0),
        # the device keeps no Tensor object for the layers' constants (Model.tensor)
        "model_objects": (TENSOR_OBJ_BYTES * (len(m.tensors) - len(layer_consts(m))) + LAYER_OBJ_BYTES * n_l
                          + WEIGHTED_LAYER_BYTES * n_w),
        "model_file": file_bytes if model_in == "file" else 0,
        "sample": m.tensors[m.input].numel,  # the FileDataset's record buffer
        "inference": inference_ram(m) + PLAN_BYTES_PER_LAYER * n_l,
        "training": training,
    }
    # a Trainer's plan replaces the inference plan (Model._drop_plans): the larger of the two
    r["total"] = sum(r.values()) - min(r["inference"], r["training"])
    return r


def _op_name(ly: mtm.Layer) -> str:
    s = Op(ly.op).name.lower()
    return s if ly.act == Act.NONE else f"{s}+{Act(ly.act).name.lower()}"


def layer_rows(m: Model) -> list[dict[str, Any]]:
    rows = []
    for j, ly in enumerate(m.layers):
        const = sum(m.tensors[i].numel * m.tensors[i].dtype.itemsize
                    for i in (ly.weight, ly.bias, ly.mult, ly.shift) if i is not None)
        if ly.weight is not None and m.tensors[ly.weight].qscales is not None:
            qs = m.tensors[ly.weight].qscales
            assert qs is not None
            const += m.tensors[qs].numel * 4
        rows.append({"index": j, "name": ly.name, "op": _op_name(ly),
                     "inputs": [list(m.tensors[i].shape) for i in ly.inputs],
                     "output": list(m.tensors[ly.output].shape), "params": _params(m, ly),
                     "const_bytes": const, "fused": ly.fused, "trained": ly.trained})
    return rows


def _shape(s: list[int] | tuple[int, ...]) -> str:
    return "x".join(str(d) for d in s)


def saved_activations(m: Model, train_last: int, rank: int) -> dict[str, Any]:
    """What backward reads to train the last ``train_last`` conv/linear layers, full fine-tuning
    against MemFLoRA adapters of ``rank`` on them (python_lib/microtrain/budget.py saved(), run by
    CPython on the .mtm and on the model with the adapters attached as the device attaches them)."""
    from microtrain_tools.reference import lora_ref

    budget, plan = device_module("budget"), device_plan()
    wl = weighted_layers(m)
    ft = budget.saved(_Graph(m), wl[-train_last:], plan)
    at = lora_ref.attach(m, rank, f"last:{train_last}", memory_floor=True)
    mf = budget.saved(_Graph(at.model), [ad.b for ad in at.adapters], plan)
    return {"rank": rank, "ft_inputs": ft[0], "ft_masks": ft[1], "ft_kept": ft[2], "mf_inputs": mf[0],
            "mf_masks": mf[1], "mf_kept": mf[2], "saving": 1.0 - (mf[0] + mf[1]) / (ft[0] + ft[1])}


def report(path: Path, m: Model, train_last: int | None, momentum: bool = False, mode: str = "int8",
           adam: bool = False, sparse: bool = False, batch: int = 1,
           sums: bool | None = None, recompute: bool = False, memflora: int | None = None,
           bf16: bool = False) -> dict[str, Any]:
    data = path.read_bytes()
    kinds: dict[str, dict[str, int]] = {}
    for t in m.tensors:
        k = Kind(t.kind).name.lower()
        d = kinds.setdefault(k, {"count": 0, "bytes": 0})
        d["count"] += 1
        d["bytes"] += t.numel * t.dtype.itemsize
    tensors = [{"index": i, "kind": Kind(t.kind).name.lower(), "dtype": t.dtype.name.lower(),
                "shape": list(t.shape), "bytes": t.numel * t.dtype.itemsize} for i, t in enumerate(m.tensors)]
    r: dict[str, Any] = {
        "file": str(path), "file_bytes": len(data), "trained": m.trained, "train_steps": m.train_steps,
        "input": list(m.tensors[m.input].shape), "output": list(m.tensors[m.output].shape),
        "params": sum(_params(m, ly) for ly in m.layers), "layers": layer_rows(m),
        "tensor_kinds": kinds, "tensors": tensors, "inference_activations": inference_ram(m),
    }
    if train_last is not None:
        r["train"] = train_ram(m, train_last, momentum, mode, adam, sparse, batch, sums, recompute, bf16)
        if memflora is not None:
            r["memflora"] = saved_activations(m, train_last, memflora)
    folder, nb = natmod_bytes(m)
    r["natmod"] = {"folder": folder, "bytes": nb}
    r["peak_heap"] = {f"{d}-{w}": peak_heap(m, len(data), d, w, r.get("train"), nb)
                      for d in DEPLOYS for w in ("flash", "file")}
    return r


def format_report(r: dict[str, Any], show_tensors: bool = False) -> str:
    out = []
    what = f"checkpoint after {r['train_steps']} training steps" if r["trained"] else "model"
    out.append(f"{r['file']}: {what}, {r['file_bytes']} bytes, {len(r['layers'])} layers, "
               f"{len(r['tensors'])} tensors, {r['params']} parameters")
    out.append(f"input {_shape(r['input'])} -> output {_shape(r['output'])}  (int8, NHWC)")
    hdr = f"{'#':>3} {'name':<20} {'op':<18} {'input -> output':<28} {'params':>8} {'const B':>8}  fused"
    out.append(hdr)
    for row in r["layers"]:
        io = ",".join(_shape(s) for s in row["inputs"]) + " -> " + _shape(row["output"])
        t = " (trained)" if row["trained"] else ""
        out.append(f"{row['index']:>3} {row['name']:<20} {row['op']:<18} {io:<28} {row['params']:>8} "
                   f"{row['const_bytes']:>8}  {row['fused']}{t}")
    kinds = ", ".join(f"{k} {v['count']} ({v['bytes']} B)" for k, v in r["tensor_kinds"].items())
    out.append(f"tensors: {kinds}")
    if show_tensors:
        for t in r["tensors"]:
            out.append(f"  {t['index']:>4} {t['kind']:<10} {t['dtype']:<7} {_shape(t['shape']):<16} "
                       f"{t['bytes']:>8} B")
    out.append(f"RAM, inference: {r['inference_activations']} B of activations "
               f"(+ {r['file_bytes']} B model file when read into RAM instead of frozen into flash)")
    tr = r.get("train")
    if tr:
        out.append(f"RAM, training the last {tr['train_last']} conv/linear layers "
                   f"({', '.join(tr['layers'])}; mode {tr['mode']}, optimizer {tr['optimizer']}"
                   f"{', sparse updates' if tr['sparse'] else ''}, batch {tr['batch']}):")
        labels = {"forward": f"activations, kept from '{tr['first']}' on", "errors": "int8 error buffers",
                  "scratch": "int32 grad-input scratch", "grads": "float32 gradient accumulators",
                  "optimizer_state": "optimizer state", "master": "float32 master weights",
                  "copies": "writable copies of the trained layers",
                  "sparse_bytes": "sparse-update norms and masks", "loss": "softmax cross-entropy",
                  "seq_kept": "GRU / LSTM gates kept per step (4H / 6H)",
                  "seq_bptt": "GRU / LSTM backward-through-time scratch"}
        seq = {"seq_kept": tr["seq_kept"], "seq_bptt": tr["seq"] - tr["seq_kept"]} if tr.get("seq") else {}
        for k in TRAIN_ITEMS + tuple(k for k, v in seq.items() if v):
            out.append(f"  {labels[k]:<40} {tr[k] if k in tr else seq[k]:>9} B")
            if k == "scratch" and tr["hosted"]:
                what = "(in idle forward buffers: not counted)"
                out.append(f"  {what:<40} {tr['hosted']:>9} B")
        out.append(f"  {'total':<40} {tr['total']:>9} B  (+ {r['file_bytes']} B model file if in RAM)")
    mf = r.get("memflora")
    if mf:
        out.append("saved activations backward reads (trained layers' inputs + 1-bit ReLU / max-pool masks; "
                   "the plan keeps):")
        out.append(f"  {'full fine-tuning':<40} {mf['ft_inputs']:>6} + {mf['ft_masks']} B  "
                   f"({mf['ft_kept']} B)")
        out.append(f"  {'MemFLoRA rank ' + str(mf['rank']):<40} {mf['mf_inputs']:>6} + {mf['mf_masks']} B  "
                   f"({mf['mf_kept']} B)  saving {mf['saving']:.3f}")
    out.append("peak heap, 32-bit board (package, model objects, model file, one sample, inference"
               + (", training" if tr else "") + "; docs/memory.md):")
    for k, v in r["peak_heap"].items():
        d, w = k.split("-")
        what = "kernels and package built in" if d == "builtin" else "natmod and .mpy package"
        out.append(f"  {what + ', model in ' + w:<48} {v['total']:>9} B")
    nm = r["natmod"]
    where = f"build/natmod/{nm['folder']}/"
    out.append(f"  (natmod: {where}, the model's ops, {nm['bytes']} B)" if nm["bytes"]
               else f"  (natmod: the whole one; {where}, the model's ops only, is not built)")
    return "\n".join(out)


EXAMPLE = """\
example:
  microtrain info digits.mtm --train-last 2 --momentum
  microtrain info digits.mtm --json > digits-info.json
"""


def build_parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="microtrain info")
    p.description = ("Show the layers of a .mtm file (name, op, input/output shapes, parameters,\n"
                     "bytes of constants, folded modules), its tensors, and the RAM it needs for\n"
                     "inference and to train its last N conv/linear layers on the device, item by\n"
                     "item, with the peak heap of a 32-bit board. How each item is counted:\n"
                     "docs/memory.md, \"The RAM model of microtrain info\".")
    p.epilog = EXAMPLE
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("model", metavar="MODEL.mtm", help="the .mtm file")
    p.add_argument("--train-last", type=int, default=None, metavar="N",
                   help="also show the RAM to train the last N conv/linear layers")
    p.add_argument("--momentum", action="store_true", help="count SGD momentum buffers (with --train-last)")
    p.add_argument("--adam", action="store_true", help="count Adam's two moment buffers (with --train-last)")
    p.add_argument("--sparse", action="store_true", help="count dynamic sparse-update buffers")
    p.add_argument("--bf16", action="store_true", help="a 16-bit optimiser state (state='bf16')")
    p.add_argument("--batch", type=int, default=1, metavar="B",
                   help="samples per update (default 1: with --momentum, no gradient sums)")
    p.add_argument("--no-sums", action="store_true",
                   help="Trainer(sums=False): no gradient sums (docs/memory.md says where it applies)")
    p.add_argument("--recompute", action="store_true",
                   help="Trainer(recompute=True): a pooled conv output made again in backward")
    p.add_argument("--mode", choices=MODES, default="int8",
                   help="training mode for the float32 master copies (default int8)")
    p.add_argument("--memflora", type=int, default=None, metavar="RANK",
                   help="the activations backward reads: fine-tuning vs MemFLoRA of this rank")
    p.add_argument("--tensors", action="store_true", help="list every tensor with its size")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def main(argv: list[str] | None = None, args: argparse.Namespace | None = None) -> int:
    if args is None:
        args = build_parser().parse_args(argv)
    path = Path(args.model)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        m = mtm.load(path)
    except ValueError as e:
        raise ValueError(f"{path}: not a valid .mtm file: {e}") from None
    if args.batch < 1:
        raise ValueError(f"--batch {args.batch}: must be >= 1")
    r = report(path, m, args.train_last, args.momentum, args.mode, args.adam, args.sparse, args.batch,
               False if args.no_sums else None, args.recompute, args.memflora, args.bf16)
    print(json.dumps(r, indent=1) if args.json else format_report(r, args.tensors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
