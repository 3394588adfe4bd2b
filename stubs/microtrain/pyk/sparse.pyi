# microtrain.pyk.sparse: the pure-Python kernels of usermod/microtrain/sparse.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import l1_norm_s8 as l1_norm_s8
from _microtrain import topk_mask as topk_mask
