# What the five lessons share: the lab's model and data, exact losses, text pictures for a
# REPL and the line a passed check prints. The same files run in the browser lab
# (ports/webassembly/), on the unix MicroPython and on a board.
import struct

import microtrain as mt

MODEL = "digits.mtm"
TRAIN = "digits_train.mtd"
TEST = "digits_test.mtd"
SHADES = " .:-=+*#%@"


def load():
    return mt.load(MODEL)


def data(name=TRAIN):
    return mt.FileDataset(name)


def exact(v):
    """A float's 8 bytes in hex: the page and the host compare losses bit for bit."""
    return "".join("%02x" % b for b in struct.pack("<d", v))


def signed(buf):
    """int8 values of a buffer (a file view reads as unsigned bytes)."""
    return [v - 256 if v > 127 else v for v in bytes(buf)]


def picture(values, w, lo=None, hi=None, title=""):
    """A grid of numbers as characters, light to dark: a REPL has no canvas."""
    lo = min(values) if lo is None else lo
    hi = max(values) if hi is None else hi
    span = (hi - lo) or 1
    if title:
        print(title)
    for r in range(len(values) // w):
        row = values[r * w:(r + 1) * w]
        print("  |" + "".join(SHADES[min(9, int(9.99 * (v - lo) / span))] for v in row) + "|")


def verdict(n, ok, why):
    print("check lesson %d: %s (%s)" % (n, "passed" if ok else "not yet", why))
    return ok


def heap_used():
    """Live heap bytes, or None where gc.collect() cannot free what this call made (the
    WebAssembly port frees only between calls from the page): then no heap is measured."""
    import gc

    f = getattr(gc, "mem_alloc", None)
    if f is None:
        return None
    gc.collect()
    a = f()
    b = bytearray(8192)
    b = None  # noqa: F841 (dropped: a working collect frees it)
    gc.collect()
    return f() if f() < a + 4096 else None


def page_json(name):
    """A lesson's last result as JSON, for the browser lab's pictures."""
    import json
    import sys

    return json.dumps(sys.modules[name].last)
