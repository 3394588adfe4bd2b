# MicroPython-side runner of the .mtm mutation set (tests/format/test_mtm_loader.py on the
# host, tests/support/check_mcu.py on the QEMU boards): validates every file of a corpus
# (b"MTMC" u32 count, then u32 len + bytes each) with _microtrain.mtm_validate in this one
# process and exercises the accessors. Reads one file at a time, so a corpus of any size
# fits a 200 KB heap. Prints one line per file: "1" accepted, "0 <message>" rejected
# (ValueError), "E <type> <message>" for any other exception; then "MTM-RUNNER-DONE <n>".
# Usage: micropython mtm_runner.py CORPUS
import gc
import struct
import sys
from array import array

import _microtrain as mt


def check(buf, info, ten, lay):
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
    return line.replace("\n", " ")


def main(path):
    info, ten, lay = array("i", [0] * 15), array("i", [0] * 14), array("i", [0] * 23)
    with open(path, "rb") as f:
        assert f.read(4) == b"MTMC"
        (count,) = struct.unpack("<I", f.read(4))
        for _ in range(count):
            (n,) = struct.unpack("<I", f.read(4))
            buf = f.read(n)
            print(check(buf, info, ten, lay))
            buf = None
            gc.collect()
    print("MTM-RUNNER-DONE", count)


main(sys.argv[1])
