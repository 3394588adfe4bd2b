# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# The forward plans' buffer placement (Model.plan; docs/memory.md): imported by the model
# for it and forgotten again. `microtrain info`
# (tools/microtrain_tools/info.py) runs this same file under CPython to count it.
try:
    from micropython import const

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

_TILE = const(2048)  # bytes of a new tile for a fused conv + add (when no free segment holds a row)


def _take(free, j, n):
    # the first n bytes of free segment j, rounded up to 4 where the segment is longer: every
    # segment then starts 4-aligned, so that backward can retype an idle one to int32 / float32
    f = free[j]
    n = min(f[2], (n + 3) & ~3)
    if f[2] == n:
        return free.pop(j)
    t = [f[0], f[1], n]
    f[1] += n
    f[2] -= n
    return t


def _give(free, t):
    # segment t is free again, merged with free neighbours in its buffer (appended last)
    b, off, n = t
    j = 0
    while j < len(free):
        f = free[j]
        if f[0] is b and (f[1] + f[2] == off or off + n == f[1]):
            off = min(off, f[1])
            n += f[2]
            free.pop(j)
        else:
            j += 1
    free.append([b, off, n])


def _new(mk, n):
    # a new buffer of n bytes (mk: place's stand-ins)
    return zeros("b", n) if mk is None else mk(n)


def _view(t, n):
    # the first n bytes of segment t
    b, off = t[0], t[1]
    return b if off == 0 and n == len(b) else memoryview(b)[off:off + n]


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

def place(model, bufs, owner, last_use, keep=(), mk=None):
    # The forward plan: each tensor takes the smallest free segment of a buffer that
    # holds it (its first bytes; the rest stays free, and neighbouring free segments
    # of one buffer merge again), or a new buffer; the model input's buffer is reused
    # once read; fused conv + add pairs (_fusable) leave out the conv's output and take
    # a tile (the largest free segment, or a new buffer of about _TILE bytes) while the
    # conv runs. A training plan passes keep (plan.kept): those tensors are never freed, so
    # what backward reads lives on while the frozen prefix's tensors share memory by
    # lifetime. mk(n) makes a new buffer (None: zeros; plan.buffers counts with stand-ins:
    # bufs None, no views). Returns (the fused pairs, the free segments at the end: idle until the next
    # forward, where backward's buffers go).
    tensors = model.tensors
    inp, out_t = model.input.index, model.output.index
    fz = _fusable(model, last_use, keep)
    free = []  # [buffer, offset, length] not in use
    n = tensors[inp].numel
    seg = {inp: [mk(n) if bufs is None else bufs[inp], 0, n]}
    for ly in model.layers:
        f = fz.get(ly.index)
        if type(f) is int:  # the add of a fused pair: its output is skip f, updated in place
            k = f
            seg[ly.output] = seg.pop(k)
            if bufs is not None:
                bufs[ly.output] = bufs[k]
        elif f is not None:  # the conv of a fused pair: a tile while it runs
            p = ly.params
            row, n = p[4] * p[5], tensors[ly.output].numel
            best = -1
            for j in range(len(free)):
                if free[j][2] >= row and (best < 0 or free[j][2] > free[best][2]):
                    best = j
            if best >= 0:
                t = _take(free, best, min(free[best][2], n))
            else:
                b = _new(mk, min(n, row * max(1, _TILE // row)))
                owner[-1 - ly.index] = b
                t = [b, 0, len(b)]
            if bufs is not None:
                f += (_view(t, t[2]),)
                fz[ly.index] = f
            _give(free, t)
        else:
            n = tensors[ly.output].numel
            best = -1
            if ly.output != out_t:
                for j in range(len(free)):
                    if free[j][2] >= n and (best < 0 or free[j][2] < free[best][2]):
                        best = j
            if best >= 0:
                t = _take(free, best, n)
            else:
                b = _new(mk, n)
                owner[ly.output] = b
                t = [b, 0, n]
            seg[ly.output] = t
            if bufs is not None:
                bufs[ly.output] = _view(t, n)
        for j, ti in enumerate(ly.inputs):
            if j and ti == ly.inputs[0]:
                continue
            if last_use.get(ti) == ly.index and ti != out_t and ti in seg and ti not in keep:
                _give(free, seg.pop(ti))
    return fz, free
