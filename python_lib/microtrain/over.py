# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# Two ways a training plan (place.py) holds less: a conv written over its own input a block of
# rows at a time, and the first trained conv, whose output only a pool of one window reads, made
# a window of channels at a time (never whole), its gradient too. Imported by place.py for a
# training plan and forgotten again; `microtrain info` (tools/microtrain_tools/info.py) runs it
# under CPython beside place.py.
try:
    from micropython import const

    from microtrain import kern
except ImportError:  # CPython: info.py runs this file alone (not the package)
    def const(x):
        return x

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
# The .mtm constants this module reads, private: inlined, no globals entry.
_OP_CONV2D = const(1)
_OP_AVGPOOL = const(6)
# --- generated: end

_WIN = const(256)  # bytes of a split conv's window (its channels and one more: wg)
KEY = const(-524288)  # place.py's item keys KEY - i: the window of split conv i, or the slots of a run from i


def choose(model, last_use, keep, fz, ch, new, place):
    """(split, inplace) of a training plan (place.py's place: new 0 neither, 1 the split only, 2 both,
    None whichever of those gives the smallest buffers, ties: the fewer; place counts them with new as
    its bwd)."""
    if new == 0:
        return {}, {}
    if new is None:
        new = 3
    sp = split(model, keep)
    ip = inplace(model, last_use, keep, fz, ch, sp) if new > 1 else {}
    if new == 3 and (sp or ip):
        best = None
        for k in range(3 if ip else 2):
            o = {}
            place(model, None, o, last_use, keep, stand, k)
            n = 0
            for b in o.values():
                n += b[0]
            if best is None or n < best:
                best, new = n, k
        if new < 2:
            ip = {}
        if new < 1:
            sp = {}
    return sp, ip


def item(ly, sp, ip, life, root, end):
    """place.py's item of layer ly (in sp or ip) in life: a split conv's window, alive to the end
    (backward makes it again); a conv over its input: its output is its input's bytes (root), and one
    item of slots for a run of such layers, under its first's key."""
    i, t = ly.index, ly.output
    if i in sp:
        life[KEY - i] = [sp[i][1], i, end, KEY - i, 0, None]
        return
    x = ly.inputs[0]
    root[t] = root.get(x, x)
    k = i
    while k - 1 in ip:
        k -= 1
    it = life.get(KEY - k)
    if it is None:
        life[KEY - k] = [ip[i], i, i, KEY - k, 0, None]
    else:
        it[0], it[2] = max(it[0], ip[i]), i


def fill(fz, layers, sp, ip, views, copy, zeros):
    """place.py's table fz for sp and ip, from the views of their items ({key: bytes}): a run over
    its input (over, its slots, the descriptor), the split conv (win; its list for wg) and its pool
    (0: done by the conv). One descriptor for all of them: they run one at a time."""
    d = None
    for key in views:
        v = views[key]
        i = KEY - key
        ly = layers[i]
        if d is None:
            d = copy(ly.params)
        if i in ip:
            f = (over, (v, d))
            while i in ip:  # (the run's layers: one tuple)
                fz[i] = f
                i += 1
            continue
        pl = sp[i][0]
        n = len(v) // (ly.params[3] * ly.params[4])
        fz[i] = (win, [v, pl, d, copy(pl.params), zeros("b", n), bytearray(n), wg, 0, None, None, 0, 0])
        fz[pl.index] = 0


def inplace(model, last_use, keep, fz, ch, sp):
    # {conv index: bytes of its slots} for each conv2d that can write its output over its input
    # (over): stride 1 down the rows, no dilation, the same rows in and out (height and bytes per
    # row), its input read by nothing after it and not kept, neither the model input nor output,
    # not fused, not in a run of bands, not split (sp). Slots: one block of rows, two where
    # the kernel reaches above its row (pad_top > 0: a block is written back one block behind).
    layers, out = model.layers, {}
    ends = (model.input.index, model.output.index)
    runs = set()
    for j in ch:
        runs.add(j)
        for a in ch[j]:
            runs.add(a.index)
    for ly in layers:
        p, i = ly.params, ly.index
        x = ly.inputs[0]
        if ly.op != _OP_CONV2D or len(p) > 17 or p[8] != 1 or p[0] != p[3] or p[1] * p[2] != p[4] * p[5] \
                or last_use.get(x) != i or x in keep or x in ends or ly.output in ends or i in fz \
                or i in runs or i in sp:
            continue
        row = p[4] * p[5]
        n = row * max(p[10], 1) * (2 if p[10] else 1)  # (a block: pad_top rows at least, one at least)
        if n < model.tensors[x].numel:
            out[i] = n
    return out


