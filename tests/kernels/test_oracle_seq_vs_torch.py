"""The oracles of the sequence / attention kernels (element-wise mul, matmul of two
activations, softmax inside a model) against PyTorch float64 on the dequantised tensors.

The kernels equal these oracles bit for bit (make check-kernels, tests/kernels/
test_kernels_bitexact.py); here the oracles' integer results, scaled by the real scales
of docs/numerics.md (the dynamic 2^shift included), must agree with the float op:
forwards within one output step (plus the table's rounding for softmax) where not
clamped, gradients pointing the same way as autograd (cosine >= 0.99) with the same size
(norm ratio within 5%).
"""

from __future__ import annotations

import numpy as np
import torch

from microtrain_tools.reference import oracle

COS_MIN = 0.99
RNG_SEED = 2811


def _cos_ratio(got: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    g, r = got.reshape(-1).astype(np.float64), ref.reshape(-1).astype(np.float64)
    c = float(g @ r / max(np.linalg.norm(g) * np.linalg.norm(r), 1e-300))
    return c, float(np.linalg.norm(g) / max(np.linalg.norm(r), 1e-300))


def _grad_close(name: str, got: np.ndarray, ref: np.ndarray) -> None:
    c, ratio = _cos_ratio(got, ref)
    assert c >= COS_MIN, f"{name}: cosine {c:.5f}"
    assert 0.95 <= ratio <= 1.05, f"{name}: norm ratio {ratio:.4f}"


def _q(rng: np.random.Generator, n: int, zp: int) -> np.ndarray:
    return np.clip(np.round(zp + rng.normal(0, 40, n)), -128, 127).astype(np.int64)


def test_mul_matches_torch() -> None:
    """SE block (x2 one value per channel), a gate (same shape), per position, one value."""
    rng = np.random.default_rng(RNG_SEED)
    hw, c = 12, 8
    for hw2, c2 in ((hw, c), (1, c), (hw, 1), (1, 1)):
        s1, z1, s2, z2 = 0.03, 5, 0.02, -20
        x1, x2 = _q(rng, hw * c, z1), _q(rng, hw2 * c2, z2)
        r1, r2 = s1 * (x1 - z1), s2 * (x2 - z2)
        t1 = torch.tensor(r1.reshape(hw, c), dtype=torch.float64, requires_grad=True)
        t2 = torch.tensor(r2.reshape(hw2, c2), dtype=torch.float64, requires_grad=True)
        prod = t1 * t2  # torch broadcasting: the kernel's (hw2, c2) rule
        so = float(prod.detach().abs().max()) / 100
        zo = 3
        d = oracle.mul_params(s1, z1, s2, z2, so, zo, hw, c, hw2, c2)
        y = oracle.mul_s8_forward(d, x1, x2).astype(np.int64)
        ref = prod.detach().numpy().reshape(-1) / so + zo
        assert np.all(np.abs(y - ref) <= 1), f"mul forward ({hw2}, {c2})"
        se = 1e-3
        e = rng.integers(-128, 128, hw * c)
        (prod * torch.tensor(se * e.reshape(hw, c), dtype=torch.float64)).sum().backward()
        g1, sh1 = oracle.mul_s8_grad_x1(d, e, x2)
        g2, sh2, _ = oracle.mul_s8_grad_x2(d, e, x1)
        _grad_close(f"mul grad x1 ({hw2}, {c2})", g1 * se * s2 * 2.0**sh1, t1.grad.numpy())
        _grad_close(f"mul grad x2 ({hw2}, {c2})", g2 * se * s1 * 2.0**sh2, t2.grad.numpy())


def test_matmul_matches_torch() -> None:
    """Q K^T (tb 1) and A V (tb 0)."""
    rng = np.random.default_rng(RNG_SEED + 1)
    rows, inner, cols = 6, 16, 5
    for tb in (0, 1):
        sa, za, sb, zb = 0.02, -3, 0.04, 7
        a, b = _q(rng, rows * inner, za), _q(rng, inner * cols, zb)
        ta = torch.tensor(sa * (a - za).reshape(rows, inner), dtype=torch.float64, requires_grad=True)
        bm = sb * (b - zb).reshape((cols, inner) if tb else (inner, cols))
        tb_ = torch.tensor(bm, dtype=torch.float64, requires_grad=True)
        prod = ta @ (tb_.T if tb else tb_)
        so = float(prod.detach().abs().max()) / 120
        d = oracle.matmul_params(sa, za, sb, zb, so, 0, rows, inner, cols, tb)
        y = oracle.matmul_s8_forward(d, a, b).astype(np.int64)
        assert np.all(np.abs(y - prod.detach().numpy().reshape(-1) / so) <= 1), f"matmul forward tb{tb}"
        se = 1e-3
        e = rng.integers(-128, 128, rows * cols)
        (prod * torch.tensor(se * e.reshape(rows, cols), dtype=torch.float64)).sum().backward()
        ga, sha, _ = oracle.matmul_s8_grad_a(d, e, b)
        gb, shb, _ = oracle.matmul_s8_grad_b(d, e, a)
        _grad_close(f"matmul grad a tb{tb}", ga * se * sb * 2.0**sha, ta.grad.numpy())
        _grad_close(f"matmul grad b tb{tb}", gb * se * sa * 2.0**shb, tb_.grad.numpy())


def test_softmax_matches_torch() -> None:
    """Over the channels (inner 1) and over a middle dimension (inner > 1)."""
    rng = np.random.default_rng(RNG_SEED + 2)
    for outer, n, inner in ((4, 10, 1), (3, 7, 4), (1, 64, 1)):
        s = 0.08
        x = rng.integers(-100, 100, outer * n * inner)
        tx = torch.tensor((s * x).reshape(outer, n, inner), dtype=torch.float64, requires_grad=True)
        p = torch.softmax(tx, dim=1)
        y = oracle.softmax_s8_forward([outer, n, inner], x, oracle.make_softmax_lut(s)).astype(np.int64)
        pr = p.detach().numpy().reshape(-1)
        # one output step (1/256) plus the table's rounding
        assert np.all(np.abs((y + 128) / 256 - pr) <= 1 / 256 + 1e-3), f"softmax forward {outer, n, inner}"
        se = 1e-2
        e = rng.integers(-128, 128, outer * n * inner)
        (p * torch.tensor(se * e.reshape(outer, n, inner), dtype=torch.float64)).sum().backward()
        g, sh = oracle.softmax_s8_grad_input([outer, n, inner], y, e)
        _grad_close(f"softmax grad {outer, n, inner}", g * se * 2.0 ** (sh - 16), tx.grad.numpy())


def test_layernorm_matches_torch() -> None:
    """nn.LayerNorm without its affine (a depthwise 1x1 conv carries gamma and beta)."""
    rng = np.random.default_rng(RNG_SEED + 3)
    for rows, c, s_x, zx in ((4, 64, 0.05, 3), (2, 256, 0.01, -7), (3, 17, 0.2, 0)):
        x = _q(rng, rows * c, zx)
        tx = torch.tensor(s_x * (x - zx).reshape(rows, c), dtype=torch.float64, requires_grad=True)
        yr = torch.nn.functional.layer_norm(tx, (c,), eps=1e-5)
        s_y, zy = 4.0 / 128, 1
        d = oracle.layernorm_params(s_x, zx, s_y, zy, c, rows, 1e-5)
        y = oracle.layernorm_s8_forward(d, x).astype(np.int64)
        ref = yr.detach().numpy().reshape(-1) / s_y + zy
        inside = (ref > -127) & (ref < 126)
        assert np.all(np.abs(y - ref)[inside] <= 1), f"layernorm forward {rows, c}"
        se = 1e-2
        e = rng.integers(-128, 128, rows * c)
        (yr * torch.tensor(se * e.reshape(rows, c), dtype=torch.float64)).sum().backward()
        g, sh = oracle.layernorm_s8_grad_input(d, x, e)
        _grad_close(f"layernorm grad {rows, c}", g * se / s_x * 2.0 ** (sh - 8), tx.grad.numpy())
