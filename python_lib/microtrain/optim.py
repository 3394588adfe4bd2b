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

from microtrain import kern
from microtrain.quant import zeros


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
        self.lr = _num("lr", lr, 0.0, True)  # the configured rate: a schedule's lr0
        self.rate = self.lr  # the rate of the next update (set_rate)
        self.weight_decay = _num("weight_decay", weight_decay, 0.0, False)
        if rounding not in ("auto", "nearest", "stochastic"):
            raise ValueError("rounding must be 'auto', 'nearest' or 'stochastic'")
        self.rounding = rounding
        self.rng = 0xACE1  # xorshift16 state of stochastic rounding (small ints on every port)
        self.standardize = standardize
        self.steps = 0
        self._st = {}  # layer index -> state arrays
        self._row = None

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

    def resume_bias_correction(self, bits):
        """Continue a checkpoint's bias correction: bits = the float32 bits of (beta1^t, beta2^t)
        (its trainer record). Nothing for optimisers without one."""

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

    def set_rate(self, v, who="lr"):
        """The rate of the next updates (`rate`; Trainer.lr and the schedule each epoch set
        it): a finite number >= 0, the one check of a rate."""
        if type(v) not in (int, float) or not v >= 0 or v - v != 0:  # also refuses NaN and inf
            raise ValueError("%s must be a finite number >= 0, got %r" % (who, v))
        self.rate = v

    def step(self, layers, n=1, lr=None):
        """Apply the gradients summed over n samples to every layer in
        `layers` (a Model: its trained layers), then zero the sums, with lr (default `rate`).

        All or nothing: arguments and gradient sums are checked before any
        state changes, so a failing step raises one ValueError and leaves
        weights, scales, biases, masters, moments, sums and counters as they were."""
        if not isinstance(layers, (list, tuple)):
            layers = layers.trained_layers
        if not layers:
            raise ValueError("step: no trained layers (use model.set_trained or a Trainer first)")
        upd = layers[0].model.update
        if upd is None:  # layers made trainable by hand (Layer.make_trainable): their sums
            upd = Sums()
        upd.step(self, layers, n, lr)

    def apply(self, layers, n, lr, upd):
        """The update of `layers` from what the update mode upd (Sums, IntoMomentum) holds:
        the checks, then per layer upd.apply with the shared scratch row and generator."""
        if lr is not None:
            self.set_rate(lr, "step: lr")  # (a schedule may reach 0)
        lr = self.rate
        if type(n) is not int or not 1 <= n <= 16777216:
            raise ValueError("step: n must be an int in 1..16777216, got %r" % (n,))
        check = F.update_f32_check
        for ly in layers:
            i = check(ly.gw)
            j = check(ly.gb)
            if i >= 0 or j >= 0:
                raise ValueError("step: layer %s: %s is not finite (a diverged gradient; nothing was "
                                 "updated)" % (ly.name, ("gw[%d]" % i) if i >= 0 else ("gb[%d]" % j)))
        c = 0
        for ly in layers:
            self.state(ly)  # allocate before anything is written
            k = upd.row(ly, n)  # the floats of the update's scratch row this layer needs
            if k > c:
                c = k
        # the update's scratch, one for every layer (they step one after another): backward's
        # int32 scratch as float32 where it is long enough (idle now), else a row of its own
        bw = layers[0].model.backward_plan
        row = bw.frow if bw is not None else None
        if row is None or len(row) < c:
            row = self._row
            if row is None or len(row) < c:
                row = self._row = zeros("f", c)
        self.begin(self.steps + 1)
        r = self.rng
        rnd = self.rounding
        # the first trained layer's grad input never runs (nothing below it takes errors): its
        # ratios wait for the next set_trained (make_trainable refreshes them)
        low = bw.first if bw is not None else -1
        for ly in layers:
            t = ly.touched
            sr = rnd == "stochastic" or (rnd == "auto" and ly.master_w is None)
            r2 = upd.apply(self, ly, n, lr, r if sr else -1, row)  # (its first channels used)
            if sr:
                r = r2
            if t is not None:  # (no instance attribute where the class default stands)
                ly.touched = None
            if ly.index != low:
                ly.refresh_ratios()
        self.rng = r
        self.steps += 1
        layers[0].model.train_steps += 1  # optimiser updates, saved in checkpoints


# -- update modes ------------------------------------------------------------------------
# How a trained layer's gradient reaches its weights: one object per model (model.update,
# made by set_trained and a Trainer). Every mode has
#   late                     grad runs after the layer's grad input (else before it)
#   grad(ly, gwk, p, x, e, mask, sw, s)   one sample's gradient of trained layer ly (Model.backward;
#                            gwk its float32 grad-weight kernel, the rest that kernel's arguments)
#   step(opt, layers, n, lr) the optimiser's step (opt.step)
#   failed(opt, layers)      after a backward that raised (Trainer.step)
#   forget(ly)               ly's scales changed (range adaptation)
#   release()                set_trained replaces the mode: what it lent the layers goes back
# stepwise.StepInBackward (each layer steps during backward) is the third, loaded on use.


