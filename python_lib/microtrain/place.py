# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# The forward plans' buffer placement by lifetime (Model.plan; docs/memory.md): imported by
# the model for it and forgotten again. `microtrain info`
# (tools/microtrain_tools/info.py) runs this same file under CPython to count it.
from array import array

try:
    from micropython import const

    from microtrain import kern
    from microtrain.quant import zeros
except ImportError:  # CPython: info.py runs this file alone (not the package)
    def const(x):
        return x

    def zeros(typecode, n):
        return bytearray(n)

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
# The .mtm constants this module reads, private: inlined, no globals entry.
_OP_CONV2D = const(1)
_OP_ADD = const(8)
# --- generated: end

_TILE = const(2048)  # bytes of a fused conv's tile and of a chain's band (at least the rows they need)
_SCR = const(-1048576)  # item keys _SCR - j: the int32 scratch of layer j's grad input (bwd)


def _fusable(model, last_use, keep):
    # {conv index: (add layer, side), add index: skip} for each conv2d whose only consumer
    # is an add whose other input (skip) exists before the conv, dies at the add and
    # is read by nothing in between: the conv runs a block of rows at a time into a
    # tile and adds it into skip in place (conv2d_add_s8_forward), so its output never
    # exists whole. Not where the conv's output or the skip is kept (keep: backward reads it).
    layers = model.layers
    made, uses = {}, {}
    for ly in layers:
        made[ly.output] = ly.index
        for t in ly.inputs:
            uses[t] = uses.get(t, 0) + 1
    ends = (model.input.index, model.output.index)
    fz = {}
    for a in layers:
        if a.op != _OP_ADD or len(a.inputs) != 2 or a.inputs[0] == a.inputs[1] or a.output in ends:
            continue
        for side in (0, 1):
            c, k = a.inputs[side], a.inputs[1 - side]
            i = made.get(c, -1)
            if i < 0 or uses[c] != 1 or c in ends or k in ends or last_use.get(k) != a.index or c in keep \
                    or k in keep:
                continue
            cv = layers[i]
            p = cv.params
            if cv.op != _OP_CONV2D or i in fz or made.get(k, -1) >= i or (len(p) > 17 and (
                    p[17] != 1 or p[18] != 1)):
                continue
            if any(k in ly.inputs for ly in layers[i:a.index]):
                continue
            fz[i] = (a, side)
            fz[a.index] = k
            break
    return fz

def _chains(model, last_use, keep, fz):
    # {B index: (A1, ..., Am)} for each run of conv2d layers where each reads only the output of the
    # one before it, which nothing else reads: B a conv2d of any kernel and stride down the rows
    # (plain, or fused with an add): the outputs of the As never exist whole, each is made a band of
    # rows at a time just before the next reads them (_chain): a pointwise expand, a depthwise 3x3
    # (stride 1 or 2) and a pointwise project. A1's input rows are read before B's fused add writes
    # over them (each A's pad_top <= its stride). Nothing of the run is kept; no dilation. A pair
    # starts a run where A's input lives on to B anyway, or where A's output outgrows A's input or
    # B's output and a band (else the band only makes A's input live longer); a run grows by its B's
    # output wherever that outgrows the next B's output and a band.
    layers, tensors = model.layers, model.tensors
    out = {}
    for b in layers[1:]:
        a = layers[b.index - 1]
        pa, pb = a.params, b.params
        y = a.output
        if a.op != _OP_CONV2D or b.op != _OP_CONV2D or b.inputs[0] != y or last_use.get(y) != b.index \
                or y in keep or y == model.output.index or pb[10] >= pb[6] or pa[10] > pa[8] or len(pa) > 17 \
                or len(pb) > 17 or type(fz.get(a.index)) is tuple:  # (A fused itself)
            continue
        n = tensors[y].numel
        run = out.pop(a.index, None)  # (A the B of a run: the run grows)
        if run is not None:
            if n <= tensors[b.output].numel or n <= 2 * _TILE:
                out[a.index] = run
                continue
            run += (a,)
        elif last_use.get(a.inputs[0], -1) < b.index and a.inputs[0] not in keep and (
                n <= 2 * _TILE or n <= tensors[a.inputs[0]].numel and n <= tensors[b.output].numel):
            continue
        else:
            run = (a,)
        out[b.index] = run
    return out


