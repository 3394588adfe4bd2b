# MicroPython: test-time adaptation without labels (microtrain.tta) on a shifted stream, as on
# a board (evals/accuracy/adapt/less.py runs it in the host micropython).
#
#   micropython tta_device.py config.json
#
# config keys: model, stream (.mtd: the shifted samples in stream order; the labels are read
# for scoring only, never given to TTA), test (.mtd: held-out samples of the same shift),
# layers, lr, eps, queries, batch, window, floor, seed, passes (times the stream is played).
# Prints one final line "RESULT {json}": before / after (held-out accuracy), online (accuracy of
# the predictions made while adapting), stopped (the guard fired), steps, params.
import json
import sys

import microtrain as mt
from microtrain.tta import TTA


def acc(model, data):
    ok = 0
    for i in range(len(data)):
        x, y = data[i]
        ok += model.predict(x) == y
    return ok / len(data)


def main(path):
    with open(path) as f:
        cfg = json.load(f)
    model = mt.load(cfg["model"])
    stream = mt.FileDataset(cfg["stream"])
    test = mt.FileDataset(cfg["test"])
    before = acc(model, test)
    t = TTA(model, layers=cfg["layers"], lr=cfg["lr"], eps=cfg["eps"], queries=cfg["queries"],
            batch=cfg["batch"], window=cfg["window"], floor=cfg["floor"], seed=cfg["seed"])
    ok = n = 0
    for _ in range(cfg.get("passes", 1)):
        for i in range(len(stream)):
            x, y = stream[i]
            ok += t.add(x) == y
            n += 1
        print("pass: online %.4f %r" % (ok / n, t))  # noqa: UP031 (MicroPython)
    print("RESULT " + json.dumps({"before": before, "after": acc(model, test), "online": ok / n,
                                  "stopped": t.stopped, "steps": t.steps, "params": t.n_params}))


main(sys.argv[1])
