# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# Checkpoints: the model written back as a .mtm file (docs/format.md,
# "Checkpoints"), atomically: a temporary file is written, flushed, closed,
# read back through the same validator load() runs, and only then renamed
# over the target, so a reset mid-write or a bad value leaves the old file.
import gc
import os
import struct

from micropython import const

from microtrain.fmt import ADAM_TAG, NONE, TRAINER_TAG, trainer_record

_HALF_RUN = const(64)

try:
    from binascii import crc32 as _crc32
except ImportError:
    _crc32 = None

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
# The .mtm constants this module reads, private: inlined, no globals entry.
_HEADER_SIZE = const(64)
_TENSOR_ENTRY = const(48)
_LAYER_ENTRY = const(152)
_FLAG_TRAINED = const(1)
_FLAG_HAS_STATE = const(2)
_DT_F32 = const(3)
_KIND_ACT = const(0)
_KIND_STATE = const(2)
_Q_NONE = const(0)
_OP_CONV2D = const(1)
_OP_LUT = const(9)
_OP_CONCAT = const(10)
_OP_UPSAMPLE = const(11)
_OP_MUL = const(12)
_OP_MATMUL = const(15)
_OP_GRU = const(16)
_OP_LSTM = const(17)
# --- generated: end


def _crc(data, crc):
    if _crc32 is not None:
        return _crc32(data, crc)
    from microtrain import kern

    return kern.py("crc32")(data, crc)


SCALE_MIN = 9.094947017729282e-13  # 2^-40: the validator's scale range (format.md, Runtime limits)
SCALE_MAX = 1099511627776.0  # 2^40


def _finite_half(a):
    # a bfloat16 state (2 bytes a value, little-endian): inf / NaN have every exponent bit set
    for i in range(1, len(a), 2):
        if a[i] & 0x7F == 0x7F and a[i - 1] & 0x80:
            return False
    return True


def _widened(a):
    # a bfloat16 state as float32 bytes, a few values at a time from one small buffer (the
    # bfloat16 is the float32's upper half), so a save needs no float32 copy of the state
    w = bytearray(4 * _HALF_RUN)
    for i in range(0, len(a), 2 * _HALF_RUN):
        k = min(2 * _HALF_RUN, len(a) - i)
        for j in range(0, k, 2):
            w[2 * j + 2] = a[i + j]
            w[2 * j + 3] = a[i + j + 1]
        yield memoryview(w)[:2 * k]


def _finite(a):
    if isinstance(a, bytearray):
        return _finite_half(a)
    # one C-level sum first (inf and NaN propagate); element by element only if it
    # is not finite, since a float32 sum of large finite values can overflow
    t = sum(a)
    if t - t == 0.0:
        return True
    for v in a:
        if v - v != 0.0:  # inf or NaN (no literal: 3.5e38 is not a float32)
            return False
    return True


def check(model, trainer=None):
    """Raise ValueError naming the layer if the checkpoint of `model` (with
    `trainer`'s state) would break the validator's value rules; the cheap
    part of save()'s checks, done before anything is written."""
    for ly in model.layers:
        if not (ly.trained or ly.modified):
            continue
        for v in ly.w_scale:
            if not SCALE_MIN <= v <= SCALE_MAX:
                raise ValueError("save: layer %s: weight scale %r outside 2^-40..2^40 (training diverged: "
                                 "lower the learning rate); the previous checkpoint is kept" % (ly.name, v))
    for li, slots in _state_arrays(model, trainer).items():
        for k in range(6):
            if slots[k] is not None and not _finite(slots[k]):
                raise ValueError("save: layer %s: %s not finite (a failed update?); the previous "
                                 "checkpoint is kept" % (model.layers[li].name,
                                                          ("master weights", "master bias",
                                                           "optimiser state (weights)",
                                                           "optimiser state (bias)")[min(k, 2 + (k & 1))]))


