# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# The memory plan of training, in one place: which buffer each activation of the training
# plan takes, which of those are idle during backward, where backward's error buffers and
# int32 scratch go. Model.plan and backward_plan (below) allocate by it, memplan.py counts the heap
# a Trainer will need with it before anything is allocated, and the host's `microtrain info`
# (tools/microtrain_tools/info.py) runs this same file under CPython on the .mtm's layers.
#
# A model here is anything with `layers` (each with index, op, act, inputs, output, params),
# `tensors` (each with numel), `input.index` and `output.index`.
try:
    from micropython import const
except ImportError:  # CPython: info.py runs this file alone (not the package)
    def const(x):
        return x

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
# The .mtm constants this module reads, private: inlined, no globals entry.
_OP_CONV2D = const(1)
_OP_LINEAR = const(2)
_OP_RELU = const(3)
_OP_RELU6 = const(4)
_OP_MAXPOOL = const(5)
_OP_AVGPOOL = const(6)
_OP_MUL = const(12)
_OP_SOFTMAX = const(14)
_OP_MATMUL = const(15)
_OP_GRU = const(16)
# --- generated: end


def kept(m, first):
    """The tensors a training plan keeping from layer `first` never frees: every input and
    output of the layers from first on (backward reads them), and the model output."""
    keep = set()
    for ly in m.layers[first:]:
        for t in ly.inputs:
            keep.add(t)
        keep.add(ly.output)
    keep.add(m.output.index)
    return keep


def forward_fit(m, keep):
    """The buffers of a forward plan of whole buffers (training; inference where place.py does
    not fit): layer by layer, each output takes the smallest free buffer at least its size (the
    first freed on ties), else a new one (the model output always a new one); after a layer,
    the buffers of its inputs whose last reader it was are free again, unless they hold a
    tensor of `keep`, the model input or output. The model input has a buffer of its own, not
    counted here. Returns (bid: {tensor: buffer id}, size: bytes per buffer id in the order they
    were made, kept: per buffer id whether it holds a tensor of keep or the model output)."""
    layers = m.layers
    inp, out_t = m.input.index, m.output.index
    last_use = {}
    for ly in layers:
        for t in ly.inputs:
            last_use[t] = ly.index
    free, bid, size, hold = [], {}, [], []
    for ly in layers:
        n = m.tensors[ly.output].numel
        best = -1
        if ly.output != out_t:
            for k in range(len(free)):
                if size[free[k]] >= n and (best < 0 or size[free[k]] < size[free[best]]):
                    best = k
        if best >= 0:
            b = free.pop(best)
        else:
            b = len(size)
            size.append(n)
            hold.append(False)
        bid[ly.output] = b
        if ly.output in keep or ly.output == out_t:
            hold[b] = True
        for k, ti in enumerate(ly.inputs):
            if k and ti == ly.inputs[0]:
                continue  # x + x: one buffer, freed once
            if last_use.get(ti) == ly.index and ti not in keep and ti != inp and ti != out_t:
                free.append(bid[ti])
    return bid, size, hold


def buffers(m, first, place, bwd=None):
    """The training plan keeping from `first` in sizes, counted by place (place.py's place, run
    with stand-ins: nothing allocated; bwd: redo_plan's): (the bytes of each of its buffers, the
    arena and the output's; the lengths of the arena's gaps idle during backward, as idle lists
    them)."""
    keep = kept(m, first)
    last_use = {}
    for ly in m.layers:
        for t in ly.inputs:
            last_use[t] = ly.index
    owner = {}
    _, free = place(m, None, owner, last_use, keep, _stand_in, bwd)
    made = []
    for b in owner.values():
        if not any(b is c for c in made):
            made.append(b)
    sizes = []
    for b in made:
        sizes.append(b[0])
    return sizes, [f[2] for f in free]


def _stand_in(n):
    # a new buffer of n bytes, counted only (buffers): a list, so that each is an object of its own
    return [n]


