# MicroPython side of the abusive-call campaign (tests/support/reliability/abuse.py):
# seeded random mutations of one valid call per binding function, each made on
# the native module and on the pure-Python kernel with its own copies of the
# arguments; the verdicts (exception type and message, or return value and the
# bytes of every mutable argument afterwards) must be identical.
# Usage: micropython rel_abuse.py BASES SEED N
# Prints one "MISMATCH ..." line per disagreement, then "ABUSE-DONE calls mismatches".
import sys
from array import array

import _microtrain as N
from microtrain.pyk import kernel

TYPECODES = "bBhHiIfd"
INTS = (0, 1, -1, 2, 3, 7, 8, 127, 128, -128, -129, 255, 256, 32767, 32768, 65535, 65536, 131071,
        2147483647, -2147483648, 2147483648, -2147483649, 1 << 62, 1 << 63, -(1 << 63) - 1, 1 << 70)

_r = [1]


def rnd(n):
    # xorshift32, seeded from the command line: the campaign is reproducible
    r = _r[0]
    r ^= (r << 13) & 0xFFFFFFFF
    r ^= r >> 17
    r ^= (r << 5) & 0xFFFFFFFF
    _r[0] = r
    return r % n


def copy(a):
    t = type(a)
    if t is bytearray:
        return bytearray(a)
    if t is array:
        return array(repr(a[0:0])[7], a)
    if t is memoryview:
        return memoryview(bytearray(bytes(a)))
    return a  # immutable (bytes, str, int, float, None, tuple) or a fresh list below
    # (lists are rebuilt by the generator each time)


def length_near(a):
    n = len(a) if type(a) in (bytes, bytearray, array) else 8
    return (n, n + 1, n - 1 if n else 0, 0, 1, 2 * n, rnd(64))[rnd(7)]


def value(args, i):
    """A replacement for argument i: a wrong type, a wrong size, an edge value."""
    a = args[i] if i < len(args) else None
    k = rnd(16)
    if k == 0:
        return None
    if k == 1:
        return INTS[rnd(len(INTS))]
    if k == 2:
        return (0.5, float("nan"), float("inf"), -float("inf"), -0.0, 1e39, 1e-45, 3.0)[rnd(8)]
    if k == 3:
        return ("", "abc", "x" * length_near(a), b"", True, (1, 2), [1, 2], {})[rnd(8)]
    if k == 4:
        return bytes(length_near(a))
    if k == 5:
        return bytearray(length_near(a))
    if k in (6, 7):
        return array(TYPECODES[rnd(8)], bytes(8 * length_near(a)))[:length_near(a)]
    if k == 8:
        b = bytearray(length_near(a) + 2)
        return memoryview(b)[1:1 + rnd(len(b))]
    if k == 9 and type(a) is array:  # same length, another typecode
        return array(TYPECODES[rnd(8)], bytes(8 * len(a)))[:len(a)]
    if k == 10 and args:  # the very same object as another argument
        return args[rnd(len(args))]
    if k in (11, 12, 13) and type(a) in (bytearray, array) and len(a):  # one element of a valid buffer
        tc = "B" if type(a) is bytearray else repr(a[0:0])[7]
        b = copy(a)
        j = rnd(len(b))
        if tc in "fd":
            b[j] = (0.0, -1.0, 1e30, float("nan"), float("inf"), 1e-40)[rnd(6)]
        else:
            v = INTS[rnd(len(INTS))] * (-1 if rnd(2) else 1)
            lim = {"b": 128, "B": 256, "h": 32768, "H": 65536, "i": 1 << 31, "I": 1 << 32}[tc]
            lo = 0 if tc in "BHI" else -lim
            hi = lim if tc in "BHI" else lim - 1
            b[j] = lo if v < lo else (hi if v > hi else v)
        return b
    if k == 14 and type(a) is int:
        return a + (-1, 1, -2, 2, 1 << 31)[rnd(5)]
    return a


def verdict(fn, args):
    try:
        ret = fn(*args)
    except Exception as e:  # noqa: BLE001 - every outcome is a verdict
        m = str(e)
        # the interpreter's arity messages (a Python function's, a native one's), not the binding's
        if "positional argument" in m or m.startswith("function expected at "):
            m = "arity"
        return ("E", type(e).__name__, m)
    outs = tuple(bytes(a) for a in args if type(a) in (bytearray, array))
    return ("R", repr(ret), outs)


def main():
    bases = eval(open(sys.argv[1]).read(), {"array": array})
    _r[0] = (int(sys.argv[2]) * 2654435761 + 1) & 0xFFFFFFFF or 1
    n = int(sys.argv[3])
    bad = 0
    for c in range(n):
        op, base = bases[rnd(len(bases))]
        args = [copy(a) for a in base]
        for _ in range(1 + rnd(3)):
            r = rnd(20)
            if r == 0 and args:
                args.pop()
            elif r == 1:
                args.append(value(args, len(args)))
            elif args:
                i = rnd(len(args))
                args[i] = value(args, i)
        # each implementation gets its own copies; aliases (the same object twice) stay aliases
        seen = {}
        a1, a2 = [], []
        for a in args:
            k = id(a)
            if k not in seen:
                seen[k] = (copy(a), copy(a))
            a1.append(seen[k][0])
            a2.append(seen[k][1])
        v1 = verdict(getattr(N, op), a1)
        v2 = verdict(kernel(op), a2)
        if v1 != v2:
            bad += 1
            if bad <= 20:
                print("MISMATCH", c, op, repr(v1)[:300], "|", repr(v2)[:300])
    print("ABUSE-DONE", n, bad)


main()
