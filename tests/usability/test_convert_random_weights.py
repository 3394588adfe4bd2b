"""`microtrain convert mymodels:Class` without `--state-dict`: the converter built the module
itself, so its weights are the random initial ones, and the file would predict at chance.
Refused (exit 2, one line naming both ways on) unless `--random-weights` says it is meant;
the output file is not written, an existing one stays byte for byte, the caller's torch
generator is left as it was. A factory that loads its own weights is not refused: the check
builds the module under two seeds and refuses only weights that differ between them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from microtrain_tools import cli, mtm

MODELS = """
import torch
import torch.nn as nn


class Net(nn.Module):  # a 1-D CNN of one's own: 3 sensor channels, 4 classes
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 8, 5)
        self.fc = nn.Linear(8 * 28, 4)

    def forward(self, x):
        return self.fc(torch.flatten(torch.relu(self.conv(x)), 1))


def trained():  # a factory that loads its weights itself
    m = Net()
    m.load_state_dict(torch.load("net.pt"))
    return m
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "usab_mymodels.py").write_text(MODELS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    rng = np.random.default_rng(0)
    np.save(tmp_path / "calib.npy", rng.standard_normal((32, 3, 32)).astype(np.float32))
    torch.manual_seed(5)
    net = nn.Sequential()  # the trained weights: any state dict of the right shapes
    net.conv, net.fc = nn.Conv1d(3, 8, 5), nn.Linear(8 * 28, 4)
    torch.save(net.state_dict(), tmp_path / "net.pt")
    return tmp_path


def _convert(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    rc = cli.main(["convert", *args, "--calib", "calib.npy", "-o", "net.mtm", "-q"])
    return rc, capsys.readouterr().err


def test_random_weights_need_saying_so(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = b"an older net.mtm the user keeps"
    (folder / "net.mtm").write_bytes(old)
    rng_before = torch.get_rng_state()
    rc, err = _convert(capsys, "usab_mymodels:Net")
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("microtrain convert: error: model 'usab_mymodels:Net': "), err
    for words in ("random initial weights", "no --state-dict", "predict at chance", "--state-dict",
                  "--random-weights"):
        assert words in lines[0], lines[0]
    assert (folder / "net.mtm").read_bytes() == old  # nothing written
    assert torch.equal(torch.get_rng_state(), rng_before)  # the check left the caller's generator alone

    # the two ways on: the trained weights, or the initial ones on purpose
    rc, err = _convert(capsys, "usab_mymodels:Net", "--state-dict", "net.pt")
    assert rc == 0, err
    with_weights = (folder / "net.mtm").read_bytes()
    rc, err = _convert(capsys, "usab_mymodels:Net", "--random-weights")
    assert rc == 0 and err == "", err
    assert (folder / "net.mtm").read_bytes() != with_weights
    assert len(mtm.load(folder / "net.mtm").layers) == 2

    # a factory that loads the checkpoint itself gives the same weights under any seed: accepted,
    # and the file equals the one converted with --state-dict
    rc, err = _convert(capsys, "usab_mymodels:trained")
    assert rc == 0, err
    assert (folder / "net.mtm").read_bytes() == with_weights
