"""`microtrain to-torch`: .mtm (model or device checkpoint) -> PyTorch state_dict.

Two models are trained for a few seconds on scikit-learn's real handwritten digits
(a 2-D CNN with BatchNorm, a bias-less depthwise conv and a flatten into a linear; a
1-D CNN with BatchNorm, a residual add and a flatten of a (C, L) signal into a linear),
converted with convert.py, and turned back into state_dicts by the real `microtrain`
entry point in a subprocess. The state_dict must load strictly into a fresh instance of
the class, hold exactly the dequantised file weights (checked through the converter's
own forward layout transform), and the float model must predict what the int8 oracle
(run_mtm) predicts. A simulated device checkpoint (changed weights, TRAINED flag, float32
master copies) proves the weights come from the file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from microtrain_tools import convert as cv
from microtrain_tools import mtm
from microtrain_tools.mtm import DType, Kind, Op, Quant, Tensor
from microtrain_tools.reference import oracle as o
from support.harness import ROOT
from support.torch_models import train_quick

N_TRAIN, N_TEST = 1200, 300


class DigitsCnn(nn.Module):
    """conv-bn-relu, depthwise (no bias) -bn-relu6, pointwise (no bias, no BN), pool, flatten, linears."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
            nn.Conv2d(8, 12, 1, bias=False), nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.fc1 = nn.Linear(12 * 4 * 4, 24)
        self.fc2 = nn.Linear(24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(torch.flatten(self.features(x), 1))))


class Res1dNet(nn.Module):
    """Conv1d-bn-relu, Conv1d(no bias)-bn, residual add, relu, pool, strided conv, flatten (C, L), linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(8, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm1d(16)
        self.conv2 = nn.Conv1d(16, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm1d(16)
        self.pool = nn.MaxPool1d(2)
        self.conv3 = nn.Conv1d(16, 12, 3, stride=2, padding=1)
        self.fc = nn.Linear(12 * 2, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.bn1(self.conv1(x)))
        c = torch.relu(a + self.bn2(self.conv2(a)))
        c = torch.relu(self.conv3(self.pool(c)))
        return self.fc(c.flatten(1))


@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images / 16.0, dtype=torch.float32)[:, None]
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(3))
    x, y = x[perm], y[perm]
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:N_TRAIN + N_TEST], y[N_TRAIN:N_TRAIN + N_TEST]


def _as_input(cls: type, x: torch.Tensor) -> torch.Tensor:
    return x[:, 0] if cls is Res1dNet else x  # 1-D: 8 rows as channels, 8 columns as time


@pytest.fixture(scope="module", params=[DigitsCnn, Res1dNet], ids=["cnn2d", "res1d"])
def converted(request, digits, tmp_path_factory):  # type: ignore[no-untyped-def]
    cls = request.param
    torch.manual_seed(1)
    xtr, ytr, _, _ = digits
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model: one thread is fastest, and the machine is shared
    try:
        model = train_quick(cls(), _as_input(cls, xtr), ytr, epochs=10)
    finally:
        torch.set_num_threads(threads)
    d = tmp_path_factory.mktemp(cls.__name__)
    torch.save(model.state_dict(), d / "base.pt")
    path = d / "model.mtm"
    cv.convert_to_file(model, _as_input(cls, xtr[:256]), path, progress=False)
    return cls, model, path, d


def _microtrain(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    here = Path(__file__).resolve().parent  # --module test_to_torch:Class
    env["PYTHONPATH"] = os.pathsep.join([str(here), str(ROOT / "tests"), str(ROOT / "tools")])
    return subprocess.run([sys.executable, "-m", "microtrain_tools.cli", *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


def _to_torch(path: Path, cls: type, out: Path, *extra: str) -> dict[str, torch.Tensor]:
    r = _microtrain("to-torch", str(path), "--module", f"test_to_torch:{cls.__name__}", "-o", str(out),
                    *extra)
    assert r.returncode == 0, r.stderr
    return torch.load(out, weights_only=True)


def _forward_layout(mod: nn.Module, w: np.ndarray, in_shape: tuple[int, ...]) -> np.ndarray:
    """The converter's PyTorch -> file weight layout (convert.py), applied to a torch weight."""
    if isinstance(mod, nn.Conv1d):
        return w[:, :, None, :].transpose(0, 2, 3, 1)
    if isinstance(mod, nn.Conv2d):
        return w.transpose(0, 2, 3, 1)
    if len(in_shape) == 3:
        h, ww, c = in_shape
        return w.reshape(w.shape[0], c, h, ww).transpose(0, 2, 3, 1).reshape(w.shape[0], -1)
    return w


