# MicroPython side of the bad-input campaign (tests/support/reliability/bad_inputs.py).
#   rel_bad.py MODEL DATA CKPT WITH_BAD
# Trains a few steps, then runs every bad-input case (WITH_BAD=1) between good steps: each
# must raise one clear error (ValueError / TypeError / OSError with a one-line message) and
# leave the model, the trainer and the optimiser state exactly as they were. Ends with
# trainer.save(CKPT): with and without the bad cases the checkpoints must be identical.
# Prints "BAD <name> <ok|UNCLEAR|CHANGED> <message>" per case and "BAD-DONE n".
import gc
import os
import struct
import sys
from array import array

import microtrain as mt
from microtrain import optim
from microtrain.data import FileDataset

MODEL, DATA, CKPT, WITH_BAD = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
TMP = CKPT + ".scratch"
SAVED = CKPT + ".model"


def snapshot(m, tr):
    # every value training could change, as bytes
    parts = [struct.pack("<Iii", m.train_steps, tr.pending, tr.steps), struct.pack("<f", tr.lr)]
    for ly in m.layers:
        for a in (ly.w, ly.b, ly.mult, ly.shift, ly.w_scale, ly.gw, ly.gb, ly.master_w, ly.master_b):
            parts.append(b"-" if a is None else bytes(a))
        st = tr.opt._st.get(ly.index)
        for a in st or ():
            parts.append(bytes(a))
        parts.append(b"T" if ly.trained else b"F")
    parts.append(struct.pack("<II", tr.shuffle_state, tr.epoch))
    return b"".join(parts)


def cases(m, tr, ds):
    n_in = m.input.numel
    x, y = bytes(ds[0][0]), ds[0][1]
    good = bytes(n_in)

    def write_bad_label():
        FileDataset.write(TMP, [(good, 300)])

    def write_neg_label():
        FileDataset.write(TMP, [(good, -1)])

    def short_mtd():
        with open(TMP, "wb") as f:
            f.write(b"MTDS" + struct.pack("<III", 1000000, n_in, 0) + b"\0")
        FileDataset(TMP)

    def corrupt_load():
        b = bytearray(open(MODEL, "rb").read())
        b[100] ^= 0xFF
        mt.load(bytes(b))

    def set_lr(v):
        def f():
            tr.lr = v
        return f

    return [
        ("x_list", lambda: tr.step([0] * n_in, y)),
        ("x_tuple", lambda: tr.step(tuple(range(n_in)), y)),
        ("x_str", lambda: tr.step("a" * n_in, y)),
        ("x_none", lambda: tr.step(None, y)),
        ("x_array_i", lambda: tr.step(array("i", [0] * n_in), y)),
        ("x_array_f", lambda: tr.step(array("f", [0] * n_in), y)),
        ("x_array_h", lambda: tr.step(array("h", [0] * n_in), y)),
        ("x_short", lambda: tr.step(good[:-1], y)),
        ("x_long", lambda: tr.step(good + b"\0", y)),
        ("label_str", lambda: tr.step(x, "1")),
        ("label_none", lambda: tr.step(x, None)),
        ("label_neg", lambda: tr.step(x, -1)),
        ("label_big", lambda: tr.step(x, m.output.numel)),
        ("label_float", lambda: tr.step(x, 1.5)),
        ("eval_bad_label", lambda: tr.evaluate([(x, 99)])),
        ("fit_not_pairs", lambda: tr.fit([x], 1, verbose=False)),
        ("quant_nan", lambda: m.quantize_input([float("nan")] * n_in)),
        ("quant_inf", lambda: m.quantize_input([float("inf")] * n_in)),
        ("quant_ninf", lambda: m.quantize_input([0.0] * (n_in - 1) + [-float("inf")])),
        ("quant_len", lambda: m.quantize_input([0.0] * (n_in + 1))),
        ("trainer_train_empty", lambda: mt.Trainer(m, train=[])),
        ("trainer_last_x", lambda: mt.Trainer(m, train="last:x")),
        ("trainer_last_0", lambda: mt.Trainer(m, train="last:0")),
        ("trainer_train_99", lambda: mt.Trainer(m, train=99)),
        ("trainer_train_neg", lambda: mt.Trainer(m, train=-1)),
        ("trainer_train_name", lambda: mt.Trainer(m, train="nope")),
        ("trainer_train_float", lambda: mt.Trainer(m, train=[1.5])),
        ("trainer_train_relu", lambda: mt.Trainer(m, train=[1])),
        ("trainer_opt_str", lambda: mt.Trainer(m, optimizer="sgd")),
        ("trainer_batch_float", lambda: mt.Trainer(m, batch=1.5)),
        ("trainer_batch_0", lambda: mt.Trainer(m, batch=0)),
        ("trainer_mode", lambda: mt.Trainer(m, mode="float64")),
        ("trainer_schedule", lambda: mt.Trainer(m, schedule="sometimes")),
        ("trainer_log_every", lambda: mt.Trainer(m, log_every=-1)),
        ("trainer_seed", lambda: mt.Trainer(m, seed="x")),
        ("trainer_sparse", lambda: mt.Trainer(m, sparse="dynamic")),
        ("lr_neg", set_lr(-1)),
        ("lr_nan", set_lr(float("nan"))),
        ("lr_inf", set_lr(float("inf"))),
        ("lr_str", set_lr("0.1")),
        ("mtd_label_300", write_bad_label),
        ("mtd_label_neg", write_neg_label),
        ("mtd_short", short_mtd),
        ("load_corrupt", corrupt_load),
        ("load_missing", lambda: mt.load(CKPT + ".missing")),
        ("save_no_dir", lambda: tr.save("/nonexistent-dir/x.mtm")),
    ] + data_cases(m, tr, ds)


