# Host time per sample of microtrain in the unix micropython (x64 natmod), run by
# evals/benchmarks/bench_host.py (`make bench`) in rounds interleaved with PyTorch:
#
#   bench_host.py MODEL.mtm DATA.mtd CLK_TCK N_INFER N_STEP_LAST2 N_STEP_ALL [N_FIT EPOCHS [N_DRIFT]]
#
# Each measurement is one loop over N samples (cycling through DATA's samples, held in
# RAM as bytes), timed around the whole loop, nothing subtracted:
#   infer      model.forward(x) (frozen model; the plan built by an unmeasured call first)
#   last:2/all Trainer.step(x, label), mixed mode, SGD(lr=0.01, momentum=0.9), batch 1
#              (forward, loss, backward, optimiser update), after 3 unmeasured warm-up steps
#   fit        (when N_FIT > 0) Trainer.fit over N_FIT samples, last:2, EPOCHS epochs,
#              cache=None and cache="ram": per sample and epoch, fill of the cache included;
#              and N_INFER training forwards model.forward(x, first) vs
#              20 x N_INFER model.forward(None, first, first) (what the cache leaves)
#   drift      (when N_DRIFT > 0) N_DRIFT steps of a fresh last:2 Trainer as above, no
#              warm-up: its first 1,000 steps and its last 1,000 (drift_first, drift_last;
#              a step must not get slower as the momentum decays)
# Two clocks: time.ticks_us (wall) and the process's CPU time (utime + stime of
# /proc/self/stat, in 1/CLK_TCK s; loops are long enough that its resolution does
# not matter). Output lines: "@host NAME N WALL_US CPU_US".
import sys
import time

import microtrain as mt


def cpu_us(tck):
    """CPU time of this process (user + system), microseconds; -1 without /proc."""
    try:
        with open("/proc/self/stat") as f:
            s = f.read()
    except OSError:
        return -1
    v = s[s.rindex(")") + 2:].split()  # fields after the command name; utime, stime are 12, 13
    return (int(v[11]) + int(v[12])) * 1000000 // tck


def report(name, n, t0, c0, tck):
    wall = time.ticks_diff(time.ticks_us(), t0)
    c1 = cpu_us(tck)
    print("@host %s %d %d %d" % (name, n, wall, c1 - c0 if c0 >= 0 else -1))


def main(argv):
    path, data_path, tck = argv[0], argv[1], int(argv[2])
    n_inf, n_l2, n_all = int(argv[3]), int(argv[4]), int(argv[5])
    n_fit = int(argv[6]) if len(argv) > 6 else 0
    epochs = int(argv[7]) if len(argv) > 7 else 3
    n_drift = int(argv[8]) if len(argv) > 8 else 0
    ds = mt.FileDataset(data_path)
    xs = []
    ys = []
    for i in range(len(ds)):
        x, y = ds[i]
        xs.append(bytes(x))
        ys.append(y)
    ds.close()
    k = len(xs)

    model = mt.load(path)
    model.forward(xs[0])
    c0, t0 = cpu_us(tck), time.ticks_us()
    for i in range(n_inf):
        model.forward(xs[i % k])
    report("infer", n_inf, t0, c0, tck)

    for train, n in (("last:2", n_l2), ("all", n_all)):
        model = mt.load(path)  # fresh weights for every configuration
        tr = mt.Trainer(model, train=train, mode="mixed", optimizer=mt.SGD(lr=0.01, momentum=0.9))
        for i in range(3):
            tr.step(xs[i % k], ys[i % k])
        c0, t0 = cpu_us(tck), time.ticks_us()
        for i in range(n):
            tr.step(xs[i % k], ys[i % k])
        report("step_" + train.replace(":", ""), n, t0, c0, tck)

    if n_fit:
        # what the cache saves per sample: the training forward with and without the prefix
        model = mt.load(path)
        tr = mt.Trainer(model, train="last:2", mode="mixed", optimizer=mt.SGD(lr=0.01, momentum=0.9))
        first = tr.first
        model.forward(xs[0], first)
        c0, t0 = cpu_us(tck), time.ticks_us()
        for i in range(n_inf):
            model.forward(xs[i % k], first)
        report("fwd_last2_full", n_inf, t0, c0, tck)
        c0, t0 = cpu_us(tck), time.ticks_us()
        for _ in range(20 * n_inf):  # 20 times as many: each is far shorter
            model.forward(None, first, first)
        report("fwd_last2_from_first", 20 * n_inf, t0, c0, tck)
        samples = [(xs[i % k], ys[i % k]) for i in range(n_fit)]
        for cache in (None, "ram"):
            model = mt.load(path)
            tr = mt.Trainer(model, train="last:2", mode="mixed", optimizer=mt.SGD(lr=0.01, momentum=0.9))
            c0, t0 = cpu_us(tck), time.ticks_us()
            tr.fit(samples, epochs=epochs, verbose=False, cache=cache)
            report("fit_last2_" + ("cache" if cache else "nocache"), n_fit * epochs, t0, c0, tck)
    if n_drift:
        model = mt.load(path)
        tr = mt.Trainer(model, train="last:2", mode="mixed", optimizer=mt.SGD(lr=0.01, momentum=0.9))
        w = 1000 if n_drift >= 2000 else n_drift // 2
        for i in range(n_drift):
            if i == 0 or i == n_drift - w:
                c0, t0 = cpu_us(tck), time.ticks_us()
            tr.step(xs[i % k], ys[i % k])
            if i == w - 1 or i == n_drift - 1:
                report("drift_first" if i == w - 1 else "drift_last", w, t0, c0, tck)
    print("@host done")


main(sys.argv[1:])
