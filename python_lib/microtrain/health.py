# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# Training health and activation-range adaptation (docs/training.md, "Health and
# range adaptation"). Imported by the Trainer on first use, not by `import microtrain`.
#
# Per trained conv / linear layer the Trainer counts, after each forward, how many of
# its int8 outputs sit at the clamp (127, and -128 without an activation): two native
# calls (lut_s8_forward marks them 1 into a scratch buffer, l1_norm_s8 sums it), no
# per-element Python. Activation ranges are fixed at calibration and the clamp is
# invisible to backward, so a saturated layer keeps being pushed and its weights grow
# without bound; with adapt=True the output range of such a layer is doubled between
# updates (exact integer changes: the producer's shifts - 1, the consumers' shifts + 1
# and biases halved), which the reference (train_ref.py) reproduces bit for bit.
import math

from micropython import const

from microtrain import kern

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
# The .mtm constants this module reads, private: inlined, no globals entry.
_OP_CONV2D = const(1)
_OP_LINEAR = const(2)
_OP_MAXPOOL = const(5)
_ACT_NONE = const(0)
_ACT_RELU = const(1)
_ACT_RELU6 = const(2)
# --- generated: end


K = kern.K
SCALE_MAX = 1099511627776.0  # 2^40: the validator's activation-scale limit


def chain(model, ly):
    """(tensors whose scale follows ly's output, the trained layers reading them), or
    None when the output range of ly cannot be adapted: its output must reach only
    max-pools (same scale) and trained conv / linear layers (their multipliers and
    biases are private copies), and ly's activation must be none or relu."""
    if ly.act not in (_ACT_NONE, _ACT_RELU):
        return None
    ts = [ly.output]
    cons = []
    i = 0
    while i < len(ts):
        t = ts[i]
        i += 1
        for c in model.layers:
            if t not in c.inputs:
                continue
            if c.op == _OP_MAXPOOL:
                ts.append(c.output)
            elif (c.op == _OP_CONV2D or c.op == _OP_LINEAR) and c.trained:
                cons.append(c)
            else:
                return None
    return ts, cons


class _Group:
    # one trained layer's output: its saturation table and counters
    def __init__(self, ly, numel, scr, adapt, is_out):
        self.ly = ly
        self.numel = numel
        self.scr = scr
        self.out = is_out
        tab = bytearray(256)  # value v -> tab[v + 128]: 1 where v is a saturated output
        if ly.act != _ACT_RELU6:  # relu6's own clamp is the activation, not saturation
            tab[255] = 1
        if ly.act == _ACT_NONE:
            tab[0] = 1
        self.tab = tab
        self.ch = chain(ly.model, ly) if adapt else None
        self.sat = 0  # saturated outputs since the last update (adaptation window)
        self.ep_sat = 0  # ... since the epoch started
        self.ep_n = 0  # samples counted this epoch
        self.grown = 0  # range doublings so far
        self.scale0 = max(ly.w_scale)


