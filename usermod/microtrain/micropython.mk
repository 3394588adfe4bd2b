# User C module build for make-based MicroPython ports (unix, stm32, ...):
#   make USER_C_MODULES=<repo>/usermod
MICROTRAIN_MOD_DIR := $(USERMOD_DIR)

SRC_USERMOD_C += $(addprefix $(MICROTRAIN_MOD_DIR)/, \
    modmicrotrain.c quant.c checks.c conv2d.c linear.c activation.c pool.c add.c \
    softmax_xent.c sparse.c accumulate.c mtm_loader.c)

# -ffp-contract=off: no fused multiply-add, so float gradient accumulation
# rounds exactly as docs/numerics.md (and the oracle) say.
CFLAGS_USERMOD += -I$(MICROTRAIN_MOD_DIR) -ffp-contract=off
