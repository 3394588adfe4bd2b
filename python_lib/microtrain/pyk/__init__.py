# The pure-Python kernels: the same functions, argument checks (exception
# types and messages) and bit-exact numerics as the native _microtrain module
# (docs/numerics.md), for boards without the natmod or firmware module. One
# module per C file of usermod/microtrain (conv2d.py mirrors conv2d_s8_*.c, ...;
# checks.py holds the binding's argument checks and checks.c; each kernel's
# prologue is generated from the kernel spec, between marker comments), so a board
# imports only the kernels it calls: microtrain.kern takes them one by one
# through `kernel(name)`. This file stays small: every `import
# microtrain.pyk.x` runs it first.
#
# Notes for callers:
# - int8 inputs that are not array('b') (bytes, bytearray, array('B'),
#   memoryview) are copied once per call into a signed array('b') (a C-speed
#   copy); pass array('b') to avoid the copy. Outputs may be any writable
#   1-byte buffer.
# - Overlaps: Python has no addresses, so only the very same object passed as
#   an input and an output that the native module refuses is refused here.
#   Partially overlapping views are not detected; inputs copied as above are
#   read from their copies, so such calls mostly give the pre-call answer,
#   but two overlapping outputs (gw / gb views of one buffer) cannot be right.
# - Float kernels round every product and sum to float32 (through array('f')),
#   so they are bit-exact on double-precision ports too (not on ports whose
#   floats are 30-bit, MICROPY_OBJ_REPR_C).
# - requant needs 64-bit products: on 32-bit ports those are long ints
#   (MPZ), allocated per output element; ports without long ints cannot run
#   these modules.
# - Precompiled (mpy-cross) or frozen modules need less RAM than compiling
#   the source on the board (the sources of the kernels a model uses do fit a
#   256 KB heap next to the package: tests/kernels/test_pykernels.py).

HAS_FLOAT = True  # the float32 kernels are always there (float32 through array('f'))

# kernel name -> module of this package (the C file that holds it)
WHERE = {
    "conv2d_s8_forward": "conv2d", "conv2d_s8_grad_input": "conv2d", "conv2d_s8_grad_weight": "conv2d",
    "conv2d_s8_grad_weight_f32": "conv2d",
    "linear_s8_forward": "linear", "linear_s8_grad_input": "linear", "linear_s8_grad_weight": "linear",
    "linear_s8_grad_weight_f32": "linear",
    "relu_s8_forward": "activation", "relu6_s8_forward": "activation", "relu_s8_backward": "activation",
    "relu6_s8_backward": "activation",
    "lut_s8_forward": "lut", "lut_s8_grad_input": "lut",
    "maxpool_s8_forward": "pool", "maxpool_s8_grad_input": "pool", "avgpool_s8_forward": "pool",
    "avgpool_s8_grad_input": "pool", "global_avgpool_s8_forward": "pool",
    "global_avgpool_s8_grad_input": "pool", "maxpool_s8_grad_input_act": "pool",
    "maxpool_s8_grad_input_act_l1": "pool", "avgpool_s8_grad_input_act": "pool",
    "add_s8_forward": "add", "add_s8_grad_merge": "add", "conv2d_add_s8_forward": "add",
    "concat_s8_forward": "concat", "concat_s8_grad_input": "concat",
    "upsample_s8_forward": "upsample", "upsample_s8_grad_input": "upsample",
    "mul_s8_forward": "mul_s8", "mul_s8_grad_x1": "mul_s8", "mul_s8_grad_x2": "mul_s8",
    "matmul_s8_forward": "matmul_s8", "matmul_s8_grad_a": "matmul_s8", "matmul_s8_grad_b": "matmul_s8",
    "softmax_s8_forward": "softmax_s8", "softmax_s8_grad_input": "softmax_s8",
    "layernorm_s8_forward": "layernorm_s8", "layernorm_s8_grad_input": "layernorm_s8",
    "gru_s8_forward": "gru_s8", "gru_s8_backward": "gru_s8",
    "lstm_s8_forward": "lstm_s8", "lstm_s8_backward": "lstm_s8",
    "softmax_xent_s8": "softmax_xent",
    "l1_norm_s8": "sparse", "topk_mask": "sparse",
    "zo_perturb_s8": "zo", "zo_perturb_h_s8": "zo", "zo_update_s8": "zo",
    "dyn_requant_s8": "quant",
    "f32_axpy_i32": "accumulate",
    "update_u8_touch": "update", "update_f32_check": "update", "update_f32_decay": "update",
    "update_f32_standardize": "update", "update_f32_axpby": "update", "update_f32_momentum": "update",
    "update_f32_scale": "update", "update_f32_adam": "update", "update_bf16_momentum": "update",
    "update_bf16_adam": "update", "update_s8_apply": "update",
    "update_s8_apply_keep": "update", "update_f32_ratios": "update",
    "mtm_validate": "mtm_loader", "mtm_info": "mtm_loader", "mtm_tensor": "mtm_loader",
    "mtm_layer": "mtm_loader", "mtm_view": "mtm_loader",
    "crc32": "mtm_loader",
}


def kernel(name):
    """The pure-Python kernel `name` (imports only the module that holds it)."""
    mod = WHERE.get(name)
    if mod is None:
        raise AttributeError(name)
    return getattr(__import__("microtrain.pyk." + mod, None, None, (name,)), name)
