# MicroPython-side runner of tests/training/test_adapt.py: the prototype head and zeroth-order
# training on given int8 samples; prints one JSON line "ADAPT <result>".
#
# Usage: micropython adapt_runner.py CONFIG.json
#
# CONFIG: model, samples (n rows of numel int8), numel, labels, kind, and
#   kind "proto": layer, metric, dtype, shots ({name: [sample indices]}), query (indices),
#                 save (path or null), then remove / rename ([old, new] or null)
#   kind "zo":    train, bp, lr, eps, seed, batch, order (indices), opt ({"lr", "momentum"}), mode,
#                 out (path of a dump in train_runner.py's format)
import json
import sys

import microtrain as mt
from runner_lib import record


def proto(cfg, m, xs):
    h = mt.PrototypeHead(m, layer=cfg["layer"], metric=cfg["metric"], dtype=cfg["dtype"])
    for name, idx in cfg["shots"]:
        h.add_class(name, [xs[i] for i in idx])
    out = {"classes": h.classes, "scores": [h.scores(xs[i]) for i in cfg["query"]],
           "pred": [h.predict(xs[i]) for i in cfg["query"]], "repr": repr(h)}
    if cfg.get("save"):
        h.save(cfg["save"])
        h2 = mt.PrototypeHead.load(m, cfg["save"])
        out["loaded_same"] = all(h2.scores(xs[i]) == h.scores(xs[i]) for i in cfg["query"])
    if cfg.get("rename"):
        h.rename_class(*cfg["rename"])
    if cfg.get("remove"):
        h.remove_class(cfg["remove"])
    out["classes_after"] = h.classes
    out["scores_after"] = [h.scores(xs[i]) for i in cfg["query"]]
    out["both"] = [list(h.both(xs[i])) for i in cfg["query"][:3]]
    return out


def zo(cfg, m, xs, labels):
    o = cfg.get("opt")
    z = mt.ZO(m, train=cfg["train"], bp=cfg.get("bp"), lr=cfg.get("lr"), eps=cfg["eps"], seed=cfg["seed"],
              optimizer=mt.SGD(lr=o["lr"], momentum=o.get("momentum", 0.0)) if o else None,
              mode=cfg.get("mode", "int8"), queries=cfg.get("queries"), perturb=cfg.get("perturb", "weights"))
    order, b = cfg["order"], cfg["batch"]
    losses = []
    for s in range(0, len(order), b):
        losses.append(list(z.step([(xs[i], labels[i]) for i in order[s:s + b]])))
    with open(cfg["out"], "wb") as f:
        for ly in z.layers:
            record(f, "L%d.w" % ly.index, "b", ly.w)
        if z.trainer is not None:
            for ly in z.trainer.layers:
                if z.perturb == "outputs":
                    record(f, "L%d.w" % ly.index, "b", ly.w)
                for name, tc in (("w", "b"), ("b", "i"), ("mult", "i"), ("shift", "i"), ("w_scale", "f")):
                    record(f, "L%d.%s" % (ly.index, name), tc, getattr(ly, name))
    return {"losses": losses, "repr": repr(z)}


def main(path):
    with open(path) as f:
        cfg = json.load(f)
    m = mt.load(cfg["model"])
    n = cfg["numel"]
    with open(cfg["samples"], "rb") as f:
        mv = memoryview(f.read())
    xs = [mv[i * n:(i + 1) * n] for i in range(len(mv) // n)]
    if cfg["kind"] == "proto":
        res = proto(cfg, m, xs)
    else:
        res = zo(cfg, m, xs, cfg["labels"])
    print("ADAPT " + json.dumps(res))


main(sys.argv[1])
