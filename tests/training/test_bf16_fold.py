"""A bfloat16 SGD momentum taking the gradients itself (Trainer sums=False with
SGD(state='bf16'); backward.IntoMomentum with halfwin.HalfWindow), in the real micropython
binary with the natmod:

- each sample's gradient goes through a float32 window of a few output channels into v,
  v = bf16(ftz(a v) + g) (a = m at a batch's first sample, else 1), and the step widens v into
  the window (a = 1, or m where no gradient came) before update_s8_apply: the device equals
  the numpy reference bit for bit (losses, weights, scales, biases, masters, the state), at
  batch 1 (with a sparse policy too) and at larger batches, also stopped mid-batch;
- those are not the bits of the bfloat16 state with gradient sums (the reference really folds);
- the Trainer keeps no gradient sums then; its window lives in the idle forward buffers where
  they have room (a frozen prefix), else in a buffer of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.training_cases import (
    DYN,
    SGDM,
    Setup,
    device,
    differences,
    labels_of,
    reference,
    state_of,
)

BF16 = {**SGDM, "state": "bf16"}
# (model, train, mode, optimiser, sparse policy, batch, steps, flush at the end)
CONFIGS: list[tuple[str, Any, str, dict[str, Any], dict[str, Any] | None, int, int, bool]] = [
    ("cnn", "all", "mixed", BF16, None, 4, 38, True),
    ("cnn", "all", "mixed", BF16, None, 4, 38, False),
    ("res", "all", "int8", {**BF16, "rounding": "stochastic"}, None, 3, 40, True),
    ("cnn", "all", "int8", BF16, None, 1, 16, True),
    # a frozen prefix: the window lives in forward buffers idle during backward (each forward
    # writes over it), and fc1's channels take several windows
    ("cnn", "last:2", "mixed", BF16, None, 4, 30, True),
    ("res", "all", "int8", BF16, DYN, 1, 20, True),
]


def _id(c: tuple[Any, ...]) -> str:
    return (f"{c[0]}-{c[1].replace(':', '')}-{c[2]}-{c[3].get('rounding', 'auto')}-"
            f"{'dense' if c[4] is None else 'sparse'}-b{c[5]}" + ("" if c[7] else "-midbatch"))


@pytest.mark.parametrize("config", CONFIGS, ids=[_id(c) for c in CONFIGS])
def test_bf16_momentum_takes_the_gradients_bit_exact(setups: dict[str, Setup], tmp_path: Path,
                                                     config: tuple[Any, ...]) -> None:
    name, train, mode, opt, sparse, batch, steps, flush = config
    s = setups[name]
    kw: dict[str, Any] = dict(order=range(steps), labels=labels_of(s), train=train, mode=mode, opt=opt,
                              sparse=sparse, batch=batch, sums=False)
    dev = device(s, tmp_path, "half", flush=flush, **kw)
    ref = reference(s, flush=flush, **kw)
    assert ref.fold and ref.half and not ref.sums
    assert dev["loss"].tolist() == ref.losses, "per-step losses differ"
    diffs = differences(ref.arrays(), state_of(dev))
    assert not diffs, "\n".join(diffs)
    assert int(dev["train_steps"][0]) == ref.train_steps == steps // batch + (flush and steps % batch > 0)
    assert not any(k.endswith((".gw", ".gb")) for k in dev), "no gradient sums"
    assert any(k.endswith(".st0") for k in dev), "the state is compared"
    # not the bits of the bfloat16 state with gradient sums
    sums = reference(s, flush=flush, **{**kw, "sums": True})
    assert differences({k: v for k, v in sums.arrays().items() if not k.endswith((".gw", ".gb"))},
                       ref.arrays())
