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
    # each kernel's module imported on first use, as microtrain.kern does on a
    # board (importing every module up front left the heap test to the luck of
    # the import order's fragmentation)
    def __getattr__(self, name):
        if name not in pyk.WHERE:
            raise AttributeError(name)
        f = pyk.kernel(name)
        setattr(self, name, f)
        return f


ns = _Kernels()
ns.HAS_FLOAT = pyk.HAS_FLOAT
sys.modules["_microtrain"] = ns
runner = sys.argv.pop(1)
with open(runner) as f:
    src = f.read()
exec(src, {"__name__": "__main__"})
