# backward.IntoMomentum's float32 window over a bfloat16 momentum (Trainer sums=False with
# SGD(state='bf16'); docs/memory.md), apart from stepwise.py: that mode loads only this.
from micropython import const

from microtrain.kern import K
from microtrain.optim import F
from microtrain.quant import zeros

# floats of backward.IntoMomentum's window with a bfloat16 state (it runs each window of channels
# once per sample and once per step: small, as it may not find room in the idle buffers)
HALF_WINDOW = const(64)


def floats(layers, window):
    """Floats of a gradient window for these trained layers (as stepwise.floats: neither mode
    loads the other's module)."""
    n = 0
    for ly in layers:
        nc = len(ly.b)
        k = len(ly.w) // nc
        cc = min(nc, max(1, window // k))
        if cc * k > n:
            n = cc * k
    return n


def half_floats(layers):
    """Floats of HalfWindow's window for these trained layers."""
    return floats(layers, HALF_WINDOW)


def _clear(a, n, z):
    # a[:n] = +0.0, len(z) values at a time (z zeros of a's item type)
    k = len(z)
    for o in range(0, n, k):
        m = n - o if n - o < k else k
        a[o:o + m] = z[:m]


class HalfWindow:
    """backward.IntoMomentum's float32 window over a bfloat16 momentum (Trainer sums=False with
    SGD(state='bf16'); docs/numerics.md, "Update"): the rows of a few output channels of a
    layer (at most `window` floats, one channel at least). Per sample, window after window: rows
    set to +0, the grad-weight kernel adds the sample's gradient into them, update_bf16_momentum
    folds them into v (v = bf16(ftz(a v) + g), a = m at the batch's first sample, else 1). The
    step: rows +0, update_bf16_momentum (a = 1, or m where no gradient came) widens v into them,
    update_s8_apply steps those channels. A channel refused by update_s8_apply leaves the earlier
    windows of that layer stepped (as StepInBackward's)."""

    def __init__(self, layers, raw, opt, window=HALF_WINDOW):
        # raw: bytes of at least 4 * floats(layers, window) for the rows (the idle forward
        # buffers, Model.set_trained's bw.window), or None: a buffer of its own; opt: the
        # optimiser, whose state(ly) is v
        self.opt = opt
        self.a = 1.0  # the next fold's decay (set by IntoMomentum.grad)
        n = floats(layers, window)
        self.tiles = {}  # layer index -> (channels per window, window mask or None: one window)
        m = c = 0
        for ly in layers:
            nc = len(ly.b)
            cc = min(nc, max(1, window // (len(ly.w) // nc)))
            m = max(m, cc)
            c = max(c, nc)
            self.tiles[ly.index] = (cc, bytearray(nc) if cc < nc else None)
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
        # HALF_WINDOW bytes of zeros clear the rows a slice at a time (also the window masks' zeros)
        self.zero = memoryview(bytes(max(c, HALF_WINDOW)))
        try:  # the float32 zeros: the same bytes retyped (the pure-Python binding copies them)
            self.zf = K.mtm_view(self.zero[:HALF_WINDOW], 102)
        except (TypeError, ValueError):
            self.zf = memoryview(zeros("f", HALF_WINDOW // 4))
        self.ones = memoryview(b"\x01" * c)

    def _rows(self, n, nb):
        # +0.0 in the first n weight rows' floats and nb biases: bytes, not float arithmetic (a
        # forward wrote over hosted rows since)
        raw = self.raw
        if raw is not None:
            _clear(raw, 4 * n, self.zero[:HALF_WINDOW])
        else:
            _clear(self.gw, n, self.zf)
        _clear(self.gb, nb, self.zf)
        return memoryview(self.gw)[:n], memoryview(self.gb)[:nb]

    def __call__(self, ly, gwk, p, x, e, mask, sw, s):
        """One sample's gradient of trained layer ly (gwk its float32 grad-weight kernel, p .. s
        its arguments) into its v (the bytearrays of the weights' and biases' bfloat16 values),
        decayed by self.a."""
        st, a = self.opt.state(ly), self.a
        nc = len(ly.b)
        k = len(ly.w) // nc
        cc, tm = self.tiles[ly.index]
        upd = F.update_bf16_momentum
        VW, VB = memoryview(st[0]), memoryview(st[1])
        M = memoryview(mask) if mask is not None else None
        for c0 in range(0, nc, cc):
            c1 = c0 + cc if c0 + cc < nc else nc
            if mask is not None and mask.find(b"\x01", c0, c1) < 0:
                continue  # no channel of the window selected
            gwv, gbv = self._rows((c1 - c0) * k, c1 - c0)
            if tm is None:
                gwk(p, x, e, mask, sw, s, gwv, gbv)
            else:  # the window's channels only, into rows 0..
                T = memoryview(tm)
                T[:] = self.zero[:nc]
                T[c0:c1] = (M if M is not None else self.ones)[c0:c1]
                gwk(p, x, e, tm, sw, s, gwv, gbv, c0)
            t = M[c0:c1] if M is not None else None
            upd(gwv, VW[2 * c0 * k:2 * c1 * k], k, t, a)
            upd(gbv, VB[2 * c0:2 * c1], 1, t, a)

    def step(self, ly, a, t, lr, r, row):
        """The step of trained layer ly from its v decayed by a, over the touched channels t
        (None: all), stochastic rounding from generator state r (-1: nearest); returns the new
        state."""
        st = self.opt.state(ly)
        nc = len(ly.b)
        k = len(ly.w) // nc
        cc = self.tiles[ly.index][0]
        upd, apply = F.update_bf16_momentum, F.update_s8_apply
        VW, VB = memoryview(st[0]), memoryview(st[1])
        W, WS, B, M, S = (memoryview(ly.w), memoryview(ly.w_scale), memoryview(ly.b), memoryview(ly.mult),
                          memoryview(ly.shift))
        MW = memoryview(ly.master_w) if ly.master_w is not None else None
        MB = memoryview(ly.master_b) if ly.master_b is not None else None
        T = memoryview(t) if t is not None else None
        s_in, s_out = ly.in_scale, ly.out_scale
        for c0 in range(0, nc, cc):
            c1 = c0 + cc if c0 + cc < nc else nc
            if t is not None and t.find(b"\x01", c0, c1) < 0:
                continue  # no channel of the window touched (and none draws)
            w0, w1 = c0 * k, c1 * k
            gwv, gbv = self._rows(w1 - w0, c1 - c0)
            tt = T[c0:c1] if T is not None else None
            upd(gwv, VW[2 * w0:2 * w1], k, tt, a)
            upd(gbv, VB[2 * c0:2 * c1], 1, tt, a)
            r = apply(W[w0:w1], WS[c0:c1], B[c0:c1], M[c0:c1], S[c0:c1], gwv, gbv,
                      MW[w0:w1] if MW is not None else None, MB[c0:c1] if MB is not None else None, tt, lr,
                      s_in, s_out, r, row)
        return r
