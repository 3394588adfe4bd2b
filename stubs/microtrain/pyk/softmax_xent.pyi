# microtrain.pyk.softmax_xent: the pure-Python kernels of usermod/microtrain/softmax_xent.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import softmax_xent_s8 as softmax_xent_s8
