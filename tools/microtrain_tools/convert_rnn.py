"""A GRU layer's int8 tensors from its float weights and calibration sequences (docs/numerics.md,
"GRU over a sequence"): per-row weight scales, the gate pre-activation, ``hn`` and hidden-state
scales from a float forward over the calibration inputs, then the kernel's descriptor and tables
(``oracle.gru_params``). numpy only: the converter and the tests call it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from microtrain_tools.reference import oracle

F64 = NDArray[np.float64]
# a sigmoid / tanh saturates past these inputs: a wider pre-activation range only costs resolution
_PRE_MAX = 8.0


@dataclass
class GruQuant:
    desc: list[int]
    w: NDArray[np.int8]  # 3H x (D + H)
    w_scale: F64  # 3H
    bias: NDArray[np.int32]  # 4H
    mult: NDArray[np.int32]
    shift: NDArray[np.int32]
    lut: NDArray[np.int8]
    wr: NDArray[np.int32]
    dtanh: NDArray[np.int32]
    s_h: float
    pre: tuple[float, float, float, float]  # s_r, s_z, s_n, s_hn


def _sig(v: F64) -> F64:
    return 1.0 / (1.0 + np.exp(-v))


def gru_float(w_ih: F64, w_hh: F64, b_ih: F64, b_hh: F64, x: F64) -> dict[str, F64]:
    """nn.GRU's forward over x (N, T, D), h_0 = 0: h (N, T, H) and the gates' pre-activations."""
    n_seq, t_n, _ = x.shape
    h_n = w_hh.shape[1]
    h = np.zeros((n_seq, h_n))
    out: dict[str, list[F64]] = {k: [] for k in ("h", "r", "z", "n", "hn")}
    for t in range(t_n):
        gi = x[:, t] @ w_ih.T + b_ih
        gh = h @ w_hh.T + b_hh
        pr = gi[:, :h_n] + gh[:, :h_n]
        pz = gi[:, h_n:2 * h_n] + gh[:, h_n:2 * h_n]
        hn = gh[:, 2 * h_n:]
        pn = gi[:, 2 * h_n:] + _sig(pr) * hn
        z = _sig(pz)
        h = (1 - z) * np.tanh(pn) + z * h
        for k, v in (("h", h), ("r", pr), ("z", pz), ("n", pn), ("hn", hn)):
            out[k].append(v)
    return {k: np.stack(v, axis=1) for k, v in out.items()}


def _scale(v: F64, cap: float = np.inf) -> float:
    m = min(float(np.max(np.abs(v))), cap)
    return max(m, 1e-6) / 127.0


def gru_hidden_scale(f: dict[str, F64]) -> float:
    """The hidden state's scale (float32) from a float forward (gru_float): n is quantised at h's
    scale, so it covers tanh's outputs, which bound every h (a convex combination of them)."""
    top = max(float(np.max(np.abs(np.tanh(f["n"])))), float(np.max(np.abs(f["h"]))), 1e-6)
    return float(np.float32(min(top, 1.0) / 127))


def gru_quantize(w_ih: F64, w_hh: F64, b_ih: F64, b_hh: F64, x_calib: F64, s_x: float, x_zp: int,
                 k: int = 0, s_h: float | None = None) -> GruQuant:
    """The int8 GRU of float weights (PyTorch's layout: gates r, z, n), its scales calibrated on
    x_calib (N, T, D) real inputs; the hidden state's scale (s_h, else from the calibration) covers
    every step (at most 1/127). Weight scales are float32, as the file holds them."""
    w_ih, w_hh = np.asarray(w_ih, np.float64), np.asarray(w_hh, np.float64)
    b_ih, b_hh = np.asarray(b_ih, np.float64), np.asarray(b_hh, np.float64)
    h_n, d_n = w_hh.shape[1], w_ih.shape[1]
    f = gru_float(w_ih, w_hh, b_ih, b_hh, np.asarray(x_calib, np.float64))
    if s_h is None:
        s_h = gru_hidden_scale(f)
    s_r, s_z = _scale(f["r"], _PRE_MAX), _scale(f["z"], _PRE_MAX)
    s_n, s_hn = _scale(f["n"], _PRE_MAX), _scale(f["hn"])
    w = np.concatenate([w_ih, w_hh], axis=1)
    s_w = (np.maximum(np.abs(w).max(axis=1), 1e-8) / 127.0).astype(np.float32).astype(np.float64)
    wq = np.clip(np.round(w / s_w[:, None]), -127, 127).astype(np.int8)
    t_n = int(np.asarray(x_calib).shape[1])
    desc, mult, shift, lut, wr, dtanh = oracle.gru_params(t_n, d_n, h_n, s_x, x_zp, s_w, s_r, s_z, s_n, s_hn,
                                                          s_h, k)
    bx = b_ih.copy()
    bx[:2 * h_n] += b_hh[:2 * h_n]
    bias = np.concatenate([np.round(bx / (s_x * s_w)), np.round(b_hh[2 * h_n:] / (s_h * s_w[2 * h_n:]))])
    bias = np.clip(bias, -(2**30), 2**30).astype(np.int32)
    return GruQuant(desc, wq, s_w, bias, mult, shift, lut, wr, dtanh, s_h, (s_r, s_z, s_n, s_hn))
