"""Trained-layer state and the optimiser update of the training reference (docs/training.md,
"Update"): gradient sums, master copies, optimiser state and the fully quantised update.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from microtrain_tools import mtm
from microtrain_tools.mtm import Op
from microtrain_tools.reference import oracle as o
from microtrain_tools.reference.mpfloat import DOUBLE, Floats
from microtrain_tools.reference.train_ref_config import (
    BIAS_LIMIT,
    F32,
    SGD,
    Adam,
    _f32,
    _weight_ratios,
    _wide,
)

# --------------------------------------------------------------------------
# trained layer state


class RefLayer:
    """Mutable parameters, float32 gradient sums, master copies and optimiser state of a trained layer."""

    def __init__(self, m: mtm.Model, j: int, fl: Floats = DOUBLE) -> None:
        self.fl = fl
        ly = m.layers[j]
        self.index, self.name, self.op, self.act = j, ly.name, ly.op, ly.act
        self.params = list(ly.params)
        wt = m.tensors[ly.weight] if ly.weight is not None else None
        if wt is None or wt.qscales is None:
            raise ValueError(f"layer {ly.name} has no parameters")
        self.w = m.data(ly.weight).reshape(-1).astype(np.int8)
        self.b = m.data(ly.bias).astype(np.int64)
        self.mult = m.data(ly.mult).astype(np.int64)
        self.shift = m.data(ly.shift).astype(np.int64)
        self.w_scale = _f32(m.data(wt.qscales)).copy()
        self.out_c = len(self.b)
        self.k = len(self.w) // self.out_c
        self.s_in = fl(m.tensors[ly.inputs[0]].scale)
        self.s_out = fl(m.tensors[ly.output].scale)
        self.gw = np.zeros(len(self.w), dtype=np.float32)
        self.gb = np.zeros(self.out_c, dtype=np.float32)
        self.master_w: F32 | None = None
        self.master_b: F32 | None = None
        self.state: list[F32] | None = None
        self.touched: NDArray[np.bool_] | None = None  # channels with a gradient since the update (sparse)
        p = self.params
        self.terms = p[6] * p[7] * (p[5] // p[12]) if self.op == Op.CONV2D else p[1]
        self.wr = np.zeros(self.out_c, dtype=np.int32)
        self.r = 0
        self.top = 0.0
        self.refresh_ratios()

    def refresh_ratios(self) -> None:
        self.wr, self.r = _weight_ratios(self.w_scale, self.terms, self.fl)
        self.top = self.fl(_wide(self.w_scale).max())

    def make_master(self) -> None:
        """Master copies: the dequantised values, stored float32."""
        sw = self.w_scale.astype(np.float32)  # float32 operations (update_f32_decay on the device)
        self.master_w = self.w.astype(np.float32) * np.repeat(sw, self.k)
        self.master_b = (self.b.astype(np.float32) * np.float32(self.s_in)) * sw

    def w_real(self) -> NDArray[np.floating]:
        fl = self.fl
        if self.master_w is not None:
            return fl.arr(self.master_w)
        return self.w.astype(fl.dtype) * np.repeat(fl.arr(self.w_scale), self.k)

    def b_real(self) -> NDArray[np.floating]:
        fl = self.fl
        if self.master_b is not None:
            return fl.arr(self.master_b)
        return self.b.astype(fl.dtype) * self.s_in * fl.arr(self.w_scale)


# --------------------------------------------------------------------------
# the optimiser update (docs/training.md, Update)


def _f(v: float) -> np.float32:
    """A Python float as the update primitives take it: rounded to float32."""
    return np.float32(v)


def _rows(ly: RefLayer) -> NDArray[np.intp]:
    """The channels the update touches (docs/training.md, Sparse policies): all without a policy."""
    if ly.touched is None:
        return np.arange(ly.out_c)
    return np.flatnonzero(ly.touched)


def _prepare(opt: SGD | Adam, g: F32, real: Callable[[], F32], rows: NDArray[np.intp], n: int,
             wd: np.float32) -> None:
    """g (out_c x k, float32, in place on rows): g / n, standardised, plus weight decay."""
    one = np.float32(1.0)
    if opt.standardize:
        inv_n = one / np.float32(n)
        sub = g[rows] * inv_n
        g[rows] = sub
        flat = sub.reshape(-1)
        if flat.size >= 2:
            cnt = np.float32(flat.size)
            mu = np.add.accumulate(flat)[-1] / cnt
            d = flat - mu
            var = np.add.accumulate(d * d)[-1] / cnt
            inv = one / (np.sqrt(var) + np.float32(1e-8))
            g[rows] = ((sub - mu) * inv).astype(np.float32)
        n = 1
    if n != 1 or wd != 0.0:
        d = g[rows] * (one / np.float32(n))
        if wd != 0.0:
            d = d + wd * real()[rows]
        g[rows] = d


def _xorshift16(r: int, n: int) -> tuple[F32, int]:
    """n uniforms r * 2^-16 of the stochastic-rounding generator (float32, exact), and its new state."""
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        r ^= (r << 7) & 0xFFFF
        r ^= r >> 9
        r ^= (r << 8) & 0xFFFF
        out[i] = r
    return out * np.float32(2.0 ** -16), r


def quantize_multiplier_f32(real: np.float32) -> tuple[int, int]:
    """quantize_multiplier of a float32 > 0, exact: q * 2^31 is an integer for a 24-bit significand,
    and the tiny-value branch rounds real * 2^62 half up (docs/numerics.md, update_s8_apply)."""
    q, e = math.frexp(float(real))
    if e > 31:
        return o.INT32_MAX, 31
    if e >= -31:
        return int(q * 2.0 ** 31), e
    m = math.floor(float(real) * 2.0 ** 62 + 0.5)  # exact in double: at most 24 significant bits + the half
    return (m, -31) if m else (0, 0)


def _stored(opt: SGD | Adam, x: F32) -> F32:
    """A state value as the optimiser stores it: float32, or rounded to bfloat16 (state='bf16'),
    kept here as the float32 it stands for."""
    if opt.state == "bf16":
        return o.bf16_to_f32(o.f32_to_bf16(x)).reshape(x.shape)
    return x


def fold_bf16(g: F32, st: list[F32], i: int, k: int, touched: NDArray[np.bool_] | None, a: float) -> F32:
    """update_bf16_momentum(g, v, k, touched, a) on the state st[i] (kept as the float32 its
    bfloat16 stands for): st[i] = bf16(ftz(a v) + g); returns the float32 sums."""
    t = None if touched is None else np.asarray(touched).astype(np.uint8)
    d, vb = o.update_bf16_momentum(g, o.f32_to_bf16(st[i]), k, t, np.float32(a))
    st[i] = o.bf16_to_f32(vb)
    return d


def _update(opt: SGD | Adam, ly: RefLayer, lr: float, n: int, bt: tuple[np.float32, np.float32], rng: int,
            fl: Floats = DOUBLE, fold: bool = False, decay: float = 1.0) -> int:
    """Update one layer (all float32, docs/training.md, Update); returns the new generator state.
    fold: the batch is in the momentum already (RefTrainer sums=False at batch > 1): the direction
    is v itself, n not used (update_s8_apply_keep); a bfloat16 v is widened by
    update_bf16_momentum with g = 0 and mom = decay (backward.IntoMomentum's window)."""
    k, c_n = ly.k, ly.out_c
    rows = _rows(ly)
    wd = _f(fl.param(opt.weight_decay))
    lr32 = _f(lr)
    if ly.state is None:
        if isinstance(opt, SGD):
            if opt.momentum:
                ly.state = [np.zeros(len(ly.w), np.float32), np.zeros(c_n, np.float32)]
        else:
            ly.state = [np.zeros(len(ly.w), np.float32), np.zeros(c_n, np.float32),
                        np.zeros(len(ly.w), np.float32), np.zeros(c_n, np.float32)]
    sw_old = ly.w_scale.astype(np.float32)
    s_in, s_out = _f(ly.s_in), _f(ly.s_out)

    def wreal() -> F32:
        if ly.master_w is not None:
            return ly.master_w.reshape(c_n, k)
        return ly.w.astype(np.float32).reshape(c_n, k) * sw_old[:, None]

    def breal() -> F32:
        if ly.master_b is not None:
            return ly.master_b.reshape(c_n, 1)
        return ((ly.b.astype(np.float32) * s_in) * sw_old).reshape(c_n, 1)

    st = ly.state
    if fold and opt.state == "bf16":
        assert st is not None
        gw, gb = (fold_bf16(np.zeros(len(st[i]), np.float32), st, i, kk, ly.touched, decay)
                  for i, kk in ((0, k), (1, 1)))
        gw, gb = gw.reshape(c_n, k), gb.reshape(c_n, 1)
    elif fold:
        assert st is not None
        gw = st[0].astype(np.float32).reshape(c_n, k).copy()
        gb = st[1].astype(np.float32).reshape(c_n, 1).copy()
    else:
        gw = ly.gw.astype(np.float32).reshape(c_n, k).copy()
        gb = ly.gb.astype(np.float32).reshape(c_n, 1).copy()
    for i, (g, real) in enumerate(() if fold else ((gw, wreal), (gb, breal))):
        _prepare(opt, g, real, rows, n, wd)
        if st is None:
            continue
        shape = g.shape
        if isinstance(opt, SGD):
            v = st[i].reshape(shape).copy()
            d = o.ftz(_f(fl.param(opt.momentum)) * v[rows]) + g[rows]
            v[rows] = _stored(opt, d)
            g[rows] = d
            st[i] = v.reshape(-1)
        else:
            b1, b2 = _f(fl.param(opt.beta1)), _f(fl.param(opt.beta2))
            one = np.float32(1.0)
            m = st[i].reshape(shape).copy()
            v = st[i + 2].reshape(shape).copy()
            d = g[rows]
            m1 = o.ftz(b1 * m[rows]) + (one - b1) * d
            m2 = o.ftz(b2 * v[rows]) + ((one - b2) * d) * d
            m[rows] = _stored(opt, m1)
            v[rows] = _stored(opt, m2)
            g[rows] = (m1 / (one - bt[0])) / (np.sqrt(m2 / (one - bt[1])) + _f(fl.param(opt.eps)))
            st[i] = m.reshape(-1)
            st[i + 2] = v.reshape(-1)
    # apply: new real values, refit, requantise (update_s8_apply)
    old = wreal()
    vals = old[rows] - lr32 * gw[rows]
    top = np.abs(vals).max(axis=1)
    if not np.all(np.isfinite(top)):
        raise ValueError("update: non-finite weights")
    t127 = top / np.float32(127.0)
    s_new = sw_old.copy()
    s_new[rows] = np.where(t127 > 0.0, t127, sw_old[rows])
    s = s_new[rows]
    bf = breal()[rows, 0] - lr32 * gb[rows, 0]
    x = vals * (np.float32(1.0) / s)[:, None]
    if opt.rounding == "stochastic" or (opt.rounding == "auto" and ly.master_w is None):
        u, rng = _xorshift16(rng, rows.size * k)  # one draw per updated weight, in storage order
        y = x + (np.float32(128.0) + u).reshape(rows.size, k)  # 128 + r * 2^-16: exact
    else:
        y = x + np.float32(128.5)
    w = ly.w.reshape(c_n, k).copy()
    w[rows] = np.maximum(np.floor(y).astype(np.int64) - 128, -127).astype(np.int8)  # 0 < y < 256
    ly.w = w.reshape(-1)
    den = s_in * s
    qb = np.floor(bf / den + np.float32(0.5))
    ly.b = ly.b.copy()
    ly.b[rows] = np.clip(qb, -BIAS_LIMIT, BIAS_LIMIT).astype(np.int64)
    if ly.master_w is not None:
        assert ly.master_b is not None
        mw = ly.master_w.reshape(c_n, k).copy()
        mw[rows] = vals
        ly.master_w = mw.reshape(-1)
        mb = ly.master_b.copy()
        mb[rows] = bf
        ly.master_b = mb
    ly.w_scale = s_new
    real_m = den / s_out
    for j, c in enumerate(rows):
        ly.mult[c], ly.shift[c] = quantize_multiplier_f32(real_m[j])
    if not fold:  # (folding: v stays, the gradient sums are unused zeros)
        gw[rows] = 0.0
        gb[rows] = 0.0
        ly.gw = gw.reshape(-1)
        ly.gb = gb.reshape(-1)
    ly.touched = None
    ly.refresh_ratios()
    return rng


# --------------------------------------------------------------------------
# a GRU layer (docs/numerics.md, "GRU over a sequence"): 3H weight rows [W_ih | W_hh], 4H biases
# (the rows' at s_x s_w, then b_hn at s_h s_w), 6H multipliers (each row's x and h parts); an LSTM
# layer ("LSTM over a sequence") the same with 4H rows, 4H biases (all at s_x s_w) and 8H multipliers


class RefGru(RefLayer):
    """A trained GRU (or LSTM) layer: the rows as a layer of 3H (4H) channels; a GRU's b_hn has
    a state of its own."""

    def __init__(self, m: mtm.Model, j: int, fl: Floats = DOUBLE) -> None:
        super().__init__(m, j, fl)
        h = self.params[2]
        g = 3 if m.layers[j].op == mtm.Op.GRU else 4
        self.out_c, self.k, self.terms = g * h, self.params[1] + h, g * h
        self.gb = np.zeros(4 * h, dtype=np.float32)
        self.s_h = float(np.float32(m.tensors[m.layers[j].output].scale))
        self.st_hn: list[F32] | None = None
        self.refresh_ratios()

    def refresh_ratios(self) -> None:
        """The grad-input ratios, and backward's (m_w, sh_w) = max(s_w) 2^-R in the descriptor."""
        if not hasattr(self, "s_h"):  # (RefLayer's __init__: not set up yet)
            return
        super().refresh_ratios()
        self.params[11], self.params[12] = o.quantize_multiplier(math.ldexp(float(self.top), -self.r))


def _hn_direction(opt: SGD | Adam, ly: RefGru, g: F32, n: int, bt: tuple[np.float32, np.float32],
                  fl: Floats) -> F32:
    """b_hn's step direction: _update's for a bias, on its own H values and state."""
    one = np.float32(1.0)
    if n != 1:
        g = g * (one / np.float32(n))
    if isinstance(opt, SGD) and not opt.momentum:
        return g
    if ly.st_hn is None:
        ly.st_hn = [np.zeros(len(g), np.float32) for _ in range(1 if isinstance(opt, SGD) else 2)]
    st = ly.st_hn
    if isinstance(opt, SGD):
        d = o.ftz(_f(fl.param(opt.momentum)) * st[0]) + g
        st[0] = _stored(opt, d)
        return d
    b1, b2 = _f(fl.param(opt.beta1)), _f(fl.param(opt.beta2))
    m1 = o.ftz(b1 * st[0]) + (one - b1) * g
    m2 = o.ftz(b2 * st[1]) + ((one - b2) * g) * g
    st[0], st[1] = _stored(opt, m1), _stored(opt, m2)
    return (m1 / (one - bt[0])) / (np.sqrt(m2 / (one - bt[1])) + _f(fl.param(opt.eps)))


def _follow(m0: NDArray[np.int32], s0: NDArray[np.int32], old: F32, sw: F32,
            h3: int) -> tuple[NDArray[np.int32], NDArray[np.int32]]:
    """The 2 x rows multipliers (x and h parts) times their row's s_w new / old."""
    mult, shift = m0.copy(), s0.copy()
    for i in range(2 * h3):
        c = i - h3 if i >= h3 else i
        real = math.ldexp(int(m0[i]), int(s0[i]) - 31) * (float(sw[c]) / float(old[c]))
        mult[i], shift[i] = o.quantize_multiplier(real)
    return mult, shift


def _update_gru(opt: SGD | Adam, ly: RefGru, lr: float, n: int, bt: tuple[np.float32, np.float32], rng: int,
                fl: Floats = DOUBLE) -> int:
    """A GRU or LSTM layer's step (microtrain.gru.apply on the device): _update over the 3H (4H)
    rows and their biases; every multiplier follows its row's new scale (its real value times s_w
    new / old); a GRU's b_hn = round((b_hn s_h s_w_old - lr d) / (s_h s_w_new)), d its direction."""
    h3 = ly.out_c
    h = ly.params[2]
    if len(ly.b) == h3:  # an LSTM: its 4H rows' biases only
        old = ly.w_scale.astype(np.float32).copy()
        m0, s0 = ly.mult.copy(), ly.shift.copy()
        ly.mult, ly.shift = m0[:h3].copy(), s0[:h3].copy()
        rng = _update(opt, ly, lr, n, bt, rng, fl)
        ly.mult, ly.shift = _follow(m0, s0, old, ly.w_scale.astype(np.float32), h3)
        ly.refresh_ratios()
        return rng
    old = ly.w_scale.astype(np.float32).copy()
    m0, s0 = ly.mult.copy(), ly.shift.copy()
    b_hn, gb_hn = ly.b[h3:].copy(), ly.gb[h3:].astype(np.float32).copy()
    ly.b, ly.gb = ly.b[:h3].copy(), ly.gb[:h3].copy()
    ly.mult, ly.shift = m0[:h3].copy(), s0[:h3].copy()
    # the optimiser state as the device keeps it (the bias's over 4H): its rows' part for _update
    full = ly.state
    if full is not None:
        ly.state = [a if i % 2 == 0 else a[:h3].copy() for i, a in enumerate(full)]
        ly.st_hn = [a[h3:].copy() for i, a in enumerate(full) if i % 2 == 1]
    rng = _update(opt, ly, lr, n, bt, rng, fl)
    sw = ly.w_scale.astype(np.float32)
    mult, shift = _follow(m0, s0, old, sw, h3)
    d = _hn_direction(opt, ly, gb_hn, n, bt, fl)
    lr_d = float(lr)
    for c in range(h):
        k = 2 * h + c
        v = int(b_hn[c]) * (ly.s_h * float(old[k])) - lr_d * float(d[c])
        q = math.floor(v / (ly.s_h * float(sw[k])) + 0.5)
        b_hn[c] = min(max(q, -BIAS_LIMIT), BIAS_LIMIT)
    ly.b = np.concatenate([ly.b, b_hn])
    ly.gb = np.concatenate([ly.gb, np.zeros(h, np.float32)])
    if ly.state is not None and ly.st_hn is not None:
        hn = iter(ly.st_hn)
        ly.state = [a if i % 2 == 0 else np.concatenate([a, next(hn)]) for i, a in enumerate(ly.state)]
    ly.mult, ly.shift = mult, shift
    ly.refresh_ratios()
    return rng
