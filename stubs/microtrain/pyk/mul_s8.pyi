# microtrain.pyk.mul_s8: the pure-Python kernels of usermod/microtrain/mul_s8.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import mul_s8_forward as mul_s8_forward
from _microtrain import mul_s8_grad_x1 as mul_s8_grad_x1
from _microtrain import mul_s8_grad_x2 as mul_s8_grad_x2
