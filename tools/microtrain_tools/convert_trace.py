"""The converter's trace of a PyTorch model: torch.fx, with the input's rank and sample shape known.

Plain ``torch.fx`` tracing makes ``x.dim()`` and ``x.shape`` symbolic, so ``if x.dim() == 3:``
cannot be traced although it depends on nothing but the shape. When plain tracing fails on control
flow, the model is traced again with its input's shape known (meta tensors run beside the trace):
the rank and every dim but the batch are then plain integers, and the batch dim stays symbolic, so
``x.view(x.shape[0], -1)`` still works for any batch. Only a branch on a tensor's values, or on the
batch size, is refused.
"""

from __future__ import annotations

import copy
import inspect
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.fx
import torch.fx.experimental.meta_tracer as meta_tracer
import torch.nn as nn

from microtrain_tools.convert_common import ConvertError, _internal


class _Shape(tuple):  # noqa: SLOT001 - a torch.Size stand-in: a tuple whose batch entry is a Proxy
    def numel(self) -> Any:
        n: Any = 1
        for d in self:
            n = n * d
        return n


class _ShapeProxy(meta_tracer.MetaProxy):
    """A proxy whose rank and non-batch dims are known integers (from the meta tensor beside it)."""

    def _known(self) -> torch.Tensor | None:
        t = getattr(self, "_tensor_meta", None)
        return t if isinstance(t, torch.Tensor) else None

    def dim(self) -> Any:
        t = self._known()
        return t.dim() if t is not None else self.tracer.create_proxy("call_method", "dim", (self,), {})

    def size(self, dim: int | None = None) -> Any:
        t = self._known()
        if t is None or t.dim() == 0:
            return super().size(dim)
        if dim is None:
            return _Shape([self._batch()] + list(t.shape[1:]))
        d = dim + t.dim() if dim < 0 else dim
        return self._batch() if d == 0 else int(t.shape[d])

    @property
    def shape(self) -> Any:
        return self.size()

    def _batch(self) -> Any:
        return self.tracer.create_proxy("call_method", "size", (self, 0), {})


class _ShapeTracer(meta_tracer.MetaTracer):
    def proxy(self, node: torch.fx.Node) -> torch.fx.Proxy:
        return _ShapeProxy(node, self)


def _control_flow(e: BaseException) -> bool:
    return "control flow" in str(e) or "iteration" in str(e) or isinstance(e, torch.fx.proxy.TraceError)


