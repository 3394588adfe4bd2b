# Forward-only (zeroth-order) training: SPSA on the int8 weights, with the
# perturbation regenerated from a seeded generator instead of stored, and the
# hybrid (ElasticZO: zeroth-order body, backprop head). docs/adapt.md,
# "Forward-only training". Imported on use (mt.ZO).
#
# The passes over the weights are Python loops: one per pass, three per step
# (+eps, -eps, update). That is the method's cost on a board whose RAM cannot
# hold the gradient sums backward needs.
import array
import math

from microtrain.loss import LOSSES, argmax

M32 = 0xFFFFFFFF


def _xs(r):
    r ^= (r << 13) & M32
    r ^= r >> 17
    r ^= (r << 5) & M32
    return r


def _perturb(w, b, r, e):
    """w[i] = clamp(b[i] + e * z[i], -127, 127), z[i] = +1 / -1 from bit i of the
    draws of r (32 per draw, low bit first; a set bit is -1). Returns r after."""
    bits = 0
    for i in range(len(w)):
        if not i & 31:
            r = _xs(r)
            bits = r
        v = b[i] - e if bits & 1 else b[i] + e
        bits >>= 1
        w[i] = 127 if v > 127 else (-127 if v < -127 else v)
    return r


def _update(w, b, r, rz, whole, thr, neg):
    """w[i] = clamp(b[i] - sign(delta) * u[i] * z[i]); u[i] = whole + 1 when the low
    16 bits of the next draw of r are < thr (stochastic rounding of |delta|).
    z comes from rz as in _perturb. Returns (r, rz) after."""
    bits = 0
    for i in range(len(w)):
        if not i & 31:
            rz = _xs(rz)
            bits = rz
        r = _xs(r)
        u = whole + 1 if (r & 0xFFFF) < thr else whole
        if (bits & 1) == neg:  # -sign(delta) * z = -1
            u = -u
        bits >>= 1
        v = b[i] + u
        w[i] = 127 if v > 127 else (-127 if v < -127 else v)
    return r, rz


class ZO:
    """SPSA training of the int8 weights of the layers `train` ("last:N", names ...).

    lr:    step size in weight quanta per unit of the gradient estimate.
    eps:   perturbation in weight quanta (int >= 1).
    bp:    layers (a subset of `train`, after all the others) trained by backprop
           instead: the hybrid. optimizer / mode are theirs (as Trainer's).
    seed:  the xorshift32 generator of the perturbations and of the rounding.
    """

    def __init__(self, model, train="last:2", lr=50.0, eps=2, bp=None, optimizer=None, mode="int8", seed=1,
                 loss="xent"):
        if type(eps) is not int or not 1 <= eps <= 127:
            raise ValueError("ZO: eps must be an int 1..127 (weight quanta), got %r" % (eps,))
        if type(lr) not in (int, float) or not lr >= 0:
            raise ValueError("ZO: lr must be a number >= 0, got %r" % (lr,))
        idx = model.select(train)
        bpi = model.select(bp) if bp is not None else []
        for j in bpi:
            if j not in idx:
                raise ValueError("ZO: bp layer %d is not in train" % j)
        zo = [j for j in idx if j not in bpi]
        if not zo:
            raise ValueError("ZO: no layer left for the zeroth-order part")
        if bpi and bpi[0] < zo[-1]:
            raise ValueError("ZO: the bp layers must come after the zeroth-order ones")
        self.model = model
        self.lr = lr
        self.eps = eps
        self.loss_fn = LOSSES[loss]
        self.rng = (seed * 2654435761 + 12345) & M32 or 1
        self.layers = [model.layers[j] for j in zo]
        for ly in self.layers:  # private copies of the int8 weights only: no gradient sums
            if ly.trained:
                raise ValueError("ZO: layer %s is trained by backprop already" % ly.name)
            if not isinstance(ly.w, array.array):
                ly.w = array.array("b", ly.w)
                model.tensors[ly.weight_t].data = ly.w
            ly.modified = True
        model.rebind()
        self._base = [array.array("b", bytes(len(ly.w))) for ly in self.layers]
        self.trainer = None
        if bpi:
            from microtrain.trainer import Trainer

            self.trainer = Trainer(model, train=bpi, mode=mode, optimizer=optimizer, batch=1 << 30, loss=loss)
        self.steps = 0
        self.last = (0.0, 0.0)

    def __repr__(self):
        return "<ZO %s lr=%g eps=%d%s>" % ([ly.name for ly in self.layers], self.lr, self.eps,
                                            " bp=%s" % [ly.name for ly in self.trainer.layers]
                                            if self.trainer else "")

    def _loss(self, batch):
        m, t = self.model, self.trainer
        total = 0.0
        for s in batch:
            x, y = s
            if t is not None:
                total += t.step(x, y)  # forward + backward of the bp layers (applied after both passes)
            else:
                total += self.loss_fn(m, y, m.forward(x))[0]
        return total / len(batch)

    def step(self, batch):
        """One SPSA update from a list of (x, label) samples: the mean loss at
        w + eps z and at w - eps z. Returns the two losses."""
        if not batch:
            raise ValueError("ZO.step: empty batch")
        layers, base, e = self.layers, self._base, self.eps
        for j in range(len(layers)):
            base[j][:] = layers[j].w
        r0 = self.rng
        r = r0
        for j in range(len(layers)):
            r = _perturb(layers[j].w, base[j], r, e)
        lp = self._loss(batch)
        r = r0
        for j in range(len(layers)):
            r = _perturb(layers[j].w, base[j], r, -e)
        lm = self._loss(batch)
        delta = self.lr * (lp - lm) / (2 * e)
        mag = abs(delta)
        whole = int(math.floor(mag))
        thr = int((mag - whole) * 65536.0)
        neg = 1 if delta < 0 else 0
        rz = r0
        for j in range(len(layers)):
            r, rz = _update(layers[j].w, base[j], r, rz, whole, thr, neg)
        self.rng = r
        if self.trainer is not None:
            self.trainer.flush()
        self.steps += 1
        self.last = (lp, lm)
        return lp, lm

    def fit(self, samples, epochs=1, batch=16, order=None):
        """Consecutive batches of `samples` (in `order`, default as given; each
        batch's inputs are copied); the last one may be shorter. Returns the
        mean of (L+ + L-) / 2 per epoch."""
        n = len(samples)
        order = order if order is not None else range(n)
        out = []
        for _ in range(epochs):
            tot, k = 0.0, 0
            for s in range(0, n, batch):
                b = []
                for i in range(s, min(n, s + batch)):
                    x, y = samples[order[i]]
                    b.append((bytes(x), y))  # a FileDataset reuses x
                lp, lm = self.step(b)
                tot += lp + lm
                k += 1
            out.append(tot / (2 * k) if k else 0.0)
        return out

    def evaluate(self, samples):
        """Accuracy of the model on (x, label) samples."""
        m = self.model
        ok = 0
        for i in range(len(samples)):
            x, y = samples[i]
            ok += argmax(m.forward(x)) == y
        return ok / len(samples) if len(samples) else 0.0
