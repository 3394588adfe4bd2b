# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# Training by a RAM budget (docs/adapt.md, "Adapting with less"). Imported on use:
#   saved(model, idx)           the activation bytes backward reads to train idx (the floor
#                               MemFLoRA is measured by), next to what the plan keeps
#   boundary(model, budget, ..) the per-board order boundary: bottom layers forward-only
#                               (SPSA), top layers by backprop, as many by backprop as the
#                               budget allows (memplan's count of the Trainer's heap)
#   hybrid(model, budget, ..)   the ZO made with that boundary
import array

try:
    from micropython import const
except ImportError:  # CPython: `microtrain info` runs saved() from this file alone (not the package)
    def const(x):
        return x

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
# The .mtm constants this module reads, private: inlined, no globals entry.
_OP_RELU = const(3)
_OP_RELU6 = const(4)
_OP_MAXPOOL = const(5)
_ACT_RELU = const(1)
_ACT_RELU6 = const(2)
# --- generated: end


def saved(model, idx, plan=None):
    """(inputs, masks, kept): the activation bytes backward reads to train the layers `idx`
    (conv / linear) - the trained layers' inputs, and each ReLU output and max-pool argmax
    as a 1-bit mask - and the bytes of the int8 tensors the training plan keeps from the
    first trained layer on (plan.kept: what this device's backward holds today).
    MemFLoRA's B layers read the rank-r u, full fine-tuning each layer's full-width input.
    plan: the plan module (the host passes the device's plan.py run by CPython)."""
    if plan is None:
        from microtrain import plan

    m = model
    inputs = 0
    for i in idx:
        inputs += m.tensors[m.layers[i].inputs[0]].numel
    bits = 0
    for ly in m.layers[idx[0]:]:
        if ly.op == _OP_RELU or ly.op == _OP_RELU6 or ly.act == _ACT_RELU or ly.act == _ACT_RELU6:
            bits += m.tensors[ly.output].numel
        elif ly.op == _OP_MAXPOOL:
            bits += m.tensors[ly.inputs[0]].numel
    kept = 0
    for t in plan.kept(m, idx[0]):
        kept += m.tensors[t].numel
    return inputs, (bits + 7) >> 3, kept


def _buf(n):
    return 16 + ((n + 15) & ~15) if n else 0  # (memplan's count of one buffer)


def _zo_bytes(model, zo, batch, alone):
    # ZO's own heap: a copy of each zeroth-order layer's int8 weights (the base of a query),
    # the weights themselves when they are not in RAM yet, and without backprop layers the
    # frozen prefix's outputs kept for a batch
    n = 0
    for i in zo:
        w = model.layers[i].w
        n += _buf(len(w)) + (0 if isinstance(w, array.array) else _buf(len(w)))
    if alone and zo[0] > 0:
        made, rec = set(), 0
        for ly in model.layers[zo[0]:]:
            for t in ly.inputs:
                if t not in made:
                    made.add(t)
                    rec += model.tensors[t].numel
            made.add(ly.output)
        n += _buf(rec * batch)
    # the ZO object, its lists and small arrays, the floats of a step (boxed on some ports)
    return n + 2048


def boundary(model, budget, layers="last:2", mode="int8", optimizer=None, batch=16):
    """The order boundary for `budget` heap bytes: (k, bytes) with the first k layers of
    `layers` trained forward-only and the rest by backprop, the fewest forward-only that fit
    (backprop learns more per sample); bytes as memplan counts them. ValueError when even
    all forward-only does not fit."""
    from microtrain import memplan

    try:
        idx = model.select(layers)
        n_state = optimizer.n_state if optimizer is not None else 0
        for k in range(1, len(idx) + 1):
            zo, bp = idx[:k], idx[k:]
            n = _zo_bytes(model, zo, batch, not bp)
            if bp:
                for _, b in memplan.need(model, bp, mode, n_state, None, False):
                    n += b
            if n <= budget:
                return k, n
    finally:
        memplan.forget()
    raise ValueError("boundary: %d layers forward-only need %d bytes, more than the budget %d"
                     % (len(idx), n, budget))


def hybrid(model, budget, layers="last:2", mode="int8", optimizer=None, batch=16, **kw):
    """ZO(model, train=layers, bp=the top layers boundary() leaves to backprop, ...): the
    per-board hybrid order within `budget` bytes. kw: ZO's (lr, eps, seed, queries, loss)."""
    from microtrain.zo import ZO

    k, _ = boundary(model, budget, layers, mode, optimizer, batch)
    idx = model.select(layers)
    bp = idx[k:] or None
    return ZO(model, train=idx, bp=bp, optimizer=optimizer if bp else None, mode=mode, **kw)
