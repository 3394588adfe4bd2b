"""Validator and runtime agree: files beyond a runtime limit are refused
by the C loader, the pure-Python loader (same message) and mtm.read, naming the limit; the
converter refuses such a model up front; and every file of the seeded mutation corpus that the
validator accepts runs inference and a training step."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch.nn as nn

from microtrain_tools import convert as cv
from microtrain_tools import mtm
from microtrain_tools.mtm import Act, DType, Kind, Layer, Model, Op, Quant, Tensor
from support.harness import ensure_natmod
from support.kernel_harness import run_micropython
from support.mtm_files import fix_crc, mutation_corpus, torch_model_files, write_corpus
from support.reliability import BUILD, run_mp


@pytest.fixture(scope="module", autouse=True)
def _natmod() -> None:
    ensure_natmod()


def _act(shape: tuple[int, ...], scale: float = 0.05, zp: int = 0) -> Tensor:
    return Tensor(DType.INT8, shape, Kind.ACTIVATION, Quant.PER_TENSOR, scale, zp)


def _weighted(t: list[Tensor], wshape: tuple[int, ...], w_scale: float) -> tuple[int, int, int, int]:
    oc = wshape[0]
    t.append(Tensor(DType.FLOAT32, (oc,), Kind.CONST, data=np.full(oc, w_scale, np.float32)))
    q = len(t) - 1
    t.append(Tensor(DType.INT8, wshape, Kind.CONST, Quant.PER_CHANNEL, qscales=q,
                    data=np.ones(wshape, np.int8)))
    w = len(t) - 1
    t.append(Tensor(DType.INT32, (oc,), Kind.CONST, Quant.BIAS, data=np.zeros(oc, np.int32)))
    t.append(Tensor(DType.INT32, (oc,), Kind.CONST, data=np.full(oc, 1 << 30, np.int32)))
    t.append(Tensor(DType.INT32, (oc,), Kind.CONST, data=np.full(oc, -8, np.int32)))
    return w, w + 1, w + 2, w + 3


def _linear(in_n: int, out_n: int, in_scale: float = 0.05, w_scale: float = 0.01) -> Model:
    t = [_act((in_n,), in_scale), _act((out_n,))]
    w, b, mu, sh = _weighted(t, (out_n, in_n), w_scale)
    ly = Layer(Op.LINEAR, "fc", [0], 1, [in_n, out_n, 0, 0, -128, 127], Act.NONE, w, b, mu, sh)
    return Model(t, [ly], 0, 1)


def _conv_terms() -> Model:
    oc = 16384  # 3 * 3 * 16384 = 147456 grad-input terms > 131071
    t = [_act((3, 3, 1)), _act((1, 1, oc))]
    w, b, mu, sh = _weighted(t, (oc, 3, 3, 1), 0.01)
    p = [3, 3, 1, 1, 1, oc, 3, 3, 1, 1, 0, 0, 1, 0, 0, -128, 127]
    return Model(t, [Layer(Op.CONV2D, "conv", [0], 1, p, Act.NONE, w, b, mu, sh)], 0, 1)


def _gap() -> Model:
    t = [_act((257, 256, 1)), _act((1, 1, 1))]
    return Model(t, [Layer(Op.GLOBAL_AVGPOOL, "gap", [0], 1, [257 * 256, 1])], 0, 1)


def _relu_big() -> Model:
    t = [_act((8193, 8193, 1)), _act((8193, 8193, 1))]
    return Model(t, [Layer(Op.RELU, "relu", [0], 1, [8193 * 8193, 0])], 0, 1)


def _state_nan() -> bytes:
    b = bytearray(torch_model_files()[2])  # the checkpoint with optimiser state
    n_t = struct.unpack_from("<I", b, 20)[0]
    for i in range(n_t):
        e = 64 + 48 * i
        if b[e + 2] == Kind.STATE:
            struct.pack_into("<f", b, struct.unpack_from("<I", b, e + 24)[0] + 4, float("nan"))
            return bytes(fix_crc(b))
    raise AssertionError("no STATE tensor")


LIMITS = {
    "act_scale": (lambda: _linear(4, 3, in_scale=2.0**41), "PER_TENSOR scale outside 2^-40..2^40"),
    "act_scale_tiny": (lambda: _linear(4, 3, in_scale=2.0**-41), "PER_TENSOR scale outside 2^-40..2^40"),
    "weight_scale": (lambda: _linear(4, 3, w_scale=3.4e38),
                     "weight scale (qscales value) outside 2^-40..2^40"),
    "classes": (lambda: _linear(1, 40000),
                "model output larger than 32767 values (cross_entropy class limit)"),
    "conv_terms": (_conv_terms, "k_h * k_w * out_c / groups must be <= 131071 (grad-input bound)"),
    "gap_hw": (_gap, "hw must be <= 65536 (global_avgpool positions)"),
    "act_numel": (_relu_big, "activation larger than 2^26 values"),
    "state_nan": (_state_nan, "STATE value not finite"),
}

CHECK = """
import sys
import _microtrain as N
from microtrain.pyk import kernel
P = kernel("mtm_validate")
for path in sys.argv[1:]:
    b = open(path, "rb").read()
    out = []
    for f in (N.mtm_validate, P):
        try:
            f(b)
            out.append("accepted")
        except ValueError as e:
            out.append(str(e))
    print(out[0] == out[1], out[0])
