# microtrain.pyk.softmax_s8: the pure-Python kernels of usermod/microtrain/softmax_s8.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import softmax_s8_forward as softmax_s8_forward
from _microtrain import softmax_s8_grad_input as softmax_s8_grad_input
