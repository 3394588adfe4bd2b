# ruff: noqa: F821  (package / module / freeze are defined by MicroPython's makemanifest.py)
# Frozen-code manifest of the BUILTIN=1 firmware (Makefile): the microtrain
# package and the port's small json module as bytecode in flash.
package("microtrain", base_path="../../python_lib")
module("json.py", base_path="../common/lib")
freeze("$(MT_FROZEN_DIR)")  # extra modules (Makefile: MT_FROZEN_DIR), none by default
