"""The converter's graph planner: walks the torch.fx graph and plans the file's layers (BatchNorm
folding, fused activations, folded padding, dropped no-ops).
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

from microtrain_tools import mtm
from microtrain_tools.convert_common import (
    ConvertError,
    _at,
    _bind,
    _describe,
    _meta_shape,
    _nhwc_shape,
    _pair,
    _PLayer,
    _Pool,
    _PreBn,
    _Value,
)
from microtrain_tools.convert_registry import (
    _classify,
    _is_meta,
    _lut_activation,
    _pool_spec,
    _up_factors,
    softmax_dim,
)
from microtrain_tools.mtm import Act


def _single_user(node: torch.fx.Node) -> torch.fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _safe_kind(node: torch.fx.Node, modules: dict[str, nn.Module]) -> str:
    """The registry's kind of node, or "" where it is refused (its own turn reports it)."""
    try:
        return _classify(node, modules)
    except ConvertError:
        return ""


def _n(shape: tuple[int, ...]) -> str:
    """A batch shape with its batch dim shown as N (shapes are found on a 2-sample probe)."""
    return "(" + ", ".join(["N", *(str(d) for d in shape[1:])]) + ")"


def _same_nhwc_order(shape: tuple[int, ...]) -> bool:
    """A (C, H, W) / (C, L) sample flattens in the same order in NCHW and NHWC."""
    return len(shape) < 3 or shape[1] == 1 or math.prod(shape[2:]) == 1


