"""The board's part of a round (python_lib/microtrain/fleet.py) in the host micropython, and the
fleet's data splits: an update for another base model or shape is refused and changes nothing;
a round leaves the global model saved and loadable; the delta decodes to local - global; the
splits hold one person per board and a real label skew."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from evals.accuracy.adapt import ncm_watch
from evals.lib import datasets as ds
from evals.lib import experiments as ex
from evals.lib import fleet_data as fd
from microtrain_tools import fleet_board, fleet_codec, mtm
from microtrain_tools.mtd import write_mtd

CFG = {"model": "model.mtm", "train": "last:2", "mode": "mixed", "lr": 0.05, "momentum": 0.0, "batch": 8,
       "epochs": 1, "keep": 0.5, "seed": 1}


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> tuple[fleet_board.LocalBoard, int, fleet_codec.Arrays]:
    work = tmp_path_factory.mktemp("board")
    ref = ncm_watch.base_model()
    w = ds.watch_windows()
    idx = np.flatnonzero(w.subject == 3)[:48]
    write_mtd(work / "s3.mtd", ex.quantize(ref.mtm, w.x[idx]), w.y[idx])
    b = fleet_board.LocalBoard(work / "b")
    b.deploy(ref.mtm, work / "s3.mtd")
    shutil.copyfile(work / "s3.mtd", b.root / "test.mtd")
    res, data = b.run({**CFG, "command": "export", "global": "g0.bin"}, {}, "g0.bin")
    fp, rnd, arrays = fleet_codec.read_global(data)
    assert (fp, rnd) == (res["fingerprint"], 0)
    return b, fp, arrays


def test_refuses_another_model_or_shape_and_changes_nothing(board: tuple[fleet_board.LocalBoard, int,
                                                                         fleet_codec.Arrays]) -> None:
    b, fp, arrays = board
    bad_shape = dict(arrays)
    first = [k for k in sorted(bad_shape) if k.endswith(".w")][0]
    bad_shape[first] = bad_shape[first][:, :-1].copy()
    nan = {k: v.copy() for k, v in arrays.items()}
    nan[first][0, 0] = np.nan
    for data, why in ((fleet_codec.global_bytes(fp ^ 1, 1, arrays), "another base model"),
                      (fleet_codec.global_bytes(fp, 1, bad_shape), "update shape"),
                      (fleet_codec.global_bytes(fp, 1, nan), "not finite")):
        (b.root / "fleet.mtm").unlink(missing_ok=True)
        with pytest.raises(fleet_board.BoardError, match=why):
            b.round({**CFG, "data": "data.mtd"}, data)
        assert not (b.root / "fleet.mtm").exists() and not (b.root / "delta.bin").exists()


def test_round_saves_the_global_model_and_returns_local_minus_global(
        board: tuple[fleet_board.LocalBoard, int, fleet_codec.Arrays]) -> None:
    b, fp, arrays = board
    shifted = {k: (v * np.float32(0.9)).astype(np.float32) for k, v in arrays.items()}
    res, up = b.round({**CFG, "data": "data.mtd", "keep": 1.0}, fleet_codec.global_bytes(fp, 3, shifted))
    delta = fleet_codec.read_delta(up)
    assert (delta.fingerprint, delta.round, delta.samples, delta.nbytes) == (fp, 3, 48, res["delta_bytes"])
    m = mtm.load(b.root / "fleet.mtm")  # the applied global model, through the host validator
    # its trained layers are the global values requantised: within half a step of each
    for i in fleet_codec.layer_indices(shifted):
        ly = m.layers[i]
        wq = m.tensors[ly.weight].data.astype(np.float64)
        sc = m.tensors[m.tensors[ly.weight].qscales].data.astype(np.float64)
        real = wq.reshape(len(sc), -1) * sc[:, None]
        g = shifted[f"L{i}.w"].astype(np.float64)
        assert np.all(np.abs(real - g) <= 0.5 * sc[:, None] * (1 + 1e-5))
    # every channel sent (keep 1.0), within half an int8 step of its own scale
    for ly in delta.layers:
        assert len(ly.kept) == ly.channels and np.all(np.abs(ly.q) <= 127)
        assert np.abs(ly.q).max() == 127  # the largest change of a changed channel is +-127 steps
    ev, _ = b.run({**CFG, "command": "evaluate", "global": "g.bin", "test": "test.mtd"},
                  {"g.bin": fleet_codec.global_bytes(fp, 4, {k: shifted[k] + d for k, d in
                                                             delta.dense().items()})}, None)
    assert 0.0 <= ev["acc"] <= 1.0 and ev["n"] == 48


def test_har_split_one_person_per_board() -> None:
    w = ds.watch_windows()
    boards, held = fd.har_boards(w, 10)
    assert len(boards) == 10
    seen = np.concatenate([b.idx for b in boards])
    assert len(seen) == len(set(seen.tolist()))  # no window on two boards
    for b in boards:
        assert len(set(w.subject[b.idx].tolist())) == 1  # one person per board
        assert set(w.y[b.idx].tolist()) == set(range(len(ds.WATCH_CLASSES)))  # every activity
    assert not set(w.subject[seen].tolist()) & set(ds.HELD_OUT_SUBJECTS)
    assert set(w.subject[held].tolist()) == set(ds.HELD_OUT_SUBJECTS)


def test_dirichlet_split_is_skewed_and_complete() -> None:
    _, y, _, _ = ds.mnist5k_split()
    boards = fd.dirichlet_boards(y, 10, alpha=0.3, seed=0)
    seen = np.concatenate([b.idx for b in boards])
    assert sorted(seen.tolist()) == list(range(len(y)))
    # label skew: on average a board's most frequent digit holds far more than a tenth
    top = [np.bincount(y[b.idx], minlength=10).max() / len(b.idx) for b in boards]
    assert np.mean(top) > 0.3
    assert fd.dirichlet_boards(y, 10, alpha=0.3, seed=0)[0].idx.tolist() == boards[0].idx.tolist()
