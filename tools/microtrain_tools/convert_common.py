"""The converter's shared pieces: its errors and warnings, where a node comes from (for
messages), and the values the planner, calibration and emitter pass along.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx
import torch.nn as nn

from microtrain_tools.mtm import Act


class ConvertError(ValueError):
    """An unsupported op/attribute or bad input: one line naming the layer, the op and what to do.

    A model with several unsupported ops raises one error listing them all (``problems``: one line
    each), so a user does not fix one and then meet the next.
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems if problems else [message]

    @classmethod
    def of(cls, problems: list[str]) -> ConvertError:
        if len(problems) == 1:
            return cls(problems[0])
        listed = " ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
        return cls(f"{len(problems)} problems, all listed: {listed}", problems)


class ConvertWarning(UserWarning):
    """The model converted, but something looks wrong (e.g. calibration data in 0..255)."""


# --------------------------------------------------------------------------
# where a node comes from (for messages)

_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_OWN_PREFIX = str(Path(__file__).resolve().parent / "convert")  # convert.py and its convert_*.py parts
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n[ \t]*([^\n]*)')


def _internal(filename: str) -> bool:
    f = str(Path(filename).resolve()) if filename and not filename.startswith("<") else filename
    return f.startswith(_TORCH_DIR) or (f.startswith(_OWN_PREFIX) and f.endswith(".py"))


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


def _nhwc_shape(shape: tuple[int, ...], where: str, seq: bool = False) -> tuple[tuple[int, ...], bool]:
    """Torch batch shape -> (file shape, signal_1d); seq: a sequence model's (N, T, D) is T tokens of D
    values, (1, T, D), not a signal (N, C, L)."""
    if len(shape) == 4:
        return (shape[2], shape[3], shape[1]), False
    if len(shape) == 3 and seq:
        return (1, shape[1], shape[2]), False
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
