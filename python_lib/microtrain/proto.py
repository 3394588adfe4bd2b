# Prototype (nearest-class-mean) head: classes learnt from a few samples with
# no backward pass (docs/adapt.md, "Prototype head"). Imported on use
# (mt.PrototypeHead), not by `import microtrain`: it costs no heap until used.
#
# Every per-element product runs in an existing native kernel:
# linear_s8_grad_input(desc, e, w, wr, mask, acc, ein) computes the exact
# int32 sums acc[i] = sum_o e[o] * wr[o] * w[o * in_n + i]; with wr = 1 it is
# an int8 matrix-vector product. The scores are then a few integer and
# float operations per class.
import json
import math
import os

from microtrain.kern import K
from microtrain.quant import zeros

METRICS = ("cosine", "l2")
DTYPES = ("int8", "float32")
FORMAT = "microtrain-proto"
VERSION = 1
MAX_SHOTS = 255  # float32 prototypes: |sum| < 2^15 splits into two int8 columns


def _ones(n):
    a = zeros("i", n)
    for i in range(n):
        a[i] = 1
    return a


def _s8(v):
    return v - 256 if v > 127 else v


class PrototypeHead:
    """Nearest-class-mean classifier on the int8 output of `layer` of a frozen model.

    layer:  name or index of the layer whose output is the embedding (default:
            the layer before the last).
    metric: "cosine" or "l2" (in the embedding's real values; the scale cancels).
    dtype:  "int8": a class's prototype is its mean embedding rounded to int8;
            "float32": the exact mean (kept as the int32 sum and the count, so
            no rounding at all).
    """

    def __init__(self, model, layer=None, metric="cosine", dtype="int8"):
        if metric not in METRICS:
            raise ValueError("PrototypeHead: metric must be 'cosine' or 'l2', got %r" % (metric,))
        if dtype not in DTYPES:
            raise ValueError("PrototypeHead: dtype must be 'int8' or 'float32', got %r" % (dtype,))
        n_l = len(model.layers)
        if layer is None:
            layer = n_l - 2 if n_l > 1 else 0
        if type(layer) is int:
            if not 0 <= layer < n_l:
                raise ValueError("PrototypeHead: layer index %d outside 0..%d" % (layer, n_l - 1))
            ly = model.layers[layer]
        else:
            try:
                ly = model.layer(layer)
            except KeyError:
                raise ValueError("PrototypeHead: no layer named %r" % (layer,)) from None
        t = model.tensors[ly.output]
        self.model = model
        self.layer = ly
        self.metric = metric
        self.dtype = dtype
        self.dim = t.numel
        self.zp = t.zero_point
        self.names = []
        self.sums = []  # per class: array('i', dim), the sum of its embeddings
        self.counts = []
        self._cols = 2 if dtype == "float32" else 1  # int8 columns per class in the matrix
        self._wr = None
        self._e1 = _ones(1)
        self._rebuild()

    def __repr__(self):
        return "<PrototypeHead %d classes, layer %s (%d values), %s, %s>" % (
            len(self.names), self.layer.name, self.dim, self.metric, self.dtype)

    @property
    def nbytes(self):
        """Bytes of the head's arrays: the int32 sums and the int8 prototype matrix."""
        return len(self.names) * self.dim * 4 + len(self._w)

    @property
    def classes(self):
        """The class names, in score order."""
        return list(self.names)

    # -- embedding ------------------------------------------------------------------------

    def embed(self, x):
        """Run the model up to `layer` on the int8 input x; return the int8
        embedding (a buffer the next call overwrites)."""
        m = self.model
        bufs, steps = m.plan(None)
        xb = bufs[m.input.index]
        if len(x) != len(xb):
            raise ValueError("PrototypeHead: input has %d values, the model takes %d %s" %
                             (len(x), len(xb), m.input.shape))
        xb[:] = x
        for i in range(self.layer.index + 1):
            s = steps[i]
            s[0](*s[1])
        return bufs[self.layer.output]

    def _sum(self, samples):
        """int32 sum of the embeddings of samples: the embeddings are stacked into
        a k x dim int8 matrix and summed by one kernel call (e = ones)."""
        k = len(samples)
        d = self.dim
        stack = bytearray(k * d)
        for i in range(k):
            s = samples[i]
            x = s[0] if isinstance(s, (tuple, list)) else s
            stack[i * d:(i + 1) * d] = self.embed(x)
        acc = zeros("i", d)
        desc = zeros("i", 6)
        desc[0], desc[1], desc[4], desc[5] = d, k, -128, 127
        K.linear_s8_grad_input(desc, _ones_b(k), stack, _ones(k), None, acc, bytearray(d))
        return acc

    # -- classes --------------------------------------------------------------------------

    def add_class(self, name, samples):
        """Add class `name` from a sequence of int8 inputs (or (x, label) pairs);
        if it exists, its prototype takes in the new samples too. Returns its index."""
        if not isinstance(name, str) or not name:
            raise ValueError("add_class: name must be a non-empty str, got %r" % (name,))
        k = len(samples)
        if k < 1:
            raise ValueError("add_class: need at least one sample")
        acc = self._sum(samples)
        if name in self.names:
            c = self.names.index(name)
            s = self.sums[c]
            n = self.counts[c] + k
        else:
            c = -1
            s = zeros("i", self.dim)
            n = k
        if self.dtype == "float32" and n > MAX_SHOTS:
            raise ValueError("add_class: a float32 prototype takes at most %d samples, %r would have %d" %
                             (MAX_SHOTS, name, n))
        for i in range(self.dim):
            s[i] += acc[i]
        if c < 0:
            self.names.append(name)
            self.sums.append(s)
            self.counts.append(n)
            c = len(self.names) - 1
        else:
            self.counts[c] = n
        self._rebuild()
        return c

    def remove_class(self, name):
        c = self._index(name)
        del self.names[c], self.sums[c], self.counts[c]
        self._rebuild()

    def rename_class(self, old, new):
        if not isinstance(new, str) or not new:
            raise ValueError("rename_class: name must be a non-empty str, got %r" % (new,))
        if new in self.names:
            raise ValueError("rename_class: %r exists" % (new,))
        self.names[self._index(old)] = new

    def _index(self, name):
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(name) from None

    def prototype(self, name):
        """The class's prototype as floats in the embedding's int8 units (q values):
        the rounded mean (int8) or the exact mean (float32)."""
        c = self._index(name)
        s, n = self.sums[c], self.counts[c]
        if self.dtype == "int8":
            return [(2 * v + n) // (2 * n) for v in s]
        return [v / n for v in s]

    def _rebuild(self):
        """The transposed prototype matrix w[dim][cols] (int8 columns: one per
        class, two for float32 (sum = 256 * hi + lo), then a ones column that
        gives sum(x)) and each class's integer terms of the score."""
        d, zp, nc = self.dim, self.zp, len(self.names)
        cols = nc * self._cols + 1
        w = bytearray(d * cols)
        self._vsum, self._rr, self._k = [], [], []
        for c in range(nc):
            s, n = self.sums[c], self.counts[c]
            vs = rr = 0
            if self.dtype == "int8":
                k = 1
                for i in range(d):
                    v = (2 * s[i] + n) // (2 * n)  # round half up, in -128..127: a mean of int8
                    w[i * cols + c] = v & 0xFF
                    vs += v
                    rr += (v - zp) * (v - zp)
            else:
                k = n
                for i in range(d):
                    v = s[i]
                    lo = _s8(v & 0xFF)
                    hi = (v - lo) >> 8
                    w[i * cols + 2 * c] = hi & 0xFF
                    w[i * cols + 2 * c + 1] = lo & 0xFF
                    vs += v
                    rr += (v - k * zp) * (v - k * zp)
            self._vsum.append(vs)
            self._rr.append(rr)
            self._k.append(k)
        for i in range(d):
            w[i * cols + cols - 1] = 1
        self._w = w
        self._cols_n = cols
        desc = zeros("i", 6)
        desc[0], desc[1], desc[4], desc[5] = cols, d, -128, 127
        self._desc = desc
        self._acc = zeros("i", cols)
        self._ein = bytearray(cols)
        if self._wr is None or len(self._wr) != d:
            self._wr = _ones(d)

    # -- scores ---------------------------------------------------------------------------

    def scores_of(self, e):
        """Scores of the int8 embedding e, one per class (higher = nearer).
        cosine: (x - zp) . (p - zp) / |p - zp| (the cosine times |x - zp|, which
        is the same for every class); l2: 2 (x - zp) . (p - zp) - |p - zp|^2
        (|x - zp|^2 minus the squared distance)."""
        if not self.names:
            raise ValueError("PrototypeHead: no classes yet (add_class first)")
        acc = self._acc
        K.linear_s8_grad_input(self._desc, e, self._w, self._wr, None, acc, self._ein)
        zp, d, cols = self.zp, self.dim, self._cols_n
        cst = zp * acc[cols - 1] - d * zp * zp  # zp * sum(x) - dim * zp^2
        out = []
        f32 = self.dtype == "float32"
        for c in range(len(self.names)):
            k = self._k[c]
            a = (acc[2 * c] * 256 + acc[2 * c + 1]) if f32 else acc[c]
            num = a - zp * self._vsum[c] - k * cst  # k * (x - zp) . (p - zp)
            rr = self._rr[c]  # k^2 * |p - zp|^2
            if self.metric == "cosine":
                out.append(num / math.sqrt(rr) if rr else 0.0)
            else:
                out.append((2 * num * k - rr) / (k * k))
        return out

    def scores(self, x):
        return self.scores_of(self.embed(x))

    def predict_index(self, x):
        """Index of the nearest class (the first one on a tie)."""
        sc = self.scores(x)
        best = 0
        for c in range(1, len(sc)):
            if sc[c] > sc[best]:
                best = c
        return best

    def predict(self, x):
        """Name of the nearest class."""
        return self.names[self.predict_index(x)]

    def both(self, x):
        """One forward pass: (the model's own class index, the nearest prototype's
        name). The model's last layers (trained with a Trainer, say) run on after
        the embedding, so a trained classifier and the prototypes share it."""
        m = self.model
        e = self.embed(x)
        name = self.names[_argmax(self.scores_of(e))]
        bufs, steps = m.plan(None)
        for i in range(self.layer.index + 1, len(steps)):
            s = steps[i]
            s[0](*s[1])
        from microtrain.loss import argmax

        return argmax(bufs[m.output.index]), name

    def evaluate(self, samples, labels=None):
        """Accuracy on (x, label) samples; label is a class name, or an index into
        `labels` (a list of names) when given."""
        ok = 0
        n = len(samples)
        for i in range(n):
            x, y = samples[i]
            if labels is not None:
                y = labels[y]
            ok += self.predict(x) == y
        return ok / n if n else 0.0

    # -- files ----------------------------------------------------------------------------

    def save(self, path):
        """Write the head (names, counts, int32 sums) as a small JSON side file
        next to the model; written to path + ".tmp", then renamed."""
        rec = {"format": FORMAT, "version": VERSION, "layer": self.layer.name, "dim": self.dim,
               "metric": self.metric, "dtype": self.dtype,
               "classes": [{"name": self.names[c], "n": self.counts[c], "sum": list(self.sums[c])}
                           for c in range(len(self.names))]}
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(rec, f)
        try:
            os.remove(path)
        except OSError:
            pass
        os.rename(tmp, path)

    @classmethod
    def load(cls, model, path):
        """The head saved at `path`, on `model` (its layer must have the same size)."""
        with open(path) as f:
            rec = json.load(f)
        if rec.get("format") != FORMAT or rec.get("version") != VERSION:
            raise ValueError("PrototypeHead.load: %s is not a version %d prototype file" % (path, VERSION))
        head = cls(model, rec["layer"], rec["metric"], rec["dtype"])
        if head.dim != rec["dim"]:
            raise ValueError("PrototypeHead.load: layer %s has %d values, the file %d" %
                             (rec["layer"], head.dim, rec["dim"]))
        for c in rec["classes"]:
            s = c["sum"]
            if len(s) != head.dim or c["n"] < 1:
                raise ValueError("PrototypeHead.load: class %r is malformed" % (c.get("name"),))
            a = zeros("i", head.dim)
            for i in range(head.dim):
                a[i] = s[i]
            head.names.append(c["name"])
            head.sums.append(a)
            head.counts.append(c["n"])
        head._rebuild()
        return head


def _ones_b(n):
    b = bytearray(n)
    for i in range(n):
        b[i] = 1
    return b


def _argmax(v):
    best = 0
    for c in range(1, len(v)):
        if v[c] > v[best]:
            best = c
    return best