def os_error(e, what, path, need=0):
    """The OSError `e` of `what` on `path` again, with a message naming the path (the
    port's own names only the number) and, for a full file system, the room an atomic
    save needs: the new file is written beside the old one before it replaces it. Here, not in
    fmt.py, so that a model that is never saved does not hold it (load and FileDataset import it
    on their error path only)."""
    n = e.errno
    if n == 28:
        size = "%d bytes, " % need if need else ""
        m = ("%s: %s: the file system is full (ENOSPC): an atomic save writes the new file beside the old "
             "one before replacing it, so it needs room for a second copy (%splus the file system's own "
             "blocks); remove files or save to another file system; the previous file is kept"
             % (what, path, size))
    elif n == 2:
        m = "%s: %s: no such file or folder" % (what, path)
    else:
        m = "%s: %s: %s" % (what, path, e)
    return OSError(n, m)

def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


def _sync():
    # the directory entry of the rename: os.sync() where the port has it (bare-metal
    # VFS ports); the unix port has neither sync nor fsync (flush + close only)
    sync = getattr(os, "sync", None)
    if sync is not None:
        sync()


def _verify(tmp, size):
    """Read the written file back and run load()'s validator on it: None if it is
    valid, else the message; True (skipped) when the heap cannot hold it."""
    from microtrain import kern
    from microtrain.quant import zeros

    gc.collect()
    try:
        if os.stat(tmp)[6] != size:
            return "the file has %d bytes, %d were written (file system full?)" % (os.stat(tmp)[6], size)
        words = zeros("i", (size + 3) >> 2)  # word-aligned, as load() reads it
        buf = memoryview(words)
        try:
            import uctypes

            buf = uctypes.bytearray_at(uctypes.addressof(words), size)
        except ImportError:  # no uctypes: validate a bytes copy
            buf = None
        with open(tmp, "rb") as f:
            if buf is None:
                buf = f.read()
            elif f.readinto(buf) != size:
                return "short read back"
    except MemoryError:
        return True
    try:
        kern.K.mtm_validate(buf)
    except ValueError as e:
        return str(e)
    except MemoryError:  # pure-Python kernels: the validator compiled on a full heap
        return True
    finally:
        buf = words = None
        kern.release("mtm_loader")
        gc.collect()
    return None


def _put(f, data, n):
    got = f.write(data)
    if got is not None and got != n:  # a short write: the file system is full
        raise OSError(28, "save: short write (%d of %d bytes): file system full?" % (got, n))


def _values(a):
    return len(a) // 2 if isinstance(a, bytearray) else len(a)  # a bfloat16 state: 2 bytes a value


def _state_arrays(model, trainer):
    """{layer index: [slot0..5 arrays or None]} for the checkpoint's STATE tensors."""
    out = {}
    if trainer is None:
        return out
    opt = trainer.opt
    for ly in model.layers:
        if not ly.trained:
            continue
        slots = [ly.master_w, ly.master_b, None, None, None, None]
        st = opt.state_tensors(ly, True)  # a bfloat16 state as it is: widened while written
        if st is not None:
            slots[2:2 + len(st)] = st
        if any(s is not None for s in slots):
            out[ly.index] = slots
    return out


def save(model, path, trainer=None):
    """Write `model` (with trained layers, optimiser state and the shuffle
    generator if `trainer`) to path. A file the validator would refuse is never
    written over path: ValueError, and the previous file stays as it was."""
    check(model, trainer)
    tmp = path + ".tmp"
    try:
        size = _write(model, tmp, trainer)
        bad = _verify(tmp, size)
        if bad is not None and bad is not True:
            raise ValueError("save: the checkpoint would not load (%s); the previous checkpoint is kept"
                             % bad)
    except BaseException:
        _remove(tmp)  # a partial or refused file (disk full, bad value): nothing stale left behind
        raise
    try:
        os.rename(tmp, path)
    except OSError:  # FAT (most boards) will not rename over an existing file
        _remove(path)
        os.rename(tmp, path)
    _sync()


