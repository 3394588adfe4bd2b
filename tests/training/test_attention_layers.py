"""A transformer encoder block in a whole model (MATMUL layers, format 1.4, with SOFTMAX and LAYERNORM).

The digits' 8 rows are 8 tokens of 8 values: a token embedding (nn.Linear on (N, T, D): a 1x1
conv), a pre-norm single-head self-attention block (LayerNorm, q / k / v projections, the
scores ``q @ k.transpose(1, 2) / sqrt(d)`` (the transpose read as it lies, the factor folded into
the MATMUL), softmax over the keys, ``att @ v``, the output projection, a residual add), a
pre-norm MLP block with its residual, and a classifier over the flattened tokens plus one over
their mean. Trained for a
moment in PyTorch and converted, its int8 outputs in the real ``micropython`` (native and
pure-Python kernels) must equal the numpy oracle's bit for bit, its top-1 must agree with
PyTorch's, on-device training through the whole block (the errors of both inputs of each MATMUL)
must equal the training reference bit for bit, and ``last:2`` training must lower the loss.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from evals.accuracy import coverage_ops
from microtrain_tools.mtm import Op
from support import model_suite as ms


class Encoder(coverage_ops.Encoder):
    """coverage_ops's encoder block over the digits' 8 rows (8 tokens of 8 values)."""

    def __init__(self) -> None:
        super().__init__(1, 16, 8)


@pytest.fixture(scope="module")
def tfm(tmp_path_factory: pytest.TempPathFactory) -> ms.Suite:
    return ms.build("tfm", Encoder, tmp_path_factory.mktemp("tfm"))


def test_converts_to_attention_layers(tfm: ms.Suite) -> None:
    s, _, _ = tfm
    mms = [ly for ly in s.m.layers if ly.op == Op.MATMUL]
    # rows, inner, cols, tb: the scores (q k^T, k read as it lies), then att v
    assert [ly.params[:4] for ly in mms] == [[8, 16, 8, 1], [8, 8, 16, 0]]
    factor = [float(np.array(ly.params[11:12], np.int32).view(np.float32)[0]) for ly in mms]
    assert factor == [float(np.float32(0.25)), 1.0]  # 1 / sqrt(16) folded into the scores
    assert [ly.params for ly in s.m.layers if ly.op == Op.SOFTMAX] == [[8, 8, 1]]  # over the keys
    assert sum(ly.op == Op.LAYERNORM for ly in s.m.layers) == 2
    assert s.m.tensors[s.m.input].shape == (1, 8, 8)  # the tokens are the file's input


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
def test_bitexact_in_micropython(tfm: ms.Suite, pure: bool, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ms.check_bitexact(tfm[0], pure, 30, tmp_path, monkeypatch)


def test_agrees_with_pytorch(tfm: ms.Suite) -> None:
    ms.check_agrees_with_pytorch(tfm)


@pytest.mark.parametrize("train,mode,batch", [("all", "int8", 2), ("last:2", "mixed", 1)])
def test_training_bitexact_vs_reference(tfm: ms.Suite, tmp_path: Path, train: str, mode: str,
                                        batch: int) -> None:
    ms.check_training_bitexact(tfm[0], tmp_path, train, mode, batch)


def test_last2_training_lowers_the_loss(tfm: ms.Suite, tmp_path: Path) -> None:
    ms.check_last2_lowers_the_loss(tfm[0], tmp_path)


def test_lora_on_the_attention_projections_equals_reference(tfm: ms.Suite, tmp_path: Path) -> None:
    """Rank-2 adapters on the q and v projections (TrainDeeploy's case), trained on the device, equal
    the LoRA reference's bit for bit."""
    ms.check_lora_bitexact(tfm[0], tmp_path, ["q", "v"])


def test_to_torch_round_trip(tfm: ms.Suite) -> None:
    """The file's weights go back into a fresh Encoder (token linears and LayerNorm affines from their 1x1
    convs) and it predicts as the trained one."""
    from microtrain_tools.to_torch import to_state_dict

    s, net, xe = tfm
    fresh = Encoder()
    sd, _ = to_state_dict(s.m, fresh)
    fresh.load_state_dict(sd, strict=True)
    fresh.eval()
    with torch.no_grad():
        assert float(torch.cosine_similarity(fresh.ln1.weight, net.ln1.weight, dim=0)) > 0.99
        assert float(torch.cosine_similarity(fresh.q.weight.flatten(), net.q.weight.flatten(), dim=0)) > 0.99
        agree = float((fresh(xe).argmax(1) == net(xe).argmax(1)).float().mean())
    assert agree >= 0.95, agree


class TokensIn(Encoder):
    """The same block taking its (N, T, D) tokens directly."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.reshape(x.size(0), 1, 8, 8))


def test_a_model_taking_tokens_quantises_them_in_device_order(tfm: ms.Suite) -> None:
    """Tokens (N, T, D) are the device's (1, T, D) as they lie: the file's input and the quantised
    samples equal those of the model that reshapes an image into them."""
    from microtrain_tools import convert as cv

    s, net, xe = tfm
    tok = TokensIn()
    tok.load_state_dict(net.state_dict())
    x = xe[:64].reshape(-1, 8, 8)
    m = cv.convert(tok.eval(), x, progress=False)
    assert m.tensors[m.input].shape == (1, 8, 8) and not m.tensors[m.input].signal_1d
    assert np.array_equal(cv.quantize_input(m, x), cv.quantize_input(s.m, xe[:64]))
