"""An LSTM layer's int8 tensors from its float weights and calibration sequences (docs/numerics.md,
"LSTM over a sequence"): per-row weight scales, the gates' pre-activation, cell-state and hidden
scales from a float forward over the calibration inputs, then the kernel's descriptor and tables
(``oracle.lstm_params``). numpy only: the converter and the tests call it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from microtrain_tools.convert_rnn import _PRE_MAX, F64, _scale, _sig
from microtrain_tools.reference import oracle

# the cell state's int8 range: past it tanh(c) is within 2^-22 of +-1, so h = o tanh(c) does not see
# the clamp, and an uncapped range (calibrated cells reach tens) would leave small cells a step or two
_CELL_MAX = 8.0


@dataclass
class LstmQuant:
    desc: list[int]
    w: NDArray[np.int8]  # 4H x (D + H)
    w_scale: F64  # 4H
    bias: NDArray[np.int32]  # 4H
    mult: NDArray[np.int32]
    shift: NDArray[np.int32]
    lut: NDArray[np.int8]
    wr: NDArray[np.int32]
    dtanh: NDArray[np.int32]
    s_h: float
    pre: tuple[float, float, float, float, float]  # s_i, s_f, s_g, s_o, s_c


def lstm_float(w_ih: F64, w_hh: F64, b_ih: F64, b_hh: F64, x: F64) -> dict[str, F64]:
    """nn.LSTM's forward over x (N, T, D), h_0 = c_0 = 0: h, c (N, T, H) and the gates'
    pre-activations i, f, g, o."""
    n_seq, t_n, _ = x.shape
    h_n = w_hh.shape[1]
    h = np.zeros((n_seq, h_n))
    c = np.zeros((n_seq, h_n))
    out: dict[str, list[F64]] = {k: [] for k in ("h", "c", "i", "f", "g", "o")}
    for t in range(t_n):
        pre = x[:, t] @ w_ih.T + b_ih + h @ w_hh.T + b_hh
        pi, pf, pg, po = (pre[:, q * h_n:(q + 1) * h_n] for q in range(4))
        c = _sig(pf) * c + _sig(pi) * np.tanh(pg)
        h = _sig(po) * np.tanh(c)
        for k, v in (("h", h), ("c", c), ("i", pi), ("f", pf), ("g", pg), ("o", po)):
            out[k].append(v)
    return {k: np.stack(v, axis=1) for k, v in out.items()}


def lstm_hidden_scale(f: dict[str, F64]) -> float:
    """The scale (float32) of h and of both tanh tables' outputs: it covers tanh(g) and tanh(c),
    which bound every h (o tanh(c) with 0 < o < 1)."""
    top = max(float(np.max(np.abs(np.tanh(f["g"])))), float(np.max(np.abs(np.tanh(f["c"])))), 1e-6)
    return float(np.float32(min(top, 1.0) / 127))


def lstm_quantize(w_ih: F64, w_hh: F64, b_ih: F64, b_hh: F64, x_calib: F64, s_x: float, x_zp: int,
                  k: int = 0, s_h: float | None = None) -> LstmQuant:
    """The int8 LSTM of float weights (PyTorch's layout: gates i, f, g, o), its scales calibrated
    on x_calib (N, T, D) real inputs; the cell state's scale covers every calibration step up to
    |c| = _CELL_MAX."""
    w_ih, w_hh = np.asarray(w_ih, np.float64), np.asarray(w_hh, np.float64)
    b_ih, b_hh = np.asarray(b_ih, np.float64), np.asarray(b_hh, np.float64)
    h_n, d_n = w_hh.shape[1], w_ih.shape[1]
    f = lstm_float(w_ih, w_hh, b_ih, b_hh, np.asarray(x_calib, np.float64))
    if s_h is None:
        s_h = lstm_hidden_scale(f)
    s_i, s_f, s_g, s_o = (_scale(f[q], _PRE_MAX) for q in ("i", "f", "g", "o"))
    s_c = _scale(f["c"], _CELL_MAX)
    w = np.concatenate([w_ih, w_hh], axis=1)
    s_w = (np.maximum(np.abs(w).max(axis=1), 1e-8) / 127.0).astype(np.float32).astype(np.float64)
    wq = np.clip(np.round(w / s_w[:, None]), -127, 127).astype(np.int8)
    t_n = int(np.asarray(x_calib).shape[1])
    desc, mult, shift, lut, wr, dtanh = oracle.lstm_params(t_n, d_n, h_n, s_x, x_zp, s_w, s_i, s_f, s_g, s_o,
                                                           s_c, s_h, k)
    bias = np.clip(np.round((b_ih + b_hh) / (s_x * s_w)), -(2**30), 2**30).astype(np.int32)
    return LstmQuant(desc, wq, s_w, bias, mult, shift, lut, wr, dtanh, s_h, (s_i, s_f, s_g, s_o, s_c))
