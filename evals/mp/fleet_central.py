# MicroPython: the centralised reference of make fleet-eval, the trained part trained on the
# boards' pooled samples with the fleet's settings and budget (rounds x local epochs), the
# global model evaluated after each epoch as the fleet's is after each round.
#
#   micropython fleet_central.py config.json
#
# config.json keys: model, train (.mtd, pooled), test (.mtd), layers, mode, lr, momentum,
# batch, epochs, seed. Prints one line "RESULT {json}" with "acc" (per epoch, the first entry
# before training).
import json
import sys

import microtrain as mt


def main(path):
    with open(path) as f:
        cfg = json.load(f)
    model = mt.load(cfg["model"])
    train = mt.FileDataset(cfg["train"])
    test = mt.FileDataset(cfg["test"])
    opt = mt.SGD(lr=cfg["lr"], momentum=cfg["momentum"])
    # gradient sums, as on the fleet's boards (the proximal term joins their direction)
    tr = mt.Trainer(model, train=cfg["layers"], mode=cfg["mode"], optimizer=opt, batch=cfg["batch"],
                    seed=cfg["seed"], sums=True)
    accs = [tr.evaluate(test, confusion=False)["acc"]]
    hist = tr.fit(train, epochs=cfg["epochs"], eval_samples=test, verbose=False)
    accs += [h["eval_acc"] for h in hist]
    print("RESULT " + json.dumps({"acc": accs}))


main(sys.argv[1])
