# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# Forward-only (zeroth-order) training, two ways (docs/adapt.md, "Forward-only
# training"). Imported on use (mt.ZO).
#
# perturb="weights": SPSA on the int8 weights, the perturbation regenerated
# from a seeded generator instead of stored, and the hybrid (ElasticZO:
# zeroth-order body, backprop head). The passes over the weights are the
# zo_perturb_s8 / zo_update_s8 kernels (docs/numerics.md, "Zeroth order").
# Without backprop layers the frozen prefix runs once per sample and step: its
# outputs are kept for the batch and every perturbed pass starts at the first
# zeroth-order layer.
#
# perturb="outputs": activity (node) perturbation. The trained layers' outputs,
# not their weights, are perturbed along Hadamard rows times a per-sample sign
# vector (zo_perturb_h_s8), so the estimate of dL/d(output) has as many unknowns
# as outputs (fc1 + fc2 of the transfer CNN: 42, against 9.5k weights) and is
# exact once every row is used. Each layer's weight gradient is then local: the
# estimate times the layer's own input (the grad-weight kernels), applied by the
# Trainer's optimiser. Forward passes only: no error travels between layers.
import array

from micropython import const

from microtrain.kern import K
from microtrain.loss import LOSSES, argmax

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
# The .mtm constants this module reads, private: inlined, no globals entry.
_OP_CONV2D = const(1)
_OP_LINEAR = const(2)
_ACT_RELU = const(1)
_ACT_RELU6 = const(2)
# --- generated: end

M32 = 0xFFFFFFFF
STEP_MAX = 255.0  # weight quanta: any larger step saturates every int8 weight anyway


