"""The converter's emitter: quantises the planned layers' weights and writes the file's tensors
and layers (docs/numerics.md, docs/format.md).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch.nn as nn
from numpy.typing import NDArray

from microtrain_tools import mtm
from microtrain_tools.convert_common import ConvertError, _pair, _PLayer, _Pool, _PreBn
from microtrain_tools.convert_lstm import lstm_quantize
from microtrain_tools.convert_rnn import gru_quantize
from microtrain_tools.mtm import Act, DType, Kind, Layer, Op, Quant, Tensor
from microtrain_tools.reference import oracle as o

# --------------------------------------------------------------------------
# emit


class _Emitter:
    def __init__(self) -> None:
        self.tensors: list[Tensor] = []

    def add(self, t: Tensor) -> int:
        self.tensors.append(t)
        return len(self.tensors) - 1

    def const(self, data: NDArray, dtype: DType, quant: Quant = Quant.NONE,
              qscales: int | None = None) -> int:
        arr = np.ascontiguousarray(data, dtype=dtype.np)
        return self.add(Tensor(dtype, tuple(arr.shape), Kind.CONST, quant, qscales=qscales, data=arr))


def _act_limits(act: Act, scale: float, zp: int) -> tuple[int, int]:
    if act == Act.RELU:
        return zp, 127
    if act == Act.RELU6:
        return zp, o.relu6_q6(scale, zp)
    return -128, 127


def _bn_affine(bn: nn.Module, where: str) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """BatchNorm in eval mode as ``x * f + c`` per channel."""
    assert isinstance(bn, (nn.BatchNorm1d, nn.BatchNorm2d))
    if bn.running_mean is None or bn.running_var is None:
        raise ConvertError(f"{where}: needs running statistics (track_running_stats=True)")
    mean = bn.running_mean.detach().double().numpy()
    var = bn.running_var.detach().double().numpy()
    gamma = np.ones_like(mean) if bn.weight is None else bn.weight.detach().double().numpy()
    beta = np.zeros_like(mean) if bn.bias is None else bn.bias.detach().double().numpy()
    f = gamma / np.sqrt(var + bn.eps)
    return f, beta - mean * f


def _float_params(pl: _PLayer) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Weight and bias in float64 (PyTorch layout), BatchNorms folded in."""
    mod = pl.module
    assert isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.Linear, nn.ConvTranspose1d, nn.ConvTranspose2d))
    w = mod.weight.detach().double().numpy().copy()
    if pl.attrs.get("transposed"):  # (in, out, k...) -> the equivalent conv's (out, in, k...), flipped
        w = np.flip(w.swapaxes(0, 1), axis=tuple(range(2, w.ndim))).copy()
    b = np.zeros(w.shape[0]) if mod.bias is None else mod.bias.detach().double().numpy().copy()
    pre: _PreBn | None = pl.attrs.get("pre_bn")
    if pre is not None:  # layer(x * f + c) = layer'(x): scale the input columns, move c into the bias
        f, c = _bn_affine(pre.module, pre.where + pre.at)
        f, c = np.repeat(f, pre.repeat), np.repeat(c, pre.repeat)
        if isinstance(mod, nn.Linear):
            b = b + w @ c
            w = w * f[None, :]
        else:  # input channel i of output channel o's group g is channel g * (in_c / groups) + i
            per_in, per_out = w.shape[1], w.shape[0] // mod.groups
            ch = (np.arange(w.shape[0]) // per_out)[:, None] * per_in + np.arange(per_in)[None, :]
            fo = f[ch].reshape(w.shape[:2] + (1,) * (w.ndim - 2))
            b = b + (w * c[ch].reshape(fo.shape)).reshape(w.shape[0], -1).sum(axis=1)
            w = w * fo
    if pl.bn is not None:
        f, c = _bn_affine(pl.bn, pl.attrs.get("bn_where", f"layer '{pl.fused[0]}'"))
        if len(f) != w.shape[0]:
            raise ConvertError(f"{pl.attrs.get('bn_where')}: BatchNorm features != {w.shape[0]}")
        w = w * f.reshape((-1,) + (1,) * (w.ndim - 1))
        b = b * f + c
    return w, b


def _quant_weights(em: _Emitter, pl: _PLayer, w: NDArray[np.float64], b: NDArray[np.float64],
                   s_in: float, s_out: float) -> tuple[int, int, int, int]:
    out_c = w.shape[0]
    absmax = np.abs(w.reshape(out_c, -1)).max(axis=1)
    if not np.all(np.isfinite(absmax)):
        raise ConvertError(f"layer '{pl.name}': weights not finite")
    # A channel whose scale would fall below the format's floor (2^-40) holds weights
    # under 127 * 2^-40, below what int8 at any valid scale represents: it is a dead
    # channel, stored as zeros with the all-zero channel's scale 1.0 (which keeps its bias
    # representable; a floored 2^-40 scale would overflow the int32 bias).
    s_w = (absmax / 127.0).astype(np.float32)
    dead = ~(s_w >= np.float32(mtm.SCALE_MIN))
    s_w = np.where(dead, np.float32(1.0), s_w).astype(np.float32)
    w = np.where(dead.reshape((-1,) + (1,) * (w.ndim - 1)), 0.0, w)
    if not np.all(np.isfinite(s_w) & (s_w > 0)):
        raise ConvertError(f"layer '{pl.name}': weights not finite")
    s_w64 = s_w.astype(np.float64).reshape((-1,) + (1,) * (w.ndim - 1))
    wq = np.clip(np.rint(w / s_w64), -127, 127).astype(np.int8)
    s_b = s_in * s_w.astype(np.float64)
    bq = np.rint(b / s_b)
    if np.any(np.abs(bq) > 2**30):
        warnings.warn(f"layer '{pl.name}': bias clipped to |bias| <= 2^30 int32 units", stacklevel=3)
        bq = np.clip(bq, -(2**30), 2**30)
    mults, shifts = zip(*(o.quantize_multiplier(s_in * float(s) / s_out) for s in s_w), strict=True)
    qs = em.const(s_w, DType.FLOAT32)
    wi = em.const(wq, DType.INT8, Quant.PER_CHANNEL, qscales=qs)
    bi = em.const(bq.astype(np.int32), DType.INT32, Quant.BIAS)
    mi = em.const(np.array(mults, dtype=np.int32), DType.INT32)
    si = em.const(np.array(shifts, dtype=np.int32), DType.INT32)
    return wi, bi, mi, si


def _emit_gru(em: _Emitter, pl: _PLayer, ins: list[int], out: int, fused: str) -> Layer:
    """A GRU layer from its float weights and the inputs it saw in calibration (convert_rnn)."""
    mod = pl.module
    assert isinstance(mod, nn.GRU)
    x, y = pl.inputs[0].root(), pl.output.root()
    p = {n: v.detach().double().numpy() for n, v in mod.named_parameters()}
    h = mod.hidden_size
    zeros = np.zeros(3 * h)
    g = gru_quantize(p["weight_ih_l0"], p["weight_hh_l0"], p.get("bias_ih_l0", zeros),
                     p.get("bias_hh_l0", zeros), pl.attrs["calib_x"], float(np.float32(x.scale)), x.zp, 0,
                     float(np.float32(y.scale)))
    qs = em.const(g.w_scale.astype(np.float32), DType.FLOAT32)
    wi = em.const(g.w, DType.INT8, Quant.PER_CHANNEL, qscales=qs)
    bi = em.const(g.bias, DType.INT32, Quant.BIAS)
    mi, si = em.const(g.mult, DType.INT32), em.const(g.shift, DType.INT32)
    tables = np.concatenate([g.lut.astype(np.int8), g.dtanh.astype("<i4").view(np.int8)])
    ly = Layer(Op.GRU, pl.name, ins, out, [int(v) for v in g.desc], weight=wi, bias=bi, mult=mi, shift=si,
               fused=fused)
    ly.aux = em.const(tables, DType.INT8)
    return ly


def _emit_lstm(em: _Emitter, pl: _PLayer, ins: list[int], out: int, fused: str) -> Layer:
    """An LSTM layer from its float weights and the inputs it saw in calibration (convert_lstm)."""
    mod = pl.module
    assert isinstance(mod, nn.LSTM)
    x, y = pl.inputs[0].root(), pl.output.root()
    p = {n: v.detach().double().numpy() for n, v in mod.named_parameters()}
    zeros = np.zeros(4 * mod.hidden_size)
    g = lstm_quantize(p["weight_ih_l0"], p["weight_hh_l0"], p.get("bias_ih_l0", zeros),
                      p.get("bias_hh_l0", zeros), pl.attrs["calib_x"], float(np.float32(x.scale)), x.zp, 0,
                      float(np.float32(y.scale)))
    qs = em.const(g.w_scale.astype(np.float32), DType.FLOAT32)
    wi = em.const(g.w, DType.INT8, Quant.PER_CHANNEL, qscales=qs)
    bi = em.const(g.bias, DType.INT32, Quant.BIAS)
    mi, si = em.const(g.mult, DType.INT32), em.const(g.shift, DType.INT32)
    tables = np.concatenate([g.lut.astype(np.int8), g.dtanh.astype("<i4").view(np.int8)])
    ly = Layer(Op.LSTM, pl.name, ins, out, [int(v) for v in g.desc], weight=wi, bias=bi, mult=mi, shift=si,
               fused=fused)
    ly.aux = em.const(tables, DType.INT8)
    return ly


def _emit_layer(em: _Emitter, pl: _PLayer) -> Layer:
    x, y = pl.inputs[0].root(), pl.output.root()
    ins = [v.index for v in pl.inputs]
    out = pl.output.index
    fused = ",".join(pl.fused)
    if pl.kind in ("conv", "linear"):
        mod = pl.module
        w, b = _float_params(pl)
        a_min, a_max = _act_limits(pl.act, y.scale, y.zp)
        if pl.kind == "conv":
            assert isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.ConvTranspose1d, nn.ConvTranspose2d))
            where = pl.where
            in_h, in_w, in_c = pl.inputs[0].shape
            out_h, out_w, out_c = pl.output.shape
            is1d = isinstance(mod, (nn.Conv1d, nn.ConvTranspose1d))
            ks = (1, mod.kernel_size[0]) if is1d else _pair(mod.kernel_size)
            st = (1, mod.stride[0]) if is1d else _pair(mod.stride)
            dl = (1, mod.dilation[0]) if is1d else _pair(mod.dilation)
            ke = ((ks[0] - 1) * dl[0] + 1, (ks[1] - 1) * dl[1] + 1)  # the window's extent
            if pl.attrs.get("transposed"):  # stride 1 over the zero-inserted input, padding k - 1 - p
                st = (1, 1)
                tp = (0, mod.padding[0]) if is1d else _pair(mod.padding)
                pd = (ks[0] - 1 - tp[0], ks[1] - 1 - tp[1]) if not is1d else (0, ks[1] - 1 - tp[1])
            elif isinstance(mod.padding, str):
                if mod.padding == "valid":
                    pd = (0, 0)
                else:  # 'same': PyTorch pads total // 2 before, the rest after
                    pd = ((ke[0] - 1) // 2, (ke[1] - 1) // 2)
            else:
                pd = (0, mod.padding[0]) if is1d else _pair(mod.padding)
            pad = pl.attrs.get("pad")
            if pad is not None:  # zero padding before: top / left add, bottom / right is out_h, out_w
                pd = (pd[0] + pad[0], pd[1] + pad[2])
            at = pl.attrs.get("at", "")
            if not (pd[0] < ke[0] and pd[1] < ke[1]):
                what = " (its own plus the zero padding before it)" if pad is not None else ""
                raise ConvertError(f"{where}: padding {pd}{what} must be smaller than the kernel {ke}{at}")
            if (out_h - 1) * st[0] - pd[0] >= in_h or (out_w - 1) * st[1] - pd[1] >= in_w:
                raise ConvertError(f"{where}: the padding leaves whole windows outside the input (output "
                                   f"{out_h} x {out_w} of {in_h} x {in_w}): pad less{at}")
            pre = pl.attrs.get("pre_bn")
            if pre is not None and (pd != (0, 0) or (out_h - 1) * st[0] + ke[0] > in_h
                                    or (out_w - 1) * st[1] + ke[1] > in_w):
                raise ConvertError(f"{pre.where}: cannot be folded exactly into '{pl.name}', which pads its "
                                   "input (the padding would not see the BatchNorm's shift): put the "
                                   f"BatchNorm after a conv, or give '{pl.name}' padding 0{pre.at}")
            if is1d:
                w = w[:, :, None, :]  # (O, I/g, 1, K)
            w = w.transpose(0, 2, 3, 1)  # OIHW -> OHWI
            params = [in_h, in_w, in_c, out_h, out_w, out_c, ks[0], ks[1], st[0], st[1], pd[0], pd[1],
                      int(mod.groups), x.zp, y.zp, a_min, a_max]
            if dl != (1, 1):
                params += list(dl)
        else:
            assert isinstance(mod, nn.Linear)
            xs = pl.inputs[0].shape
            if len(xs) == 3 and not pl.attrs.get("tokens"):  # flattened (C, H, W) in PyTorch, (H, W, C) here
                h, ww, c = xs
                w = w.reshape(w.shape[0], c, h, ww).transpose(0, 2, 3, 1).reshape(w.shape[0], -1)
            params = [math.prod(xs), w.shape[0], x.zp, y.zp, a_min, a_max]
        wi, bi, mi, si = _quant_weights(em, pl, w, b, x.scale, y.scale)
        op = Op.CONV2D if pl.kind == "conv" else Op.LINEAR
        return Layer(op, pl.name, ins, out, params, pl.act, wi, bi, mi, si, fused=fused)
    n_out = math.prod(pl.output.shape)
    if pl.kind == "lut":  # tables from the float32 scales widened to double, as the contract says
        table, dtable, d_shift = o.lut_tables(pl.attrs["fn"], float(np.float32(x.scale)), x.zp,
                                              float(np.float32(y.scale)), y.zp, pl.attrs["slope"])
        ti, di = em.const(table, DType.INT8), em.const(dtable, DType.INT32)
        return Layer(Op.LUT, pl.name, ins, out, [n_out, x.zp, y.zp, d_shift], weight=ti, bias=di, fused=fused)
    if pl.kind == "relu":
        return Layer(Op.RELU, pl.name, ins, out, [n_out, x.zp], fused=fused)
    if pl.kind == "relu6":
        return Layer(Op.RELU6, pl.name, ins, out, [n_out, x.zp, o.relu6_q6(x.scale, x.zp)], fused=fused)
    if pl.kind == "gap":
        h, ww, c = pl.inputs[0].shape
        return Layer(Op.GLOBAL_AVGPOOL, pl.name, ins, out, [h * ww, c], fused=fused)
    if pl.kind in ("maxpool", "avgpool"):
        pool: _Pool = pl.attrs["pool"]
        in_h, in_w, c = pl.inputs[0].shape
        out_h, out_w, _ = pl.output.shape
        params = [in_h, in_w, c, out_h, out_w, *pool.ks, *pool.st, *pool.pd]
        return Layer(Op.MAXPOOL if pool.is_max else Op.AVGPOOL, pl.name, ins, out, params, fused=fused)
    if pl.kind == "concat":
        x2 = pl.inputs[1].root()
        c1, c2 = pl.inputs[0].shape[-1], pl.inputs[1].shape[-1]
        hw = math.prod(pl.output.shape) // (c1 + c2)
        params = o.concat_params(x.scale, x.zp, x2.scale, x2.zp, y.scale, y.zp, hw, c1, c2)
        return Layer(Op.CONCAT, pl.name, ins, out, params, fused=fused)
    if pl.kind == "upsample":
        in_h, in_w, c = pl.inputs[0].shape
        out_h, out_w, _ = pl.output.shape
        f_h, f_w = pl.attrs["f"]
        params = [in_h, in_w, c, out_h, out_w, f_h, f_w, pl.attrs["mode"], x.zp]
        return Layer(Op.UPSAMPLE, pl.name, ins, out, params, fused=fused)
    if pl.kind == "layernorm":
        c = pl.inputs[0].shape[-1]
        params = o.layernorm_params(x.scale, x.zp, y.scale, y.zp, c, math.prod(pl.inputs[0].shape) // c,
                                    pl.attrs["eps"])
        return Layer(Op.LAYERNORM, pl.name, ins, out, params, fused=fused)
    if pl.kind == "matmul":  # the descriptor, then the constant factor's float32 bits (backward's)
        x2 = pl.inputs[1].root()
        rows, inner, cols = pl.attrs["rci"]
        f = np.float32(pl.attrs["factor"])
        params = o.matmul_params(x.scale * float(f), x.zp, x2.scale, x2.zp, y.scale, y.zp, rows, inner, cols,
                                 pl.attrs["tb"], heads=pl.attrs.get("heads", 1))
        return Layer(Op.MATMUL, pl.name, ins, out, [*params, int(f.view(np.int32))], fused=fused)
    if pl.kind == "gru":
        return _emit_gru(em, pl, ins, out, fused)
    if pl.kind == "lstm":
        return _emit_lstm(em, pl, ins, out, fused)
    if pl.kind == "softmax":
        return Layer(Op.SOFTMAX, pl.name, ins, out, list(pl.attrs["desc"]), fused=fused)
    if pl.kind == "mul":
        x2 = pl.inputs[1].root()
        c = pl.inputs[0].shape[-1]
        hw2, c2 = pl.attrs["hw2_c2"]
        params = o.mul_params(x.scale, x.zp, x2.scale, x2.zp, y.scale, y.zp, math.prod(pl.output.shape) // c,
                              c, hw2, c2)
        return Layer(Op.MUL, pl.name, ins, out, params, fused=fused)
    assert pl.kind == "add"
    x2 = pl.inputs[1].root()
    a_min, a_max = _act_limits(pl.act, y.scale, y.zp)
    params = o.add_params(x.scale, x.zp, x2.scale, x2.zp, y.scale, y.zp, a_min, a_max, n_out)
    return Layer(Op.ADD, pl.name, ins, out, params, pl.act, fused=fused)
