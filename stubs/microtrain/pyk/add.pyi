# microtrain.pyk.add: the pure-Python kernels of usermod/microtrain/add.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import add_s8_forward as add_s8_forward
from _microtrain import add_s8_grad_merge as add_s8_grad_merge
from _microtrain import conv2d_add_s8_forward as conv2d_add_s8_forward
