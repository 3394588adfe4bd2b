# The .mtm format constants on the device (docs/format.md), in one place for
# model.py, checkpoint.py and the pure-Python loader (pyk/mtm_loader.py).
# The host's tools/microtrain_tools/mtm.py and the C usermod/microtrain/
# mtm_loader.c/.h hold the same values; tests/package/test_device_package.py keeps the
# three copies equal. Small ints are const(): inlined where this module's
# names are used inside it, plain globals for importers.
try:
    from micropython import const
except ImportError:  # CPython (host debugging of the pure-Python kernels)
    def const(x):
        return x

MAGIC = b"MTMF"
VERSION_MAJOR = const(1)
VERSION_MINOR = const(3)  # 1: LUT, 2: CONCAT / UPSAMPLE, 3: Adam second moments (files: the oldest that fits)
HEADER_SIZE = const(64)
TENSOR_ENTRY = const(48)
LAYER_ENTRY = const(152)
PARAMS_OFF = const(72)  # offset of the params inside a layer entry
N_PARAMS_MAX = const(20)
MAX_TENSORS = const(4096)
MAX_LAYERS = const(1024)
MAX_DIM = const(65535)
MAX_ELEMS = const(67108864)  # 2^26: the kernels' largest tensor / buffer (checks.c)
MAX_NAME = const(63)
MAX_FUSED = const(255)
NONE = 0xFFFFFFFF  # "no tensor" in the file (not const(): a big int on 32-bit ports)
NONE_I32 = const(-1)  # the same as the accessors (mtm_tensor / mtm_layer) report it
# int32 values the accessors fill in: mtm_info, mtm_tensor, mtm_layer
INFO_N = const(15)
TENSOR_N = const(14)
LAYER_N = const(23)

# header flags, tensor flags, layer flags
FLAG_TRAINED = const(1)
FLAG_HAS_STATE = const(2)
TFLAG_SIGNAL_1D = const(1)
LFLAG_TRAINED = const(1)

# tensor dtype
DT_INT8 = const(1)
DT_INT32 = const(2)
DT_F32 = const(3)
DT_UINT8 = const(4)
# tensor kind
KIND_ACT = const(0)
KIND_CONST = const(1)
KIND_STATE = const(2)
# tensor quantisation
Q_NONE = const(0)
Q_TENSOR = const(1)
Q_CHANNEL = const(2)
Q_BIAS = const(3)

# layer op and fused activation
OP_CONV2D = const(1)
OP_LINEAR = const(2)
OP_RELU = const(3)
OP_RELU6 = const(4)
OP_MAXPOOL = const(5)
OP_AVGPOOL = const(6)
OP_GAP = const(7)
OP_ADD = const(8)
OP_LUT = const(9)
OP_CONCAT = const(10)
OP_UPSAMPLE = const(11)
ACT_NONE = const(0)
ACT_RELU = const(1)
ACT_RELU6 = const(2)

N_PARAMS = (0, 17, 6, 2, 3, 11, 11, 2, 13, 4, 10, 9)  # params per op (index: OP_*)
ITEMSIZE = (0, 1, 4, 4, 1)  # bytes per element (index: DT_*)
OP_NAMES = ("?", "conv2d", "linear", "relu", "relu6", "maxpool", "avgpool", "global_avgpool", "add", "lut",
            "concat", "upsample")
ACT_NAMES = ("", "relu", "relu6")

# The trainer record at the end of a checkpoint's string pool (the shuffle
# generator's state, docs/format.md): written by checkpoint.py, read when a
# Trainer starts. Here, not in checkpoint.py, so a Trainer does not compile
# the whole checkpoint module (on a fragmented heap) to read 21 bytes.
TRAINER_TAG = b"trainer:rng="  # tag + 8 lowercase hex digits (+ ADAM_TAG + 16 for Adam) + NUL
ADAM_TAG = b",adam="  # Adam's beta1^t, beta2^t: float32 bits, 8 hex digits each


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
    """The shuffle-generator state a checkpoint's string pool ends with, or None;
    full: (state, (beta1^t, beta2^t) float32 bits or None, record length) or None."""
    from struct import unpack_from

    s_off, s_len = unpack_from("<II", b, 36)
    end = s_off + s_len - 1  # the pool's last byte: the record's NUL
    for n in (42, 20):  # the record's length without the NUL: with and without the Adam part
        p = end - n
        if s_len < n + 2 or b[end] or b[p - 1] or bytes(b[p:p + 12]) != TRAINER_TAG:
            continue
        r, a1, a2 = _hex8(b, p + 12), 0, 0
        if n == 42:
            if bytes(b[p + 20:p + 26]) != ADAM_TAG:
                continue
            a1, a2 = _hex8(b, p + 26), _hex8(b, p + 34)
        if r is not None and a1 is not None and a2 is not None:
            return (r, (a1, a2) if n == 42 else None, n + 1) if full else r
    return None
