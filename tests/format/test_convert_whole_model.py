"""The converter looks at the whole model before it answers.

- Every refused op of a model is reported in one error (and one line each from the CLI), so a
  user fixes them all in one go; the ops after a refused one are still checked.
- An input reshape that leaves the device's bytes in place (``x.view(-1, 1, 28, 28)`` of flat
  vectors) converts to the file of the model that takes the reshaped input; one that would move
  bytes (a transpose in NHWC terms) is refused.
- A branch on the input's rank or shape (``if x.dim() == 3:``) is traced with the input's shape
  known: the file is byte for byte the file of the same model written without the branch. A
  branch on the batch size or on a tensor's values is refused, and the message says which
  branches can be traced.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from microtrain_tools import cli, mtm
from microtrain_tools import convert as cv

IMG = (16, 1, 10, 10)


class Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c, self.f = nn.Conv2d(1, 4, 3), nn.Linear(4 * 8 * 8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.f(torch.relu(self.c(x)).view(x.shape[0], -1))


class RankBranch(Plain):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 3:  # accepts (N, H, W) too
            x = x.unsqueeze(1)
        b, c, h, w = x.shape
        y = torch.relu(self.c(x))
        if y.size(1) != 4 or y.shape[-1] != w - 2:
            raise ValueError("unexpected shape")
        return self.f(y.view(b, -1))


class BatchBranch(Plain):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 1:
            x = x * 1
        return super().forward(x)


class ValueBranch(Plain):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.mean() > 0.5:
            return super().forward(x)
        return super().forward(x)


class ThreeProblems(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv2d(1, 4, 3)
        self.n = nn.LayerNorm([4, 8, 8])
        self.p = nn.PixelShuffle(2)
        self.f = nn.Linear(4 * 8 * 8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.n(torch.relu(self.c(x)))
        y = y - torch.sigmoid(y)
        z = self.p(y)  # a dead end that is still checked
        return self.f(torch.flatten(y, 1)) + z.mean()


def _file(model: nn.Module, x: torch.Tensor) -> bytes:
    torch.manual_seed(0)
    return mtm.write(cv.convert(model.eval(), x, progress=False))


def test_a_branch_on_the_shape_converts_to_the_same_file() -> None:
    torch.manual_seed(3)
    plain = Plain()
    branchy = RankBranch()
    branchy.load_state_dict(plain.state_dict())
    x = torch.rand(*IMG)
    want = _file(plain, x)
    assert _file(branchy, x) == want
    # the batch stays symbolic: calibration runs batches of another size than the trace's probe
    torch.manual_seed(0)
    m = cv.convert(branchy.eval(), torch.rand(70, 1, 10, 10), batch_size=32, progress=False)
    assert m.tensors[m.input].shape == (10, 10, 1)


def test_the_shape_branch_is_named_in_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.manual_seed(3)
    torch.save(RankBranch(), tmp_path / "m.pt")
    np.save(tmp_path / "c.npy", np.random.default_rng(0).random(IMG, dtype=np.float32))
    rc = cli.main(["convert", str(tmp_path / "m.pt"), "--calib", str(tmp_path / "c.npy"), "-o",
                   str(tmp_path / "m.mtm")])
    out = capsys.readouterr().out
    assert rc == 0 and "note: forward() branches on its input's shape: converted for inputs of shape " \
                       "(1, 10, 10)" in out


@pytest.mark.parametrize("model,what", [(BatchBranch(), "if x.shape[0] > 1:"),
                                        (ValueBranch(), "if x.mean() > 0.5:")])
def test_a_branch_on_the_batch_or_on_values_is_refused(model: nn.Module, what: str) -> None:
    with pytest.raises(cv.ConvertError) as ei:
        cv.convert(model.eval(), torch.rand(*IMG), progress=False)
    msg = str(ei.value)
    assert f"({what})" in msg and "\n" not in msg
    assert "may depend on the input's rank and its shape except the batch size" in msg
    assert "not on a tensor's values or the batch size" in msg


def test_every_refused_op_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "m.mtm"
    with pytest.raises(cv.ConvertError) as ei:
        cv.convert_to_file(ThreeProblems().eval(), torch.rand(*IMG), path, progress=False)
    probs = ei.value.problems
    assert [p.split(":")[0] for p in probs] == ["layer 'n' (LayerNorm)", "layer 'sub' (function sub)",
                                                "layer 'p' (PixelShuffle)", "layer 'mean' (method .mean())"]
    assert all("\n" not in p and "[at test_convert_whole_model.py:" in p for p in probs)
    assert str(ei.value).startswith("4 problems, all listed: (1) layer 'n' (LayerNorm)")
    assert not path.exists()


def test_the_cli_prints_one_line_per_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.save(ThreeProblems(), tmp_path / "m.pt")
    np.save(tmp_path / "c.npy", np.random.default_rng(0).random(IMG, dtype=np.float32))
    rc = cli.main(["convert", str(tmp_path / "m.pt"), "--calib", str(tmp_path / "c.npy"), "-o",
                   str(tmp_path / "m.mtm"), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and not (tmp_path / "m.mtm").exists()
    assert err[0] == "microtrain convert: error: 4 problems, all listed:"
    assert [ln.split(":")[0] for ln in err[1:]] == [
        "  - layer 'n' (LayerNorm)", "  - layer 'sub' (function sub)", "  - layer 'p' (PixelShuffle)",
        "  - layer 'mean' (method .mean())"]


def test_a_branch_and_bad_data_are_both_named() -> None:
    with pytest.raises(cv.ConvertError) as ei:
        cv.convert(ValueBranch().eval(), torch.zeros(*IMG), progress=False)
    first, second = ei.value.problems
    assert "(if x.mean() > 0.5:)" in first and second.startswith("calibration data are constant")


class Unflatten(Plain):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.view(-1, 1, 10, 10))


class RowsAsChannels(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c, self.f = nn.Conv1d(10, 4, 3), nn.Linear(4 * 8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.f(torch.flatten(torch.relu(self.c(x.squeeze(1))), 1))


def test_an_input_reshape_that_keeps_the_bytes_converts() -> None:
    torch.manual_seed(5)
    plain = Plain()
    flat = Unflatten()
    flat.load_state_dict(plain.state_dict())
    x = torch.rand(*IMG)
    m = cv.convert(flat.eval(), x.view(len(x), -1), progress=False)
    assert _file(flat, x.view(len(x), -1)) == _file(plain, x)
    assert m.tensors[m.input].shape == (10, 10, 1)
    q = cv.run_mtm(m, x.view(len(x), -1).numpy())  # the flat data quantise to the same bytes
    assert np.array_equal(q, cv.run_mtm(m, x.numpy()))


def test_an_input_reshape_that_moves_bytes_is_refused() -> None:
    with pytest.raises(cv.ConvertError, match=r"^layer 'squeeze' .*reshapes the model input \(N, 1, 10, 10\) "
                                              r"-> \(N, 10, 10\): give the model its input"):
        cv.convert(RowsAsChannels().eval(), torch.rand(*IMG), progress=False)
