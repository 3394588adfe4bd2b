# MicroPython: the device side of `make adapt-eval` (evals/accuracy/adapt_eval.py), as on a board.
#
#   micropython adapt_device.py config.json
#
# config "kind":
#   "ncm":    model, layer, metric, dtype, shots (.mtd: the k-shot samples, label = class),
#             test (.mtd). The prototype head from the shots, its predictions on test.
#   "replay": model, layers, mode, lr, momentum, batch, epochs, seed, phases (list of .mtd:
#             learnt one after the other), test (.mtd: the first phase's held-out
#             samples), replay (null or Replay keyword arguments).
#   "zo":     model, train, bp, perturb, lr, eps, seed, batch, epochs, test, optimizer lr /
#             momentum for bp or perturb "outputs", mode; zeroth-order (or hybrid) training on
#             train (.mtd).
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
    outs = cfg.get("perturb") == "outputs"
    opt = mt.SGD(lr=cfg["bp_lr"], momentum=cfg.get("momentum", 0.0)) if cfg.get("bp") or outs else None
    train = mt.FileDataset(cfg["train_mtd"])
    test = mt.FileDataset(cfg["test"])
    n = len(train)
    model.forward(bytes(model.input.numel))  # the inference buffers exist before the heap is measured
    import microtrain.zo  # noqa: F401  (its code is not training state)

    gc.collect()
    h0 = gc.mem_alloc()
    z = mt.ZO(model, train=cfg["train"], bp=cfg.get("bp"), lr=None if outs else cfg["lr"], eps=cfg["eps"],
              seed=cfg["seed"], optimizer=opt, mode=cfg.get("mode", "int8"), queries=cfg.get("queries", 1),
              perturb=cfg.get("perturb", "weights"))
    gc.collect()
    state_bytes = gc.mem_alloc() - h0
    acc0 = z.evaluate(test)
    t0 = time.ticks_ms()
    losses = []
    peak = 0
    b = cfg["batch"]
    for ep in range(cfg["epochs"]):
        # per-epoch schedules (host-chosen): lr and eps of this epoch
        if cfg.get("lr_sched"):
            z.lr = cfg["lr_sched"][ep]
        if cfg.get("eps_sched"):
            z.eps = cfg["eps_sched"][ep]
        tot = 0.0
        for s in range(0, n, b):
            batch = []
            for i in range(s, min(n, s + b)):
                x, y = train[i]
                batch.append((bytes(x), y))  # the dataset reuses x
            lp, lm = z.step(batch)
            tot += lp + lm
            if not peak:  # the heap training adds, after one batch (model buffers excluded)
                gc.collect()
                peak = gc.mem_alloc() - h0
        losses.append(tot / (2 * ((n + b - 1) // b)))
        print("epoch %d: loss %.4f lr %g eps %d" % (ep + 1, losses[-1], z.lr, z.eps))
    t_train = time.ticks_diff(time.ticks_ms(), t0)
    return {"acc_before": acc0, "acc": z.evaluate(test), "losses": losses, "steps": z.steps,
            "state_bytes": state_bytes, "train_heap": peak, "train_s": t_train / 1000.0}


def bp(cfg, model):
    """Backprop of the same layers on the device (Trainer), the same samples in the same
    order and batches: accuracy and the heap training adds after one batch."""
    gc.collect()
    h0 = gc.mem_alloc()
    t = mt.Trainer(model, train=cfg["train"], mode=cfg.get("mode", "int8"),
                   optimizer=mt.SGD(lr=cfg["bp_lr"], momentum=cfg.get("momentum", 0.0)), batch=cfg["batch"])
    train = mt.FileDataset(cfg["train_mtd"])
    test = mt.FileDataset(cfg["test"])
    n = len(train)
    peak = 0
    t0 = time.ticks_ms()
    for _ in range(cfg["epochs"]):
        for i in range(n):
            x, y = train[i]
            t.step(x, y)
            if i == cfg["batch"] - 1 and not peak:
                gc.collect()
                peak = gc.mem_alloc() - h0
        t.flush()
    t_train = time.ticks_diff(time.ticks_ms(), t0)
    ok = 0
    for i in range(len(test)):
        x, y = test[i]
        ok += model.predict(x) == y
    return {"acc": ok / len(test), "train_heap": peak, "train_s": t_train / 1000.0}


def main(path):
    with open(path) as f:
        cfg = json.load(f)
    model = mt.load(cfg["model"])
    res = {"ncm": ncm, "replay": replay, "zo": zo, "bp": bp}[cfg["kind"]](cfg, model)
    res["native"] = mt.NATIVE
    print("RESULT " + json.dumps(res))


main(sys.argv[1])