class Sums:
    """The default update mode: backward adds each sample's gradient into the trained
    layer's float32 sums gw / gb; the step turns them into the optimiser's direction and
    applies it (update_s8_apply)."""

    late = False

    def __init__(self):
        self.views = {}  # layer index -> (Param w, Param b, s_in, s_out), made at its first step

    def grad(self, ly, gwk, p, x, e, mask, sw, s):
        if ly.gw is None:
            raise ValueError("backward: layer %s keeps no gradient sums (set_trained(sums=False)): "
                             "only a Trainer steps it" % ly.name)
        gwk(p, x, e, mask, sw, s, ly.gw, ly.gb)

    def step(self, opt, layers, n, lr):
        opt.apply(layers, n, lr, self)

    def row(self, ly, n):
        return len(ly.b)

    def apply(self, opt, ly, n, lr, r, row):
        pp = self.views.get(ly.index)
        if pp is None:  # made once per layer: the scales of its input and output do not change
            pp = self.views[ly.index] = (Param(ly, False), Param(ly, True), ly.in_scale, ly.out_scale)
        pw, pb, s_in, s_out = pp
        t, mw, mb = ly.touched, ly.master_w, ly.master_b
        pw.touched = pb.touched = t
        pw.master, pb.master = mw, mb
        st = opt.state(ly)
        opt.direction(pw, st, n)
        opt.direction(pb, st, n)
        return F.update_s8_apply(ly.w, ly.w_scale, ly.b, ly.mult, ly.shift, ly.gw, ly.gb, mw, mb, t, lr, s_in,
                                 s_out, r, row)

    def failed(self, opt, layers):
        pass

    def forget(self, ly):
        self.views.pop(ly.index, None)

    def release(self):
        pass


class IntoMomentum:
    """SGD momentum without gradient sums (Trainer: batch 1 by default on a build whose float
    kernels have an FPU, or sums=False): the trained layers' gw / gb are the optimiser's
    momentum v. At the first sample of a batch backward scales v by the momentum m (the
    sample's channels at batch 1; at batch n > 1 every channel: no sparse policy), and the
    grad-weight kernel adds each gradient into v, its scales / n: the bits of
    update_f32_momentum's m * v + g at batch 1 (each gradient value is one rounded term),
    v = m v + sum g / n at batch n. The step applies v (update_s8_apply_keep)."""

    late = False

    def __init__(self, momentum, batch, layers, opt):
        self.m = momentum
        self.n = batch  # each gradient enters v scaled by 1 / n
        # a scale bound keeps v finite (|term| <= scale * 2^31 and |v| <= max|term| / (1 - m)):
        # FLT_MAX (1 - m) / 2^33, per sample at any batch
        self.limit = 3.4e38 * (1.0 - momentum) / 8589934592.0
        self.layers = layers
        self.folded = set()  # indices of the layers whose v is scaled since the last update
        for ly in layers:
            ly.gw, ly.gb = opt.state(ly)  # optimiser state now, while large free blocks remain

    def grad(self, ly, gwk, p, x, e, mask, sw, s):
        # past the bound the gradient has diverged and this layer is left as it was (the layers
        # above have taken the sample: failed() completes their step at batch 1)
        n = self.n
        folded = ly.index in self.folded
        if folded and n == 1:
            raise ValueError("backward: layer %s adds its gradient into the momentum (Trainer batch 1): "
                             "one backward per update" % ly.name)
        lim = self.limit
        if not (-lim <= sw <= lim and -lim <= s <= lim):  # (NaN fails too)
            raise ValueError("backward: layer %s: gradient scale %r is not finite or too large (a diverged "
                             "gradient; lower the learning rate)" % (ly.name, sw))
        if not folded:  # v = m * v now (the sample's channels)
            gb = ly.gb
            F.update_f32_scale(ly.gw, len(ly.gw) // len(gb), mask, self.m)
            F.update_f32_scale(gb, 1, mask, self.m)
            self.folded.add(ly.index)
        if n != 1:  # (the platform float's quotient, rounded to float32 by the kernel's binding)
            sw, s = sw / n, s / n
        gwk(p, x, e, mask, sw, s, ly.gw, ly.gb)

    def step(self, opt, layers, n, lr):
        opt.apply(layers, n, lr, self)

    def row(self, ly, n):
        if n > self.n:  # v holds the samples already, each / batch
            raise ValueError("step: layer %s adds its gradient into the momentum (Trainer batch %d): "
                             "n must be at most %d, got %d" % (ly.name, self.n, self.n, n))
        return len(ly.b) << 1  # apply_keep: the new scales and biases

    def apply(self, opt, ly, n, lr, r, row):
        t = ly.touched
        if ly.index not in self.folded:  # no gradient reached it: v = m v + 0, as update_f32_momentum
            F.update_f32_scale(ly.gw, len(ly.gw) // len(ly.gb), t, self.m)
            F.update_f32_scale(ly.gb, 1, t, self.m)
            self.folded.add(ly.index)  # (a refused step leaves v scaled once)
        r = F.update_s8_apply_keep(ly.w, ly.w_scale, ly.b, ly.mult, ly.shift, ly.gw, ly.gb, ly.master_w,
                                   ly.master_b, t, lr, ly.in_scale, ly.out_scale, r, row)
        self.folded.discard(ly.index)
        return r

    def failed(self, opt, layers):
        # batch 1: the layers above the one that failed hold the sample in their momentum: their
        # step. A larger batch steps at its end: those layers keep the failed sample's share in v
        if self.n == 1:
            done = [ly for ly in layers if ly.index in self.folded]
            if done:
                opt.step(done, 1)

    def forget(self, ly):
        pass

    def release(self):
        for ly in self.layers:  # the momentum goes back to the optimiser alone
            ly.gw = ly.gb = ly.grad = None


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
