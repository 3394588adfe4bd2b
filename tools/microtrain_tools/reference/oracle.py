"""Bit-exact numpy oracle of the microtrain kernels (written from docs/numerics.md).

Every kernel of the ``_microtrain`` binding has a function of the same name and
the same positional arguments, minus the output / scratch buffers, which are
returned instead. Integer kernels compute in int64 and are exact; the int32
wrap / unsigned rules of the spec are emulated where they can matter.
Argument errors raise ``ValueError`` like the binding.

This module gathers them: one file per op family beside it (``oracle_base``: coercion,
requantisation, geometry; ``oracle_conv``: conv2d, linear; ``oracle_shape``: relu, concat,
upsample, LUT; ``oracle_pool``: pools, add; ``oracle_mul``: element-wise mul;
``oracle_attn``: matmul of two activations, softmax; ``oracle_norm``: LayerNorm; ``oracle_rnn``: GRU;
``oracle_lstm``: LSTM;
``oracle_loss``: softmax cross-entropy, sparse selection, zeroth order; ``oracle_update``:
optimiser updates; ``oracle_host``: host-side helpers: multipliers, LUTs, weight ratios,
loss). Import it as before: ``from microtrain_tools.reference import oracle``.
"""

from __future__ import annotations

from microtrain_tools.reference.oracle_attn import (
    matmul_params,
    matmul_s8_forward,
    matmul_s8_grad_a,
    matmul_s8_grad_b,
    softmax_s8_forward,
    softmax_s8_grad_input,
)
from microtrain_tools.reference.oracle_base import (
    F32 as F32,
)
from microtrain_tools.reference.oracle_base import (
    I8 as I8,
)
from microtrain_tools.reference.oracle_base import (
    I32 as I32,
)
from microtrain_tools.reference.oracle_base import (
    I64 as I64,
)
from microtrain_tools.reference.oracle_base import (
    INT32_MAX as INT32_MAX,
)
from microtrain_tools.reference.oracle_base import (
    INT32_MIN as INT32_MIN,
)
from microtrain_tools.reference.oracle_base import (
    U8 as U8,
)
from microtrain_tools.reference.oracle_base import (
    _Geom as _Geom,
)
from microtrain_tools.reference.oracle_base import (
    dyn_requant,
    requant,
    rounding_divide_by_pot,
    wrap32,
)
from microtrain_tools.reference.oracle_conv import (
    conv2d_s8_forward,
    conv2d_s8_grad_input,
    conv2d_s8_grad_weight,
    conv2d_s8_grad_weight_f32,
    linear_s8_forward,
    linear_s8_grad_input,
    linear_s8_grad_weight,
    linear_s8_grad_weight_f32,
)
from microtrain_tools.reference.oracle_host import (
    LUT_DMAX as LUT_DMAX,
)
from microtrain_tools.reference.oracle_host import (
    LUT_FUNCTIONS,
    add_params,
    lut_function,
    lut_tables,
    make_softmax_lut,
    merge_ratios,
    quantize_multiplier,
    relu6_q6,
    trim_softmax_lut,
    weight_ratios,
    xent_loss,
)
from microtrain_tools.reference.oracle_loss import (
    ZO_STEP_MAX as ZO_STEP_MAX,
)
from microtrain_tools.reference.oracle_loss import (
    dyn_requant_s8,
    f32_axpy_i32,
    l1_norm_s8,
    softmax_xent_s8,
    topk_mask,
    xorshift32,
    zo_perturb_h_s8,
    zo_perturb_s8,
    zo_signs,
    zo_update_s8,
)
from microtrain_tools.reference.oracle_loss import (
    hadamard_signs as hadamard_signs,
)
from microtrain_tools.reference.oracle_lstm import (
    lstm_params,
    lstm_s8_backward,
    lstm_s8_forward,
)
from microtrain_tools.reference.oracle_mul import (
    mul_params,
    mul_s8_forward,
    mul_s8_grad_x1,
    mul_s8_grad_x2,
)
from microtrain_tools.reference.oracle_norm import (
    layernorm_params,
    layernorm_s8_forward,
    layernorm_s8_grad_input,
)
from microtrain_tools.reference.oracle_pool import (
    add_s8_forward,
    add_s8_grad_merge,
    avgpool_s8_forward,
    avgpool_s8_grad_input,
    avgpool_s8_grad_input_act,
    conv2d_add_s8_forward,
    global_avgpool_s8_forward,
    global_avgpool_s8_grad_input,
    maxpool_s8_forward,
    maxpool_s8_grad_input,
    maxpool_s8_grad_input_act,
    maxpool_s8_grad_input_act_l1,
)
from microtrain_tools.reference.oracle_rnn import (
    gru_dtanh,
    gru_params,
    gru_s8_backward,
    gru_s8_forward,
)
from microtrain_tools.reference.oracle_shape import (
    concat_params,
    concat_s8_forward,
    concat_s8_grad_input,
    lut_s8_forward,
    lut_s8_grad_input,
    relu6_s8_backward,
    relu6_s8_forward,
    relu_s8_backward,
    relu_s8_forward,
    upsample_s8_forward,
    upsample_s8_grad_input,
)
from microtrain_tools.reference.oracle_update import (
    bf16_to_f32,
    f32_to_bf16,
    ftz,
    update_bf16_adam,
    update_bf16_momentum,
    update_f32_adam,
    update_f32_axpby,
    update_f32_check,
    update_f32_decay,
    update_f32_momentum,
    update_f32_ratios,
    update_f32_scale,
    update_f32_standardize,
    update_quantize_multiplier,
    update_s8_apply,
    update_s8_apply_keep,
    update_u8_touch,
)

