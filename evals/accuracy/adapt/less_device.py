# MicroPython: the forward-only parts of "adapting with less" (evals/accuracy/adapt/less.py), as
# on a board.
#
#   micropython less_device.py config.json
#
# config "kind":
#   "qsched": model, train, test (.mtd), train_layers, lr, eps, seed, batch, budget (forward passes
#             of a sample), queries (an int, or "auto": a QScheduler with q0, q_max, patience, tol,
#             beta, share).
#             SPSA over the training samples, in order and again, until the budget is spent.
#   "hybrid": model, train, test, layers, budget (heap bytes), mode, bp_lr, momentum, lr, eps, seed,
#             batch, epochs. budget.hybrid's boundary, trained; the heap training adds, measured after
#             every batch.
# Prints one final line "RESULT {json}".
import gc
import json
import sys

import microtrain as mt


def acc(model, data):
    ok = 0
    for i in range(len(data)):
        x, y = data[i]
        ok += model.predict(x) == y
    return ok / len(data)


def qsched(cfg, model):
    from microtrain.zo import QScheduler

    train = mt.FileDataset(cfg["train"])
    test = mt.FileDataset(cfg["test"])
    q = cfg["queries"]
    if q == "auto":
        q = QScheduler(q0=cfg["q0"], q_max=cfg["q_max"], patience=cfg["patience"], tol=cfg["tol"],
                       beta=cfg["beta"], share=cfg["share"])
    z = mt.ZO(model, train=cfg["train_layers"], lr=cfg["lr"], eps=cfg["eps"], seed=cfg["seed"], queries=q)
    n, b, i = len(train), cfg["batch"], 0
    while z.passes < cfg["budget"]:
        batch = []
        for _ in range(b):
            x, y = train[i % n]
            batch.append((bytes(x), y))
            i += 1
        z.step(batch)
    return {"acc": acc(model, test), "passes": z.passes, "samples": i, "q_end": z.queries,
            "changes": q.changes if not isinstance(q, int) else []}


def hybrid(cfg, model):
    import microtrain.budget as budget

    train = mt.FileDataset(cfg["train"])
    test = mt.FileDataset(cfg["test"])
    before = acc(model, test)
    model.forward(bytes(model.input.numel))  # the inference buffers exist before the heap is measured
    import microtrain.backward  # noqa: F401  (code, not training state: frozen on a board)
    import microtrain.zo  # noqa: F401

    opt = mt.SGD(lr=cfg["bp_lr"], momentum=cfg["momentum"])
    k, need = budget.boundary(model, cfg["budget"], cfg["layers"], cfg["mode"], opt, cfg["batch"])
    gc.collect()
    h0 = gc.mem_alloc()
    z = budget.hybrid(model, cfg["budget"], cfg["layers"], cfg["mode"], opt, cfg["batch"], lr=cfg["lr"],
                      eps=cfg["eps"], seed=cfg["seed"])
    n, b, peak = len(train), cfg["batch"], 0
    for _ in range(cfg["epochs"]):
        for s in range(0, n, b):
            batch = []
            for i in range(s, min(n, s + b)):
                x, y = train[i]
                batch.append((bytes(x), y))
            z.step(batch)
            batch = None
            gc.collect()
            peak = max(peak, gc.mem_alloc() - h0)
    names = [model.layers[j].name for j in model.select(cfg["layers"])]
    return {"k": k, "zo": names[:k], "bp": names[k:], "need": need, "peak": peak, "before": before,
            "acc": acc(model, test)}


def main(path):
    with open(path) as f:
        cfg = json.load(f)
    model = mt.load(cfg["model"])
    res = {"qsched": qsched, "hybrid": hybrid}[cfg["kind"]](cfg, model)
    print("RESULT " + json.dumps(res))


main(sys.argv[1])
