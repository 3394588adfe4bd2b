"""DynamicSparse's channel ranking formed by the max-pool backward (maxpool_s8_grad_input_act_l1,
through DynamicSparse.pool_norms) against the unfused sequence (the pool's _act kernel, then the
policy's own l1_norm_s8 pass), in the real micropython binary with the native module: the same
policy behind a wrapper without pool_norms takes the unfused path. The CNN of the training tests
(a max pool over its pointwise conv's ReLU), all layers, DynamicSparse(0.1): the same losses,
rates, kept channels and trained weights, biases and scales, bit for bit, and the fused kernel
ran in the one run only."""

from __future__ import annotations

from pathlib import Path

from support.harness import run_micropython
from support.training_cases import Setup, labels_of

SCRIPT = """
import sys
import microtrain as mt
from microtrain import kern

K = kern.K
calls = [0]
_fused = K.maxpool_s8_grad_input_act_l1


def counted(*a):
    calls[0] += 1
    return _fused(*a)


K.maxpool_s8_grad_input_act_l1 = counted


class Unfused:
    # the policy itself, but for pool_norms: Model.backward then takes the unfused path
    def __init__(self, p):
        self.p = p

    def __getattr__(self, name):
        if name == "pool_norms":
            raise AttributeError(name)
        return getattr(self.p, name)

    def __call__(self, ly, e):
        return self.p(ly, e)


path, samples, numel, labels = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
labels = [int(v) for v in labels.split(",")]
with open(samples, "rb") as f:
    data = f.read()
for fused in (1, 0):
    calls[0] = 0
    m = mt.load(path)
    pol = mt.DynamicSparse(0.1, 1.0)
    tr = mt.Trainer(m, train="all", mode="int8", optimizer=mt.SGD(lr=0.02, momentum=0.9),
                    sparse=pol if fused else Unfused(pol), batch=1, log=None)
    out = []
    for i, y in enumerate(labels):
        loss = tr.step(memoryview(data)[i * numel:(i + 1) * numel], y)
        out.append("%r %r" % (loss, pol.rate))
    out.append("kept %d seen %d" % (pol.kept, pol.seen))
    for ly in tr.layers:
        out.append("%s %s %s %s" % (ly.name, bytes(ly.w).hex(), bytes(ly.b).hex(),
                                    bytes(memoryview(ly.w_scale)).hex()))
    print("RUN", fused, calls[0])
    print("\\n".join(out))
    print("END")
"""


def test_pool_norms_equal_the_unfused_sequence(setups: dict[str, Setup], tmp_path: Path) -> None:
    s = setups["cnn"]
    n = 16
    script = tmp_path / "pool_norms.py"
    script.write_text(SCRIPT)
    labels = ",".join(str(int(v)) for v in labels_of(s)[:n])
    p = run_micropython(script, [str(s.path), str(s.samples), str(s.numel), labels], timeout=600)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    runs = {}
    for block in p.stdout.split("RUN ")[1:]:
        head, body = block.split("\n", 1)
        fused, calls = (int(v) for v in head.split())
        runs[fused] = (calls, body.split("END")[0])
    fused_calls, fused_out = runs[1]
    plain_calls, plain_out = runs[0]
    # the fused path ran (the pool over the pointwise conv, on the samples whose rate is below 1)
    # and the unfused one did not
    assert fused_calls > 0 and plain_calls == 0, (fused_calls, plain_calls)
    assert "kept" in fused_out and len(fused_out.splitlines()) > n + 2
    assert fused_out == plain_out