class Health:
    """Saturation counters of the trained layers (and the range adaptation)."""

    def __init__(self, model, layers, adapt):
        self.model = model
        self.adapt = adapt
        # scratch: the layer's output-error buffer, free between a forward and the
        # backward that fills it (no extra RAM); an error written over its activation
        # (a pool's input: plan.inplace_errors) is the activation, so those layers share
        # one buffer of their own
        bw = model.backward_plan
        eb, tens = bw.ebuf, model.tensors
        out = model.output.index
        own = [ly.output for ly in layers if ly.output in bw.inplace]
        shared = None
        if own:
            from microtrain.quant import zeros

            shared = zeros("b", max(tens[t].numel for t in own))
        self.groups = [_Group(ly, tens[ly.output].numel,
                              memoryview(shared)[:tens[ly.output].numel] if ly.output in bw.inplace
                              else eb[ly.output], adapt, ly.output == out) for ly in layers]
        self.cnt = None
        self.win = 0  # samples since the last update
        self.ep = 0  # samples since the epoch started

    def count(self, bufs):
        """After a forward (keeping from the first trained layer): add each trained
        layer's saturated outputs to its counters."""
        c = self.cnt
        if c is None:
            from microtrain.quant import zeros

            c = self.cnt = zeros("i", 1)
        lut, l1 = K.lut_s8_forward, K.l1_norm_s8
        # health alone samples the hidden layers every 16th sample (their outputs can be
        # large); the output layer and range adaptation count every sample
        every = self.adapt or not self.ep & 15
        for g in self.groups:
            if every or g.out:
                lut(bufs[g.ly.output], g.tab, g.scr)
                l1(g.scr, 1, c)
                g.sat += c[0]
                g.ep_sat += c[0]
                g.ep_n += 1
        self.win += 1
        self.ep += 1

    def update(self):
        """After an optimiser update: adapt the ranges of the window's saturated
        layers (more than 1/64 of their outputs at the clamp), then start a new window.
        Returns the number of ranges doubled."""
        grown = 0
        if self.adapt and self.win:
            for g in self.groups:
                if g.ch is not None and g.sat * 64 > self.win * g.numel and self._grow(g):
                    grown += 1
        for g in self.groups:
            g.sat = 0
        self.win = 0
        return grown

    def _grow(self, g):
        # s_out -> 2 s_out with the zero point kept: the real range doubles around the
        # same zero. Producer: multiplier real / 2 = same m, shift - 1; consumers: input
        # scale * 2, multiplier shift + 1, bias (in s_in * s_w units) floor(b / 2 + 1/2).
        ly = g.ly
        ts, cons = g.ch
        tens = self.model.tensors
        if not tens[ts[0]].scale * 2.0 <= SCALE_MAX:
            return False
        for v in ly.shift:
            if v <= -31:
                return False
        for c in cons:
            for v in c.shift:
                if v >= 31:
                    return False
        sh = ly.shift
        for i in range(len(sh)):
            sh[i] -= 1
        upd = self.model.update
        for c in cons:
            sh, b = c.shift, c.b
            for i in range(len(sh)):
                sh[i] += 1
                b[i] = (b[i] + 1) >> 1
            upd.forget(c)  # what the update cached of its input scale
        for t in ts:
            tens[t].scale *= 2.0
        upd.forget(ly)
        g.grown += 1
        return True

    def running(self):
        """(saturated fraction of the logits, of the other trained outputs) so far this
        epoch (None where there is none): the per-step log's health."""
        lg = None
        hs = hn = 0
        for g in self.groups:
            n = g.ep_n * g.numel
            if g.out:
                lg = g.ep_sat / n if n else 0.0
            else:
                hs += g.ep_sat
                hn += n
        return lg, (hs / hn if hn else None)

    def epoch(self, loss, classes, acc=None):
        """The epoch's health record (and warnings); resets the epoch counters. acc: the
        epoch's training accuracy (None: not counted)."""
        hid_s = hid_n = 0
        sat_logits = None
        growth, gname = 1.0, None
        layers = {}
        for g in self.groups:
            n = g.ep_n * g.numel
            f = g.ep_sat / n if n else 0.0
            layers[g.ly.name] = f
            if g.out:
                sat_logits = f
            else:
                hid_s += g.ep_sat
                hid_n += n
            top = max(g.ly.w_scale)
            r = top / g.scale0
            if r > growth:
                growth, gname = r, g.ly.name
            g.ep_sat = g.ep_n = 0
        self.ep = 0
        rec = {"sat_act": hid_s / hid_n if hid_n else None, "sat_logits": sat_logits, "sat": layers,
               "w_scale_growth": growth, "ranges_grown": sum(g.grown for g in self.groups)}
        warn = []
        # saturation first: the fixed ranges clamp, the loss and the weight scales then say
        # "diverging" too, but a lower rate does not help there, the adaptive ranges do
        sat = []
        if not self.adapt:
            if sat_logits is not None and sat_logits > 0.05:
                sat.append("%.0f%% of the logits" % (100 * sat_logits))
            if rec["sat_act"] is not None and rec["sat_act"] > 0.05:
                sat.append("%.0f%% of the trained layers' outputs" % (100 * rec["sat_act"]))
        if sat:
            warn.append("saturated: %s sit at the int8 clamp, where training stops learning; use "
                        "Trainer(adapt_ranges=True), which re-derives the ranges as it trains"
                        % " and ".join(sat))
        chance = math.log(classes) if classes and classes > 1 else None
        rec["chance"] = chance
        # accuracy clearly above chance: learning, whatever the epoch's mean loss says (its first
        # samples weigh in too)
        learning = acc is not None and classes and acc > 2.0 / classes
        fix = "the saturation above first: adapt_ranges=True" if sat else "lower the learning rate"
        if loss - loss != 0.0:
            warn.append("loss is %r: training diverged (%s)" % (loss, fix))
        elif chance is not None and loss > 3.0 * chance and not learning:
            warn.append("loss %.4g is far above chance (ln %d = %.4g): diverging? %s" % (
                loss, classes, chance, fix))
        elif chance is not None and loss >= chance and not learning:
            # a whole epoch no better than uniform guessing: a too large (or too small) step
            # that leaves the loss where it started (a too large lr from scratch did so silently)
            warn.append("loss %.4g is not below chance (ln %d = %.4g): not learning; %s" % (
                loss, classes, chance, "the saturation above first (adapt_ranges=True), then another "
                "learning rate" if sat else "try another learning rate, check the labels"))
        if growth > 1000.0 and not sat:
            warn.append("weight scale of %s grew %.4gx: diverging? lower the learning rate" % (gname, growth))
        rec["warnings"] = warn
        return rec
