"""The files a fleet round exchanges with a board, on the host (numpy), and the rule between
them and Flower's arrays (docs/fleet.md, "Arrays").

The layouts are the board's (``python_lib/microtrain/fleet.py``: its ``*_MAGIC`` / ``*_HEAD`` /
``*_LAYER`` constants, read from that file here so that they are written once):

- global file (host -> board): ``GLOBAL_HEAD``, then per trained layer ``LAYER_HEAD`` and its
  real values, float32 weights (channels x values per channel) then float32 biases;
- delta file (board -> host): ``DELTA_HEAD``, then per trained layer ``DELTA_LAYER``, a bit
  mask of the channels sent (bit c & 7 of byte c >> 3), their float32 scales, their float32
  bias deltas and their int8 rows.

Flower's ArrayRecord holds, per trained layer of index i, ``L<i>.w`` (float32, channels x
values) and ``L<i>.b`` (float32, channels). A board's reply is the global arrays plus its
dequantised delta (``q * scale`` for the channels sent, 0 elsewhere), so that Flower's
strategies aggregate models, as they expect.
"""

from __future__ import annotations

import ast
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from microtrain_tools import paths

F32 = NDArray[np.float32]
Arrays = dict[str, F32]


def _board_constants() -> dict[str, object]:
    tree = ast.parse((paths.PYTHON_LIB / "microtrain" / "fleet.py").read_text())
    out: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.endswith(("_MAGIC", "_HEAD", "_LAYER")):
                out[name] = ast.literal_eval(node.value)
    return out


_C = _board_constants()
GLOBAL_MAGIC = bytes(_C["GLOBAL_MAGIC"])  # type: ignore[arg-type]
DELTA_MAGIC = bytes(_C["DELTA_MAGIC"])  # type: ignore[arg-type]
GLOBAL_HEAD = str(_C["GLOBAL_HEAD"])
DELTA_HEAD = str(_C["DELTA_HEAD"])
LAYER_HEAD = str(_C["LAYER_HEAD"])
DELTA_LAYER = str(_C["DELTA_LAYER"])


def names(index: int) -> tuple[str, str]:
    return f"L{index}.w", f"L{index}.b"


def layer_indices(arrays: Arrays) -> list[int]:
    return sorted({int(k[1:].split(".")[0]) for k in arrays})


def global_bytes(fingerprint: int, rnd: int, arrays: Arrays) -> bytes:
    """The global file for `arrays` (the trained layers in index order)."""
    idx = layer_indices(arrays)
    out = [struct.pack(GLOBAL_HEAD, GLOBAL_MAGIC, fingerprint & 0xFFFFFFFF, rnd, len(idx), 0)]
    for i in idx:
        kw, kb = names(i)
        w = np.ascontiguousarray(arrays[kw], dtype="<f4")
        b = np.ascontiguousarray(arrays[kb], dtype="<f4")
        if w.ndim != 2 or b.shape != (w.shape[0],):
            raise ValueError(f"layer {i}: weights {w.shape} / bias {b.shape} are not (channels, k) / "
                             "(channels,)")
        out += [struct.pack(LAYER_HEAD, i, w.shape[0], w.shape[1]), w.tobytes(), b.tobytes()]
    return b"".join(out)


def read_global(data: bytes) -> tuple[int, int, Arrays]:
    """(fingerprint, round, arrays) of a global file."""
    magic, fp, rnd, n, _ = struct.unpack_from(GLOBAL_HEAD, data, 0)
    if magic != GLOBAL_MAGIC:
        raise ValueError(f"not a global file (magic {magic!r})")
    pos = struct.calcsize(GLOBAL_HEAD)
    arrays: Arrays = {}
    for _ in range(n):
        i, c, k = struct.unpack_from(LAYER_HEAD, data, pos)
        pos += struct.calcsize(LAYER_HEAD)
        kw, kb = names(i)
        arrays[kw] = np.frombuffer(data, "<f4", c * k, pos).reshape(c, k).astype(np.float32)
        pos += 4 * c * k
        arrays[kb] = np.frombuffer(data, "<f4", c, pos).astype(np.float32)
        pos += 4 * c
    if pos != len(data):
        raise ValueError(f"global file: {len(data) - pos} bytes after the last layer")
    return fp, rnd, arrays


@dataclass
class LayerDelta:
    index: int
    channels: int
    k: int
    kept: NDArray[np.intp]  # the channels sent, ascending
    scale: F32  # one per channel sent
    bias: F32  # bias delta, one per channel sent
    q: NDArray[np.int8]  # (len(kept), k)


@dataclass
class Delta:
    fingerprint: int
    round: int
    samples: int
    loss: float
    acc: float
    layers: list[LayerDelta]
    nbytes: int

    def dense(self) -> Arrays:
        """The delta as Flower arrays: q * scale in the channels sent, 0 elsewhere (float32)."""
        out: Arrays = {}
        for ly in self.layers:
            w = np.zeros((ly.channels, ly.k), np.float32)
            b = np.zeros(ly.channels, np.float32)
            w[ly.kept] = ly.q.astype(np.float32) * ly.scale[:, None]
            b[ly.kept] = ly.bias
            kw, kb = names(ly.index)
            out[kw], out[kb] = w, b
        return out


def read_delta(data: bytes) -> Delta:
    """Parse a board's delta file (ValueError when it is malformed or truncated)."""
    hs = struct.calcsize(DELTA_HEAD)
    if len(data) < hs:
        raise ValueError("delta file: short header")
    magic, fp, rnd, n, loss, acc, nl, _ = struct.unpack_from(DELTA_HEAD, data, 0)
    if magic != DELTA_MAGIC:
        raise ValueError(f"not a delta file (magic {magic!r})")
    pos = hs
    layers: list[LayerDelta] = []
    try:
        for _ in range(nl):
            i, c, k, m, _ = struct.unpack_from(DELTA_LAYER, data, pos)
            pos += struct.calcsize(DELTA_LAYER)
            nm = (c + 7) >> 3
            bits = np.unpackbits(np.frombuffer(data, np.uint8, nm, pos), bitorder="little")[:c]
            pos += nm
            kept = np.flatnonzero(bits)
            if len(kept) != m:
                raise ValueError(f"delta file: layer {i}: mask has {len(kept)} channels, header {m}")
            scale = np.frombuffer(data, "<f4", m, pos).astype(np.float32)
            pos += 4 * m
            bias = np.frombuffer(data, "<f4", m, pos).astype(np.float32)
            pos += 4 * m
            q = np.frombuffer(data, np.int8, m * k, pos).reshape(m, k).copy()
            pos += m * k
            layers.append(LayerDelta(i, c, k, kept, scale, bias, q))
    except (struct.error, ValueError) as e:
        raise ValueError(f"delta file truncated or malformed: {e}") from e
    if pos != len(data):
        raise ValueError(f"delta file: {len(data) - pos} bytes after the last layer")
    return Delta(fp, rnd, n, loss, acc, layers, len(data))


def fp32_bytes(arrays: Arrays) -> int:
    """What the same update costs as float32 values (every weight and bias of the trained part)."""
    return 4 * sum(int(v.size) for v in arrays.values())


def load_global(path: Path) -> tuple[int, int, Arrays]:
    return read_global(Path(path).read_bytes())
