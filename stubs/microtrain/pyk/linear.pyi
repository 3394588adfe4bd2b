# microtrain.pyk.linear: the pure-Python kernels of usermod/microtrain/linear.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import linear_s8_forward as linear_s8_forward
from _microtrain import linear_s8_grad_input as linear_s8_grad_input
from _microtrain import linear_s8_grad_weight as linear_s8_grad_weight
from _microtrain import linear_s8_grad_weight_f32 as linear_s8_grad_weight_f32
