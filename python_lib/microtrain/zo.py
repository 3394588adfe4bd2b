# Forward-only (zeroth-order) training: SPSA on the int8 weights, with the
# perturbation regenerated from a seeded generator instead of stored, and the
# hybrid (ElasticZO: zeroth-order body, backprop head). docs/adapt.md,
# "Forward-only training". Imported on use (mt.ZO).
#
# The passes over the weights are the zo_perturb_s8 / zo_update_s8 kernels
# (docs/numerics.md, "Zeroth order"). Without backprop layers the frozen
# prefix runs once per sample and step: its outputs are kept for the batch and
# every perturbed pass starts at the first zeroth-order layer.
import array

from microtrain.kern import K
from microtrain.loss import LOSSES, argmax

M32 = 0xFFFFFFFF
STEP_MAX = 255.0  # weight quanta: any larger step saturates every int8 weight anyway


class ZO:
    """SPSA training of the int8 weights of the layers `train` ("last:N", names ...).

    lr:      step size in weight quanta per unit of the gradient estimate.
    eps:     perturbation in weight quanta (int >= 1).
    queries: SPSA steps per batch (each a new perturbation of the weights left by
             the one before, on the same samples: more forward passes, no more data).
    bp:      layers (a subset of `train`, after all the others) trained by backprop
             instead: the hybrid. optimizer / mode are theirs (as Trainer's).
    seed:    the xorshift32 generator of the perturbations and of the rounding.
    """

    def __init__(self, model, train="last:2", lr=50.0, eps=2, bp=None, optimizer=None, mode="int8", seed=1,
                 loss="xent", queries=1):
        if type(eps) is not int or not 1 <= eps <= 127:
            raise ValueError("ZO: eps must be an int 1..127 (weight quanta), got %r" % (eps,))
        if type(lr) not in (int, float) or not lr >= 0:
            raise ValueError("ZO: lr must be a number >= 0, got %r" % (lr,))
        if type(queries) is not int or queries < 1:
            raise ValueError("ZO: queries must be an int >= 1, got %r" % (queries,))
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
        self.queries = queries
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
        self._s1 = array.array("I", [0])  # the sign state (zo_perturb_s8)
        self._s2 = array.array("I", [0, 0])  # sign and rounding states (zo_update_s8)
        self.trainer = None
        self.first = zo[0]
        self._bufs = None
        self._keep = None
        if bpi:
            from microtrain.trainer import Trainer

            self.trainer = Trainer(model, train=bpi, mode=mode, optimizer=optimizer, batch=1 << 30, loss=loss)
        elif self.first > 0:
            # the tensors layers >= first read but do not make (cache.boundary, not
            # imported: its module costs heap), in the inference plan: all live before
            # layer `first`, so a forward from `first` after restoring them is the full
            # forward (no second plan)
            made, bd = [], []
            for ly in model.layers[self.first:]:
                for t in ly.inputs:
                    if t not in made and t not in bd:
                        bd.append(t)
                made.append(ly.output)
            self._bufs = [model.activation(t) for t in bd]
            self._rec = sum(len(b) for b in self._bufs)
            self._keep = bytearray(0)
        self.steps = 0
        self.last = (0.0, 0.0)

    def __repr__(self):
        return "<ZO %s lr=%g eps=%d%s%s>" % ([ly.name for ly in self.layers], self.lr, self.eps,
                                              " queries=%d" % self.queries if self.queries > 1 else "",
                                              " bp=%s" % [ly.name for ly in self.trainer.layers]
                                              if self.trainer else "")

    def _prefix(self, batch):
        """Run the frozen prefix of each sample once; keep its outputs for the passes."""
        m, rec = self.model, self._rec
        if len(self._keep) < rec * len(batch):
            self._keep = None  # free the old one first: the heap may be tight
            self._keep = bytearray(rec * len(batch))
        keep = memoryview(self._keep)
        o = 0
        for x, _ in batch:
            m.forward(x)
            for b in self._bufs:
                keep[o:o + len(b)] = b
                o += len(b)

    def _loss(self, batch):
        m, t, bufs = self.model, self.trainer, self._bufs
        total = 0.0
        if bufs is not None:  # from the kept prefix outputs
            keep, first, o = memoryview(self._keep), self.first, 0
            for s in batch:
                for b in bufs:
                    b[:] = keep[o:o + len(b)]
                    o += len(b)
                total += self.loss_fn(m, s[1], m.forward(None, None, first))[0]
            return total / len(batch)
        for s in batch:
            x, y = s
            if t is not None:
                total += t.step(x, y)  # forward + backward of the bp layers (applied after both passes)
            else:
                total += self.loss_fn(m, y, m.forward(x))[0]
        return total / len(batch)

    def step(self, batch):
        """`queries` SPSA updates from a list of (x, label) samples, each from the
        mean loss at w + eps z and at w - eps z. Returns the mean L+ and L-."""
        if not batch:
            raise ValueError("ZO.step: empty batch")
        if self._bufs is not None:
            self._prefix(batch)
        sp = sm = 0.0
        for _ in range(self.queries):
            lp, lm = self._query(batch)
            sp += lp
            sm += lm
        self.steps += 1
        self.last = (sp / self.queries, sm / self.queries)
        return self.last

    def _query(self, batch):
        layers, base, e = self.layers, self._base, self.eps
        s1, s2 = self._s1, self._s2
        for j in range(len(layers)):
            base[j][:] = layers[j].w
        r0 = self.rng
        s1[0] = r0
        for j in range(len(layers)):
            K.zo_perturb_s8(base[j], e, s1, layers[j].w)
        lp = self._loss(batch)
        s1[0] = r0
        for j in range(len(layers)):
            K.zo_perturb_s8(base[j], -e, s1, layers[j].w)
        lm = self._loss(batch)
        # the step in Q16 weight quanta along -z (stochastically rounded by the kernel)
        delta = self.lr * (lp - lm) / (2 * e)
        mag = abs(delta)
        if mag != mag:
            raise ValueError("ZO.step: the loss is not a number")
        q = int((mag if mag < STEP_MAX else STEP_MAX) * 65536.0)
        s2[0] = r0
        s2[1] = s1[0]  # the rounding draws continue after the sign draws
        step = -q if delta < 0 else q
        for j in range(len(layers)):
            K.zo_update_s8(base[j], step, s2, layers[j].w)
        self.rng = s2[1]
        if self.trainer is not None:
            self.trainer.flush()
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
