# MicroPython side of the split-fit campaign (tests/support/reliability/resume.py).
#   rel_resume.py MODEL DATA WORKDIR EPOCHS
# For each configuration (optimiser, batch, schedule; always shuffled) a fit of EPOCHS epochs,
# then the same split at every epoch boundary: fit(a) + fit(EPOCHS - a) on one trainer, and
# with trainer.save / load / a new Trainer between, and one epoch at a time through
# checkpoints. Each must end in the uninterrupted run's checkpoint, byte for byte.
# Prints "SPLIT <name> <exact|DIFF>" per split and "SPLIT-DONE n".
import sys

import microtrain as mt
from microtrain import optim
from microtrain.data import FileDataset

MODEL, DATA, WORK, EPOCHS = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def halving(lr0, epoch, epochs):
    return lr0 * 0.5 ** epoch


CONFIGS = [
    ("sgd-b1-halving", lambda: optim.SGD(lr=0.02, momentum=0.9), 1, halving, "mixed"),
    ("sgd-b3-cosine", lambda: optim.SGD(lr=0.02, momentum=0.9), 3, "cosine", "int8"),
    ("adam-b1-step", lambda: mt.Adam(lr=0.002), 1, "step", "mixed"),
    ("adam-b4-cosine", lambda: mt.Adam(lr=0.002), 4, "cosine", "float32"),
    ("sgd0-b1-halving", lambda: optim.SGD(lr=0.02), 1, halving, "int8"),
]


def trainer(m, cfg, seed):
    _, opt, batch, sched, mode = cfg
    return mt.Trainer(m, train="last:2", mode=mode, optimizer=opt(), batch=batch, schedule=sched, seed=seed)


def final(tr, tag):
    p = "%s/%s.mtm" % (WORK, tag)
    tr.save(p)
    with open(p, "rb") as f:
        return f.read()


def run(data, cfg, parts, reload):
    m = mt.load(MODEL)
    tr = trainer(m, cfg, 7)
    for k, n in enumerate(parts):
        tr.fit(data, n, verbose=False, total=EPOCHS)
        if reload and k + 1 < len(parts):
            p = "%s/part.mtm" % WORK
            tr.save(p)
            m = mt.load(p)
            tr = trainer(m, cfg, None)  # seed None: the checkpoint's shuffle and epoch count
    return final(tr, "split")


def main():
    ds = FileDataset(DATA)
    data = [(bytes(ds[i][0]), ds[i][1]) for i in range(len(ds))]
    n = 0
    for cfg in CONFIGS:
        whole = run(data, cfg, [EPOCHS], False)
        splits = []
        for a in range(1, EPOCHS):
            splits.append(("%d+%d" % (a, EPOCHS - a), [a, EPOCHS - a], False))
            splits.append(("%d+%d-saved" % (a, EPOCHS - a), [a, EPOCHS - a], True))
        splits.append(("1x%d-saved" % EPOCHS, [1] * EPOCHS, True))
        for name, parts, reload in splits:
            same = run(data, cfg, parts, reload) == whole
            print("SPLIT %s-%s %s" % (cfg[0], name, "exact" if same else "DIFF"))
            n += 1
    print("SPLIT-DONE", n)


main()
