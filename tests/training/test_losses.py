"""Device losses beyond cross-entropy: mean squared error, binary cross-entropy, a user's loss.

A small digits autoencoder (64-32-8-32-64, ReLU) is trained in PyTorch on the digits 0-4 and
converted. On the device (the real ``micropython``) ``Trainer(loss="mse" | "bce")`` must equal
the training reference bit for bit (float and int8 targets), a user's callable loss must run
through the same path, and MSE fine-tuning on the digits 5-9 at lr 0.02 must track the same
protocol in PyTorch.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from microtrain_tools import convert as cv
from microtrain_tools import mtm
from support import training_cases as tc
from support.harness import ensure_natmod, run_micropython

N = 400  # fine-tuning samples (digits 5-9)
SGD = {"kind": "sgd", "lr": 0.02}


def _ae() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8), nn.ReLU(), nn.Linear(8, 32),
                         nn.ReLU(), nn.Linear(32, 64))


@pytest.fixture(scope="module")
def ae(tmp_path_factory: pytest.TempPathFactory) -> tuple[tc.Setup, nn.Module, torch.Tensor, Path, Path]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    perm = np.random.default_rng(0).permutation(len(x))
    x, y = x[perm], d.target[perm]
    pre, post = x[y < 5], x[y >= 5]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        net = _ae()
        opt = torch.optim.Adam(net.parameters(), 1e-2)
        for _ in range(30):
            for idx in torch.randperm(len(pre)).split(64):
                opt.zero_grad()
                nn.functional.mse_loss(net(pre[idx]), pre[idx]).backward()
                opt.step()
    finally:
        torch.set_num_threads(threads)
    net.eval()
    work = tmp_path_factory.mktemp("ae")
    path = work / "ae.mtm"
    cv.convert_to_file(net, pre[:256], path, progress=False)
    m = mtm.load(path)
    tr_x = post[:N]
    xs = cv.quantize_input(m, tr_x)
    samples, tf, tb = work / "ae-x.bin", work / "ae-tf.bin", work / "ae-tb.bin"
    xs.tofile(samples)
    tr_x.numpy().astype(np.float32).tofile(tf)
    out = m.tensors[m.output]  # int8 targets: the inputs in the output's own quantisation
    np.clip(np.rint(tr_x.numpy() / out.scale) + out.zero_point, -128, 127).astype(np.int8).tofile(tb)
    setup = tc.Setup("ae", path, m, xs, np.zeros(N, dtype=np.int64), xs, np.zeros(N, dtype=np.int64), samples,
                     samples)
    return setup, net, tr_x, tf, tb


def _targets(kind: str, tf: Path, tb: Path) -> tuple[dict[str, Any], list[Any]]:
    if kind == "f":
        t = np.fromfile(tf, dtype=np.float32).reshape(N, 64)
        return {"path": str(tf), "n": 64, "kind": "f"}, list(t)
    t8 = np.fromfile(tb, dtype=np.int8).reshape(N, 64)
    return {"path": str(tb), "n": 64, "kind": "b"}, [bytes(r.tobytes()) for r in t8]


@pytest.mark.parametrize("loss,tkind,train,mode,batch", [
    ("mse", "f", "last:2", "mixed", 4), ("mse", "b", "all", "int8", 3), ("bce", "f", "all", "float32", 2),
    ("bce", "b", "last:1", "int8", 1)])
def test_loss_bitexact_vs_reference(ae: tuple[tc.Setup, nn.Module, torch.Tensor, Path, Path], tmp_path: Path,
                                    loss: str, tkind: str, train: str, mode: str, batch: int) -> None:
    s, _, _, tf, tb = ae
    ensure_natmod()
    tg, targets = _targets(tkind, tf, tb)
    if loss == "bce" and tkind == "b":  # 0 / 1 targets as int8
        t01 = (np.fromfile(tf, dtype=np.float32).reshape(N, 64) > 0.5).astype(np.int8)
        path = tmp_path / "t01.bin"
        t01.tofile(path)
        tg, targets = {"path": str(path), "n": 64, "kind": "b"}, [bytes(r.tobytes()) for r in t01]
    order = list(range(30))
    dev = tc.device(s, tmp_path, "loss", order=order, labels=[0] * N, train=train, mode=mode, opt=tc.SGDM,
                    batch=batch, loss=loss, targets=tg)
    ref = tc.tr.RefTrainer(s.m, train, mode, tc.ref_opt(tc.SGDM), None, batch, loss=loss)
    for i in order:
        ref.step(s.xs[i], targets[i])
    ref.flush()
    assert np.array_equal(np.asarray(ref.losses), dev["loss"]), (ref.losses[:3], dev["loss"][:3])
    assert not tc.differences(ref.arrays(), tc.state_of(dev))


def _torch_finetune(net: nn.Module, x: torch.Tensor, lr: float, epochs: int, batch: int) -> list[float]:
    """The device protocol in PyTorch: SGD on the last two Linear layers, mean MSE per batch."""
    t = copy.deepcopy(net).train()
    params = [p for m in list(t)[-3:] for p in m.parameters()]
    opt = torch.optim.SGD(params, lr=lr)
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(epochs):
        tot = 0.0
        for idx in torch.randperm(len(x), generator=g).split(batch):
            opt.zero_grad()
            loss = nn.functional.mse_loss(t(x[idx]), x[idx])
            loss.backward()
            opt.step()
            tot += float(loss.detach()) * len(idx)
        out.append(tot / len(x))
    return out


def test_autoencoder_mse_tracks_pytorch(ae: tuple[tc.Setup, nn.Module, torch.Tensor, Path, Path],
                                        tmp_path: Path) -> None:
    s, net, tr_x, tf, tb = ae
    ensure_natmod()
    tg, _ = _targets("f", tf, tb)
    dev = tc.device(s, tmp_path, "ae-fit", order=list(range(N)), labels=[0] * N, train="last:2", mode="mixed",
                    opt=SGD, batch=8, loss="mse", targets=tg, fit={"epochs": 5, "shuffle": True, "seed": 1})
    want = _torch_finetune(net, tr_x, 0.02, 5, 8)
    got = [float(v) for v in dev["loss"]]
    assert all(b < a for a, b in zip(got, got[1:], strict=False)), f"device losses {got}"
    assert abs(got[-1] - want[-1]) <= 0.05 * want[-1], f"device {got}, PyTorch {want}"


USER_LOSS = """
import sys
from array import array
import microtrain as mt

