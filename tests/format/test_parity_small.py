"""Fast parity checks on real data (the full run is ``make parity``), and the dataset loaders.

Small reference models are trained for a moment on real Fashion-MNIST images
and smartwatch windows, converted, and run inside the real ``micropython`` by
the parity runner; the int8 outputs must equal the numpy oracle's bit for bit.
The parity statistics are checked against a direct recomputation, and a
deliberately changed weight must be caught and located at its layer.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from evals.accuracy import parity as par
from evals.lib import datasets as ds
from evals.lib import refmodels as rm
from microtrain_tools import convert as cv
from microtrain_tools import mtm
from support.harness import ensure_natmod

N_FMNIST = 300
N_HAR = 200


# --------------------------------------------------------------------------
# dataset loaders


def test_fashion_mnist_shapes() -> None:
    for split, n in (("train", 60000), ("test", 10000)):
        x, y = ds.fashion_mnist(split)
        assert x.shape == (n, 1, 28, 28) and x.dtype == np.float32
        assert y.shape == (n,) and y.dtype == np.int64
        assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0 and float(x.max()) > 0.99
        assert np.array_equal(np.bincount(y, minlength=10), np.full(10, n // 10))  # balanced classes
        # pixel values are k / 255 exactly as float32
        k = np.rint(x[:50] * 255)
        assert np.array_equal((k / np.float32(255)).astype(np.float32), x[:50])


def test_fashion_mnist_missing_says_make_setup(tmp_path: Path) -> None:
    with pytest.raises(ds.DatasetMissing, match="make setup"):
        ds.fashion_mnist("test", root=tmp_path)
    with pytest.raises(ValueError):
        ds.fashion_mnist("validation")


def test_mnist5k_shapes_and_split() -> None:
    x, y = ds.mnist5k()
    assert x.shape == (5000, 1, 28, 28) and x.dtype == np.float32 and y.dtype == np.int64
    assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0 and set(np.unique(y)) == set(range(10))
    xtr, ytr, xte, yte = ds.mnist5k_split()
    assert xtr.shape == (4000, 1, 28, 28) and xte.shape == (1000, 1, 28, 28)
    assert ytr.shape == (4000,) and yte.shape == (1000,)
    again = ds.mnist5k_split()
    assert np.array_equal(again[0], xtr) and np.array_equal(again[3], yte)  # deterministic
    other = ds.mnist5k_split(seed=1)
    assert not np.array_equal(other[1], ytr)  # the seed matters
    # train and test partition the 5,000 rows: the multisets of (image, label) rows add up
    rows = {(xi.tobytes(), int(yi)) for xi, yi in zip(x, y, strict=True)}
    split_rows = [(xi.tobytes(), int(yi)) for xi, yi in zip(np.concatenate([xtr, xte]),
                                                            np.concatenate([ytr, yte]), strict=True)]
    assert len(split_rows) == 5000 and set(split_rows) == rows


def test_watch_windows_shapes_order_and_normalisation() -> None:
    recs, y_rec, s_rec = ds.watch_recordings()
    w = ds.watch_windows(window=128, stride=64)
    n_expected = sum((len(r) - 128) // 64 + 1 for r in recs)
    assert w.x.shape == (n_expected, 6, 128) and w.x.dtype == np.float32
    for a in (w.y, w.subject, w.recording, w.start, w.order):
        assert a.shape == (n_expected,) and a.dtype == np.int64
    # window content: the raw samples, standardised with the pretraining subjects' statistics only
    pre_raw = np.concatenate([r for r, s in zip(recs, s_rec, strict=True) if s in ds.PRETRAIN_SUBJECTS])
    mean, std = pre_raw.mean(0), pre_raw.std(0)
    for i in (0, n_expected // 2, n_expected - 1):
        raw = recs[w.recording[i]][w.start[i]:w.start[i] + 128]
        np.testing.assert_allclose(w.x[i], ((raw - mean) / std).T, rtol=1e-5, atol=1e-5)
        assert w.y[i] == y_rec[w.recording[i]] and w.subject[i] == s_rec[w.recording[i]]
    # order: a permutation per subject, increasing with time inside each recording
    for s in np.unique(w.subject):
        idx = np.flatnonzero(w.subject == s)
        assert np.array_equal(np.sort(w.order[idx]), np.arange(len(idx)))
    for r in np.unique(w.recording):
        idx = np.flatnonzero(w.recording == r)
        by_start = idx[np.argsort(w.start[idx])]
        assert np.all(np.diff(w.order[by_start]) > 0)
    pre, held = ds.watch_split(w)
    assert len(pre) + len(held) == n_expected and not set(pre) & set(held)
    assert set(w.subject[held]) == set(ds.HELD_OUT_SUBJECTS) and len(set(w.subject[pre])) == 8
    key = w.subject[held] * 100000 + w.order[held]
    assert np.all(np.diff(key) > 0)  # held-out windows sorted by (subject, order)


# --------------------------------------------------------------------------
# small models, device vs oracle


def _brief_fmnist() -> tuple[rm.FmnistCNN, np.ndarray, np.ndarray, np.ndarray]:
    torch.set_num_threads(2)
    x, y = ds.fashion_mnist("train")
    model = rm.FmnistCNN()
    cfg = rm.TrainConfig("test", epochs=2, batch=64, lr=3e-3, weight_decay=0.0, seed=0)
    rm.train_classifier(model, x[:2000], y[:2000], cfg, "brief fmnist", progress=False)
    xt, yt = ds.fashion_mnist("test")
    return model, x[2000:2500], xt[:N_FMNIST], yt[:N_FMNIST]


def _brief_har() -> tuple[rm.HarResCNN, np.ndarray, np.ndarray, np.ndarray]:
    torch.set_num_threads(2)
    w = ds.watch_windows()
    pre, held = ds.watch_split(w)
    model = rm.HarResCNN()
    cfg = rm.TrainConfig("test", epochs=2, batch=128, lr=5e-3, weight_decay=0.0, seed=0)
    rm.train_classifier(model, w.x[pre], w.y[pre], cfg, "brief har", progress=False)
    h = held[:N_HAR]
    return model, w.x[pre[:300]], w.x[h], w.y[h]


@pytest.fixture(scope="module")
def small_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[rm.RefModel, np.ndarray,
                                                                              np.ndarray]]:
    ensure_natmod()
    d = tmp_path_factory.mktemp("parity")
    out = {}
    for name, make in (("fmnist", _brief_fmnist), ("har", _brief_har)):
        model, calib, x, y = make()
        path = d / f"{name}.mtm"
        cv.convert_to_file(model, calib, path, method="percentile", progress=False)
        out[name] = (rm.RefModel(name, model, d / f"{name}.pt", path, {}), x, y)
    return out


@pytest.mark.parametrize("name", ["fmnist", "har"])
def test_device_equals_oracle_and_stats(name: str, small_models, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ref, x, y = small_models[name]
    res = par.evaluate(name, ref, x, y, tmp_path, heapsize="256k", progress=False)
    assert res.device.get("native") == 1 and res.device.get("n") == len(y)
    assert res.bitexact == len(y), res.divergence

    # the same outputs again through the lower-level pieces: device == oracle row by row
    m = mtm.read(ref.mtm.read_bytes())
    q = cv.quantize_input(m, x)
    dev, _ = par.run_device(ref.mtm, q, tmp_path, name + "-raw", progress=False)
    ora = cv.run_mtm(m, x)  # float input path: quantises inside
    assert dev.dtype == np.int8 and dev.shape == ora.shape == (len(y), m.tensors[m.output].numel)
    assert np.array_equal(dev, ora)

    # statistics recomputed directly: float from the torch module, int8 from the oracle outputs
    with torch.no_grad():
        f_pred = ref.model.eval()(torch.from_numpy(x)).numpy().argmax(1)
    i_pred = [max(range(ora.shape[1]), key=lambda k, r=row: (int(r[k]), -k)) for row in ora]  # first max
    n = len(y)
    assert res.n == n
    assert res.agree == pytest.approx(sum(int(a == b) for a, b in zip(i_pred, f_pred, strict=True)) / n)
    assert res.float_acc == pytest.approx(sum(int(a == b) for a, b in zip(f_pred, y, strict=True)) / n)
    assert res.int8_acc == pytest.approx(sum(int(a == b) for a, b in zip(i_pred, y, strict=True)) / n)
    assert res.oracle_acc == res.int8_acc
    assert res.summary() == (f"{name} agree={res.agree:.4f} float_acc={res.float_acc:.4f} "
                             f"int8_acc={res.int8_acc:.4f} bitexact={n}/{n}")


def test_changed_weight_is_caught_at_its_layer(small_models, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A model file whose 'pw' weights differ must fail bit-exactness, located at layer 'pw'."""
    ref, x, _ = small_models["fmnist"]
    m = mtm.read(ref.mtm.read_bytes())
    q = cv.quantize_input(m, x[:40])
    ora = cv.run_mtm(m, q)
    pw = m.layer("pw")
    w = m.tensors[pw.weight]
    assert w.data is not None
    w.data = np.clip(w.data.astype(np.int16) + 3, -127, 127).astype(np.int8)
    bad = tmp_path / "changed.mtm"
    mtm.save(m, bad)
    dev, _ = par.run_device(bad, q, tmp_path, "changed", progress=False)
    same = par.bitexact_rows(dev, ora)
    assert not same.all()
    first = int(np.flatnonzero(~same)[0])
    # the oracle of the *original* file differs from the device at 'pw' first (earlier layers agree)
    original = mtm.read(ref.mtm.read_bytes())
    dev_layers = par.device_layer_outputs(bad, q[first], tmp_path)
    ref_layers = par.oracle_layer_outputs(original, q[first])
    names = [ly.name for ly in m.layers]
    first_bad = next(i for i, (d, r) in enumerate(zip(dev_layers, ref_layers, strict=True))
                     if not np.array_equal(d, r))
    assert names[first_bad] == "pw"
    msg = par.first_divergence(bad, q[first], tmp_path, reference=original)
    assert msg.startswith(f"layer {first_bad} 'pw' (CONV2D)"), msg
    assert "not reproducible" in par.first_divergence(bad, q[first], tmp_path)  # same file: no difference
    # and the device's own dump of the changed file equals the oracle run on the changed file
    for d, r in zip(dev_layers, par.oracle_layer_outputs(m, q[first]), strict=True):
        assert np.array_equal(d, r)


