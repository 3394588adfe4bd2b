# MicroPython-side runner of tests/training/test_budget.py: for each RAM budget, the hybrid
# order that budget.boundary chooses (bottom layers SPSA, top layers backprop), trained on
# a few batches; the heap training adds, measured after each batch.
#
# Usage: micropython budget_runner.py MODEL SAMPLES NUMEL LABELS(comma list) LAYERS BUDGET...
# Prints per budget "BUDGET <bytes> k=<forward-only layers> of <n> need=<memplan's count>
# peak=<measured bytes> loss <first> <last>", or "BUDGET <bytes> refused <message>".
import gc
import sys

import microtrain as mt
import microtrain.budget as budget


def main(model, samples, numel, labels, layers, budgets):
    numel = int(numel)
    labels = [int(v) for v in labels.split(",")]
    with open(samples, "rb") as f:
        data = f.read(len(labels) * numel)
    for b in budgets:
        b = int(b)
        m = mt.load(model)
        m.forward(bytes(numel))  # the inference buffers exist before the heap is measured
        import microtrain.backward  # noqa: F401  (code, not training state: frozen on a board)
        import microtrain.zo  # noqa: F401

        opt = mt.SGD(lr=0.05, momentum=0.9)
        try:
            k, need = budget.boundary(m, b, layers, "int8", opt, 8)
        except ValueError as e:
            print("BUDGET", b, "refused", e)
            continue
        gc.collect()
        h0 = gc.mem_alloc()
        z = budget.hybrid(m, b, layers, "int8", opt, 8, lr=20.0, eps=2, seed=3)
        peak, losses = 0, []
        for s in range(0, len(labels), 8):
            batch = [(data[i * numel:(i + 1) * numel], labels[i]) for i in range(s, min(len(labels), s + 8))]
            lp, lm = z.step(batch)
            losses.append((lp + lm) / 2)
            batch = None
            gc.collect()
            peak = max(peak, gc.mem_alloc() - h0)
        print("BUDGET", b, "k=%d of %d" % (k, len(m.select(layers))), "need=%d" % need, "peak=%d" % peak,
              "loss %.4f %.4f" % (losses[0], losses[-1]))
        z = m = None
        gc.collect()


main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:])