def _check_weights(m: mtm.Model, module: nn.Module) -> None:
    """Every conv/linear weight is float32(s[o]) * q of the file; biases s_in * s_w * q_b; BN identity."""
    mods = dict(module.named_modules())
    n_bn = 0
    for ly in m.layers:
        if ly.op not in (Op.CONV2D, Op.LINEAR):
            continue
        mod = mods[ly.name]
        w_t = mod.weight.detach().numpy()
        assert w_t.dtype == np.float32
        q = m.data(ly.weight)
        s = m.data(m.tensors[ly.weight].qscales).astype(np.float32)
        expect = np.float32(s.reshape((-1,) + (1,) * (q.ndim - 1))) * q.astype(np.float32)
        got = _forward_layout(mod, w_t, m.tensors[ly.inputs[0]].shape)
        assert got.shape == q.shape
        np.testing.assert_array_equal(got, expect, err_msg=ly.name)
        s_in = float(np.float32(m.tensors[ly.inputs[0]].scale))
        b_expect = (s_in * s.astype(np.float64) * m.data(ly.bias).astype(np.float64)).astype(np.float32)
        bns = [mods[f] for f in ly.fused.split(",")
               if isinstance(mods.get(f), nn.modules.batchnorm._BatchNorm)]
        if bns:
            bn = bns[0]
            n_bn += 1
            assert torch.all(bn.weight == 1) and torch.all(bn.running_mean == 0)
            np.testing.assert_allclose((bn.running_var + bn.eps).numpy(), 1.0, rtol=1e-6)
        if mod.bias is not None:
            np.testing.assert_array_equal(mod.bias.detach().numpy(), b_expect, err_msg=ly.name)
            if bns:
                assert torch.all(bns[0].bias == 0)
        elif bns:
            np.testing.assert_array_equal(bns[0].bias.detach().numpy(), b_expect, err_msg=ly.name)
        else:  # no bias parameter and nothing to hold one: the converter wrote zeros
            assert not np.any(b_expect), ly.name
    assert n_bn == 2


def _agreement(module: nn.Module, data: bytes | mtm.Model, x: torch.Tensor) -> tuple[float, float]:
    with torch.no_grad():
        ref = module(x).numpy().astype(np.float64)
    deq = cv.dequantize_output(data, cv.run_mtm(data, x))
    agree = float((ref.argmax(1) == deq.argmax(1)).mean())
    err = float(np.abs(ref - deq).mean() / np.abs(deq).mean())
    return agree, err