"""


def test_runtime_limits_refused_by_every_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = []
    for name, (make, _) in LIMITS.items():
        made = make()
        if isinstance(made, Model):
            with monkeypatch.context() as mp:
                mp.setattr(mtm, "validate", lambda m: None)  # write the file the validator must refuse
                made = mtm.write(made)
        with pytest.raises(ValueError):
            mtm.read(made)
        paths.append(tmp_path / f"{name}.mtm")
        paths[-1].write_bytes(made)
    p = run_micropython(CHECK, [str(x) for x in paths], heapsize="64M")
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == len(LIMITS)
    for (name, (_, want)), ln in zip(LIMITS.items(), lines, strict=True):
        same, msg = ln.split(" ", 1)
        assert same == "True", f"{name}: native and pure-Python messages differ: {ln}"
        assert msg.startswith("mtm_validate: ") and want in msg, f"{name}: {msg}"


def test_limits_are_not_too_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    """The largest allowed values still validate (edges: 2^40, 32767 classes, 131071 terms)."""
    mtm.read(mtm.write(_linear(4, 3, in_scale=2.0**40, w_scale=2.0**-40)))
    mtm.read(mtm.write(_linear(1, 32767)))


class _Wide(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 40000)

    def forward(self, x):  # noqa: ANN001, ANN202
        return self.fc(x)


def test_converter_refuses_a_model_beyond_the_limits() -> None:
    import torch

    with pytest.raises(cv.ConvertError, match="32767"):
        cv.convert(_Wide().eval(), torch.randn(8, 4), progress=False)


def test_accepted_mutations_run_inference_and_a_training_step() -> None:
    valid = torch_model_files()
    _, files = mutation_corpus(valid, n=1500)
    BUILD.mkdir(parents=True, exist_ok=True)
    corpus = BUILD / "accepted_corpus.bin"
    write_corpus(corpus, [*valid, *files])
    p = run_mp("rel_accepted.py", [str(corpus)], heapsize="64M", timeout=1200)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    done = [ln for ln in p.stdout.splitlines() if ln.startswith("ACCEPTED-DONE")]
    fails = [ln for ln in p.stdout.splitlines() if ln.startswith("FAIL")]
    assert done and not fails, "\n".join(fails[:20])
    acc, ran, mem = map(int, done[0].split()[1:])
    assert acc >= 100 and ran + mem == acc and ran >= acc - 5