def _same_device_order(a: tuple[int, ...], b: tuple[int, ...], seq: bool = False) -> bool:
    """Whether a PyTorch reshape from batch shape ``a`` to ``b`` leaves the device's (NHWC) bytes in
    place (seq: rank-3 tensors are tokens, already in device order)."""
    def nhwc(t: np.ndarray) -> np.ndarray:
        if t.ndim == 4:
            return t.transpose(0, 2, 3, 1)
        return t.transpose(0, 2, 1) if t.ndim == 3 and not seq else t

    idx = np.arange(math.prod(a[1:])).reshape(1, *a[1:])
    return bool(np.array_equal(nhwc(idx).ravel(), nhwc(idx.reshape(1, *b[1:])).ravel()))


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
        self.seq = False  # a sequence model: (N, T, D) tensors are tokens (plan: _sequence_mode)
        self.sig: set[torch.fx.Node] = set()  # its rank-3 tensors that are (N, C, L) signals all the same
        self.transposed: set[torch.fx.Node] = set()  # transposes a matmul reads as they lie
        self.token_flat: set[torch.fx.Node] = set()  # flattened tokens (no column permutation)
        # attention heads: views of tokens (1, T, H * Dh) as (N, T, H, Dh) "thd", (N, H, T, Dh) "htd",
        # (N, H, Dh, T) "hdt" (the same bytes), and per-head scores (N, H, T, S), device (H, T, S)
        self.heads: dict[torch.fx.Node, tuple[int, str]] = {}
        self.scores: dict[torch.fx.Node, int] = {}
        # channels-last views: (N, C, H * W) of a map on its way to tokens (its grid (H, W)), or (N, L, C)
        # of an (N, C, L) signal around a LayerNorm (None); tokens of T = H * W lie as the map (H, W, D)
        self.chlast: dict[torch.fx.Node, tuple[int, int] | None] = {}
        self.chlast_vals: list[_Value] = []  # LayerNorm outputs over a signal's channels
        self.grid: dict[int, tuple[int, int]] = {}

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
        shape, s1d = _nhwc_shape(_meta_shape(node), self.where(node) + _at(node), self.tok(node))
        if self.tok(node) and len(_meta_shape(node)) == 3:
            shape = self.tokens_shape(shape[1], shape[2])
        return _Value(shape, s1d, calib=calib, same_as=same_as)

    def tok(self, node: Any) -> bool:
        """Whether a rank-3 tensor of this model is (N, T, D) tokens (else an (N, C, L) signal)."""
        return self.seq and node not in self.sig

    def tokens_shape(self, t: int, d: int) -> tuple[int, int, int]:
        """The device shape of T tokens of D values: (1, T, D), or (H, W, D) when a conv tokenizer
        made T = H * W of them (the map's bytes are the tokens)."""
        g = self.grid.get(t)
        return (g[0], g[1], d) if g else (1, t, d)

    def plan_views(self, node: torch.fx.Node, kind: str, x: _Value, arg0: torch.fx.Node,
                   in_tshape: tuple[int, ...]) -> bool:
        """Reshapes and transposes that move no data between channels-last bytes and (N, T, C):
        ``flatten(2).transpose(1, 2)`` of an (N, C, H, W) map is H * W tokens of C values (a conv
        tokenizer); ``transpose(1, 2)`` of an (N, C, L) signal, read only by LayerNorms, is the signal's
        own bytes (normalised over C), and the transpose after them the signal again. False: not one."""
        out = _meta_shape(node)
        users = list(node.users)
        if kind == "reshape" and self.seq and len(in_tshape) == 4 and tuple(out) == (
                in_tshape[0], in_tshape[1], in_tshape[2] * in_tshape[3]) and users and all(
                _safe_kind(u, self.modules) == "transpose" for u in users):
            self.chlast[node] = (x.shape[0], x.shape[1])
        elif kind == "transpose" and arg0 in self.chlast:
            g = self.chlast[arg0]
            if g is not None:
                self.grid[g[0] * g[1]] = g
        elif kind == "transpose" and not self.tok(arg0) and len(in_tshape) == 3 and x.signal_1d and users \
                and all(_safe_kind(u, self.modules) == "layernorm" for u in users):
            self.chlast[node] = None
        elif kind == "transpose" and self.seq and arg0 in self.sig and node not in self.sig:
            pass  # (N, C, L) -> (N, L, C): the signal's positions are the tokens
        elif kind == "transpose" and any(x is v for v in self.chlast_vals) and len(in_tshape) == 3:
            pass  # back to the signal
        elif kind == "layernorm" and arg0 in self.chlast and self.chlast[arg0] is None:
            self.plan_layernorm(node, x, arg0)
            self.chlast_vals.append(self.values[node])
            return True
        else:
            return False
        self.values[node] = x
        return True

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
        """Plan every node; raise one ConvertError listing every refused node, not just the first."""
        problems: list[str] = []
        blocked: set[torch.fx.Node] = set()  # refused, with nothing to stand in for its output
        self.seq = self._sequence_mode()
        for node in self.gm.graph.nodes:
            if node in self.done:
                continue
            if any(a in blocked for a in node.all_input_nodes):
                blocked.add(node)  # a consequence of an earlier refusal, not a problem of its own
                continue
            try:
                self.plan_one(node)
            except ConvertError as e:
                problems.append(str(e))
                if node.op == "get_attr":  # a weight, not an activation: its users fail for the same reason
                    blocked.add(node)
                    continue
                try:  # a stand-in of the traced shape, so the ops after it are still checked
                    self.values.setdefault(node, self.new_value(node, calib=node))
                except ConvertError:
                    blocked.add(node)
        if problems:
            raise ConvertError.of(problems)

    def _sequence_mode(self) -> bool:
        """A model whose rank-3 tensors are (N, T, D) tokens: a Linear, LayerNorm, matmul or mean over
        the tokens on one. Its rank-3 tensors that a Conv1d, 1-D pooling or upsampling makes or reads,
        and those derived from them element-wise, are (N, C, L) signals all the same (``self.sig``): a
        transpose(1, 2) of one is tokens, the signal's positions."""
        sig_ops = ("conv", "convt", "maxpool", "avgpool", "gap", "gmp", "upsample", "bn")
        same = ("relu", "relu6", "lut", "alias", "add", "mul", "pad", "concat")
        sig: set[torch.fx.Node] = set()
        for node in self.gm.graph.nodes:
            if len(node.meta.get("mt_shape", ())) != 3:
                continue
            kind = _safe_kind(node, self.modules) if node.op.startswith("call_") else ""
            src = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
            users = [_safe_kind(u, self.modules) for u in node.users if u.op.startswith("call_")]
            around_ln = src in sig and ((kind == "transpose" and users and set(users) == {"layernorm"})
                                        or kind == "layernorm")  # a LayerNorm over the signal's channels
            if kind in sig_ops or any(u in sig_ops for u in users) or (kind in same and src in sig) \
                    or around_ln:
                sig.add(node)
        seq = False
        for node in self.gm.graph.nodes:
            kind = _safe_kind(node, self.modules) if node.op.startswith("call_") else ""
            src = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
            rank3 = src is not None and len(src.meta.get("mt_shape", ())) == 3
            seq_kinds = ("linear", "layernorm", "matmul", "gap_tokens", "gru", "lstm")
            if kind in seq_kinds and rank3 and src not in sig:
                seq = True
        self.sig = sig if seq else set()
        return seq

    def plan_one(self, node: torch.fx.Node) -> None:
        if node.op == "placeholder":
            if self.input is not None:
                raise self.fail(node, "a second model input: the file has one input (pass one tensor)")
            self.input = self.values[node] = self.new_value(node, calib=node)
            return
        if node.op == "output":
            self.plan_output(node)
            return
        if node.op == "get_attr":
            raise self.fail(node, "a parameter or buffer used outside a module (e.g. F.conv2d(x, "
                                  "self.weight)): use nn.Conv2d / nn.Linear modules")
        self.plan_node(node, _classify(node, self.modules))

    def plan_output(self, node: torch.fx.Node) -> None:
        out = node.args[0]
        if not isinstance(out, torch.fx.Node):
            outs = list(out.values()) if isinstance(out, dict) else list(out) if isinstance(
                out, (tuple, list)) else []
            made = [self.where(o) for o in outs if isinstance(o, torch.fx.Node)]
            by = f" (made by {', '.join(made)})" if made else ""
            raise ConvertError(f"the model returns {len(outs) or 'no'} tensors{by}: the file has one output; "
                               "return only the tensor the device should compute (e.g. the logits); for "
                               "several heads, convert a model per head")
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
        if kind in ("gru", "lstm"):  # a tuple output (the sequence, h_n): no view or head of one tensor
            self.plan_recurrent(node, x, kind) if kind == "lstm" else self.plan_gru(node, x)
            return
        if self.plan_views(node, kind, x, arg0, in_tshape):
            return
        if self.seq and self.plan_heads(node, kind, x, arg0, in_tshape):
            return
        if kind == "linear" and self.tok(arg0) and len(in_tshape) == 3:
            self.plan_token_linear(node, x)
        elif kind in ("conv", "linear"):
            self.plan_weighted(node, kind, x, arg0, in_tshape)
        elif kind in ("matmul", "transpose", "scale", "gap_tokens"):
            self.plan_seq(node, kind, x)
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
        elif kind == "mul":
            self.plan_mul(node, x)
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
            mod = self.modules[str(node.target)] if node.op == "call_module" else None
            if len(users) == 1 and users[0].op == "output" and softmax_dim(node, mod) == 1:
                self.softmax = self.src_name(node)  # the last op: stripped, the file outputs logits
                self.values[node] = x
            else:
                self.plan_softmax(node, x, mod, in_tshape)
        elif kind == "layernorm":
            self.plan_layernorm(node, x, arg0)
        else:  # alias
            self.values[node] = x

    def plan_mul(self, node: torch.fx.Node, x: _Value) -> None:
        """x * y: the operand of the full shape first, the other the same, broadcast over the
        positions (one value per channel) or over the channels (one per position)."""
        a, b = node.args[0], node.args[1]
        assert isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node)
        y = self.value_of(b, node)
        sa, sb, so = _meta_shape(a), _meta_shape(b), _meta_shape(node)
        if tuple(sb) == tuple(so) and tuple(sa) != tuple(so):  # the broadcast one second
            a, b, x, y, sa, sb = b, a, y, x, sb, sa
        if tuple(sa) != tuple(so):
            raise self.fail(node, f"operands of shapes {_n(tuple(sa))} and {_n(tuple(sb))}: one must have "
                                  "the output's shape")
        full = (1,) * (len(sa) - len(sb)) + tuple(sb)
        spatial = full[2:]
        if full == tuple(sa):
            hw2, c2 = 1, 1  # set below
        elif self.tok(a) and len(sa) == 3 and full[0] in (1, sa[0]) and full[1:] in ((sa[1], 1), (1, sa[2])):
            # tokens: one value per token (N, T, 1) or per feature (N, 1, D)
            hw2, c2 = (math.prod(x.shape) // x.shape[-1], 1) if full[2] == 1 else (1, x.shape[-1])
        elif len(sa) >= 3 and full[1] == sa[1] and all(d == 1 for d in spatial) and full[0] in (1, sa[0]):
            hw2, c2 = 1, x.shape[-1]
        elif len(sa) >= 3 and full[1] == 1 and spatial == tuple(sa[2:]) and full[0] in (1, sa[0]):
            hw2, c2 = math.prod(x.shape) // x.shape[-1], 1
        elif all(d == 1 for d in full[1:]) and full[0] in (1, sa[0]):
            hw2, c2 = 1, 1
        else:
            raise self.fail(node, f"operands of shapes {_n(tuple(sa))} and {_n(tuple(sb))}: only the same "
                                  "shape or a broadcast over the positions (N, C, 1, 1) or over the channels "
                                  "(N, 1, H, W) converts")
        if full == tuple(sa):
            if y.shape != x.shape:
                raise self.fail(node, f"operands of device shapes {x.shape} and {y.shape} differ")
            hw2, c2 = math.prod(x.shape) // x.shape[-1], x.shape[-1]
        elif math.prod(y.shape) != hw2 * c2 or y.shape[-1] != c2:
            raise self.fail(node, f"the broadcast operand's device shape {y.shape} does not hold "
                                  f"{hw2} x {c2} values")
        pl = self.layer("mul", node, [x, y])
        pl.attrs["hw2_c2"] = (hw2, c2)
        pl.output = self.values[node] = _Value(x.shape, x.signal_1d, calib=node)

    def plan_softmax(self, node: torch.fx.Node, x: _Value, mod: nn.Module | None,
                     in_tshape: tuple[int, ...]) -> None:
        """A softmax inside the model: a SOFTMAX layer over the device axis of its dim (outer x n x
        inner), output quantisation fixed (scale 1/256, zero point -128)."""
        if isinstance(mod, nn.LogSoftmax) or node.target in (torch.log_softmax, F.log_softmax, "log_softmax"):
            raise self.fail(node, "log_softmax inside the model: only a final one converts (it is stripped)")
        dim = softmax_dim(node, mod)
        if self.tok(node.args[0]) and len(in_tshape) == 3:  # over the tokens (dim 1) or their values (dim 2)
            t, d = math.prod(x.shape[:-1]), x.shape[-1]
            if (t if dim == 1 else d) > 256:
                raise self.fail(node, f"softmax over {t if dim == 1 else d} values: at most 256")
            pl = self.layer("softmax", node, [x])
            pl.attrs["desc"] = [1, t, d] if dim == 1 else [t, d, 1]
            pl.output = self.values[node] = _Value(x.shape, x.signal_1d, scale=2.0**-8, zp=mtm.SOFTMAX_ZP)
            return
        axes = {2: (0,), 3: (2, 1), 4: (2, 0, 1)}[len(in_tshape)]
        axis = axes[dim - 1]  # torch dim -> NHWC axis
        if len(x.shape) != {2: 1, 3: 3, 4: 3}[len(in_tshape)]:
            raise self.fail(node, f"softmax over a tensor of device shape {x.shape}")
        n = x.shape[axis]
        if n > 256:
            raise self.fail(node, f"softmax over {n} values: at most 256")
        pl = self.layer("softmax", node, [x])
        pl.attrs["desc"] = [math.prod(x.shape[:axis]), n, math.prod(x.shape[axis + 1:])]
        pl.output = self.values[node] = _Value(x.shape, x.signal_1d, scale=2.0**-8, zp=mtm.SOFTMAX_ZP)

    def plan_layernorm(self, node: torch.fx.Node, x: _Value, arg0: torch.fx.Node) -> None:
        """LayerNorm over (N, F) features: a LAYERNORM layer, its normalised value calibrated on a
        node of its own, then (elementwise_affine) a depthwise 1x1 conv holding weight and bias."""
        mod = self.modules[str(node.target)] if node.op == "call_module" else None
        eps = float(mod.eps) if mod is not None else float(
            _bind(node, ("input", "normalized_shape", "weight", "bias", "eps"),
                  {"weight": None, "bias": None, "eps": 1e-5})["eps"])
        f = x.shape[-1]
        if len(_meta_shape(arg0)) == 3 and not self.tok(arg0) and arg0 not in self.chlast:
            raise self.fail(node, "LayerNorm of an (N, C, L) signal: only over the features of (N, F), the "
                                  "D of (N, T, D) tokens, or a signal's channels (ln(x.transpose(1, 2))"
                                  ".transpose(1, 2))")
        with self.gm.graph.inserting_after(node):  # the normalised value, for calibration only
            norm = self.gm.graph.call_function(F.layer_norm, (arg0, (f,), None, None, eps))
        norm.meta["mt_shape"] = node.meta["mt_shape"]
        self.done.add(norm)
        affine = mod is not None and getattr(mod, "weight", None) is not None
        if not affine:
            pl = self.layer("layernorm", node, [x])
            pl.attrs["eps"] = eps
            pl.output = self.values[node] = _Value(x.shape, x.signal_1d, calib=norm)
            return
        name = self.name(node)
        nname = f"{name[:mtm.MAX_NAME - 5]}:norm"
        if nname in self.names:
            raise self.fail(node, f"layer name '{nname}' is taken")
        self.names.add(nname)
        shape = x.shape if len(x.shape) == 3 else (1, 1, f)  # the conv's (H, W, C)
        nv = _Value(shape, False, calib=norm)
        self.layers.append(_PLayer("layernorm", nname, [x], nv, where=self.where(node),
                                   attrs={"at": _at(node), "eps": eps}))
        assert mod is not None
        conv = nn.Conv2d(f, f, 1, groups=f)  # the affine part: one weight and bias per feature
        with torch.no_grad():
            conv.weight.copy_(mod.weight.detach().reshape(f, 1, 1, 1))
            conv.bias.copy_(mod.bias.detach() if mod.bias is not None else torch.zeros(f))
        pl = _PLayer("conv", name, [nv], nv, module=conv, where=self.where(node), attrs={"at": _at(node)})
        pl.fused.append("layernorm")
        self.layers.append(pl)
        last = self.fuse_act(node, pl)
        pl.output = self.values[last] = _Value(shape, False, calib=last)
        self.values[node] = pl.output

    def plan_gru(self, node: torch.fx.Node, x: _Value) -> None:
        """nn.GRU over (N, T, D) tokens: one GRU layer whose output is the sequence (out of
        ``out, _ = gru(x)``); its hidden state's scale is set from this output's range."""
        target = str(node.target)
        self.calls[target] = self.calls.get(target, 0) + 1
        if self.calls[target] > 1:
            raise self.fail(node, "module called more than once (shared weights): use one module per call")
        seq = next(iter(node.users), None)
        if seq is None:
            raise self.fail(node, "the GRU's output is not used")
        pl = self.layer("gru", node, [x], module=self.modules[target])
        self.done.add(seq)
        pl.output = self.values[seq] = self.new_value(seq, calib=seq)

    def plan_recurrent(self, node: torch.fx.Node, x: _Value, kind: str) -> None:
        """A recurrent module (nn.LSTM) over (N, T, D) tokens: one layer whose output is the sequence
        (out of ``out, _ = lstm(x)``); its hidden state's scale is set by the calibration."""
        target = str(node.target)
        self.calls[target] = self.calls.get(target, 0) + 1
        if self.calls[target] > 1:
            raise self.fail(node, "module called more than once (shared weights): use one module per call")
        seq = next(iter(node.users), None)
        if seq is None:
            raise self.fail(node, f"the {kind.upper()}'s output is not used")
        pl = self.layer(kind, node, [x], module=self.modules[target])
        self.done.add(seq)
        pl.output = self.values[seq] = self.new_value(seq, calib=seq)

    def plan_token_linear(self, node: torch.fx.Node, x: _Value) -> None:
        """nn.Linear on the (N, T, D) tokens of a sequence model: a 1x1 conv over the T positions."""
        target = str(node.target)
        mod = self.modules[target]
        assert isinstance(mod, nn.Linear)
        self.calls[target] = self.calls.get(target, 0) + 1
        if self.calls[target] > 1:
            raise self.fail(node, "module called more than once (shared weights): use one module per call")
        conv = nn.Conv2d(mod.in_features, mod.out_features, 1, bias=mod.bias is not None)
        with torch.no_grad():
            conv.weight.copy_(mod.weight.detach().reshape(conv.weight.shape))
            if mod.bias is not None:
                conv.bias.copy_(mod.bias.detach())
        pl = self.layer("conv", node, [x], module=conv)
        pl.fused.append("linear_tokens")
        last = self.fuse_act(node, pl)
        pl.output = self.values[last] = self.new_value(last, calib=last)
        self.values[node] = pl.output

    def plan_seq(self, node: torch.fx.Node, kind: str, x: _Value) -> None:
        """The ops of sequence models: matmul (a transpose of its second operand read as it lies, a
        constant factor after it folded in), the mean over the tokens."""
        if kind == "scale":
            raise self.fail(node, "a constant factor converts only right after a matmul (folded into it): "
                                  "fold it into the data or into the conv / linear before it")
        if not self.seq:
            raise self.fail(node, f"{kind} outside a sequence model (one whose (N, T, D) tensors a Linear, "
                                  "LayerNorm or matmul reads as T tokens of D values)")
        if kind == "transpose":
            users = list(node.users)
            column = _meta_shape(node)[1] == 1  # (N, 1, T) of one value per token: a row, as it lies
            if not users or any(_safe_kind(u, self.modules) != "matmul" or (u.args[1] is not node and not (
                    column and u.args[0] is node)) or (u.args[0] is node and not column) for u in users):
                raise self.fail(node, "a transpose converts only as a matmul's second operand (read as it "
                                      "lies), or as its first when it makes one row of a column (N, T, 1)")
            self.transposed.add(node)
            self.values[node] = x
            return
        if kind == "gap_tokens":  # the mean over the tokens: a global average pool of (1, T, D)
            pl = self.layer("gap", node, [x])
            pl.attrs["pool"] = None
            pl.output = self.values[node] = _Value((1, 1, x.shape[2]), False, same_as=x)
            return
        a, b = node.args[0], node.args[1]
        assert isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node)
        y = self.value_of(b, node)
        sa, so = _meta_shape(a), _meta_shape(node)
        if len(x.shape) != 3 or len(y.shape) != 3:
            raise self.fail(node, f"matmul of device shapes {x.shape} and {y.shape}")
        tb = 1 if b in self.transposed else 0
        rows, inner, cols = sa[1], sa[2], so[2]
        pl = self.layer("matmul", node, [x, y])
        pl.attrs.update({"rci": (rows, inner, cols), "tb": tb, "factor": 1.0})
        last = self.fold_scale(node, pl)
        pl.output = self.values[last] = self.new_value(last, calib=last)
        self.values[node] = pl.output

    def plan_heads(self, node: torch.fx.Node, kind: str, x: _Value, arg0: torch.fx.Node,
                   in_tshape: tuple[int, ...]) -> bool:
        """Multi-head attention on tokens: the head views (reshape to (N, T, H, Dh), the transposes,
        back to (N, T, H * Dh)) move no data; q @ k^T per head is a MATMUL with heads (tb 1) into
        scores (H, T, S), their softmax runs over S, scores @ v per head a MATMUL with heads (tb 0)
        back into tokens. False: not a head op (planned as usual)."""
        hv, sc = self.heads.get(arg0), self.scores.get(arg0)
        out = _meta_shape(node)
        if kind == "reshape":
            split = len(in_tshape) == 3 and len(out) == 4 and tuple(out[:2]) == tuple(in_tshape[:2])
            if hv is None and split and out[2] * out[3] == in_tshape[2] and out[2] > 1:
                self.heads[node] = (out[2], "thd")
            elif hv is not None and hv[1] == "thd" and tuple(out) == (*in_tshape[:2],
                                                                       in_tshape[2] * in_tshape[3]):
                pass  # the tokens again
            elif hv is not None or sc is not None:
                raise self.fail(node, f"reshape {_n(in_tshape)} -> {_n(out)} of attention heads: only "
                                      "(N, T, H, Dh) <-> (N, T, H * Dh) converts")
            else:
                return False
            self.values[node] = x
            return True
        if kind == "alias" and (hv is not None or sc is not None):
            if hv is not None:
                self.heads[node] = hv
            else:
                self.scores[node] = sc  # type: ignore[assignment]
            self.values[node] = x
            return True
        if kind == "transpose" and hv is not None:
            a = _bind(node, ("input", "dim0", "dim1"), {})
            dims = {int(a["dim0"]) % 4, int(a["dim1"]) % 4}
            moves = {((1, 2), "thd"): "htd", ((1, 2), "htd"): "thd", ((2, 3), "htd"): "hdt",
                     ((2, 3), "hdt"): "htd"}
            form = moves.get((tuple(sorted(dims)), hv[1]))  # type: ignore[arg-type]
            if form is None:
                raise self.fail(node, f"transpose {sorted(dims)} of attention heads {_n(in_tshape)}: only "
                                      "(N, T, H, Dh) <-> (N, H, T, Dh) and a key's (N, H, T, Dh) -> "
                                      "(N, H, Dh, T)")
            self.heads[node] = (hv[0], form)
            self.values[node] = x
            return True
        if kind == "softmax" and sc is not None:
            mod = self.modules[str(node.target)] if node.op == "call_module" else None
            if softmax_dim(node, mod) != 3 or x.shape[2] > 256:
                raise self.fail(node, "softmax of attention scores: only over the keys (dim -1, at most 256)")
            pl = self.layer("softmax", node, [x])
            pl.attrs["desc"] = [x.shape[0] * x.shape[1], x.shape[2], 1]
            pl.output = self.values[node] = _Value(x.shape, False, scale=2.0**-8, zp=mtm.SOFTMAX_ZP)
            self.scores[node] = sc
            return True
        if kind != "matmul" or (hv is None and sc is None):
            if hv is not None or sc is not None:
                raise self.fail(node, f"{kind} of attention heads or scores: only their transposes, the "
                                      "softmax of the scores and the two matmuls convert")
            return False
        b = node.args[1]
        assert isinstance(b, torch.fx.Node)
        y, hb = self.value_of(b, node), self.heads.get(b)
        if hv is not None and hv[1] == "htd" and hb is not None and hb[1] == "hdt" and hb[0] == hv[0]:
            nh, tb = hv[0], 1  # q k^T: tokens of both, scores stacked per head
            rows, inner, cols = in_tshape[2], in_tshape[3], out[3]
        elif sc is not None and hb is not None and hb[1] == "htd" and hb[0] == sc:
            nh, tb = sc, 0  # scores v: back into tokens
            rows, inner, cols = in_tshape[2], in_tshape[3], out[3]
        else:
            raise self.fail(node, "matmul of attention heads: only q @ k.transpose(-2, -1) of (N, H, T, Dh) "
                                  "head views of tokens, then the scores (or their softmax) @ v")
        pl = self.layer("matmul", node, [x, y])
        pl.attrs.update({"rci": (rows, inner, cols), "tb": tb, "factor": 1.0, "heads": nh})
        last = self.fold_scale(node, pl)
        if tb:
            pl.output = self.values[last] = _Value((nh, rows, cols), False, calib=last)
            self.scores[last] = nh
        else:
            pl.output = self.values[last] = _Value(self.tokens_shape(rows, nh * cols), False, calib=last)
            self.heads[last] = (nh, "htd")
        self.values[node] = pl.output
        return True

    def fold_scale(self, node: torch.fx.Node, pl: _PLayer) -> torch.fx.Node:
        """A constant factor right after a matmul, folded into it; the last node."""
        nxt = _single_user(node)
        if nxt is not None and _safe_kind(nxt, self.modules) == "scale" and nxt.args[0] is node:
            c = float(nxt.args[1])
            pl.attrs["factor"] = 1.0 / c if nxt.target in (operator.truediv, torch.div, "div") else c
            pl.fused.append(self.src_name(nxt))
            self.done.add(nxt)
            return nxt
        return node

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
        if arg0 in self.token_flat:  # (named in fused: to_torch keeps its columns too)
            pl.attrs["tokens"] = True
            pl.fused.append("tokens")
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
            if self.tok(node.args[0]) and len(in_tshape) == 3:
                self.token_flat.add(node)  # tokens: PyTorch's order is the device's
            return
        seq = self.tok(node.args[0])
        if _nhwc_shape(out, self.where(node), self.tok(node))[0] == x.shape:
            self.values[node] = x
            return
        if _same_device_order(in_tshape, out, seq) and node.users and all(
                _safe_kind(u, self.modules) == "mul" for u in node.users):
            self.values[node] = x  # the same bytes, read only by products (broadcast by their planning)
            return
        if x is self.input and x.calib is not None and sum(not _is_meta(u) for u in x.calib.users) == 1 and \
                _same_device_order(in_tshape, out, seq):
            # the same bytes in another shape: the file's input is the reshaped tensor, and data in the
            # model's own input layout still quantise to the right bytes (to_nhwc is then a no-op reorder)
            self.input = self.values[node] = self.new_value(node, calib=x.calib)
            return
        if x is self.input:
            raise self.fail(node, f"reshapes the model input {_n(in_tshape)} -> {_n(out)}: give the model "
                                  f"its input in the shape its first layer takes, {_n(out)}, and reshape in "
                                  "your data pipeline")
        raise self.fail(node, f"reshape {_n(in_tshape)} -> {_n(out)} moves data on the device (NHWC "
                              f"{x.shape} -> {_nhwc_shape(out, '', self.tok(node))[0]}): only reshapes to "
                              "(N, features) and reshapes that keep the NHWC shape (squeeze / unsqueeze of "
                              "size-1 dims) convert")

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
