# User C module build for make-based MicroPython ports (unix, stm32, ...):
#   make USER_C_MODULES=<repo>/usermod
MICROTRAIN_MOD_DIR := $(USERMOD_DIR)

include $(MICROTRAIN_MOD_DIR)/sources.mk
MICROTRAIN_SRC_C := $(addprefix $(MICROTRAIN_MOD_DIR)/,$(MICROTRAIN_SRC))
SRC_USERMOD_C += $(MICROTRAIN_SRC_C)

CFLAGS_USERMOD += -I$(MICROTRAIN_MOD_DIR)
# The function table lives in headers (mt_funcs.h ...): qstrs are extracted only from the sources
# that changed, so a header that gains a function must send every source through extraction again.
QSTR_GLOBAL_DEPENDENCIES += $(addprefix $(MICROTRAIN_MOD_DIR)/,$(MICROTRAIN_BIND_H))

# -ffp-contract=off: no fused multiply-add, so float gradient accumulation
# rounds exactly as docs/numerics.md (and the oracle) say. Only on our own
# objects: py/py.mk adds CFLAGS_USERMOD to the CFLAGS of every file of the
# firmware (math.log/exp/pow would change too). py/py.mk names a module's
# object $(BUILD)/<source path below USER_C_MODULES>.o, compiled by the
# $(BUILD)/%.o: %.c rule of py/mkrules.mk from $(CFLAGS); the same patsubst
# gives our objects here. `private`: prerequisites made on the way (generated
# headers) do not inherit the flag.
MICROTRAIN_OBJ := $(addprefix $(BUILD)/, $(patsubst $(USER_C_MODULES)/%.c,%.o,$(MICROTRAIN_SRC_C)))
$(MICROTRAIN_OBJ): private CFLAGS += -ffp-contract=off
# The kernels with register-blocked loops at -O2 (ports build at -Os), as in
# the natmod (usermod/microtrain/Makefile says why -fno-schedule-insns).
$(filter $(addprefix %/,$(MICROTRAIN_SRC_O2:.c=.o)),$(MICROTRAIN_OBJ)): private CFLAGS += \
    -O2 -fno-schedule-insns
