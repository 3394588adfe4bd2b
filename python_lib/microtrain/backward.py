# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# Backward: the error of the model's output carried back through the layers from the
# first trained one on (Model.backward); its buffers are placed by plan.backward_plan.
# Loaded by the first set_trained: a model that only runs inference never holds it.
#
# One function per op in BACKWARD (op code -> function), in the order of Model._step's
# forward kernels (model.py): an op's forward is found there, its backward here under the
# same name. A trained layer's gradient goes to the model's update mode (model.update: the
# optimiser's gradient sums, the momentum, or a step during backward: Sums and IntoMomentum
# at the end of this module, stepwise.StepInBackward).
import math

from micropython import const

# (modules, not their names: fewer entries in this module's globals, which live in RAM)
from microtrain import kern, optim, quant

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
# The .mtm constants this module reads, private: inlined, no globals entry.
_OP_CONV2D = const(1)
_OP_LINEAR = const(2)
_OP_RELU = const(3)
_OP_RELU6 = const(4)
_OP_MAXPOOL = const(5)
_OP_AVGPOOL = const(6)
_OP_GAP = const(7)
_OP_ADD = const(8)
_OP_LUT = const(9)
_OP_CONCAT = const(10)
_OP_UPSAMPLE = const(11)
_OP_MUL = const(12)
_OP_LAYERNORM = const(13)
_OP_SOFTMAX = const(14)
_OP_MATMUL = const(15)
_OP_GRU = const(16)
_ACT_RELU = const(1)
_ACT_RELU6 = const(2)
# --- generated: end

K = kern.K

# Descriptor entries read here (docs/numerics.md, "Python binding"; model.py reads the
# forward ones)
_P_ACT_MIN = const(-2)  # conv2d, linear, add: the fused activation's clamp is the
_P_ACT_MAX = const(-1)  # last two entries (act_min = out_zp; act_max = q6 for relu6)
_P_RELU_ZP = const(1)  # relu / relu6: (n, zp[, q6])
_P_RELU6_Q6 = const(2)
_P_GAP_HW = const(0)  # global_avgpool: (hw, c)
_P_LUT_DSHIFT = const(3)  # lut: (n, in_zp, out_zp, d_shift)


class BackwardPlan:
    """What set_trained prepares for backward: the first trained layer, the tensors whose
    error is propagated (region), the forward buffers kept for it (bufs), the int8 error
    buffers (ebuf; for a tensor read by two layers also esecond, the second error to
    arrive, and emerge, the two merged), the int32 accumulator view per layer that uses
    one (acc_views), the activations taking their own error (inplace: {tensor: its
    producer}), the float32 gradient window's bytes (window, or None), the float32 view of
    the int32 scratch (frow: the optimiser's update row, or None) and the forward to run
    again before a pool's backward (redo: (pool index, producer index), or None), and the
    float32 grad-weight kernels (grad_weight[conv]: linear's, conv2d's; looked up once)."""

    def __init__(self, first, region, bufs, ebuf, esecond, emerge, acc_views, inplace, window, frow, redo):
        self.first = first
        self.inplace = inplace
        self.region = region
        self.bufs = bufs
        self.ebuf = ebuf
        self.esecond = esecond
        self.emerge = emerge
        self.acc_views = acc_views
        self.window = window
        self.frow = frow
        self.redo = redo
        self.grad_weight = (kern.f32("linear_s8_grad_weight_f32"), kern.f32("conv2d_s8_grad_weight_f32"))


def act_keep(ly):
    """(lo, hi): the outputs of ly whose error its fused activation keeps, lo < y < hi (as
    relu_s8_backward / relu6_s8_backward; -129, 128: all), from its current descriptor."""
    p = ly.params
    if ly.act == _ACT_RELU:
        return p[_P_ACT_MIN], 128
    if ly.act == _ACT_RELU6:
        return p[_P_ACT_MIN], p[_P_ACT_MAX]
    return -129, 128


