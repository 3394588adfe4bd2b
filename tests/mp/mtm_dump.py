# MicroPython-side dump of the .mtm entry points of _microtrain (native or the
# pure-Python fallback through pykernel_shim.py), for tests/kernels/test_pykernels.py.
# Reads a corpus (b"MTMC" u32 count, then u32 len + bytes each) and prints one
# line per file: the mtm_validate verdict ("1", "0 <message>" for ValueError,
# "E <type> <message>" otherwise), then " | " and what the accessors give:
# the int32 outputs of mtm_info / mtm_tensor / mtm_layer, or "A <message>"
# when one raises ValueError ("X <type> <message>" for any other exception).
# With a second argument "verdicts" the accessor part is left out.
# Ends with "MTM-DUMP-DONE <n>".
# Usage: micropython mtm_dump.py CORPUS [verdicts]
import struct
import sys
from array import array

import _microtrain as mt


def accessors(buf, info, ten, lay):
    parts = []
    mt.mtm_info(buf, info)
    parts.append("I " + " ".join(str(v) for v in info))
    for i in range(info[4]):
        mt.mtm_tensor(buf, i, ten)
        parts.append("T " + " ".join(str(v) for v in ten))
    for i in range(info[5]):
        mt.mtm_layer(buf, i, lay)
        parts.append("L " + " ".join(str(v) for v in lay))
    return " ; ".join(parts)


def main(path, with_accessors):
    f = open(path, "rb")
    assert f.read(4) == b"MTMC"
    (count,) = struct.unpack("<I", f.read(4))
    info, ten, lay = array("i", [0] * 15), array("i", [0] * 14), array("i", [0] * 23)
    for k in range(count):
        (n,) = struct.unpack("<I", f.read(4))
        # one file at a time (a big corpus read at once makes every GC slow);
        # every other file as a memoryview slice, as model bytes often are
        raw = f.read(n)
        buf = memoryview(b"PAD." + raw)[4:] if k & 1 else raw
        try:
            mt.mtm_validate(buf)
            line = "1"
        except ValueError as e:
            line = "0 " + str(e)
        except Exception as e:  # noqa: BLE001 - reported, the test fails on it
            line = "E " + type(e).__name__ + " " + str(e)
        acc = "-"
        try:
            if with_accessors:
                acc = accessors(buf, info, ten, lay)
        except ValueError as e:
            acc = "A " + str(e)
        except Exception as e:  # noqa: BLE001
            acc = "X " + type(e).__name__ + " " + str(e)
        sys.stdout.write((line + " | " + acc).replace("\n", " ") + "\n")
    sys.stdout.write("MTM-DUMP-DONE " + str(count) + "\n")


main(sys.argv[1], len(sys.argv) < 3 or sys.argv[2] != "verdicts")