def pack(m, first, region, inplace, scratch, sizes, window=0):
    """Backward's buffers in the idle forward buffers of lengths `sizes` (idle_sizes,
    idle): items (bytes, tensor, kind), kind 0 ebuf, 1 esecond, 2 emerge (the tensors
    read by two layers), tensor -1 the int32 scratch (scratch bytes, 0: none), -2 the float32
    gradient window of stepwise.StepInBackward (window bytes); first fit decreasing (ties in
    item order), offsets rounded up to 4 (scratch and window are retyped). All are alive
    through the whole backward: none overlap. Returns (items, {item index: (buffer index,
    offset)}); the others get new buffers."""
    cons = {}
    for ly in m.layers[first:]:
        for t in ly.inputs:
            if t in region:
                cons[t] = cons.get(t, 0) + 1
    items = [(scratch, -1, 0)] if scratch else []
    if window:  # stepwise.StepInBackward's float32 gradient window (tensor -2), zeroed by it before use
        items.append((window, -2, 0))
    for ly in m.layers[first:]:
        t = ly.output
        if t in inplace:
            continue
        n = m.tensors[t].numel
        items.append((n, t, 0))
        if cons.get(t, 0) > 1:
            items.append((n, t, 1))
            items.append((n, t, 2))
    at = {}
    if sizes:
        used = [0] * len(sizes)
        for i in sorted(range(len(items)), key=lambda i: (-items[i][0], i)):
            n = items[i][0]
            for b in range(len(sizes)):
                o = (used[b] + 3) & ~3
                if o + n <= sizes[b]:
                    at[i] = (b, o)
                    used[b] = o + n
                    break
    return items, at


def inplace_errors(m, first, region, over=True):
    # {t: its producer}: activations whose int8 error is written over the activation
    # itself (docs/memory.md):
    # - t's only reader in backward is a pool with disjoint windows, and t's producer is
    #   a conv / linear whose fused activation mask (act_keep) the pool's
    #   *_grad_input_act kernel applies as it writes;
    # - (over) t's only reader is a conv / linear, which reads t for its weight gradient
    #   before its grad input writes t's error, and t's producer reads nothing of t in
    #   its own backward: no fused activation, or a conv / linear's fused ReLU / ReLU6,
    #   whose mask the grad input applies as it writes (lo, hi: act_keep); not a ReLU
    #   or softmax layer (their backward reads their output). Not where the reader steps
    #   during backward (stepwise.StepInBackward: grad input first).
    made, cons = {}, {}
    for ly in m.layers[first:]:
        made[ly.output] = ly
        for t in ly.inputs:
            cons[t] = cons.get(t, 0) + 1
    out = {}
    for ly in m.layers[first:]:
        t, p, op = ly.inputs[0], ly.params, ly.op
        if t not in region or cons[t] != 1 or t == m.output.index:
            continue
        src = made[t]
        if (op == _OP_MAXPOOL or op == _OP_AVGPOOL) and p[7] >= p[5] and p[8] >= p[6]:
            if src.op == _OP_CONV2D or src.op == _OP_LINEAR:
                out[t] = src
        elif over and (op == _OP_CONV2D or op == _OP_LINEAR) and src.op != _OP_RELU and src.op != _OP_RELU6 \
                and src.op != _OP_SOFTMAX and src.op < _OP_GRU \
                and (not src.act or src.op == _OP_CONV2D or src.op == _OP_LINEAR):
            out[t] = src
    return out


def recompute_host(m, first, inplace, need, n, native=True, split=-1):
    # (t, its producer's index, its reader's index) of an activation whose buffer can hold
    # the int32 scratch (n values) when nothing else does (docs/memory.md): t takes its
    # error from a pool with disjoint windows (inplace), every layer using the scratch
    # comes after that pool (backward runs them before it), and the producer, a conv /
    # linear, runs its forward again just before the pool's backward: its input is kept.
    # None when there is no such t (or not native: the pure-Python kernels' mtm_view copies).
    # split: the index of a conv the plan makes a window at a time (over.py): its output never
    # exists whole, so it holds nothing.
    if not need or not native:
        return None
    for t, src in inplace.items():
        if src.index == split:
            continue
        for ly in m.layers[src.index + 1:]:
            if ly.inputs[0] == t:
                break
        if (ly.op == _OP_MAXPOOL or ly.op == _OP_AVGPOOL) and need[0].index > ly.index and \
                m.tensors[t].numel >= 4 * n:
            return t, src.index, ly.index
    return None