# -- the pass ----------------------------------------------------------------------------

def run(m, err, err_scale, policy):
    """Model.backward (docs/api.md): the layers from the last to the first trained one; each
    layer whose output error is complete (every consumer has arrived) runs its op's
    function, which hands the error of its input(s) on."""
    bw = m.backward_plan
    first = bw.first
    out_t = m.output.index
    cur = {out_t: err}  # tensor -> its int8 error so far
    scale = {out_t: err_scale}  # tensor -> that error's scale
    bufs, inplace, redo = bw.bufs, bw.inplace, bw.redo
    layers = m.layers
    table = BACKWARD
    for j in range(len(layers) - 1, first - 1, -1):
        ly = layers[j]
        t_out = ly.output
        e = cur.pop(t_out, None)  # (every consumer has arrived: its entries are done)
        if e is None:
            continue
        if redo is not None and j == redo[0]:  # its input held the scratch: made again
            st = m.plan(first)[1][redo[1]]
            st[0](*st[1])
        s = scale.pop(t_out)
        if t_out in inplace:
            pass  # masked by the pool below, which wrote the error over y
        elif ly.act == _ACT_RELU:
            K.relu_s8_backward(bufs[t_out], ly.params[_P_ACT_MIN], e)
        elif ly.act == _ACT_RELU6:
            p = ly.params
            K.relu6_s8_backward(bufs[t_out], p[_P_ACT_MIN], p[_P_ACT_MAX], e)
        table[ly.op](m, bw, cur, scale, ly, j, e, s, policy)
    upd = m.update
    if upd is not None and upd.late:  # stepwise.StepInBackward: the steps, now that none failed
        upd.after_backward()


def _dest(bw, cur, t):
    # the buffer for an error of t: its first, or the second to arrive (then merged)
    return bw.ebuf[t] if t not in cur else bw.esecond[t]


def _arrive(bw, cur, scale, t, dest, s):
    # the error dest (scale s) of tensor t is written: t's first, or merged with the one there
    if t not in cur:
        cur[t] = dest
        scale[t] = s
        return
    # a second consumer's error: merge the two (each with its own scale)
    s0 = scale[t]
    ra, rb = quant.merge_ratios(s0, s)
    emerge = bw.emerge
    out = emerge[t]
    sh = K.add_s8_grad_merge(cur[t], ra, dest, rb, out)
    emerge[t] = cur[t]
    bw.ebuf[t] = out
    cur[t] = out
    scale[t] = math.ldexp(s0 if s0 > s else s, sh - 15)


# -- one function per op (forward: Model._step) -------------------------------------------

