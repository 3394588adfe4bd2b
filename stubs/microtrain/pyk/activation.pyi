# microtrain.pyk.activation: the pure-Python kernels of usermod/microtrain/activation.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import relu6_s8_backward as relu6_s8_backward
from _microtrain import relu6_s8_forward as relu6_s8_forward
from _microtrain import relu_s8_backward as relu_s8_backward
from _microtrain import relu_s8_forward as relu_s8_forward
