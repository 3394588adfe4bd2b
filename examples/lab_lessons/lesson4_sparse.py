# Lesson 4, sparse updates: all layers trained with a DynamicSparse policy, which keeps
# for each sample and layer only the output channels with the largest error (more of them
# for a hard sample). A small wrapper records the policy's choice at every step: a heat
# map of steps x channels. Dropped channels get no gradient and pass no error on: that
# work is saved.
import microtrain as mt
from lab_common import data, exact, load, verdict

last = None


class Recorder:
    """A sparse policy that asks DynamicSparse and writes down which channels it kept."""

    def __init__(self, policy):
        self.policy = policy
        self.rows = []

    def observe(self, loss):
        self.rows.append([])
        return self.policy.observe(loss)

    def __call__(self, ly, e):
        m = self.policy(ly, e)
        self.rows[-1].append((ly.name, bytes(m) if m is not None else b"\x01" * ly.out_c))
        return m


def _train(steps, lr, policy):
    tr = mt.Trainer(load(), train="all", mode="mixed", optimizer=mt.SGD(lr=lr, momentum=0.9), sparse=policy,
                    batch=8)
    train = data()
    losses = []
    for i in range(steps):
        x, y = train[i]
        losses.append(exact(tr.step(x, y)))
    tr.flush()
    return losses, tr.bwd_us


def run(steps=30, lr=0.005):
    global last
    rec = Recorder(mt.DynamicSparse(0.1, 1.0))
    losses, us = _train(steps, lr, rec)
    dense, us_dense = _train(steps, lr, None)  # the same steps with every channel: the time it saves
    # backward visits the layers from the last: list them in model order
    names = [n for n, _ in reversed(rec.rows[0])]
    heat = [[v for _, m in reversed(row) for v in m] for row in rec.rows]
    kept = sum(sum(r) for r in heat)
    seen = sum(len(r) for r in heat)
    widths = [len(m) for _, m in reversed(rec.rows[0])]
    last = {"layers": names, "widths": widths, "heat": heat, "kept": kept, "seen": seen,
            "saved_pct": 100.0 * (seen - kept) / seen, "policy": repr(rec.policy),
            "bwd_ms": us / 1000, "bwd_ms_dense": us_dense / 1000, "losses": losses + dense}
    return last


def check(pct):
    """The share of channel updates the policy skipped, in percent (within 1 point)."""
    s = last["saved_pct"]
    return verdict(4, abs(pct - s) <= 1.0, "%.1f %% of the channel updates were skipped" % s)


def main():
    r = run()
    print("channels kept (#) and skipped (.) per step, layers", ", ".join(
        "%s (%d)" % (n, w) for n, w in zip(r["layers"], r["widths"])))
    for i, row in enumerate(r["heat"]):
        print("  %3d |%s|" % (i, "".join("#" if v else "." for v in row)))
    print("kept %d of %d channel updates; policy %s" % (r["kept"], r["seen"], r["policy"]))
    print("backward: %.1f ms sparse, %.1f ms dense (all channels) for the same steps" % (
        r["bwd_ms"], r["bwd_ms_dense"]))
    print("question: what percent of the channel updates were skipped? lesson4_sparse.check(pct)")


if __name__ == "__main__":
    main()
