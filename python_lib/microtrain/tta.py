# Test-time adaptation without labels (docs/adapt.md, "Adapting with less"). Imported on
# use: `from microtrain.tta import TTA`.
#
# The parameters: a per-channel scale g and shift b on the outputs of a few conv / linear
# layers - the normalisation the converter folded, y_c = g_c (W x)_c + b_c - applied through
# the layer's own requantisation (mult, shift, bias), so the forward is unchanged and no
# weight moves.
# The objective: the mean prediction entropy of a batch of unlabeled samples. Chosen over
# the model's own confident pseudo-labels because it needs no confidence threshold, uses
# every sample, and weighs a sample by how unsure the model is, where a pseudo-label's
# cross-entropy pulls hardest on the samples it already gets right or confidently wrong.
# The optimiser: forward passes only (zeroth order). Each query perturbs the parameters by
# eps * sigma * z (z Gaussian), sigma_i = 1 / sqrt(h_i) from a running estimate h of the
# loss's diagonal curvature, which the same three losses give:
#   (L+ + L- - 2 L0) / eps^2 * (z_i^2 - 1) / 2 ~ h_i        (Gaussian z)
# and steps along -sigma^2 times the gradient estimate: a diagonal Newton step, large on
# flat parameters, small on sharp ones (CAZO's curvature-aware perturbation).
# The guard: entropy falls as well when every sample goes to one class. The diversity of the
# predictions (the entropy of their histogram over a window) is watched; when it falls under
# `floor` times its starting value, the parameters go back to the last healthy window's and
# adaptation stops.
import array
import math

from microtrain.quant import quantize_multiplier


def _rng(s):
    s ^= (s << 13) & 0xFFFFFFFF
    s ^= s >> 17
    s ^= (s << 5) & 0xFFFFFFFF
    return s


def _gauss(s):
    # a standard normal from three xorshift32 draws: the sum of three uniforms, rescaled (the
    # curvature estimate needs E[z^2] = 1 and a kurtosis near 3)
    t = 0.0
    for _ in range(3):
        s = _rng(s)
        t += s / 4294967296.0
    return (t - 1.5) * 2.0, s


def entropy(out, scale, zp):
    """(prediction entropy in nats, max probability, argmax) of int8 logits."""
    top = max(out)
    e = [math.exp((v - top) * scale) for v in out]
    z = sum(e)
    h = 0.0
    best, arg = 0.0, 0
    for i in range(len(e)):
        p = e[i] / z
        if p > 0.0:
            h -= p * math.log(p)
        if p > best:
            best, arg = p, i
    return h, best, arg


