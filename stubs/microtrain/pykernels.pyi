# microtrain.pykernels: the pure-Python kernels, used when _microtrain cannot be imported.
# Same functions, argument checks and bit-exact results as the native module
# (docs/numerics.md), plus crc32. Slow: for boards without a natmod or firmware module.
from _microtrain import HAS_FLOAT as HAS_FLOAT
from _microtrain import add_s8_forward as add_s8_forward
from _microtrain import add_s8_grad_merge as add_s8_grad_merge
from _microtrain import avgpool_s8_forward as avgpool_s8_forward
from _microtrain import avgpool_s8_grad_input as avgpool_s8_grad_input
from _microtrain import conv2d_s8_forward as conv2d_s8_forward
from _microtrain import conv2d_s8_grad_input as conv2d_s8_grad_input
from _microtrain import conv2d_s8_grad_weight as conv2d_s8_grad_weight
from _microtrain import conv2d_s8_grad_weight_f32 as conv2d_s8_grad_weight_f32
from _microtrain import dyn_requant_s8 as dyn_requant_s8
from _microtrain import f32_axpy_i32 as f32_axpy_i32
from _microtrain import global_avgpool_s8_forward as global_avgpool_s8_forward
from _microtrain import global_avgpool_s8_grad_input as global_avgpool_s8_grad_input
from _microtrain import l1_norm_s8 as l1_norm_s8
from _microtrain import linear_s8_forward as linear_s8_forward
from _microtrain import linear_s8_grad_input as linear_s8_grad_input
from _microtrain import linear_s8_grad_weight as linear_s8_grad_weight
from _microtrain import linear_s8_grad_weight_f32 as linear_s8_grad_weight_f32
from _microtrain import maxpool_s8_forward as maxpool_s8_forward
from _microtrain import maxpool_s8_grad_input as maxpool_s8_grad_input
from _microtrain import mtm_info as mtm_info
from _microtrain import mtm_layer as mtm_layer
from _microtrain import mtm_tensor as mtm_tensor
from _microtrain import mtm_validate as mtm_validate
from _microtrain import relu6_s8_backward as relu6_s8_backward
from _microtrain import relu6_s8_forward as relu6_s8_forward
from _microtrain import relu_s8_backward as relu_s8_backward
from _microtrain import relu_s8_forward as relu_s8_forward
from _microtrain import softmax_xent_s8 as softmax_xent_s8
from _microtrain import topk_mask as topk_mask

def crc32(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """zlib CRC-32 of data, continuing from crc (binascii.crc32 when the port has it)."""
