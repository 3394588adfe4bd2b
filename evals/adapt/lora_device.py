# MicroPython: LoRA adapters on a .mtm model trained on .mtd samples, as on a board
# (evals/adapt/lora.py runs it in the host micropython).
#
#   micropython lora_device.py config.json
#
# config keys: model, train, test (.mtd), rank, layers, calib (number of training
# samples for the calibration), mode, lr, momentum, batch, epochs, schedule, seed,
# adapters (path of the adapter file written after training).
# Prints one final line "RESULT {json}": acc, merged_acc, heap_peak, params, file bytes.
import json
import os
import sys

import microtrain as mt
from microtrain.lora import LoRA


def main(path):
    with open(path) as f:
        cfg = json.load(f)
    model = mt.load(cfg["model"])
    train = mt.FileDataset(cfg["train"])
    test = mt.FileDataset(cfg["test"])
    lora = LoRA(model, rank=cfg["rank"], layers=cfg["layers"], seed=cfg["seed"],
                calib=mt.Subset(train, 0, cfg["calib"]), headroom=cfg.get("headroom", 4))
    opt = mt.SGD(lr=cfg["lr"], momentum=cfg["momentum"])
    tr = mt.Trainer(model, train=lora.train, mode=cfg["mode"], optimizer=opt, batch=cfg["batch"],
                    schedule=cfg["schedule"], seed=cfg["seed"])
    print("device: %r, mode %s, %r" % (lora, tr.mode, opt))  # noqa: UP031 (MicroPython)
    tr.fit(train, epochs=cfg["epochs"], verbose=False)
    acc = tr.evaluate(test, confusion=False)["acc"]
    lora.save(cfg["adapters"])
    lora.merge()
    merged = mt.Trainer(model, train="last:1").evaluate(test, confusion=False)["acc"]
    print("RESULT " + json.dumps({"acc": acc, "merged_acc": merged, "heap_peak": tr.heap_live,
                                  "params": lora.n_params, "file_bytes": os.stat(cfg["adapters"])[6]}))


main(sys.argv[1])
