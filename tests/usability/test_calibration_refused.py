"""Calibration data that would give the file a wrong quantisation or a wrong input size are
refused before anything is written, naming the first offending sample: a NaN (it used to be
taken in and change the ranges), an infinity, data constant as a whole (they gave an input
scale of about 1e-11), windows of another length than the rest (a list of batches) or than
`--input-shape` (the calibration data fix a length-agnostic model's input length), a `.npy`
of Python objects (windows of different lengths saved as one array). The output file a
user already has stays byte for byte."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from microtrain_tools import cli
from microtrain_tools import convert as cv

OLD = b"the user's previous model.mtm"


def _net() -> nn.Module:
    torch.manual_seed(0)  # length-agnostic: global average pooling before the classifier
    return nn.Sequential(nn.Conv1d(3, 8, 5), nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(),
                         nn.Linear(8, 4)).eval()


def _refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], x: np.ndarray, *extra: str,
             allow_pickle: bool = False) -> str:
    np.save(tmp_path / "calib.npy", x, allow_pickle=allow_pickle)
    (tmp_path / "m.mtm").write_bytes(OLD)
    rc = cli.main(["convert", str(tmp_path / "net.pt"), "--calib", str(tmp_path / "calib.npy"), "-o",
                   str(tmp_path / "m.mtm"), "-q", *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("microtrain convert: error: "), err
    assert (tmp_path / "m.mtm").read_bytes() == OLD, "the output file changed"
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".m.mtm*"))
    return err


def test_bad_calibration_data_are_refused_naming_the_sample(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    torch.save(_net(), tmp_path / "net.pt")
    rng = np.random.default_rng(1)
    good = rng.standard_normal((40, 3, 64)).astype(np.float32)

    x = good.copy()
    x[17, 2, 5] = np.nan
    err = _refused(tmp_path, capsys, x)
    assert "calibration sample 17 holds NaN" in err and "remove or repair that sample" in err

    x = good.copy()
    x[23, 0, 0] = -np.inf
    assert "calibration sample 23 holds -inf" in _refused(tmp_path, capsys, x)

    err = _refused(tmp_path, capsys, np.zeros((40, 3, 64), np.float32))
    assert "calibration data are constant: every value of samples 0..39 is 0" in err
    assert "input scale of about 1e-11" in err and "calibrate on real inputs" in err

    err = _refused(tmp_path, capsys, good, "--input-shape", "3,128")
    assert "calibration sample 0 has shape (3, 64), not the input shape given, (3, 128)" in err
    assert "fix the file's input size" in err

    ragged = np.empty(3, dtype=object)
    ragged[:] = [good[0], good[1], good[2][:, :50]]
    err = _refused(tmp_path, capsys, ragged, allow_pickle=True)
    assert "holds Python objects" in err and "one length" in err

    # the same data, right: converted, and the note says what fixed the input length
    np.save(tmp_path / "calib.npy", good)
    rc = cli.main(["convert", str(tmp_path / "net.pt"), "--calib", str(tmp_path / "calib.npy"), "-o",
                   str(tmp_path / "m.mtm")])
    out = capsys.readouterr().out
    assert rc == 0 and (tmp_path / "m.mtm").read_bytes() != OLD
    assert "note: the model runs on inputs of any size: the calibration data fix the file's input to " \
           "(3, 64)" in out


def test_windows_of_another_length_in_a_list_name_the_first(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    batches = [rng.standard_normal((8, 3, 64)).astype(np.float32) for _ in range(3)]
    batches.insert(2, rng.standard_normal((8, 3, 60)).astype(np.float32))
    with pytest.raises(cv.ConvertError, match=r"^calibration sample 16 has shape \(3, 60\), not sample 0's "
                                              r"\(3, 64\)"):
        cv.convert_to_file(_net(), batches, tmp_path / "m.mtm", progress=False)
    assert not (tmp_path / "m.mtm").exists()