def over(ly, x, f, bufs):
    # ly's output over its input x (inplace), a block of rows at a time into a slot: each block
    # goes back over the input once no later row reads those rows (at once where pad_top is 0,
    # else one block later, from the other slot): the same sums as the whole call. f: (the slots
    # of its run of such layers, the descriptor every such layer adjusts: one at a time)
    s, d = f
    p = ly.params
    d[:] = p
    row, h, pt, kh = p[4] * p[5], p[3], p[10], p[6]
    r = len(s) // row // (2 if pt else 1)
    X = memoryview(x)
    prev = o = 0
    for r0 in range(0, h, r):
        r1 = r0 + r if r0 + r < h else h
        lo = r0 - pt  # the first input row the block reads (negative: padding)
        a = lo if lo > 0 else 0
        hi = r1 - 1 - pt + kh
        hi = hi if hi < p[0] else p[0]
        d[0], d[3], d[10] = hi - a, r1 - r0, a - lo
        o = r * row if pt and (r0 // r) & 1 else 0
        kern.K.conv2d_s8_forward(d, X[a * row:hi * row], ly.w, ly.b, ly.mult, ly.shift,
                                 s[o:o + (r1 - r0) * row])
        if not pt:
            X[r0 * row:r1 * row] = s[:(r1 - r0) * row]
            continue
        if r0:  # the block before, from the other slot
            q = r * row - o
            X[prev * row:r0 * row] = s[q:q + (r0 - prev) * row]
        prev = r0
    if pt:
        X[prev * row:h * row] = s[o:o + (h - prev) * row]


def split(model, keep):
    # {conv index: (its pool, bytes of its window)} for the first trained layer (model._split,
    # set by Model.set_trained where the update takes a gradient a window of channels at a time:
    # backward.IntoMomentum, no sparse policy), a conv2d (groups 1, no dilation) whose output
    # only a pool of one window over all of it reads: that output never exists whole (win: a few
    # channels at a time into the pool; its gradient wg). The window: _WIN bytes, its
    # channels and one more (wg)
    i = getattr(model, "_split", -1)
    if i < 0:
        return {}
    layers = model.layers
    ly = layers[i]
    p, y = ly.params, ly.output
    if ly.op != _OP_CONV2D or len(p) > 17 or p[12] != 1 or p[5] < 2 or y == model.output.index:
        return {}
    n = p[3] * p[4]
    rd = [r for r in layers if y in r.inputs]
    if len(rd) != 1:
        return {}
    pl = rd[0]
    q = pl.params
    if pl.op != _OP_AVGPOOL or q[3] != 1 or q[4] != 1 or q[5] != q[0] or q[6] != q[1] or q[9] or q[10]:
        return {}
    cc = min(p[5] - 1, max(1, _WIN // n - 1))
    return {i: (pl, n * (cc + 1))}


def win(ly, x, f, bufs):
    # the forward of a split conv (split) and its pool: the conv's output a window of channels at a
    # time, each pooled into those channels of the pool's output (per channel: the same bits)
    t, pl, d, q = f[0], f[1], f[2], f[3]
    p = ly.params
    c, n = p[5], p[3] * p[4]
    k = len(ly.w) // c
    cc = len(t) // n - 1
    d[:] = p
    W, B, M, S, Y = memoryview(ly.w), memoryview(ly.b), memoryview(ly.mult), memoryview(ly.shift), \
        memoryview(bufs[pl.output])
    for c0 in range(0, c, cc):
        c1 = c0 + cc if c0 + cc < c else c
        d[5] = q[2] = c1 - c0
        v = t[:n * (c1 - c0)]
        kern.K.conv2d_s8_forward(d, x, W[c0 * k:c1 * k], B[c0:c1], M[c0:c1], S[c0:c1], v)
        kern.K.avgpool_s8_forward(q, v, Y[c0:c1])


def wg(f, x, e, mask, sw, sb, gw, gb, c0=0):
    # backward of a split conv (split; backward.conv2d calls it once for the shift, then hands it
    # to the update mode's grad as its grad-weight kernel, f as its descriptor): the kernel over
    # the channels c0.. of gw / gb (len(gb)), a window of channels at a time: those channels and
    # one more (the next; for the last window the one before) made again, their error written
    # over them by the pool's grad input; the extra channel's error is the largest |e| (f[7]), so
    # that every window has the whole tensor's shift (the pool's grad input takes it from its
    # largest |e|), and its gradient is masked off. gw None: the first window only, returns the
    # shift. Whole buffers where they fit, views made at the call: fewer views alive on the heap
    t, d, q, ev, tm, ly = f[0], f[2], f[3], f[4], f[5], f[8]
    p = ly.params
    d[:] = p
    c, n = p[5], p[3] * p[4]
    k = len(ly.w) // c
    cc = len(t) // n - 1
    m1 = c0 + len(gb) if gb is not None else cc
    for c1 in range(c0, m1, cc):  # (c1: the window's first channel, j its channels)
        j = m1 - c1 if m1 - c1 < cc else cc
        a = c1 if c1 + j < c else c1 - 1
        o = c1 - a  # 0: the extra channel last, 1: first
        d[5] = q[2] = j + 1
        v = t if j == cc else t[:n * (j + 1)]
        kern.K.conv2d_s8_forward(d, x, memoryview(ly.w)[a * k:(a + j + 1) * k], memoryview(ly.b)[a:a + j + 1],
                                 memoryview(ly.mult)[a:a + j + 1], memoryview(ly.shift)[a:a + j + 1], v)
        ev[o:o + j] = e[c1:c1 + j]
        ev[j - j * o] = f[7]
        for i in range(j + 1):
            tm[i] = 0 if i == j - j * o else 1
        i = kern.K.avgpool_s8_grad_input_act(q, v, ev if j == cc else ev[:j + 1], f[10], f[11], v)
        if gw is None:
            return i  # (the shift)
        f[9](d, x, v, tm if j == cc else tm[:j + 1], sw, sb, memoryview(gw)[(c1 - c0) * k:(c1 - c0 + j) * k],
             memoryview(gb)[c1 - c0:c1 - c0 + j], o)


def stand(n):
    # a stand-in for a buffer of n bytes (a count only)
    return [n]
