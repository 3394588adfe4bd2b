# Every file the validator accepts runs inference and a training step (validator and runtime agree).
#   rel_accepted.py CORPUS     (b"MTMC" u32 count, then u32 len + bytes per file)
# For each accepted file: load, forward on a zero input, then (if it has CONV2D / LINEAR
# layers) Trainer(train="all") and one step, in int8 and float32 mode alternately (int8 with a
# GRU / LSTM layer).
# Prints "FAIL <index> <exception>" for anything but success or MemoryError (a resource
# limit, not a rule), then "ACCEPTED-DONE accepted ran memory".
import gc
import struct
import sys

import microtrain as mt
from microtrain import kern


def main():
    f = open(sys.argv[1], "rb")
    assert f.read(4) == b"MTMC"
    n = struct.unpack("<I", f.read(4))[0]
    acc = ran = mem = 0
    for i in range(n):
        b = f.read(struct.unpack("<I", f.read(4))[0])
        try:
            kern.K.mtm_validate(b)
        except ValueError:
            continue
        acc += 1
        m = tr = None
        gc.collect()
        try:
            m = mt.load(b)
            x = bytes(m.input.numel)
            m.forward(x)
            if any(ly.w is not None for ly in m.layers):
                # (a GRU / LSTM layer trains in int8 or mixed mode only: docs/training.md)
                rnn = any(ly.op >= 16 for ly in m.layers)
                tr = mt.Trainer(m, train="all", mode="int8" if rnn else ("int8", "float32")[i % 2])
                tr.step(x, 0)
                tr.flush()
            ran += 1
        except MemoryError:
            mem += 1
        except Exception as e:  # noqa: BLE001 - every other outcome is a finding
            print("FAIL", i, type(e).__name__, e)
    print("ACCEPTED-DONE", acc, ran, mem)


main()
