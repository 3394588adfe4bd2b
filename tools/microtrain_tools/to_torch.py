"""``.mtm`` (a converted model or a device checkpoint) -> PyTorch ``state_dict``.

``to_state_dict(model, module)`` fills the state_dict of ``module`` (an instance of
the class the file was converted from) with the file's weights, so that
``module.load_state_dict(sd, strict=True)`` works and the float module computes what
the int8 file computes, up to quantisation of the activations:

- Weights are the dequantised file weights, exactly: ``float32(qscales[o]) * q`` in
  float32 (per output channel ``o``). With ``master=True`` and a checkpoint that holds
  float32 master weights (``state[0]`` / ``state[1]``), those are used instead.
- Bias real value: ``float32(s_in * s_w[o] * q_bias)`` (``s_in`` the layer input scale,
  products in float64).
- Layouts: conv weights OHWI -> OIHW; a Conv1d is an OHWI weight with H = 1 ->
  ``(O, I/groups, K)``; a Linear fed by a rank-3 activation ``(h, w, c)`` gets the
  inverse of the converter's NHWC column permutation,
  ``W_torch[o, (ch*h + y)*w + x] = W_file[o, (y*w + x)*c + ch]``.
- BatchNorm was folded into the conv/linear by the converter (the layer's ``fused``
  string names it; ``name>`` is a BatchNorm before the layer, folded into its inputs,
  which becomes the identity the same way). The folded weight goes into the conv; the BatchNorm becomes the
  identity: ``weight 1, bias 0, running_mean 0, running_var 1 - eps`` (so
  ``running_var + eps == 1``). The folded bias goes into the conv's bias, or, for a
  bias-less conv, into the BatchNorm's ``bias`` (beta); a non-affine BatchNorm holds it
  as ``running_mean = -bias``.
- LUT layers (Sigmoid, Tanh, Hardswish, ...) have no parameters; where the layer name is a
  module, it must be that activation (``fused`` names the function).
- Everything the file does not describe (modules without weights in the file, buffers
  such as ``num_batches_tracked``) keeps the value of the freshly built module, or of
  ``--state-dict`` when given.

The file's layer names are the PyTorch module paths (``features.0``, ``fc2``); a name
truncated by the converter (63 bytes) is matched by unique suffix.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from microtrain_tools import mtm
from microtrain_tools.mtm import Model, Op

__all__ = ["ToTorchError", "build_parser", "dequantized_params", "load_module", "main", "to_state_dict"]


# LUT activation modules by class name -> the function a LUT layer names in its fused string
_LUT_MODULES = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Hardswish": "hardswish", "Hardsigmoid": "hardsigmoid",
                "LeakyReLU": "leaky_relu", "SiLU": "silu", "GELU": "gelu"}


class ToTorchError(ValueError):
    """The module does not match the file (names, types, shapes), or bad input."""


def dequantized_params(m: Model, layer: mtm.Layer, master: bool = False
                       ) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """Float32 (weight in the file layout, bias) of a CONV2D / LINEAR layer.

    ``weight = float32(qscales[o]) * float32(q)`` (one float32 multiply per value);
    ``bias = float32(s_in * s_w[o] * q_bias)``. With ``master`` the float32 master copies
    of a checkpoint (``state[0]``, ``state[1]``) are returned where present."""
    if layer.op not in mtm.WEIGHTED:
        raise ToTorchError(f"layer '{layer.name}' has no weights")
    wt = m.tensors[layer.weight]  # type: ignore[index]
    assert wt.qscales is not None
    s_w = m.data(wt.qscales).astype(np.float32)
    q = m.data(layer.weight).astype(np.float32)
    w = (s_w.reshape((-1,) + (1,) * (q.ndim - 1)) * q).astype(np.float32)
    s_in = np.float64(np.float32(m.tensors[layer.inputs[0]].scale))
    qb = m.data(layer.bias).astype(np.float64)
    b = (s_in * s_w.astype(np.float64) * qb).astype(np.float32)
    if master:
        if layer.state[0] is not None:
            w = np.array(m.data(layer.state[0]), dtype=np.float32)
        if layer.state[1] is not None:
            b = np.array(m.data(layer.state[1]), dtype=np.float32)
    return w, b


def _gru_to_state_dict(m: Model, ly: mtm.Layer, mods: dict[str, Any], sd: dict[str, Any]) -> str:
    """nn.GRU's four tensors from a GRU layer (docs/format.md): the rows [W_ih | W_hh] split, the r and
    z biases (the file holds b_ih + b_hh) in bias_ih with bias_hh's r, z parts 0, b_hn in bias_hh."""
    import torch
    import torch.nn as nn

    name, mod = _find_module(mods, ly.name)
    t_n, d_n, h_n = ly.params[:3]
    if not isinstance(mod, nn.GRU) or (mod.input_size, mod.hidden_size) != (d_n, h_n):
        raise ToTorchError(f"layer '{ly.name}' ({type(mod).__name__}): the file has an nn.GRU({d_n}, {h_n}) "
                           "here")
    wt = m.tensors[ly.weight]  # type: ignore[index]
    assert wt.qscales is not None
    s_w = m.data(wt.qscales).astype(np.float32)
    w = (s_w[:, None] * m.data(ly.weight).astype(np.float32)).astype(np.float32)
    qb = m.data(ly.bias).astype(np.float64)
    s_x = np.float64(np.float32(m.tensors[ly.inputs[0]].scale))
    s_h = np.float64(np.float32(m.tensors[ly.output].scale))
    sw = s_w.astype(np.float64)
    b_ih = (s_x * sw * qb[:3 * h_n]).astype(np.float32)
    b_hh = np.concatenate([np.zeros(2 * h_n), s_h * sw[2 * h_n:] * qb[3 * h_n:]]).astype(np.float32)
    for k, v in (("weight_ih_l0", w[:, :d_n]), ("weight_hh_l0", w[:, d_n:]), ("bias_ih_l0", b_ih),
                 ("bias_hh_l0", b_hh)):
        if getattr(mod, k, None) is not None:
            sd[_key(name, k)] = torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32))
    return name