def test_snapped_layer_converts_exactly(small_models) -> None:  # type: ignore[no-untyped-def]
    """After snap_to_int8_grid, the converted int8 weights times their scales are the float weights."""
    ref, x, _ = small_models["fmnist"]
    model = copy.deepcopy(ref.model)
    before = model.conv1.weight.detach().clone()
    rm.snap_to_int8_grid(model.conv1)
    after = model.conv1.weight.detach()
    assert not torch.equal(before, after)  # the brief training did not land on the grid by itself
    m = cv.convert(model, x[:100], progress=False)
    ly = m.layer("conv1")
    q = m.data(ly.weight).astype(np.float64)  # OHWI
    s = m.data(m.tensors[ly.weight].qscales).astype(np.float64)
    w = after.numpy().astype(np.float64).transpose(0, 2, 3, 1)  # OIHW -> OHWI
    np.testing.assert_allclose(q * s[:, None, None, None], w, rtol=1e-6, atol=0)
    # and without snapping the same conversion is not exact
    m0 = cv.convert(ref.model, x[:100], progress=False)
    q0 = m0.data(m0.layer("conv1").weight).astype(np.float64)
    s0 = m0.data(m0.tensors[m0.layer("conv1").weight].qscales).astype(np.float64)
    w0 = before.numpy().astype(np.float64).transpose(0, 2, 3, 1)
    assert np.abs(q0 * s0[:, None, None, None] - w0).max() > 1e-4 * np.abs(w0).max()



