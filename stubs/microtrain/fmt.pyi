# microtrain.fmt: the .mtm format constants on the device (docs/format.md); the same values
# as tools/microtrain_tools/mtm.py and usermod/microtrain/mtm_loader.h / .c.

MAGIC: bytes  # b"MTMF"
VERSION_MAJOR: int  # 1
VERSION_MINOR: int  # 3
HEADER_SIZE: int  # 64
TENSOR_ENTRY: int  # 48
LAYER_ENTRY: int  # 152
PARAMS_OFF: int  # 72: offset of the params inside a layer entry
N_PARAMS_MAX: int  # 20
MAX_TENSORS: int  # 4096
MAX_LAYERS: int  # 1024
MAX_DIM: int  # 65535
MAX_ELEMS: int  # 2^26: the kernels' largest tensor / buffer
MAX_NAME: int  # 63
MAX_FUSED: int  # 255
NONE: int  # 0xFFFFFFFF: no tensor, in the file
NONE_I32: int  # -1: no tensor, as the accessors report it
INFO_N: int  # 15 int32 values filled by mtm_info
TENSOR_N: int  # 14, by mtm_tensor
LAYER_N: int  # 23, by mtm_layer
FLAG_TRAINED: int  # 1 (header flags)
FLAG_HAS_STATE: int  # 2 (header flags)
TFLAG_SIGNAL_1D: int  # 1 (tensor flags)
LFLAG_TRAINED: int  # 1 (layer flags)
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
OP_GAP: int  # 7 (global average pool)
OP_ADD: int  # 8
OP_LUT: int  # 9 (format 1.1)
OP_CONCAT: int  # 10 (format 1.2)
OP_UPSAMPLE: int  # 11 (format 1.2)
ACT_NONE: int  # 0
ACT_RELU: int  # 1
ACT_RELU6: int  # 2
N_PARAMS: tuple[int, ...]  # descriptor length per op code
ITEMSIZE: tuple[int, ...]  # bytes per element per dtype code
OP_NAMES: tuple[str, ...]  # op code -> name: "conv2d", "linear", ..., "add", "lut"
ACT_NAMES: tuple[str, ...]  # fused activation code -> "", "relu", "relu6"

TRAINER_TAG: bytes  # the trainer record's tag at the end of a checkpoint's string pool
ADAM_TAG: bytes  # in the trainer record: Adam's beta1^t, beta2^t follow (float32 bits, 16 hex digits)
def trainer_record(b: bytes | bytearray | memoryview, full: bool = False
                   ) -> int | tuple[int, tuple[int, int] | None, int] | None:
    """The shuffle state of the checkpoint's trainer record, or None; full: (state, Adam's
    (beta1^t, beta2^t) bits or None, record length)."""
