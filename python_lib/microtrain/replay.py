# Latent replay against forgetting (docs/adapt.md, "Replay"): a bounded buffer
# of int8 intermediate activations (the inputs of the first trained layer, as
# the feature cache stores them) with their labels, filled as training runs and
# mixed into Trainer steps. A replayed sample starts at the first trained
# layer: its frozen prefix is never run again. Imported on use (mt.Replay).
import os

from microtrain.cache import boundary

M32 = 0xFFFFFFFF
POLICIES = ("reservoir", "balanced")


class Replay:
    """capacity: samples kept; policy: "reservoir" (every sample seen so far
    equally likely to be kept) or "balanced" (a new sample evicts one of the
    largest class); k: replayed samples mixed in after each training sample;
    seed: the xorshift32 generator of the choices; path: keep the records in
    this file instead of RAM (only the labels stay in RAM)."""

    def __init__(self, capacity=100, policy="reservoir", k=1, seed=1, path=None):
        if type(capacity) is not int or capacity < 1:
            raise ValueError("Replay: capacity must be an int >= 1, got %r" % (capacity,))
        if policy not in POLICIES:
            raise ValueError("Replay: policy must be 'reservoir' or 'balanced', got %r" % (policy,))
        if type(k) is not int or k < 0:
            raise ValueError("Replay: k must be an int >= 0, got %r" % (k,))
        if type(seed) is not int:
            raise ValueError("Replay: seed must be an int, got %r" % (seed,))
        if path is not None and not isinstance(path, str):
            raise TypeError("Replay: path must be a file name (str) or None, got %r" % (path,))
        self.capacity = capacity
        self.policy = policy
        self.k = k
        self.path = path
        self.rng = (seed * 2654435761 + 12345) & M32 or 1
        self.n = 0  # records held
        self.seen = 0  # samples offered
        self.replayed = 0
        self.labels = bytearray(capacity)
        self.record = 0
        self._model = None
        self._first = -1
        self._bufs = None
        self._ram = None
        self._f = None

    def __repr__(self):
        return "<Replay %d/%d %s k=%d %s, %d bytes a sample>" % (
            self.n, self.capacity, self.policy, self.k, self.path or "RAM", self.record)

    @property
    def nbytes(self):
        """Bytes of stored features (capacity x record)."""
        return self.capacity * self.record

    def _draw(self, n):
        r = self.rng
        r ^= (r << 13) & M32
        r ^= r >> 17
        r ^= (r << 5) & M32
        self.rng = r
        return r % n

    def _bind(self, model, first):
        """The boundary buffers of layer `first`'s training plan (feature cache layout
        minus the label); storage on first use."""
        if self._model is model and self._first == first:
            return
        bnd = boundary(model, first)
        rec = 0
        for t in bnd:
            rec += model.tensors[t].numel
        if self.record and rec != self.record:
            raise ValueError("Replay: records are %d bytes, layer %d's inputs %d" % (self.record, first, rec))
        self._model, self._first = model, first
        self._bufs = [model.activation(t, first) for t in bnd]
        self.record = rec
        if self._ram is None and self._f is None:
            if self.path is None:
                self._ram = memoryview(bytearray(self.capacity * rec))
            else:
                self._f = open(self.path, "w+b")

    def _put(self, slot, label):
        self.labels[slot] = label
        o = slot * self.record
        if self._f is not None:
            self._f.seek(o)
            for b in self._bufs:
                self._f.write(b)
            return
        for b in self._bufs:
            self._ram[o:o + len(b)] = b
            o += len(b)

    def _get(self, slot):
        o = slot * self.record
        if self._f is not None:
            self._f.seek(o)
            for b in self._bufs:
                if self._f.readinto(b) != len(b):
                    raise ValueError("Replay: %s is truncated" % self.path)
        else:
            for b in self._bufs:
                b[:] = self._ram[o:o + len(b)]
                o += len(b)
        return self.labels[slot]

    def _slot(self, label):
        """Where the sample just seen goes (-1: not kept)."""
        cap = self.capacity
        if self.n < cap:
            self.n += 1
            return self.n - 1
        if self.policy == "reservoir":
            j = self._draw(self.seen)
            return j if j < cap else -1
        lab = self.labels
        counts = {}
        for i in range(cap):
            c = lab[i]
            counts[c] = counts.get(c, 0) + 1
        big = max(counts.values())
        if counts.get(label, 0) < big:
            victim = min(c for c in counts if counts[c] == big)
        else:
            victim = label
        slots = [i for i in range(cap) if lab[i] == victim]
        return slots[self._draw(len(slots))]

    def add(self, model, first, label):
        """Offer the sample whose layer-`first` inputs are in the training buffers now."""
        if not 0 <= label < 256:
            raise ValueError("Replay: labels must be 0..255, got %r" % (label,))
        self._bind(model, first)
        self.seen += 1
        s = self._slot(label)
        if s >= 0:
            self._put(s, label)

    def load(self, model, first, i):
        """Put record i into the training buffers; return its label."""
        self._bind(model, first)
        if not 0 <= i < self.n:
            raise IndexError("Replay index out of range")
        return self._get(i)

    def after_step(self, t, label):
        """Trainer.step's hook: keep (maybe) the sample just trained on, then train
        on k samples drawn from the buffer, from the first trained layer on."""
        m, first = t.model, t.first
        had = self.n
        self.add(m, first, label)
        if not had:
            return
        x = m.activation(m.input.index, first) if first == 0 else None
        for _ in range(self.k):
            y = self._get(self._draw(self.n))
            out = m.forward(x, first, first)
            loss, err, s = t.loss_fn(m, y, out)
            if t.sparse is not None:
                t.sparse.observe(loss)
            m.backward(err, s, t.sparse)
            t.pending += 1
            if t.pending >= t.batch:
                t.flush()
            self.replayed += 1

    def close(self):
        """Free the records (RAM) or close and remove the file."""
        self._ram = None
        if self._f is not None:
            self._f.close()
            self._f = None
            try:
                os.remove(self.path)
            except OSError:
                pass
        self.n = 0
        self._model = None
        self._first = -1
