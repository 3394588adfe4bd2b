# Optimisers (the schedule classes: microtrain.schedule).
#
# Fully quantised update (Deutel et al., arXiv 2407.10734): for each output
# channel c of a trained layer, w = dequant(w_q) - lr * direction, the
# channel's scale is refitted to the new range (max|w| / 127), w is
# requantised to int8, the int32 bias is re-expressed in the new scale and the
# requantisation multiplier (s_in * s_w[c] / s_out) is recomputed. With a
# float32 master copy (modes "float32", and "mixed" for the last trained
# layer) the step is applied to the master and the int8 weights are its
# quantisation.
#
# The arithmetic runs in the update primitives of _microtrain (update.c, or
# their pure-Python twins microtrain.pyk.update), over whole layers and in
# float32 only: double- and single-float MicroPython builds give the same
# bits (docs/training.md). An optimiser here only says which primitives to
# chain for the direction; `update_s8_apply` then does the rest.
import array

from micropython import const

from microtrain import kern
from microtrain.quant import zeros

WINDOW = const(2048)  # floats of the gradient window of an update during backward (8 KB)
_LIM = 3.4e38 / 8589934592.0  # FLT_MAX / 2^33: lr * |gradient scale| bound of such an update


def _constant(lr0, epoch, epochs):
    return lr0


def schedule(spec):
    """The learning rate per epoch for Trainer(schedule=spec): lr0 for None / "constant",
    Cosine() / StepLR() for "cosine" / "step" (microtrain.schedule, loaded only then), or
    the callable itself."""
    if spec is None or spec == "constant":
        return _constant
    if callable(spec):
        return spec
    if spec == "cosine" or spec == "step":
        made = []

        def named(lr0, epoch, epochs):
            # the module is loaded at the first epoch, after the Trainer allocated its buffers
            # (compiled from source, it would cut the heap into pieces first)
            if not made:
                from microtrain.schedule import Cosine, StepLR

                made.append(Cosine() if spec == "cosine" else StepLR())
            return made[0](lr0, epoch, epochs)

        return named
    raise ValueError("schedule: expected 'constant', 'step', 'cosine' or a callable, got %r" % (spec,))


class _F32:
    # The float32 update primitives: native where the build has an FPU, else
    # the pure-Python ones (attribute lookup once, then cached).
    def __getattr__(self, name):
        f = kern.f32(name)
        setattr(self, name, f)
        return f


F = _F32()


def _num(name, v, lo, lo_open, hi=None):
    """v as checked hyperparameter: a finite number, > lo (lo_open) or >= lo, < hi."""
    if type(v) is not float and type(v) is not int:
        raise TypeError("%s must be a number, got %r" % (name, v))
    ok = v - v == 0 and (v > lo if lo_open else v >= lo) and (hi is None or v < hi)
    if not ok:
        rng = ("> %g" if lo_open else ">= %g") % lo
        if hi is not None:
            rng = "in [%g, %g)" % (lo, hi)
        raise ValueError("%s must be finite and %s, got %r" % (name, rng, v))
    return v


def _f32(v):
    return array.array("f", (v,))[0]


class Param:
    """One trained tensor of a layer as the update primitives take it: `g` the
    gradient sum (the direction is built in place), `k` values per output
    channel, `touched` the channels to update (None: all), `q`, `scale`, `f`,
    `master` where its real values come from (update_f32_decay), `i` = 0 for
    the weights and 1 for the bias (the index of its optimiser state)."""

    def __init__(self, ly, bias):
        self.touched = ly.touched
        self.scale = ly.w_scale
        if bias:
            self.g, self.k, self.q, self.f, self.master, self.i = ly.gb, 1, ly.b, ly.in_scale, ly.master_b, 1
        else:
            self.g, self.k, self.q, self.f, self.master, self.i = (ly.gw, len(ly.w) // len(ly.b), ly.w, 1.0,
                                                                   ly.master_w, 0)


