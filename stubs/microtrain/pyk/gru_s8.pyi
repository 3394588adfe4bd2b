# microtrain.pyk.gru_s8: the pure-Python kernels of usermod/microtrain/gru_s8_forward.c and
# gru_s8_backward.c: same arguments, checks and bit-exact results as the native module's
# (docs/numerics.md).
from _microtrain import gru_s8_backward as gru_s8_backward
from _microtrain import gru_s8_forward as gru_s8_forward