class TTA:
    """Label-free adaptation of `model` on a stream (module comment).

    layers:  the layers whose output scale and shift adapt: "first:N" (the first N conv /
             linear layers; a sensor's gain and offset drift is undone exactly by the
             first layer's, which is linear in its input) or Model.select's specs.
    lr:      step size (in units of the curvature-scaled estimate).
    eps:     perturbation size (relative to each parameter's sigma).
    queries: perturbations per batch.
    window:  samples over which the guard measures the predictions' diversity.
    floor:   the guard's bound: diversity below floor x its starting value stops and
             rolls back.
    Use: tta = TTA(model); for x in stream: tta.add(x)  (adapts every `batch` samples);
    tta.predict(x); tta.stopped; tta.reset()."""

    def __init__(self, model, layers="first:1", lr=0.5, eps=0.05, queries=4, batch=16, window=64, floor=0.6,
                 beta=0.9, seed=1):
        if isinstance(layers, str) and layers.startswith("first:"):
            n = int(layers[6:])
            idx = [ly.index for ly in model.layers if ly.w is not None][:n]
        else:
            idx = model.select(layers)
        if not idx:
            raise ValueError("TTA: no layer to adapt")
        self.model = model
        self.lr, self.eps, self.queries, self.batch = lr, eps, queries, batch
        self.window, self.floor, self.beta = window, floor, beta
        self.rng = (seed * 2654435761 + 12345) & 0xFFFFFFFF or 1
        self.layers = [model.layers[j] for j in idx]
        # per channel: the real requant multiplier, the bias, 1 / multiplier, the own (mult, shift)
        real = []
        for ly in self.layers:
            ly.mult = array.array("i", ly.mult)  # own copies: the requantisation moves, not the weights
            ly.shift = array.array("i", ly.shift)
            ly.b = array.array("i", ly.b)
            ly.modified = True
            for c in range(len(ly.mult)):
                r = ly.mult[c] * 2.0 ** (ly.shift[c] - 31)
                real.append((r, ly.b[c], 1.0 / r, ly.mult[c], ly.shift[c]))
        model.rebind()
        self._real = real
        n = len(real)
        self.n_params = 2 * n
        self.p = array.array("f", bytes(8 * n))  # g - 1 for each channel, then b (output quanta)
        self.h = array.array("f", [1.0] * (2 * n))  # running diagonal curvature
        self._good = array.array("f", self.p)
        self._buf = []
        self._preds = []
        self.base_div = None
        self.div = None
        self.stopped = False
        self.steps = 0
        self.last = None

    def _apply(self, p):
        k = 0
        n = len(self._real)
        for ly in self.layers:
            for c in range(len(ly.mult)):
                r, b0, inv, m0, s0 = self._real[k]
                g = 1.0 + p[k]
                if g < 0.05:
                    g = 0.05
                if p[k] == 0.0:  # the layer's own multiplier (r is not exact in a float32 build)
                    ly.mult[c], ly.shift[c] = m0, s0
                else:
                    ly.mult[c], ly.shift[c] = quantize_multiplier(r * g)
                # y = g (acc + b0) r + shift_q  ->  bias = b0 + shift_q / (g r) in accumulator units
                ly.b[c] = b0 + int(math.floor(p[n + k] * inv / g + 0.5))
                k += 1

    def _loss(self, batch):
        m = self.model
        o = m.output
        tot = 0.0
        for x in batch:
            tot += entropy(m.forward(x), o.scale, o.zero_point)[0]
        return tot / len(batch)

    def _adapt(self, batch):
        p, h, d = self.p, self.h, len(self.p)
        l0 = self._loss(batch)
        z = array.array("f", bytes(4 * d))
        s = array.array("f", bytes(4 * d))
        g = array.array("f", bytes(4 * d))
        q = array.array("f", bytes(4 * d))
        e = self.eps
        for _ in range(self.queries):
            r = self.rng
            for i in range(d):
                z[i], r = _gauss(r)
                s[i] = 1.0 / math.sqrt(h[i])
            self.rng = r
            for i in range(d):
                q[i] = p[i] + e * s[i] * z[i]
            self._apply(q)
            lp = self._loss(batch)
            for i in range(d):
                q[i] = p[i] - e * s[i] * z[i]
            self._apply(q)
            lm = self._loss(batch)
            c = (lp - lm) / (2.0 * e)  # directional derivative along sigma z
            curv = (lp + lm - 2.0 * l0) / (e * e)
            for i in range(d):
                g[i] += c * s[i] * z[i] / self.queries  # sigma^2 * gradient, in expectation
                hi = curv * (z[i] * z[i] - 1.0) * 0.5 / (s[i] * s[i])
                hi = h[i] * self.beta + (1.0 - self.beta) * abs(hi)
                h[i] = hi if hi > 1e-3 else 1e-3
        for i in range(d):
            p[i] -= self.lr * g[i]
        self._apply(p)
        self.steps += 1
        self.last = l0

    def _diversity(self, preds):
        cnt = {}
        for v in preds:
            cnt[v] = cnt.get(v, 0) + 1
        h = 0.0
        for k in cnt:
            f = cnt[k] / len(preds)
            h -= f * math.log(f)
        return h

    def predict(self, x):
        """The class of x with the current parameters (no adaptation)."""
        out = self.model.forward(x)
        return entropy(out, self.model.output.scale, self.model.output.zero_point)[2]

    def add(self, x):
        """One unlabeled sample of the stream: its prediction (before this sample's batch
        adapts). Every `batch` samples the parameters take a step; every `window` the
        guard checks the predictions' diversity."""
        y = self.predict(x)
        if self.stopped:
            return y
        self._preds.append(y)
        self._buf.append(bytes(x))
        if self.base_div is None:  # the first window: the model's own diversity, before any step
            self._buf = self._buf[-self.batch:]
        elif len(self._buf) >= self.batch:
            self._adapt(self._buf)
            self._buf = []
        if len(self._preds) >= self.window:
            d = self._diversity(self._preds)
            self._preds = []
            if self.base_div is None:
                self.base_div = d
            self.div = d
            if d < self.floor * self.base_div:
                self.rollback()
                self.stopped = True
            else:
                self._good = array.array("f", self.p)
        return y

    def rollback(self):
        """Back to the parameters of the last healthy window."""
        self.p = array.array("f", self._good)
        self._apply(self.p)

    def reset(self):
        """Back to the model's own parameters (g = 1, b = 0), the guard rearmed."""
        self.p = array.array("f", bytes(len(self.p) * 4))
        self._good = array.array("f", self.p)
        self._apply(self.p)
        self.stopped = False
        self.base_div = self.div = None
        self._preds, self._buf = [], []

    def __repr__(self):
        return "<TTA %s %d params, %d steps%s>" % ([ly.name for ly in self.layers], self.n_params, self.steps,
                                                   ", stopped (collapse)" if self.stopped else "")
