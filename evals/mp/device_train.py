# MicroPython: train a .mtm model on .mtd sample files, as on a board.
#
#   micropython device_train.py config.json      (or: microtrain run ... )
#
# config.json keys: model, train (.mtd), test (.mtd), layers ("last:N" or
# names), mode (int8 / mixed / float32), optimizer ("sgd" / "adam"), lr,
# momentum, weight_decay, batch, epochs, schedule, sparse (null or
# {"kind": "dynamic", "lambda_min": .., "lambda_max": ..} or
# {"kind": "static", "ratio": ..}), seed, log (JSON-lines path or null),
# save (checkpoint path or null), eval_before (bool), health / adapt_ranges
# (bool, Trainer options), state ("f32" / "bf16": the optimiser state's type).
# Prints progress and one final line "RESULT {json}".
import gc
import json
import sys
import time

import microtrain as mt


def main(path):
    with open(path) as f:
        cfg = json.load(f)
    gc.collect()
    t_load = time.ticks_ms()
    model = mt.load(cfg["model"])
    train = mt.FileDataset(cfg["train"])
    test = mt.FileDataset(cfg["test"])
    if cfg.get("optimizer", "sgd") == "adam":
        opt = mt.Adam(lr=cfg["lr"], weight_decay=cfg.get("weight_decay", 0.0), state=cfg.get("state", "f32"))
    else:
        opt = mt.SGD(lr=cfg["lr"], momentum=cfg.get("momentum", 0.0),
                     weight_decay=cfg.get("weight_decay", 0.0), standardize=cfg.get("standardize", False),
                     state=cfg.get("state", "f32"))
    sp = cfg.get("sparse")
    policy = None
    if sp:
        if sp["kind"] == "dynamic":
            policy = mt.DynamicSparse(sp["lambda_min"], sp.get("lambda_max", 1.0), sp.get("form", "text"))
        else:
            policy = mt.StaticSparse(sp["ratio"])
    tr = mt.Trainer(model, train=cfg.get("layers", "last:1"), mode=cfg.get("mode", "int8"), optimizer=opt,
                    sparse=policy, batch=cfg.get("batch", 1), schedule=cfg.get("schedule"),
                    log=cfg.get("log"), seed=cfg.get("seed", 1), health=cfg.get("health", False),
                    adapt_ranges=cfg.get("adapt_ranges", False), sums=cfg.get("sums"))
    print("device: %s, %d train / %d test samples, native=%s, train %s, mode %s, %r, batch %d" % (
        cfg["model"], len(train), len(test), mt.NATIVE, [ly.name for ly in tr.layers], tr.mode, opt,
        tr.batch))
    res = {"native": mt.NATIVE}
    if cfg.get("eval_before", False):
        res["acc_before"] = tr.evaluate(test)["acc"]
        print("device: accuracy before training %.4f" % res["acc_before"])
    gc.collect()
    t0 = time.ticks_ms()
    tr.bwd_us = 0
    steps0 = tr.steps
    hist = tr.fit(train, epochs=cfg.get("epochs", 1), verbose=cfg.get("verbose", True))
    t_train = time.ticks_diff(time.ticks_ms(), t0)
    ev = tr.evaluate(test)
    n_steps = tr.steps - steps0
    res.update({"acc": ev["acc"], "loss": ev["loss"], "n_test": ev["n"], "train_acc": hist[-1]["acc"],
                "train_loss": hist[-1]["loss"], "train_s": t_train / 1000.0,
                "bwd_us_per_sample": tr.bwd_us / max(1, n_steps), "samples": n_steps,
                "load_ms": time.ticks_diff(t0, t_load), "heap_peak": tr.heap_live,
                "layers": [ly.name for ly in tr.layers]})
    if policy is not None:
        res["kept_frac"] = policy.kept / max(1, policy.seen)
    if cfg.get("save"):
        tr.save(cfg["save"])
        res["saved"] = cfg["save"]
    print("RESULT " + json.dumps(res))


main(sys.argv[1])
