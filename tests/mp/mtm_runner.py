# MicroPython-side runner of tests/format/test_mtm_loader.py: validates every file of
# a corpus (b"MTMC" u32 count, then u32 len + bytes each) with
# _microtrain.mtm_validate in this one process, and exercises the accessors.
# Prints one line per file: "1" accepted, "0 <message>" rejected (ValueError),
# "E <type> <message>" for any other exception; then "MTM-RUNNER-DONE <n>".
# Usage: micropython mtm_runner.py CORPUS
import struct
import sys
from array import array

import _microtrain as mt


def main(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"MTMC"
    (count,) = struct.unpack_from("<I", data, 4)
    mv = memoryview(data)
    pos = 8
    info, ten, lay = array("i", [0] * 15), array("i", [0] * 14), array("i", [0] * 21)
    out = []
    for _ in range(count):
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        buf = mv[pos:pos + n]
        pos += n
        try:
            mt.mtm_validate(buf)
            line = "1"
        except ValueError as e:
            line = "0 " + str(e)
        except Exception as e:  # noqa: BLE001 - reported, the test fails on it
            line = "E " + type(e).__name__ + " " + str(e)
        # accessors never crash: on rejected files they may raise ValueError
        try:
            mt.mtm_info(buf, info)
            for i in range(info[4]):
                mt.mtm_tensor(buf, i, ten)
            for i in range(info[5]):
                mt.mtm_layer(buf, i, lay)
        except ValueError:
            if line == "1":
                line = "E accessor raised on a valid file"
        out.append(line.replace("\n", " "))
    sys.stdout.write("\n".join(out))
    sys.stdout.write("\nMTM-RUNNER-DONE " + str(count) + "\n")


main(sys.argv[1])
