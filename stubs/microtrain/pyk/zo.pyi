# microtrain.pyk.zo: the pure-Python kernels of usermod/microtrain/zo.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import zo_perturb_h_s8 as zo_perturb_h_s8
from _microtrain import zo_perturb_s8 as zo_perturb_s8
from _microtrain import zo_update_s8 as zo_update_s8