def test_snapped_layer_with_batchnorm_converts_exactly(small_models) -> None:  # type: ignore[no-untyped-def]
    """snap_to_int8_grid(conv2, bn2): the converter's folded int8 weights times their scales are the
    folded float weights W * gamma / sqrt(var + eps)."""
    ref, x, _ = small_models["fmnist"]
    model = copy.deepcopy(ref.model)
    rm.snap_to_int8_grid(model.conv2, model.bn2)
    bn = model.bn2
    f = (bn.weight.detach().double() / torch.sqrt(bn.running_var.double() + bn.eps)).numpy()
    w = model.conv2.weight.detach().double().numpy() * f[:, None, None, None]
    m = cv.convert(model, x[:100], progress=False)
    ly = m.layer("conv2")
    q = m.data(ly.weight).astype(np.float64)  # OHWI
    s = m.data(m.tensors[ly.weight].qscales).astype(np.float64)
    np.testing.assert_allclose(q * s[:, None, None, None], w.transpose(0, 2, 3, 1), rtol=1e-6, atol=0)
    # and without snapping the same conversion is not exact
    f0 = (ref.model.bn2.weight.detach().double() / torch.sqrt(ref.model.bn2.running_var.double()
                                                               + ref.model.bn2.eps)).numpy()
    w0 = ref.model.conv2.weight.detach().double().numpy() * f0[:, None, None, None]
    m0 = cv.convert(ref.model, x[:100], progress=False)
    ly0 = m0.layer("conv2")
    q0 = m0.data(ly0.weight).astype(np.float64)
    s0 = m0.data(m0.tensors[ly0.weight].qscales).astype(np.float64)
    w0 = w0.transpose(0, 2, 3, 1)
    assert np.abs(q0 * s0[:, None, None, None] - w0).max() > 1e-4 * np.abs(w0).max()