class _Optimizer:
    n_state = 0  # float32 state arrays per tensor (SGD momentum 1, Adam 2)

    def __init__(self, lr, weight_decay, standardize, rounding="auto"):
        self.lr = _num("lr", lr, 0.0, True)
        self.weight_decay = _num("weight_decay", weight_decay, 0.0, False)
        if rounding not in ("auto", "nearest", "stochastic"):
            raise ValueError("rounding must be 'auto', 'nearest' or 'stochastic'")
        self.rounding = rounding
        self.rng = 0xACE1  # xorshift16 state of stochastic rounding (small ints on every port)
        self.standardize = standardize
        self.steps = 0
        self._st = {}  # layer index -> state arrays

    def state(self, ly):
        """The optimiser's float32 state arrays for layer ly (made on first use),
        n_state per tensor: [w, b] (SGD momentum), [m_w, m_b, v_w, v_b] (Adam);
        None when n_state is 0."""
        st = self._st.get(ly.index)
        if st is None and self.n_state:
            st = []
            for _ in range(self.n_state):
                st += [zeros("f", len(ly.w)), zeros("f", len(ly.b))]
            self._st[ly.index] = st
        return st

    def state_tensors(self, ly):
        """The state a checkpoint stores for layer ly (docs/format.md, STATE
        slots 2 to 5): [weights, bias] (SGD momentum) or [m_w, m_b, v_w, v_b]
        (Adam); None when there is none (yet)."""
        return self._st.get(ly.index)

    def load_state(self, ly, w_state, b_state, v_w=None, v_b=None):
        """Continue from a checkpoint's state for layer ly (see state_tensors):
        the arrays are used in place; missing ones (Adam's second moments in a
        file older than format 1.3) restart at zero. Ignored by optimisers that
        keep none."""
        if not self.n_state:
            return
        st = [w_state, b_state]
        if self.n_state > 1 and v_w is not None and v_b is not None:
            st += [v_w, v_b]
        for k, a in enumerate(st):
            i = F.update_f32_check(a)
            if i >= 0:
                raise ValueError("load_state: layer %s: %s state [%d] is not finite" % (
                    ly.name, ("weights", "bias")[k & 1], i))
        while len(st) < 2 * self.n_state:
            st += [zeros("f", len(ly.w)), zeros("f", len(ly.b))]
        self._st[ly.index] = st

    def prepare(self, p, n):
        """The common start of a direction: g / n, standardised, plus weight decay."""
        if self.standardize:
            F.update_f32_standardize(p.g, p.k, p.touched, n)
            n = 1
        if n != 1 or self.weight_decay:
            F.update_f32_decay(p.g, p.k, p.touched, n, self.weight_decay, p.q, p.scale, p.f, p.master)

    def direction(self, p, st, n):
        """Turn p.g (the sum of n samples' gradients) into the step direction, in place."""
        raise NotImplementedError

    def begin(self, t):
        """Called once per step (t = the new step count) before any layer."""

    def step(self, layers, n=1, lr=None):
        """Apply the gradients summed over n samples to every layer in
        `layers` (a Model: its trained layers), then zero the sums.

        All or nothing: arguments and gradient sums are checked before any
        state changes, so a failing step raises one ValueError and leaves
        weights, scales, biases, masters, moments, sums and counters as they were."""
        if not isinstance(layers, (list, tuple)):
            layers = layers.trained_layers
        if not layers:
            raise ValueError("step: no trained layers (use model.set_trained or a Trainer first)")
        now = layers[0].model._now
        if now is not None and layers[0].index in now.info:  # stepped during backward: the bookkeeping
            if n != 1:
                raise ValueError("step: layer %s took its step during backward (Trainer batch 1): n must "
                                 "be 1, got %d" % (layers[0].name, n))
            now.end(layers)
            return
        lr = self.lr if lr is None else _num("step: lr", lr, 0.0, False)  # a schedule may reach 0
        if type(n) is not int or not 1 <= n <= 16777216:
            raise ValueError("step: n must be an int in 1..16777216, got %r" % (n,))
        check = F.update_f32_check
        for ly in layers:
            i = check(ly.gw)
            j = check(ly.gb)
            if i >= 0 or j >= 0:
                raise ValueError("step: layer %s: %s is not finite (a diverged gradient; nothing was "
                                 "updated)" % (ly.name, ("gw[%d]" % i) if i >= 0 else ("gb[%d]" % j)))
        for ly in layers:
            self.state(ly)  # allocate before anything is written
            c = len(ly.b) << (ly._fold is not None)  # apply_keep: the new scales and biases
            if ly._row is None or len(ly._row) != c:
                ly._row = zeros("f", c)
            if ly._fold is not None and n != 1:
                raise ValueError("step: layer %s adds its gradient into the momentum (Trainer batch 1): "
                                 "n must be 1, got %d" % (ly.name, n))
        self.begin(self.steps + 1)
        r = self.rng
        for ly in layers:
            st = self._st.get(ly.index)
            sr = self.rounding == "stochastic" or (self.rounding == "auto" and ly.master_w is None)
            if ly._fold is None:
                pp = ly._params
                if pp is None:  # made once per layer: the scales of its input and output do not change
                    pp = ly._params = (Param(ly, False), Param(ly, True), ly.in_scale, ly.out_scale)
                pw, pb, s_in, s_out = pp
                pw.touched = pb.touched = ly.touched
                pw.master, pb.master = ly.master_w, ly.master_b
                self.direction(pw, st, n)
                self.direction(pb, st, n)
                apply = F.update_s8_apply
            else:  # gw / gb are the momentum, the gradient already in it (model._fold); no views
                s_in, s_out = ly.in_scale, ly.out_scale
                if not ly._folded:  # no gradient reached it: v = m v + 0, as update_f32_momentum
                    F.update_f32_scale(ly.gw, len(ly.gw) // len(ly.gb), ly.touched, ly._fold)
                    F.update_f32_scale(ly.gb, 1, ly.touched, ly._fold)
                    ly._folded = True
                apply = F.update_s8_apply_keep
            r2 = apply(ly.w, ly.w_scale, ly.b, ly.mult, ly.shift, ly.gw, ly.gb, ly.master_w, ly.master_b,
                       ly.touched, lr, s_in, s_out, r if sr else -1, ly._row)
            if ly._fold is not None:
                ly._folded = False
            if sr:
                r = r2
            ly.touched = None
            ly.refresh_ratios()
        self.rng = r
        self.steps += 1
        layers[0].model.train_steps += 1  # optimiser updates, saved in checkpoints


class SGD(_Optimizer):
    """SGD with optional momentum, L2 weight decay and gradient standardisation."""

    def __init__(self, lr=0.01, momentum=0.0, weight_decay=0.0, standardize=False, rounding="auto"):
        super().__init__(lr, weight_decay, standardize, rounding)
        self.momentum = _num("momentum", momentum, 0.0, False, 1.0)
        self.n_state = 1 if momentum else 0

    def direction(self, p, st, n):
        if n != 1 or self.standardize or self.weight_decay:
            self.prepare(p, n)
        if st is not None:
            F.update_f32_momentum(p.g, st[p.i], p.k, p.touched, self.momentum)  # v = m v + d; d = v

    def __repr__(self):
        return "SGD(lr=%g, momentum=%g, weight_decay=%g, standardize=%s, rounding=%r)" % (
            self.lr, self.momentum, self.weight_decay, self.standardize, self.rounding)


class Adam(_Optimizer):
    """Adam (Kingma & Ba) with bias correction; state only for trained layers."""

    n_state = 2

    def __init__(self, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, standardize=False,
                 rounding="auto"):
        super().__init__(lr, weight_decay, standardize, rounding)
        self.beta1 = _num("beta1", beta1, 0.0, False, 1.0)
        self.beta2 = _num("beta2", beta2, 0.0, False, 1.0)
        self.eps = _num("eps", eps, 0.0, True)
        self._bt = array.array("f", (1.0, 1.0, 1.0, 1.0))  # beta1^t, beta2^t (float32 products); next

    def begin(self, t):
        # beta^t as a running float32 product (exact on every build); kept on success only
        bt = self._bt
        bt[2] = bt[0] * _f32(self.beta1)
        bt[3] = bt[1] * _f32(self.beta2)

    def direction(self, p, st, n):
        self.prepare(p, n)
        bt = self._bt
        F.update_f32_adam(p.g, st[p.i], st[p.i + 2], p.k, p.touched, self.beta1, self.beta2, bt[2], bt[3],
                          self.eps)

    def step(self, layers, n=1, lr=None):
        super().step(layers, n, lr)
        bt = self._bt
        bt[0], bt[1] = bt[2], bt[3]

    def __repr__(self):
        return "Adam(lr=%g, betas=(%g, %g), eps=%g, weight_decay=%g, standardize=%s, rounding=%r)" % (
            self.lr, self.beta1, self.beta2, self.eps, self.weight_decay, self.standardize, self.rounding)


class Now:
    """Batch 1, plain SGD (Trainer sums=None / False): no gradient sums. Backward hands each
    trained layer's gradient here right after the layer's grad input (TTE's operator
    reordering; docs/memory.md): the grad-weight kernel adds a window of output channels
    (at most WINDOW floats, at least one channel) into one shared zeroed buffer and
    update_s8_apply steps those channels (zeroing it again), window after window. The
    arithmetic of each channel is the sums path's (g = 0 + one rounded term per value,
    direction g, the same apply), so are the bits; the stochastic-rounding draws too:
    without a sparse policy every channel draws, and each layer starts at the state the
    sums path's step (layers in forward order) gives it, a precomputed xorshift16 jump;
    with one (sums=False) the draws follow the update order, last layer first."""

    def __init__(self, opt, layers, sparse, window=WINDOW):
        self.opt = opt
        self.lr = opt.lr  # the Trainer sets each sample's rate
        n = m = 0
        off = 0
        self.sparse = sparse is not None
        self.info = {}  # layer index -> (channels per window, window mask, stochastic, jump)
        for ly in layers:
            nc = len(ly.b)
            k = len(ly.w) // nc
            cc = min(nc, max(1, window // k))
            n = max(n, cc * k)
            m = max(m, cc)
            sr = opt.rounding == "stochastic" or (opt.rounding == "auto" and ly.master_w is None)
            j = _jump(off) if sr and sparse is None and off else None
            self.info[ly.index] = (cc, bytearray(nc) if cc < nc else None, sr, j)
            if sr:
                off += len(ly.w)
        self.total = _jump(off) if sparse is None and off else None
        self.gw = zeros("f", n)
        self.gb = zeros("f", m)
        self.row = zeros("f", m)
        c = max(len(ly.b) for ly in layers)
        self.zero = bytes(c)
        self.ones = b"\x01" * c
        self.r = None  # the running generator state in update order (sparse policy)
        self.done = []  # the layers stepped since the last end()

    def layer(self, ly, gwk, p, x, e, mask, sw, s):
        """Step trained layer ly with the gradient of one sample (gwk: its float32 grad-weight
        kernel, p, x, e, mask, sw, s its arguments), or with none (gwk None)."""
        lr = self.lr
        lim = _LIM / lr if lr > 0 else 3.4e38
        if not (-lim <= sw <= lim and -lim <= s <= lim):  # (NaN fails too)
            raise ValueError("backward: layer %s: gradient scale %r is not finite or too large for lr %r (a "
                             "diverged gradient; lower the learning rate)" % (ly.name, sw, lr))
        opt = self.opt
        cc, win, sr, j = self.info[ly.index]
        r = -1
        if sr:
            r = opt.rng
            if self.sparse:
                if self.r is not None:
                    r = self.r
            elif j is not None:
                r = _mat_apply(j, r)
        nc = len(ly.b)
        k = len(ly.w) // nc
        s_in, s_out = ly.in_scale, ly.out_scale
        t = ly.touched
        gw, gb, row = self.gw, self.gb, self.row
        apply = F.update_s8_apply
        try:
            if cc == nc:  # the whole layer in one window
                gwv = gw if len(gw) == nc * k else memoryview(gw)[:nc * k]
                gbv = gb if len(gb) == nc else memoryview(gb)[:nc]
                if gwk is not None:
                    gwk(p, x, e, mask, sw, s, gwv, gbv)
                r = apply(ly.w, ly.w_scale, ly.b, ly.mult, ly.shift, gwv, gbv, ly.master_w, ly.master_b, t,
                          lr, s_in, s_out, r, row if len(row) == nc else memoryview(row)[:nc])
            else:
                src = memoryview(mask) if mask is not None else memoryview(self.ones)
                W, WS, B, M, S = (memoryview(ly.w), memoryview(ly.w_scale), memoryview(ly.b),
                                  memoryview(ly.mult), memoryview(ly.shift))
                MW = memoryview(ly.master_w) if ly.master_w is not None else None
                MB = memoryview(ly.master_b) if ly.master_b is not None else None
                T = memoryview(t) if t is not None else None
                Z = memoryview(self.zero)
                WV = memoryview(win)
                for c0 in range(0, nc, cc):
                    c1 = c0 + cc if c0 + cc < nc else nc
                    w0, w1 = c0 * k, c1 * k
                    if mask is not None and mask.find(b"\x01", c0, c1) < 0:
                        continue  # no channel of the window selected (and none draws)
                    n = c1 - c0
                    gwv = memoryview(gw)[:n * k]
                    gbv = memoryview(gb)[:n]
                    if gwk is not None:  # the window's channels only, into rows 0..n-1
                        WV[:] = Z[:nc]
                        WV[c0:c1] = src[c0:c1]
                        gwk(p, x, e, win, sw, s, gwv, gbv, c0)
                    r = apply(W[w0:w1], WS[c0:c1], B[c0:c1], M[c0:c1], S[c0:c1], gwv, gbv,
                              MW[w0:w1] if MW is not None else None, MB[c0:c1] if MB is not None else None,
                              T[c0:c1] if T is not None else None, lr, s_in, s_out, r, memoryview(row)[:n])
        except BaseException:
            gw[:] = array.array("f", bytes(4 * len(gw)))  # the window dirty: zeroed again
            gb[:] = array.array("f", bytes(4 * len(gb)))
            raise
        if sr:
            self.r = r
        ly.touched = None
        ly.refresh_ratios()
        self.done.append(ly)

    def end(self, layers):
        """The bookkeeping of an optimiser step whose layers stepped during backward (a layer no
        gradient reached steps now with none, as the sums path steps it)."""
        done = self.done
        for ly in layers:
            if ly not in done:
                self.layer(ly, None, None, None, None, None, 0.0, 0.0)
        opt = self.opt
        if not self.sparse:
            if self.total is not None:
                opt.rng = _mat_apply(self.total, opt.rng)
        elif self.r is not None:
            opt.rng = self.r
        self.r = None
        self.done = []
        opt.steps += 1
        layers[0].model.train_steps += 1

    def abandon(self):
        """After a failed backward: the layers above the failure took their step (counted);
        the rest did not."""
        if self.done:
            opt = self.opt
            if self.r is not None:
                opt.rng = self.r
            opt.steps += 1
            self.done[0].model.train_steps += 1
        self.r = None
        self.done = []


def _xs_cols(cols):
    # the xorshift16 step (as update_s8_apply's) is linear over GF(2)^16: its matrix as the
    # images of the 16 unit vectors, and jumps of n steps as its powers
    out = []
    for c in cols:
        c ^= (c << 7) & 0xFFFF
        c ^= c >> 9
        c ^= (c << 8) & 0xFFFF
        out.append(c)
    return out


def _mat_apply(cols, r):
    out = 0
    j = 0
    while r:
        if r & 1:
            out ^= cols[j]
        r >>= 1
        j += 1
    return out


def _jump(n):
    """The matrix (16 column ints) of n xorshift16 steps: _mat_apply(_jump(n), r) ==
    xorshift16_skip(r, n)."""
    res = [1 << j for j in range(16)]
    base = _xs_cols(res)
    n %= 65535
    while n:
        if n & 1:
            res = [_mat_apply(base, c) for c in res]
        base = [_mat_apply(base, c) for c in base]
        n >>= 1
    return res


def xorshift16_skip(r, n):
    """The stochastic-rounding generator state n draws after r (period 65535),
    as update_s8_apply steps it."""
    for _ in range(n % 65535):
        r ^= (r << 7) & 0xFFFF
        r ^= r >> 9
        r ^= (r << 8) & 0xFFFF
    return r


def make_master(ly):
    """Float32 master copy of a trained layer's weights and bias (float modes):
    the dequantised values (w_q * w_scale[c], (b_q * s_in) * w_scale[c]),
    computed in float32 by update_f32_decay (0 * 1 + 1 * real)."""
    k = len(ly.w) // len(ly.b)
    mw = zeros("f", len(ly.w))
    mb = zeros("f", len(ly.b))
    F.update_f32_decay(mw, k, None, 1, 1.0, ly.w, ly.w_scale, 1.0, None)
    F.update_f32_decay(mb, 1, None, 1, 1.0, ly.b, ly.w_scale, ly.in_scale, None)
    ly.master_w, ly.master_b = mw, mb
