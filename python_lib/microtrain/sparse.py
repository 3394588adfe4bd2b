# Sparse-update policies: which output channels of a trained layer get a
# gradient (and back-propagate) for this sample. A policy is a callable
# policy(layer, e) -> mask (1-byte buffer, 1 = keep) or None (all), called by
# Model.backward with the layer's int8 output error e. Masked channels are
# skipped by the kernels, which is where the backward speed-up comes from.
import math

from microtrain import kern
from microtrain.quant import zeros

K = kern.K


def _fraction(what, v, alt=""):
    # a fraction of a layer's output channels, checked when the policy is made, not at its first use
    num = type(v) is float or type(v) is int
    if not num or not 0.0 < v <= 1.0:
        raise (ValueError if num else TypeError)(
            "%s must be a number in (0, 1]%s (the fraction of a layer's output channels updated per "
            "sample), got %r" % (what, alt, v))


class DynamicSparse:
    """Dynamic sparse gradient updates (Deutel et al., arXiv 2407.10734).

    Per sample and trained layer, keep the k = ceil(rate * C) output channels
    whose errors have the largest L1 norm. The rate follows the sample's loss L
    relative to the largest loss seen so far, L_max:

    - form="text" (default, the paper's stated intent): rate =
      clamp(L / L_max, lambda_min, lambda_max): hard samples update more.
    - form="linear": rate = lambda_min + (lambda_max - lambda_min) * L / L_max,
      the same monotone idea without saturation at lambda_min.

    The paper's printed eq. 9 disagrees with its text (see docs/training.md);
    the text's intent is what is implemented by default. The layer producing
    the model output (the logits) is always dense: masking it keeps only the
    true class's error and the other logits are never pushed down."""

    def __init__(self, lambda_min=0.1, lambda_max=1.0, form="text"):
        _fraction("DynamicSparse: lambda_min", lambda_min)
        _fraction("DynamicSparse: lambda_max", lambda_max)
        if lambda_min > lambda_max:
            raise ValueError("DynamicSparse: lambda_min must be <= lambda_max (the fewest and the most "
                             "channels kept), got %r > %r" % (lambda_min, lambda_max))
        if form not in ("text", "linear"):
            raise ValueError("DynamicSparse: form must be 'text' or 'linear'")
        self.lambda_min, self.lambda_max, self.form = lambda_min, lambda_max, form
        self.max_loss = 0.0
        self.rate = lambda_max
        self._bufs = {}
        self._pre = None  # a layer's buffers whose norms a pool's backward formed (pool_norms)
        self.kept = 0  # channels kept / seen since the last reset (for reports)
        self.seen = 0

    def observe(self, loss):
        """Set this sample's rate from its loss (called before backward)."""
        # what undo() puts back (attributes, not a tuple: no garbage per sample)
        self._ml, self._rt = self.max_loss, self.rate
        self._kp, self._sn = self.kept, self.seen
        if loss > self.max_loss:
            self.max_loss = loss
        r = loss / self.max_loss if self.max_loss > 0.0 else 1.0
        lo, hi = self.lambda_min, self.lambda_max
        if self.form == "linear":
            r = lo + (hi - lo) * r
        self.rate = lo if r < lo else (hi if r > hi else r)
        return self.rate

    def undo(self):
        """The state before the last observe() (a failed training step: Trainer.step)."""
        self.max_loss, self.rate = self._ml, self._rt
        self.kept, self.seen = self._kp, self._sn
        self._pre = None

    def __call__(self, ly, e):
        # per layer, once: its buffers, C and whether it makes the model output (out_c is a
        # property and these lookups were a third of the policy's Python per call)
        b = self._bufs.get(ly.index)
        if b is None or b[4] is not ly:
            c = ly.out_c
            is_out = ly.output == ly.model.output.index
            b = self._bufs[ly.index] = (zeros("i", c), bytearray(c), c, is_out, ly)
        c = b[2]
        k = math.ceil(self.rate * c)
        self.seen += c
        # the classifier stays dense: keeping only the largest logit errors
        # (nearly always the true class) never pushes the other logits down
        if k >= c or b[3]:
            self.kept += c
            return None
        if self._pre is b:  # the pool's backward formed them (pool_norms)
            self._pre = None
        else:
            K.l1_norm_s8(e, c, b[0])
        K.topk_mask(b[0], k, b[1])
        self.kept += k
        return b[1]

    def pool_norms(self, ly):
        # (Model.backward) ly's norms buffer when this sample ranks its channels, else None: the
        # max-pool backward over ly's output fills it as it routes the error
        # (maxpool_s8_grad_input_act_l1: the sums l1_norm_s8 makes), so the call on ly that
        # follows ranks them without a pass of its own
        b = self._bufs.get(ly.index)
        if b is None or b[4] is not ly or b[3] or math.ceil(self.rate * b[2]) >= b[2]:
            return None
        self._pre = b
        return b[0]

    def __repr__(self):
        return "DynamicSparse(lambda_min=%g, lambda_max=%g, form=%r)" % (
            self.lambda_min, self.lambda_max, self.form)


class StaticSparse:
    """Static sparse update (as in MIT's tiny-training): a fixed fraction of
    each trained layer's output channels (the first ceil(ratio * C)) is
    updated, every sample. `ratio` is a float for all layers or a dict
    {layer name: ratio} (layers not named are dense). The layer producing the
    model output is always dense."""

    def __init__(self, ratio=0.5):
        if isinstance(ratio, dict):
            for name, r in ratio.items():
                if not isinstance(name, str):
                    raise TypeError("StaticSparse: the keys of ratio must be layer names (str), got %r"
                                    % (name,))
                _fraction("StaticSparse: ratio[%r]" % name, r)
        else:
            _fraction("StaticSparse: ratio", ratio, " or a dict {layer name: fraction}")
        self.ratio = ratio
        self._masks = {}
        self.kept = 0
        self.seen = 0

    def observe(self, loss):
        self._kp, self._sn = self.kept, self.seen  # what undo() puts back
        return None

    def undo(self):
        """The counters before the last observe() (a failed training step: Trainer.step)."""
        self.kept, self.seen = self._kp, self._sn

    def __call__(self, ly, e):
        r = self.ratio.get(ly.name, 1.0) if isinstance(self.ratio, dict) else self.ratio
        c = ly.out_c
        k = int(math.ceil(r * c))
        if ly.output == ly.model.output.index:
            k = c  # the classifier stays dense (see DynamicSparse)
        self.seen += c
        self.kept += k if k < c else c
        if k >= c:
            return None
        m = self._masks.get(ly.index)
        if m is None:
            m = bytearray(c)
            for i in range(k):
                m[i] = 1
            self._masks[ly.index] = m
        return m

    def __repr__(self):
        return "StaticSparse(%r)" % (self.ratio,)