def data_cases(m, tr, ds):
    # a data set with one bad sample somewhere (or bad fit arguments): fit refuses it before
    # the first update, naming the sample
    n_in, n = m.input.numel, len(ds)
    good = [(bytes(ds[i][0]), ds[i][1]) for i in range(n)]

    def fit_with(i, x=None, y=None, pair=None, evals=False):
        def f():
            d = list(good)
            d[i] = pair if pair is not None else (d[i][0] if x is None else x, d[i][1] if y is None else y)
            if evals:
                tr.fit(good, 1, verbose=False, eval_samples=d)
            else:
                tr.fit(d, 1, verbose=False)
        return f

    def fit_mtd(i, label):
        def f():
            d = list(good)
            d[i] = (d[i][0], label)
            FileDataset.write(TMP, d)
            fd = FileDataset(TMP)
            try:
                tr.fit(fd, 1, verbose=False)
            finally:
                fd.close()
        return f

    out = []
    for i in (0, 5, n - 1):
        for name, y in (("label_10", m.output.numel), ("label_neg", -1), ("label_float", 1.5),
                        ("label_str", "3"), ("label_big", 1 << 40)):
            out.append(("fit_%s_at_%d" % (name, i), fit_with(i, y=y)))
        for name, x in (("x_short", bytes(n_in - 1)), ("x_long", bytes(n_in + 1)), ("x_list", [0] * n_in),
                        ("x_none", None), ("x_array_f", array("f", [0] * n_in)), ("x_int", 3),
                        ("x_str", "a" * n_in), ("x_array_i", array("i", [0] * n_in))):
            if x is None:
                out.append(("fit_%s_at_%d" % (name, i), fit_with(i, pair=(None, 1))))
            else:
                out.append(("fit_%s_at_%d" % (name, i), fit_with(i, x=x)))
        out.append(("fit_label_none_at_%d" % i, fit_with(i, pair=(bytes(n_in), None))))
        out.append(("fit_not_pair_at_%d" % i, fit_with(i, pair=(bytes(n_in),))))
        out.append(("fit_eval_label_at_%d" % i, fit_with(i, y=99, evals=True)))
        out.append(("fit_mtd_label_at_%d" % i, fit_mtd(i, m.output.numel + 5)))
    for name, kw in (("epochs_neg", {"epochs": -1}), ("epochs_float", {"epochs": 1.5}),
                     ("epochs_str", {"epochs": "2"}), ("total_small", {"epochs": 2, "total": 1}),
                     ("total_float", {"epochs": 1, "total": 2.0}), ("samples_int", {"samples": 5}),
                     ("samples_none", {"samples": None})):
        def f(kw=kw):
            k = dict(kw)
            tr.fit(k.pop("samples", good), verbose=False, **k)
        out.append(("fit_" + name, f))
    return out


def main():
    ds = FileDataset(DATA)
    m = mt.load(MODEL)
    tr = mt.Trainer(m, train="all", mode="float32", optimizer=optim.SGD(lr=0.02, momentum=0.9), batch=2,
                    log_every=0)
    n = len(ds)
    k = 0
    for _ in range(5):
        x, y = ds[k % n]
        tr.step(x, y)
        k += 1
    cs = cases(m, tr, ds) if WITH_BAD else []
    for name, fn in cs:
        m.save(SAVED)  # the model file of this point: the case must not touch it either
        saved = open(SAVED, "rb").read()
        before = snapshot(m, tr)
        status, msg = "UNCLEAR", "no error"
        try:
            fn()
        except (ValueError, TypeError, OSError) as e:
            msg = str(e)
            one_line = msg and "\n" not in msg
            status = "ok" if one_line else "UNCLEAR"
        except Exception as e:  # noqa: BLE001 - any other error type is unclear
            msg = type(e).__name__ + ": " + str(e)
        gc.collect()
        if snapshot(m, tr) != before or open(SAVED, "rb").read() != saved:
            status = "CHANGED"
        print("BAD", name, status, msg.replace("\n", " | "))
        x, y = ds[k % n]  # training goes on between the cases
        tr.step(x, y)
        k += 1
    if not WITH_BAD:
        for _ in range(len(cases(m, tr, ds))):
            x, y = ds[k % n]
            tr.step(x, y)
            k += 1
    tr.save(CKPT)
    for p in (TMP, SAVED):
        try:
            os.remove(p)
        except OSError:
            pass
    print("BAD-DONE", len(cs))


main()