class ZO:
    """Forward-only training of the layers `train` ("last:N", names ...).

    perturb: "weights" (SPSA on the int8 weights) or "outputs" (activity
             perturbation of the layers' outputs; conv / linear layers only).
    lr:      "weights": step size in weight quanta per unit of the gradient
             estimate (default 50). "outputs": not used (the optimiser's lr).
    eps:     perturbation in quanta of the weights / of the outputs (int >= 1).
    queries: "weights": SPSA steps per batch (each a new perturbation of the weights
             left by the one before, on the same samples: more forward passes, no
             more data), or a QScheduler (q chosen as training goes). "outputs":
             Hadamard rows per sample (two forward passes of the trained layers each);
             default all of them (the next power of two above the number of outputs):
             the estimate is then exact.
    bp:      ("weights") layers (a subset of `train`, after all the others) trained
             by backprop instead: the hybrid. optimizer / mode are theirs (as Trainer's).
    optimizer, mode: ("outputs") the update of the estimated gradients, as Trainer's.
    seed:    the xorshift32 generator of the perturbations and of the rounding.
    """

    def __init__(self, model, train="last:2", lr=None, eps=2, bp=None, optimizer=None, mode="int8", seed=1,
                 loss="xent", queries=None, perturb="weights"):
        if perturb not in ("weights", "outputs"):
            raise ValueError("ZO: perturb must be 'weights' or 'outputs', got %r" % (perturb,))
        outs = perturb == "outputs"
        if type(eps) is not int or not 1 <= eps <= 127:
            raise ValueError("ZO: eps must be an int 1..127 (quanta), got %r" % (eps,))
        if outs and lr is not None:
            raise ValueError("ZO: perturb='outputs' updates with the optimiser: give optimizer=SGD(lr=...), "
                             "not lr")
        if lr is None:
            lr = 50.0
        if type(lr) not in (int, float) or not lr >= 0:
            raise ValueError("ZO: lr must be a number >= 0, got %r" % (lr,))
        sched = None
        if isinstance(queries, QScheduler):
            if outs:
                raise ValueError("ZO: a QScheduler is for perturb='weights'")
            sched, queries = queries, queries.q
        if queries is not None and (type(queries) is not int or queries < 1):
            raise ValueError("ZO: queries must be an int >= 1, got %r" % (queries,))
        if outs and bp is not None:
            raise ValueError("ZO: bp (the hybrid) is for perturb='weights'")
        if loss not in LOSSES:
            raise ValueError("ZO: loss must be one of %s, got %r" % (tuple(LOSSES), loss))
        if type(seed) is not int:
            raise ValueError("ZO: seed must be an int, got %r" % (seed,))
        idx = model.select(train)
        self.perturb = perturb
        if outs:
            self._init_outputs(model, idx, eps, queries, optimizer, mode, seed, loss)
            return
        queries = queries or 1
        self.sched = sched
        self.passes = 0  # forward passes of a sample so far (the budget QScheduler is compared at)
        self.rows = 0
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
                ly.w = array.array("b", ly.w)  # (checkpoints write the layer's arrays)
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

    def _init_outputs(self, model, idx, eps, queries, optimizer, mode, seed, loss):
        from microtrain import kern
        from microtrain.trainer import Trainer

        zl, d = [], 0
        for j in idx:
            ly = model.layers[j]
            if ly.op != _OP_CONV2D and ly.op != _OP_LINEAR:
                raise ValueError("ZO: perturb='outputs' trains conv2d / linear layers; %s is %s"
                                 % (ly.name, ly.kind))
            n = model.tensors[ly.output].numel
            # (layer, first coordinate, outputs, fused activation to mask by, its grad-weight kernel)
            act = ly.act if ly.act in (_ACT_RELU, _ACT_RELU6) else 0
            gw = kern.f32("conv2d_s8_grad_weight_f32" if ly.op == _OP_CONV2D else "linear_s8_grad_weight_f32")
            zl.append((ly, d, n, act, gw))
            d += n
        p = 1
        while p < d:
            p <<= 1
        if p > 1 << 24:
            raise ValueError("ZO: %d outputs to perturb; at most 2^24" % d)
        if queries is not None and queries > p:
            raise ValueError("ZO: queries must be <= %d (the Hadamard rows for %d outputs), got %d"
                             % (p, d, queries))
        self.model = model
        self.eps = eps
        self.lr = 0.0
        self.queries = queries or p
        self.rows = p
        self.loss_fn = LOSSES[loss]
        self.rng = (seed * 2654435761 + 12345) & M32 or 1
        self.trainer = Trainer(model, train=idx, mode=mode, optimizer=optimizer, batch=1 << 30, loss=loss)
        self.layers = self.trainer.layers
        self.first = self.layers[0].index
        self._zl = zl
        self._at = {}
        for z in zl:
            self._at[z[0].index] = z
        self._s1 = array.array("I", [0])
        # the sample's signs, then its error
        self._z = array.array("b", bytes(max(n for _, _, n, _, _ in zl)))
        self._c = array.array("f", bytes(4 * p))  # (L+ - L-) / (2 eps) per row, then the transform
        self._zero = bytes(len(self._z))
        self.steps = 0
        self.last = (0.0, 0.0)
        self.sched = None
        self.passes = 0

    def _sample_outputs(self, x, label):
        """One sample of activity perturbation: adds its estimated gradient to the
        trained layers' sums. Returns (sum of L+, sum of L-) over the rows."""
        m, zl, e, q = self.model, self._zl, self.eps, self.queries
        first, s1, c = self.first, self._s1, self._c
        bufs, steps = m.plan(first)
        last = len(steps)
        out = m.forward(x, first)
        r0 = self.rng
        at = self._at
        sp = sm = 0.0
        for k in range(q):
            lk = []
            for sg in (e, -e):
                s1[0] = r0
                for i in range(first, last):
                    st = steps[i]
                    st[0](*st[1])
                    z = at.get(i)
                    if z is not None:
                        y = bufs[z[0].output]
                        K.zo_perturb_h_s8(y, sg, s1, k, z[1], y)
                lk.append(self.loss_fn(m, label, out)[0])
            sp += lk[0]
            sm += lk[1]
            c[k] = (lk[0] - lk[1]) / (2 * e)
        self.rng = s1[0]
        if sp - sm != sp - sm:
            raise ValueError("ZO.step: the loss is not a number")
        for k in range(q, self.rows):
            c[k] = 0.0
        # sum_k c[k] h_k[i] for every coordinate i: the fast Walsh-Hadamard transform of c
        # (h_k[i] = (-1)^popcount(k & i) is symmetric in k and i)
        h, p = 1, self.rows
        while h < p:
            for a in range(0, p, 2 * h):
                for b in range(a, a + h):
                    u, v = c[b], c[b + h]
                    c[b], c[b + h] = u + v, u - v
            h <<= 1
        m.forward(None, first, first)  # the clean outputs and inputs again, for the gradients
        zb, zero, tensors = self._z, self._zero, m.tensors
        s1[0] = r0
        for ly, o, n, act, gw in zl:
            zv = memoryview(zb)[:n]
            K.zo_perturb_h_s8(memoryview(zero)[:n], 1, s1, 0, o, zv)  # the sample's signs z
            amax = 0.0
            for i in range(o, o + n):
                a = abs(c[i])
                if a > amax:
                    amax = a
            if amax == 0.0:
                continue
            f = 127.0 / amax
            for i in range(n):  # the estimate c z as int8, scale amax / 127 (per output quantum)
                zv[i] = int(c[o + i] * f + (0.5 if c[o + i] > 0 else -0.5)) * zv[i]
            y = bufs[ly.output]
            pr = ly.params
            if act == _ACT_RELU:
                K.relu_s8_backward(y, pr[-2], zv)
            elif act:
                K.relu6_s8_backward(y, pr[-2], pr[-1], zv)
            s = amax / (127.0 * q * tensors[ly.output].scale)  # real dL/dy per unit of zv
            xt = ly.inputs[0]
            gw(pr, bufs[xt], zv, None, tensors[xt].scale * s, s, ly.gw, ly.gb)
        self.trainer.pending += 1
        return sp, sm

    def __repr__(self):
        if self.perturb == "outputs":
            return "<ZO %s perturb='outputs' eps=%d queries=%d/%d %r>" % (
                [ly.name for ly in self.layers], self.eps, self.queries, self.rows, self.trainer.opt)
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
        if self.perturb == "outputs":
            sp = sm = 0.0
            for x, y in batch:
                a, b = self._sample_outputs(x, y)
                sp += a
                sm += b
            self.trainer.flush()
            self.steps += 1
            n = len(batch) * self.queries
            self.last = (sp / n, sm / n)
            return self.last
        if self._bufs is not None:
            self._prefix(batch)
        sp = sm = 0.0
        q = self.queries
        lr = self.lr
        sc = self.sched
        if sc is not None and sc.share:
            lr = lr * sc.q0 / q  # the q queries share one step: their mean estimate
        for _ in range(q):
            lp, lm = self._query(batch, lr)
            sp += lp
            sm += lm
        self.steps += 1
        self.passes += 2 * q * len(batch)
        self.last = (sp / q, sm / q)
        if self.sched is not None:
            self.queries = self.sched.update((self.last[0] + self.last[1]) / 2)
        return self.last

    def _query(self, batch, lr):
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
        delta = lr * (lp - lm) / (2 * e)
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


