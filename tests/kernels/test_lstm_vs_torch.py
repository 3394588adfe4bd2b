"""The LSTM oracle (docs/numerics.md, "LSTM over a sequence"; the kernels equal it bit for bit,
make check-kernels) against PyTorch's nn.LSTM in float64 at the same int8 weights and inputs:
the hidden states close to PyTorch's (within 6% of their range: the int8 cell state
adds to the GRU's error), the weight, bias and input gradients of backward through
time pointing the same way as autograd's with the same size, over all steps and truncated to
the last k (PyTorch: the state before them detached, the loss on them only)."""

from __future__ import annotations

import numpy as np
import torch

from microtrain_tools.convert_lstm import LstmQuant, lstm_quantize
from microtrain_tools.reference import oracle

T, D, H = 24, 6, 16
N_CALIB = 8
SEED = 2818


def _cos_ratio(got: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    g, r = got.reshape(-1), ref.reshape(-1)
    ng, nr = np.linalg.norm(g), np.linalg.norm(r)
    return float(g @ r / (ng * nr)), float(ng / nr)


def _setup() -> tuple[torch.nn.LSTM, np.ndarray, np.ndarray, float]:
    torch.manual_seed(SEED)
    lstm = torch.nn.LSTM(D, H, batch_first=True).double()
    rng = np.random.default_rng(SEED)
    x = np.cumsum(rng.normal(0, 0.4, (N_CALIB, T, D)), axis=1)  # smooth signals, as IMU windows
    s_x = float(np.abs(x).max()) / 127
    xq = np.clip(np.round(x / s_x), -128, 127).astype(np.int64)
    return lstm, xq, s_x * xq.astype(np.float64), s_x


def _quant(lstm: torch.nn.LSTM, xr: np.ndarray, s_x: float, k: int = 0) -> LstmQuant:
    p = {n: v.detach().numpy() for n, v in lstm.named_parameters()}
    g = lstm_quantize(p["weight_ih_l0"], p["weight_hh_l0"], p["bias_ih_l0"], p["bias_hh_l0"], xr, s_x, 0, k)
    # PyTorch runs the same int8 weights and biases, dequantised
    wr = g.w.astype(np.float64) * g.w_scale[:, None]
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(torch.tensor(wr[:, :D]))
        lstm.weight_hh_l0.copy_(torch.tensor(wr[:, D:]))
        lstm.bias_ih_l0.copy_(torch.tensor(g.bias * s_x * g.w_scale))
        lstm.bias_hh_l0.zero_()
    return g


def test_forward_close_to_torch() -> None:
    lstm, xq, xr, s_x = _setup()
    g = _quant(lstm, xr, s_x)
    with torch.no_grad():
        ref = lstm(torch.tensor(xr))[0].numpy()
    for i in range(N_CALIB):
        y, _ = oracle.lstm_s8_forward(g.desc, xq[i].reshape(-1), g.w, g.bias, g.mult, g.shift, g.lut)
        h = g.s_h * y.astype(np.float64).reshape(T, H)
        err = np.abs(h - ref[i]).max()
        assert err <= 0.06 * np.abs(ref[i]).max(), f"sequence {i}: max |h - torch| {err:.4f}"


def _backward(k: int) -> None:
    lstm, xq, xr, s_x = _setup()
    g = _quant(lstm, xr, s_x, k)
    rng = np.random.default_rng(SEED + k)
    s_e = 1e-3
    t0 = T - k if 0 < k < T else 0
    for i in range(3):
        e = rng.integers(-128, 128, (T, H))
        y, keep = oracle.lstm_s8_forward(g.desc, xq[i].reshape(-1), g.w, g.bias, g.mult, g.shift, g.lut)
        sh, _, shifts, _, gw, gb, ein = oracle.lstm_s8_backward(g.desc, xq[i].reshape(-1), g.w, g.wr, g.dtanh,
                                                                y, keep, e.reshape(-1))
        unit = s_e * 2.0 ** (int(shifts.max()) - 8)
        gw = gw.reshape(4 * H, D + H).astype(np.float64) * unit
        gw[:, :D] *= s_x
        gw[:, D:] *= g.s_h
        gb = gb.astype(np.float64) * unit
        big_r = oracle.weight_ratios(g.w_scale, 4 * H)[1]
        ein_exp = int(shifts.max()) + sh - 8 - big_r
        ein = ein.astype(np.float64).reshape(T, D) * s_e * g.w_scale.max() * 2.0**ein_exp
        lstm.zero_grad()
        xt = torch.tensor(xr[i:i + 1], requires_grad=True)
        with torch.no_grad():
            z = torch.zeros(1, 1, H, dtype=torch.float64)
            hc = lstm(xt[:, :t0])[1] if t0 else (z, z)
        out = lstm(xt[:, t0:], hc)[0]
        (out * torch.tensor(s_e * e[t0:][None])).sum().backward()
        refs = {"w_ih": lstm.weight_ih_l0.grad, "w_hh": lstm.weight_hh_l0.grad, "b": lstm.bias_ih_l0.grad,
                "x": xt.grad[0, t0:]}
        gots = {"w_ih": gw[:, :D], "w_hh": gw[:, D:], "b": gb, "x": ein[t0:]}
        for name, got in gots.items():
            c, ratio = _cos_ratio(got, refs[name].numpy())
            assert c >= 0.995 and 0.95 <= ratio <= 1.05, f"{i} k={k} {name}: cos {c:.4f} ratio {ratio:.3f}"
        assert not ein[:t0].any()


def test_backward_through_time_close_to_torch() -> None:
    _backward(0)


def test_truncated_backward_close_to_torch() -> None:
    _backward(8)
