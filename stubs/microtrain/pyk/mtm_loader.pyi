# microtrain.pyk.mtm_loader: the pure-Python kernels of usermod/microtrain/mtm_loader.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import mtm_info as mtm_info
from _microtrain import mtm_layer as mtm_layer
from _microtrain import mtm_tensor as mtm_tensor
from _microtrain import mtm_validate as mtm_validate
from _microtrain import mtm_view as mtm_view  # here: a copy (array), not the view retyped

def crc32(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """zlib CRC-32 of data, continuing from crc (binascii.crc32 when the port has it)."""
