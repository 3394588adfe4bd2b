# MicroPython-side kernel runner: reads a case file, calls _microtrain, writes
# a results file. Format: tests/support/kernel_harness.py.
# Usage: micropython kernel_runner.py CASES RESULTS
# Runs on the device interpreter: array, struct, sys, gc, time only.
import gc
import struct
import sys
import time
from array import array

import _microtrain

POISON = 0xA5
BYTE_KINDS = "yYbB"


def rd(f, fmt):
    return struct.unpack(fmt, f.read(struct.calcsize(fmt)))


def make_buf(kind, n, size, f, has_data):
    if kind in BYTE_KINDS:
        raw = f.read(n * size) if has_data else bytes([POISON]) * (n * size)
        return raw if kind == "y" else bytearray(raw) if kind == "Y" else array(kind, raw)
    # 4-byte items: one allocation of the array itself (array(kind, bytes) would
    # need the bytes beside it: twice a large buffer, more than a 256 KB heap allows)
    a = array(kind, range(n))
    if has_data:
        f.readinto(a)
    else:
        p = struct.unpack("<" + kind, bytes([POISON]) * size)[0]
        for i in range(n):
            a[i] = p
    return a


def read_arg(f, args, kinds, outs):
    # returns (object, buffer kind or None)
    tag = f.read(1)
    if tag == b"N":
        return None, None
    if tag == b"i":
        return rd(f, "<q")[0], None
    if tag == b"d":
        return rd(f, "<d")[0], None
    if tag == b"T":
        kind, flags, n = rd(f, "<BBI")
        kind = chr(kind)
        size = 1 if kind in BYTE_KINDS else 4
        obj = make_buf(kind, n, size, f, flags & 2)
        if flags & 1:
            outs.append((kind, obj))
        return obj, ("-" + kind) if flags & 4 else kind
    if tag == b"A":
        idx, is_out = rd(f, "<BB")
        obj, kind = args[idx], kinds[idx].lstrip("-")
        if is_out:
            outs.append((kind, obj))
        return obj, kind
    if tag == b"V":
        idx, start, stop, is_out = rd(f, "<BIIB")
        obj, kind = memoryview(args[idx])[start:stop], kinds[idx].lstrip("-")
        if is_out:
            outs.append((kind, obj))
        return obj, kind
    if tag == b"E":
        n = rd(f, "<H")[0]
        return eval(f.read(n).decode(), {"array": array, "memoryview": memoryview}), None
    raise ValueError("bad arg tag " + repr(tag))


def write_str(out, s):
    b = s.encode()[:65535]
    out.write(struct.pack("<H", len(b)))
    out.write(b)


def main():
    gc.collect()
    cpath, rpath = sys.argv[1], sys.argv[2]
    f = open(cpath, "rb")
    out = open(rpath, "wb")
    if f.read(4) != b"MTK1":
        raise ValueError("not a case file")
    ncases = rd(f, "<I")[0]
    out.write(b"MTR1")
    out.write(struct.pack("<I", ncases))
    for _ in range(ncases):
        op = f.read(rd(f, "<B")[0]).decode()
        flags = rd(f, "<B")[0]
        repeat = rd(f, "<H")[0] if flags & 2 else 1
        nargs = rd(f, "<B")[0]
        args = []
        kinds = []
        outs = []
        for _ in range(nargs):
            obj, kind = read_arg(f, args, kinds, outs)
            args.append(obj)
            kinds.append(kind)
        call = [args[j] for j in range(nargs) if not (kinds[j] and kinds[j][0] == "-")]
        fn = getattr(_microtrain, op, None)
        exc = None if fn is not None else AttributeError("no function " + op)
        ret = None
        us = -1
        for _ in range(repeat if fn is not None else 0):
            t0 = time.ticks_us()
            try:
                ret = fn(*call)
            except Exception as e:  # recorded, the run continues
                exc = e
            t = time.ticks_diff(time.ticks_us(), t0)
            if us < 0 or t < us:
                us = t
            if exc is not None:
                break
        if us < 0:
            us = 0
        if exc is not None:
            out.write(struct.pack("<BI", 1, us))
            write_str(out, type(exc).__name__)
            write_str(out, str(exc))
        else:
            out.write(struct.pack("<BI", 2 if flags & 1 else 0, us))
            if ret is None:
                out.write(b"N")
            elif isinstance(ret, int) and -(1 << 63) <= ret < (1 << 63):
                out.write(b"i")
                out.write(struct.pack("<q", ret))
            else:
                out.write(b"r")
                write_str(out, repr(ret))
            out.write(struct.pack("<B", len(outs)))
            for kind, obj in outs:
                # written from the buffer itself: a bytes() copy of a large output
                # does not fit beside it in a 256 KB heap
                out.write(struct.pack("<BI", ord(kind), len(obj) * (1 if kind in BYTE_KINDS else 4)))
                out.write(obj)
        args = kinds = call = outs = exc = ret = None
    out.close()
    f.close()


main()
