# Peak heap of one case of `make mem-mcu` (evals/benchmarks/mem_mcu.py), on the HEAPPEAK
# firmware (evals/benchmarks/heappeak/heappeak.c: the firmware tracks the heap's high-water
# mark itself, so transient peaks inside a call count too):
#
#   mem_case.py MODEL.mtm DATA.mtd TRAIN MODE SPARSE BATCH STEPS MOMENTUM SUMS RECOMPUTE [ROM_ADDR]
#
# TRAIN "-" (inference only), "last:N" or "all"; MODE int8|mixed|float32;
# SPARSE 0 or lambda_min of DynamicSparse(lambda_min, 1.0); SGD(lr=0.01, momentum=MOMENTUM);
# SUMS Trainer(sums=...): "-" None (the default), "0" False, "1" True; RECOMPUTE
# Trainer(recompute=...): "0" False, "1" True.
# ROM_ADDR: the model's bytes are in flash there (QEMU's loader put them
# there): mt.load() gets a bytearray over them instead of the path;
# "frozen:MODULE": mt.load(MODULE.MODEL), a bytes constant frozen into the firmware.
# Prints "mem.<phase>=<peak bytes since start>" after import, load,
# inference, Trainer set-up and training, and "mem.error=<phase>" on a
# MemoryError (the peak so far is still printed: a lower bound).
import mtheap

mtheap.start()  # first: the package import counts

import gc  # noqa: E402
import sys  # noqa: E402

phase = "import"


def mark(name):
    global phase
    print("mem.%s=%d" % (name, mtheap.peak()))
    phase = name


def main(argv):
    global phase
    path, data_path, train, mode, sparse, batch, steps, mom, sums, redo = argv[:10]
    sparse, batch, steps, mom = float(sparse), int(batch), int(steps), float(mom)
    sums = None if sums == "-" else sums == "1"
    import microtrain as mt

    mark("import")
    phase = "load"
    if len(argv) > 10 and argv[10].startswith("frozen:"):
        src = __import__(argv[10][7:]).MODEL  # a bytes constant of a frozen module: in flash
    elif len(argv) > 9:
        import os

        import uctypes

        src = uctypes.bytearray_at(int(argv[10]), os.stat(path)[6])
    else:
        src = path
    model = mt.load(src)
    data = mt.FileDataset(data_path)
    mark("load")
    phase = "infer"
    for i in range(2):
        x, y = data[i % len(data)]
        model.forward(x)
    mark("infer")
    if train == "-":
        return
    phase = "trainer"
    policy = mt.DynamicSparse(sparse, 1.0) if sparse > 0 else None
    # sums=False: no gradient sums at batch 1 (the default with a sparse policy keeps them), and at
    # a larger batch with SGD momentum (each gradient / batch into the momentum)
    trainer = mt.Trainer(model, train=train, mode=mode, optimizer=mt.SGD(lr=0.01, momentum=mom),
                         sparse=policy, batch=batch, log=None, sums=sums, recompute=redo == "1")
    mark("trainer")
    phase = "train"
    for i in range(steps):
        x, y = data[i % len(data)]
        trainer.step(x, y)
    trainer.flush()
    mark("train")


try:
    main(sys.argv[1:])
except MemoryError:
    gc.collect()
    print("mem.error=%s" % phase)
    print("mem.peak=%d" % mtheap.peak())
    sys.exit(2)
print("mem.peak=%d" % mtheap.peak())
