# Checkpoints: the model written back as a .mtm file (docs/format.md,
# "Checkpoints"), atomically: a temporary file is written, flushed, closed
# and renamed over the target, so a reset mid-write leaves the old file.
import os
import struct

from microtrain.fmt import (
    DT_F32,
    FLAG_HAS_STATE,
    FLAG_TRAINED,
    HEADER_SIZE,
    KIND_STATE,
    LAYER_ENTRY,
    NONE,
    Q_NONE,
    TENSOR_ENTRY,
)

try:
    from binascii import crc32 as _crc32
except ImportError:
    _crc32 = None


def _crc(data, crc):
    if _crc32 is not None:
        return _crc32(data, crc)
    from microtrain import kern

    return kern.py("crc32")(data, crc)


def _state_arrays(model, trainer):
    """{layer index: [slot0..3 arrays or None]} for the checkpoint's STATE tensors."""
    out = {}
    if trainer is None:
        return out
    opt = trainer.opt
    for ly in model.layers:
        if not ly.trained:
            continue
        slots = [ly.master_w, ly.master_b, None, None]
        st = opt.state_tensors(ly)
        if st is not None:
            slots[2], slots[3] = st
        if any(s is not None for s in slots):
            out[ly.index] = slots
    return out


def save(model, path, trainer=None):
    """Write `model` (with trained layers, optimiser state if `trainer`) to path."""
    b = model._bytes
    tensors = model.tensors
    u32 = struct.unpack_from
    tt_off = u32("<I", b, 24)[0]
    lt_off = u32("<I", b, 32)[0]
    s_off, s_len = u32("<II", b, 36)
    # keep every non-STATE tensor (old state is replaced by the current one)
    remap = {}
    keep = []
    for t in tensors:
        if t.kind != KIND_STATE:
            remap[t.index] = len(keep)
            keep.append(t)
    states = _state_arrays(model, trainer)
    new_state = []  # (layer index, slot, array, shape)
    for ly in model.layers:
        slots = states.get(ly.index)
        if slots is None:
            continue
        for k in range(4):
            a = slots[k]
            if a is not None:
                ref = ly.weight_t if k % 2 == 0 else ly.bias_t
                new_state.append((ly.index, k, a, tensors[ref].shape))
    n_t = len(keep) + len(new_state)
    n_l = len(model.layers)
    new_lt = HEADER_SIZE + TENSOR_ENTRY * n_t
    new_s = new_lt + LAYER_ENTRY * n_l
    new_d = (new_s + s_len + 7) & ~7
    # data placement
    offs = []
    pos = new_d
    items = []
    for t in keep:
        if t.data_len:
            offs.append(pos)
            items.append((t.data, t.data_len))
            pos += (t.data_len + 7) & ~7
        else:
            offs.append(0)
    st_offs = []
    for _, _, a, _ in new_state:
        st_offs.append(pos)
        items.append((a, 4 * len(a)))
        pos += (4 * len(a) + 7) & ~7
    d_len = pos - new_d
    total = pos + 4
    flags = FLAG_TRAINED | (FLAG_HAS_STATE if new_state else 0)

    head = bytearray(b[0:HEADER_SIZE])
    struct.pack_into("<IIIIIIIIIIIII", head, 12, flags, total, n_t, HEADER_SIZE, n_l, new_lt, new_s, s_len,
                     new_d, d_len, remap[model.input.index], remap[model.output.index],
                     model.train_steps & 0xFFFFFFFF)
    table = bytearray(TENSOR_ENTRY * n_t + LAYER_ENTRY * n_l)
    for i, t in enumerate(keep):
        e = TENSOR_ENTRY * i
        src = tt_off + TENSOR_ENTRY * t.index
        table[e:e + TENSOR_ENTRY] = b[src:src + TENSOR_ENTRY]
        struct.pack_into("<I", table, e + 24, offs[i])
        if t.qscales >= 0:
            struct.pack_into("<I", table, e + 40, remap[t.qscales])
    slot_idx = {}
    for j, (li, k, a, shape) in enumerate(new_state):
        e = TENSOR_ENTRY * (len(keep) + j)
        dims = list(shape) + [0] * (4 - len(shape))
        struct.pack_into("<BBBBIIIIIIIfiII", table, e, DT_F32, len(shape), KIND_STATE, Q_NONE, 0, dims[0],
                         dims[1], dims[2], dims[3], st_offs[j], 4 * len(a), 0.0, 0, NONE, 0)
        slot_idx[(li, k)] = len(keep) + j

    def idx(v):
        return NONE if v < 0 else remap[v]

    for ly in model.layers:
        e = TENSOR_ENTRY * n_t + LAYER_ENTRY * ly.index
        src = lt_off + LAYER_ENTRY * ly.index
        table[e:e + LAYER_ENTRY] = b[src:src + LAYER_ENTRY]
        struct.pack_into("<I", table, e + 4, 1 if (ly.trained or ly.modified) else (ly.flags & 1))
        in1 = ly.inputs[1] if len(ly.inputs) > 1 else -1
        sl = [slot_idx.get((ly.index, k), NONE) for k in range(4)]
        struct.pack_into("<IIIIIIIIIII", table, e + 24, idx(ly.inputs[0]), idx(in1), idx(ly.output),
                         idx(ly.weight_t), idx(ly.bias_t), idx(ly.mult_t), idx(ly.shift_t), *sl)
    # string offsets in the layer entries are relative to the pool: unchanged
    pad = bytes(8)
    tmp = path + ".tmp"
    crc = 0
    with open(tmp, "wb") as f:
        for part in (head, table, memoryview(b)[s_off:s_off + s_len], pad[:new_d - new_s - s_len]):
            f.write(part)
            crc = _crc(part, crc)
        for a, n in items:
            f.write(a)
            crc = _crc(a, crc)
            if n & 7:
                f.write(pad[:8 - (n & 7)])
                crc = _crc(pad[:8 - (n & 7)], crc)
        f.write(struct.pack("<I", crc & 0xFFFFFFFF))
        f.flush()
    try:
        os.rename(tmp, path)
    except OSError:  # FAT (most boards) will not rename over an existing file
        os.remove(path)
        os.rename(tmp, path)

