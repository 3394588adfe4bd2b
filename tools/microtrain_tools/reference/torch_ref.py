"""Float references through PyTorch autograd, in microtrain's layouts.

Tensors are real-valued numpy arrays: activations NHWC flattened (one sample),
conv weights OHWI flattened, linear weights ``[out_n][in_n]``. Geometry
arguments follow the kernel descriptors (docs/numerics.md). Each function
returns the forward output and, given an upstream gradient ``dy`` (dL/dy),
the gradients w.r.t. its inputs (None when ``dy`` is None). Computation is in
float64.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import ArrayLike, NDArray

Arr = NDArray[np.float64]

__all__ = ["add", "avgpool2d", "conv2d", "global_avgpool", "linear", "maxpool2d", "softmax_xent"]


def _nchw(x: ArrayLike, h: int, w: int, c: int, grad: bool = True) -> torch.Tensor:
    a = np.asarray(x, dtype=np.float64).reshape(h, w, c).transpose(2, 0, 1)[None]
    return torch.tensor(np.ascontiguousarray(a), dtype=torch.float64, requires_grad=grad)


def _nhwc(t: torch.Tensor) -> Arr:
    return t.detach()[0].permute(1, 2, 0).contiguous().numpy().reshape(-1)


def _grad(t: torch.Tensor) -> Arr | None:
    return None if t.grad is None else t.grad.detach().numpy().copy()


def _pad_amounts(in_n: int, out_n: int, k: int, stride: int, pad: int) -> tuple[int, int]:
    """(pad_before, pad_after) so that an unpadded conv yields >= out_n positions."""
    need = (out_n - 1) * stride + k  # span of the windows, starting at -pad
    return pad, max(0, need - pad - in_n)


def _padded(t: torch.Tensor, in_h: int, in_w: int, out_h: int, out_w: int, k_h: int, k_w: int,
            stride_h: int, stride_w: int, pad_top: int, pad_left: int,
            value: float = 0.0) -> torch.Tensor:
    pt, pb = _pad_amounts(in_h, out_h, k_h, stride_h, pad_top)
    pl, pr = _pad_amounts(in_w, out_w, k_w, stride_w, pad_left)
    return F.pad(t, (pl, pr, pt, pb), value=value)


def _backward(y: torch.Tensor, dy: ArrayLike | None, h: int, w: int, c: int) -> None:
    if dy is not None:
        g = np.asarray(dy, dtype=np.float64).reshape(h, w, c).transpose(2, 0, 1)[None]
        y.backward(torch.tensor(np.ascontiguousarray(g), dtype=torch.float64))


def conv2d(x: ArrayLike, w: ArrayLike, b: ArrayLike, dy: ArrayLike | None,
           in_h: int, in_w: int, in_c: int, out_h: int, out_w: int, out_c: int,
           k_h: int, k_w: int, stride_h: int = 1, stride_w: int = 1,
           pad_top: int = 0, pad_left: int = 0, groups: int = 1,
           ) -> tuple[Arr, Arr | None, Arr | None, Arr | None]:
    """Zero-padded grouped conv2d -> (y, dx, dw OHWI, db); bottom/right padding implied by out_h/out_w."""
    xt = _nchw(x, in_h, in_w, in_c)
    cpg = in_c // groups
    wn = np.asarray(w, dtype=np.float64).reshape(out_c, k_h, k_w, cpg).transpose(0, 3, 1, 2)
    wt = torch.tensor(np.ascontiguousarray(wn), requires_grad=True)
    bt = torch.tensor(np.asarray(b, dtype=np.float64).reshape(out_c), requires_grad=True)
    xp = _padded(xt, in_h, in_w, out_h, out_w, k_h, k_w, stride_h, stride_w, pad_top, pad_left)
    y = F.conv2d(xp, wt, bt, stride=(stride_h, stride_w), groups=groups)[:, :, :out_h, :out_w]
    _backward(y, dy, out_h, out_w, out_c)
    dw = None if wt.grad is None else wt.grad.permute(0, 2, 3, 1).contiguous().numpy().reshape(-1)
    return _nhwc(y), _flat_nhwc_grad(xt), dw, _grad(bt)


def _flat_nhwc_grad(t: torch.Tensor) -> Arr | None:
    return None if t.grad is None else t.grad[0].permute(1, 2, 0).contiguous().numpy().reshape(-1)


def linear(x: ArrayLike, w: ArrayLike, b: ArrayLike, dy: ArrayLike | None,
           ) -> tuple[Arr, Arr | None, Arr | None, Arr | None]:
    """y = W x + b -> (y, dx, dw [out_n][in_n] flattened, db)."""
    xt = torch.tensor(np.asarray(x, dtype=np.float64).reshape(-1), requires_grad=True)
    bt = torch.tensor(np.asarray(b, dtype=np.float64).reshape(-1), requires_grad=True)
    wt = torch.tensor(np.asarray(w, dtype=np.float64).reshape(bt.numel(), xt.numel()),
                      requires_grad=True)
    y = F.linear(xt, wt, bt)
    if dy is not None:
        y.backward(torch.tensor(np.asarray(dy, dtype=np.float64).reshape(-1)))
    dw = _grad(wt)
    return y.detach().numpy().copy(), _grad(xt), None if dw is None else dw.reshape(-1), _grad(bt)


def maxpool2d(x: ArrayLike, dy: ArrayLike | None, in_h: int, in_w: int, c: int,
              out_h: int, out_w: int, k_h: int, k_w: int, stride_h: int = 1, stride_w: int = 1,
              pad_top: int = 0, pad_left: int = 0) -> tuple[Arr, Arr | None]:
    """Max pool ignoring padding -> (y, dx)."""
    xt = _nchw(x, in_h, in_w, c)
    xp = _padded(xt, in_h, in_w, out_h, out_w, k_h, k_w, stride_h, stride_w, pad_top, pad_left,
                 value=-np.inf)
    y = F.max_pool2d(xp, (k_h, k_w), (stride_h, stride_w))[:, :, :out_h, :out_w]
    _backward(y, dy, out_h, out_w, c)
    return _nhwc(y), _flat_nhwc_grad(xt)


def avgpool2d(x: ArrayLike, dy: ArrayLike | None, in_h: int, in_w: int, c: int,
              out_h: int, out_w: int, k_h: int, k_w: int, stride_h: int = 1, stride_w: int = 1,
              pad_top: int = 0, pad_left: int = 0) -> tuple[Arr, Arr | None]:
    """Average pool over valid taps only (count_include_pad=False) -> (y, dx)."""
    xt = _nchw(x, in_h, in_w, c)
    geo = (in_h, in_w, out_h, out_w, k_h, k_w, stride_h, stride_w, pad_top, pad_left)
    ones = torch.ones_like(xt, requires_grad=False)
    total = F.avg_pool2d(_padded(xt, *geo), (k_h, k_w), (stride_h, stride_w), divisor_override=1)
    count = F.avg_pool2d(_padded(ones, *geo), (k_h, k_w), (stride_h, stride_w), divisor_override=1)
    y = (total / count)[:, :, :out_h, :out_w]
    _backward(y, dy, out_h, out_w, c)
    return _nhwc(y), _flat_nhwc_grad(xt)


def global_avgpool(x: ArrayLike, dy: ArrayLike | None, hw: int, c: int) -> tuple[Arr, Arr | None]:
    """Mean over hw positions per channel -> (y[c], dx[hw*c])."""
    xt = torch.tensor(np.asarray(x, dtype=np.float64).reshape(hw, c), requires_grad=True)
    y = xt.mean(dim=0)
    if dy is not None:
        y.backward(torch.tensor(np.asarray(dy, dtype=np.float64).reshape(c)))
    dx = _grad(xt)
    return y.detach().numpy().copy(), None if dx is None else dx.reshape(-1)


def add(x1: ArrayLike, x2: ArrayLike, dy: ArrayLike | None,
        ) -> tuple[Arr, Arr | None, Arr | None]:
    """y = x1 + x2 -> (y, dx1, dx2)."""
    a = torch.tensor(np.asarray(x1, dtype=np.float64).reshape(-1), requires_grad=True)
    b = torch.tensor(np.asarray(x2, dtype=np.float64).reshape(-1), requires_grad=True)
    y = a + b
    if dy is not None:
        y.backward(torch.tensor(np.asarray(dy, dtype=np.float64).reshape(-1)))
    return y.detach().numpy().copy(), _grad(a), _grad(b)


def softmax_xent(logits: ArrayLike, label: int) -> tuple[float, Arr]:
    """Softmax cross-entropy of one sample -> (loss, dL/dlogits)."""
    z = torch.tensor(np.asarray(logits, dtype=np.float64).reshape(1, -1), requires_grad=True)
    loss = F.cross_entropy(z, torch.tensor([int(label)]))
    loss.backward()
    assert z.grad is not None
    return float(loss.item()), z.grad[0].numpy().copy()