def redo_plan(m, first, region, inplace, place, native=True):
    # Trainer(recompute=True) where no idle error buffer holds the int32 scratch and an
    # activation h can be made again (recompute_host): the training plan placed through
    # backward (place.py's bwd) as (h, its pool's index, [(layer, bytes of its scratch)],
    # first) when that arena is smaller than h kept to the end of the forward (holding the
    # scratch); None otherwise, and with the pure-Python kernels (no retyped scratch).
    need, n, host = scratch_plan(m, first, region, inplace, native)
    r = None if host is not None else recompute_host(m, first, inplace, need, n, native)
    if r is None:
        return None
    scr = []
    for ly in need:
        scr.append((ly.index, 4 * m.tensors[ly.inputs[0]].numel))
    bwd = (r[0], r[2], scr, first)
    return bwd if sum(buffers(m, first, place, bwd)[0]) < sum(buffers(m, first, place)[0]) else None


def scratch_plan(m, first, region, inplace, native=True):
    # backward's int32 grad-input scratch (docs/memory.md): the
    # layers that need it (conv / linear; pools whose windows overlap, pool.c; mul, for the
    # error of its second input; matmul), its
    # size, and the tensor whose int8 error buffer can hold it (else None): one with
    # a single consumer below every such layer (its error is written after the
    # scratch's last use), of 4 bytes per value, and not an activation taking its own
    # error (inplace: inplace_errors). Not with the pure-Python kernels (native False), whose
    # mtm_view copies.
    need, n, cons = [], 0, {}
    for ly in m.layers[first:]:
        t, p, op = ly.inputs[0], ly.params, ly.op
        if t in region and (op == _OP_CONV2D or op == _OP_LINEAR or (
                (op == _OP_MAXPOOL or op == _OP_AVGPOOL) and (p[7] < p[5] or p[8] < p[6]))):
            need.append(ly)
            n = max(n, m.tensors[t].numel)
        elif op == _OP_MUL and ly.inputs[1] in region:  # x2's error sums: an int32 per x2 value
            need.append(ly)
            n = max(n, m.tensors[ly.inputs[1]].numel)
        elif op == _OP_MATMUL and (t in region or ly.inputs[1] in region):  # either input's error
            need.append(ly)
            n = max(n, m.tensors[t].numel, m.tensors[ly.inputs[1]].numel)
        for t in ly.inputs:
            cons[t] = -1 if t in cons else ly.index  # -1: two consumers or more
    if need and native:
        for ly in m.layers[first:]:
            if 0 <= cons.get(ly.output, -1) < need[0].index and m.tensors[ly.output].numel >= 4 * n \
                    and ly.output not in inplace:
                return need, n, ly.output
    return need, n, None


# -- the buffers themselves (Model.set_trained, which forgets this module once planned; the
# device only: info.py runs this file under CPython for the sizes above) --------------------