def conv2d(m, bw, cur, scale, ly, j, e, s, policy):
    """conv2d and linear: the trained layer's gradient (to the update mode), then the
    error of the input through the int8 weights."""
    x_t = ly.inputs[0]
    need = x_t in bw.region
    conv = ly.op == _OP_CONV2D
    p = ly.params
    mask = upd = None  # (gwk, x, sw: set with upd, read only with it)
    if ly.trained:
        if ly.output not in bw.bufs:
            # made by windows of channels, e its pool's error (over.py split): x the split's list, gwk
            # its grad-weight kernel (over.py wg: first the shift of every window), mask / gwk the largest |e|
            # (the frame's names, no more: it is on the heap)
            x = m._fused[bw.first][j][1]
            mask, gwk = max(e), min(e)
            x[7] = mask if mask >= -gwk else gwk
            x[8], x[9] = ly, bw.grad_weight[1]
            x[10], x[11] = act_keep(ly)
            gwk, mask = x[6], bw.bufs[x_t]
            s = math.ldexp(s, gwk(x, mask, e, None, 0.0, 0.0, None, None) - 16)
            m.update.grad(ly, gwk, x, mask, e, None, m.tensors[x_t].scale * s, s)
            x[8] = x[9] = None
            return
        if policy is not None:
            mask = policy(ly, e)
            ly.touch(mask)  # the update skips channels no sample touched
        x = bw.bufs[x_t]
        sw = m.tensors[x_t].scale * s
        gwk = bw.grad_weight[conv]
        upd = m.update
        if not upd.late:
            upd.grad(ly, gwk, p, x, e, mask, sw, s)
    if need:
        # (_dest written out: a Python call per layer and sample saved)
        dest = bw.ebuf[x_t] if x_t not in cur else bw.esecond[x_t]
        gin = K.conv2d_s8_grad_input if conv else K.linear_s8_grad_input
        a = bw.inplace.get(x_t)  # over the activation: its producer's mask as it writes
        if a is not None and a.act:
            lo, hi = act_keep(a)
            sh = gin(p, e, ly.w, ly.wr, mask, bw.acc_views[j], dest, lo, hi)
        else:
            sh = gin(p, e, ly.w, ly.wr, mask, bw.acc_views[j], dest)
        s_in = math.ldexp(s * ly.w_scale[ly._ein_i], sh - ly.ein_r)  # (ein_top without the property's call)
    if upd is not None and upd.late:  # after its grad input used the weights (stepwise.StepInBackward)
        upd.grad(ly, gwk, p, x, e, mask, sw, s)
    if need:
        if x_t not in cur:  # (the usual case, without a call)
            cur[x_t] = dest
            scale[x_t] = s_in
        else:
            _arrive(bw, cur, scale, x_t, dest, s_in)


linear = conv2d


def lut(m, bw, cur, scale, ly, j, e, s, policy):
    """From the stored input; base scale s * 2^-d_shift."""
    x_t = ly.inputs[0]
    if x_t in bw.region:
        dest = _dest(bw, cur, x_t)
        sh = K.lut_s8_grad_input(bw.bufs[x_t], e, ly.dtable, dest)
        _arrive(bw, cur, scale, x_t, dest, math.ldexp(s, sh - ly.params[_P_LUT_DSHIFT]))


def relu(m, bw, cur, scale, ly, j, e, s, policy):
    """relu and relu6 layers: the error where the stored output is inside the range."""
    x_t = ly.inputs[0]
    if x_t in bw.region:
        p = ly.params
        y = bw.bufs[ly.output]
        dest = _dest(bw, cur, x_t)
        dest[:] = e
        if ly.op == _OP_RELU:
            K.relu_s8_backward(y, p[_P_RELU_ZP], dest)
        else:
            K.relu6_s8_backward(y, p[_P_RELU_ZP], p[_P_RELU6_Q6], dest)
        _arrive(bw, cur, scale, x_t, dest, s)


relu6 = relu


def maxpool(m, bw, cur, scale, ly, j, e, s, policy):
    x_t = ly.inputs[0]
    if x_t in bw.region:
        dest = bw.ebuf[x_t] if x_t not in cur else bw.esecond[x_t]  # (_dest, without the call)
        a = bw.inplace.get(x_t)
        if a is not None:  # over the activation itself, with its producer's mask
            lo, hi = act_keep(a)
            # a's sparse ranking (the L1 norms of its error) formed as the error is routed: one
            # consumer, the pool's is a's whole error
            nb = None
            if policy is not None and a.trained and x_t not in bw.esecond:
                nb = getattr(policy, "pool_norms", None)
                if nb is not None:
                    nb = nb(a)
            if nb is not None:
                sh = K.maxpool_s8_grad_input_act_l1(ly.params, bw.bufs[x_t], e, lo, hi, dest, nb)
            else:
                sh = K.maxpool_s8_grad_input_act(ly.params, bw.bufs[x_t], e, lo, hi, dest)
        else:
            sh = K.maxpool_s8_grad_input(ly.params, bw.bufs[x_t], e, bw.acc_views.get(j), dest)
        s = math.ldexp(s, sh)
        if x_t not in cur:  # (_arrive's usual case, without the call)
            cur[x_t] = dest
            scale[x_t] = s
        else:
            _arrive(bw, cur, scale, x_t, dest, s)


