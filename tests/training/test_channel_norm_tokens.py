"""LayerNorm over the channels of an (N, C, L) signal and a conv tokenizer's tokens, in whole models.

Views that move no data, each in a model trained for a moment on the digits and converted:

- ``ln(x.transpose(1, 2)).transpose(1, 2)`` after a Conv1d normalises each position's channels (the
  signal lies channels-last on the device, so the LAYERNORM reads it as it lies);
- ``transpose(1, 2)`` of a Conv1d's (N, C, L) output is L tokens of C values, read by a transformer
  encoder block with two heads;
- ``flatten(2).transpose(1, 2)`` of a conv's (N, C, H, W) map is H * W tokens of C values (a compact
  convolutional transformer's tokenizer: coverage_ops.CCT over the 8x8 digits, 16 tokens, four heads,
  sequence pooling by a softmax over the tokens, ``w.transpose(1, 2) @ h``).

Each model's int8 outputs in the real ``micropython`` (native and pure-Python kernels) must equal the
numpy oracle's bit for bit, its top-1 must agree with PyTorch's, and on-device training must equal the
training reference bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from evals.accuracy import coverage_ops
from microtrain_tools.mtm import Op
from support import model_suite as ms


class SignalNorm(nn.Module):
    """The digits' 8 rows as an (N, 8, 8) signal (8 channels along 8 positions, from a conv over each
    column), Conv1d, LayerNorm over the channels at each position, Conv1d, classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.rows = nn.Conv2d(1, 8, (8, 1))
        self.c1 = nn.Conv1d(8, 12, 3, padding=1)
        self.ln = nn.LayerNorm(12)
        self.c2 = nn.Conv1d(12, 12, 3)
        self.fc = nn.Linear(12 * 6, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.relu(self.rows(x)).squeeze(2)
        y = self.ln(F.relu(self.c1(s)).transpose(1, 2)).transpose(1, 2)
        return self.fc(torch.flatten(F.relu(self.c2(y)), 1))


class ConvTokens(coverage_ops.MhaEncoder):
    """Tokens after a Conv1d: a signal of 16 channels along 8 positions (a linear conv over each column),
    Conv1d, then its ``transpose(1, 2)`` as 8 tokens of 16 values through MhaEncoder's block (two
    heads)."""

    def __init__(self) -> None:
        super().__init__(1, 16, 8, 2)
        self.rows = nn.Conv2d(1, 16, (8, 1))
        self.c1 = nn.Conv1d(16, 16, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.c1(self.rows(x).squeeze(2))).transpose(1, 2)
        h = h + self.o(self.attend(self.ln1(h)))
        h = h + self.ff2(F.relu(self.ff1(self.ln2(h))))
        return self.fc(torch.flatten(h, 1)) + self.fc_mean(h.mean(1))


class SmallCCT(coverage_ops.CCT):
    """coverage_ops's CCT over the 8x8 digits: a stride-1 tokenizer, 4x4 = 16 tokens of 16 values, four
    heads."""

    def __init__(self) -> None:
        super().__init__(1, 16, 4, stride=1)


@pytest.fixture(scope="module", params=["signal_norm", "conv_tokens", "cct"])
def suite(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ms.Suite:
    make = {"signal_norm": SignalNorm, "conv_tokens": ConvTokens, "cct": SmallCCT}[request.param]
    return ms.build(request.param, make, tmp_path_factory.mktemp(request.param))


def test_converts_as_it_lies(suite: ms.Suite) -> None:
    s, _, _ = suite
    norms = [ly for ly in s.m.layers if ly.op == Op.LAYERNORM]
    if s.name == "signal_norm":  # 8 positions of 12 channels, normalised in place
        assert [ly.params[:2] for ly in norms] == [[8, 12]]
        assert s.m.tensors[norms[0].inputs[0]].shape == (1, 8, 12)
    elif s.name == "conv_tokens":  # the Conv1d's (1, 8, 16) output is the 8 tokens as they lie
        c1 = s.m.layer("c1")
        assert s.m.tensors[c1.output].shape == s.m.tensors[norms[0].inputs[0]].shape == (1, 8, 16)
        assert [(*ly.params[:4], ly.params[11]) for ly in s.m.layers if ly.op == Op.MATMUL] == [
            (8, 8, 8, 1, 2), (8, 8, 8, 0, 2)]
    else:  # the tokens are the pooled map, (4, 4, 16): 16 tokens; the pooling softmax over them
        assert all(s.m.tensors[ly.inputs[0]].shape == (4, 4, 16) for ly in norms) and len(norms) == 3
        assert [ly.params for ly in s.m.layers if ly.op == Op.SOFTMAX] == [[64, 16, 1], [1, 16, 1]]
        pool = [ly for ly in s.m.layers if ly.op == Op.MATMUL][-1]  # w^T h: one row of 16 weights
        assert (pool.params[:4], s.m.tensors[pool.inputs[0]].shape) == ([1, 16, 16, 0], (4, 4, 1))


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
def test_bitexact_in_micropython(suite: ms.Suite, pure: bool, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ms.check_bitexact(suite[0], pure, 20, tmp_path, monkeypatch)


def test_agrees_with_pytorch(suite: ms.Suite) -> None:
    ms.check_agrees_with_pytorch(suite)


def test_training_bitexact_vs_reference(suite: ms.Suite, tmp_path: Path) -> None:
    ms.check_training_bitexact(suite[0], tmp_path, "all", "int8", 2)
