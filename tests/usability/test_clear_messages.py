"""Messages that said too little, and arguments accepted without a word: each public
constructor checks its arguments when it is called (not at the first step, mid-fit), naming
the argument, the rule and the value; the kernels' `wr must be >= 0` says what wr is and how
it is made, natively and in the pure-Python kernels alike (checks.c and pyk/checks.py).
Run in the real MicroPython; nothing is trained, so nothing can have changed."""

from __future__ import annotations

import json

from support.harness import ensure_natmod, run_micropython
from support.reliability.train_files import files

SCRIPT = r"""
import array, json, sys
import _microtrain as N
import microtrain as mt
from microtrain import schedule
from microtrain.pyk import kernel
from microtrain.replay import Replay
m = mt.load(sys.argv[1])
before = bytes(m.buf)
out = {}
def t(name, f):
    try:
        f()
        out[name] = "accepted"
    except (TypeError, ValueError) as e:
        out[name] = "%s: %s" % (type(e).__name__, e)
t("static_neg", lambda: mt.StaticSparse(-0.5))
t("static_none", lambda: mt.StaticSparse(None))
t("static_str", lambda: mt.StaticSparse("0.5"))
t("static_dict", lambda: mt.StaticSparse({"fc": 1.5}))
t("static_ok", lambda: mt.StaticSparse({"fc": 0.25}))
t("dynamic_str", lambda: mt.DynamicSparse("0.1"))
t("dynamic_order", lambda: mt.DynamicSparse(0.6, 0.3))
t("step0", lambda: schedule.StepLR(step=0))
t("gamma_none", lambda: schedule.StepLR(gamma=None))
t("cosine_neg", lambda: schedule.Cosine(lr_min=-0.1))
t("replay_seed", lambda: Replay(seed="1"))
t("trainer_sparse", lambda: mt.Trainer(m, sparse=0.5))
# a grad-input call with a negative weight ratio, native and pure-Python
d = array.array("i", [4, 2, 0, 0, -128, 127])
args = (d, array.array("b", [1, 2]), array.array("b", [1] * 8), array.array("i", [-1, 3]), None,
        array.array("i", [0] * 4), array.array("b", [0] * 4))
t("wr_native", lambda: N.linear_s8_grad_input(*args))
t("wr_pure", lambda: kernel("linear_s8_grad_input")(*args))
out["model_unchanged"] = bytes(m.buf) == before
print(json.dumps(out))
"""

FRACTION = ("must be a number in (0, 1]{} (the fraction of a layer's output channels updated per sample), "
            "got {}")
WR = ("linear_s8_grad_input: wr: wr must be >= 0 (the grad-input weight ratios: fill wr from the layer's "
      "weight scales with update_f32_ratios(w_scale, r, wr))")


def test_constructors_check_their_arguments_with_the_rule() -> None:
    ensure_natmod()
    model, _ = files(24)
    p = run_micropython(SCRIPT, [str(model)])
    assert p.returncode == 0, p.stdout + p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    alt = " or a dict {layer name: fraction}"
    assert got["static_neg"] == "ValueError: StaticSparse: ratio " + FRACTION.format(alt, "-0.5")
    assert got["static_none"] == "TypeError: StaticSparse: ratio " + FRACTION.format(alt, "None")
    assert got["static_str"] == "TypeError: StaticSparse: ratio " + FRACTION.format(alt, "'0.5'")
    assert got["static_dict"] == "ValueError: StaticSparse: ratio['fc'] " + FRACTION.format("", "1.5")
    assert got["static_ok"] == "accepted"
    assert got["dynamic_str"] == "TypeError: DynamicSparse: lambda_min " + FRACTION.format("", "'0.1'")
    assert got["dynamic_order"] == ("ValueError: DynamicSparse: lambda_min must be <= lambda_max (the fewest "
                                    "and the most channels kept), got 0.6 > 0.3")
    assert got["step0"] == "ValueError: StepLR: step must be an int >= 1 (epochs between two decays), got 0"
    assert got["gamma_none"] == ("TypeError: StepLR: gamma must be a number in (0, 1] (the factor of each "
                                 "decay), got None")
    assert got["cosine_neg"] == ("ValueError: Cosine: lr_min must be a finite number >= 0 (the last epoch's "
                                 "rate), got -0.1")
    assert got["replay_seed"] == "ValueError: Replay: seed must be an int, got '1'"
    assert got["trainer_sparse"].startswith("TypeError: Trainer: sparse must be None, DynamicSparse(...) or "
                                            "StaticSparse(...)")
    assert got["wr_native"] == got["wr_pure"] == "ValueError: " + WR, (got["wr_native"], got["wr_pure"])
    assert got["model_unchanged"] is True
