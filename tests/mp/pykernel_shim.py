# Runs another MicroPython runner of this folder with the pure-Python kernels
# (python_lib/microtrain/pyk/) standing in for the native _microtrain: an
# object holding every kernel of microtrain.pyk is put in sys.modules, which
# `import _microtrain` consults before the built-in modules, so this works
# with a firmware that has _microtrain built in too.
# Usage: micropython pykernel_shim.py RUNNER ARGS...
# (MICROPYPATH must reach python_lib, and should not reach the natmod.)
import sys

from microtrain import pyk


class _Kernels:
    pass


ns = _Kernels()
for name in pyk.WHERE:
    setattr(ns, name, pyk.kernel(name))
ns.HAS_FLOAT = pyk.HAS_FLOAT
sys.modules["_microtrain"] = ns
runner = sys.argv.pop(1)
with open(runner) as f:
    src = f.read()
exec(src, {"__name__": "__main__"})
