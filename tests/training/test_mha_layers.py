"""Multi-head self-attention in a whole model (MATMUL layers with heads, format 1.5).

coverage_ops's encoder block with two heads over the digits' 8 rows (8 tokens of 16 values after
the embedding): q, k, v split by ``view(N, T, H, Dh).transpose(1, 2)``, the scores per head
``q @ k.transpose(-2, -1) / sqrt(Dh)`` (one MATMUL with heads, the scores stacked per head), the
softmax over the keys, the weighted values per head back into the tokens (a second MATMUL with
heads), ``transpose(1, 2).reshape(N, T, D)`` (no layer: the tokens already lie so). Trained for a
moment in PyTorch and converted, its int8 outputs in the real ``micropython`` (native and
pure-Python kernels) must equal the numpy oracle's bit for bit, its top-1 must agree with
PyTorch's, on-device training through the heads must equal the training reference bit for bit,
LoRA on the q and v projections must equal the LoRA reference, and the file's weights must go back
into the PyTorch model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from evals.accuracy import coverage_ops
from microtrain_tools import mtm
from microtrain_tools.mtm import Op
from support import model_suite as ms


class MhaEncoder(coverage_ops.MhaEncoder):
    """coverage_ops's two-head encoder block over the digits' 8 rows."""

    def __init__(self) -> None:
        super().__init__(1, 16, 8, 2)


@pytest.fixture(scope="module")
def mha(tmp_path_factory: pytest.TempPathFactory) -> ms.Suite:
    return ms.build("mha", MhaEncoder, tmp_path_factory.mktemp("mha"))


def test_converts_to_matmuls_with_heads(mha: ms.Suite) -> None:
    s, _, _ = mha
    mms = [ly for ly in s.m.layers if ly.op == Op.MATMUL]
    # rows, inner, cols, tb, ..., heads: the scores (8 queries x 8 keys per head), then att v
    assert [(*ly.params[:4], ly.params[11]) for ly in mms] == [(8, 8, 8, 1, 2), (8, 8, 8, 0, 2)]
    assert [len(ly.params) for ly in mms] == [13, 13]
    assert [s.m.tensors[ly.output].shape for ly in mms] == [(2, 8, 8), (1, 8, 16)]
    factor = float(np.array(mms[0].params[12:13], np.int32).view(np.float32)[0])
    assert factor == float(np.float32(8**-0.5))  # 1 / sqrt(Dh) folded into the scores
    assert [ly.params for ly in s.m.layers if ly.op == Op.SOFTMAX] == [[16, 8, 1]]  # per head and query
    assert mtm.read(s.path.read_bytes()) is not None
    assert int.from_bytes(s.path.read_bytes()[6:8], "little") == 5  # format 1.5: heads


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
def test_bitexact_in_micropython(mha: ms.Suite, pure: bool, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ms.check_bitexact(mha[0], pure, 30, tmp_path, monkeypatch)


def test_agrees_with_pytorch(mha: ms.Suite) -> None:
    ms.check_agrees_with_pytorch(mha)


@pytest.mark.parametrize("train,mode,batch", [("all", "int8", 2), ("last:2", "mixed", 1)])
def test_training_bitexact_vs_reference(mha: ms.Suite, tmp_path: Path, train: str, mode: str,
                                        batch: int) -> None:
    ms.check_training_bitexact(mha[0], tmp_path, train, mode, batch)


def test_lora_on_the_attention_projections_equals_reference(mha: ms.Suite, tmp_path: Path) -> None:
    """Rank-2 adapters on the q and v projections of the heads (TrainDeeploy's case)."""
    ms.check_lora_bitexact(mha[0], tmp_path, ["q", "v"])


def test_checkpoint_of_a_multi_head_model_loads_on_the_host(mha: ms.Suite, tmp_path: Path) -> None:
    """A checkpoint saved on the device after a training step is a valid 1.5 file with the heads."""
    from support.harness import ensure_natmod
    from support.kernel_harness import run_micropython

    ensure_natmod()
    s = mha[0]
    out = tmp_path / "mha-trained.mtm"
    code = (f"import microtrain as mt\nm = mt.load({str(s.path)!r})\n"
            f"t = mt.Trainer(m, train='all', optimizer=mt.SGD(lr=0.05))\n"
            f"x = open({str(s.samples)!r}, 'rb').read({s.m.tensors[s.m.input].numel})\n"
            f"t.step(x, 3)\nt.flush()\nm.save({str(out)!r})\n")
    r = run_micropython(code, heapsize="512k")
    assert r.returncode == 0, r.stdout + r.stderr
    raw = out.read_bytes()
    back = mtm.load(out)
    assert raw[6] == 5 and back.trained
    assert [list(ly.params) for ly in back.layers if ly.op == Op.MATMUL] == [
        list(ly.params) for ly in s.m.layers if ly.op == Op.MATMUL]
    assert not (back.data(back.layers[0].weight) == s.m.data(s.m.layers[0].weight)).all()  # through the heads


def test_to_torch_round_trip(mha: ms.Suite) -> None:
    """The file's weights go back into a fresh two-head encoder, which predicts as the trained one."""
    from microtrain_tools.to_torch import to_state_dict

    s, net, xe = mha
    fresh = MhaEncoder()
    sd, _ = to_state_dict(s.m, fresh)
    fresh.load_state_dict(sd, strict=True)
    fresh.eval()
    with torch.no_grad():
        assert float(torch.cosine_similarity(fresh.k.weight.flatten(), net.k.weight.flatten(), dim=0)) > 0.99
        agree = float((fresh(xe).argmax(1) == net(xe).argmax(1)).float().mean())
    assert agree >= 0.95, agree


class TorchMha(MhaEncoder):
    """The same block with nn.MultiheadAttention(batch_first=True) for q, k, v, the heads and o."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(16, 2, batch_first=True)
        del self.q, self.k, self.v, self.o

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x.view(x.size(0), self.side, self.side))
        a = self.ln1(h)
        h = h + self.attn(a, a, a, need_weights=False)[0]
        h = h + self.ff2(torch.relu(self.ff1(self.ln2(h))))
        return self.fc(torch.flatten(h, 1)) + self.fc_mean(h.mean(1))


def test_nn_multiheadattention_converts_as_the_hand_written_heads(mha: ms.Suite) -> None:
    """nn.MultiheadAttention holding the trained block's q, k, v, o weights computes what the
    hand-written heads compute, and converts to the same layers: the same params and tensors."""
    from microtrain_tools import convert as cv

    s, net, xe = mha
    tm = TorchMha()
    sd = {k: v for k, v in net.state_dict().items() if k.split(".")[0] not in ("q", "k", "v", "o")}
    sd["attn.in_proj_weight"] = torch.cat([net.q.weight, net.k.weight, net.v.weight])
    sd["attn.in_proj_bias"] = torch.cat([net.q.bias, net.k.bias, net.v.bias])
    sd["attn.out_proj.weight"], sd["attn.out_proj.bias"] = net.o.weight, net.o.bias
    tm.load_state_dict(sd, strict=True)
    tm.eval()
    with torch.no_grad():
        assert torch.allclose(tm(xe), net(xe), atol=1e-4)
    from sklearn.datasets import load_digits

    d = load_digits()  # the calibration ms.build used: the first 256 digits of its seeded order
    x = torch.tensor(d.images / 16.0, dtype=torch.float32)[:, None]
    x = x[torch.randperm(len(x), generator=torch.Generator().manual_seed(0))]
    m = cv.convert(tm, x[:256], progress=False)
    assert [ly.op for ly in m.layers] == [ly.op for ly in s.m.layers]
    assert [list(ly.params) for ly in m.layers] == [list(ly.params) for ly in s.m.layers]
    for a, b in zip(m.layers, s.m.layers, strict=True):
        for ta, tb in ((a.weight, b.weight), (a.bias, b.bias)):
            if ta is not None:
                assert np.array_equal(m.tensors[ta].data, s.m.tensors[tb].data), a.name
    # and back: the file's q, k, v go into in_proj, its out projection into out_proj
    from microtrain_tools.to_torch import to_state_dict

    fresh = TorchMha()
    sd2, _ = to_state_dict(m, fresh)
    fresh.load_state_dict(sd2, strict=True)
    fresh.eval()
    with torch.no_grad():
        w = fresh.attn.in_proj_weight
        assert float(torch.cosine_similarity(w.flatten(), tm.attn.in_proj_weight.flatten(), dim=0)) > 0.99
        assert float((fresh(xe).argmax(1) == tm(xe).argmax(1)).float().mean()) >= 0.95


@pytest.mark.parametrize("what,kw,call", [
    ("batch_first=False", {"batch_first": False}, {}),
    ("masks", {"batch_first": True}, {"attn_mask": "causal"}),
    ("add_bias_kv", {"batch_first": True, "add_bias_kv": True}, {}),
])
def test_multiheadattention_refusals_name_the_option(what: str, kw: dict, call: dict) -> None:
    """What the converted attention cannot do is refused by name, with the module's path."""
    from microtrain_tools import convert as cv

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = torch.nn.MultiheadAttention(8, 2, **kw)
            self.fc = torch.nn.Linear(8 * 4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            mask = torch.ones(4, 4).triu(1).bool() if call else None
            return self.fc(torch.flatten(self.attn(x, x, x, attn_mask=mask)[0], 1))

    with pytest.raises(cv.ConvertError) as e:
        cv.convert(Net().eval(), torch.randn(16, 4, 8), progress=False)
    assert "'attn'" in str(e.value) and what.split("=")[0] in str(e.value), str(e.value)