def _chain(a, b, x, f, out):
    # b's output (fused: b added into the skip out) a block of rows at a time, the run's outputs made
    # a band of rows at a time just before the next layer reads them (_chains): the same sums as the
    # whole calls. f: (add or None, side, tile, a (A1), b's and the add's descriptors, adjusted per
    # block, -, -, this function, then per A: A, its band, its descriptor; one tuple: fewer objects
    # in the heap). at: per band its first and end rows held and the end row wanted. One frame
    # (a call more would take heap): per block, band i is
    # filled to the rows wanted, a block of rows at a time that band i - 1 can feed, going down to
    # band i - 1 first where it lacks them; the rows read again move to a band's start a row at a
    # time (no overlapping copy).
    add, side, tile, db, dd = f[0], f[1], f[2], f[4], f[5]  # (no slice: no tuple made per call)
    n = (len(f) - 9) // 3
    band = f[-2]
    pa, pb = f[-3].params, b.params
    at = [0] * (3 * n)
    yrow, orow, h, sb, pb_t, kb, hy = pa[4] * pa[5], pb[4] * pb[5], pb[3], pb[8], pb[10], pb[6], pa[3]
    r = max(1, (len(band) // yrow - kb) // sb + 1)  # (the rows a band holds: place)
    for r0 in range(0, h, r):
        r1 = min(h, r0 + r)
        top = r0 * sb - pb_t  # the first row of the band that block r0 reads (negative: padding)
        i = n - 1
        lo2 = top if top > 0 else 0
        at[3 * i + 2] = min(hy, (r1 - 1) * sb - pb_t + kb)
        while True:
            a, bd, d = f[9 + 3 * i], f[10 + 3 * i], f[11 + 3 * i]
            p = a.params
            yr, xr, sa, pt, ka = p[4] * p[5], p[1] * p[2], p[8], p[10], p[6]
            lo, hi = at[3 * i], at[3 * i + 1]
            if lo2 > lo:
                for j in range(max(hi - lo2, 0)):
                    bd[j * yr:(j + 1) * yr] = bd[(lo2 - lo + j) * yr:(lo2 - lo + j + 1) * yr]
                hi, lo = max(hi, lo2), lo2
                at[3 * i], at[3 * i + 1] = lo, hi
            if hi >= at[3 * i + 2]:
                if i == n - 1:
                    break
                i += 1
                lo2 = at[3 * i]
                continue
            e = at[3 * i + 2]
            if i:
                e = min(e, hi + (len(f[7 + 3 * i]) // xr - ka) // sa + 1)
            xs = hi * sa - pt
            xe = min(p[0], (e - 1) * sa - pt + ka)
            lo2 = xs if xs > 0 else 0
            if i and at[3 * i - 2] < xe:  # band i - 1 lacks rows: filled first
                at[3 * i - 1] = xe
                i -= 1
                continue
            d[10] = -xs if xs < 0 else 0
            d[0], d[3] = xe - lo2, e - hi
            if i:
                o = at[3 * i - 3]
                v = f[7 + 3 * i][(lo2 - o) * xr:(xe - o) * xr]
            else:
                v = memoryview(x)[lo2 * xr:xe * xr]
            kern.K.conv2d_s8_forward(d, v, a.w, a.b, a.mult, a.shift, bd[(hi - lo) * yr:(e - lo) * yr])
            at[3 * i + 1] = e
            lo2 = lo
        lo, hi = at[3 * i], at[3 * i + 1]
        db[0], db[3], db[10] = hi - lo, r1 - r0, -top if top < 0 else 0
        y = band[:(hi - lo) * yrow]
        o = memoryview(out)[r0 * orow:r1 * orow]
        if add is None:
            kern.K.conv2d_s8_forward(db, y, b.w, b.b, b.mult, b.shift, o)
        else:
            dd[0] = (r1 - r0) * orow
            kern.K.conv2d_add_s8_forward(db, y, b.w, b.b, b.mult, b.shift, dd, side, o, tile)


def _copy(p):
    # a descriptor the chain adjusts per band (the model's may be in flash)
    return array("i", p)


def _fit(items):
    # each item in turn at the lowest 4-aligned offset where it overlaps no earlier item alive
    # at the same time (its offset: it[4]); returns the bytes of the arena
    size = 0
    for i in range(len(items)):
        it = items[i]
        near = []
        for j in range(i):
            o = items[j]
            x, y = o[5], it[5]  # (an item's second life, or None: the two meet at any common time)
            if (o[1] <= it[2] and it[1] <= o[2]) or (x is not None and x[0] <= it[2] and it[1] <= x[1]) or (
                    y is not None and y[0] <= o[2] and o[1] <= y[1]):
                near.append(o)
        near.sort(key=lambda o: o[4])
        off = 0
        for o in near:
            if off + it[0] <= o[4]:
                break
            off = max(off, (o[4] + o[0] + 3) & ~3)
        it[4] = off
        size = max(size, off + it[0])
    return size


def place(model, bufs, owner, last_use, keep, mk, bwd):
    # The forward plan (docs/memory.md): one arena for every activation but the model output
    # (a buffer of its own), each tensor at an offset chosen by its lifetime, from the layer
    # that makes it (the model input: before the first) to its last reader, or to the end for
    # a tensor of keep (a training plan's: backward reads them) and the model input when keep
    # holds it; in the order the layers make them or largest first, whichever needs the smaller
    # arena, each at the lowest 4-aligned offset where it overlaps no placed tensor alive at the
    # same time (_fit). Fused conv + add pairs
    # (_fusable) leave out the conv's output (the add's output is the skip, updated in place:
    # one lifetime) and take a tile of about _TILE bytes of whole rows while the conv runs.
    # bufs None: count only (plan.buffers, info.py): mk(n) makes stand-ins, no views.
    # bwd (plan.redo_plan): (h, its pool, [(layer j, bytes)], first) where the conv output h is
    # made again before its pool's backward (Trainer(recompute=True)): the timeline goes on
    # through backward, layer j's at 2 * len(layers) - j; each kept tensor lives to the backward
    # of its producer (or of `first`, for one made before it), h only to its last reader in the
    # forward and again from its pool's backward to its producer's, and layer j's grad-input
    # scratch (its int32 accumulator) at layer j's backward: bytes idle in the backward of
    # upper layers serve lower ones (fz[-2]: {j: the scratch's bytes}; fz[-3]: the mark).
    # Fills owner {a tensor: the whole buffer holding it} (the arena, the output's) and bufs
    # {tensor: its bytes}; returns (the fused pairs, the gaps of the arena between the tensors
    # alive during backward as [arena, offset, length]: idle until the next forward, where
    # backward's buffers go). A training plan not placed through backward may hold a split conv and
    # convs over their input (over.py; bwd an int there: over.choose's counts).
    tensors, layers = model.tensors, model.layers
    inp, out_t = model.input.index, model.output.index
    fz = _fusable(model, last_use, keep)
    end = len(layers)
    root = {}  # the add of a fused pair: its output is its skip's bytes
    items = []  # [bytes, first layer, last layer, tensor (< 0: a tile, band, scratch), offset, second life]
    life = {inp: [tensors[inp].numel, -1, end if inp in keep else last_use.get(inp, -1), inp, 0, None]}
    ch = _chains(model, last_use, keep, fz)
    ov = sp = None  # over.py and (its split conv, its convs over their input, their items' views)
    if keep and type(bwd) is not tuple:
        try:
            import microtrain.over as ov
        except ImportError:  # CPython: info.py loaded it beside this file
            import sys

            ov = sys.modules["microtrain_device_over"]
        sp = ov.choose(model, last_use, keep, fz, ch, bwd, place) + ({},)
        bwd = None
    for ly in layers:
        f = fz.get(ly.index)
        t = ly.output
        if sp is not None and (ly.index in sp[0] or ly.index in sp[1]):  # its window / slots (over.py)
            ov.item(ly, sp[0], sp[1], life, root, end)
            continue
        c = None  # its run's B, for an A of a run
        for j in ch:
            if ly in ch[j]:
                c = j
        if c is not None:  # A of a run: its rows made in a band while the next layers to B run
            p = ly.params
            row = p[4] * p[5]
            k = -3 - 2 * ly.index  # (odd keys: bands, even: tiles)
            q = layers[ly.index + 1].params  # (rows: one block of the next layer's rows, about _TILE bytes)
            n = row * min(p[3], (max(1, (_TILE // row - q[6]) // q[8] + 1) - 1) * q[8] + q[6])
            life[k] = [n, ly.index, c, k, 0, None]
        elif type(f) is int:
            root[t] = root.get(f, f)
        elif f is not None:
            p = ly.params
            row, n = p[4] * p[5], tensors[t].numel
            k = -2 - 2 * ly.index
            life[k] = [min(n, row * max(1, _TILE // row)), ly.index, ly.index, k, 0, None]
        if c is None and type(f) is not int and f is None and t != out_t:
            life[t] = [tensors[t].numel, ly.index, ly.index, t, 0, None]
    for t in last_use:  # how long each lives (through the skips it becomes)
        u = end if t in keep else last_use[t]
        r = root.get(t, t)
        if r in life and life[r][2] < u:
            life[r][2] = u
    for j in ch:  # a run's A1 reads its input while B runs
        t = ch[j][0].inputs[0]
        r = root.get(t, t)
        if r in life and life[r][2] < j:
            life[r][2] = j
    for t in keep:
        r = root.get(t, t)
        if r in life:
            life[r][2] = end
    if bwd is not None:  # (no fusion touches a kept tensor: root is t itself; no local more: u first)
        u = bwd[3]
        for ly in layers:
            t = ly.output
            if t in keep and t in life and t != bwd[0]:
                life[t][2] = 2 * end - (ly.index if ly.index > u else u)
        if inp in keep:
            life[inp][2] = 2 * end - u
        it = life[bwd[0]]
        it[2] = bwd[1]  # (its pool: its last reader)
        it[5] = (2 * end - bwd[1], 2 * end - it[1])
        for j, n in bwd[2]:
            life[_SCR - j] = [n, 2 * end - j, 2 * end - j, _SCR - j, 0, None]
    for it in life.values():
        items.append(it)
    life = None
    # two orders, the smaller arena wins (ties: the first): as the layers make them, largest first
    items.sort(key=lambda it: it[1])
    size = _fit(items)
    by_size = sorted(items, key=lambda it: (-it[0], it[1]))
    if _fit(by_size) < size:
        items = by_size
    size = _fit(items)
    by_size = None
    arena = (zeros("b", size) if mk is None else mk(size)) if size else None
    free, at = [], 0
    for it in sorted(items, key=lambda o: o[4]):  # the gaps between what lives in backward
        if (it[2] >= end or it[5] is not None) and it[0]:
            if it[4] > at:
                free.append([arena, at, it[4] - at])
            at = max(at, (it[4] + it[0] + 3) & ~3)
    if size > at:
        free.append([arena, at, size - at])
    n = tensors[out_t].numel
    ob = zeros("b", n) if mk is None else mk(n)
    owner[out_t] = ob
    if bufs is not None:
        bufs[out_t] = ob
    if items:
        owner[items[0][3]] = arena  # (one entry per buffer: a smaller table)
    if bwd is not None:
        fz[-2] = {}  # the scratch of each layer (fz[-3]: the mark of a plan placed through backward)
        fz[-3] = 1
    for it in items:
        t, off, n = it[3], it[4], it[0]
        v = arena if bufs is None or (off == 0 and n == size) else memoryview(arena)[off:off + n]
        if t < 0:
            if bufs is None:
                continue
            if t <= _SCR:
                fz[-2][_SCR - t] = v
                continue
            if sp is not None and t <= ov.KEY:
                sp[2][t] = v
                continue
            if t & 1 == 0:  # the tile of a fused conv
                fz[(-2 - t) >> 1] += (v,)
            else:  # the band of a run's A, under A's index until its B's step takes it
                fz[(-3 - t) >> 1] = memoryview(arena)[off:off + n]
        elif bufs is not None:
            bufs[t] = v
    for j in ch if bufs is not None else ():  # (after the tiles) a run's bands for B's step (the As: none)
        g = fz.get(j) or (None, 0, None)
        a = ch[j][0]
        f = g + (a, _copy(layers[j].params), None if g[0] is None else _copy(g[0].params), None, None, _chain,
                 a, fz[a.index], _copy(a.params))
        fz[a.index] = 0
        for a in ch[j][1:]:
            f += (a, fz[a.index], _copy(a.params))
            fz[a.index] = 0
        fz[j] = f
    for ly in layers:
        if ly.output in root and bufs is not None:
            bufs[ly.output] = bufs[root[ly.output]]
    if sp is not None and sp[2]:
        ov.fill(fz, layers, sp[0], sp[1], sp[2], _copy, zeros)
    if ov is not None and mk is not ov.stand and "kern" in globals():  # (its functions in fz keep theirs)
        kern.forget("over")
    return fz, free
