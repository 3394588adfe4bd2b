# Lesson 3, what to train: the same model trained four ways for the same steps: the last
# layer, the last two, all layers, and rank-2 LoRA adapters on the last two. For each, the
# RAM the Trainer's planner says it allocates (microtrain.memplan, the numbers its memory
# check uses), the heap it took, the time per step and the test accuracy afterwards.
import gc
import time

import microtrain as mt
from lab_common import TEST, data, exact, heap_used, load, verdict
from microtrain import lora, memplan

CONFIGS = (("last:1", "mixed", 0), ("last:2", "mixed", 0), ("all", "mixed", 0),
           ("LoRA r=2 on last:2", "float32", 2))
last = None


def run(steps=40, n_eval=50, lr=0.005):
    global last
    train, test = data(), data(TEST)
    held = mt.Subset(test, 0, n_eval)
    model = load()
    base = sum(1 for x, y in held if model.predict(x) == y) / n_eval
    rows, losses = [], []
    # a first Trainer imports (compiles) the modules training uses: not counted as its heap
    mt.Trainer(model, train="last:1", optimizer=mt.SGD(lr=lr, momentum=0.9), batch=8).step(*train[0])
    tr = None
    for name, mode, rank in CONFIGS:
        model = tr = None
        gc.collect()
        model = load()
        spec = name
        if rank:
            spec = lora.LoRA(model, rank=rank, layers="last:2").train
        opt = mt.SGD(lr=lr, momentum=0.9)
        idx = model.select(spec)
        plan = 0
        for _, n in memplan.need(model, idx, mode, opt.n_state, None):
            plan += n
        a0 = heap_used()
        tr = mt.Trainer(model, train=spec, mode=mode, optimizer=opt, batch=8)
        t0 = time.ticks_us()
        for i in range(steps):
            x, y = train[i]
            losses.append(exact(tr.step(x, y)))
        ms = time.ticks_diff(time.ticks_us(), t0) / 1000 / steps
        tr.flush()
        a1 = heap_used()
        heap = a1 - a0 if a0 is not None and a1 is not None else None
        acc = tr.evaluate(held, confusion=False)["acc"]
        params = sum(model.layers[i].n_params for i in idx)
        rows.append({"config": name, "mode": mode, "params": params, "plan_bytes": plan, "heap_bytes": heap,
                     "ms_per_step": ms, "acc": acc})
    memplan.forget()
    last = {"rows": rows, "steps": steps, "n_eval": n_eval, "acc_before": base, "losses": losses}
    return last


def check(config):
    """The configuration the planner gives the least RAM."""
    best = min(last["rows"], key=lambda r: r["plan_bytes"])["config"]
    return verdict(3, config == best, "%s plans the least RAM" % best)


def main():
    r = run()
    print("accuracy of the converted model on %d test digits: %.2f" % (r["n_eval"], r["acc_before"]))
    print("%-20s %-8s %7s %10s %10s %9s %6s" % ("trained", "mode", "params", "planned B", "heap B", "ms/step",
                                               "acc"))
    for w in r["rows"]:
        heap = "-" if w["heap_bytes"] is None else str(w["heap_bytes"])
        print("%-20s %-8s %7d %10d %10s %9.1f %6.2f" % (w["config"], w["mode"], w["params"], w["plan_bytes"],
                                                       heap, w["ms_per_step"], w["acc"]))
    print("(accuracy after %d steps, batch 8)" % r["steps"])
    print("question: which configuration plans the least RAM? lesson3_what.check('name')")


if __name__ == "__main__":
    main()
