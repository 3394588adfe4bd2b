# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# microtrain.fmt: the .mtm layout on the device (docs/format.md), generated from the layout the
# host's tools/microtrain_tools/mtm.py imports and the C loader's mtm_layout.h is generated from.

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
MAGIC: bytes  # b'MTMF'
MAX_ELEMS: int  # 2^26: the kernels' largest tensor / buffer (checks.c)
NONE: int  # "no tensor" in the file (not const(): a big int on 32-bit ports)
SCALE_MAX_BITS: int  # 2^40 (not const(): a big int on 32-bit ports)
TRAINER_TAG: bytes  # b'trainer:rng='
ADAM_TAG: bytes  # b',adam='
TENSOR_FMT: str  # '<BBBBI4IIIIiII'
LAYER_HEAD_FMT: str  # op .. state[3]
N_PARAMS: tuple[int, ...]  # params per op (index: OP_*)
ITEMSIZE: tuple[int, ...]  # bytes per element (index: DT_*)
OP_NAMES: tuple[str, ...]  # op code -> name
ACT_NAMES: tuple[str, ...]  # ('', 'relu', 'relu6')
# --- generated: end

def trainer_record(b: bytes | bytearray | memoryview, full: bool = False
                   ) -> int | tuple[int, tuple[int, int] | None, int, int | None] | None:
    """The shuffle seed state of the checkpoint's trainer record, or None; full: (state, Adam's
    (beta1^t, beta2^t) bits or None, record length, epochs done or None)."""