def _lstm_to_state_dict(m: Model, ly: mtm.Layer, mods: dict[str, Any], sd: dict[str, Any]) -> str:
    """nn.LSTM's four tensors from an LSTM layer (docs/format.md): the rows [W_ih | W_hh] split, the
    file's bias (b_ih + b_hh) in bias_ih, bias_hh 0."""
    import torch
    import torch.nn as nn

    name, mod = _find_module(mods, ly.name)
    d_n, h_n = ly.params[1:3]
    if not isinstance(mod, nn.LSTM) or (mod.input_size, mod.hidden_size) != (d_n, h_n):
        raise ToTorchError(f"layer '{ly.name}' ({type(mod).__name__}): the file has an nn.LSTM({d_n}, {h_n}) "
                           "here")
    wt = m.tensors[ly.weight]  # type: ignore[index]
    assert wt.qscales is not None
    s_w = m.data(wt.qscales).astype(np.float32)
    w = (s_w[:, None] * m.data(ly.weight).astype(np.float32)).astype(np.float32)
    s_x = np.float64(np.float32(m.tensors[ly.inputs[0]].scale))
    b_ih = (s_x * s_w.astype(np.float64) * m.data(ly.bias).astype(np.float64)).astype(np.float32)
    for k, v in (("weight_ih_l0", w[:, :d_n]), ("weight_hh_l0", w[:, d_n:]), ("bias_ih_l0", b_ih),
                 ("bias_hh_l0", np.zeros(4 * h_n, np.float32))):
        if getattr(mod, k, None) is not None:
            sd[_key(name, k)] = torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32))
    return name


def _find_module(mods: dict[str, Any], name: str) -> tuple[str, Any]:
    if name in mods:
        return name, mods[name]
    cands = [n for n in mods if n and n.endswith(name)]
    if len(cands) == 1:
        return cands[0], mods[cands[0]]
    raise ToTorchError(f"layer '{name}': the module has no submodule of that name"
                       + (f" (ambiguous: {', '.join(cands)})" if cands else ""))


def _key(prefix: str, attr: str) -> str:
    return f"{prefix}.{attr}" if prefix else attr


