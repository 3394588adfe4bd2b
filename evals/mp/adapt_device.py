# MicroPython: the device side of `make adapt-eval` (evals/adapt_eval.py), as on a board.
#
#   micropython adapt_device.py config.json
#
# config "kind":
#   "ncm":    model, layer, metric, dtype, shots (.mtd: the k-shot samples, label = class),
#             test (.mtd). The prototype head from the shots, its predictions on test.
#   "replay": model, layers, mode, lr, momentum, batch, epochs, seed, phases (list of .mtd:
#             learnt one after the other), test (.mtd: the first phase's held-out
#             samples), replay (null or Replay keyword arguments).
#   "zo":     model, train, bp, lr, eps, seed, batch, epochs, test, optimizer lr / momentum
#             for bp, mode; zeroth-order (or hybrid) training on train (.mtd).
# Prints progress and one final line "RESULT {json}".
import gc
import json
import sys
import time

import microtrain as mt


def ncm(cfg, model):
    shots = mt.FileDataset(cfg["shots"])
    by = {}
    for i in range(len(shots)):
        x, y = shots[i]
        by.setdefault(y, []).append(bytes(x))  # FileDataset reuses x
    head = mt.PrototypeHead(model, layer=cfg["layer"], metric=cfg["metric"], dtype=cfg["dtype"])
    t0 = time.ticks_ms()
    for y in sorted(by):
        head.add_class(str(y), by[y])
    t_add = time.ticks_diff(time.ticks_ms(), t0)
    head_bytes = head.nbytes
    test = mt.FileDataset(cfg["test"])
    preds = []
    ok = 0
    t0 = time.ticks_ms()
    for i in range(len(test)):
        x, y = test[i]
        p = int(head.predict(x))
        preds.append(p)
        ok += p == y
    t_pred = time.ticks_diff(time.ticks_ms(), t0)
    return {"acc": ok / len(test), "preds": preds, "head_bytes": head_bytes, "add_ms": t_add,
            "predict_ms": t_pred / len(test)}


def replay(cfg, model):
    rc = cfg.get("replay")
    rp = mt.Replay(**rc) if rc else None
    test = mt.FileDataset(cfg["test"])
    accs = []
    for k, path in enumerate(cfg["phases"]):
        opt = mt.SGD(lr=cfg["lr"], momentum=cfg.get("momentum", 0.0))
        tr = mt.Trainer(model, train=cfg["layers"], mode=cfg["mode"], optimizer=opt, batch=cfg["batch"],
                        seed=cfg["seed"] + k, schedule=cfg.get("schedule"), replay=rp)
        tr.fit(mt.FileDataset(path), epochs=cfg["epochs"], verbose=False)
        accs.append(tr.evaluate(test, confusion=False)["acc"])
        print("phase %d (%s): first-phase accuracy %.4f" % (k + 1, path, accs[-1]))
    return {"acc_after": accs, "replay_bytes": rp.nbytes if rp else 0,
            "replayed": rp.replayed if rp else 0}


def zo(cfg, model):
    opt = mt.SGD(lr=cfg["bp_lr"], momentum=cfg.get("momentum", 0.0)) if cfg.get("bp") else None
    gc.collect()
    h0 = gc.mem_alloc()
    z = mt.ZO(model, train=cfg["train"], bp=cfg.get("bp"), lr=cfg["lr"], eps=cfg["eps"], seed=cfg["seed"],
              optimizer=opt, mode=cfg.get("mode", "int8"))
    gc.collect()
    state_bytes = gc.mem_alloc() - h0
    train = mt.FileDataset(cfg["train_mtd"])
    test = mt.FileDataset(cfg["test"])
    n = len(train)
    samples = [None] * n
    for i in range(n):
        x, y = train[i]
        samples[i] = (bytes(x), y)
    acc0 = z.evaluate(test)
    t0 = time.ticks_ms()
    losses = []
    for ep in range(cfg["epochs"]):
        losses += z.fit(samples, epochs=1, batch=cfg["batch"])
        print("epoch %d: loss %.4f" % (ep + 1, losses[-1]))
    t_train = time.ticks_diff(time.ticks_ms(), t0)
    return {"acc_before": acc0, "acc": z.evaluate(test), "losses": losses, "steps": z.steps,
            "state_bytes": state_bytes, "train_s": t_train / 1000.0}


def main(path):
    with open(path) as f:
        cfg = json.load(f)
    model = mt.load(cfg["model"])
    res = {"ncm": ncm, "replay": replay, "zo": zo}[cfg["kind"]](cfg, model)
    res["native"] = mt.NATIVE
    print("RESULT " + json.dumps(res))


main(sys.argv[1])
