# Lesson 5, your own data: digits drawn by the learner (in the browser lab, on a canvas;
# on a board, a file of them or any 8x8 grid from a sensor) become a small training set and
# a held-out set. The model's accuracy on the held-out drawings is measured, the last two
# layers train on the training drawings, and it is measured again.
# At a REPL without drawings, `styled()` makes a stand-in: test digits drawn thicker and slanted.
import json

import microtrain as mt
from lab_common import TEST, data, exact, load, picture, signed, verdict

own = []  # (8x8 int8 bytes, label)
held = []
last = None
model = None


def _model():
    global model
    if model is None:
        model = load()
    return model


def reset():
    global model, last
    own[:] = []
    held[:] = []
    model = last = None


def add(label, values, test=False):
    """A drawing: 64 floats from 0 (paper) to 1 (ink), rows first, and its label."""
    x = bytes(_model().quantize_input(values))
    (held if test else own).append((x, label))
    return len(held if test else own)


def _style(v):
    # slant: each row shifted right the more the higher it is; thick: ink spreads to the
    # right and down neighbours
    s = [0.0] * 64
    for r in range(8):
        d = (7 - r) // 3
        for c in range(8 - d):
            s[r * 8 + c + d] = v[r * 8 + c]
    t = [0.0] * 64
    for r in range(8):
        for c in range(8):
            m = s[r * 8 + c]
            if c:
                m = max(m, s[r * 8 + c - 1])
            if r:
                m = max(m, 0.8 * s[r * 8 + c - 8])
            t[r * 8 + c] = min(1.0, 1.2 * m)
    return t


def styled(n_train=60, n_held=40):
    """Test digits drawn thick and slanted, as if by another hand: a training and a held-out set."""
    reset()
    m = _model()
    test = data(TEST)
    inp = m.input
    for i in range(n_train + n_held):
        x, y = test[i]
        v = [max(0.0, min(1.0, inp.scale * (q - inp.zero_point))) for q in signed(x)]
        add(y, _style(v), i >= n_train)


def load_drawings(path="my_digits.json"):
    """Drawings saved from the browser lab: {"train": [[label, 64 values], ...], "held": [...]}."""
    reset()
    with open(path) as f:
        d = json.load(f)
    for label, v in d["train"]:
        add(label, v)
    for label, v in d["held"]:
        add(label, v, True)


def accuracy(samples):
    m = _model()
    return sum(1 for x, y in samples if m.predict(x) == y) / len(samples) if samples else 0.0


def run(epochs=6, lr=0.01):
    """Accuracy on the held-out drawings, training on the others, and again."""
    global last
    m = _model()
    before = accuracy(held)
    pred0 = [m.predict(x) for x, _ in held]
    tr = mt.Trainer(m, train="last:2", mode="mixed", optimizer=mt.SGD(lr=lr, momentum=0.9), batch=4)
    losses = []
    n = len(own)
    for e in range(epochs):
        for i in range(n):
            x, y = own[(i * 7 + e) % n] if n % 7 else own[i]  # a fixed interleaving of the labels
            losses.append(exact(tr.step(x, y)))
    tr.flush()
    after = accuracy(held)
    last = {"n_train": n, "n_held": len(held), "acc_before": before, "acc_after": after, "epochs": epochs,
            "pred_before": pred0,
            "pred": [m.predict(x) for x, _ in held], "held_x": [signed(x) for x, _ in held],
            "labels": [y for _, y in held], "losses": losses}
    return last


def check():
    """Passed when the model got better on the learner's own held-out drawings."""
    r = last
    ok = r is not None and r["n_held"] >= 5 and r["acc_after"] > r["acc_before"]
    return verdict(5, ok, "held-out accuracy %.2f -> %.2f on %d drawings" % (
        r["acc_before"] if r else 0, r["acc_after"] if r else 0, r["n_held"] if r else 0))


def main():
    try:
        load_drawings()
        print("drawings from my_digits.json")
    except OSError:
        styled()
        print("no my_digits.json: test digits drawn thick and slanted stand in for your handwriting")
    picture(signed(own[0][0]), 8, -128, 127, "a training drawing, label %d:" % own[0][1])
    r = run()
    print("trained the last two layers on %d drawings, %d epochs" % (r["n_train"], r["epochs"]))
    print("held-out drawings: accuracy %.2f before, %.2f after" % (r["acc_before"], r["acc_after"]))
    check()


if __name__ == "__main__":
    main()