def avgpool(m, bw, cur, scale, ly, j, e, s, policy):
    x_t = ly.inputs[0]
    if x_t in bw.region and x_t not in bw.bufs:  # its input made by windows: its conv takes e (place.py)
        cur[x_t] = e
        scale[x_t] = s
    elif x_t in bw.region:
        p = ly.params
        dest = _dest(bw, cur, x_t)
        a = bw.inplace.get(x_t)
        if a is not None:
            lo, hi = act_keep(a)
            sh = K.avgpool_s8_grad_input_act(p, bw.bufs[x_t], e, lo, hi, dest)
        else:
            sh = K.avgpool_s8_grad_input(p, e, bw.acc_views.get(j), dest)
        _arrive(bw, cur, scale, x_t, dest, math.ldexp(s, sh - 16))


def global_avgpool(m, bw, cur, scale, ly, j, e, s, policy):
    x_t = ly.inputs[0]
    if x_t in bw.region:
        hw = ly.params[_P_GAP_HW]
        dest = _dest(bw, cur, x_t)
        K.global_avgpool_s8_grad_input(e, hw, dest)
        _arrive(bw, cur, scale, x_t, dest, s / hw)


def add(m, bw, cur, scale, ly, j, e, s, policy):
    """Each input the whole error, same scale."""
    for t in ly.inputs:
        if t in bw.region:
            dest = _dest(bw, cur, t)
            dest[:] = e
            _arrive(bw, cur, scale, t, dest, s)


def concat(m, bw, cur, scale, ly, j, e, s, policy):
    """Each input its slice of e, exact, same scale."""
    for part in (0, 1):
        t = ly.inputs[part]
        if t in bw.region:
            dest = _dest(bw, cur, t)
            K.concat_s8_grad_input(ly.params, e, part, dest)
            _arrive(bw, cur, scale, t, dest, s)


def upsample(m, bw, cur, scale, ly, j, e, s, policy):
    """The sum of the errors each input fed; base scale s."""
    x_t = ly.inputs[0]
    if x_t in bw.region:
        dest = _dest(bw, cur, x_t)
        sh = K.upsample_s8_grad_input(ly.params, e, dest)
        _arrive(bw, cur, scale, x_t, dest, math.ldexp(s, sh))


def mul(m, bw, cur, scale, ly, j, e, s, policy):
    """x1's error through x2 (base scale s * s_2), x2's summed over the elements that read
    each of its values (base scale s * s_1; int32 scratch acc_views[j])."""
    p, (t1, t2) = ly.params, ly.inputs
    ts = m.tensors
    if t2 in bw.region:  # first: x1's error may go over e (grad_x1 writes ein = e)
        dest = _dest(bw, cur, t2)
        sh = K.mul_s8_grad_x2(p, e, bw.bufs[t1], bw.acc_views[j], dest)
        _arrive(bw, cur, scale, t2, dest, math.ldexp(s * ts[t1].scale, sh))
    if t1 in bw.region:
        dest = _dest(bw, cur, t1)
        sh = K.mul_s8_grad_x1(p, e, bw.bufs[t2], dest)
        _arrive(bw, cur, scale, t1, dest, math.ldexp(s * ts[t2].scale, sh))


def layernorm(m, bw, cur, scale, ly, j, e, s, policy):
    """From the stored input; base scale s / (s_x * 2^8)."""
    x_t = ly.inputs[0]
    if x_t in bw.region:
        dest = _dest(bw, cur, x_t)
        sh = K.layernorm_s8_grad_input(ly.params, bw.bufs[x_t], e, dest)
        _arrive(bw, cur, scale, x_t, dest, math.ldexp(s / m.tensors[x_t].scale, sh - 8))


