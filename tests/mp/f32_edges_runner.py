# MicroPython side of the float32 edge check (tests/support/check_mcu.py,
# check_f32_edges): y = y + a * float(x) through _microtrain.f32_axpy_i32 on
# operands chosen at the float32 edges, so a board's float arithmetic (an FPU,
# or the armv6m module's own software float) can be compared bit for bit.
# Usage: micropython f32_edges_runner.py IN OUT
# IN: u32 count, then per call: u32 n, u32 bits of a, n int32 x, n float32 y.
# OUT: the n float32 y of each call after the kernel, concatenated.
import struct
import sys
from array import array

import _microtrain

with open(sys.argv[1], "rb") as f, open(sys.argv[2], "wb") as out:
    (calls,) = struct.unpack("<I", f.read(4))
    for _ in range(calls):
        n, a_bits = struct.unpack("<II", f.read(8))
        a = struct.unpack("<f", struct.pack("<I", a_bits))[0]
        x = array("i", f.read(4 * n))
        y = array("f", f.read(4 * n))
        _microtrain.f32_axpy_i32(x, a, y)
        out.write(y)
print("F32-EDGES-DONE", calls)
