# MicroPython side of the training campaigns of tests/support/reliability/:
#   rel_train.py resume MODEL DATA CKPT EPOCHS [OPT]  train epoch by epoch, trainer.save(CKPT)
#       after each; starts from CKPT when it exists (a killed run resumes), printing SAVING / SAVED
#       around every save and DONE at the end; OPT "sgd" (momentum, the default) or "adam"
#   rel_train.py heap MODEL DATA CKPT            one epoch and a save in whatever heap -X gave:
#       prints OK, or MEMORY PHASE SAME (a MemoryError in "train" or "save", with the model
#       still usable for inference; SAME: True when it infers as before training, else "trained")
#   rel_train.py scratch MODEL TRAIN TEST EPOCHS LR ADAPT  from-scratch training
#       (tests/support/reliability/scratch.py), ADAPT 1: Trainer(adapt_ranges=True), default: the
#       Trainer's health and range defaults:
#       prints HEALTH <the last epoch's health record>, ACC <held-out accuracy> and
#       SCALE <largest weight scale of the first layer>
#   rel_train.py soak MODEL DATA CKPT STEPS ROUND  STEPS training steps with an evaluation, a
#       save and a reload every ROUND steps; prints LIVE <bytes> after each round (the live heap
#       after a collection)
import gc
import json
import os
import sys

import microtrain as mt
from microtrain import optim
from microtrain.data import FileDataset

BATCH = 4


def exists(p):
    try:
        os.stat(p)
        return True
    except OSError:
        return False


def trainer(m, train="all", mode="float32", opt="sgd"):
    # seed=None: a checkpoint's shuffle sequence continues (trainer record)
    o = mt.Adam(lr=0.002) if opt == "adam" else mt.SGD(lr=0.02, momentum=0.9)
    return mt.Trainer(m, train=train, mode=mode, optimizer=o, batch=BATCH, log_every=0)


def resume(model, data, ck, epochs, opt="sgd"):
    ds = FileDataset(data)
    m = mt.load(ck if exists(ck) else model)
    tr = trainer(m, opt=opt)
    per_epoch = (len(ds) + BATCH - 1) // BATCH
    for ep in range(m.train_steps // per_epoch, epochs):
        tr.fit(ds, 1, verbose=False)
        print("SAVING", ep)
        tr.save(ck)
        print("SAVED", ep)
    print("DONE")


def heap(model, data, ck):
    ds = FileDataset(data)
    m = mt.load(model)
    x = bytes(ds[0][0])
    ref = bytes(m.forward(x))
    phase = "train"
    try:
        tr = trainer(m)
        tr.fit(ds, 1, verbose=False)
        phase = "save"  # the epoch is done: the model is trained, the file not yet written
        tr.save(ck)
    except MemoryError:
        tr = None
        gc.collect()
        # the model still runs after the failure: unchanged if it came before the first
        # update (the Trainer's set-up), trained if it came in save()
        print("MEMORY", phase, bytes(m.forward(x)) == ref or "trained")
        return
    print("OK")


def soak(model, data, ck, steps, per_round):
    ds = FileDataset(data)
    m = mt.load(model)
    tr = trainer(m, "last:2", "mixed")  # lighter than "all": more steps per second
    n = len(ds)
    done = 0
    while done < steps:
        k = min(steps - done, per_round)
        for i in range(k):
            x, y = ds[(done + i) % n]
            tr.step(x, y)
        done += k
        tr.evaluate(ds, confusion=False)
        tr.save(ck)
        mt.load(ck)  # the checkpoint loads (and is dropped again)
        gc.collect()
        print("LIVE", gc.mem_alloc(), done)
    print("DONE", done)


def scratch(model, train, test, epochs, lr, adapt):
    m = mt.load(model)
    # adapt None: the Trainer's defaults (health=None: the logits' saturation only)
    kw = {} if adapt is None else {"health": True, "adapt_ranges": adapt}
    tr = mt.Trainer(m, train="all", mode="float32", optimizer=optim.SGD(lr=lr, momentum=0.9), batch=1,
                    log_every=0, seed=1, **kw)
    hist = tr.fit(FileDataset(train), epochs, verbose=False)
    print("HEALTH", json.dumps(hist[-1]["health"]))
    print("FIRST", json.dumps(hist[0]["health"]))
    print("ACC", tr.evaluate(FileDataset(test), confusion=False)["acc"])
    print("SCALE", max(tr.layers[0].w_scale))


def main():
    cmd = sys.argv[1]
    if cmd == "scratch":
        a = sys.argv
        scratch(a[2], a[3], a[4], int(a[5]), float(a[6]), None if a[7] == "default" else a[7] == "1")
        return
    if cmd == "resume":
        resume(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), *sys.argv[6:7])
    elif cmd == "heap":
        heap(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        soak(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))


main()