def l1(model, target, out):
    # a user's loss: mean absolute error, its int8 error the sign of (y - t)
    o = model.output
    err, _ = mt.loss.loss_buffers(model, len(out))
    loss = 0.0
    for i in range(len(out)):
        q = out[i] - 256 if out[i] > 127 else out[i]
        d = o.scale * (q - o.zero_point) - target[i]
        loss += abs(d)
        err[i] = 1 if d > 0 else (-1 if d < 0 else 0)
    return loss / len(out), err, 1.0 / len(out)

def run(loss, n):
    m = mt.load(sys.argv[1])
    raw = open(sys.argv[2], 'rb').read()
    t = array('f', open(sys.argv[3], 'rb').read())
    tr = mt.Trainer(m, train='last:2', optimizer=mt.SGD(lr=0.02), batch=4, loss=loss)
    losses = []
    for ep in range(3):
        tot = 0.0
        for i in range(n):
            tot += tr.step(raw[i * 64:(i + 1) * 64], t[i * 64:(i + 1) * 64])
        tr.flush()
        losses.append(tot / n)
    return losses

print('builtin', *run('mse', 60))
print('callable', *run(lambda m, t, o: mt.mse(m, t, o), 60))
print('l1', *run(l1, 60))
"""


def test_user_loss_callable(ae: tuple[tc.Setup, nn.Module, torch.Tensor, Path, Path], tmp_path: Path) -> None:
    s, _, _, tf, _ = ae
    ensure_natmod()
    script = tmp_path / "user_loss.py"
    script.write_text(USER_LOSS)
    p = run_micropython(script, [str(s.path), str(s.samples), str(tf)], timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = {ln.split()[0]: [float(v) for v in ln.split()[1:]] for ln in p.stdout.splitlines()}
    assert rows["callable"] == rows["builtin"]  # the same path as loss="mse", bit for bit
    assert rows["l1"][-1] < rows["l1"][0], rows["l1"]


def test_bad_loss_and_target() -> None:
    p = run_micropython("import microtrain as mt\n"
                        "try:\n    mt.Trainer(None, loss='huber')\nexcept ValueError as e:\n    print(e)\n")
    assert "loss must be 'xent', 'mse', 'bce' or a callable" in p.stdout, p.stdout + p.stderr
