# microtrain.pyk.conv2d: the pure-Python kernels of usermod/microtrain/conv2d_s8_*.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import conv2d_s8_forward as conv2d_s8_forward
from _microtrain import conv2d_s8_grad_input as conv2d_s8_grad_input
from _microtrain import conv2d_s8_grad_weight as conv2d_s8_grad_weight
from _microtrain import conv2d_s8_grad_weight_f32 as conv2d_s8_grad_weight_f32