def to_state_dict(m: Model, module: Any, master: bool = False) -> tuple[dict[str, Any], list[str]]:
    """State dict of ``module`` with the weights of ``m``; returns ``(state_dict, notes)``.

    ``notes`` lists what was done (BatchNorms set to identity, modules not in the file).
    Raises ToTorchError when a layer has no matching module of the right type and shape."""
    import torch
    import torch.nn as nn

    sd: dict[str, Any] = {k: v.detach().clone() for k, v in module.state_dict().items()}
    mods = dict(module.named_modules())
    notes: list[str] = []
    done: set[str] = set()
    for ly in m.layers:
        if ly.op == Op.LUT:  # an activation: no parameters, but the module must compute it
            mod = mods.get(ly.name)
            if mod is not None and _LUT_MODULES.get(type(mod).__name__) != ly.fused:
                raise ToTorchError(f"layer '{ly.name}' ({type(mod).__name__}): the file has the activation "
                                   f"'{ly.fused}' here")
            continue
        if ly.op == Op.GRU:
            done.add(_gru_to_state_dict(m, ly, mods, sd))
            continue
        if ly.op == Op.LSTM:
            done.add(_lstm_to_state_dict(m, ly, mods, sd))
            continue
        if ly.op not in mtm.WEIGHTED:
            continue
        parent, _, leaf = ly.name.rpartition(".")
        mha = mods.get(parent)
        if leaf in ("q", "k", "v") and isinstance(mha, nn.MultiheadAttention):  # split in_proj
            w, b = dequantized_params(m, ly, master)
            e, i = mha.embed_dim, "qkv".index(leaf)
            wt = torch.from_numpy(np.ascontiguousarray(w.reshape(e, -1), dtype=np.float32))
            if mha.in_proj_weight is not None:
                sd[_key(parent, "in_proj_weight")][i * e:(i + 1) * e] = wt
            else:
                sd[_key(parent, f"{leaf}_proj_weight")] = wt
            if mha.in_proj_bias is not None:
                sd[_key(parent, "in_proj_bias")][i * e:(i + 1) * e] = torch.from_numpy(b.astype(np.float32))
            done.add(parent)
            continue
        name, mod = _find_module(mods, ly.name)
        where = f"layer '{ly.name}' ({type(mod).__name__})"
        w, b = dequantized_params(m, ly, master)
        tag = ly.fused.split(",")[0]
        if ly.op == Op.CONV2D and tag in ("layernorm", "linear_tokens"):  # the converter's 1x1 convs
            want = nn.LayerNorm if tag == "layernorm" else nn.Linear
            if not isinstance(mod, want) or mod.weight is None or mod.weight.numel() != w.size:
                raise ToTorchError(f"{where}: the file has the {want.__name__} of {w.shape[0]} features here")
            sd[_key(name, "weight")] = torch.from_numpy(np.ascontiguousarray(w.reshape(mod.weight.shape),
                                                                             dtype=np.float32))
            if mod.bias is not None:
                sd[_key(name, "bias")] = torch.from_numpy(np.ascontiguousarray(b, dtype=np.float32))
            elif np.any(b != 0):
                raise ToTorchError(f"{where}: the file has a non-zero bias but the module has none")
            done.add(name)
            continue
        if ly.op == Op.CONV2D and tag == "conv_transpose":
            if not isinstance(mod, (nn.ConvTranspose1d, nn.ConvTranspose2d)):
                raise ToTorchError(f"{where}: the file has a transposed conv here, the module a "
                                   f"{type(mod).__name__}")
            # the converter's equivalent conv, OHWI and flipped -> (in, out, kH, kW)
            w = np.flip(w.transpose(3, 0, 1, 2), axis=(2, 3))
            if isinstance(mod, nn.ConvTranspose1d):
                w = w[:, :, 0, :]
        elif ly.op == Op.CONV2D:
            if not isinstance(mod, (nn.Conv1d, nn.Conv2d)):
                raise ToTorchError(f"{where}: the file has a conv here, the module a {type(mod).__name__}")
            w = w.transpose(0, 3, 1, 2)  # OHWI -> OIHW
            if isinstance(mod, nn.Conv1d):
                if w.shape[2] != 1:
                    raise ToTorchError(f"{where}: 2-D kernel {w.shape[2:]} for a Conv1d")
                w = w[:, :, 0, :]
        else:
            if not isinstance(mod, nn.Linear):
                raise ToTorchError(f"{where}: the file has a linear here, the module a {type(mod).__name__}")
            xs = m.tensors[ly.inputs[0]].shape
            if len(xs) == 3 and "tokens" not in ly.fused.split(","):  # undo the CHW -> HWC permutation
                h, ww, c = xs
                w = w.reshape(w.shape[0], h, ww, c).transpose(0, 3, 1, 2).reshape(w.shape[0], -1)
        if tuple(w.shape) != tuple(mod.weight.shape):
            raise ToTorchError(f"{where}: weight shape {tuple(mod.weight.shape)} in the module, "
                               f"{tuple(w.shape)} in the file")
        sd[_key(name, "weight")] = torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32))
        done.add(name)
        for f in filter(None, ly.fused.split(",")):
            pre = mods.get(f[:-1]) if f.endswith(">") else None  # "bn>": a BatchNorm before the layer
            if isinstance(pre, nn.modules.batchnorm._BatchNorm) and pre.running_var is not None:
                nf = pre.num_features
                if pre.affine:
                    sd[_key(f[:-1], "weight")] = torch.ones(nf)
                    sd[_key(f[:-1], "bias")] = torch.zeros(nf)
                sd[_key(f[:-1], "running_mean")] = torch.zeros(nf)
                sd[_key(f[:-1], "running_var")] = torch.full((nf,), 1.0 - float(pre.eps))
                notes.append(f"BatchNorm '{f[:-1]}' set to identity (folded into '{name}' after it)")
                done.add(f[:-1])
        bn_name, bn = None, None
        for f in filter(None, ly.fused.split(",")):
            cand = mods.get(f)
            if isinstance(cand, nn.modules.batchnorm._BatchNorm):
                bn_name, bn = f, cand
                break
        if bn is not None:
            assert bn_name is not None
            nf = bn.num_features
            if nf != w.shape[0]:
                raise ToTorchError(f"layer '{ly.name}': BatchNorm '{bn_name}' has {nf} features, "
                                   f"the layer {w.shape[0]} channels")
            if bn.running_mean is None or bn.running_var is None:
                raise ToTorchError(f"layer '{ly.name}': BatchNorm '{bn_name}' has no running statistics")
            if bn.affine:
                sd[_key(bn_name, "weight")] = torch.ones(nf)
                sd[_key(bn_name, "bias")] = torch.zeros(nf)
            sd[_key(bn_name, "running_mean")] = torch.zeros(nf)
            sd[_key(bn_name, "running_var")] = torch.full((nf,), 1.0 - float(bn.eps))
            notes.append(f"BatchNorm '{bn_name}' set to identity (folded into '{name}')")
            done.add(bn_name)
        bias = torch.from_numpy(np.ascontiguousarray(b, dtype=np.float32))
        if mod.bias is not None:
            sd[_key(name, "bias")] = bias
        elif bn is not None and bn.affine:
            sd[_key(bn_name or "", "bias")] = bias
            notes.append(f"bias of '{name}' (no bias parameter) stored as the beta of '{bn_name}'")
        elif bn is not None:
            sd[_key(bn_name or "", "running_mean")] = -bias
            notes.append(f"bias of '{name}' stored as -running_mean of the non-affine '{bn_name}'")
        elif np.any(b != 0):
            raise ToTorchError(f"{where}: the file has a non-zero bias but the module has no bias "
                               "parameter and no BatchNorm to hold it")
    for n, mod in mods.items():
        has_w = any(True for _ in mod.parameters(recurse=False))
        if has_w and n not in done:
            notes.append(f"module '{n}' ({type(mod).__name__}) is not in the file: kept as given")
    return sd, notes


