# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# The .mtm format constants on the device (docs/format.md), in one place for
# model.py, checkpoint.py and the pure-Python loader (pyk/mtm_loader.py); the
# host's mtm.py imports the same layout and the C loader includes the header
# generated from it (usermod/microtrain/mtm_layout.h). Small ints are const():
# inlined where this module's names are used inside it, plain globals for importers.
try:
    from micropython import const
except ImportError:  # CPython (host debugging of the pure-Python kernels)
    def const(x):
        return x

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
MAGIC = b'MTMF'
MAX_ELEMS = const(67108864)  # 2^26: the kernels' largest tensor / buffer (checks.c)
NONE = 0xFFFFFFFF  # "no tensor" in the file (not const(): a big int on 32-bit ports)
SCALE_MAX_BITS = 1400897536  # 2^40 (not const(): a big int on 32-bit ports)
# the trainer record (docs/format.md): tag + 8 or 16 hex digits (+ ADAM_TAG + 16 for Adam) + NUL
TRAINER_TAG = b'trainer:rng='
ADAM_TAG = b',adam='
# entry formats for struct (the f32 scale read as its bits)
TENSOR_FMT = '<BBBBI4IIIIiII'
LAYER_HEAD_FMT = '<BBBBIIIIIIIIIIII4I'  # op .. state[3]
# layer op and fused activation
N_PARAMS = (0, 17, 6, 2, 3, 11, 11, 2, 13, 4, 10, 9, 11, 7, 3, 12, 13, 13)  # params per op (index: OP_*)
ITEMSIZE = (0, 1, 4, 4, 1)  # bytes per element (index: DT_*)
OP_NAMES = (
    '?',
    'conv2d',
    'linear',
    'relu',
    'relu6',
    'maxpool',
    'avgpool',
    'global_avgpool',
    'add',
    'lut',
    'concat',
    'upsample',
    'mul',
    'layernorm',
    'softmax',
    'matmul',
    'gru',
    'lstm',
)
ACT_NAMES = ('', 'relu', 'relu6')
# --- generated: end

# The trainer record at the end of a checkpoint's string pool (the shuffle
# generator's seed state and the epoch count, docs/format.md): written by checkpoint.py, read when a
# Trainer starts. Here, not in checkpoint.py, so a Trainer does not compile
# the whole checkpoint module (on a fragmented heap) to read 21 bytes.
# (TRAINER_TAG and ADAM_TAG are in the generated part above.)


def _hex8(b, q):
    # 8 lowercase hex digits at b[q:q + 8] as an int, else None
    r = 0
    for c in bytes(b[q:q + 8]):
        d = c - 48 if 48 <= c <= 57 else c - 87 if 97 <= c <= 102 else -1
        if d < 0:
            return None
        r = r << 4 | d
    return r


def trainer_record(b, full=False):
    """The shuffle generator's seed state a checkpoint's string pool ends with, or None;
    full: (state, (beta1^t, beta2^t) float32 bits or None, record length, epochs done or
    None: a record older than the epoch count) or None."""
    from struct import unpack_from

    s_off, s_len = unpack_from("<II", b, 36)
    end = s_off + s_len - 1  # the pool's last byte: the record's NUL
    for n in (50, 42, 28, 20):  # the record's length without the NUL: with / without each part
        p = end - n
        if s_len < n + 2 or b[end] or b[p - 1] or bytes(b[p:p + 12]) != TRAINER_TAG:
            continue
        r, q, ep, a1, a2 = _hex8(b, p + 12), p + 20, None, 0, 0
        if n == 50 or n == 28:  # the epochs done, right after the state
            ep = _hex8(b, q)
            if ep is None:
                continue
            q += 8
        if n >= 42:
            if bytes(b[q:q + 6]) != ADAM_TAG:
                continue
            a1, a2 = _hex8(b, q + 6), _hex8(b, q + 14)
        if r is not None and a1 is not None and a2 is not None:
            return (r, (a1, a2) if n >= 42 else None, n + 1, ep) if full else r
    return None
