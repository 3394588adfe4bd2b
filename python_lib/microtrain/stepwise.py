# The update mode of batch-1 plain SGD: each trained layer steps during backward
# (docs/memory.md; the other modes and their interface: backward.py), imported by a Trainer that
# uses it: a model trained otherwise never loads it.
import array

from micropython import const

from microtrain.backward import Sums
from microtrain.kern import K
from microtrain.optim import F
from microtrain.quant import zeros

WINDOW = const(2048)  # floats of the gradient window (8 KB)
_LIM = 3.4e38 / 8589934592.0  # FLT_MAX / 2^33: lr * |gradient scale| bound of a step


def floats(layers, window=WINDOW):
    """Floats of the gradient window for these trained layers: the largest window of output
    channels, at most `window` weights (one channel at least)."""
    n = 0
    for ly in layers:
        nc = len(ly.b)
        k = len(ly.w) // nc
        cc = min(nc, max(1, window // k))
        if cc * k > n:
            n = cc * k
    return n


class StepInBackward:
    """Batch 1, plain SGD (Trainer sums=None / False): no gradient sums. Backward hands each
    trained layer's gradient here right after the layer's grad input (TTE's operator
    reordering; docs/memory.md), and the layers step when backward is through: the
    grad-weight kernel adds a window of output channels
    (at most WINDOW floats, at least one channel) into one shared zeroed buffer and
    update_s8_apply steps those channels (zeroing it again), window after window. The
    arithmetic of each channel is the sums path's (g = 0 + one rounded term per value,
    direction g, the same apply), so are the bits; the stochastic-rounding draws too:
    without a sparse policy every channel draws, and each layer starts at the state the
    sums path's step (layers in forward order) gives it, a precomputed xorshift16 jump;
    with one (sums=False) the draws follow the update order, last layer first."""

    late = True  # the gradient after the layer's grad input, which reads the weights first
    # Each layer's step waits for the end of backward (run: after_backward), so a backward that
    # fails at any layer has stepped none: the error buffers are all alive through backward and
    # no error goes over an activation a conv / linear reads for its gradient in this mode
    # (plan.inplace_errors), so every layer's x and e are still there. Not where backward runs a
    # forward again (Trainer(recompute=True)): its scratch may take an error's place.

    def __init__(self, opt, layers, sparse, window=WINDOW, raw=None):
        # raw: a memoryview of at least 4 * floats(layers, window) bytes for the window
        # (Model.set_trained's bw.window: inside the forward buffers idle during backward,
        # which each forward overwrites, so the first layer of every backward zeroes it)
        self.opt = opt  # its rate is each step's
        n = m = 0
        off = 0
        self.sparse = sparse is not None
        self.info = {}  # layer index -> (channels per window, window mask, stochastic, jump)
        for ly in layers:
            nc = len(ly.b)
            k = len(ly.w) // nc
            cc = min(nc, max(1, window // k))
            n = max(n, cc * k)
            m = max(m, cc)
            sr = opt.rounding == "stochastic" or (opt.rounding == "auto" and ly.master_w is None)
            j = _jump(off) if sr and sparse is None and off else None
            self.info[ly.index] = (cc, bytearray(nc) if cc < nc else None, sr, j)
            if sr:
                off += len(ly.w)
        self.total = _jump(off) if sparse is None and off else None
        self.raw = None
        if raw is not None:
            try:  # retyped by the loader binding (the pure-Python one copies: not used then)
                self.gw = K.mtm_view(raw[:4 * n], 102)
                self.raw = raw[:4 * n]
            except (TypeError, ValueError):
                raw = None
        if raw is None:
            self.gw = zeros("f", n)
        self.gb = zeros("f", m)
        self.row = zeros("f", m)
        c = max(len(ly.b) for ly in layers)
        self.zero = bytes(max(c, 256))  # (also the blocks that zero a hosted window)
        self.ones = b"\x01" * c
        self.r = None  # the running generator state in update order (sparse policy)
        self.done = []  # the layers stepped since the last end()
        bw = layers[0].model.backward_plan
        self.now = bw is not None and bw.redo is not None  # (recompute: step during backward)
        self.slots = [[None] * 8 for _ in layers]  # the deferred steps' arguments (no allocation)
        self.n_slots = 0

    def grad(self, ly, gwk, p, x, e, mask, sw, s):
        """Trained layer ly's gradient of one sample (gwk: its float32 grad-weight kernel, p, x,
        e, mask, sw, s its arguments): checked now, stepped at the end of backward."""
        lr = self.opt.rate
        lim = _LIM / lr if lr > 0 else 3.4e38
        if not (-lim <= sw <= lim and -lim <= s <= lim):  # (NaN fails too)
            raise ValueError("backward: layer %s: gradient scale %r is not finite or too large for lr %r (a "
                             "diverged gradient; lower the learning rate)" % (ly.name, sw, lr))
        if self.now:
            self.apply_grad(ly, gwk, p, x, e, mask, sw, s)
            return
        a = self.slots[self.n_slots]
        a[0], a[1], a[2], a[3] = ly, gwk, p, x
        a[4], a[5], a[6], a[7] = e, mask, sw, s
        self.n_slots += 1

    def after_backward(self):
        """The steps of the layers backward reached, in its order (backward.run)."""
        n = self.n_slots
        self.n_slots = 0
        for i in range(n):
            a = self.slots[i]
            self.apply_grad(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7])

    def apply_grad(self, ly, gwk, p, x, e, mask, sw, s):
        """Step trained layer ly with the gradient of one sample, or with none (gwk None)."""
        lr = self.opt.rate
        opt = self.opt
        cc, win, sr, j = self.info[ly.index]
        r = -1
        if sr:
            r = opt.rng
            if self.sparse:
                if self.r is not None:
                    r = self.r
            elif j is not None:
                r = _mat_apply(j, r)
        nc = len(ly.b)
        k = len(ly.w) // nc
        s_in, s_out = ly.in_scale, ly.out_scale
        t = ly.touched
        gw, gb, row = self.gw, self.gb, self.row
        raw = self.raw
        if raw is not None and not self.done:  # the step's first layer: the forward wrote over it
            z = memoryview(self.zero)
            n = len(raw)
            for o in range(0, n, len(z)):  # blocks of 256 B at least, once per step
                m = n - o if n - o < len(z) else len(z)
                raw[o:o + m] = z[:m]
        apply = F.update_s8_apply
        try:
            if cc == nc:  # the whole layer in one window
                gwv = gw if len(gw) == nc * k else memoryview(gw)[:nc * k]
                gbv = gb if len(gb) == nc else memoryview(gb)[:nc]
                if gwk is not None:
                    gwk(p, x, e, mask, sw, s, gwv, gbv)
                r = apply(ly.w, ly.w_scale, ly.b, ly.mult, ly.shift, gwv, gbv, ly.master_w, ly.master_b, t,
                          lr, s_in, s_out, r, row)
            else:
                src = memoryview(mask) if mask is not None else memoryview(self.ones)
                W, WS, B, M, S = (memoryview(ly.w), memoryview(ly.w_scale), memoryview(ly.b),
                                  memoryview(ly.mult), memoryview(ly.shift))
                MW = memoryview(ly.master_w) if ly.master_w is not None else None
                MB = memoryview(ly.master_b) if ly.master_b is not None else None
                T = memoryview(t) if t is not None else None
                Z = memoryview(self.zero)
                WV = memoryview(win)
                for c0 in range(0, nc, cc):
                    c1 = c0 + cc if c0 + cc < nc else nc
                    w0, w1 = c0 * k, c1 * k
                    if mask is not None and mask.find(b"\x01", c0, c1) < 0:
                        continue  # no channel of the window selected (and none draws)
                    n = c1 - c0
                    gwv = memoryview(gw)[:n * k]
                    gbv = memoryview(gb)[:n]
                    if gwk is not None:  # the window's channels only, into rows 0..n-1
                        WV[:] = Z[:nc]
                        WV[c0:c1] = src[c0:c1]
                        gwk(p, x, e, win, sw, s, gwv, gbv, c0)
                    r = apply(W[w0:w1], WS[c0:c1], B[c0:c1], M[c0:c1], S[c0:c1], gwv, gbv,
                              MW[w0:w1] if MW is not None else None, MB[c0:c1] if MB is not None else None,
                              T[c0:c1] if T is not None else None, lr, s_in, s_out, r, row)
        except BaseException:
            gw[:] = array.array("f", bytes(4 * len(gw)))  # the window dirty: zeroed again
            gb[:] = array.array("f", bytes(4 * len(gb)))
            raise
        if sr:
            self.r = r
        if t is not None:  # (no instance attribute where the class default stands)
            ly.touched = None
        if ly.index != ly.model.backward_plan.first:  # the lowest trained layer's grad input never runs
            ly.refresh_ratios()
        self.done.append(ly)

    def step(self, opt, layers, n, lr):
        if layers[0].index not in self.info:  # other layers (stepped by hand): their sums
            opt.apply(layers, n, lr, Sums())
            return
        if n != 1:  # stepped during backward: the bookkeeping
            raise ValueError("step: layer %s took its step during backward (Trainer batch 1): n must "
                             "be 1, got %d" % (layers[0].name, n))
        self.end(layers)

    def failed(self, opt, layers, fresh):
        self.n_slots = 0  # (the deferred steps of a failed backward: none taken)
        self.abandon()

    def forget(self, ly):
        pass

    def release(self):
        pass

    def end(self, layers):
        """The bookkeeping of an optimiser step whose layers stepped during backward (a layer no
        gradient reached steps now with none, as the sums path steps it)."""
        done = self.done
        for ly in layers:
            if ly not in done:
                self.apply_grad(ly, None, None, None, None, None, 0.0, 0.0)
        opt = self.opt
        if not self.sparse:
            if self.total is not None:
                opt.rng = _mat_apply(self.total, opt.rng)
        elif self.r is not None:
            opt.rng = self.r
        self.r = None
        self.done = []
        opt.steps += 1
        layers[0].model.train_steps += 1

    def abandon(self):
        """After a failed step: the layers stepped already (an interrupt between the deferred
        steps, or with recompute) took their step (counted); the rest did not."""
        if self.done:
            opt = self.opt
            if self.r is not None:
                opt.rng = self.r
            opt.steps += 1
            self.done[0].model.train_steps += 1
        self.r = None
        self.done = []


def _xs_cols(cols):
    # the xorshift16 step (as update_s8_apply's) is linear over GF(2)^16: its matrix as the
    # images of the 16 unit vectors, and jumps of n steps as its powers
    out = []
    for c in cols:
        c ^= (c << 7) & 0xFFFF
        c ^= c >> 9
        c ^= (c << 8) & 0xFFFF
        out.append(c)
    return out


def _mat_apply(cols, r):
    out = 0
    j = 0
    while r:
        if r & 1:
            out ^= cols[j]
        r >>= 1
        j += 1
    return out


def _jump(n):
    """The matrix (16 column ints) of n xorshift16 steps: _mat_apply(_jump(n), r) ==
    xorshift16_skip(r, n)."""
    res = [1 << j for j in range(16)]
    base = _xs_cols(res)
    n %= 65535
    while n:
        if n & 1:
            res = [_mat_apply(base, c) for c in res]
        base = [_mat_apply(base, c) for c in base]
        n >>= 1
    return res