def softmax(m, bw, cur, scale, ly, j, e, s, policy):
    """From the stored output; base scale s / 2^16."""
    x_t = ly.inputs[0]
    if x_t in bw.region:
        dest = _dest(bw, cur, x_t)
        sh = K.softmax_s8_grad_input(ly.params, bw.bufs[ly.output], e, dest)
        _arrive(bw, cur, scale, x_t, dest, math.ldexp(s, sh - 16))


def matmul(m, bw, cur, scale, ly, j, e, s, policy):
    """b's error from a (base scale s * s_a * factor), then a's from b (s * s_b * factor), each
    in the int32 scratch acc_views[j]; the factor (a constant the output was multiplied by) is
    the float32 after the descriptor (its heads, 12th int, only with several)."""
    import struct

    p, (ta, tb) = ly.params, ly.inputs
    n = len(p) - 1
    d, ts, acc = p[:n], m.tensors, bw.acc_views[j]
    f = struct.unpack("<f", struct.pack("<i", p[n]))[0]
    if tb in bw.region:
        dest = _dest(bw, cur, tb)
        sh = K.matmul_s8_grad_b(d, e, bw.bufs[ta], acc[:ts[tb].numel], dest)
        _arrive(bw, cur, scale, tb, dest, math.ldexp(s * ts[ta].scale * f, sh))
    if ta in bw.region:
        dest = _dest(bw, cur, ta)
        sh = K.matmul_s8_grad_a(d, e, bw.bufs[tb], acc[:ts[ta].numel], dest)
        _arrive(bw, cur, scale, ta, dest, math.ldexp(s * ts[tb].scale * f, sh))


# indexed by op code (a list: smaller in RAM than a dict)
BACKWARD = [None] * (_OP_MATMUL + 1)  # (GRU's: microtrain.gru, loaded with a GRU's plan)
BACKWARD[_OP_CONV2D] = conv2d
BACKWARD[_OP_LINEAR] = linear
BACKWARD[_OP_LUT] = lut
BACKWARD[_OP_RELU] = relu
BACKWARD[_OP_RELU6] = relu6
BACKWARD[_OP_MAXPOOL] = maxpool
BACKWARD[_OP_AVGPOOL] = avgpool
BACKWARD[_OP_GAP] = global_avgpool
BACKWARD[_OP_ADD] = add
BACKWARD[_OP_CONCAT] = concat
BACKWARD[_OP_UPSAMPLE] = upsample
BACKWARD[_OP_MUL] = mul
BACKWARD[_OP_LAYERNORM] = layernorm
BACKWARD[_OP_SOFTMAX] = softmax
BACKWARD[_OP_MATMUL] = matmul


