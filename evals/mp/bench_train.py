# Instructions per inference and per training sample of a model (run on the
# QEMU firmware by evals/benchmarks/bench_mcu.py, which reads the markers):
#
#   bench_train.py MODEL.mtm DATA.mtd TRAIN SPARSE BATCH STEPS MODE NINFER PREPASS LR [RECOMPUTE]
#
# TRAIN "last:1" | "last:2" | "all"; SPARSE 0 (dense) or lambda_min of
# DynamicSparse(lambda_min, 1.0); MODE "int8" | "mixed" | "float32".
# PREPASS: unmeasured training samples after the warm-up (0: none), data[1],
# data[2], ... in order; the measured samples continue the same sequence. With
# PREPASS = len(data) the policy has seen one pass of the data (its L_max is
# established) and the measured samples are data[1..STEPS] seen a second time.
# LR: SGD's learning rate (momentum 0.9). RECOMPUTE "1": Trainer(recompute=True).
# Garbage collections run where the heap fills up, which may be inside a measured sample (it
# then counts there, as on a board). The run reports the garbage a measured step leaves
# ("garbage", bytes a step, over the steps without a collection), how many measured steps
# held a collection ("gc.in"), and after the probe the cost of one collection (marker "gc")
# and the free heap it leaves ("heap.free"): training pays one collection every
# heap.free / garbage steps.
# Markers: "inf" around model.forward(x) of the frozen model (NINFER samples);
# then, after one unmeasured warm-up step (and the PREPASS steps), per sample "step" around
# Trainer.step, with "fwd", "bwd" and "upd" (the optimiser update, every BATCH
# samples) nested inside it. A last, unmeasured probe step records the live heap
# (gc.collect(); gc.mem_alloc()) at the end of forward, backward and update.
import gc
import sys

from bench_mark import code, flush, mark, result

gc.collect()
_heap0 = gc.mem_alloc()
import microtrain as mt  # noqa: E402  (after the heap reading: the package's own RAM)
import microtrain.trainer  # noqa: E402

# The Trainer's clock (its backward timer and log times), replaced: QEMU's semihosting
# clock follows the host's wall clock and the cost of reading and dividing it varies with
# its value, so counts would not repeat. Builtins cost about what reading a hardware timer
# does.
microtrain.trainer.ticks_us = int
microtrain.trainer.ticks_ms = int
microtrain.trainer.ticks_diff = max

PROBE = False
heap_peak = 0


def _heap():
    global heap_peak
    gc.collect()
    h = gc.mem_alloc()
    if h > heap_peak:
        heap_peak = h


def wrap3(f, b, e):
    def w(a1, a2, a3):
        if PROBE:
            r = f(a1, a2, a3)
            _heap()
            return r
        mark(b)
        r = f(a1, a2, a3)
        mark(e)
        return r
    return w


def wrap2(f, b, e):
    def w(a1, a2):
        if PROBE:
            r = f(a1, a2)
            _heap()
            return r
        mark(b)
        r = f(a1, a2)
        mark(e)
        return r
    return w


def main(argv):
    global PROBE
    path, data_path, train, sparse, batch, steps, mode, ninfer, prepass, lr = argv[:10]
    redo = argv[10:] == ["1"]  # Trainer(recompute=True): instructions for RAM
    sparse, batch, steps, ninfer = float(sparse), int(batch), int(steps), int(ninfer)
    prepass, lr = int(prepass), float(lr)
    gc.collect()
    result("heap.package", gc.mem_alloc() - _heap0)
    result("heap.start", gc.mem_alloc())
    result("heap.total", gc.mem_alloc() + gc.mem_free())
    model = mt.load(path)
    data = mt.FileDataset(data_path)
    _heap()
    result("heap.model", heap_peak)
    ci, ci_end = code("inf"), code("inf_end")
    x, y = data[0]
    model.forward(x)  # first call builds the forward plan (unmeasured)
    for i in range(ninfer):
        x, y = data[i]
        mark(ci)
        model.forward(x)
        mark(ci_end)
    flush()
    policy = mt.DynamicSparse(sparse, 1.0) if sparse > 0 else None
    trainer = mt.Trainer(model, train=train, mode=mode, optimizer=mt.SGD(lr=lr, momentum=0.9),
                         sparse=policy, batch=batch, log=None, recompute=redo)
    n_par = 0
    for ly in trainer.layers:
        n_par += len(ly.w) + len(ly.b)
    result("trained_params", n_par)
    result("trained_layers", ",".join(ly.name for ly in trainer.layers))
    _heap()
    result("heap.trainer", heap_peak)
    x, y = data[0]
    trainer.step(x, y)  # warm-up sample and update (unmeasured)
    trainer.flush()
    n = len(data)
    for i in range(prepass):  # unmeasured: the policy sees the data before the measured samples
        x, y = data[(i + 1) % n]
        trainer.step(x, y)
    trainer.flush()
    model.forward = wrap3(model.forward, code("fwd"), code("fwd_end"))  # (x, keep_from, start)
    model.backward = wrap3(model.backward, code("bwd"), code("bwd_end"))
    trainer.opt.step = wrap2(trainer.opt.step, code("upd"), code("upd_end"))  # (layers, n)
    cs, cs_end = code("step"), code("step_end")
    cg, cg_end = code("gc"), code("gc_end")
    garbage = clean = collected = 0
    for i in range(steps):
        x, y = data[(prepass + i + 1) % n]
        a0 = gc.mem_alloc()
        mark(cs)
        trainer.step(x, y)
        mark(cs_end)
        a1 = gc.mem_alloc()
        if a1 >= a0:
            garbage += a1 - a0
            clean += 1
        else:  # the heap shrank: a collection ran inside this step
            collected += 1
        if policy is not None:
            result("rate.%d" % i, policy.rate)
        flush()
    result("garbage", garbage // clean if clean else 0)
    result("gc.in", collected)
    PROBE = True
    x, y = data[0]
    trainer.step(x, y)
    trainer.flush()
    _heap()
    result("heap.peak", heap_peak)
    mark(cg)
    gc.collect()
    mark(cg_end)
    flush()
    result("heap.free", gc.mem_free())
    result("done", 1)


main(sys.argv[1:])
