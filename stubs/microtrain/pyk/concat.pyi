# microtrain.pyk.concat: the pure-Python kernels of usermod/microtrain/concat.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import concat_s8_forward as concat_s8_forward
from _microtrain import concat_s8_grad_input as concat_s8_grad_input
