# microtrain.pyk.matmul_s8: the pure-Python kernels of usermod/microtrain/matmul_s8.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import matmul_s8_forward as matmul_s8_forward
from _microtrain import matmul_s8_grad_a as matmul_s8_grad_a
from _microtrain import matmul_s8_grad_b as matmul_s8_grad_b
