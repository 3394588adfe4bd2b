# microtrain.pyk.upsample: the pure-Python kernels of usermod/microtrain/upsample.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import upsample_s8_forward as upsample_s8_forward
from _microtrain import upsample_s8_grad_input as upsample_s8_grad_input
