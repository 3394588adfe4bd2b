# The lab's script: the same on the page (MicroPython WebAssembly, pure-Python
# kernels) and on the host (`microtrain lab --host-run`, unix MicroPython).
# Every step prints one line; losses are printed exactly (the float's 8 bytes
# as hex) next to a short decimal, so the page and the host can be compared
# bit for bit.
import struct

import microtrain as mt

MODEL = "digits.mtm"
TRAIN = "digits_train.mtd"
TEST = "digits_test.mtd"
model = trainer = train = test = None
n_steps = correct = 0


def exact(v):
    return "".join("%02x" % b for b in struct.pack("<d", v))


def load():
    global model, train, test
    model = mt.load(MODEL)
    train = mt.FileDataset(TRAIN)
    test = mt.FileDataset(TEST)
    model.summary()
    print("native kernels:", mt.NATIVE, "| train samples:", len(train), "| test samples:", len(test))


def predict(n=10):
    """Predicted digits of the first n test samples, and the accuracy on them."""
    ok = 0
    got = []
    for i in range(n):
        x, y = test[i]
        p = model.predict(x)
        got.append("%d%s" % (p, "" if p == y else "(%d)" % y))
        ok += p == y
    print("predicted (true label where wrong):", " ".join(got))
    print("accuracy on %d test samples: %.3f" % (n, ok / n))
    return ok / n


def begin(lr=0.005):
    """A trainer for the last layer only (SGD with momentum, float32 master weights)."""
    global trainer, n_steps
    trainer = mt.Trainer(model, train="last:1", mode="mixed", optimizer=mt.SGD(lr=lr, momentum=0.9),
                         batch=8)
    n_steps = 0
    print("training the last layer: SGD lr=%g momentum=0.9, batch 8" % lr)


def step():
    """One training sample (in file order). Returns "step loss_hex loss running_accuracy"."""
    global n_steps
    x, y = train[n_steps % len(train)]
    loss = trainer.step(x, y)
    n_steps += 1
    return "%d %s %.6f %.4f" % (n_steps, exact(loss), loss, trainer.correct / trainer.seen)


def save(path="digits_trained.mtm"):
    """Checkpoint (weights, master copies, momentum), then its size and CRC-32."""
    trainer.save(path)
    with open(path, "rb") as f:
        data = f.read()
    try:
        from binascii import crc32
    except ImportError:  # ports without binascii: the package's own
        crc32 = mt.kern.py("crc32")
    # the file ends with its own CRC-32: a CRC over all of it is a constant
    print("saved %s: %d bytes, crc32 %08x" % (path, len(data), crc32(data[:-4]) & 0xFFFFFFFF))
    return path
