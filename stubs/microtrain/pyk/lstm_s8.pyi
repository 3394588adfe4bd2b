# microtrain.pyk.lstm_s8: the pure-Python kernels of usermod/microtrain/lstm_s8_forward.c and
# lstm_s8_backward.c: same arguments, checks and bit-exact results as the native module's
# (docs/numerics.md).
from _microtrain import lstm_s8_backward as lstm_s8_backward
from _microtrain import lstm_s8_forward as lstm_s8_forward
