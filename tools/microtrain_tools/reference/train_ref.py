"""Host reference of on-device training (docs/training.md), in numpy.

An independent implementation of one training step of ``python_lib/microtrain``
(forward, loss, sparse policy, backward with dynamic error scales, the fully
quantised update with optional float32 master copies, SGD / Adam), written from
docs/training.md and built on the kernel oracle (``oracle.py``) and the file
reader (``mtm.py``). On the host, where MicroPython floats are doubles, it
reproduces the device's trained int8 weights, biases, multipliers, shifts,
weight scales, master copies and optimiser state bit for bit; with
``floats="float32"`` it reproduces a single-precision MicroPython (the boards,
the float32 host twin ports/host) bit for bit (``mpfloat.py``).

Float rules mirrored from the device (host ``micropython``; with ``floats="float32"``
read float32 for double, numpy float32 operations and ``mpfloat``'s functions):

- every value the device keeps in an ``array('f')`` is rounded to float32 when
  stored (``np.float32`` casts here); every other float intermediate is a
  double, computed with the same operations in the same order (numpy float64
  element-wise operations are IEEE operations like MicroPython's);
- sums are sequential (``np.add.accumulate``), never pairwise;
- ``exp`` / ``log`` / ``sqrt`` / ``pow`` come from ``math`` (the C library, like
  MicroPython), not from numpy's vectorised versions.

Where docs/training.md is less precise than the device, the device's choice
is followed and named in a comment ("device:"), so the two can be reconciled.

Library use::

    from microtrain_tools import mtm
    from microtrain_tools.reference import train_ref as tr
    ref = tr.RefTrainer(mtm.load("m.mtm"), train="last:2", mode="mixed",
                        optimizer=tr.SGD(lr=0.05, momentum=0.9), sparse=tr.DynamicSparse(0.1, 1.0), batch=4)
    for x, y in zip(xs, ys):            # x: int8 NHWC sample
        ref.step(x, y)
    ref.flush()
    ref.arrays()                         # {"L6.w": ..., "L6.w_scale": ..., ...}
    mtm.save(ref.checkpoint(), "ref-checkpoint.mtm")

Command line: ``python -m microtrain_tools.reference.train_ref --help``.

The trainer is here; its configuration (optimisers, sparse policies, schedules) is in
``train_ref_config.py`` and the trained-layer state and update in ``train_ref_update.py``,
both re-exported from here.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from microtrain_tools import mtm
from microtrain_tools.mtm import Act, Kind, Op
from microtrain_tools.reference import oracle as o
from microtrain_tools.reference.mpfloat import DOUBLE, FLOAT32, Floats
from microtrain_tools.reference.train_ref_config import (
    F32,
    FLOATS,
    MODES,
    SGD,
    Adam,
    DynamicSparse,
    Policy,
    Schedule,
    StaticSparse,
    _f32,
    _merge_ratios,
    _weight_ratios,
    _wide,
    schedule_lr,
    select,
    shuffle_epoch,
    shuffle_order,
    shuffle_state,
    softmax_lut,
)
from microtrain_tools.reference.train_ref_update import (
    RefGru,
    RefLayer,
    _f,
    _update,
    _update_gru,
    _xorshift16,
    fold_bf16,
)
from microtrain_tools.reference.train_ref_update import quantize_multiplier_f32 as quantize_multiplier_f32

__all__ = [
    "SGD",
    "Adam",
    "DynamicSparse",
    "RefLayer",
    "RefTrainer",
    "StaticSparse",
    "main",
    "schedule_lr",
    "select",
    "shuffle_epoch",
    "shuffle_order",
    "softmax_lut",
]

# --------------------------------------------------------------------------
# the trainer


class RefTrainer:
    """The device ``Trainer`` for one model: ``step``, ``flush``, ``fit``; state in ``arrays()``.

    ``model`` is a converted model or a checkpoint; a checkpoint's STATE tensors
    (master copies, SGD momentum, Adam first moments) are taken over as the
    device does on resume (docs/training.md, Checkpoints).

    ``continue_rng=True``: on a checkpoint, advance the stochastic-rounding generator by
    ``train_steps * (weights rounded stochastically per update)`` draws, so that a resumed
    run continues the uninterrupted run's stream (the fix proposed for the device, which
    restarts the generator).

    ``floats``: the Python floats of the MicroPython build reproduced. ``"double"`` (the host
    unix port, the default) or ``"float32"`` (single-precision builds: most boards, the float32
    host twin ports/host): every unstored float value is then rounded to float32 after each
    operation, with the device's ``exp`` / ``log`` / ``pow`` (ports/common/mtmath.c), float
    literals and hyperparameters parsed as a single-precision MicroPython parses their text
    (``mpfloat.py``; docs/training.md, "Single-precision floats")."""

    def __init__(self, model: mtm.Model, train: str | int | Sequence[str | int] | None = "last:1",
                 mode: str = "int8", optimizer: SGD | Adam | None = None, sparse: Policy | None = None,
                 batch: int = 1, continue_rng: bool = True, floats: str = "double",
                 loss: str = "xent", adapt_ranges: bool = False, sums: bool | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if floats not in FLOATS:
            raise ValueError(f"floats must be one of {FLOATS}, got {floats!r}")
        self.fl = fl = FLOAT32 if floats == "float32" else DOUBLE
        # policies get the floats only when single: subclasses written for the double-only
        # reference (observe(loss), mask(name, e, c, is_output)) keep working
        self._fl_arg: tuple[Floats, ...] = (fl,) if fl.single else ()
        if batch < 1:
            raise ValueError("batch must be >= 1")
        if loss not in ("xent", "mse", "bce"):
            raise ValueError(f"loss must be 'xent', 'mse' or 'bce', got {loss!r}")
        self.loss_kind = loss
        self.m = copy.deepcopy(model)
        self.mode = mode
        self.opt = optimizer if optimizer is not None else SGD(lr=0.01, momentum=0.9)
        self.sparse = sparse
        self.batch = batch
        o = self.opt
        # the device keeps gradient sums only where it needs them (Trainer sums=None / False): at
        # batch 1 with SGD momentum each gradient goes into the momentum (st0 / st1; backward.IntoMomentum,
        # its default on a build with an FPU, as the host's), with plain SGD each layer steps
        # during backward (stepwise.StepInBackward): the same arithmetic; with a sparse policy
        # (sums=False only) its stochastic-rounding draws follow its update order, last layer first
        # (a bfloat16 state keeps the sums on the device: its grad-weight kernels add into float32)
        sgd1 = (batch == 1 and isinstance(o, SGD) and not o.weight_decay and not o.standardize
                and (o.state == "f32" or not o.momentum))
        # a trained GRU or LSTM keeps the gradient sums (Trainer: its update is backward.Sums')
        gru = any(self.m.layers[j].op in (Op.GRU, Op.LSTM) for j in select(self.m, train))
        nosums = sgd1 and not gru and (sums is False or (sums is None and sparse is None))
        # batch > 1, sums=False: the batch folded into the momentum (backward.IntoMomentum): v = m v at the
        # batch's first sample, each gradient added with the scales (s_x s) / batch, s / batch,
        # the update applies v itself (no / n: a short last batch keeps 1 / batch per sample)
        # (a bfloat16 momentum at batch 1 too: through a float32 window, v = bf16(ftz(m v) + g) per
        # sample, the direction v widened at the update: not the sums' bits)
        self.half = sums is False and isinstance(o, SGD) and bool(o.momentum) and o.state == "bf16"
        self.fold = (batch > 1 and sums is False) or self.half
        if self.fold and not (isinstance(o, SGD) and o.momentum and not o.weight_decay and not o.standardize
                              and (sparse is None or batch == 1)):
            raise ValueError("sums=False at batch > 1 needs SGD momentum (no weight_decay, no standardize) "
                             "and no sparse policy")
        self._folded: set[int] = set()  # layers whose momentum took this batch's m v already
        self.keep: dict[int, NDArray[np.int8]] = {}  # GRU / LSTM layers: each step's gates (forward's keep)
        self.sums = not nosums and not self.fold
        self.reverse = nosums and not o.momentum and sparse is not None
        self.lr = fl.param(self.opt.lr)
        idx = select(self.m, train)
        self.first = idx[0]
        rnn = (Op.GRU, Op.LSTM)
        self.layers = {j: (RefGru if self.m.layers[j].op in rnn else RefLayer)(self.m, j, fl) for j in idx}
        # frozen CONV2D / LINEAR layers inside the region back-propagate with their file weights
        self.frozen_ratios: dict[int, tuple[NDArray[np.int32], int, float]] = {}
        for j in range(self.first, len(self.m.layers)):
            ly = self.m.layers[j]
            if ly.op in mtm.WEIGHTED and j not in self.layers:
                p = ly.params
                terms = p[6] * p[7] * (p[5] // p[12]) if ly.op == Op.CONV2D else p[1]
                sw = self.m.data(self.m.tensors[ly.weight].qscales)  # type: ignore[index]
                wr, r = _weight_ratios(sw, terms, fl)
                self.frozen_ratios[j] = (wr, r, fl(_wide(sw).max()))
        trained = list(self.layers.values())
        if mode == "float32":
            for rl in trained:
                rl.make_master()
        elif mode == "mixed":
            trained[-1].make_master()
        self._resume()
        if self.fold:  # the momentum exists from the start: the gradients go into it
            for rl in trained:
                if rl.state is None:
                    rl.state = [np.zeros(len(rl.w), np.float32), np.zeros(rl.out_c, np.float32)]
        self.region = {ly.output for ly in self.m.layers[self.first:]}
        self.lut = softmax_lut(self.m.tensors[self.m.output].scale, fl)
        self.pending = 0
        self.opt_steps = 0
        self.bt = (np.float32(1.0), np.float32(1.0))
        if isinstance(self.opt, Adam) and self.m.adam_bt is not None:  # the trainer record's beta^t
            self.bt = tuple(np.array(self.m.adam_bt, dtype=np.uint32).view(np.float32))  # type: ignore[assignment]
        self.rng = 0xACE1  # device: the optimiser's xorshift16 state starts here (not in checkpoints)
        if continue_rng:
            draws = sum(len(rl.w) for rl in trained if self.opt.rounding == "stochastic"
                        or (self.opt.rounding == "auto" and rl.master_w is None))
            self.rng = _xorshift16(self.rng, (self.m.train_steps * draws) % 65535)[1]
        self.train_steps = self.m.train_steps
        # Trainer(seed=None): the shuffle continues a checkpoint's trainer record, else seed 1
        rec = self.m.trainer_rng
        self.shuffle_rng = rec if rec is not None else shuffle_state(1)
        self.epoch = self.m.trainer_epoch or 0  # epochs fit completed: the next one's shuffle and rate
        self.losses: list[float] = []
        # range adaptation (docs/training.md, "Health and range adaptation"): per trained layer,
        # its saturated-output count in the current update window and its chain
        self.adapt_ranges = adapt_ranges
        self.win = 0
        self.sat: dict[int, int] = {j: 0 for j in self.layers}
        self.chains: dict[int, tuple[list[int], list[int]] | None] = {
            j: self._chain(j) if adapt_ranges else None for j in self.layers}

    def _chain(self, j: int) -> tuple[list[int], list[int]] | None:
        """(tensors whose scale follows layer j's output, the trained layers reading them), or None
        when its range cannot adapt (device: health.chain)."""
        ly = self.m.layers[j]
        if ly.act not in (Act.NONE, Act.RELU):
            return None
        ts, cons = [ly.output], []
        i = 0
        while i < len(ts):
            t = ts[i]
            i += 1
            for k, c in enumerate(self.m.layers):
                if t not in c.inputs:
                    continue
                if c.op == Op.MAXPOOL:
                    ts.append(c.output)
                elif c.op in (Op.CONV2D, Op.LINEAR) and k in self.layers:
                    cons.append(k)
                else:
                    return None
        return ts, cons

    def _count(self, vals: dict[int, NDArray[np.int8]]) -> None:
        """Saturated outputs of each trained layer: 127 (unless relu6), and -128 without activation."""
        for j in self.layers:
            ly = self.m.layers[j]
            y = vals[ly.output]
            n = 0
            if ly.act != Act.RELU6:
                n += int(np.count_nonzero(y == 127))
            if ly.act == Act.NONE:
                n += int(np.count_nonzero(y == -128))
            self.sat[j] += n
        self.win += 1

    def _adapt(self) -> None:
        """After an update: double the output range of each layer with more than 1/64 of the
        window's outputs saturated (exact: shifts -1 / +1, consumers' biases floor(b / 2 + 1/2))."""
        if self.adapt_ranges and self.win:
            for j in sorted(self.layers):
                ch = self.chains[j]
                numel = int(np.prod(self.m.tensors[self.m.layers[j].output].shape))
                if ch is None or not self.sat[j] * 64 > self.win * numel:
                    continue
                ts, cons = ch
                rl = self.layers[j]
                tens = self.m.tensors
                if not tens[ts[0]].scale * 2.0 <= mtm.SCALE_MAX:
                    continue
                if (rl.shift <= -31).any() or any((self.layers[c].shift >= 31).any() for c in cons):
                    continue
                rl.shift = rl.shift - 1
                for c in cons:
                    rc = self.layers[c]
                    rc.shift = rc.shift + 1
                    rc.b = (rc.b + 1) >> 1
                for t in ts:
                    tens[t].scale = tens[t].scale * 2.0
                rl.s_out = self.fl(tens[ts[0]].scale)
                for c in cons:
                    rc = self.layers[c]
                    rc.s_in = self.fl(tens[self.m.layers[c].inputs[0]].scale)
                if self.m.output in ts:
                    self.lut = softmax_lut(tens[self.m.output].scale, self.fl)
        for j in self.sat:
            self.sat[j] = 0
        self.win = 0

    def _resume(self) -> None:
        t = self.m.tensors
        for rl in self.layers.values():
            st = self.m.layers[rl.index].state
            if st[0] is not None and rl.master_w is not None and st[1] is not None:
                rl.master_w = _f32(self.m.data(st[0])).reshape(-1).copy()
                rl.master_b = _f32(self.m.data(st[1])).reshape(-1).copy()
            if st[2] is not None and st[3] is not None and t[st[2]].kind == Kind.STATE:
                a = _f32(self.m.data(st[2])).reshape(-1).copy()
                b = _f32(self.m.data(st[3])).reshape(-1).copy()
                if isinstance(self.opt, SGD) and self.opt.momentum:
                    rl.state = [a, b]
                elif isinstance(self.opt, Adam):
                    # format 1.3 keeps Adam's second moments (state[4], state[5]); older files
                    # have the first moments only and the second moments restart at zero
                    va, vb = np.zeros_like(a), np.zeros_like(b)
                    if st[4] is not None and st[5] is not None:
                        va = _f32(self.m.data(st[4])).reshape(-1).copy()
                        vb = _f32(self.m.data(st[5])).reshape(-1).copy()
                    rl.state = [a, b, va, vb]
                if rl.state is not None and self.opt.state == "bf16":  # rounded as the device loads it
                    rl.state = [o.bf16_to_f32(o.f32_to_bf16(x)) for x in rl.state]

    # -- forward / backward --------------------------------------------------------------

    def _wbmsh(self, j: int) -> tuple[ArrayLike, ArrayLike, ArrayLike, ArrayLike]:
        rl = self.layers.get(j)
        if rl is not None:
            return rl.w, rl.b, rl.mult, rl.shift
        ly = self.m.layers[j]
        return (self.m.data(ly.weight).reshape(-1), self.m.data(ly.bias), self.m.data(ly.mult),
                self.m.data(ly.shift))

    def forward(self, x: ArrayLike, after: Callable[[int, NDArray[np.int8]], NDArray[np.int8]] | None = None
                ) -> dict[int, NDArray[np.int8]]:
        """Every activation of one int8 sample (NHWC), by tensor index. ``after(j, y)``, when
        given, replaces layer j's output y before the later layers read it."""
        xa = np.frombuffer(bytes(x), dtype=np.int8) if isinstance(x, (bytes, bytearray, memoryview)) \
            else np.asarray(x).reshape(-1)
        vals: dict[int, NDArray[np.int8]] = {self.m.input: xa.view(np.int8) if xa.dtype == np.uint8
                                             else xa.astype(np.int8)}
        for j, ly in enumerate(self.m.layers):
            xin = vals[ly.inputs[0]]
            p = ly.params
            if ly.op == Op.CONV2D:
                y = o.conv2d_s8_forward(p, xin, *self._wbmsh(j))
            elif ly.op == Op.LINEAR:
                y = o.linear_s8_forward(p, xin, *self._wbmsh(j))
            elif ly.op == Op.LUT:
                y = o.lut_s8_forward(xin, self.m.data(ly.weight))
            elif ly.op == Op.RELU:
                y = o.relu_s8_forward(xin, p[1])
            elif ly.op == Op.RELU6:
                y = o.relu6_s8_forward(xin, p[1], p[2])
            elif ly.op == Op.MAXPOOL:
                y = o.maxpool_s8_forward(p, xin)
            elif ly.op == Op.AVGPOOL:
                y = o.avgpool_s8_forward(p, xin)
            elif ly.op == Op.GLOBAL_AVGPOOL:
                y = o.global_avgpool_s8_forward(xin, p[0], p[1])
            elif ly.op == Op.ADD:
                y = o.add_s8_forward(p, xin, vals[ly.inputs[1]])
            elif ly.op == Op.CONCAT:
                y = o.concat_s8_forward(p, xin, vals[ly.inputs[1]])
            elif ly.op == Op.UPSAMPLE:
                y = o.upsample_s8_forward(p, xin)
            elif ly.op == Op.MUL:
                y = o.mul_s8_forward(p, xin, vals[ly.inputs[1]])
            elif ly.op == Op.LAYERNORM:
                y = o.layernorm_s8_forward(p, xin)
            elif ly.op == Op.MATMUL:  # the descriptor (with heads, if several), then the factor
                y = o.matmul_s8_forward(p[:-1], xin, vals[ly.inputs[1]])
            elif ly.op == Op.GRU:  # the steps' gates kept for backward (the kernel's keep)
                w, b, mu, sh = self._wbmsh(j)
                assert ly.aux is not None
                y, self.keep[j] = o.gru_s8_forward(p, xin, w, b, mu, sh, self.m.data(ly.aux)[:768])
            elif ly.op == Op.LSTM:  # the steps' gates and cells kept for backward (the kernel's keep)
                w, b, mu, sh = self._wbmsh(j)
                assert ly.aux is not None
                y, self.keep[j] = o.lstm_s8_forward(p, xin, w, b, mu, sh, self.m.data(ly.aux)[:1280])
            elif ly.op == Op.SOFTMAX:  # the exp table of the input's scale, as the device makes it
                y = o.softmax_s8_forward(p, xin, softmax_lut(self.m.tensors[ly.inputs[0]].scale, self.fl))
            else:
                raise ValueError(f"layer {ly.name}: unknown op {ly.op}")
            vals[ly.output] = y if after is None else after(j, y)
        return vals

    def loss(self, out: NDArray[np.int8], label: Any) -> tuple[float, NDArray[np.int8], float]:
        """(loss, int8 output error, its real scale) of the trainer's loss; ``label`` is its
        target (a class index for ``"xent"``)."""
        if self.loss_kind == "mse":
            return self._mse(out, label)
        if self.loss_kind == "bce":
            return self._bce(out, label)
        fl = self.fl
        label = int(label)
        err, sh, stats = o.softmax_xent_s8(out, label, self.lut)
        s_out = fl(self.m.tensors[self.m.output].scale)
        loss = s_out * (int(stats[2]) - int(out[label])) + fl.log(int(stats[1]) / fl.lit("65536.0"))
        return loss, err, fl.ldexp(1.0, sh - 15)

    def _pot_requant(self, d: list[float]) -> tuple[NDArray[np.int8], int]:
        """device: loss.pot_requant (docs/training.md, "Forward and loss")."""
        fl = self.fl
        m = fl.lit("0.0")
        for v in d:
            if abs(v) > m:
                m = abs(v)
        if m == 0.0:
            return np.zeros(len(d), dtype=np.int8), 0
        k = math.frexp(float(m))[1] - 7
        if fl.ldexp(m, -k) > 127.0:
            k += 1
        half = fl.lit("0.5")
        err = np.empty(len(d), dtype=np.int8)
        for i, v in enumerate(d):
            u = fl.ldexp(v, -k)
            err[i] = math.floor(u + half) if u >= 0.0 else -math.floor(half - u)
        return err, k

    def _target(self, target: ArrayLike, n: int, fn: str) -> tuple[NDArray[Any], bool]:
        """device: loss._int8_target: bytes / int8 / uint8 arrays are int8 targets (signed)."""
        if isinstance(target, (bytes, bytearray, memoryview)):
            return np.frombuffer(bytes(target), dtype=np.int8), True
        t = np.asarray(target).reshape(-1)
        if t.size != n:
            raise ValueError(f"{fn}: target has {t.size} values, the output has {n}")
        if t.dtype in (np.int8, np.uint8):
            return t.view(np.int8), True
        return t, False

    def _mse(self, out: NDArray[np.int8], target: ArrayLike) -> tuple[float, NDArray[np.int8], float]:
        fl = self.fl
        n = out.size
        t, int8 = self._target(target, n, "mse")
        ot = self.m.tensors[self.m.output]
        s, zp = fl(ot.scale), ot.zero_point
        q = out.astype(np.int64)
        if int8:
            dq = q - t.astype(np.int64)
            err, sh = o.dyn_requant(dq)
            ssq = int(np.sum(dq * dq))
            return s * s * ssq / n, err, fl.ldexp(fl.lit("2.0") * s / n, sh)
        d = []
        loss = fl.lit("0.0")
        for i in range(n):
            v = s * int(q[i] - zp) - fl(float(t[i]))
            d.append(v)
            loss += v * v
        err, k = self._pot_requant(d)
        return loss / n, err, fl.ldexp(fl.lit("2.0") / n, k)

    def _bce(self, out: NDArray[np.int8], target: ArrayLike) -> tuple[float, NDArray[np.int8], float]:
        fl = self.fl
        n = out.size
        t, int8 = self._target(target, n, "bce")
        ot = self.m.tensors[self.m.output]
        s, zp = fl(ot.scale), ot.zero_point
        one = fl.lit("1.0")
        d = []
        loss = fl.lit("0.0")
        for i in range(n):
            r = int(t[i]) if int8 else fl(float(t[i]))
            z = s * int(int(out[i]) - zp)
            if z >= 0.0:
                e = fl.exp(-z)
                p = one / (one + e)
                loss += z - r * z + fl.log(one + e)
            else:
                e = fl.exp(z)
                p = e / (one + e)
                loss += -r * z + fl.log(one + e)
            d.append(p - r)
        err, k = self._pot_requant(d)
        return loss / n, err, fl.ldexp(one / n, k)

    def backward(self, vals: dict[int, NDArray[np.int8]], err: NDArray[np.int8], err_scale: float) -> None:
        region = self.region
        fl = self.fl
        cur: dict[int, tuple[NDArray[np.int8], float]] = {self.m.output: (err, err_scale)}

        def arrive(t: int, e2: NDArray[np.int8], s2: float) -> None:
            if t not in cur:
                cur[t] = (e2, s2)
                return
            e1, s1 = cur[t]
            ra, rb = _merge_ratios(s1, s2, fl)
            out, sh = o.add_s8_grad_merge(e1, ra, e2, rb)
            cur[t] = (out, fl.ldexp(s1 if s1 > s2 else s2, sh - 15))

        for j in range(len(self.m.layers) - 1, self.first - 1, -1):
            ly = self.m.layers[j]
            if ly.output not in cur:
                continue
            e, s = cur.pop(ly.output)
            y = vals[ly.output]
            p = ly.params
            if ly.act == Act.RELU:
                e = o.relu_s8_backward(y, p[-2], e)
            elif ly.act == Act.RELU6:
                e = o.relu6_s8_backward(y, p[-2], p[-1], e)
            x_t = ly.inputs[0]
            need = x_t in region
            if ly.op in (Op.CONV2D, Op.LINEAR):
                conv = ly.op == Op.CONV2D
                mask = None
                rl = self.layers.get(j)
                if rl is not None:
                    if self.sparse is not None:
                        mask = self.sparse.mask(rl.name, e, rl.out_c, ly.output == self.m.output,
                                                *self._fl_arg)
                    s_x = fl(self.m.tensors[x_t].scale)
                    gw_fn = o.conv2d_s8_grad_weight_f32 if conv else o.linear_s8_grad_weight_f32
                    if self.fold:  # into the momentum, v = m v first once per batch; scales / batch
                        if j not in self._folded and not self.half:
                            self._scale_momentum(rl)
                        st = rl.state
                        assert st is not None
                        nb = fl(self.batch)  # the device's sw / n: an int operand is a platform float
                        if self.half:  # into +0 rows, then folded: v = bf16(ftz(a v) + g)
                            a = 1.0 if j in self._folded else _f(fl.param(self.opt.momentum))
                            self._folded.add(j)
                            tw, tb = gw_fn(p, vals[x_t], e, mask, (s_x * s) / nb, s / nb,
                                           np.zeros(len(st[0]), np.float32), np.zeros(len(st[1]), np.float32))
                            fold_bf16(tw, st, 0, rl.k, mask, a)
                            fold_bf16(tb, st, 1, 1, mask, a)
                        else:
                            st[0], st[1] = gw_fn(p, vals[x_t], e, mask, (s_x * s) / nb, s / nb, st[0], st[1])
                    else:
                        rl.gw, rl.gb = gw_fn(p, vals[x_t], e, mask, s_x * s, s, rl.gw, rl.gb)
                    if self.sparse is not None:  # the device ORs every sample's mask (all: no mask)
                        hit = np.ones(rl.out_c, bool) if mask is None else mask.astype(bool)
                        rl.touched = hit if rl.touched is None else (rl.touched | hit)
                if need:
                    if rl is not None:
                        wr, r, top = rl.wr, rl.r, rl.top
                    else:
                        wr, r, top = self.frozen_ratios[j]
                    w = self._wbmsh(j)[0]
                    gi = o.conv2d_s8_grad_input if conv else o.linear_s8_grad_input
                    ein, sh, _ = gi(p, e, w, wr, mask)
                    arrive(x_t, ein, fl.ldexp(s * top, sh - r))
            elif ly.op in (Op.GRU, Op.LSTM):
                self._gru_backward(j, vals, e, s, need, arrive)
            elif not need:
                pass
            elif ly.op == Op.LUT:  # from the stored input, base scale s * 2^-d_shift
                ein, sh = o.lut_s8_grad_input(vals[x_t], e, self.m.data(ly.bias))
                arrive(x_t, ein, fl.ldexp(s, sh - p[3]))
            elif ly.op == Op.RELU:
                arrive(x_t, o.relu_s8_backward(y, p[1], e), s)
            elif ly.op == Op.RELU6:
                arrive(x_t, o.relu6_s8_backward(y, p[1], p[2], e), s)
            elif ly.op == Op.MAXPOOL:
                ein, sh, _ = o.maxpool_s8_grad_input(p, vals[x_t], e)
                arrive(x_t, ein, fl.ldexp(s, sh))
            elif ly.op == Op.AVGPOOL:
                ein, sh, _ = o.avgpool_s8_grad_input(p, e)
                arrive(x_t, ein, fl.ldexp(s, sh - 16))
            elif ly.op == Op.GLOBAL_AVGPOOL:
                arrive(x_t, o.global_avgpool_s8_grad_input(e, p[0]), s / p[0])
            elif ly.op == Op.UPSAMPLE:  # the sum of the errors each input fed, base scale s
                ein, sh = o.upsample_s8_grad_input(p, e)
                arrive(x_t, ein, fl.ldexp(s, sh))
            elif ly.op == Op.LAYERNORM:  # from the stored input, base scale s / (s_x * 2^8)
                ein, sh = o.layernorm_s8_grad_input(p, vals[x_t], e)
                arrive(x_t, ein, fl.ldexp(s / fl(self.m.tensors[x_t].scale), sh - 8))
            elif ly.op == Op.SOFTMAX:  # from the stored output, base scale s / 2^16
                ein, sh = o.softmax_s8_grad_input(p, y, e)
                arrive(x_t, ein, fl.ldexp(s, sh - 16))
            if ly.op == Op.CONCAT:  # each input its slice, exact, same scale (part 0 first)
                for part, t in enumerate(ly.inputs):
                    if t in region:
                        arrive(t, o.concat_s8_grad_input(p, e, part), s)
            if ly.op == Op.ADD:
                for t in ly.inputs:
                    if t in region:
                        arrive(t, e.copy(), s)
            if ly.op == Op.MATMUL:  # b's error first, then a's; each base scale times the factor
                ta, tb = ly.inputs
                f = fl(float(np.array([p[-1]], np.int32).view(np.float32)[0]))
                if tb in region:
                    ein, sh, _ = o.matmul_s8_grad_b(p[:-1], e, vals[ta])
                    arrive(tb, ein, fl.ldexp(s * fl(self.m.tensors[ta].scale) * f, sh))
                if ta in region:
                    ein, sh, _ = o.matmul_s8_grad_a(p[:-1], e, vals[tb])
                    arrive(ta, ein, fl.ldexp(s * fl(self.m.tensors[tb].scale) * f, sh))
            if ly.op == Op.MUL:  # x2's error first (summed where broadcast), then x1's
                t1, t2 = ly.inputs
                if t2 in region:
                    ein, sh, _ = o.mul_s8_grad_x2(p, e, vals[t1])
                    arrive(t2, ein, fl.ldexp(s * fl(self.m.tensors[t1].scale), sh))
                if t1 in region:
                    ein, sh = o.mul_s8_grad_x1(p, e, vals[t2])
                    arrive(t1, ein, fl.ldexp(s * fl(self.m.tensors[t2].scale), sh))

    def _scale_momentum(self, rl: RefLayer) -> None:
        """v = ftz(m v) (float32, update_f32_scale) of a folding layer, once per batch."""
        assert rl.state is not None
        m = _f(self.fl.param(self.opt.momentum))
        rl.state = [o.ftz((a * m).astype(np.float32)) for a in rl.state]
        self._folded.add(rl.index)

    # -- the public steps ----------------------------------------------------------------

    def _gru_backward(self, j: int, vals: dict[int, NDArray[np.int8]], e: NDArray[np.int8], s: float,
                      need: bool, arrive: Callable[[int, NDArray[np.int8], float], None]) -> None:
        """microtrain.gru: BPTT (gru_s8_backward, lstm_s8_backward) with the layer's current
        descriptor, the weight gradient into the sums a row at a time (x part at s_x, h part at s_h,
        on 2^A), the input's error."""
        fl, ly = self.fl, self.m.layers[j]
        rl = self.layers.get(j)
        lstm = ly.op == Op.LSTM
        if not isinstance(rl, RefGru):
            if need:
                raise ValueError(f"a frozen {'LSTM' if lstm else 'GRU'} layer ({ly.name}) passes no error")
            return
        x_t = ly.inputs[0]
        assert ly.aux is not None
        dtanh = np.frombuffer(self.m.data(ly.aux).astype(np.int8).tobytes()[1280 if lstm else 768:], "<i4")
        bptt = o.lstm_s8_backward if lstm else o.gru_s8_backward
        sh, _, shifts, _, gwi, gbi, ein = bptt(rl.params, vals[x_t], rl.w, rl.wr, dtanh, vals[ly.output],
                                               self.keep[j], e)
        a = int(shifts.max())
        u = fl.ldexp(s, a - 8)
        ax, ah = fl(self.m.tensors[x_t].scale) * u, fl(self.m.tensors[ly.output].scale) * u
        d_n = ly.params[1]
        gw, g = rl.gw.reshape(rl.out_c, rl.k).copy(), gwi.reshape(rl.out_c, rl.k)
        for i in range(rl.out_c):
            gw[i, :d_n] = o.f32_axpy_i32(g[i, :d_n], ax, gw[i, :d_n])
            gw[i, d_n:] = o.f32_axpy_i32(g[i, d_n:], ah, gw[i, d_n:])
        rl.gw = gw.reshape(-1)
        rl.gb = o.f32_axpy_i32(gbi, u, rl.gb)
        if need:
            arrive(x_t, ein, fl.ldexp(s * rl.top, a + sh - 8 - rl.r))

    def step(self, x: ArrayLike, label: Any) -> float:
        """One sample: forward, loss, policy, backward; an update every ``batch`` samples."""
        return float(self._step(x, label))

    def _step(self, x: ArrayLike, label: Any) -> float:
        """``step`` returning the loss as a platform float."""
        vals = self.forward(x)
        self._count(vals)
        loss, err, s = self.loss(vals[self.m.output], label)
        self.losses.append(float(loss))
        if self.sparse is not None:
            self.sparse.observe(loss, *self._fl_arg)
        self.backward(vals, err, s)
        self.pending += 1
        if self.pending >= self.batch:
            self.flush()
        return loss

    def flush(self) -> None:
        """Apply the gradients of the samples since the last update."""
        if self.pending:
            self.opt_steps += 1
            if isinstance(self.opt, Adam):  # beta^t as running float32 products
                self.bt = (self.bt[0] * _f(self.fl.param(self.opt.beta1)),
                           self.bt[1] * _f(self.fl.param(self.opt.beta2)))
            for j in sorted(self.layers, reverse=self.reverse):
                a = 1.0
                if self.fold and j not in self._folded:  # no gradient reached it: v = m v + 0
                    if self.half:  # (in the widening: d = ftz(m v) + 0)
                        a = _f(self.fl.param(self.opt.momentum))
                    else:
                        self._scale_momentum(self.layers[j])
                rl = self.layers[j]
                if isinstance(rl, RefGru):
                    self.rng = _update_gru(self.opt, rl, self.lr, self.pending, self.bt, self.rng, self.fl)
                else:
                    self.rng = _update(self.opt, rl, self.lr, self.pending, self.bt, self.rng, self.fl,
                                       self.fold, a)
            self._folded.clear()
            self.train_steps += 1
            self.pending = 0
            self._adapt()

    def fit(self, xs: Sequence[ArrayLike], ys: Sequence[Any], epochs: int = 1, shuffle: bool = True,
            seed: int | None = None, schedule: str | Schedule | None = None,
            progress: bool = False, total: int | None = None) -> list[float]:
        """``Trainer.fit``: per-epoch mean loss, for the epochs after the ``epoch`` already done.
        ``schedule``: see ``schedule_lr`` (the named schedules are the device's, bit for bit; a
        callable is evaluated in double), over ``total`` epochs (default: the epochs done after
        this call). ``seed``: the device's ``Trainer(seed=...)``; None continues the shuffle
        sequence (a checkpoint's)."""
        from tqdm import tqdm

        fl = self.fl
        n = len(ys)
        if seed is not None:
            self.shuffle_rng = shuffle_state(seed)
        e0 = self.epoch
        horizon = e0 + epochs if total is None else total
        means = []
        for ep in range(e0, e0 + epochs):
            self.lr = schedule_lr(schedule, self.opt.lr, ep, horizon, fl)
            order = shuffle_epoch(self.shuffle_rng, ep, n) if shuffle else range(n)
            total_loss = fl.lit("0.0")
            for i in tqdm(order, desc=f"epoch {ep + 1}/{horizon}", disable=not progress, leave=False):
                total_loss += self._step(xs[i], ys[i])
            self.flush()
            means.append(float(total_loss / max(1, n)))
            self.epoch = ep + 1
        return means

    # -- results -------------------------------------------------------------------------

    def arrays(self) -> dict[str, NDArray]:
        """Trained state by the names of tests/mp/train_runner.py: ``L<i>.w`` (int8), ``.b``,
        ``.mult``, ``.shift`` (int32), ``.w_scale``, ``.gw``, ``.gb`` (where the device keeps
        gradient sums: ``sums``), ``.master_w``, ``.master_b``, ``.st0``.. (float32)."""
        out: dict[str, NDArray] = {}
        for j, rl in sorted(self.layers.items()):
            p = f"L{j}."
            out[p + "w"] = rl.w.astype(np.int8)
            out[p + "b"] = rl.b.astype(np.int32)
            out[p + "mult"] = rl.mult.astype(np.int32)
            out[p + "shift"] = rl.shift.astype(np.int32)
            out[p + "w_scale"] = rl.w_scale.astype(np.float32)
            if self.sums:
                out[p + "gw"] = rl.gw.astype(np.float32)
                out[p + "gb"] = rl.gb.astype(np.float32)
            if rl.master_w is not None and rl.master_b is not None:
                out[p + "master_w"] = rl.master_w
                out[p + "master_b"] = rl.master_b
            for k, a in enumerate(rl.state or []):
                out[p + f"st{k}"] = a
        return out

    def checkpoint(self, state: bool = True) -> mtm.Model:
        """The checkpoint the device writes (``trainer.save``; ``state=False``: ``model.save``)."""
        m = copy.deepcopy(self.m)
        keep = [i for i, t in enumerate(m.tensors) if t.kind != Kind.STATE]
        remap = {old: new for new, old in enumerate(keep)}
        tensors = [m.tensors[i] for i in keep]
        for t in tensors:
            if t.qscales is not None:
                t.qscales = remap[t.qscales]

        def rm(v: int | None) -> int | None:
            return None if v is None else remap[v]

        new_state: list[tuple[int, int, F32, tuple[int, ...]]] = []
        for j, ly in enumerate(m.layers):
            ly.inputs = [remap[i] for i in ly.inputs]
            ly.output = remap[ly.output]
            ly.weight, ly.bias, ly.mult, ly.shift = rm(ly.weight), rm(ly.bias), rm(ly.mult), rm(ly.shift)
            ly.state = [None] * 6
            rl = self.layers.get(j)
            if rl is None:
                continue
            ly.trained = True
            assert ly.weight is not None and ly.bias is not None and ly.mult is not None
            assert ly.shift is not None
            wt = tensors[ly.weight]
            assert wt.qscales is not None
            wt.data = rl.w.reshape(wt.shape).astype(np.int8)
            tensors[ly.bias].data = rl.b.astype(np.int32)
            tensors[ly.mult].data = rl.mult.astype(np.int32)
            tensors[ly.shift].data = rl.shift.astype(np.int32)
            tensors[wt.qscales].data = rl.w_scale.astype(np.float32)
            if state:
                slots: list[F32 | None] = [rl.master_w, rl.master_b, None, None, None, None]
                if rl.state is not None:
                    slots[2:2 + len(rl.state)] = rl.state  # SGD momentum, or Adam's m and v
                for k, a in enumerate(slots):
                    if a is not None:
                        shape = wt.shape if k % 2 == 0 else tensors[ly.bias].shape
                        new_state.append((j, k, a, shape))
        for j, k, a, shape in new_state:
            tensors.append(mtm.Tensor(mtm.DType.FLOAT32, shape, Kind.STATE, data=a.reshape(shape)))
            m.layers[j].state[k] = len(tensors) - 1
        m.tensors = tensors
        m.input, m.output = remap[m.input], remap[m.output]
        m.trained, m.has_state, m.train_steps = True, bool(new_state), self.train_steps
        m.trainer_rng = self.shuffle_rng if state else None  # trainer.save writes it, model.save not
        m.trainer_epoch = self.epoch if state else None
        m.adam_bt = None
        if state and isinstance(self.opt, Adam):
            m.adam_bt = tuple(int(v) for v in np.array(self.bt, dtype=np.float32).view(np.uint32))  # type: ignore[assignment]
        return m


