# Runs another MicroPython runner of this folder with the pure-Python kernels
# (python_lib/microtrain/pykernels.py) standing in for the native _microtrain.
# Usage: micropython pykernel_shim.py RUNNER ARGS...
# (MICROPYPATH must reach pykernels, e.g. python_lib/microtrain, and should not
# reach the natmod.)
import sys

import pykernels

sys.modules["_microtrain"] = pykernels
runner = sys.argv.pop(1)
with open(runner) as f:
    src = f.read()
exec(src, {"__name__": "__main__"})
