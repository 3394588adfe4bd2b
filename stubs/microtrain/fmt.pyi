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
MAX_DIM: int  # 65535
MAX_ELEMS: int  # 2^26: the kernels' largest tensor / buffer (checks.c)
MAX_NAME: int  # 63
MAX_FUSED: int  # 255
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
TFLAG_SIGNAL_1D: int  # 1
LFLAG_TRAINED: int  # 1
TENSOR_FMT: str  # '<BBBBI4IIIIiII'
LAYER_HEAD_FMT: str  # op .. state[3]
H_VERSION_MAJOR: int  # 4
H_VERSION_MINOR: int  # 6
H_HEADER_SIZE: int  # 8
H_FLAGS: int  # 12
H_TOTAL_LEN: int  # 16
H_N_TENSORS: int  # 20
H_TENSOR_TABLE_OFF: int  # 24
H_N_LAYERS: int  # 28
H_LAYER_TABLE_OFF: int  # 32
H_STRINGS_OFF: int  # 36
H_STRINGS_LEN: int  # 40
H_DATA_OFF: int  # 44
H_DATA_LEN: int  # 48
H_INPUT: int  # 52
H_OUTPUT: int  # 56
H_TRAIN_STEPS: int  # 60
T_RANK: int  # 1
T_KIND: int  # 2
T_QUANT: int  # 3
T_FLAGS: int  # 4
T_SHAPE: int  # 8
T_DATA_OFF: int  # 24
T_DATA_LEN: int  # 28
T_SCALE: int  # 32
T_ZERO_POINT: int  # 36
T_QSCALES: int  # 40
T_RESERVED: int  # 44
L_ACT: int  # 1
L_N_PARAMS: int  # 2
L_N_INPUTS: int  # 3
L_FLAGS: int  # 4
L_NAME_OFF: int  # 8
L_NAME_LEN: int  # 12
L_FUSED_OFF: int  # 16
L_FUSED_LEN: int  # 20
L_IN0: int  # 24
L_IN1: int  # 28
L_OUT: int  # 32
L_WEIGHT: int  # 36
L_BIAS: int  # 40
L_MULT: int  # 44
L_SHIFT: int  # 48
L_STATE: int  # 52
L_STATE4: int  # 68
L_STATE5: int  # 70
INFO_VERSION_MAJOR: int  # 0
INFO_VERSION_MINOR: int  # 1
INFO_FLAGS: int  # 2
INFO_TOTAL_LEN: int  # 3
INFO_N_TENSORS: int  # 4
INFO_N_LAYERS: int  # 5
INFO_TENSOR_TABLE_OFF: int  # 6
INFO_LAYER_TABLE_OFF: int  # 7
INFO_STRINGS_OFF: int  # 8
INFO_STRINGS_LEN: int  # 9
INFO_DATA_OFF: int  # 10
INFO_DATA_LEN: int  # 11
INFO_INPUT: int  # 12
INFO_OUTPUT: int  # 13
INFO_TRAIN_STEPS: int  # 14
TROW_DTYPE: int  # 0
TROW_RANK: int  # 1
TROW_KIND: int  # 2
TROW_QUANT: int  # 3
TROW_FLAGS: int  # 4
TROW_SHAPE0: int  # 5
TROW_SHAPE1: int  # 6
TROW_SHAPE2: int  # 7
TROW_SHAPE3: int  # 8
TROW_DATA_OFF: int  # 9
TROW_DATA_LEN: int  # 10
TROW_SCALE: int  # 11
TROW_ZERO_POINT: int  # 12
TROW_QSCALES: int  # 13
LROW_OP: int  # 0
LROW_ACT: int  # 1
LROW_N_PARAMS: int  # 2
LROW_N_INPUTS: int  # 3
LROW_FLAGS: int  # 4
LROW_NAME_OFF: int  # 5
LROW_NAME_LEN: int  # 6
LROW_FUSED_OFF: int  # 7
LROW_FUSED_LEN: int  # 8
LROW_IN0: int  # 9
LROW_IN1: int  # 10
LROW_OUT: int  # 11
LROW_WEIGHT: int  # 12
LROW_BIAS: int  # 13
LROW_MULT: int  # 14
LROW_SHIFT: int  # 15
LROW_STATE0: int  # 16
LROW_STATE1: int  # 17
LROW_STATE2: int  # 18
LROW_STATE3: int  # 19
LROW_PARAMS_OFF: int  # 20
LROW_STATE4: int  # 21
LROW_STATE5: int  # 22
INFO_N: int  # 15
TENSOR_N: int  # 14
LAYER_N: int  # 23
DT_INT8: int  # 1
DT_INT32: int  # 2
DT_F32: int  # 3
DT_UINT8: int  # 4
KIND_ACT: int  # 0
KIND_CONST: int  # 1
KIND_STATE: int  # 2
Q_NONE: int  # 0
Q_TENSOR: int  # 1
Q_CHANNEL: int  # 2
Q_BIAS: int  # 3
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
