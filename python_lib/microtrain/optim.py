# Optimisers and learning-rate schedules.
#
# Fully quantised update (Deutel et al., arXiv 2407.10734): for each output
# channel c of a trained layer, w = dequant(w_q) - step, the channel's scale
# is refitted to the new range (max|w| / 127), w is requantised to int8, the
# int32 bias is re-expressed in the new scale and the requantisation
# multiplier (s_in * s_w[c] / s_out) is recomputed. With a float32 master copy
# (modes "float32", and "mixed" for the last trained layer) the step is applied
# to the master and the int8 weights are its quantisation.
#
# Every float intermediate that is kept is stored in an array('f'), but the
# unstored ones follow the platform's Python float: single- and double-float
# builds give different checkpoints (docs/training.md); the float32 host twin
# (ports/host) reproduces a single-float board bit for bit.
import array
import math

from microtrain.quant import BIAS_LIMIT, quantize_multiplier, zeros


class Constant:
    """lr stays at its initial value."""

    def __call__(self, lr0, epoch, epochs):
        return lr0


class StepLR:
    """lr0 * gamma ** (epoch // step)."""

    def __init__(self, step=10, gamma=0.1):
        self.step, self.gamma = step, gamma

    def __call__(self, lr0, epoch, epochs):
        return lr0 * self.gamma ** (epoch // self.step)


class Cosine:
    """Cosine decay from lr0 (first epoch) to lr_min (last epoch)."""

    def __init__(self, lr_min=0.0):
        self.lr_min = lr_min

    def __call__(self, lr0, epoch, epochs):
        t = epoch / (epochs - 1) if epochs > 1 else 0.0
        return self.lr_min + 0.5 * (lr0 - self.lr_min) * (1.0 + math.cos(math.pi * t))


def schedule(spec):
    if spec is None or spec == "constant":
        return Constant()
    if spec == "cosine":
        return Cosine()
    if spec == "step":
        return StepLR()
    if callable(spec):
        return spec
    raise ValueError("schedule: expected 'constant', 'step', 'cosine' or a callable, got %r" % (spec,))


class _Optimizer:
    def __init__(self, lr, weight_decay, standardize, rounding="auto"):
        if not lr > 0.0:
            raise ValueError("lr must be > 0")
        if rounding not in ("auto", "nearest", "stochastic"):
            raise ValueError("rounding must be 'auto', 'nearest' or 'stochastic'")
        self.rounding = rounding
        self.rng = 0xACE1  # xorshift16 state of stochastic rounding (small ints on every port)
        self.lr = lr
        self.weight_decay = weight_decay
        self.standardize = standardize
        self.steps = 0
        self._st = {}  # layer index -> state arrays

    def state(self, ly):
        """The optimiser's float32 state arrays for layer ly (made on first use):
        SGD with momentum [w, b] velocities, Adam [m_w, m_b, v_w, v_b]; None for
        plain SGD."""
        st = self._st.get(ly.index)
        if st is None:
            st = self._new_state(ly)
            self._st[ly.index] = st
        return st

    def state_tensors(self, ly):
        """The state a checkpoint stores for layer ly (docs/format.md, STATE
        slots 2 and 3): (for the weights, for the bias), the SGD momentum or
        Adam's first moments; None when there is none (yet)."""
        st = self._st.get(ly.index)
        if st is None:
            return None
        return st[0], st[1]

    def load_state(self, ly, w_state, b_state):
        """Continue from a checkpoint's state for layer ly (see state_tensors):
        the arrays are used in place. Ignored by optimisers that keep none."""
        raise NotImplementedError

    def step(self, layers, n=1, lr=None):
        """Apply the gradients summed over n samples to every layer in
        `layers` (a Model: its trained layers), then zero the sums."""
        if not isinstance(layers, (list, tuple)):
            layers = layers.trained_layers
        if not layers:
            raise ValueError("step: no trained layers (use model.set_trained or a Trainer first)")
        lr = self.lr if lr is None else lr
        self.steps += 1
        for ly in layers:
            _update(self, ly, lr, 1.0 / n)
        model = layers[0].model
        model.train_steps += 1  # optimiser updates, saved in checkpoints
        model.rebind()


class SGD(_Optimizer):
    """SGD with optional momentum, L2 weight decay and gradient standardisation."""

    def __init__(self, lr=0.01, momentum=0.0, weight_decay=0.0, standardize=False, rounding="auto"):
        super().__init__(lr, weight_decay, standardize, rounding)
        self.momentum = momentum

    def _new_state(self, ly):
        if not self.momentum:
            return None
        return [zeros("f", len(ly.w)), zeros("f", len(ly.b))]

    def load_state(self, ly, w_state, b_state):
        if self.momentum:
            self._st[ly.index] = [w_state, b_state]

    def __repr__(self):
        return "SGD(lr=%g, momentum=%g, weight_decay=%g, standardize=%s, rounding=%r)" % (
            self.lr, self.momentum, self.weight_decay, self.standardize, self.rounding)


class Adam(_Optimizer):
    """Adam (Kingma & Ba) with bias correction; state only for trained layers."""

    def __init__(self, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, standardize=False,
                 rounding="auto"):
        super().__init__(lr, weight_decay, standardize, rounding)
        self.beta1, self.beta2, self.eps = beta1, beta2, eps

    def _new_state(self, ly):
        nw, nb = len(ly.w), len(ly.b)
        return [zeros("f", nw), zeros("f", nb), zeros("f", nw), zeros("f", nb)]

    def load_state(self, ly, w_state, b_state):
        # second moments are not in format v1.0: they start at zero
        self._st[ly.index] = [w_state, b_state, zeros("f", len(ly.w)), zeros("f", len(ly.b))]

    def __repr__(self):
        return "Adam(lr=%g, betas=(%g, %g), eps=%g, weight_decay=%g, standardize=%s, rounding=%r)" % (
            self.lr, self.beta1, self.beta2, self.eps, self.weight_decay, self.standardize, self.rounding)


def _standardize(g, inv_n, buf):
    """buf = (g * inv_n - mean) / (std + 1e-8) over the whole tensor (Deutel eq. 8)."""
    n = len(g)
    s = 0.0
    for i in range(n):
        v = g[i] * inv_n
        buf[i] = v
        s += v
    mu = s / n
    ss = 0.0
    for i in range(n):
        d = buf[i] - mu
        ss += d * d
    inv = 1.0 / (math.sqrt(ss / n) + 1e-8)
    for i in range(n):
        buf[i] = (buf[i] - mu) * inv


def _directions(opt, ly, g, inv_n, st_a, st_b, t, wvals):
    """Turn the summed gradient g (float32) into the update direction, in place.

    wvals(i) -> current real weight, for weight decay."""
    n = len(g)
    if opt.standardize and n > 1:
        _standardize(g, inv_n, g)
        inv_n = 1.0
    wd = opt.weight_decay
    if isinstance(opt, SGD):
        mom = opt.momentum
        for i in range(n):
            d = g[i] * inv_n
            if wd:
                d += wd * wvals(i)
            if st_a is not None:
                d = mom * st_a[i] + d
                st_a[i] = d
            g[i] = d
    else:
        b1, b2, eps = opt.beta1, opt.beta2, opt.eps
        c1 = 1.0 - b1 ** t
        c2 = 1.0 - b2 ** t
        sq = math.sqrt
        for i in range(n):
            d = g[i] * inv_n
            if wd:
                d += wd * wvals(i)
            m = b1 * st_a[i] + (1.0 - b1) * d
            v = b2 * st_b[i] + (1.0 - b2) * d * d
            st_a[i] = m
            st_b[i] = v
            g[i] = (m / c1) / (sq(v / c2) + eps)


def _update(opt, ly, lr, inv_n):
    st = opt.state(ly)
    w, sw, b, gw, gb = ly.w, ly.w_scale, ly.b, ly.gw, ly.gb
    master_w, master_b = ly.master_w, ly.master_b
    out_c = len(b)
    k = len(w) // out_c
    s_in = ly.in_scale
    s_out = ly.out_scale
    t = opt.steps
    if master_w is not None:
        def wv(i):
            return master_w[i]

        def bv(c):
            return master_b[c]
    else:
        def wv(i):
            return w[i] * sw[i // k]

        def bv(c):
            return b[c] * s_in * sw[c]
    if isinstance(opt, SGD):
        sa_w = st[0] if st is not None else None
        sa_b = st[1] if st is not None else None
        sb_w = sb_b = None
    else:
        sa_w, sa_b, sb_w, sb_b = st
    _directions(opt, ly, gw, inv_n, sa_w, sb_w, t, wv)
    _directions(opt, ly, gb, inv_n, sa_b, sb_b, t, bv)
    row = ly._row
    if row is None or len(row) != k:
        row = ly._row = zeros("f", k)
    fl = math.floor
    mult, shift = ly.mult, ly.shift
    sr = opt.rounding == "stochastic" or (opt.rounding == "auto" and master_w is None)
    r = opt.rng
    for c in range(out_c):
        base = c * k
        s_old = sw[c]
        top = 0.0
        if master_w is not None:
            for i in range(k):
                v = master_w[base + i] - lr * gw[base + i]
                master_w[base + i] = v
                row[i] = v
                gw[base + i] = 0.0
                if v > top:
                    top = v
                elif -v > top:
                    top = -v
            bf = master_b[c] - lr * gb[c]
            master_b[c] = bf
        else:
            for i in range(k):
                v = w[base + i] * s_old - lr * gw[base + i]
                row[i] = v
                gw[base + i] = 0.0
                if v > top:
                    top = v
                elif -v > top:
                    top = -v
            bf = b[c] * s_in * s_old - lr * gb[c]
        gb[c] = 0.0
        if top > 0.0:
            sw[c] = top / 127.0  # stored as float32: read back below
        s = sw[c]
        inv = 1.0 / s
        if sr:
            # stochastic rounding: floor(v + u), u uniform in [0, 1) from xorshift16,
            # so steps smaller than half a quantisation step still move w on average
            for i in range(k):
                r ^= (r << 7) & 0xFFFF
                r ^= r >> 9
                r ^= (r << 8) & 0xFFFF
                q = int(fl(row[i] * inv + r * 0.0000152587890625))
                w[base + i] = 127 if q > 127 else (-127 if q < -127 else q)
        else:
            for i in range(k):
                q = int(fl(row[i] * inv + 0.5))
                w[base + i] = 127 if q > 127 else (-127 if q < -127 else q)
        q = int(fl(bf / (s_in * s) + 0.5))
        b[c] = BIAS_LIMIT if q > BIAS_LIMIT else (-BIAS_LIMIT if q < -BIAS_LIMIT else q)
        mult[c], shift[c] = quantize_multiplier(s_in * s / s_out)
    opt.rng = r
    ly.refresh_ratios()


def xorshift16_skip(r, n):
    """The stochastic-rounding generator state n draws after r (period 65535).
    _update inlines the same step in its hot loop."""
    for _ in range(n % 65535):
        r ^= (r << 7) & 0xFFFF
        r ^= r >> 9
        r ^= (r << 8) & 0xFFFF
    return r


def make_master(ly):
    """Float32 master copy of a trained layer's weights and bias (float modes)."""
    k = len(ly.w) // len(ly.b)
    sw, w, b = ly.w_scale, ly.w, ly.b
    s_in = ly.in_scale
    mw = array.array("f", bytes(4 * len(w)))
    for i in range(len(w)):
        mw[i] = w[i] * sw[i // k]
    mb = array.array("f", bytes(4 * len(b)))
    for c in range(len(b)):
        mb[c] = b[c] * s_in * sw[c]
    ly.master_w, ly.master_b = mw, mb
