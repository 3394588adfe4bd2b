"""``.mtd`` sample files for ``microtrain.FileDataset`` (docs/api.md, "FileDataset").

Layout, little-endian: b"MTDS", u32 n, u32 numel, u32 0, then n records of
[u8 label][numel int8 values] (NHWC, already quantised with the model's input
scale and zero point: ``convert.quantize_input``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.typing import NDArray

__all__ = ["MTD_MAGIC", "write_mtd"]

MTD_MAGIC = b"MTDS"


def write_mtd(path: str | Path, xq: NDArray[np.int8], y: NDArray[np.integer]) -> None:
    """Write int8 samples ``xq`` (n, ...) with labels ``y`` (n,) atomically to ``path``."""
    xq = np.ascontiguousarray(xq, dtype=np.int8).reshape(len(xq), -1)
    y = np.asarray(y)
    if len(y) != len(xq) or (len(y) and (y.min() < 0 or y.max() > 255)):
        raise ValueError("write_mtd: need one label in 0..255 per sample")
    rec = np.empty((len(y), 1 + xq.shape[1]), dtype=np.uint8)
    rec[:, 0] = y.astype(np.uint8)
    rec[:, 1:] = xq.view(np.uint8)
    tmp = Path(str(path) + ".tmp")
    with open(tmp, "wb") as f:
        f.write(MTD_MAGIC + np.array([len(y), xq.shape[1], 0], dtype="<u4").tobytes())
        f.write(rec.tobytes())
    tmp.replace(path)
