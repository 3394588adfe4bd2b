# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# The Trainer's memory check (docs/memory.md): the bytes a Trainer is about to
# allocate, from the model's shapes only (nothing is allocated to find them),
# compared with the free heap before it allocates; a shortfall raises a
# MemoryError that says what is needed, what is free, the largest free block
# and what would fit. Imported by Trainer when it is created and by load() when
# a model file does not fit, and forgotten again (forget()).
import gc

from micropython import const

from microtrain import kern, plan

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
# The .mtm constants this module reads, private: inlined, no globals entry.
_OP_GRU = const(16)
_OP_LSTM = const(17)
# --- generated: end


# heap bytes of one buffer of n bytes: the array object (16 B) and the data
# rounded up to the GC's 16-byte blocks
def _buf(n):
    return 16 + ((n + 15) & ~15) if n else 0


def _plan_bytes(model, first, region, inplace, redo, split):
    # the heap of the training plan's buffers (plan.buffers; redo: placed through backward where
    # plan.redo_plan finds that smaller; split: the update takes the gradient by windows, as
    # Model.set_trained tells place.py: over.py may split the first trained conv), the lengths of
    # those idle during backward (where its buffers go), whether it was placed so (its
    # scratch inside), and the split conv's index where splitting made the plan smaller (else -1:
    # over.choose's rule; its output never exists whole)
    from microtrain.place import place

    was = getattr(model, "_split", -1)
    model._split = first if split else -1  # (before redo_plan, as Model.set_trained sets it)
    try:
        bwd = plan.redo_plan(model, first, region, inplace, place, kern.NATIVE) if redo else None
        sizes, idle = plan.buffers(model, first, place, bwd)
        sp = -1
        if split and bwd is None:
            model._split = -1
            if sum(sizes) < sum(plan.buffers(model, first, place)[0]):
                sp = first
    finally:
        model._split = was
    total = 0
    for n in sizes:
        total += _buf(n)
    return total, idle, bwd is not None, sp