# Update modes: how a trained layer's gradient reaches its weights, one object per model
# (model.update, made by set_trained and a Trainer), loaded when a model is first trained.
# Every mode has
#   late                     grad runs after the layer's grad input (else before it)
#   grad(ly, gwk, p, x, e, mask, sw, s)   one sample's gradient of trained layer ly (Model.backward;
#                            gwk its float32 grad-weight kernel, the rest that kernel's arguments)
#   step(opt, layers, n, lr) the optimiser's step (opt.step; opt.apply does the common part)
#   failed(opt, layers, fresh)  after a backward or update that raised (Trainer.step); fresh bit 0:
#                            no sample was pending (the sums were zero, nothing touched), bit 1:
#                            the update raised (backward was through)
#   forget(ly)               ly's scales changed (range adaptation)
#   release()                set_trained replaces the mode: what it lent the layers goes back
# stepwise.StepInBackward (each layer steps during backward) is the third, loaded on use.
# The two here share this module with backward: one module object and globals dict less.


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
            pp = self.views[ly.index] = (optim.Param(ly, False), optim.Param(ly, True), ly.in_scale,
                                         ly.out_scale)
        pw, pb, s_in, s_out = pp
        t, mw, mb = ly.touched, ly.master_w, ly.master_b
        pw.touched = pb.touched = t
        pw.master, pb.master = mw, mb
        st = opt._st.get(ly.index)  # (opt.apply made it before any layer: state(ly) without the call)
        opt.direction(pw, st, n)
        opt.direction(pb, st, n)
        if ly.op >= _OP_GRU:  # (GRU, LSTM) microtrain.gru's, set when their plan loaded it (gru imports this)
            return self.gru_apply(ly, mw, mb, t, lr, s_in, r, row)
        return optim.F.update_s8_apply(ly.w, ly.w_scale, ly.b, ly.mult, ly.shift, ly.gw, ly.gb, mw, mb, t, lr,
                                       s_in, s_out, r, row)

    def failed(self, opt, layers, fresh):
        # the sums held nothing before the failed sample: zero them again (the layers above the
        # failing one took its gradient), bit for bit, and no channel touched
        if not fresh & 1:
            return
        z = memoryview(quant.zeros("f", 64))
        for ly in layers:
            for a in (ly.gw, ly.gb):
                n = len(a) if a is not None else 0
                try:
                    for o in range(0, n, 64):
                        k = n - o if n - o < 64 else 64
                        a[o:o + k] = z[:k]
                except (TypeError, ValueError):
                    pass  # not a float32 array (a buffer put there by hand, refused by the kernel)
            if ly.touched is not None:
                ly.touched = None

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
    v = m v + sum g / n at batch n. The step applies v (update_s8_apply_keep).
    With copy (batch 1, Trainer sums=None) a failed step changes nothing: v of each trained
    layer but the lowest is copied before it is scaled (raw: float32 bytes placed with
    backward's buffers, else a buffer of its own) and put back if a layer below fails (nothing
    can fail below the lowest). Without (sums=False: the least memory) the layers above the
    failing one take their step."""

    late = False
    copy = None  # layer index -> (copy of v's weights, of its biases), where one is made

    def __init__(self, momentum, batch, layers, opt, raw, copy):  # (no defaults: no tuple in RAM)
        self.m = momentum
        self.n = batch  # each gradient enters v scaled by 1 / n
        # a scale bound keeps v finite (|term| <= scale * 2^31 and |v| <= max|term| / (1 - m)):
        # FLT_MAX (1 - m) / 2^33, per sample at any batch
        self.limit = 3.4e38 * (1.0 - momentum) / 8589934592.0
        self.low = -self.limit  # (a float made once, not twice a layer and sample)
        self.layers = layers
        self.folded = set()  # indices of the layers whose v is scaled since the last update
        if opt.half:  # a bfloat16 v: the layers' gw / gb stay None (the mark of this mode)
            for ly in layers:
                opt.state(ly)  # optimiser state now, while large free blocks remain
            # (no local more: a larger frame of the float32 path too)
            self.win = __import__("microtrain.halfwin").halfwin.HalfWindow(layers, raw, opt)
            return
        for ly in layers:
            ly.gw, ly.gb = opt.state(ly)  # optimiser state now, while large free blocks remain
        n = 0
        if copy and batch == 1:  # every trained layer's but the lowest's (memplan.py counts the same)
            for ly in layers[1:]:
                n += len(ly.w) + len(ly.b)
        if n:
            c = None
            if raw is not None:
                try:  # retyped by the loader binding (the pure-Python one copies: not used then)
                    c = K.mtm_view(raw[:4 * n], 102)
                except (TypeError, ValueError):
                    c = None
            if c is None:
                c = quant.zeros("f", n)
            c = memoryview(c)
            self.copy = {}
            o = 0
            for ly in layers[1:]:
                nw, nb = len(ly.gw), len(ly.gb)
                self.copy[ly.index] = (c[o:o + nw], c[o + nw:o + nw + nb])
                o += nw + nb

    def grad(self, ly, gwk, p, x, e, mask, sw, s):
        # past the bound the gradient has diverged and this layer is left as it was (and, at
        # batch 1, the layers above: failed())
        n = self.n
        folded = ly.index in self.folded
        if folded and n == 1:
            raise ValueError("backward: layer %s adds its gradient into the momentum (Trainer batch 1): "
                             "one backward per update" % ly.name)
        lim, low = self.limit, self.low
        if not (low <= sw <= lim and low <= s <= lim):  # (NaN fails too)
            raise ValueError("backward: layer %s: gradient scale %r is not finite or too large (a diverged "
                             "gradient; lower the learning rate)" % (ly.name, sw))
        if ly.gw is None:  # a bfloat16 v = bf16(ftz(a v) + g), a window of channels at a time
            self.folded.add(ly.index)
            if n != 1:
                sw, s = sw / n, s / n
            self.win.a = 1.0 if folded else self.m
            self.win(ly, gwk, p, x, e, mask, sw, s)  # (a call no deeper than gwk's below: the frame's size)
            return
        if not folded:  # v = m * v now (the sample's channels)
            gb = ly.gb
            cp = self.copy
            if cp is not None:
                c = cp.get(ly.index)
                if c is not None:  # (the lowest trained layer has none)
                    c[0][:] = ly.gw
                    c[1][:] = gb
            optim.F.update_f32_scale(ly.gw, len(ly.gw) // len(gb), mask, self.m)
            optim.F.update_f32_scale(gb, 1, mask, self.m)
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
        if ly.gw is None:  # a bfloat16 v: update_s8_apply over a window of channels
            return len(ly.b)
        return len(ly.b) << 1  # apply_keep: the new scales and biases

    def apply(self, opt, ly, n, lr, r, row):
        t = ly.touched
        if ly.gw is None:  # a bfloat16 v widened into the direction (decayed first where no gradient came)
            n = 1.0 if ly.index in self.folded else self.m  # (n: no local more)
            self.folded.add(ly.index)  # (a refused step leaves v decayed once)
            r = self.win.step(ly, n, t, lr, r, row)
            self.folded.discard(ly.index)
            return r
        if ly.index not in self.folded:  # no gradient reached it: v = m v + 0, as update_f32_momentum
            optim.F.update_f32_scale(ly.gw, len(ly.gw) // len(ly.gb), t, self.m)
            optim.F.update_f32_scale(ly.gb, 1, t, self.m)
            self.folded.add(ly.index)  # (a refused step leaves v scaled once)
        r = optim.F.update_s8_apply_keep(ly.w, ly.w_scale, ly.b, ly.mult, ly.shift, ly.gw, ly.gb, ly.master_w,
                                         ly.master_b, t, lr, ly.in_scale, ly.out_scale, r, row)
        self.folded.discard(ly.index)
        return r

    def failed(self, opt, layers, fresh):
        # batch 1: v of the layers above the failing one goes back to its copy (without one they
        # take their step); a failure in the update itself (an interrupt between two layers)
        # completes it. A larger batch steps at its end: those layers keep the failed sample's
        # share in v
        if self.n != 1:
            return
        # the update raised after some layers applied (an interrupt between two: at batch 1 a
        # backward that is through has folded every layer), or no copy: the rest take their step
        if self.copy is None or (fresh & 2 and len(self.folded) < len(self.layers)):
            done = [ly for ly in layers if ly.index in self.folded]
            if done:
                opt.step(done, 1)
            return
        cp = self.copy or {}
        for ly in layers:
            if ly.index in self.folded:
                c = cp.get(ly.index)
                if c is not None:
                    ly.gw[:] = c[0]
                    ly.gb[:] = c[1]
            if fresh & 1 and ly.touched is not None:
                ly.touched = None
        self.folded.clear()

    def forget(self, ly):
        pass

    def release(self):
        for ly in self.layers:  # the momentum goes back to the optimiser alone
            ly.gw = ly.gb = ly.grad = None

