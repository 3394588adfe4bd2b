# MicroPython: LoRA adapters (or, for comparison, last:N fine-tuning) of a .mtm model
# trained on .mtd samples, as on a board (evals/accuracy/adapt/lora.py runs it in the host
# micropython).
#
#   micropython lora_device.py config.json
#
# config keys: model, train, test (.mtd), method ("lora" or "finetune"), rank, layers
# (adapted layers, or the fine-tuned ones), calib (training samples for LoRA's
# calibration), headroom, mode, lr, momentum, batch, epochs, schedule, seed, adapters
# (path of the adapter file written after training), memory_floor (MemFLoRA: A frozen, B alone).
# Prints one final line "RESULT {json}": acc, merged_acc (LoRA, not MemFLoRA), params, file_bytes,
# heap_train: the largest live heap at an epoch end minus the live heap with the model
# loaded and the data opened (no feature cache: the same for both methods).
import gc
import json
import os
import sys

import microtrain as mt


def main(path):
    with open(path) as f:
        cfg = json.load(f)
    model = mt.load(cfg["model"])
    train = mt.FileDataset(cfg["train"])
    test = mt.FileDataset(cfg["test"])
    gc.collect()
    h0 = gc.mem_alloc()
    lora = None
    spec = cfg["layers"]
    if cfg.get("method", "lora") == "lora":
        from microtrain.lora import LoRA

        lora = LoRA(model, rank=cfg["rank"], layers=spec, seed=cfg["seed"],
                    calib=mt.Subset(train, 0, cfg["calib"]), headroom=cfg.get("headroom", 4),
                    memory_floor=cfg.get("memory_floor", False))
        spec = lora.train
    opt = mt.SGD(lr=cfg["lr"], momentum=cfg["momentum"])
    tr = mt.Trainer(model, train=spec, mode=cfg["mode"], optimizer=opt, batch=cfg["batch"],
                    schedule=cfg["schedule"], seed=cfg["seed"])
    print("device: %r, mode %s, %r" % (lora or spec, tr.mode, opt))  # noqa: UP031 (MicroPython)
    tr.fit(train, epochs=cfg["epochs"], verbose=False, cache=None)
    res = {"acc": tr.evaluate(test, confusion=False)["acc"], "heap_train": tr.heap_live - h0,
           "params": sum(ly.n_params for ly in tr.layers)}
    if lora is not None:
        lora.save(cfg["adapters"])
        res["file_bytes"] = os.stat(cfg["adapters"])[6]
    if lora is not None and not lora.memory_floor:  # (MemFLoRA behind a pool does not fold)
        lora.merge()
        res["merged_acc"] = mt.Trainer(model, train="last:1").evaluate(test, confusion=False)["acc"]
    print("RESULT " + json.dumps(res))


main(sys.argv[1])