def _now_bytes(model, idx):
    # stepwise.StepInBackward: the shared gradient window (weights; placed with backward's buffers), its bias
    # and update row, its mask bytes, a window mask per layer with more than one window, per
    # layer its tuple and jump matrix
    from microtrain.stepwise import WINDOW

    n = m = c = 0
    out = 0
    for i in idx:
        ly = model.layers[i]
        nc = len(ly.b)
        cc = min(nc, max(1, WINDOW // (len(ly.w) // nc)))
        n = max(n, cc * (len(ly.w) // nc))
        m = max(m, cc)
        c = max(c, nc)
        out += 112 + (_buf(nc) if cc < nc else 0)
    return out + 2 * _buf(4 * m) + 2 * _buf(max(c, 256)) + 64, 4 * n  # (the rest, the window)


def _half_bytes(model, idx):
    # halfwin.HalfWindow (a bfloat16 momentum taking the gradients): its window's biases, the
    # zero / ones masks (the float32 zeros a view of the zero mask), a window mask per layer with
    # more than one window; the window of weights (placed with backward's buffers)
    from microtrain.halfwin import HALF_WINDOW

    n = m = c = 0
    out = 0
    for i in idx:
        ly = model.layers[i]
        nc = len(ly.b)
        cc = min(nc, max(1, HALF_WINDOW // (len(ly.w) // nc)))
        n = max(n, cc * (len(ly.w) // nc))
        m = max(m, cc)
        c = max(c, nc)
        out += 48 + (_buf(nc) if cc < nc else 0)
    return out + _buf(4 * m) + _buf(max(c, HALF_WINDOW)) + _buf(c) + 128, 4 * n  # (the rest, the window)


def need(model, idx, mode, n_state, sparse, fold=False, redo=False, half=False):
    """Bytes per item that Trainer(model, train=idx, mode, an optimiser with n_state
    moments (half: 2 B a value, state='bf16'), sparse) allocates: a list of (item, bytes).
    fold: no gradient sums, True: the
    gradients go into the momentum (SGD momentum: batch 1, or a larger batch with sums=False),
    "copy": the same at batch 1 with a copy of the momentum (Trainer sums=None) placed as the
    window, "now": each layer steps during backward (batch 1, plain SGD: the gradient window of
    stepwise.StepInBackward)."""
    layers = model.layers
    grads = window = 0
    split = redo and (fold is True or fold == "copy") and n_state and sparse is None  # (Trainer's: over.py)
    if fold == "now":
        grads, window = _now_bytes(model, idx)
    elif fold is True and half and n_state:  # the gradients into the bfloat16 momentum
        grads, window = _half_bytes(model, idx)
        fold = "half"
    elif fold == "copy":  # backward.IntoMomentum's copy of the momentum
        fold = True
        for i in idx[1:]:
            window += 4 * (len(layers[i].w) + len(layers[i].b))
    state = master = copies = sp = row = 0
    for i in idx:
        ly = layers[i]
        wn, c = len(ly.w), len(ly.b)
        p = _buf(4 * wn) + _buf(4 * c)
        if fold != "now":  # the optimiser's update row: the widest layer's, 2 c folded (apply_keep)
            row = max(row, c << (fold is True))  # ("half": update_s8_apply)
        if not ly.trained:  # a trained layer has its copies and gradient sums already
            grads += 0 if fold else p
            # int8 weights; int32 bias, mult, shift, grad-input ratios; float32 scales
            copies += _buf(wn) + (4 if i == idx[0] else 5) * _buf(4 * c)  # (the first: no ratios)
        state += n_state * (_buf(2 * wn) + _buf(2 * c) if half else p)
        if mode == "float32" or (mode == "mixed" and i == idx[-1]):
            master += p
        if sparse is not None:
            sp += _buf(4 * c) + _buf(c)
    first = idx[0]
    region = set()
    for ly in layers[first:]:
        region.add(ly.output)
    inplace = plan.inplace_errors(model, first, region, fold != "now")  # errors over the activations
    fw, idle, through, split = _plan_bytes(model, first, region, inplace, redo, split)
    bw = fw if not model.has_plan(first) else 0
    # host: the error buffer holding the scratch
    need_s, acc, host = plan.scratch_plan(model, first, region, inplace, kern.NATIVE)
    scratch = 4 * acc if acc and host is None and not through else 0
    if through:  # the scratch inside the plan, lent to the update row as a host's
        host = -1
    # errors and scratch in the forward buffers idle during backward where they fit (plan.pack;
    # the pure-Python kernels' scratch cannot be retyped: a new one)
    items, at = plan.pack(model, first, region, inplace, scratch if kern.NATIVE else 0, idle,
                          window if kern.NATIVE else 0)
    redo = redo and scratch and plan.recompute_host(model, first, inplace, need_s, acc, kern.NATIVE, split)
    # the update row is backward's int32 scratch retyped, where that is bytes long enough
    if row and not (kern.NATIVE and acc >= row and (host is not None or (scratch and (0 in at or redo)))):
        copies += _buf(4 * row)
    for i in range(len(items)):
        if i not in at and not (items[i][1] == -1 and redo):  # (else in a recomputed activation)
            bw += _buf(items[i][0])
    if scratch and not kern.NATIVE:
        bw += _buf(scratch)
    if window and not kern.NATIVE:
        grads += _buf(window)
    # the softmax table's entries (quant.softmax_lut): nonzero while 2^16 exp(-s d) >= 1/2, i.e.
    # d <= 17 ln 2 / s (no exp loop here: on a double-float port each float is a heap object)
    dmax = 11.7835 / model.output.scale
    n_lut = 256 if dmax >= 255 else int(dmax) + 1
    loss = 0 if model.ce_bufs is not None else _buf(4 * n_lut) + _buf(model.output.numel) + _buf(12)
    out = [("gradients", grads), ("optimiser state", state), ("master copies", master),
           ("layer copies", copies), ("sparse buffers", sp), ("backward buffers", bw), ("loss", loss)]
    # a GRU's gates (an LSTM's gates and cell) of every step, kept by its forward (made with the first
    # plan that runs it), and a trained GRU's or LSTM's backward scratch (microtrain.gru: shifts, acc,
    # int32 gw and gb, an input error, dtanh)
    seq = 0
    for ly in layers:
        p = ly.params
        if ly.op == _OP_GRU and ly.dtable is None:
            seq += _buf(4 * p[0] * p[2])
        if ly.op == _OP_LSTM and ly.dtable is None:
            seq += _buf(6 * p[0] * p[2])
        if ly.op >= _OP_GRU and ly.index in idx:
            g = 3 if ly.op == _OP_GRU else 4  # the gates' row blocks
            seq += _buf(4 * p[0]) + _buf(4 * (g + 2) * p[2]) + _buf(4 * g * p[2] * (p[1] + p[2])) + \
                _buf(16 * p[2]) + _buf(p[0] * p[1]) + _buf(1024) + 64
    if seq:
        out.append(("sequence buffers", seq))
    return out


def largest_free(free=None):
    """The largest block the heap can give now, in bytes (a lower bound, within 256 B or
    1/4096 of the free heap), found by allocating: halving between a size that fitted and
    one that failed, at most 14 tries. MicroPython prints it (micropython.mem_info) but
    returns only the total (gc.mem_free); a failing allocation is an error path already."""
    mem_free = getattr(gc, "mem_free", None)
    if mem_free is None:  # CPython
        return 0
    gc.collect()
    lo, hi = 0, mem_free() if free is None else free
    n = 0
    while hi - lo > 256 and n < 14:
        mid = (lo + hi) >> 1
        n += 1
        try:
            b = bytearray(mid)
        except MemoryError:
            hi = mid
            continue
        b = None  # noqa: F841 (freed before the next, larger try)
        lo = mid
    gc.collect()
    return lo


def file_error(path, size):
    """Raise the MemoryError of a model file that no heap block holds: its size, the largest
    free block, and how to keep the model in flash. Returns when a block of that size is free
    now (the caller tries again)."""
    gc.collect()
    free = gc.mem_free()
    big = largest_free(free)
    if big >= size:
        return
    raise MemoryError(
        "load: %s is %d bytes, read into one heap block, but the largest free block is %d bytes "
        "(%d free in total%s); keep the model in flash and load it in place, no copy in the heap: "
        "mt.load(memoryview(open('/rom/<model>.mtm', 'rb'))) from a ROMFS partition, mt.load(MODEL) "
        "with MODEL a bytes constant of a module frozen into the firmware, or mt.load(buf) with buf "
        "a bytearray over memory-mapped flash (uctypes.bytearray_at); or load the file first, "
        "before anything else allocates (docs/memory.md, Weights in place)"
        % (path, size, big, free, ": the heap is fragmented" if size <= free else ""))


def _total(items):
    t = 0
    for _, n in items:
        t += n
    return t


def _kb(n):
    return "%.1f KB" % (n / 1024)


def check(model, idx, mode, opt, sparse, fold=False, failed=False, batch=1, redo=False):
    """Raise MemoryError when the Trainer's allocations exceed the free heap (or
    failed: they did not fit), naming the need per item, the free bytes and
    what would fit: fewer of these layers, mode int8, sums=False or batch 1 (SGD
    momentum), an optimiser without state."""
    mem_free = getattr(gc, "mem_free", None)
    if mem_free is None:  # CPython
        return
    gc.collect()
    free = mem_free()
    half = getattr(opt, "half", False)
    items = need(model, idx, mode, opt.n_state, sparse, fold, redo, half)
    total = _total(items)
    if total <= free and not failed:
        return
    parts = ", ".join("%s %s" % (k, _kb(n)) for k, n in items if n)
    big = largest_free(free)
    # what would fit is judged against the largest free block: the total free bytes say
    # nothing about a heap in pieces (a configuration within it fits however it is laid out)
    free_all, free = free, min(free, big)
    fits = []
    for k in range(len(idx) - 1, 0, -1):
        n = _total(need(model, idx[-k:], mode, opt.n_state, sparse, fold, redo, half))
        if n <= free:
            names = [model.layers[i].name for i in idx[-k:]]
            fits.append("train=%r (%s)" % (names, _kb(n)))
            break
    if mode != "int8":
        n = _total(need(model, idx, "int8", opt.n_state, sparse, fold, redo, half))
        if n <= free:
            fits.append("mode='int8' (%s)" % _kb(n))
    if not fold and getattr(opt, "momentum", 0) and not opt.weight_decay and not opt.standardize:
        n = _total(need(model, idx, mode, opt.n_state, sparse, True, redo, half))
        if n <= free:
            # a larger batch folds into the momentum too (sums=False), but not with a sparse policy
            fits.append("%s (each gradient into the momentum: no gradient sums) (%s)" % (
                "batch=1, sums=False" if sparse is not None else "sums=False or batch=1" if batch > 1
                else "batch=1", _kb(n)))
    if opt.n_state and not half:  # (the gradient sums kept, but where the batch goes into the momentum)
        n = _total(need(model, idx, mode, opt.n_state, sparse, fold is True, redo, True))
        if n <= free:
            fits.append("state='bf16' (a 16-bit optimiser state: 2 B a value%s) (%s)"
                        % ("" if fold is True else ", with the gradient sums", _kb(n)))
    if opt.n_state:
        n = _total(need(model, idx, mode, 0, sparse, "now", redo=redo))
        if n <= free:
            fits.append("SGD(momentum=0) at batch=1%s (no optimiser state, each layer steps during "
                        "backward: no gradient sums) (%s)" % (", sums=False" if sparse is not None else "",
                                                              _kb(n)))
        else:
            n = _total(need(model, idx, mode, 0, sparse, redo=redo))
            if n <= free:
                fits.append("an optimiser without state, SGD(momentum=0) (%s)" % _kb(n))
    elif fold != "now" and not opt.weight_decay and not opt.standardize:
        n = _total(need(model, idx, mode, 0, sparse, "now", redo=redo))
        if n <= free:
            fits.append("batch=1%s (each layer steps during backward: no gradient sums) (%s)" % (
                ", sums=False" if sparse is not None else "", _kb(n)))
    if not redo:
        n = _total(need(model, idx, mode, opt.n_state, sparse, fold, True, half))
        if n < total and n <= free:
            fits.append("recompute=True (the int32 scratch in a conv output made again in backward) (%s)"
                        % _kb(n))
    frag = total <= free_all  # the bytes are free, not in one piece
    if frag:
        if total <= big:  # (and now even in one piece: the count above fell short of the real need)
            state = ("%s of heap is free, its largest free block %s, yet an allocation failed: the "
                     "count is short of what was allocated" % (_kb(free_all), _kb(big)))
        else:
            state = ("the heap is fragmented: %s is free in total but its largest free block is %s"
                     % (_kb(free_all), _kb(big)))
        fits.append("a heap in fewer pieces: create the Trainer right after mt.load, with the package "
                    "installed as .mpy files or frozen (not compiled from .py on the board)")
    else:
        state = "%s of heap %s free (largest free block %s)" % (_kb(free_all), "was" if failed else "is",
                                                                _kb(big))
    raise MemoryError("Trainer: training %d layer(s) needs about %s (%s) but %s; would fit%s: %s" % (
        len(idx), _kb(total), parts, state, " (in %s)" % _kb(big) if frag else "",
        "; ".join(fits) or "nothing smaller of these (train fewer layers or a smaller model)"))


def run(model, idx, mode, opt, sparse, fold=False, failed=False, batch=1, redo=False):
    """check(), then forget this module so the GC can free its code (Trainer imports it
    again only if its allocation fails)."""
    try:
        check(model, idx, mode, opt, sparse, fold, failed, batch, redo)
    finally:
        forget()


def forget():
    """Drop this module from sys.modules and from the package, so the GC can free its code."""
    import sys

    sys.modules.pop("microtrain.memplan", None)
    microtrain = sys.modules.get("microtrain")  # the package's reference to this module
    try:
        if microtrain is not None and "memplan" in microtrain.__dict__:
            # None first: MicroPython's map delete keeps the old value in the freed slot
            microtrain.memplan = None
            del microtrain.memplan
    except AttributeError:  # ports without module __dict__
        pass