def backward_plan(m, first, window, redo):
    """The backward.BackwardPlan of m's training plan keeping from `first` (Model.set_trained):
    the error buffers and the int32 scratch (its own bytes unless an idle error buffer
    holds it) go into the forward buffers idle during backward where they fit
    (docs/memory.md, "Where backward's buffers live"), else into new buffers. window: bytes
    of StepInBackward's gradient window, or negative: -bytes of IntoMomentum's copy of the
    momentum (placed as the window, bw.window, but errors go over the activations as with
    the sums). (One argument for both: a parameter more is a larger heap-allocated frame.)
    redo: an activation may hold the scratch, made again (recompute_host); 2: the plan may be
    placed through backward too (redo_plan: nothing reads that activation after the forward)."""
    for ly in m.layers[first:]:  # a GRU's or an LSTM's backward and update: their own module
        if ly.op >= _OP_GRU:
            import microtrain.gru  # noqa: F401

            break
    from microtrain import backward, kern, quant

    K = kern.K

    def _retyped(v, code):
        # v (bytes) as int32 / float32 items in place (loader binding mtm_view), None where it
        # cannot be (unaligned; the pure-Python kernels)
        try:
            return K.mtm_view(v, code)
        except (TypeError, ValueError):
            return None

    region = set()
    for ly in m.layers[first:]:
        region.add(ly.output)
    inplace = inplace_errors(m, first, region, window <= 0)
    bwd = None
    if redo == 2 and kern.NATIVE:
        from microtrain.place import place

        bwd = redo_plan(m, first, region, inplace, place)
        place = None
        kern.forget("place")
    fz = m._fused.get(first)
    if bwd is not None or (fz and -3 in fz):  # placed (again) through backward, or no longer
        m.drop_plans(-2)
        if bwd is not None:
            m._fused[first] = bwd  # (Model.plan reads it there: no parameter more)
        m.plan(first)
        fz = m._fused.get(first)
    scr = fz.pop(-2, None) if fz else None  # (None: place.py could not run, whole buffers)
    bufs = m.plan(first)[0]
    if window < 0:
        window = -window
    ebuf, esecond, emerge = {}, {}, {}
    for t in inplace:
        ebuf[t] = bufs.get(t)  # (None: a split conv's output, over.py split)
    need, acc_n, host = scratch_plan(m, first, region, inplace, kern.NATIVE)
    idle_bufs = idle(m, first)
    sizes = [len(b) for b in idle_bufs]
    items, at = pack(m, first, region, inplace, 4 * acc_n if acc_n and host is None and kern.NATIVE
                          and scr is None else 0, sizes, window if kern.NATIVE else 0)
    acc = win = src = None  # src: (buffer, offset) of the int32 scratch's bytes
    for i in range(len(items)):
        n, t, kind = items[i]
        p = at.get(i)
        if t < 0:  # the scratch / window: retyped by the loader binding (an unaligned buffer cannot be)
            if p is not None:
                v = memoryview(idle_bufs[p[0]])[p[1]:p[1] + n]
                if t == -2:
                    win = v  # bytes: stepwise.StepInBackward retypes it (and zeroes it through them)
                    continue
                acc = _retyped(v, 105)
                if acc is not None:
                    src = (idle_bufs[p[0]], p[1])
            continue
        v = quant.zeros("b", n) if p is None else memoryview(idle_bufs[p[0]])[p[1]:p[1] + n]
        (ebuf, esecond, emerge)[kind][t] = v
    items = at = idle_bufs = None
    fz = m._fused.get(first)
    if fz:
        fz.pop(-1, None)  # (idle's gaps: taken)
        if not fz:
            m._fused[first] = None  # (no fused pair: no table kept)
    if host is not None:  # the int32 scratch in place in an idle int8 error buffer
        acc = _retyped(memoryview(ebuf[host])[:4 * acc_n], 105)
        if acc is not None:
            src = (ebuf[host], 0)
    r = None
    if scr is not None:  # each layer's scratch where the plan put it, the conv's output made again
        for ly in m.layers:
            if ly.output == bwd[0]:
                redo = (bwd[1], ly.index)
        acc_views = {}
        frow = None
        for ly in need:
            v = scr[ly.index]
            acc_views[ly.index] = _retyped(v, 105) or quant.zeros("i", len(v) >> 2)
            if len(v) == 4 * acc_n:
                frow = _retyped(v, 102)
        return backward.BackwardPlan(first, region, bufs, ebuf, esecond, emerge, acc_views, inplace, win,
                                     frow, redo)
    if redo and acc is None and acc_n:  # (split: a conv's output the plan holds no bytes of, over.py)
        r = m._split if getattr(m, "_split", -1) >= 0 and m.layers[m._split].output not in bufs else -1
        r = recompute_host(m, first, inplace, need, acc_n, kern.NATIVE, r)
    redo = None
    if r is not None:  # in an activation whose producer runs again before its pool's backward
        b = bufs[r[0]]
        acc = _retyped(memoryview(b)[:4 * acc_n], 105)
        if acc is not None:
            src = (b, 0)
            redo = (r[2], r[1])
    if acc is None and acc_n:
        acc = quant.zeros("i", acc_n)
    # the same bytes as float32: the optimiser's update scratch (optim.step; idle then)
    frow = _retyped(memoryview(src[0])[src[1]:src[1] + 4 * acc_n], 102) if src is not None else None
    acc_views = {}
    for ly in need:
        if ly.op == _OP_MATMUL:  # (sliced for each input's error)
            acc_views[ly.index] = memoryview(acc)[:max(m.tensors[t].numel for t in ly.inputs)]
        else:
            acc_views[ly.index] = memoryview(acc)[:m.tensors[ly.inputs[1 if ly.op == _OP_MUL else 0]].numel]
    return backward.BackwardPlan(first, region, bufs, ebuf, esecond, emerge, acc_views, inplace, win, frow,
                                 redo)


def idle(m, first):
    """The gaps of the training plan's arena (keeping from `first`) between the tensors kept at
    the end of a forward (place.py: Model.plan keeps them with its fused pairs until
    backward_plan takes them): idle until the next forward (backward's buffers go there:
    pack). In offset order, as buffers lists their lengths."""
    fz = m._fused.get(first)
    out = []
    for b, off, n in fz.get(-1, ()) if fz else ():
        out.append(b if off == 0 and n == len(b) else memoryview(b)[off:off + n])
    return out
