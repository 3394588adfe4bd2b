# microtrain.pyk.layernorm_s8: the pure-Python kernels of usermod/microtrain/layernorm_s8.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import layernorm_s8_forward as layernorm_s8_forward
from _microtrain import layernorm_s8_grad_input as layernorm_s8_grad_input
