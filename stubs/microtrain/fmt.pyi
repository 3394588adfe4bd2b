# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# microtrain.fmt: the .mtm layout on the device (docs/format.md), generated from the layout the
# host's tools/microtrain_tools/mtm.py imports and the C loader's mtm_layout.h is generated from.

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
MAGIC: bytes  # b'MTMF'
VERSION_MAJOR: int  # 1
VERSION_MINOR: int  # 3
HEADER_SIZE: int  # 64
TENSOR_ENTRY: int  # 48
LAYER_ENTRY: int  # 152
PARAMS_OFF: int  # the params in a layer entry
N_PARAMS_MAX: int  # 20
MAX_TENSORS: int  # 4096
MAX_LAYERS: int  # 1024
MAX_ELEMS: int  # 2^26: the kernels' largest tensor / buffer (checks.c)
NONE: int  # "no tensor" in the file (not const(): a big int on 32-bit ports)
NONE_I32: int  # the same as the accessors (mtm_tensor / mtm_layer) report it
SCALE_MIN_BITS: int  # 2^-40: scales' range as float32 bits
SCALE_MAX_BITS: int  # 2^40 (not const(): a big int on 32-bit ports)
MAX_GAP_HW: int  # 65536
MAX_GRAD_TERMS: int  # 131071
MAX_CLASSES: int  # 32767
TRAINER_TAG: bytes  # b'trainer:rng='
ADAM_TAG: bytes  # b',adam='
FLAG_TRAINED: int  # 1
FLAG_HAS_STATE: int  # 2
TENSOR_FMT: str  # '<BBBBI4IIIIiII'
LAYER_HEAD_FMT: str  # op .. state[3]
INFO_N: int  # 15
TENSOR_N: int  # 14
LAYER_N: int  # 23
DT_INT8: int  # 1
DT_INT32: int  # 2
DT_F32: int  # 3
KIND_ACT: int  # 0
KIND_CONST: int  # 1
KIND_STATE: int  # 2
Q_NONE: int  # 0
Q_TENSOR: int  # 1
OP_CONV2D: int  # 1
OP_LINEAR: int  # 2
OP_RELU: int  # 3
OP_RELU6: int  # 4
OP_MAXPOOL: int  # 5
OP_AVGPOOL: int  # 6
OP_GAP: int  # 7
OP_ADD: int  # 8
OP_LUT: int  # 9
OP_CONCAT: int  # 10
OP_UPSAMPLE: int  # 11
ACT_NONE: int  # 0
ACT_RELU: int  # 1
ACT_RELU6: int  # 2
N_PARAMS: tuple[int, ...]  # params per op (index: OP_*)
ITEMSIZE: tuple[int, ...]  # bytes per element (index: DT_*)
OP_NAMES: tuple[str, ...]  # op code -> name
ACT_NAMES: tuple[str, ...]  # ('', 'relu', 'relu6')
# --- generated: end

def trainer_record(b: bytes | bytearray | memoryview, full: bool = False
                   ) -> int | tuple[int, tuple[int, int] | None, int] | None:
    """The shuffle state of the checkpoint's trainer record, or None; full: (state, Adam's
    (beta1^t, beta2^t) bits or None, record length)."""
