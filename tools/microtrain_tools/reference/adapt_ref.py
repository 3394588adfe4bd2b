"""References for the adaptation methods of docs/adapt.md, written from that page.

- :class:`ProtoRef`: the prototype (nearest-class-mean) head on int8 embeddings, with
  numpy vectors (the device uses a kernel matrix-vector product; same integers).
- :class:`ReplayRef`: the replay buffer's sampling decisions and the mixed-in steps,
  on top of :class:`train_ref.RefTrainer` (a replayed sample is stepped from its
  input: the frozen prefix gives the same stored features).
- :class:`ZORef`: the int8 SPSA step (zeroth-order training) with the oracle's forward
  and the training reference's loss.
- :func:`xorshift32`: the generator both sides draw from.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from microtrain_tools import mtm
from microtrain_tools.mtm import Act, Op
from microtrain_tools.reference import oracle
from microtrain_tools.reference import train_ref as tr

__all__ = ["ProtoRef", "ReplayRef", "ZORef", "embed", "xorshift32", "seed_state"]

M32 = 0xFFFFFFFF


def xorshift32(r: int) -> int:
    """One step of the 13/17/5 xorshift32 generator (the Trainer's shuffle generator)."""
    r ^= (r << 13) & M32
    r ^= r >> 17
    r ^= (r << 5) & M32
    return r


def seed_state(seed: int) -> int:
    """The generator state of an integer seed (as Trainer(seed=...))."""
    return (seed * 2654435761 + 12345) & M32 or 1


def embed(m: mtm.Model, x: ArrayLike, layer: str) -> NDArray[np.int8]:
    """The int8 output of ``layer`` for one int8 input, by the numpy oracle."""
    ref = tr.RefTrainer(m, "last:1")
    vals = ref.forward(np.asarray(x, dtype=np.int8))
    j = [ly.name for ly in m.layers].index(layer)
    return vals[m.layers[j].output]


class ProtoRef:
    """The prototype head on int8 embeddings of zero point ``zp``."""

    def __init__(self, zp: int, metric: str = "cosine", dtype: str = "int8") -> None:
        self.zp, self.metric, self.dtype = zp, metric, dtype
        self.names: list[str] = []
        self.sums: list[NDArray[np.int64]] = []
        self.counts: list[int] = []

    def add_class(self, name: str, emb: NDArray[np.int8]) -> None:
        """Add (or extend) a class from a (k, dim) array of its embeddings."""
        s = emb.astype(np.int64).sum(axis=0)
        if name in self.names:
            c = self.names.index(name)
            self.sums[c] = self.sums[c] + s
            self.counts[c] += len(emb)
        else:
            self.names.append(name)
            self.sums.append(s)
            self.counts.append(len(emb))

    def _vector(self, c: int) -> tuple[NDArray[np.int64], int]:
        """(v, k): the prototype is v / k, in int8 units."""
        s, n = self.sums[c], self.counts[c]
        if self.dtype == "int8":
            return (2 * s + n) // (2 * n), 1
        return s, n

    def scores(self, e: NDArray[np.int8]) -> list[float]:
        x = e.astype(np.int64) - self.zp
        out = []
        for c in range(len(self.names)):
            v, k = self._vector(c)
            p = v - k * self.zp  # k * (prototype - zp)
            num = int(np.dot(x, p))
            rr = int(np.dot(p, p))
            if self.metric == "cosine":
                out.append(num / math.sqrt(rr) if rr else 0.0)
            else:
                out.append(float(2 * num * k - rr) / float(k * k))
        return out

    def predict(self, e: NDArray[np.int8]) -> str:
        sc = self.scores(e)
        return self.names[int(np.argmax(sc))]  # the first maximum, as the device


class ReplayRef:
    """The replay buffer (docs/adapt.md, "Replay") over sample indices: ``xs[i]`` is the
    stored sample's input. ``step`` is Trainer.step with Trainer(replay=Replay(...))."""

    def __init__(self, capacity: int, policy: str = "reservoir", k: int = 1, seed: int = 1) -> None:
        self.capacity, self.policy, self.k = capacity, policy, k
        self.rng = seed_state(seed)
        self.items: list[tuple[ArrayLike, int]] = []
        self.seen = 0

    def _draw(self, n: int) -> int:
        self.rng = xorshift32(self.rng)
        return self.rng % n

    def add(self, x: ArrayLike, y: int) -> None:
        self.seen += 1
        if len(self.items) < self.capacity:
            self.items.append((x, y))
            return
        if self.policy == "reservoir":
            j = self._draw(self.seen)
            if j < self.capacity:
                self.items[j] = (x, y)
            return
        counts: dict[int, int] = {}
        for _, c in self.items:
            counts[c] = counts.get(c, 0) + 1
        big = max(counts.values())
        if counts.get(y, 0) < big:
            # evict from the largest class (the first one in label order on a tie)
            victim = min(c for c, v in counts.items() if v == big)
            slots = [i for i, (_, c) in enumerate(self.items) if c == victim]
        else:
            slots = [i for i, (_, c) in enumerate(self.items) if c == y]
        self.items[slots[self._draw(len(slots))]] = (x, y)

    def step(self, t: tr.RefTrainer, x: ArrayLike, y: int) -> float:
        loss = t.step(x, y)
        had = len(self.items)
        self.add(x, y)
        if had:
            for _ in range(self.k):
                rx, ry = self.items[self._draw(len(self.items))]
                t.step(rx, ry)
        return loss


class ZORef:
    """Zeroth-order training (docs/adapt.md, "Forward-only training"): int8 SPSA on the
    weights of ``zo`` layers, backprop (``RefTrainer``) on the ``bp`` ones."""

    def __init__(self, m: mtm.Model, zo: Sequence[int], bp: Sequence[int] | None, lr: float, eps: int = 1,
                 seed: int = 1, opt: tr.SGD | tr.Adam | None = None, mode: str = "int8",
                 queries: int = 1) -> None:
        self.t = t = tr.RefTrainer(m, list(bp) if bp else list(zo), mode if bp else "int8",
                                   opt or tr.SGD(lr=0.0), batch=1 << 30)
        self.zo, self.bp = list(zo), list(bp or [])
        # the zeroth-order layers' int8 weights, read by the forward in place of the file's
        self.w = {j: t.m.data(t.m.layers[j].weight).reshape(-1).astype(np.int8).copy() for j in self.zo}
        orig = t._wbmsh

        def wbmsh(j: int) -> tuple[ArrayLike, ArrayLike, ArrayLike, ArrayLike]:
            wb = orig(j)
            return (self.w[j], *wb[1:]) if j in self.w else wb

        t._wbmsh = wbmsh  # type: ignore[method-assign]
        self.lr, self.eps, self.queries = lr, eps, queries
        self.rng = seed_state(seed)

    def _loss(self, xs: Sequence[ArrayLike], ys: Sequence[int], backward: bool) -> float:
        t = self.t
        total = 0.0
        for x, y in zip(xs, ys, strict=True):
            vals = t.forward(x)
            loss, err, s = t.loss(vals[t.m.output], int(y))
            total += loss
            if backward:  # Trainer.step of the backprop layers; applied after both passes
                t.backward(vals, err, s)
                t.pending += 1
        return total / len(ys)

    def step(self, xs: Sequence[ArrayLike], ys: Sequence[int]) -> tuple[float, float]:
        """``queries`` SPSA updates on the batch; the mean (L+, L-)."""
        sp = sm = 0.0
        for _ in range(self.queries):
            lp, lm = self._query(xs, ys)
            sp += lp
            sm += lm
        return sp / self.queries, sm / self.queries

    def _query(self, xs: Sequence[ArrayLike], ys: Sequence[int]) -> tuple[float, float]:
        t = self.t
        layers = [self.w[j] for j in self.zo]
        base = [w.copy() for w in layers]
        r0 = self.rng
        e = self.eps
        st = np.array([r0], dtype=np.uint32)
        for rl, b in zip(layers, base, strict=True):
            rl[:], st = oracle.zo_perturb_s8(b, e, st)
        lp = self._loss(xs, ys, bool(self.bp))
        st = np.array([r0], dtype=np.uint32)
        for rl, b in zip(layers, base, strict=True):
            rl[:], st = oracle.zo_perturb_s8(b, -e, st)
        lm = self._loss(xs, ys, bool(self.bp))
        delta = self.lr * (lp - lm) / (2 * e)  # weight quanta along -z
        mag = min(abs(delta), 255.0)  # 255 quanta saturate any int8 weight
        q = int(mag * 65536.0)
        st2 = np.array([r0, int(st[0])], dtype=np.uint32)
        for rl, b in zip(layers, base, strict=True):
            rl[:], st2 = oracle.zo_update_s8(b, -q if delta < 0 else q, st2)
        self.rng = int(st2[1])
        if self.bp:
            t.flush()
        return lp, lm

    def arrays(self) -> dict[str, Any]:
        """The trained state: ``L<i>.w`` of the zeroth-order layers, and the reference
        trainer's arrays of the backprop ones."""
        out = {f"L{j}.w": w for j, w in self.w.items()}
        if self.bp:
            out.update(self.t.arrays())
        return out


class ZOOutRef:
    """Activity perturbation (microtrain.zo, perturb="outputs"; docs/adapt.md): per sample, the
    outputs of the ``zo`` layers moved by +-eps along ``queries`` Hadamard rows times the sample's
    signs, the estimate (1 / q) sum_k (L+ - L-) / (2 eps) h_k z as int8 per layer, masked by the
    fused activation, into each layer's float32 gradient sums; ``RefTrainer``'s optimiser applies
    them per batch. Floats as the device's: c in float32 storage (so are the transform's sums),
    the rest in the platform's floats (``fl``)."""

    def __init__(self, m: mtm.Model, zo: Sequence[int], eps: int, seed: int, opt: tr.SGD | tr.Adam,
                 mode: str = "int8", queries: int | None = None) -> None:
        self.t = tr.RefTrainer(m, list(zo), mode, opt, batch=1 << 30)
        self.zo = list(zo)
        self.eps = eps
        self.rng = seed_state(seed)
        self.off: dict[int, int] = {}
        d = 0
        for j in self.zo:
            self.off[j] = d
            d += int(np.prod(m.tensors[m.layers[j].output].shape))
        self.rows = 1
        while self.rows < d:
            self.rows <<= 1
        self.q = queries or self.rows

    def _pass(self, x: ArrayLike, y: int, eps: int, k: int, r0: int) -> tuple[float, int]:
        """The loss with the outputs moved along row k (signs from r0), and the state after."""
        st = np.array([r0], dtype=np.uint32)

        def after(j: int, out: NDArray[np.int8]) -> NDArray[np.int8]:
            nonlocal st
            if j not in self.off:
                return out
            w, st = oracle.zo_perturb_h_s8(out, eps, st, k, self.off[j])
            return w

        t = self.t
        return t.loss(t.forward(x, after)[t.m.output], int(y))[0], int(st[0])

    def _sample(self, x: ArrayLike, y: int) -> tuple[float, float]:
        t, e, q, fl = self.t, self.eps, self.q, self.t.fl
        vals = t.forward(x)
        r0, r1 = self.rng, self.rng
        c = np.zeros(self.rows, dtype=np.float32)
        sp = sm = 0.0
        for k in range(q):
            lp, r1 = self._pass(x, y, e, k, r0)
            lm, r1 = self._pass(x, y, -e, k, r0)
            sp, sm = fl(sp + lp), fl(sm + lm)
            c[k] = np.float32(fl(lp - lm) / (2 * e))
        self.rng = r1
        h = 1
        while h < self.rows:  # the fast Walsh-Hadamard transform, float32 results
            for a in range(0, self.rows, 2 * h):
                u, v = c[a:a + h].copy(), c[a + h:a + 2 * h].copy()
                c[a:a + h], c[a + h:a + 2 * h] = u + v, u - v
            h <<= 1
        st = np.array([r0], dtype=np.uint32)
        for j in self.zo:
            ly = t.m.layers[j]
            o, n = self.off[j], int(np.prod(t.m.tensors[ly.output].shape))
            z, st = oracle.zo_perturb_h_s8(np.zeros(n, dtype=np.int8), 1, st, 0, o)
            cj = [fl(v) for v in c[o:o + n]]
            amax = max(abs(v) for v in cj)
            if amax == 0.0:
                continue
            f = fl.lit("127.0") / amax
            half = fl.lit("0.5")
            ev = np.array([int(v * f + (half if v > 0 else -half)) for v in cj], dtype=np.int64)
            err = (ev * z.astype(np.int64)).astype(np.int8)
            yv, p = vals[ly.output], ly.params
            if ly.act == Act.RELU:
                err = oracle.relu_s8_backward(yv, p[-2], err)
            elif ly.act == Act.RELU6:
                err = oracle.relu6_s8_backward(yv, p[-2], p[-1], err)
            s = amax / (fl.lit("127.0") * q * fl(t.m.tensors[ly.output].scale))
            x_t = ly.inputs[0]
            conv = ly.op == Op.CONV2D
            gw_fn = oracle.conv2d_s8_grad_weight_f32 if conv else oracle.linear_s8_grad_weight_f32
            rl = t.layers[j]
            rl.gw, rl.gb = gw_fn(p, vals[x_t], err, None, fl(t.m.tensors[x_t].scale) * s, s, rl.gw, rl.gb)
        t.pending += 1
        return sp, sm

    def step(self, xs: Sequence[ArrayLike], ys: Sequence[int]) -> tuple[float, float]:
        """One batch: every sample's estimate, then the update; the mean (L+, L-) per row."""
        fl = self.t.fl
        sp = sm = 0.0
        for x, y in zip(xs, ys, strict=True):
            a, b = self._sample(x, y)
            sp, sm = fl(sp + a), fl(sm + b)
        self.t.flush()
        n = len(ys) * self.q
        return sp / n, sm / n

    def arrays(self) -> dict[str, Any]:
        """The reference trainer's arrays (the trained layers' w, b, mult, shift, ...)."""
        return self.t.arrays()