# --------------------------------------------------------------------------
# command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m microtrain_tools.reference.train_ref",
        description="Train a .mtm model on the host exactly as the device would (numpy reference of "
                    "docs/training.md) and write the checkpoint the device's trainer.save would write.",
        epilog="example: python -m microtrain_tools.reference.train_ref model.mtm data.npz --train last:2 "
               "--mode mixed --lr 0.05 --momentum 0.9 --batch 8 --epochs 2 -o trained.mtm")
    p.add_argument("model", help="input .mtm (converted model or checkpoint)")
    p.add_argument("data", help=".npz with 'x' (N, input numel) int8 NHWC samples and 'y' (N,) labels")
    p.add_argument("-o", "--output", required=True, help="checkpoint to write")
    p.add_argument("--train", default="last:1", help="'last:N', 'all' or comma-separated layer names")
    p.add_argument("--mode", default="int8", choices=MODES)
    p.add_argument("--optimizer", default="sgd", choices=("sgd", "adam"))
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--standardize", action="store_true")
    p.add_argument("--rounding", default="auto", choices=("auto", "nearest", "stochastic"),
                   help="weight requantisation rounding (auto: stochastic for layers without a master copy)")
    p.add_argument("--sparse", default=None, help="'dynamic:LMIN:LMAX' or 'static:RATIO'")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--no-shuffle", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--adapt-ranges", action="store_true",
                   help="Trainer(adapt_ranges=True): double saturated trained layers' output ranges")
    p.add_argument("--floats", default="double", choices=FLOATS,
                   help="Python floats of the MicroPython reproduced: double (host unix port) or float32 "
                        "(single-precision boards, the float32 host twin)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        m = mtm.load(args.model)
        data = np.load(args.data)
        xs, ys = np.asarray(data["x"]).astype(np.int8), np.asarray(data["y"]).astype(np.int64)
        opt: SGD | Adam = (SGD(args.lr, args.momentum, args.weight_decay, args.standardize, args.rounding)
                           if args.optimizer == "sgd" else Adam(args.lr, weight_decay=args.weight_decay,
                                                                standardize=args.standardize,
                                                                rounding=args.rounding))
        sparse: Policy | None = None
        if args.sparse:
            kind, *vals = args.sparse.split(":")
            sparse = DynamicSparse(float(vals[0]), float(vals[1])) if kind == "dynamic" \
                else StaticSparse(float(vals[0]))
        spec: str | list[str | int] = args.train if args.train == "all" or args.train.startswith("last:") \
            else list(args.train.split(","))
        ref = RefTrainer(m, spec, args.mode, opt, sparse, args.batch, floats=args.floats,
                         adapt_ranges=args.adapt_ranges)
        means = ref.fit(list(xs), list(ys), args.epochs, shuffle=not args.no_shuffle, seed=args.seed,
                        progress=True)
        mtm.save(ref.checkpoint(), Path(args.output))
    except (OSError, ValueError, KeyError) as e:
        print(f"train_ref: error: {e}", file=sys.stderr)
        return 2
    for ep, v in enumerate(means):
        print(f"epoch {ep + 1}: mean loss {v:.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
