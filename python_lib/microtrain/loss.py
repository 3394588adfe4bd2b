# Losses of the int8 output (docs/training.md, "Forward and loss"). Each returns
# (loss, err, err_scale): err is an int8 error of the output with real value
# err_scale * err, ready for model.backward(err, err_scale). Cross-entropy runs
# in the softmax_xent_s8 kernel; mean squared error and binary cross-entropy
# work on the output's few values in Python floats. A user loss is any
# callable(model, target, out) with the same result (docs/api.md, "Losses").
import math
from array import array

from microtrain import kern
from microtrain.quant import zeros

K = kern.K


def _out(model, out, fn):
    if out is None:
        out = model.last_out
        if out is None:
            raise ValueError(fn + ": run model.forward first")
    return out


def cross_entropy(model, label, out=None):
    """(loss, err, err_scale) for the last forward's int8 output (or `out`).

    err is the model's int8 output-error buffer (real value err_scale * err),
    ready for model.backward(err, err_scale); it is overwritten by the next call."""
    if out is None:  # (Trainer.step passes it: no call)
        out = _out(model, out, "cross_entropy")
    n = len(out)
    if not 0 <= label < n:
        raise ValueError("cross_entropy: label %d out of range 0..%d" % (label, n - 1))
    ce = model.ce_bufs
    if ce is None:
        ce = model.ce_bufs = (zeros("b", n), zeros("i", 3))
    err, stats = ce
    sh = K.softmax_xent_s8(out, label, model.lut(), err, stats)
    q = out[label]
    if q > 127:  # bytes / bytearray outputs read unsigned
        q -= 256
    loss = model.output.scale * (stats[2] - q) + math.log(stats[1] / 65536.0)
    return loss, err, math.ldexp(1.0, sh - 15)


def loss_buffers(model, n):
    """The model's reused (int8 error, int32 scratch) pair of n values for the losses."""
    lb = model.loss_bufs
    if lb is None or len(lb[0]) != n:
        lb = model.loss_bufs = (zeros("b", n), zeros("i", n))
    return lb


def _int8_target(t):
    # int8 targets: bytes, bytearray, array('b'/'B') or a memoryview of bytes;
    # anything else (list, tuple, array('f'/'d'), ...) holds real values.
    tt = type(t)
    if tt is bytes or tt is bytearray:
        return True
    if (tt is array or tt is memoryview) and len(t):
        return type(t[0]) is int and len(bytes(t[0:1])) == 1
    return False


def pot_requant(d, n, err):
    """Real errors d[0..n) -> int8 err with a power-of-two unit 2^k; returns k.

    k: the smallest with max|d| * 2^-k <= 127; err[i] = d[i] * 2^-k rounded half
    away from zero (all zero and k = 0 when every d is 0)."""
    m = 0.0
    for i in range(n):
        a = abs(d[i])
        if a > m:
            m = a
    if m == 0.0:
        for i in range(n):
            err[i] = 0
        return 0
    ldexp, floor = math.ldexp, math.floor
    k = math.frexp(m)[1] - 7
    if ldexp(m, -k) > 127.0:
        k += 1
    for i in range(n):
        v = ldexp(d[i], -k)
        if v >= 0.0:
            err[i] = int(floor(v + 0.5))
        else:
            err[i] = -int(floor(0.5 - v))
    return k


def mse(model, target, out=None):
    """Mean squared error of the output against `target`: (loss, err, err_scale).

    target: the real values (list, tuple, array('f'/'d')), or an int8 buffer
    (bytes, bytearray, array('b')) in the output's own quantisation.
    loss = sum((y - t)^2) / n over the n outputs (PyTorch's MSELoss)."""
    out = _out(model, out, "mse")
    n = len(out)
    if len(target) != n:
        raise ValueError("mse: target has %d values, the output has %d" % (len(target), n))
    err, acc = loss_buffers(model, n)
    t = model.output
    s, zp = t.scale, t.zero_point
    if _int8_target(target):  # exact integers: d = q - t in output steps
        ssq = 0
        for i in range(n):
            q, r = out[i], target[i]
            if q > 127:
                q -= 256
            if r > 127:
                r -= 256
            v = q - r
            acc[i] = v
            ssq += v * v
        sh = K.dyn_requant_s8(acc, err)
        return s * s * ssq / n, err, math.ldexp(2.0 * s / n, sh)
    d = [0.0] * n
    loss = 0.0
    for i in range(n):
        q = out[i]
        if q > 127:
            q -= 256
        v = s * (q - zp) - target[i]
        d[i] = v
        loss += v * v
    k = pot_requant(d, n, err)
    return loss / n, err, math.ldexp(2.0 / n, k)


def bce(model, target, out=None):
    """Binary cross-entropy of the output logits against `target` (values in
    0..1, one per output): (loss, err, err_scale), PyTorch's BCEWithLogitsLoss
    (mean over the n outputs)."""
    out = _out(model, out, "bce")
    n = len(out)
    if len(target) != n:
        raise ValueError("bce: target has %d values, the output has %d" % (len(target), n))
    err, _ = loss_buffers(model, n)
    t = model.output
    s, zp = t.scale, t.zero_point
    exp, log = math.exp, math.log
    int8 = _int8_target(target)
    d = [0.0] * n
    loss = 0.0
    for i in range(n):
        q = out[i]
        if q > 127:
            q -= 256
        r = target[i]
        if int8 and r > 127:
            r -= 256
        z = s * (q - zp)
        if z >= 0.0:
            e = exp(-z)
            p = 1.0 / (1.0 + e)
            loss += z - r * z + log(1.0 + e)
        else:
            e = exp(z)
            p = e / (1.0 + e)
            loss += -r * z + log(1.0 + e)
        d[i] = p - r
    k = pot_requant(d, n, err)
    return loss / n, err, math.ldexp(1.0 / n, k)


LOSSES = {"xent": cross_entropy, "mse": mse, "bce": bce}


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