def _write(model, tmp, trainer):
    b = model.buf
    tensors = model.tensors
    u32 = struct.unpack_from
    tt_off = u32("<I", b, 24)[0]
    lt_off = u32("<I", b, 32)[0]
    s_off, s_len = u32("<II", b, 36)
    # keep every non-STATE tensor (old state is replaced by the current one)
    remap = {}
    keep = []
    for i in range(len(tensors)):
        t = model.tensor(i)  # a frozen layer's constants: read again from the model bytes
        if t.kind != _KIND_STATE:
            remap[t.index] = len(keep)
            keep.append(t)
    states = _state_arrays(model, trainer)
    new_state = []  # (layer index, slot, array, shape)
    for ly in model.layers:
        slots = states.get(ly.index)
        if slots is None:
            continue
        ids = ly.tensor_ids()
        for k in range(6):
            a = slots[k]
            if a is not None:
                ref = ids[k % 2]  # a weight's state, or a bias's
                new_state.append((ly.index, k, a, model.tensor(ref).shape))
    n_t = len(keep) + len(new_state)
    n_l = len(model.layers)
    new_lt = _HEADER_SIZE + _TENSOR_ENTRY * n_t
    new_s = new_lt + _LAYER_ENTRY * n_l
    # the pool, with the trainer record (shuffle generator) replaced or appended
    pool_len = s_len
    old = trainer_record(b, True)
    if old is not None:
        pool_len -= old[2]
    rec = b""
    if trainer is not None and getattr(trainer, "shuffle_state", None) is not None:
        # the seed state, then the epochs done (the next fit goes on from there)
        rec = TRAINER_TAG + bytes("%08x%08x" % (trainer.shuffle_state & 0xFFFFFFFF,
                                                trainer.epoch & 0xFFFFFFFF), "ascii")
        bt = getattr(trainer.opt, "_bt", None)
        if bt is not None:  # Adam's bias correction: beta1^t, beta2^t (float32 bits)
            rec += ADAM_TAG + bytes("%08x%08x" % struct.unpack_from("<2I", bt), "ascii")
        rec += b"\0"
    new_slen = pool_len + len(rec)
    new_d = (new_s + new_slen + 7) & ~7
    # data placement
    offs = []
    pos = new_d
    items = []
    held = {}  # a layer's constants: the layer's arrays (a trained layer's are its copies)
    for ly in model.layers:
        w_t, b_t, m_t, s_t = ly.tensor_ids()
        if ly.table is not None and ly.w is None:  # a LUT's tables (a GRU's stay in the file)
            held[w_t], held[b_t] = ly.table, ly.dtable
        elif ly.w is not None and w_t >= 0:
            held[w_t], held[b_t] = ly.w, ly.b
            held[m_t], held[s_t] = ly.mult, ly.shift
            held[model.tensor(w_t).qscales] = ly.w_scale
    for t in keep:
        if t.data_len:
            offs.append(pos)
            items.append((held.get(t.index, t.data), t.data_len))
            pos += (t.data_len + 7) & ~7
        else:
            offs.append(0)
    st_offs = []
    for _, _, a, _ in new_state:
        n = 4 * _values(a)
        st_offs.append(pos)
        items.append((a, n))
        pos += (n + 7) & ~7
    d_len = pos - new_d
    total = pos + 4
    flags = _FLAG_TRAINED | (_FLAG_HAS_STATE if new_state else 0)

    # the oldest version with every op of the file (format.md, Header), 1.3 for Adam's second moments,
    # 1.4 for MUL, LAYERNORM, SOFTMAX, MATMUL, 1.5 for GRU, LSTM and a multi-head MATMUL (13 params)
    minor = 0
    for ly in model.layers:
        if ly.op == _OP_LUT:
            minor = max(minor, 1)
        elif ly.op == _OP_CONCAT or ly.op == _OP_UPSAMPLE or (ly.op == _OP_CONV2D and len(ly.params) == 19):
            minor = max(minor, 2)
        elif ly.op >= _OP_MUL:  # MUL, LAYERNORM, SOFTMAX, MATMUL; GRU, LSTM
            minor = max(minor, 5 if ly.op >= _OP_GRU or (ly.op == _OP_MATMUL and len(ly.params) == 13) else 4)
    if any(k >= 4 for _, k, _, _ in new_state):
        minor = max(minor, 3)
    head = bytearray(b[0:_HEADER_SIZE])
    struct.pack_into("<H", head, 6, minor)
    struct.pack_into("<IIIIIIIIIIIII", head, 12, flags, total, n_t, _HEADER_SIZE, n_l, new_lt, new_s,
                     new_slen, new_d, d_len, remap[model.input.index], remap[model.output.index],
                     model.train_steps & 0xFFFFFFFF)
    slot_idx = {}
    for j, (li, k, _a, _shape) in enumerate(new_state):
        slot_idx[(li, k)] = len(keep) + j

    def idx(v):
        return NONE if v < 0 else remap[v]

    def table():
        # the tensor and layer tables an entry at a time from one small buffer: a board's heap
        # that training left in pieces may have no block for the whole table
        e = bytearray(_TENSOR_ENTRY)
        for i, t in enumerate(keep):
            src = tt_off + _TENSOR_ENTRY * t.index
            e[:] = b[src:src + _TENSOR_ENTRY]
            struct.pack_into("<I", e, 24, offs[i])
            if t.qscales >= 0:
                struct.pack_into("<I", e, 40, remap[t.qscales])
            if t.kind == _KIND_ACT:  # the current scale: range adaptation may have changed it
                struct.pack_into("<f", e, 32, t.scale)
            yield e
        for j, (_li, _k, a, shape) in enumerate(new_state):
            dims = list(shape) + [0] * (4 - len(shape))
            struct.pack_into("<BBBBIIIIIIIfiII", e, 0, _DT_F32, len(shape), _KIND_STATE, _Q_NONE, 0, dims[0],
                             dims[1], dims[2], dims[3], st_offs[j], 4 * _values(a), 0.0, 0, NONE, 0)
            yield e
        e = bytearray(_LAYER_ENTRY)
        for ly in model.layers:
            src = lt_off + _LAYER_ENTRY * ly.index
            e[:] = b[src:src + _LAYER_ENTRY]
            struct.pack_into("<I", e, 4, 1 if (ly.trained or ly.modified) else (ly.flags & 1))
            # a GRU's / LSTM's in1: its tables
            in1 = ly.inputs[1] if len(ly.inputs) > 1 else struct.unpack_from("<I", e, 28)[0] \
                if ly.op == _OP_GRU or ly.op == _OP_LSTM else -1
            sl = [slot_idx.get((ly.index, k), NONE) for k in range(6)]
            w_t, b_t, m_t, s_t = ly.tensor_ids()
            struct.pack_into("<IIIIIIIIIIIHH", e, 24, idx(ly.inputs[0]), idx(in1), idx(ly.output),
                             idx(w_t), idx(b_t), idx(m_t), idx(s_t), *sl[:4],
                             *((sl[4] & 0xFFFF, sl[5] & 0xFFFF) if minor >= 3 else (0, 0)))
            yield e

    # string offsets in the layer entries are relative to the pool: unchanged
    pad = bytes(8)

    def parts():  # (buffer, bytes) in file order
        yield head, len(head)
        for e in table():
            yield e, len(e)
        for p in (memoryview(b)[s_off:s_off + pool_len], rec, pad[:new_d - new_s - new_slen]):
            yield p, len(p)
        for a, n in items:
            if isinstance(a, bytearray) and n == 2 * len(a):  # a bfloat16 state
                for w in _widened(a):
                    yield w, len(w)
            else:
                yield a, n
            if n & 7:
                yield pad[:8 - (n & 7)], 8 - (n & 7)

    crc = 0
    try:
        with open(tmp, "wb") as f:
            for part, n in parts():
                _put(f, part, n)
                crc = _crc(part, crc)
            _put(f, struct.pack("<I", crc & 0xFFFFFFFF), 4)
            f.flush()
    except OSError as e:  # the port's message names neither the file nor the room a save needs
        raise os_error(e, "save", tmp[:-4], total) from None
    return total