def test_snap_epoch_freezes_batchnorm() -> None:
    """train_snapped with "conv2+bn2": bn2's running stats and gamma and conv2's weight do not move in
    the snapped epoch (the fold stays on the grid), while the layers after it do."""
    torch.set_num_threads(2)
    x, y = ds.fashion_mnist("train")
    model = rm.FmnistCNN()
    cfg = rm.TrainConfig("test", epochs=1, batch=64, lr=3e-3, weight_decay=1e-4, seed=0,
                         snap="conv2+bn2", snap_epochs=1, snap_lr=1e-3)
    first = copy.deepcopy(model)
    rm.train_classifier(first, x[:1000], y[:1000], cfg, "brief", progress=False)
    rm.snap_to_int8_grid(first.conv2, first.bn2)
    rm.train_snapped(model, x[:1000], y[:1000], cfg, "brief", progress=False)
    for name in ("conv2.weight", "bn2.weight", "bn2.running_mean", "bn2.running_var"):
        assert torch.equal(model.state_dict()[name], first.state_dict()[name]), name
    assert not torch.equal(model.fc1.weight, first.fc1.weight)
    assert all(p.requires_grad for p in model.parameters())

def test_bars_and_bitexact_count() -> None:
    rng = np.random.default_rng(0)
    ref = rng.integers(-128, 128, size=(50, 10), dtype=np.int8)
    dev = ref.copy()
    dev[7, 3] ^= 1
    dev[31, 0] ^= 64
    same = par.bitexact_rows(dev, ref)
    assert int(same.sum()) == 48 and list(np.flatnonzero(~same)) == [7, 31]
    ok = par.ModelResult("m", 1000, 0.90, 0.897, 0.897, 0.991, 1000, 1)
    assert ok.failures() == []
    assert len(par.ModelResult("m", 1000, 0.90, 0.897, 0.897, 0.989, 1000, 1).failures()) == 1
    assert len(par.ModelResult("m", 1000, 0.90, 0.894, 0.894, 0.995, 1000, 1).failures()) == 1
    assert len(par.ModelResult("m", 1000, 0.90, 0.90, 0.90, 0.995, 999, 1, mismatches=[4]).failures()) == 1


def test_cli_help() -> None:
    r = subprocess.run([sys.executable, "-m", "evals.accuracy.parity", "--help"], capture_output=True,
                       text=True, check=False, env={**os.environ, "PYTHONPATH": str(par.ROOT / "tools")})
    assert r.returncode == 0 and "bitexact" in r.stdout and "--limit" in r.stdout
