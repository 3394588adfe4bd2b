# The C sources of _microtrain, listed once: the natmod Makefile and
# micropython.mk include this file, micropython.cmake and the tests
# (tests/support/kernel_harness.py) read it.
# The pure kernels (no MicroPython include): the C test driver links these.
MICROTRAIN_KERNEL_SRC = quant.c checks.c conv2d_s8_forward.c conv2d_s8_grad_weight.c conv2d_s8_grad_input.c \
    conv2d_dil_s8.c linear.c activation.c lut.c pool.c add.c concat.c upsample.c softmax_xent.c sparse.c \
    accumulate.c update.c zo.c mul_s8.c matmul_s8.c softmax_s8.c \
    layernorm_s8.c gru_s8_forward.c gru_s8_backward.c lstm_s8_forward.c lstm_s8_backward.c
# The .mtm validator and accessors (no MicroPython include): the C .mtm tests and the fuzzer link these.
MICROTRAIN_MTM_SRC = mtm_loader.c mtm_access.c mtm_rules_seq.c mtm_rules_rnn.c
# Every source of the module; modmicrotrain.c first (the natmod's mpy_init leads its code).
MICROTRAIN_SRC = modmicrotrain.c $(MICROTRAIN_KERNEL_SRC) $(MICROTRAIN_MTM_SRC) softfloat.c
# The binding's headers, included by modmicrotrain.c: the natmod scans them for qstrs too.
MICROTRAIN_BIND_H = mt_funcs.h mt_bind.h mt_bind_gen.h mt_bind_conv.h mt_bind_mtm.h mt_bind_update.h
# The kernels with register-blocked loops, built at -O2 (the Makefile says why).
MICROTRAIN_SRC_O2 = conv2d_s8_forward.c conv2d_s8_grad_weight.c conv2d_s8_grad_input.c conv2d_dil_s8.c linear.c \
    quant.c sparse.c pool.c activation.c add.c matmul_s8.c mul_s8.c softmax_s8.c layernorm_s8.c
