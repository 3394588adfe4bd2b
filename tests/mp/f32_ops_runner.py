# MicroPython side of the float32 operations check (tests/support/check_mcu.py,
# check_f32_ops): Python float arithmetic, comparisons and int() on every pair
# of the given float32 patterns, on a board with single-precision floats, so
# the firmware's own float routines (an FPU, libgcc, or on rv32 the project's
# software float under libgcc's names) can be compared with numpy float32.
# Usage: micropython f32_ops_runner.py IN OUT
# IN: u32 n, then n u32 float32 bit patterns.
# OUT: per pair (a, b), a-major: the bits of a + b, a - b, a * b, a / b (b == 0:
# 0xFFFFFFFF, Python raises), then one byte of comparison flags (bit 0 <, 1 <=,
# 2 >, 3 >=, 4 ==, 5 !=); after all pairs, per a: int(a) as int32 (0 where a is
# not finite or |a| >= 2^31: Python raises or leaves int32).
import struct
import sys

with open(sys.argv[1], "rb") as f:
    (n,) = struct.unpack("<I", f.read(4))
    vals = [struct.unpack("<f", f.read(4))[0] for _ in range(n)]
with open(sys.argv[2], "wb") as out:
    for a in vals:
        row = bytearray()
        for b in vals:
            q = struct.pack("<I", 0xFFFFFFFF) if b == 0 else struct.pack("<f", a / b)
            row += struct.pack("<fff", a + b, a - b, a * b) + q
            row.append((a < b) | (a <= b) << 1 | (a > b) << 2 | (a >= b) << 3 | (a == b) << 4 | (a != b) << 5)
        out.write(row)
    for a in vals:
        ok = a == a and -2147483648.0 <= a < 2147483648.0
        out.write(struct.pack("<i", int(a) if ok else 0))
print("F32-OPS-DONE", n)