__all__ = [
    "bf16_to_f32",
    "f32_to_bf16",
    "ftz",
    "update_bf16_adam",
    "update_bf16_momentum",
    "add_params",
    "add_s8_forward",
    "add_s8_grad_merge",
    "avgpool_s8_forward",
    "concat_params",
    "concat_s8_forward",
    "concat_s8_grad_input",
    "avgpool_s8_grad_input",
    "avgpool_s8_grad_input_act",
    "conv2d_add_s8_forward",
    "conv2d_s8_forward",
    "conv2d_s8_grad_input",
    "conv2d_s8_grad_weight",
    "conv2d_s8_grad_weight_f32",
    "dyn_requant",
    "dyn_requant_s8",
    "f32_axpy_i32",
    "global_avgpool_s8_forward",
    "global_avgpool_s8_grad_input",
    "l1_norm_s8",
    "gru_dtanh",
    "gru_params",
    "gru_s8_backward",
    "gru_s8_forward",
    "lstm_params",
    "lstm_s8_backward",
    "lstm_s8_forward",
    "layernorm_params",
    "layernorm_s8_forward",
    "layernorm_s8_grad_input",
    "linear_s8_forward",
    "linear_s8_grad_input",
    "linear_s8_grad_weight",
    "linear_s8_grad_weight_f32",
    "LUT_FUNCTIONS",
    "lut_function",
    "lut_s8_forward",
    "lut_s8_grad_input",
    "lut_tables",
    "make_softmax_lut",
    "matmul_params",
    "matmul_s8_forward",
    "matmul_s8_grad_a",
    "matmul_s8_grad_b",
    "maxpool_s8_forward",
    "maxpool_s8_grad_input",
    "maxpool_s8_grad_input_act",
    "maxpool_s8_grad_input_act_l1",
    "merge_ratios",
    "mul_params",
    "mul_s8_forward",
    "mul_s8_grad_x1",
    "mul_s8_grad_x2",
    "quantize_multiplier",
    "relu6_q6",
    "relu6_s8_backward",
    "relu6_s8_forward",
    "relu_s8_backward",
    "relu_s8_forward",
    "requant",
    "rounding_divide_by_pot",
    "softmax_s8_forward",
    "softmax_s8_grad_input",
    "softmax_xent_s8",
    "topk_mask",
    "trim_softmax_lut",
    "update_f32_adam",
    "update_f32_axpby",
    "update_f32_check",
    "update_f32_decay",
    "update_f32_momentum",
    "update_f32_ratios",
    "update_f32_scale",
    "update_f32_standardize",
    "update_quantize_multiplier",
    "update_s8_apply",
    "update_s8_apply_keep",
    "update_u8_touch",
    "upsample_s8_forward",
    "upsample_s8_grad_input",
    "weight_ratios",
    "wrap32",
    "xent_loss",
    "xorshift32",
    "zo_perturb_h_s8",
    "zo_perturb_s8",
    "zo_signs",
    "zo_update_s8",
]
