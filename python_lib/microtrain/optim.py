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
            c = len(ly.w_scale)
            if len(ly.b) > c:  # a GRU: b_hn after its 3H rows' biases, its row's scale (no weight decay)
                sc = self.scale = zeros("f", len(ly.b))
                sc[:c] = ly.w_scale
                sc[c:] = ly.w_scale[c - (len(ly.b) - c):]
        else:
            self.g, self.k, self.q, self.f, self.master, self.i = (ly.gw, len(ly.w) // len(ly.w_scale), ly.w,
                                                                   1.0, ly.master_w, 0)


class _Optimizer:
    n_state = 0  # state arrays per tensor (SGD momentum 1, Adam 2)
    half = False  # state='bf16': each state value in 2 bytes (an instance attribute only then)

    def __init__(self, lr, weight_decay, standardize, rounding="auto", state="f32"):
        self.lr = _num("lr", lr, 0.0, True)  # the configured rate: a schedule's lr0
        self.rate = self.lr  # the rate of the next update (set_rate)
        self.weight_decay = _num("weight_decay", weight_decay, 0.0, False)
        if rounding not in ("auto", "nearest", "stochastic"):
            raise ValueError("rounding must be 'auto', 'nearest' or 'stochastic'")
        self.rounding = rounding
        if state != "f32":
            if state != "bf16":
                raise ValueError("state must be 'f32' or 'bf16', got %r" % (state,))
            self.half = True
        self.rng = 0xACE1  # xorshift16 state of stochastic rounding (small ints on every port)
        self.standardize = standardize
        self.steps = 0
        self._st = {}  # layer index -> state arrays
        self._row = None

    def state(self, ly):
        """The optimiser's state arrays for layer ly (made on first use),
        n_state per tensor: [w, b] (SGD momentum), [m_w, m_b, v_w, v_b] (Adam);
        None when n_state is 0. float32 arrays, or with state='bf16' bytearrays
        of 2 bytes a value (bfloat16, docs/numerics.md)."""
        st = self._st.get(ly.index)
        if st is None and self.n_state:
            st = []
            for _ in range(self.n_state):
                if self.half:
                    st += [bytearray(2 * len(ly.w)), bytearray(2 * len(ly.b))]
                else:
                    st += [zeros("f", len(ly.w)), zeros("f", len(ly.b))]
            self._st[ly.index] = st
        return st

    def state_tensors(self, ly, raw=False):
        """The state a checkpoint stores for layer ly (docs/format.md, STATE
        slots 2 to 5): [weights, bias] (SGD momentum) or [m_w, m_b, v_w, v_b]
        (Adam), float32 (a bfloat16 state widened, exactly; with raw, its
        bytearrays as they are); None when there is none (yet)."""
        st = self._st.get(ly.index)
        if st is None or not self.half or raw:
            return st
        from struct import pack_into  # (saving only)

        out = []
        for a in st:
            f = bytearray(2 * len(a))
            for i in range(0, len(a), 2):  # a bfloat16 is the upper half of its float32
                pack_into("<BB", f, 2 * i + 2, a[i], a[i + 1])
            out.append(array.array("f", f))
        return out

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
        if self.half:  # rounded to bfloat16: v = bf16(0 * 0 + x) (x itself stays)
            for k in range(len(st)):
                h = bytearray(2 * len(st[k]))
                F.update_bf16_momentum(st[k], h, 1, None, 0.0)
                st[k] = h
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
        if not isinstance(layers, list) and not isinstance(layers, tuple):  # (no tuple made a step)
            layers = layers.trained_layers
        if not layers:
            raise ValueError("step: no trained layers (use model.set_trained or a Trainer first)")
        layers[0].model.update.step(self, layers, n, lr)  # (Sums from the first make_trainable on)

    def apply(self, layers, n, lr, upd):
        """The update of `layers` from what the update mode upd (backward.Sums, IntoMomentum) holds:
        the checks, then per layer upd.apply with the shared scratch row and generator."""
        if lr is not None:
            self.set_rate(lr, "step: lr")  # (a schedule may reach 0)
        lr = self.rate
        if type(n) is not int or not 1 <= n <= 16777216:
            raise ValueError("step: n must be an int in 1..16777216, got %r" % (n,))
        check = F.update_f32_check
        for ly in layers:
            if ly.gw is None and type(upd).__name__ == "IntoMomentum":
                continue  # a bfloat16 momentum taking the gradients: finite by its scale bound
            i = check(ly.gw)
            j = check(ly.gb)
            if i >= 0 or j >= 0:
                raise ValueError("step: layer %s: %s is not finite (a diverged gradient; nothing was "
                                 "updated)" % (ly.name, ("gw[%d]" % i) if i >= 0 else ("gb[%d]" % j)))
        c = 0
        for ly in layers:
            if self._st.get(ly.index) is None:  # allocate before anything is written (made once)
                self.state(ly)
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


class SGD(_Optimizer):
    """SGD with optional momentum, L2 weight decay and gradient standardisation."""

    def __init__(self, lr=0.01, momentum=0.0, weight_decay=0.0, standardize=False, rounding="auto",
                 state="f32"):
        super().__init__(lr, weight_decay, standardize, rounding, state)
        self.momentum = _num("momentum", momentum, 0.0, False, 1.0)
        self.n_state = 1 if momentum else 0

    def direction(self, p, st, n):
        if n != 1 or self.standardize or self.weight_decay:
            self.prepare(p, n)
        if st is not None:  # v = m v + d; d = v
            (F.update_bf16_momentum if self.half else F.update_f32_momentum)(p.g, st[p.i], p.k, p.touched,
                                                                              self.momentum)

    def __repr__(self):
        return "SGD(lr=%g, momentum=%g, weight_decay=%g, standardize=%s, rounding=%r%s)" % (
            self.lr, self.momentum, self.weight_decay, self.standardize, self.rounding,
            ", state='bf16'" if self.half else "")


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
