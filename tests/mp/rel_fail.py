# MicroPython side of the failed-step campaign (tests/support/reliability/failures.py).
#   rel_fail.py MODEL DATA WORKDIR OPT MODE HOW
# OPT: sgd (SGD momentum), sgd0 (plain SGD: by default each layer steps after backward) or
# adam; MODE: the Trainer's mode; HOW: hook (the sparse policy, a user's callable, raises
# KeyboardInterrupt / MemoryError / ValueError, or returns a mask of the wrong length, at one
# trained layer; the update mode is then the
# gradient sums), buffer (a trained layer's gradient buffer or its grad-input ratios made
# invalid: the default update mode, into the momentum with its copy for SGD momentum on a build
# with an FPU) or buffer-sums (the same with sums=True). Batch 1, every trained layer.
# Each failure must raise, and leave weights, optimiser state, counters, the policy's state and
# the gradient sums exactly as they were; the same sample then steps as if nothing had failed:
# the run with every failure ends in the bytes of the run without.
# Prints "FAIL <case> <ok|CHANGED|NORAISE> <exception>" per case, "SAME <bool>" and "FAIL-DONE n".
import struct
import sys

import microtrain as mt
from microtrain import optim
from microtrain.data import FileDataset
from microtrain.sparse import DynamicSparse

MODEL, DATA, WORK, OPT, MODE, HOW = sys.argv[1:7]
RAISE = {"interrupt": KeyboardInterrupt, "memory": MemoryError, "value": ValueError, "mask": None}


class Hook(DynamicSparse):
    # a sparse policy as a user writes one: DynamicSparse, dense here (lambda 1), that raises
    # at the `at`-th trained layer backward reaches when armed (exc None: returns a mask one
    # channel short instead, which the step must refuse by name)
    def __init__(self):
        super().__init__(1.0, 1.0)
        self.at = -1
        self.exc = None

    def __call__(self, ly, e):
        self.at -= 1
        if self.at == 0:
            if self.exc is None:
                return bytes(ly.out_c - 1)
            raise self.exc("injected at layer %s" % ly.name)
        return super().__call__(ly, e)


def snapshot(m, tr):
    # every value a training step could change, as bytes
    o = tr.opt
    parts = [struct.pack("<IiiiI", m.train_steps, tr.pending, tr.steps, o.steps, o.rng)]
    bt = getattr(o, "_bt", None)
    if bt is not None:
        parts.append(bytes(bt))
    for ly in m.layers:
        for a in (ly.w, ly.b, ly.mult, ly.shift, ly.w_scale, ly.gw, ly.gb, ly.master_w, ly.master_b,
                  ly.touched):
            parts.append(b"-" if a is None else bytes(a))
        for a in o._st.get(ly.index) or ():
            parts.append(bytes(a))
    p = tr.sparse
    if p is not None:
        parts.append(struct.pack("<ffii", p.max_loss, p.rate, p.kept, p.seen))
    parts.append(struct.pack("<iiI", tr.correct, tr.seen, tr.epoch))
    return b"".join(parts)


def trainer(m, hook):
    opt = (optim.SGD(lr=0.02, momentum=0.9) if OPT == "sgd" else optim.SGD(lr=0.02) if OPT == "sgd0"
           else mt.Adam(lr=0.002))
    sums = True if HOW == "buffer-sums" else None
    return mt.Trainer(m, train="all", mode=MODE, optimizer=opt, sparse=hook, batch=1, seed=2, sums=sums)


def run(ds, inject):
    m = mt.load(MODEL)
    hook = Hook() if HOW.startswith("hook") else None
    tr = trainer(m, hook)
    names = [ly.name for ly in tr.layers]
    cases = []
    if inject:
        if hook is not None:
            for j in range(len(names)):  # backward reaches the last trained layer first
                for kind in ("interrupt", "memory", "value", "mask"):
                    cases.append((names[len(names) - 1 - j], j + 1, kind))
        else:
            sums = tr.layers[0].gw is not None  # (stepping during backward keeps none)
            for j in range(len(names)):
                for kind in ("short", "bytes", "wr"):
                    if (kind != "wr" or j) and (kind == "wr" or sums):  # (the lowest trained layer's grad
                        cases.append((names[j], j, kind))  # input never runs)
    n = len(ds)
    k = 0
    results = []
    for case in cases:
        x, y = ds[k % n]
        tr.step(x, y)  # a good step first
        k += 1
        x, y = ds[k % n]
        before = snapshot(m, tr)
        undo = None
        if hook is not None:
            hook.at, hook.exc = case[1], RAISE[case[2]]
        else:
            ly = tr.layers[case[1]]
            if case[2] == "wr":  # read by the layer's grad input, after its gradient
                good = ly.wr
                ly.wr = good[:len(good) - 1]

                def undo(ly=ly, good=good):
                    ly.wr = good
            else:
                good = ly.gw
                ly.gw = good[:len(good) - 1] if case[2] == "short" else bytearray(4 * len(good))

                def undo(ly=ly, good=good):
                    ly.gw = good
        status, msg = "NORAISE", ""
        try:
            tr.step(x, y)
        except Exception as e:  # noqa: BLE001 - KeyboardInterrupt is not an Exception
            status, msg = "ok", type(e).__name__ + ": " + str(e)
        except KeyboardInterrupt as e:
            status, msg = "ok", "KeyboardInterrupt: " + str(e)
        if undo is not None:
            undo()
        if hook is not None:
            hook.at = -1
        if snapshot(m, tr) != before:
            status = "CHANGED"
        results.append("FAIL %s-%s-%s-%s-%s %s %s" % (OPT, MODE, HOW, case[0], case[2], status, msg))
        # (the next good step is the same sample, without the fault: the clean run steps it once)
    return m, tr, results, k


def main():
    ds = FileDataset(DATA)
    data = [(bytes(ds[i][0]), ds[i][1]) for i in range(len(ds))]
    m, tr, results, k = run(data, True)
    for r in results:
        print(r)
    # the reference: the same good steps, no faults
    m2 = mt.load(MODEL)
    tr2 = trainer(m2, Hook() if HOW.startswith("hook") else None)
    for i in range(k):
        tr2.step(*data[i % len(data)])
    a, b = WORK + "/failed.mtm", WORK + "/clean.mtm"
    tr.save(a)
    tr2.save(b)
    print("SAME", open(a, "rb").read() == open(b, "rb").read())
    print("UPDATE", type(m.update).__name__)
    print("FAIL-DONE", len(results))


main()