def _torch_load(path: str, what: str, weights_only: bool) -> Any:
    """torch.load, with a file that torch.save() did not write completely named as such (torch's
    own message speaks of zip archives and memo values)."""
    import pickle

    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=weights_only)
    except (RuntimeError, pickle.UnpicklingError, EOFError, ValueError, KeyError, OSError) as e:
        # torch reads a cut zip archive as EINVAL; the file's absence or rights stay as they are
        if "Weights only load failed" in str(e) or isinstance(e, (FileNotFoundError, PermissionError,
                                                                   IsADirectoryError)):
            raise
        size = Path(path).stat().st_size
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        first = first.split(". ")[0]
        raise ToTorchError(f"{what} {path}: not a complete file written by torch.save() ({size} bytes: "
                           f"truncated, corrupt or another format); torch says: {first}") from None


def load_module(spec: str, state_dict: str | None = None, what: str = "--module") -> Any:
    """Build the module: ``pkg.mod:Class`` (or a factory; called with no arguments), or a
    ``torch.save``d module file; then load ``state_dict`` (strict) when given. ``PKG.MODULE`` is
    looked up in the current folder first, as ``python -m`` does. ``what`` names the argument
    in error messages."""
    if ":" in spec and not Path(spec).exists():
        mod_name, _, attr = spec.partition(":")
        if not mod_name or not attr:
            raise ToTorchError(f"{what} {spec!r}: expected PKG.MODULE:CLASS")
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())  # the user's own module, next to their files
        try:
            obj: Any = importlib.import_module(mod_name)
        except ImportError as e:
            raise ToTorchError(f"{what} {spec!r}: cannot import {mod_name!r}: {e}") from None
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise ToTorchError(f"{what} {spec!r}: {mod_name!r} has no attribute {attr!r}")
            obj = getattr(obj, part)
        try:
            module = obj()
        except TypeError as e:
            raise ToTorchError(f"{what} {spec!r}: cannot be built without arguments: {e}") from None
    elif Path(spec).exists():
        module = _torch_load(spec, what, weights_only=False)
    else:
        raise ToTorchError(f"{what} {spec!r}: neither PKG.MODULE:CLASS nor an existing file")
    import torch.nn as nn  # after resolving the spec: a bad spec fails fast

    if isinstance(module, dict):
        raise ToTorchError(f"{what} {spec!r} holds a state_dict: pass PKG.MODULE:CLASS with --state-dict")
    if not isinstance(module, nn.Module):
        raise ToTorchError(f"{what} {spec!r} is not a torch.nn.Module (got {type(module).__name__})")
    if state_dict:
        sd = _torch_load(state_dict, "--state-dict", weights_only=True)
        if not isinstance(sd, dict):
            raise ToTorchError(f"--state-dict {state_dict}: not a state_dict (got {type(sd).__name__})")
        want = module.state_dict()
        missing = [k for k in want if k not in sd]
        extra = [k for k in sd if k not in want]
        wrong = [k for k in want if k in sd and tuple(sd[k].shape) != tuple(want[k].shape)]
        if missing or extra or wrong:
            why = [f"{len(v)} {what} (e.g. {v[0]})" for v, what in
                   ((missing, "missing keys"), (extra, "unexpected keys"), (wrong, "shape mismatches")) if v]
            raise ToTorchError(f"--state-dict {state_dict}: does not fit {type(module).__name__}: "
                               + ", ".join(why))
        module.load_state_dict(sd, strict=True)
    return module.cpu().float().eval()


