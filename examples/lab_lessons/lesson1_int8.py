# Lesson 1, int8 inside: the first conv layer's float weights (PyTorch) next to the int8
# weights the converter made of them, their scale per output channel (zero point 0:
# symmetric), and the predictions of the float network and of the int8 model on the same
# digits. Run it: `import lesson1_int8` at a board's REPL, or `micropython lesson1_int8.py`.
import json

from lab_common import TEST, data, load, picture, signed, verdict

last = None


def _conv(x, h, w, cin, wt, b, cout):
    # 3x3, padding 1, then ReLU; x is HWC, wt is PyTorch's (out, in, 3, 3)
    y = [0.0] * (h * w * cout)
    for o in range(cout):
        for r in range(h):
            for c in range(w):
                s = b[o]
                for i in range(cin):
                    for dr in range(3):
                        rr = r + dr - 1
                        if 0 <= rr < h:
                            for dc in range(3):
                                cc = c + dc - 1
                                if 0 <= cc < w:
                                    s += wt[((o * cin + i) * 3 + dr) * 3 + dc] * x[(rr * w + cc) * cin + i]
                y[(r * w + c) * cout + o] = s if s > 0 else 0.0
    return y


def float_predict(f, x):
    """The float network the int8 model was converted from, on a float 8x8 image (HWC)."""
    a = _conv(x, 8, 8, 1, f["0.weight"], f["0.bias"], 6)
    p = [0.0] * 96  # 2x2 max pool: 4x4x6
    for r in range(4):
        for c in range(4):
            for o in range(6):
                p[(r * 4 + c) * 6 + o] = max(a[((2 * r + dr) * 8 + 2 * c + dc) * 6 + o] for dr in (0, 1)
                                             for dc in (0, 1))
    a = _conv(p, 4, 4, 6, f["3.weight"], f["3.bias"], 8)
    flat = [a[(k % 16) * 8 + k // 16] for k in range(128)]  # PyTorch flattens CHW
    wl, bl = f["6.weight"], f["6.bias"]
    z = [bl[j] + sum(wl[j * 128 + k] * flat[k] for k in range(128)) for j in range(10)]
    return z.index(max(z))


def run(n=20):
    """Weights of the first layer, float vs int8, and predictions on n test digits."""
    global last
    model = load()
    test = data(TEST)
    with open("digits_float.json") as fh:
        f = json.load(fh)
    ly = model.layers[0]
    q = signed(ly.w)
    sc = list(ly.w_scale)
    k = len(q) // len(sc)
    deq = [sc[i // k] * q[i] for i in range(len(q))]
    inp = model.input
    digits, labels, p8, pf = [], [], [], []
    for i in range(n):
        x, y = test[i]
        xs = signed(x)
        xf = [inp.scale * (v - inp.zero_point) for v in xs]
        digits.append(xs)
        labels.append(y)
        p8.append(model.predict(x))
        pf.append(float_predict(f, xf))
    agree = sum(1 for a, b in zip(p8, pf) if a == b)
    big = max(range(len(q)), key=lambda i: abs(q[i]))  # the weight the question is about
    last = {"layer": ly.name, "k": k, "w_float": f["0.weight"], "w_int8": q, "w_scale": sc, "w_deq": deq,
            "in_scale": inp.scale, "in_zp": inp.zero_point, "digits": digits, "labels": labels,
            "pred_int8": p8, "pred_float": pf, "agree": agree, "n": n,
            "ask": {"channel": big // k, "index": big % k, "q": q[big], "scale": sc[big // k]},
            "losses": []}
    return last


def check(answer):
    """The real value of the int8 weight the lesson asks about: scale * (q - 0)."""
    a = last["ask"]
    real = a["scale"] * a["q"]
    return verdict(1, abs(answer - real) <= 0.01 * abs(real), "real value = scale * q = %.5f" % real)


def main():
    r = run()
    k = r["k"]
    for c in range(len(r["w_scale"])):
        print("channel %d: scale %.5f, zero point 0" % (c, r["w_scale"][c]))
        print("  float:", " ".join("%6.3f" % v for v in r["w_float"][c * k:(c + 1) * k]))
        print("  int8: ", " ".join("%6d" % v for v in r["w_int8"][c * k:(c + 1) * k]))
    picture(r["digits"][0], 8, -128, 127, "a test digit (label %d) as the model sees it:" % r["labels"][0])
    print("labels:     ", r["labels"])
    print("float net:  ", r["pred_float"])
    print("int8 model: ", r["pred_int8"])
    print("agreement: %d/%d" % (r["agree"], r["n"]))
    a = r["ask"]
    print("question: weight %d of channel %d is q=%d. Its real value? lesson1_int8.check(value)"
          % (a["index"], a["channel"], a["q"]))


if __name__ == "__main__":
    main()