def test_round_trip_loads_strictly_and_matches_the_file(converted, digits, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cls, model, path, d = converted
    other = Res1dNet if cls is DigitsCnn else DigitsCnn
    with ThreadPoolExecutor(max_workers=2) as ex:  # and, concurrently, the wrong class for this file
        wrong = ex.submit(_microtrain, "to-torch", str(path), "--module", f"test_to_torch:{other.__name__}",
                          "-o", str(tmp_path / "wrong.pt"))
        sd = _to_torch(path, cls, tmp_path / "out.pt")
    first = next(ly.name for ly in mtm.load(path).layers if ly.op in (Op.CONV2D, Op.LINEAR))
    _assert_one_line_error(wrong.result(), f"layer '{first}'")
    assert not (tmp_path / "wrong.pt").exists()
    fresh = cls()
    fresh.load_state_dict(sd, strict=True)
    fresh.eval()
    m = mtm.load(path)
    _check_weights(m, fresh)
    x = _as_input(cls, digits[2])
    agree, err = _agreement(fresh, path.read_bytes(), x)
    acc = float((fresh(x).argmax(1) == digits[3]).float().mean())
    print(f"{cls.__name__}: agree={agree:.3f} rel_err={err:.4f} acc={acc:.3f}")
    assert acc > 0.9, "the model did not train"
    assert agree >= 0.97
    assert err < 0.08


def _device_checkpoint(m: mtm.Model, seed: int) -> tuple[mtm.Model, dict[str, np.ndarray]]:
    """A checkpoint as the device would write it: last layer's int8 weights, bias and scales
    changed, TRAINED flags, and float32 master copies (STATE) of that layer."""
    rng = np.random.default_rng(seed)
    ly = [x for x in m.layers if x.op == Op.LINEAR][-1]
    w = np.array(m.data(ly.weight))
    w = np.clip(w + rng.integers(-20, 21, size=w.shape), -127, 127).astype(np.int8)
    m.tensors[ly.weight].data = w
    qs = m.tensors[ly.weight].qscales
    m.tensors[qs].data = (m.data(qs) * rng.uniform(0.8, 1.25, size=m.data(qs).shape)).astype(np.float32)
    s_in, s_out = float(np.float32(m.tensors[ly.inputs[0]].scale)), float(m.tensors[ly.output].scale)
    mult, shift = zip(*(o.quantize_multiplier(s_in * float(s) / s_out) for s in m.data(qs)), strict=True)
    m.tensors[ly.mult].data = np.array(mult, dtype=np.int32)  # requantisation refit, as the device does
    m.tensors[ly.shift].data = np.array(shift, dtype=np.int32)
    m.tensors[ly.bias].data = (m.data(ly.bias) + rng.integers(-500, 501, size=m.data(ly.bias).shape)
                               ).astype(np.int32)
    master_w = (m.data(qs)[:, None] * w.astype(np.float32) + rng.normal(0, 1e-3, w.shape)).astype(np.float32)
    master_b = (s_in * m.data(qs).astype(np.float64) * m.data(ly.bias) + 0.01).astype(np.float32)
    m.has_state = m.trained = True
    m.train_steps = 17
    ly.trained = True
    for slot, arr in ((0, master_w), (1, master_b)):
        m.tensors.append(Tensor(DType.FLOAT32, arr.shape, Kind.STATE, Quant.NONE, data=arr))
        ly.state[slot] = len(m.tensors) - 1
    return m, {"weight": master_w, "bias": master_b, "name": ly.name}  # type: ignore[dict-item]


def test_device_checkpoint_weights_come_from_the_file(converted, digits, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cls, model, path, d = converted
    ck, master = _device_checkpoint(mtm.load(path), seed=5)
    ck_path = tmp_path / "adapted.mtm"
    mtm.save(ck, ck_path)
    with ThreadPoolExecutor(max_workers=2) as ex:  # two independent runs of the entry point
        runs = [ex.submit(_to_torch, ck_path, cls, tmp_path / "adapted.pt", "--state-dict",
                          str(d / "base.pt")),
                ex.submit(_to_torch, ck_path, cls, tmp_path / "master.pt", "--master", "-q")]
        sd, sd_m = (f.result() for f in runs)
    fresh = cls()
    fresh.load_state_dict(sd, strict=True)
    fresh.eval()
    _check_weights(mtm.load(ck_path), fresh)
    name = str(master["name"])
    assert not torch.equal(fresh.get_submodule(name).weight, model.get_submodule(name).weight)
    agree, err = _agreement(fresh, ck, _as_input(cls, digits[2]))
    assert agree >= 0.97 and err < 0.08, (agree, err)
    # --master: the float32 master copies instead of the dequantised int8 weights
    w = sd_m[f"{name}.weight"].numpy()
    in_shape = ck.tensors[ck.layer(name).inputs[0]].shape
    np.testing.assert_array_equal(_forward_layout(nn.Linear(1, 1), w, in_shape), master["weight"])
    np.testing.assert_array_equal(sd_m[f"{name}.bias"].numpy(), master["bias"])


def _assert_one_line_error(r: subprocess.CompletedProcess[str], needle: str) -> None:
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("microtrain to-torch: error:") and needle in err, err


def test_bad_arguments_are_one_line_errors(tmp_path) -> None:
    out = str(tmp_path / "o.pt")
    (tmp_path / "not.mtm").write_bytes(b"PK\x03\x04" + bytes(range(96)))
    good = str(tmp_path / "lin.mtm")
    sd = str(tmp_path / "sd.pt")
    torch.save({"fc.weight": torch.zeros(3, 4)}, sd)
    cv.convert_to_file(nn.Sequential(nn.Linear(4, 3)).eval(), torch.randn(16, 4), good, progress=False)
    cases = [
        (["to-torch", good, "--module", "microtrain_tools.mtm:NoSuchClass", "-o", out], "NoSuchClass"),
        (["to-torch", good, "--module", "microtrain_tools.mtm:Model", "-o", out], "without arguments"),
        (["to-torch", good, "--module", "no_such_package_xyz:Net", "-o", out], "cannot import"),
        (["to-torch", good, "--module", "torch.nn:Identity", "--state-dict", sd, "-o", out],
         "does not fit Identity: 1 unexpected keys (e.g. fc.weight)"),
        (["to-torch", good, "--module", "torch.nn:Identity", "-o", out], "layer '0': the module has no"),
        (["to-torch", str(tmp_path / "missing.mtm"), "--module", "test_to_torch:DigitsCnn", "-o", out],
         "missing.mtm"),
        (["to-torch", str(tmp_path / "not.mtm"), "--module", "test_to_torch:DigitsCnn", "-o", out], "magic"),
        (["to-torch", str(tmp_path / "not.mtm"), "-o", out], "--module"),
    ]
    with ThreadPoolExecutor(max_workers=4) as ex:
        results = list(ex.map(lambda a: _microtrain(*a), [argv for argv, _ in cases]))
    for (_, needle), r in zip(cases, results, strict=True):
        _assert_one_line_error(r, needle)
    assert not (tmp_path / "o.pt").exists()
