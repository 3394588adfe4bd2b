# The checks of a data set before training (Trainer.fit, and step for regression targets):
# every sample's input and target, naming the sample, the rule and what to do. Loaded by fit:
# a Trainer that only steps never holds it.
from array import array

from microtrain import optim
from microtrain.loss import LOSSES, _int8_target


def check(tr, samples, who="check"):
    """Check every (x, target) of `samples` as trainer tr's step() takes them, before anything
    runs: a ValueError / TypeError naming the sample, the rule and what to do."""
    try:
        n = len(samples)
    except TypeError:
        raise TypeError("%s: samples must be a sequence of (x, label) pairs (a list, a FileDataset), "
                        "got %s" % (who, type(samples).__name__)) from None
    for i in range(n):
        s = samples[i]
        if not isinstance(s, (tuple, list)) or len(s) != 2:
            raise TypeError("%s: sample %d must be an (x, label) pair, got %s" % (who, i, type(s).__name__))
        check_sample(tr, s[0], s[1], i, who)


def check_sample(tr, x, y, i, who):
    # one sample's input (an int8 buffer of the input's size) and target (a class index, or
    # real values: finite, in 0..1 for bce); i: its index in the data set (-1: step's sample)
    m = tr.model
    at = who if i < 0 else "%s: sample %d" % (who, i)
    numel = m.input.numel
    if i >= 0:  # (step's forward checks its x)
        ok = x is not None and not isinstance(x, (int, float, str))
        try:
            ok = ok and len(x) == numel and (numel == 0 or len(bytes(memoryview(x)[0:1])) == 1)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            try:
                got = "%s of %d" % (type(x).__name__, len(x))
            except TypeError:
                got = type(x).__name__
            raise ValueError("%s: x must be an int8 buffer (bytes, bytearray, array('b')) of %d values, "
                             "the model's input %s, got %s; nothing was trained: fix or drop the "
                             "sample" % (at, numel, m.input.shape, got))
    if tr.classes:
        n = m.output.numel
        if type(y) is not int or not 0 <= y < n:
            raise ValueError("%s: label must be an int class index in 0..%d, got %r; nothing was "
                             "trained: fix or drop the sample" % (at, n - 1, y))
        return
    # a regression target of mse / bce: the output's size, finite, in 0..1 for bce
    loss = tr.loss_fn
    if loss is not LOSSES.get("mse") and loss is not LOSSES.get("bce"):
        return  # your own loss checks its targets
    n = m.output.numel
    try:
        ok = len(y) == n
    except TypeError:
        ok = False
    if not ok:
        raise ValueError("%s: target must hold %d values (the model's output), got %r; nothing was "
                         "trained" % (at, n, y if isinstance(y, (int, float)) else type(y).__name__))
    if _int8_target(y):
        return
    try:
        f = array("f", y)
    except (TypeError, ValueError, OverflowError):
        raise TypeError("%s: target must be numbers, got %s; nothing was trained" % (
            at, type(y).__name__)) from None
    k = optim.F.update_f32_check(f)
    if k >= 0:
        raise ValueError("%s: target[%d] is %r: not finite (NaN / inf, or beyond float32); nothing was "
                         "trained: fix or drop the sample" % (at, k, f[k]))
    if loss is LOSSES.get("bce") and n and not (min(f) >= 0.0 and max(f) <= 1.0):
        raise ValueError("%s: bce targets must be in 0..1, got %g..%g; nothing was trained: fix or drop "
                         "the sample" % (at, min(f), max(f)))
