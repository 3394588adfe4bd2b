# MicroPython-side runner of tests/training/test_training.py: loads a model, runs
# Trainer steps on given int8 samples and dumps every trained layer's arrays.
#
# Usage: micropython train_runner.py CONFIG.json
#
# CONFIG (JSON object):
#   model:   path of the .mtm (a converted model or a device checkpoint)
#   samples: path of the samples file: n_samples rows of `numel` int8 values
#   numel:   values per sample
#   labels:  list of labels, one per sample
#   loss:    "xent" (default), "mse" or "bce": the Trainer's loss
#   targets: null, or {"path", "n", "kind": "f" | "b"}: per-sample targets of the loss
#            instead of the labels (n float32 or int8 values per sample in the file)
#   order:   list of sample indices to step through, in order
#   train, mode, batch: Trainer arguments
#   opt:     {"kind": "sgd", "lr", "momentum", "weight_decay", "standardize"[, "state"]} or
#            {"kind": "adam", "lr", "beta1", "beta2", "eps", "weight_decay", "standardize"}
#   sparse:  null, {"kind": "dynamic", "lmin", "lmax", "form"} or {"kind": "static", "ratio"}
#   replay:  null, or Replay(...) keyword arguments (capacity, policy, k, seed, path):
#            Trainer(replay=...)
#   fit:     null, or {"epochs": E, "shuffle": bool, "seed": S}: instead of stepping through
#            `order`, Trainer(seed=S).fit() over the samples listed in `order` (dump "loss" =
#            the per-epoch mean losses); optional "cache": fit's cache argument (default
#            "auto"), "verbose": fit's verbose (default false)
#   eval:    null, or {"samples": path, "labels": [...]}: trainer.evaluate() after training
#            (dump "eval" = [acc, mean loss])
#   adapt_ranges: Trainer(adapt_ranges=...) (default false)
#   log:     null or the path of the trainer's JSON-lines log
#   flush:   call trainer.flush() after the steps (default true)
#   save:    null or a path: trainer.save(path) after the steps
#   model_save: null or a path: model.save(path) after the steps (no trainer state)
#   out:     path of the dump
#
# The dump is a sequence of records: u16 name length, name (utf-8), 1 byte
# array typecode, u32 byte length, the raw array bytes (little-endian). Names:
# "loss" (array 'd' of the per-step losses), "train_steps" ('i'), and per
# trained layer i: "L<i>.<field>" for w, b, mult, shift, w_scale, gw, gb (not
# when they are the momentum: batch 1, SGD momentum), master_w, master_b,
# st0..st3 (optimiser state arrays; a bfloat16 state widened to float32).
import json
import sys
from array import array

import microtrain as mt
from runner_lib import make_opt, record


def make_sparse(c):
    if c is None:
        return None
    if c["kind"] == "dynamic":
        return mt.DynamicSparse(c["lmin"], c["lmax"], c.get("form", "text"))
    return mt.StaticSparse(c["ratio"])


def main(cfg_path):
    with open(cfg_path) as f:
        cfg = json.load(f)
    src = cfg["model"]
    if cfg.get("load") in ("bytes", "bytearray", "memoryview"):  # a model in place (flash, frozen)
        with open(src, "rb") as f:
            src = f.read()
        if cfg["load"] == "bytearray":
            src = bytearray(src)
        elif cfg["load"] == "memoryview":
            src = memoryview(src)
    m = mt.load(src)
    numel = cfg["numel"]
    with open(cfg["samples"], "rb") as f:
        data = f.read()
    fit = cfg.get("fit")
    tr = mt.Trainer(m, train=cfg["train"], mode=cfg["mode"], optimizer=make_opt(cfg["opt"]),
                    sparse=make_sparse(cfg.get("sparse")), batch=cfg["batch"], log=cfg.get("log"),
                    seed=fit.get("seed", 1) if fit else 1, loss=cfg.get("loss", "xent"),
                    replay=mt.Replay(**cfg["replay"]) if cfg.get("replay") else None,
                    adapt_ranges=cfg.get("adapt_ranges", False), sums=cfg.get("sums"),
                    recompute=cfg.get("recompute", False))
    labels = cfg["labels"]
    tg = cfg.get("targets")
    if tg:
        with open(tg["path"], "rb") as f:
            traw = f.read()
        tn = tg["n"]
        if tg["kind"] == "f":
            tarr = array("f", traw)
            labels = [tarr[i * tn:(i + 1) * tn] for i in range(len(tarr) // tn)]
        else:
            labels = [traw[i * tn:(i + 1) * tn] for i in range(len(traw) // tn)]
    mv = memoryview(data)
    losses = array("d")
    if fit:
        samples = [(mv[i * numel:(i + 1) * numel], labels[i]) for i in cfg["order"]]
        for rec in tr.fit(samples, epochs=fit["epochs"], shuffle=fit.get("shuffle", True),
                          verbose=fit.get("verbose", False), cache=fit.get("cache", "auto")):
            losses.append(rec["loss"])
    else:
        for i in cfg["order"]:
            losses.append(tr.step(mv[i * numel:(i + 1) * numel], labels[i]))
    if cfg.get("flush", True):
        tr.flush()
    if cfg.get("save"):
        tr.save(cfg["save"])
    if cfg.get("model_save"):
        m.save(cfg["model_save"])
    ev = cfg.get("eval")
    res = None
    if ev:
        with open(ev["samples"], "rb") as f:
            edata = memoryview(f.read())
        n = len(ev["labels"])
        res = tr.evaluate([(edata[i * numel:(i + 1) * numel], ev["labels"][i]) for i in range(n)],
                          confusion=False)
    with open(cfg["out"], "wb") as f:
        record(f, "loss", "d", losses)
        if res is not None:
            record(f, "eval", "d", array("d", [res["acc"], res["loss"]]))
        record(f, "train_steps", "i", array("i", [m.train_steps]))
        for ly in tr.layers:
            p = "L" + str(ly.index) + "."
            for name, tc in (("w", "b"), ("b", "i"), ("mult", "i"), ("shift", "i"), ("w_scale", "f"),
                             ("gw", "f"), ("gb", "f"), ("master_w", "f"), ("master_b", "f")):
                a = getattr(ly, name)
                # gw, gb: st0, st1 with the momentum mode; None where a layer steps in backward
                if a is not None and not (name[0] == "g" and type(m.update).__name__ == "IntoMomentum"):
                    record(f, p + name, tc, a)
            # made by Trainer for every trained layer; a bfloat16 state as the float32 it stands for
            st = tr.opt.state_tensors(ly) if tr.opt.half else tr.opt.state(ly)
            if st is not None:
                for k in range(len(st)):
                    record(f, p + "st" + str(k), "f", st[k])
    print("TRAIN-RUNNER-DONE", len(cfg["order"]))


main(sys.argv[1])
