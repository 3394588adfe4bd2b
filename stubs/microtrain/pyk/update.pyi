# microtrain.pyk.update: the pure-Python kernels of usermod/microtrain/update.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import update_bf16_adam as update_bf16_adam
from _microtrain import update_bf16_momentum as update_bf16_momentum
from _microtrain import update_f32_adam as update_f32_adam
from _microtrain import update_f32_axpby as update_f32_axpby
from _microtrain import update_f32_check as update_f32_check
from _microtrain import update_f32_decay as update_f32_decay
from _microtrain import update_f32_momentum as update_f32_momentum
from _microtrain import update_f32_ratios as update_f32_ratios
from _microtrain import update_f32_scale as update_f32_scale
from _microtrain import update_f32_standardize as update_f32_standardize
from _microtrain import update_s8_apply as update_s8_apply
from _microtrain import update_s8_apply_keep as update_s8_apply_keep
from _microtrain import update_u8_touch as update_u8_touch
