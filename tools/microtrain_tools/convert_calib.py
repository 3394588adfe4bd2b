"""The converter's calibration: records the planned activations' ranges on the calibration data
and picks their int8 quantisation.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.fx
from numpy.typing import NDArray
from tqdm import tqdm

from microtrain_tools.convert_common import ConvertError

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


def _sample_shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def check_samples(batches: list[torch.Tensor], input_shape: tuple[int, ...] | None = None) -> None:
    """Refuse calibration data that would give the file a wrong quantisation or input size,
    naming the first offending sample (its index in the whole set): a NaN or an infinity
    (it would set or skip a range), a sample of another shape than the first (or than
    ``input_shape``: the calibration data fix the file's input size), or data that are
    constant as a whole (the input scale would be about 1e-11)."""
    want = tuple(input_shape) if input_shape is not None else tuple(batches[0].shape[1:])
    base = 0
    for b in batches:
        if tuple(b.shape[1:]) != want:
            what = (f"the input shape given, {_sample_shape(want)}" if input_shape is not None
                    else f"sample 0's {_sample_shape(want)}")
            got = _sample_shape(tuple(b.shape[1:]))
            raise ConvertError(f"calibration sample {base} has shape {got}, not {what}: the calibration data "
                               "fix the file's input size, so every sample "
                               "must have the length (and channels) the model is trained and run with: "
                               "cut or pad the windows to one length")
        bad = ~torch.isfinite(b)
        if bool(bad.any()):
            i = int(bad.reshape(len(b), -1).any(dim=1).nonzero()[0, 0])
            v = b[i][bad[i]][0].item()
            raise ConvertError(f"calibration sample {base + i} holds {'NaN' if v != v else v} (not finite): "
                               "the activation ranges would be wrong; remove or repair that sample "
                               "(e.g. x[np.isfinite(x).all(axis=tuple(range(1, x.ndim)))])")
        base += len(b)
    lo = min(float(b.min()) for b in batches)
    hi = max(float(b.max()) for b in batches)
    if hi - lo < 1e-6 * max(1.0, abs(lo), abs(hi)):
        raise ConvertError(f"calibration data are constant: every value of samples 0..{base - 1} is {lo:g}, "
                           "so the ranges they give (an input scale of about 1e-11 for 0) say nothing about "
                           "real inputs, which would saturate; calibrate on real inputs (a few hundred "
                           "typical samples)")


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
