# microtrain.pyk.lut: the pure-Python kernels of usermod/microtrain/lut.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import lut_s8_forward as lut_s8_forward
from _microtrain import lut_s8_grad_input as lut_s8_grad_input
