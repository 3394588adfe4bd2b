# Update modes: how a trained layer's gradient reaches its weights, one object per model
# (model.update, made by set_trained and a Trainer), loaded when a model is first trained.
# Every mode has
#   late                     grad runs after the layer's grad input (else before it)
#   grad(ly, gwk, p, x, e, mask, sw, s)   one sample's gradient of trained layer ly (Model.backward;
#                            gwk its float32 grad-weight kernel, the rest that kernel's arguments)
#   step(opt, layers, n, lr) the optimiser's step (opt.step; opt.apply does the common part)
#   failed(opt, layers)      after a backward that raised (Trainer.step)
#   forget(ly)               ly's scales changed (range adaptation)
#   release()                set_trained replaces the mode: what it lent the layers goes back
# stepwise.StepInBackward (each layer steps during backward) is the third, loaded on use.
from microtrain.optim import F, Param


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
