# Markers for the instruction counter (evals/benchmarks/qemu_plugin/mtcount.c).
#
# A marker is one execution of micropython.heap_lock(): the host starts QEMU
# with mark=<address of mp_micropython_heap_lock in the firmware ELF>, and the
# plugin writes the cumulative instruction counts each time it runs. Outside
# QEMU (host MicroPython) markers cost a few calls and count nothing.
#
# Marker codes are stored in a preallocated array (no allocation, no print in a
# measured region) and printed at the end as "@marks name name ...", in order.
import array

import micropython

_lock = micropython.heap_lock
_unlock = micropython.heap_unlock
_codes = array.array("H", bytes(2 * 256))  # flushed after every sample
_n = 0
NAMES = []


def code(name):
    """The code of a marker name (registered once, outside measured regions)."""
    if name not in NAMES:
        NAMES.append(name)
    return NAMES.index(name)


def mark(c):
    global _n
    _lock()
    _unlock()
    _codes[_n] = c  # IndexError if a run forgets to flush: never a silent loss
    _n += 1


def flush():
    """Print the marker names seen so far, in execution order, and forget them."""
    global _n
    for i in range(0, _n, 16):
        print("@marks", " ".join(NAMES[c] for c in _codes[i:min(i + 16, _n)]))
    _n = 0


def result(key, value):
    """One result line for the host (outside measured regions)."""
    print("@res", key, value)
