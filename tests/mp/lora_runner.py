# MicroPython-side runner of tests/training/test_lora.py: attaches LoRA adapters to a
# model, trains them with the Trainer, saves the adapter file, merges, and dumps.
#
# Usage: micropython lora_runner.py CONFIG.json
#
# CONFIG: model, samples (n rows of numel int8), numel, labels, order (sample indices to
# step through), calib (sample indices for LoRA's calibration, or null), rank, layers,
# seed, memory_floor (optional: MemFLoRA, B trained alone), mode, opt ({"kind": "sgd" |
# "adam", ...} as train_runner.py), batch,
# adapters (path: lora.save after training), reload (bool: load the adapter file onto a
# fresh model and check it predicts the same), merged (path: model.save after merge),
# out (dump: train_runner.py's records; "loss", "u_scale", trained layers "L<i>.*" by
# index in the adapted model, merged base layers "M<i>.*" by index in the file; a refused
# merge, MemFLoRA behind a pool, is printed and not dumped).
import json
import sys
from array import array

import microtrain as mt
from microtrain import lora
from runner_lib import make_opt, record


def main(cfg_path):
    with open(cfg_path) as f:
        cfg = json.load(f)
    m = mt.load(cfg["model"])
    numel = cfg["numel"]
    n = max(cfg["order"] + (cfg.get("calib") or []) + [cfg.get("n_pred", 0) - 1]) + 1
    with open(cfg["samples"], "rb") as f:
        mv = memoryview(f.read(n * numel))
    x = [mv[i * numel:(i + 1) * numel] for i in range(len(mv) // numel)]
    calib = None if cfg.get("calib") is None else [x[i] for i in cfg["calib"]]
    lo = lora.LoRA(m, rank=cfg["rank"], layers=cfg["layers"], calib=calib, seed=cfg["seed"],
                   memory_floor=cfg.get("memory_floor", False))
    print(lo)
    tr = mt.Trainer(m, train=lo.train, mode=cfg["mode"], optimizer=make_opt(cfg["opt"]), batch=cfg["batch"])
    losses = array("d")
    labels = cfg["labels"]
    for i in cfg["order"]:
        losses.append(tr.step(x[i], labels[i]))
    tr.flush()
    preds = array("i", [m.predict(x[i]) for i in range(len(x))])
    out = open(cfg["out"], "wb")
    record(out, "loss", "d", losses)
    record(out, "u_scale", "f", array("f", [ad.u.scale for ad in lo.adapters]))
    for ly in tr.layers:
        p = "L" + str(ly.index) + "."
        for name, tc in (("w", "b"), ("b", "i"), ("mult", "i"), ("shift", "i"), ("w_scale", "f"),
                         ("gw", "f"), ("gb", "f"), ("master_w", "f"), ("master_b", "f")):
            a = getattr(ly, name)
            if a is not None:
                record(out, p + name, tc, a)
        st = tr.opt.state(ly)
        if st is not None:
            for k in range(len(st)):
                record(out, p + "st" + str(k), "f", st[k])
    try:
        m.save(cfg["adapters"] + ".mtm")
        print("SAVE-NOT-REFUSED")
    except ValueError as e:
        print("save refused:", e)
    lo.save(cfg["adapters"])
    if cfg.get("reload"):
        m2 = mt.load(cfg["model"])
        lora.load(m2, cfg["adapters"], memory_floor=cfg.get("memory_floor", False))
        same = sum(1 for i in range(len(x)) if m2.predict(x[i]) == preds[i])
        print("RELOAD-SAME", same, len(x))
    record(out, "preds", "i", preds)
    try:
        lo.merge()
        merged = True
    except ValueError as e:  # MemFLoRA behind a pool: no fold into the layer
        print("merge refused:", e)
        merged = False
    if merged:
        record(out, "merged_preds", "i", array("i", [m.predict(x[i]) for i in range(len(x))]))
        for ad in lo.adapters:
            ly = ad.base
            p = "M" + str(ly.index) + "."
            for name, tc in (("w", "b"), ("b", "i"), ("mult", "i"), ("shift", "i"), ("w_scale", "f")):
                record(out, p + name, tc, getattr(ly, name))
    out.close()
    if merged and cfg.get("merged"):
        m.save(cfg["merged"])
    print("LORA-RUNNER-DONE")


main(sys.argv[1])
