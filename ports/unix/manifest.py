# Frozen-code manifest: the unix port (standard variant) with microtrain built in.
# Build: docs/firmware.md. Paths without a $(...) variable are relative to this
# file (MicroPython's manifest tool runs each manifest from its own folder).
include("$(PORT_DIR)/variants/standard/manifest.py")  # what the standard variant freezes
package("microtrain", base_path="../../python_lib")  # python_lib/microtrain -> microtrain/*.py
