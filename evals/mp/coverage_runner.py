# Coverage runner, executed by the real `micropython` (see evals.accuracy.coverage):
#
#   micropython coverage_runner.py CONFIG.json
#
# CONFIG keys: model (.mtm); eval_in (N int8 samples back to back, NHWC) and
# eval_out (the N int8 outputs are written there, for the bit-exact check);
# tune_in (M int8 samples), tune_t and test_t (targets of the fine-tuning and
# eval samples: "u8" files of class labels, or "f32" files of real targets
# (numel of the output each) for loss "mse"); loss, layers, mode, lr,
# momentum, batch, epochs, seed. Fine-tunes on the tune samples as a board
# would (Trainer.fit) and prints one line "RESULT {json}" with the loss on
# the tune samples (and, for a regression, the eval samples) before and after.
import gc
import json
import sys
import time
from array import array

import microtrain as mt


def read(path):
    with open(path, "rb") as f:
        return f.read()


def samples(xs, n_in, tpath, kind, n_out):
    raw = memoryview(read(xs))
    n = len(raw) // n_in
    if kind == "u8":
        t = read(tpath)
        return [(raw[i * n_in:(i + 1) * n_in], t[i]) for i in range(n)]
    t = memoryview(array("f", read(tpath)))
    return [(raw[i * n_in:(i + 1) * n_in], t[i * n_out:(i + 1) * n_out]) for i in range(n)]


def main(path):
    with open(path) as f:
        cfg = json.load(f)
    m = mt.load(cfg["model"])
    n_in, n_out = m.input.numel, m.output.numel
    kind = "u8" if cfg["loss"] == "xent" else "f32"
    test = samples(cfg["eval_in"], n_in, cfg["test_t"], kind, n_out)
    t0 = time.ticks_ms()
    with open(cfg["eval_out"], "wb") as fo:
        for x, _ in test:
            fo.write(m.forward(x))
    fwd_ms = time.ticks_diff(time.ticks_ms(), t0) / max(1, len(test))
    tune = samples(cfg["tune_in"], n_in, cfg["tune_t"], kind, n_out)
    opt = mt.SGD(lr=cfg["lr"], momentum=cfg.get("momentum", 0.0))
    sp = cfg.get("sparse")
    tr = mt.Trainer(m, train=cfg["layers"], mode=cfg["mode"], optimizer=opt, batch=cfg["batch"],
                    schedule=cfg.get("schedule"), seed=cfg.get("seed", 1), loss=cfg["loss"],
                    adapt_ranges=cfg.get("adapt_ranges", False),
                    sparse=mt.DynamicSparse(sp, 1.0) if sp else None)
    gc.collect()
    res = {"native": mt.NATIVE, "fwd_ms": fwd_ms, "layers": [ly.name for ly in tr.layers]}
    # the eval samples' loss only for regressions (classifiers are checked on their outputs above)
    regress = kind != "u8"
    b = tr.evaluate(tune, confusion=False)
    res.update(tune_before=b["loss"], tune_acc_before=b["acc"])
    if regress:
        res["test_before"] = tr.evaluate(test, confusion=False)["loss"]
    t0 = time.ticks_ms()
    hist = tr.fit(tune, epochs=cfg["epochs"], verbose=False, cache="auto" if kind == "u8" else None)
    res["train_s"] = time.ticks_diff(time.ticks_ms(), t0) / 1000.0
    a = tr.evaluate(tune, confusion=False)
    res.update(tune_after=a["loss"], tune_acc_after=a["acc"], epoch_loss=[h["loss"] for h in hist])
    if regress:
        res["test_after"] = tr.evaluate(test, confusion=False)["loss"]
    print("RESULT " + json.dumps(res))


main(sys.argv[1])
