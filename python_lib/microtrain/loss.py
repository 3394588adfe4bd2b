# Softmax cross-entropy on int8 logits (numerics.md, softmax_xent_s8): the
# kernel gives the int8 error of the logits, the loss is finished here.
import math

from microtrain import kern
from microtrain.quant import zeros

K = kern.K


def cross_entropy(model, label, out=None):
    """(loss, err, err_scale) for the last forward's int8 output (or `out`).

    err is the model's int8 output-error buffer (real value err_scale * err),
    ready for model.backward(err, err_scale); it is overwritten by the next call."""
    if out is None:
        out = model._last_out
        if out is None:
            raise ValueError("cross_entropy: run model.forward first")
    n = len(out)
    if not 0 <= label < n:
        raise ValueError("cross_entropy: label %d out of range 0..%d" % (label, n - 1))
    ce = model._ce
    if ce is None:
        ce = model._ce = (zeros("b", n), zeros("i", 3))
    err, stats = ce
    sh = K.softmax_xent_s8(out, label, model.lut(), err, stats)
    q = out[label]
    if q > 127:  # bytes / bytearray outputs read unsigned
        q -= 256
    loss = model.output.scale * (stats[2] - q) + math.log(stats[1] / 65536.0)
    return loss, err, math.ldexp(1.0, sh - 15)


def argmax(out):
    """Index of the first maximum of an int8 buffer."""
    best, arg, i = -129, 0, 0
    for v in out:
        if v > 127:
            v -= 256
        if v > best:
            best, arg = v, i
        i += 1
    return arg
