# Frozen-code manifest: the stm32 port with microtrain built in.
# Build: docs/firmware.md. Paths without a $(...) variable are relative to this
# file (MicroPython's manifest tool runs each manifest from its own folder).
include("$(PORT_DIR)/boards/manifest.py")  # what every stm32 board freezes by default
package("microtrain", base_path="../../python_lib")  # python_lib/microtrain -> microtrain/*.py
