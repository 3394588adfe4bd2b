# Instructions of Trainer.fit with and without the feature cache (run on the QEMU firmware
# by `evals/benchmarks/bench_host.py --mcu`, which reads the markers):
#
#   bench_cache.py MODEL.mtm DATA.mtd TRAIN BATCH EPOCHS N
#
# Regions: "fit_nocache" around trainer.fit(samples, EPOCHS, cache=None) and "fit_ram"
# around trainer.fit(samples, EPOCHS, cache="ram") (fill included), each on a freshly
# loaded model with a new Trainer (mixed mode, SGD(lr=0.01, momentum=0.9), BATCH);
# samples = DATA's first N samples copied into RAM. Results: "n" samples, "same" 1 when both runs
# end with the same trained weights and biases, and the record size.
import sys

import microtrain as mt
import microtrain.trainer
from bench_mark import code, flush, mark, result
from microtrain import cache

# The Trainer's clock (its backward timer and log times), replaced: as in bench_train.py.
microtrain.trainer.ticks_us = int
microtrain.trainer.ticks_ms = int
microtrain.trainer.ticks_diff = max


def main(argv):
    path, data_path, train = argv[0], argv[1], argv[2]
    batch, epochs, n = int(argv[3]), int(argv[4]), int(argv[5])
    ds = mt.FileDataset(data_path)
    samples = []
    for i in range(n):
        x, y = ds[i]
        samples.append((bytes(x), y))
    ds.close()
    weights = []
    for name, spec in (("fit_nocache", None), ("fit_ram", "ram")):
        model = mt.load(path)
        tr = mt.Trainer(model, train=train, mode="mixed", optimizer=mt.SGD(lr=0.01, momentum=0.9),
                        batch=batch)
        if spec:
            result("record", cache.record_size(model, tr.first))
        c0, c1 = code(name), code(name + "_end")
        mark(c0)
        tr.fit(samples, epochs=epochs, verbose=False, cache=spec)
        mark(c1)
        flush()
        weights.append([bytes(ly.w) + bytes(ly.b) for ly in tr.layers])
    result("n", len(samples))
    result("same", 1 if weights[0] == weights[1] else 0)
    result("done", 1)


main(sys.argv[1:])
