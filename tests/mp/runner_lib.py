# What the MicroPython-side training runners share (train_runner.py,
# lora_runner.py, adapt_runner.py): the optimiser from its JSON config and
# the dump record the host reads back (support/training_cases.read_dump).
import struct

import microtrain as mt


def make_opt(c):
    kw = {"lr": c["lr"], "weight_decay": c.get("weight_decay", 0.0),
          "standardize": c.get("standardize", False)}
    if "rounding" in c:
        kw["rounding"] = c["rounding"]
    if "state" in c:
        kw["state"] = c["state"]
    if c["kind"] == "sgd":
        return mt.SGD(momentum=c.get("momentum", 0.0), **kw)
    return mt.Adam(beta1=c.get("beta1", 0.9), beta2=c.get("beta2", 0.999), eps=c.get("eps", 1e-8), **kw)


def record(f, name, tc, data):
    nb = name.encode()
    f.write(struct.pack("<H", len(nb)))
    f.write(nb)
    f.write(tc.encode())
    # written from the buffer itself: a bytes() copy of a large layer can
    # fail in a 256 KB heap after training
    f.write(struct.pack("<I", len(data) * struct.calcsize(tc)))
    f.write(data)