def trace(model: nn.Module, example: Callable[[], torch.Tensor] | None = None
          ) -> tuple[torch.fx.GraphModule, bool]:
    """The model's fx graph (each node with its source line), and whether it was traced with the
    input's shape known (``example`` gives a batch of inputs; called only when plain tracing fails
    on control flow)."""
    tracer = torch.fx.Tracer()
    tracer.record_stack_traces = True
    try:
        graph = tracer.trace(model)
    except Exception as e:  # noqa: BLE001 - tracing raises anything
        if example is None or not _control_flow(e):
            raise ConvertError(trace_message(model, e)) from e
        first = e
    else:
        return torch.fx.GraphModule(tracer.root, graph, type(model).__name__), False
    shaped = _ShapeTracer()
    shaped.record_stack_traces = True
    params = [p for p in inspect.signature(model.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not params:
        raise ConvertError(trace_message(model, first)) from first
    try:
        probe = example()
    except ConvertError as bad:  # both the branch and the data are the user's to fix
        raise ConvertError.of([trace_message(model, first), *bad.problems]) from first
    on_meta = copy.deepcopy(model).to("meta")  # the meta tensors run through meta weights
    try:
        graph = shaped.trace(on_meta, meta_args={params[0].name: probe.to("meta")})
    except Exception as e:  # noqa: BLE001 - the branch depends on more than the shape
        raise ConvertError(trace_message(model, e, shape_known=True)) from e
    return torch.fx.GraphModule(model, graph, type(model).__name__), True  # the real weights


def trace_message(model: nn.Module, e: BaseException, shape_known: bool = False) -> str:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not _internal(f.filename)]
    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
    where = ""
    if frames:
        f = frames[-1]
        where = f" in {f.name}() at {Path(f.filename).name}:{f.lineno} ({(f.line or '').strip()})"
    msg = f"torch.fx cannot trace {type(model).__name__}{where}: {first}"
    if _control_flow(e):
        msg += (": the converter runs forward() once on symbolic tensors, and an if / while / for may depend "
                "on the input's rank and its shape except the batch size (known while tracing), but not on "
                "a tensor's values or the batch size: decide those from constructor arguments, or compute "
                "them outside the model")
    elif shape_known:
        msg += " (traced again with the input's shape known, after a branch on the shape)"
    return msg


class HeadsAttention(nn.Module):
    """nn.MultiheadAttention(batch_first=True) written out as the hand-written attention the converter
    reads: q, k, v Linears on the tokens (its in_proj split), the (N, H, T, Dh) head views,
    softmax(q k^T / sqrt(Dh)) per head, the weighted values back into the tokens, out_proj. Returns
    ``(output, None)``: the attention weights are not an output of the file."""

    def __init__(self, mha: nn.MultiheadAttention, where: str) -> None:
        super().__init__()
        if not mha.batch_first:
            raise ConvertError(f"layer '{where}' (MultiheadAttention): batch_first=False reads (T, N, D); "
                               "build it with batch_first=True (tokens (N, T, D))")
        if mha.bias_k is not None or mha.add_zero_attn:
            raise ConvertError(f"layer '{where}' (MultiheadAttention): add_bias_kv / add_zero_attn do not "
                               "convert")
        e, self.heads, self.where = mha.embed_dim, mha.num_heads, where
        self.dh = e // self.heads
        bias = mha.in_proj_bias is not None
        self.q, self.k = nn.Linear(e, e, bias), nn.Linear(mha.kdim, e, bias)
        self.v = nn.Linear(mha.vdim, e, bias)
        self.out_proj = nn.Linear(e, e, mha.out_proj.bias is not None)
        with torch.no_grad():
            ws = (mha.in_proj_weight.chunk(3) if mha.in_proj_weight is not None
                  else (mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight))
            bs = mha.in_proj_bias.chunk(3) if bias else (None,) * 3
            for lin, w, b in zip((self.q, self.k, self.v), ws, bs, strict=True):
                lin.weight.copy_(w)
                if b is not None:
                    lin.bias.copy_(b)
            self.out_proj.weight.copy_(mha.out_proj.weight)
            if mha.out_proj.bias is not None:
                self.out_proj.bias.copy_(mha.out_proj.bias)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                key_padding_mask: Any = None, need_weights: bool = True, attn_mask: Any = None,
                average_attn_weights: bool = True, is_causal: bool = False) -> tuple[torch.Tensor, None]:
        if key_padding_mask is not None or attn_mask is not None or is_causal:
            raise ConvertError(f"layer '{self.where}' (MultiheadAttention): masks do not convert (every "
                               "token attends to every token)")
        n, t, s, h, dh = query.size(0), query.size(1), key.size(1), self.heads, self.dh
        q = self.q(query).view(n, t, h, dh).transpose(1, 2)
        k = self.k(key).view(n, s, h, dh).transpose(1, 2)
        v = self.v(value).view(n, s, h, dh).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-2, -1) / dh**0.5, dim=-1)
        return self.out_proj((att @ v).transpose(1, 2).reshape(n, t, h * dh)), None


def expand_attention(model: nn.Module) -> None:
    """Replace (in place: a copy of the user's model) every nn.MultiheadAttention by its HeadsAttention."""
    for name, mod in list(model.named_modules()):
        for child, sub in list(mod.named_children()):
            if isinstance(sub, nn.MultiheadAttention):
                setattr(mod, child, HeadsAttention(sub, f"{name}.{child}" if name else child))
