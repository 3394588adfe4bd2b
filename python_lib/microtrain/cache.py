# The frozen-prefix feature cache: in multi-epoch training of the last layers on
# a fixed sample set, the int8 outputs of the frozen layers never change, so
# they are computed once per sample and read back in later passes instead of
# being recomputed (docs/training.md, "Feature cache").
import gc
import os

# RAM records are kept in blocks of at most this many bytes (at least one record),
# so a cache larger than the largest free block of a fragmented heap still fits.
BLOCK = 4096
# The default file of fit(cache="auto") when the RAM cache does not fit; removed after fit.
FILE = "mt_cache.bin"


def boundary(model, first):
    """Indices of the tensors that layers >= first read but do not make: the
    outputs of the frozen prefix (layers < first) and, if read there, the model
    input. forward(None, first, start=first) needs exactly these."""
    made = set()
    out = []
    for ly in model.layers[first:]:
        for t in ly.inputs:
            if t not in made and t not in out:
                out.append(t)
        made.add(ly.output)
    return out


def record_size(model, first):
    """Bytes per sample: the label (1 byte; 2 with more than 256 classes) and
    the int8 boundary tensors."""
    n = 1 if model.output.numel <= 256 else 2
    for t in boundary(model, first):
        n += model.tensors[t].numel
    return n


def ram_budget():
    """Bytes a RAM cache may take: half the free heap after a collection (the
    rest stays for temporaries and fragmentation)."""
    gc.collect()
    return gc.mem_free() // 2


class FeatureCache:
    """The int8 outputs of layers 0..first-1 of `model` and the label of every
    sample of `samples`, computed once here (one forward per sample, in index
    order) and kept in RAM (path None) or in a file at `path` (written once,
    sequentially; read one record per sample).

    load(i) puts sample i's values into the training plan's buffers and returns
    its label; then model.forward(None, first, start=first) runs the layers from
    `first` on, exactly as model.forward(x, first) would."""

    def __init__(self, model, first, samples, path=None):
        if not 0 < first < len(model.layers):
            raise ValueError("FeatureCache: first must be 1..%d (layers before it are cached), got %d" %
                             (len(model.layers) - 1, first))
        self.model = model
        self.first = first
        self.n = n = len(samples)
        self.path = path
        self.record = rec = record_size(model, first)
        self._wide = model.output.numel > 256
        self._bufs = [model.activation(t, first) for t in boundary(model, first)]
        self._f = None
        self._blocks = []
        self._per = per = BLOCK // rec if rec < BLOCK else 1
        if path is None:
            left = n
            while left > 0:
                k = per if left > per else left
                self._blocks.append(memoryview(bytearray(k * rec)))
                left -= k
        else:
            self._f = open(path, "wb")
        try:
            self._fill(samples)
        except BaseException:
            self.close()
            raise
        if path is not None:
            self._f = open(path, "rb")
            self._lbl = bytearray(2 if self._wide else 1)

    @property
    def nbytes(self):
        """Bytes of cached records (label + features) of all samples."""
        return self.n * self.record

    def _fill(self, samples):
        m, first, rec, per = self.model, self.first, self.record, self._per
        n_cls = m.output.numel
        lbl = bytearray(2 if self._wide else 1)
        for i in range(self.n):
            x, y = samples[i]
            if not 0 <= y < n_cls:
                raise ValueError("FeatureCache: sample %d: label %d out of range 0..%d" % (i, y, n_cls - 1))
            m.forward(x, first)
            lbl[0] = y & 0xFF
            if self._wide:
                lbl[1] = y >> 8
            if self._f is not None:
                self._f.write(lbl)
                for b in self._bufs:
                    self._f.write(b)
            else:
                blk = self._blocks[i // per]
                o = (i % per) * rec
                blk[o:o + len(lbl)] = lbl
                o += len(lbl)
                for b in self._bufs:
                    blk[o:o + len(b)] = b
                    o += len(b)
        if self._f is not None:
            self._f.close()
            self._f = None

    def load(self, i):
        """Copy sample i's cached values into the model's training buffers; return its label."""
        if not 0 <= i < self.n:
            raise IndexError("FeatureCache index out of range")
        f = self._f
        if f is not None:
            f.seek(i * self.record)
            lbl = self._lbl
            ok = f.readinto(lbl) == len(lbl)
            for b in self._bufs:
                ok = ok and f.readinto(b) == len(b)
            if not ok:
                raise ValueError("FeatureCache: %s is truncated" % self.path)
            return lbl[0] | (lbl[1] << 8) if self._wide else lbl[0]
        blk = self._blocks[i // self._per]
        o = (i % self._per) * self.record
        y = blk[o]
        o += 1
        if self._wide:
            y |= blk[o] << 8
            o += 1
        for b in self._bufs:
            b[:] = blk[o:o + len(b)]
            o += len(b)
        return y

    def close(self):
        """Free the RAM records, or close and remove the file."""
        self._blocks = []
        if self._f is not None:
            self._f.close()
            self._f = None
        if self.path is not None:
            try:
                os.remove(self.path)
            except OSError:
                pass


def make(model, first, samples, epochs, spec="auto", verbose=False):
    """The cache Trainer.fit uses (None: none). spec: "auto" (RAM when it takes at
    most ram_budget(), else the file FILE; none for a single epoch, when nothing
    precedes `first`, or when the file cannot be written), "ram", or a file path.
    None / False: no cache."""
    if not spec or epochs < 2 or first == 0:
        return None
    n = len(samples)
    if n == 0:
        return None
    if spec == "auto":
        rec = record_size(model, first)
        per = BLOCK // rec if rec < BLOCK else 1
        need = n * rec + ((n + per - 1) // per) * 64  # records + a block's bytearray and memoryview
        path = None if need <= ram_budget() else FILE
    elif spec == "ram":
        path = None
    elif isinstance(spec, str):
        path = spec
    else:
        raise ValueError("fit: cache must be \"auto\", \"ram\", a file path or None, got %r" % (spec,))
    try:
        try:
            fc = FeatureCache(model, first, samples, path)
        except MemoryError:
            if spec != "auto" or path is not None:
                raise
            gc.collect()  # the estimate missed (a port's object overheads): the file then
            path = FILE
            fc = FeatureCache(model, first, samples, path)
    except OSError as e:
        if spec != "auto":
            raise
        if verbose:
            print("feature cache: none (%s: %s)" % (path, e))
        return None
    if verbose:
        print("feature cache: %s, %d samples x %d bytes" % ("RAM" if path is None else path, n, fc.record))
    return fc
