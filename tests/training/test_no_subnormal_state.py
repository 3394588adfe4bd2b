"""The optimiser state never sinks through the subnormal range (docs/numerics.md, "Update": the
decay product is flushed to zero).

A small MLP is trained on the unix port with SGD momentum 0.9 (batch 1, into the momentum, and
with gradient sums) and with Adam: one sample reaches every input, then only samples whose first
half of the inputs is 0, so the momentum of those weights only decays (`v = 0.9 v`) for the rest
of the run. Without the flush those values cross the subnormal range between about 750 and 900
steps, at magnitudes spread by their starting values; the device counts subnormal state values
after every step from 600 to 1,000. Checked: that count is 0, and the decayed values did reach
zero (they were not kept up by other gradients). That the run does drive the state there is
checked independently: from the first layer's state after the first step (printed by the device),
numpy decays the dead inputs' values by float32 multiplications without a flush, and must find
subnormals in the checked steps.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from microtrain_tools import convert as cv
from microtrain_tools import mtm
from support.kernel_harness import run_micropython

N_IN, N_HID, N_OUT = 16, 24, 4
STEPS, CHECK_FROM = 1000, 600

SCRIPT = r'''
import sys
import microtrain as mt

path, data, opt_kind, sums = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
steps, check_from, numel = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
raw = open(data, "rb").read()
xs = [raw[i * numel:(i + 1) * numel] for i in range(len(raw) // numel)]
m = mt.load(path)
opt = mt.SGD(lr=0.01, momentum=0.9) if opt_kind == "sgd" else mt.Adam(lr=0.001)
t = mt.Trainer(m, train="all", mode="mixed", optimizer=opt, sums=(None if sums == "none" else True))


def count():
    # subnormal float32 values of the state (exponent bits 0, significand not 0) and zeros
    sub = zero = 0
    for ly in t.layers:
        for a in opt.state_tensors(ly) or ():
            b = bytes(a)
            for i in range(0, len(b), 4):
                if b[i + 3] & 0x7F == 0 and b[i + 2] & 0x80 == 0:
                    if b[i] or b[i + 1] or b[i + 2]:
                        sub += 1
                    else:
                        zero += 1
    return sub, zero


worst = 0
for s in range(steps):
    t.step(xs[0 if s == 0 else 1 + s % (len(xs) - 1)], s % 4)
    if s == 0:
        print("FIRST", bytes(opt.state_tensors(t.layers[0])[0]).hex())
    if s >= check_from:
        worst = max(worst, count()[0])
print("STATE", worst, count()[1])
'''


def _model(tmp: Path) -> tuple[Path, Path]:
    torch.manual_seed(3)
    net = nn.Sequential(nn.Linear(N_IN, N_HID), nn.ReLU(), nn.Linear(N_HID, N_OUT))
    calib = torch.rand(64, N_IN) * 2 - 1
    m = cv.convert(net, calib, progress=False)
    path = tmp / "mlp.mtm"
    mtm.save(m, path)
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (9, N_IN)).astype(np.float32)
    x[1:, : N_IN // 2] = 0.0  # after the first sample these inputs never carry a gradient
    data = tmp / "x.bin"
    cv.quantize_input(mtm.load(path), torch.from_numpy(x)).tofile(data)
    return path, data


@pytest.mark.parametrize("opt,sums", [("sgd", "none"), ("sgd", "true"), ("adam", "true")])
def test_state_never_subnormal(tmp_path: Path, opt: str, sums: str) -> None:
    path, data = _model(tmp_path)
    p = run_micropython(SCRIPT, [str(path), str(data), opt, sums, str(STEPS), str(CHECK_FROM), str(N_IN)],
                        timeout=600)
    assert p.returncode == 0 and "STATE" in p.stdout, p.stdout + p.stderr
    worst, zeros = (int(v) for v in p.stdout.split("STATE")[1].split())
    assert worst == 0, f"{worst} subnormal state values"
    # the dead inputs' weights of the first layer (half its inputs): their state decayed to 0
    assert zeros >= N_HID * N_IN // 2, zeros
    first = np.frombuffer(bytes.fromhex(p.stdout.split("FIRST")[1].split()[0]), np.float32)
    v = first.reshape(N_HID, N_IN)[:, : N_IN // 2].reshape(-1)
    assert np.count_nonzero(v) >= len(v) // 4, "the first sample reached the dead inputs' weights"
    mom = np.float32(0.9)
    unflushed, tiny = 0, np.float32(2.0 ** -126)
    with np.errstate(under="ignore"):
        for s in range(1, STEPS):
            v = (mom * v).astype(np.float32)
            if s >= CHECK_FROM:
                unflushed = max(unflushed, int(np.count_nonzero((v != 0) & (np.abs(v) < tiny))))
    assert unflushed > 0, "without the flush these values would not have been subnormal in the checked steps"
