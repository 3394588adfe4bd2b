# microtrain.pyk.accumulate: the pure-Python kernels of usermod/microtrain/accumulate.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import f32_axpy_i32 as f32_axpy_i32
