# Lesson 2, one step by hand: the public pieces a Trainer is made of, one at a time, on one
# digit the model gets wrong: forward (keeping the activations of the trained layer), the
# loss and the int8 error of the logits, backward (the last layer's float32 weight
# gradient, one row per class), one SGD update, and the prediction before and after.
import microtrain as mt
from lab_common import data, exact, load, picture, signed, verdict

last = None


def _probs(model):
    z = model.dequantize_output()
    m = max(z)
    e = [2.718281828459045 ** (v - m) for v in z]
    s = sum(e)
    return [v / s for v in e]


def run(lr=0.05):
    global last
    model = load()
    train = data()
    pick = 0
    for i in range(len(train)):  # the first training digit the model gets wrong
        x, y = train[i]
        if model.predict(x) != y:
            pick = i
            break
    x, y = train[pick]
    x = bytes(x)
    before = model.predict(x)
    p_before = _probs(model)
    ly = model.set_trained("last:1")[0]
    w_before = [s * q for s, q in zip(_rows(ly.w_scale, ly), signed(ly.w))]
    model.forward(x, keep_from=ly.index)
    loss, err, es = mt.cross_entropy(model, y)
    e_real = [es * v for v in signed(err)]
    model.backward(err, es)
    gw = list(ly.gw)
    opt = mt.SGD(lr=lr)
    opt.step(model)
    w_after = [s * q for s, q in zip(_rows(ly.w_scale, ly), signed(ly.w))]
    model.forward(x, keep_from=ly.index)
    loss2 = mt.cross_entropy(model, y)[0]
    after = model.predict(x)
    last = {"index": pick, "label": y, "digit": signed(x), "pred_before": before, "pred_after": after,
            "probs_before": p_before, "probs_after": _probs(model), "loss": loss, "loss_after": loss2,
            "err": e_real, "grad": gw, "rows": ly.out_c, "cols": len(gw) // ly.out_c, "lr": lr,
            "w_before": w_before, "w_after": w_after, "losses": [exact(loss), exact(loss2)]}
    return last


def _rows(scales, ly):
    k = len(ly.w) // ly.out_c
    return [scales[i // k] for i in range(len(ly.w))]


def check(row):
    """The gradient row that is negative (the class whose logit the step pushes up)."""
    g, c = last["grad"], last["cols"]
    neg = min(range(last["rows"]), key=lambda r: sum(g[r * c:(r + 1) * c]))
    return verdict(2, row == neg, "row %d: the true class, softmax - one-hot < 0 only there" % neg)


def main():
    r = run()
    picture(r["digit"], 8, -128, 127, "training digit %d, label %d:" % (r["index"], r["label"]))
    print("before: predicted %d, p(label)=%.3f, loss %.4f" % (r["pred_before"], r["probs_before"][r["label"]],
                                                             r["loss"]))
    print("error of the logits (softmax - one-hot):", " ".join("%.2f" % v for v in r["err"]))
    print("gradient of the last layer (rows = classes, columns = inputs):")
    g, c = r["grad"], r["cols"]
    top = max(abs(v) for v in g) or 1.0
    for k in range(r["rows"]):
        print("  %d |%s|" % (k, "".join("-" if v < -top / 8 else "+" if v > top / 8 else " "
                                        for v in g[k * c:k * c + 64])))
    print("after one step (lr %g): predicted %d, p(label)=%.3f, loss %.4f" % (
        r["lr"], r["pred_after"], r["probs_after"][r["label"]], r["loss_after"]))
    print("question: which row of the gradient is negative? lesson2_step.check(row)")


if __name__ == "__main__":
    main()
