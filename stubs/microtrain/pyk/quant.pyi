# microtrain.pyk.quant: the pure-Python kernels of usermod/microtrain/quant.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import dyn_requant_s8 as dyn_requant_s8