class QScheduler:
    """The query count of ZO(perturb="weights") chosen as training goes (QScheduler's
    idea): start at q0 queries a batch; when the running mean of the batch loss (decay
    beta) has not fallen by the fraction tol within `patience` batches, progress has
    stalled on the noise of the estimate: multiply q by `grow` (up to q_max).
    share: the q queries of a batch share one step (each at ZO's lr times q0 / q): a
    batch moves the weights as far as at q0, and more queries average the estimate's
    noise down, as QScheduler's q queries make one mean estimate; False: each query a
    full step (as a fixed `queries`).
    ZO(model, ..., queries=QScheduler()); zo.queries is the current q."""

    def __init__(self, q0=1, q_max=64, patience=8, tol=0.02, beta=0.9, grow=2, share=False):
        if type(q0) is not int or type(q_max) is not int or not 1 <= q0 <= q_max:
            raise ValueError("QScheduler: need ints 1 <= q0 <= q_max, got %r, %r" % (q0, q_max))
        if type(patience) is not int or patience < 1 or type(grow) is not int or grow < 2:
            raise ValueError("QScheduler: patience must be an int >= 1 and grow an int >= 2")
        if not 0.0 <= tol < 1.0 or not 0.0 <= beta < 1.0:
            raise ValueError("QScheduler: tol and beta must be in [0, 1)")
        self.q = self.q0 = q0
        self.q_max = q_max
        self.share = bool(share)
        self.patience = patience
        self.tol = tol
        self.beta = beta
        self.grow = grow
        self.ema = None
        self.best = None
        self.wait = 0
        self.n = 0  # batches seen
        self.changes = []  # (batch, new q) each time q grew

    def update(self, loss):
        """The running loss after a batch's mean loss; returns q for the next batch."""
        self.ema = loss if self.ema is None else self.beta * self.ema + (1.0 - self.beta) * loss
        if self.best is None or self.ema < self.best * (1.0 - self.tol):
            self.best = self.ema
            self.wait = 0
        else:
            self.wait += 1
            if self.wait >= self.patience and self.q < self.q_max:
                self.q = min(self.q * self.grow, self.q_max)
                self.changes.append((self.n, self.q))
                self.wait = 0
                self.best = self.ema
        self.n += 1
        return self.q

    def __repr__(self):
        return "<QScheduler q=%d (q_max %d) changes %r>" % (self.q, self.q_max, self.changes)