def save_state_dict(sd: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """torch.save atomically (temporary file in the same directory, then rename)."""
    import torch

    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
    os.close(fd)
    try:
        torch.save(sd, tmp)
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


DESCRIPTION = """\
Write a PyTorch state_dict from a .mtm file (a converted model or a checkpoint saved on
the device after training), for the module class it was converted from. The result
loads with load_state_dict(strict=True): the dequantised int8 weights, folded BatchNorms
set to the identity, layouts back to PyTorch's (how each is mapped: the docstring of
tools/microtrain_tools/to_torch.py). --lora merges a device's LoRA adapters first, as
LoRA.merge() does (docs/lora.md)."""

EXAMPLE = """\
example:
  microtrain to-torch adapted.mtm --module mymodels:DigitsCNN --state-dict base.pt -o adapted.pt
  python -c "import torch, mymodels; m = mymodels.DigitsCNN(); m.load_state_dict(torch.load('adapted.pt'))"
  microtrain to-torch base.mtm --module mymodels:DigitsCNN --lora adapters.mtl -o merged.pt
  microtrain to-torch base.mtm --module mymodels:DigitsCNN --lora adapters.mtl --lora-out lora.pt -o base.pt
"""


def build_parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="microtrain to-torch")
    p.description = DESCRIPTION
    p.epilog = EXAMPLE
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("model", metavar="MODEL.mtm", help="the .mtm file (model or device checkpoint)")
    p.add_argument("--module", required=True, metavar="PKG.MOD:CLASS",
                   help="the nn.Module class (or factory) the file was converted from, built with no "
                        "arguments; or a torch.save()d module file")
    p.add_argument("--state-dict", default=None, metavar="BASE.pt",
                   help="state_dict loaded into the module first: parameters the file does not hold "
                        "keep these values")
    p.add_argument("-o", "--output", required=True, metavar="OUT.pt", help="state_dict file to write")
    p.add_argument("--master", action="store_true",
                   help="a checkpoint's float32 master weights (float32 / mixed modes), not the int8 ones")
    p.add_argument("--lora", default=None, metavar="ADAPTERS.mtl",
                   help="LoRA adapter file made on the device for MODEL.mtm (refused for another base): "
                        "merged into the weights, as LoRA.merge() does on the device")
    p.add_argument("--lora-out", default=None, metavar="LORA.pt",
                   help="with --lora: do not merge; write the adapters here as float32 tensors "
                        "(<layer>.lora_A/B.weight/bias: docs/lora.md)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    return p


def lora_tensors(m: Model, base: bytes, path: str | os.PathLike[str]) -> dict[str, NDArray[np.float32]]:
    """The adapters of an adapter file for base ``m`` (its file bytes ``base``) as float32 arrays
    in PyTorch layout:
    ``<layer>.lora_A.weight`` (rank, in) or (rank, in_c, k_h, k_w), ``<layer>.lora_B.weight``
    (out, rank) or (out, rank, 1, 1), and their biases; ``y = layer(x) + lora_B(lora_A(x))``."""
    from microtrain_tools.reference import lora_ref

    rank, _, vals = lora_ref.read_adapters(path, base)
    out: dict[str, NDArray[np.float32]] = {}
    for name, v in vals.items():
        ly = m.layer(name)
        s_u = np.float64(v[0][0])
        s_x = np.float64(np.float32(m.tensors[ly.inputs[0]].scale))
        aw, asc, ab, bw, bsc, bb = v[1:]
        a = (asc.astype(np.float32)[:, None] * aw.astype(np.float32).reshape(rank, -1)).astype(np.float32)
        b = (bsc.astype(np.float32)[:, None] * bw.astype(np.float32).reshape(-1, rank)).astype(np.float32)
        if ly.op == Op.CONV2D:
            p = ly.params
            a = a.reshape(rank, p[6], p[7], p[2]).transpose(0, 3, 1, 2)
            b = b.reshape(-1, rank, 1, 1)
        else:
            shp = m.tensors[ly.inputs[0]].shape
            if len(shp) == 3:  # the device's NHWC flatten -> PyTorch's CHW order
                h, w, c = shp
                a = a.reshape(rank, h, w, c).transpose(0, 3, 1, 2).reshape(rank, -1)
        out[f"{name}.lora_A.weight"] = np.ascontiguousarray(a)
        out[f"{name}.lora_A.bias"] = (s_x * asc.astype(np.float64) * ab).astype(np.float32)
        out[f"{name}.lora_B.weight"] = np.ascontiguousarray(b)
        out[f"{name}.lora_B.bias"] = (s_u * bsc.astype(np.float64) * bb).astype(np.float32)
    return out


def torch_tensor(a: NDArray[np.float32]) -> Any:
    import torch

    return torch.from_numpy(np.ascontiguousarray(a))


def main(argv: list[str] | None = None, args: argparse.Namespace | None = None) -> int:
    """Run ``to-torch``; errors propagate as ValueError / OSError (the CLI prints them)."""
    if args is None:
        args = build_parser().parse_args(argv)
    if not Path(args.model).is_file():
        raise FileNotFoundError(f"{args.model}: no such file")
    if args.state_dict and not Path(args.state_dict).is_file():
        raise FileNotFoundError(f"--state-dict {args.state_dict}: no such file")
    try:
        m = mtm.load(args.model)
    except ValueError as e:
        raise ValueError(f"{args.model}: not a valid .mtm file: {e}") from None
    if args.lora_out and not args.lora:
        raise ValueError("--lora-out needs --lora ADAPTERS.mtl")
    extra = ""
    if args.lora:
        from microtrain_tools.reference import lora_ref

        if args.lora_out:
            lt = lora_tensors(m, Path(args.model).read_bytes(), args.lora)
            save_state_dict({k: torch_tensor(v) for k, v in lt.items()}, args.lora_out)
            extra = f"; adapters of {len(lt) // 4} layers -> {args.lora_out}"
        else:
            rank, _, vals = lora_ref.read_adapters(args.lora, Path(args.model).read_bytes())
            m = lora_ref.merge(m, rank, vals)
            extra = f" with the adapters of {', '.join(vals)} merged ({args.lora})"
    module = load_module(args.module, args.state_dict)
    sd, notes = to_state_dict(m, module, master=args.master)
    module.load_state_dict(sd, strict=True)  # proves the result loads strictly
    save_state_dict(sd, args.output)
    if not args.quiet:
        n = sum(1 for ly in m.layers if ly.op in mtm.WEIGHTED)
        what = f"checkpoint after {m.train_steps} steps" if m.trained else "model"
        print(f"{args.model} ({what}): {n} conv/linear layers -> {args.output}{extra}")
        for s in notes:
            print(f"  {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
