# Parity runner, executed by the real `micropython` (see evals.accuracy.parity):
#
#   micropython parity_runner.py MODEL.mtm INPUT.bin OUTPUT.bin [EVERY] [DUMP]
#
# INPUT.bin holds N int8 samples back to back (each the model input's numel
# bytes, NHWC). Each is read with readinto into one preallocated buffer, run
# through microtrain.load(MODEL).forward, and the int8 output is appended to
# OUTPUT.bin (N * output numel bytes). A line "progress i/N" is printed every
# EVERY samples; the last line is "done n=N ms=T native=0|1 heap_free=B".
#
# DUMP = k (>= 0): diagnostics instead; run sample k only, keeping every
# activation, and write each layer's output in layer order to OUTPUT.bin.
import gc
import os
import sys
import time

import microtrain as mt


def main():
    a = sys.argv[1:]
    if len(a) < 3:
        print("usage: parity_runner.py MODEL INPUT OUTPUT [EVERY] [DUMP]")
        sys.exit(2)
    every = int(a[3]) if len(a) > 3 else 500
    dump = int(a[4]) if len(a) > 4 else -1
    m = mt.load(a[0])
    n_in = m.input.numel
    n_out = m.output.numel
    size = os.stat(a[1])[6]
    if size % n_in:
        raise ValueError(f"input file: {size} bytes is not a multiple of the input size {n_in}")
    n = size // n_in
    buf = bytearray(n_in)
    native = 1 if mt.NATIVE else 0
    print(f"start n={n} in={n_in} out={n_out} native={native}")
    if dump >= 0:
        if dump >= n:
            raise ValueError(f"dump index {dump} out of range (n={n})")
        with open(a[1], "rb") as fi:
            fi.seek(dump * n_in)
            if fi.readinto(buf) != n_in:
                raise ValueError("short read")
        m.forward(buf, keep_from=0)
        with open(a[2], "wb") as fo:
            for ly in m.layers:
                fo.write(m.activation(ly.output, keep_from=0))
        print(f"dump sample={dump} layers={len(m.layers)}")
        return
    gc.collect()
    t0 = time.ticks_ms()
    with open(a[1], "rb") as fi, open(a[2], "wb") as fo:
        for i in range(n):
            if fi.readinto(buf) != n_in:
                raise ValueError(f"short read at sample {i}")
            fo.write(m.forward(buf))
            if (i + 1) % every == 0 and i + 1 < n:
                print(f"progress {i + 1}/{n}")
    ms = time.ticks_diff(time.ticks_ms(), t0)
    gc.collect()
    print(f"progress {n}/{n}")
    print(f"done n={n} ms={ms} native={native} heap_free={gc.mem_free()}")


main()
