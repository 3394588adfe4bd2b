# The training steps evals/benchmarks/bench_host.py --profile runs under valgrind's callgrind:
#
#   bench_host_profile.py MODEL.mtm DATA.mtd TRAIN PHASE STEPS
#
# Prints "@fn NAME ADDRESS" for every kernel of _microtrain (the address of its C entry
# point, read from the function object: callgrind names natmod code by address only), then
# makes a Trainer (mixed mode, SGD momentum, batch 1), runs 3 warm-up steps and STEPS
# samples of PHASE:
#   fwd     model.forward(x, first) (the training forward)
#   fwdbwd  Trainer.step with the update never due (forward, loss, backward), with the
#           gradient sums (sums=True: into the momentum, batch 1 allows one backward per update)
#   step    Trainer.step, batch 1 (forward, loss, backward, update)
# The host runs it with STEPS = 0 and STEPS = N and takes the difference, so start-up,
# loading and warm-up cancel out.
import sys

import _microtrain
import microtrain as mt
import uctypes


def main(argv):
    path, data_path, train, phase, steps = argv[0], argv[1], argv[2], argv[3], int(argv[4])
    for name in dir(_microtrain):
        f = getattr(_microtrain, name)
        if callable(f):
            # mp_obj_fun_builtin_var_t: type pointer, sig (padded to 8 bytes), C function
            p = uctypes.struct(id(f), {"fun": 16 | uctypes.UINT64}).fun
            print("@fn %s %x" % (name, p))
    ds = mt.FileDataset(data_path)
    xs = []
    ys = []
    for i in range(len(ds)):
        x, y = ds[i]
        xs.append(bytes(x))
        ys.append(y)
    k = len(xs)
    model = mt.load(path)
    tr = mt.Trainer(model, train=train, mode="mixed", optimizer=mt.SGD(lr=0.01, momentum=0.9),
                    sums=True if phase == "fwdbwd" else None)
    for i in range(3):
        tr.step(xs[i % k], ys[i % k])
    if phase == "fwd":
        for i in range(steps):
            model.forward(xs[i % k], tr.first)
    else:
        if phase == "fwdbwd":
            tr.batch = 1 << 30
        for i in range(steps):
            tr.step(xs[i % k], ys[i % k])
    print("@done")


main(sys.argv[1:])
