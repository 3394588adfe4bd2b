# Runs another MicroPython script of this folder under two CircuitPython rules
# that the unix MicroPython does not enforce (docs/circuitpython.md):
# - an element store into a bytearray / array / memoryview must fit the
#   element's type (CircuitPython raises OverflowError "value must fit in N
#   byte(s)"; MicroPython silently truncates). bytearray, memoryview and
#   array.array are replaced by subclasses whose item stores (and whose
#   constructors, when they convert element by element) check the range and
#   raise that OverflowError; everything else is the real object.
# - `time` has no ticks_ms / ticks_us / ticks_diff / ticks_add / ticks_cpu
#   (a CircuitPython board's time: monotonic, monotonic_ns, sleep, time,
#   localtime, mktime, struct_time).
# uctypes.bytearray_at (which CircuitPython lacks: there the package copies
# the file bytes instead, a path without stores) hands out a checked view.
# This checks semantics on the real MicroPython; it is not a CircuitPython.
# Usage: micropython cpy_semantics.py [--host-time] SCRIPT ARGS...  (SCRIPT may
# be pykernel_shim.py, which then runs its own runner under the same rules;
# --host-time keeps the full time module for a harness that times its calls
# with ticks_us, kernel_runner.py: the kernels themselves never import time)
import builtins
import sys
import time as _time
from array import array as _array

_bytearray = bytearray
_memoryview = memoryview
_RANGE = {"b": (-128, 127), "B": (0, 255), "h": (-32768, 32767), "H": (0, 65535),
          "i": (-2147483648, 2147483647), "I": (0, 4294967295),
          "l": (-2147483648, 2147483647), "L": (0, 4294967295),
          "q": (-(1 << 63), (1 << 63) - 1), "Q": (0, (1 << 64) - 1)}
STORES = [0]  # checked element stores (the test asserts that the check ran)


def _check(tc, v):
    r = _RANGE.get(tc)
    if r is None:  # 'f' / 'd' elements take any number
        return
    STORES[0] += 1
    if type(v) is not int:
        raise TypeError("can't convert %s to int" % type(v).__name__)
    if v < r[0] or v > r[1]:
        raise OverflowError("value must fit in %d byte(s)" % _SIZE[tc.lower()])


_SIZE = {"b": 1, "h": 2, "i": 4, "l": 4, "q": 8}


def _check_all(tc, init):
    # constructors from buffers other than bytes / bytearray convert element by
    # element (MicroPython and CircuitPython alike): the elements must fit
    if init is None or isinstance(init, int) or type(init) in (bytes, _bytearray, Bytearray):
        return
    if type(init) is Array and init.tc == tc:
        return
    for v in init:
        _check(tc, v)


def _mv_typecode(m):
    # typecode of a native memoryview, from its item size, a probe store and
    # whether its items read as floats
    n = len(m)
    if n == 0:
        return "B"
    isz = len(bytes(m[0:1]))
    v = m[0]
    if type(v) is float:
        return "f" if isz == 4 else "d"
    try:
        m[0] = -1
    except TypeError:  # read-only (bytes): no store can reach it
        return "B"
    signed = m[0] == -1
    m[0] = v
    return {1: "bB", 2: "hH", 4: "iI", 8: "qQ"}[isz][0 if signed else 1]


def _native(v):
    # a slice assignment takes its source's bytes; the native store accepts
    # native buffers only (a checked object is one of them underneath)
    return _memoryview(v) if isinstance(v, (Bytearray, Array, Memoryview)) else v


class Bytearray(_bytearray):
    tc = "B"

    def __init__(self, *args):
        if args:
            _check_all("B", args[0])

    def __setitem__(self, i, v):
        if type(i) is int:
            _check("B", v)
        _memoryview(self)[i] = _native(v)

    def __getitem__(self, i):
        r = _memoryview(self)[i]
        return Bytearray(r) if type(i) is slice else r


class Array(_array):
    def __init__(self, tc, init=None):
        self.tc = tc
        _check_all(tc, init)

    def __setitem__(self, i, v):
        if type(i) is int:
            _check(self.tc, v)
        _memoryview(self)[i] = _native(v)

    def __getitem__(self, i):
        r = _memoryview(self)[i]
        return Array(self.tc, r) if type(i) is slice else r


class Memoryview(_memoryview):
    def __init__(self, obj):
        tc = getattr(obj, "tc", None)
        self.tc = tc if tc is not None else _mv_typecode(_memoryview(obj))

    def __setitem__(self, i, v):
        if type(i) is int:
            _check(self.tc, v)
        _memoryview(self)[i] = _native(v)

    def __getitem__(self, i):
        r = _memoryview(self)[i]
        if type(i) is slice:
            m = Memoryview(r)
            m.tc = self.tc
            return m
        return r


class _ArrayModule:
    array = Array


class _Time:
    # what a CircuitPython board's time module has
    sleep = _time.sleep
    time = _time.time
    localtime = _time.localtime
    mktime = _time.mktime

    @staticmethod
    def monotonic_ns():
        return _time.time_ns()

    @staticmethod
    def monotonic():
        return _time.time_ns() / 1e9


builtins.bytearray = Bytearray
builtins.memoryview = Memoryview
sys.modules["array"] = _ArrayModule
if sys.argv[1] == "--host-time":
    sys.argv.pop(1)
else:
    sys.modules["time"] = _Time
try:
    import uctypes as _uctypes

    class _Uctypes:
        addressof = _uctypes.addressof

        @staticmethod
        def bytearray_at(addr, n):
            return Memoryview(_uctypes.bytearray_at(addr, n))

    sys.modules["uctypes"] = _Uctypes
except ImportError:
    pass
sys.modules["cpy_semantics"] = sys.modules.get("__main__")

script = sys.argv.pop(1)
with open(script) as f:
    src = f.read()
try:
    exec(src, {"__name__": "__main__"})
finally:
    print("cpy_semantics: checked_stores=%d" % STORES[0])
