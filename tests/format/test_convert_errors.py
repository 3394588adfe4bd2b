"""What the converter refuses, and how it says so: one line naming the layer, the op and what to
do instead (with the source line when torch.fx recorded it), nothing written; the CLI prints
that line and exits 2. Also the op registry: ``--list-ops`` and docs/ops.md are generated from it.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from microtrain_tools import cli
from microtrain_tools import convert as cv
from support.harness import ROOT

IMG = (8, 1, 8, 8)


def _line_of(cls: type, text: str) -> int:
    """Source line of the first line of ``cls.forward`` containing ``text``."""
    lines, start = inspect.getsourcelines(cls.forward)  # type: ignore[attr-defined]
    return start + next(i for i, ln in enumerate(lines) if text in ln)


class Cat(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(1, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.a(x), self.b(x)], 2)  # along H: only channels concatenate


class Up(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.up = nn.Conv2d(1, 4, 3), nn.Upsample(scale_factor=2, mode="bilinear")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.a(x))


class Fn(nn.Module):
    """One conv, then ``fn`` (a lambda of the test case)."""

    def __init__(self, fn, pre=None, c_in: int = 1, pad: int = 1) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.a = nn.Conv2d(c_in, 4, 3, padding=pad)
        self.fn, self.pre = fn, pre or (lambda x: x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(self.a(self.pre(x)))


class Lstm(nn.Module):
    def __init__(self, cell: type[nn.Module] = nn.LSTM, **kw: object) -> None:
        super().__init__()
        self.lstm = cell(8, 4, batch_first=True, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lstm(x)[0]


class LstmLast(Lstm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lstm(x)[0][:, -1]


class GruLast(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(8, 4, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gru(x)[0][:, -1]


class BnRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn, self.a = nn.BatchNorm2d(1), nn.Conv2d(1, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(F.relu(self.bn(x)))


class Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(1, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.a(x)
        return y, F.relu(y)


class Shared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(1, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(self.a(self.b(x)))


class FConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 1, 3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.w)


class Branch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(1, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.a(x)
        return x


# (model, calibration shape, pattern of the one-line message)
REFUSED = [
    (Cat(), IMG, r"^layer 'cat' \(function cat\): cat over dim 2 of rank-4 tensors: only the channel / "
                 r"feature dim 1 converts"),
    (Up(), IMG, r"^layer 'up' \(Upsample\): mode 'bilinear': only mode 'nearest' converts"),
    (Fn(lambda y: F.interpolate(y, scale_factor=1.5)), IMG, r"^layer 'interpolate' .*scale_factor 1.5: only "
                                                             r"integer factors convert"),
    (Fn(lambda y: torch.stack([y, y], 1)), IMG, r"^layer 'stack' \(function stack\): unsupported op: "
                                                r"stacking adds a dim"),
    (Fn(nn.ConvTranspose2d(4, 4, 2, stride=2, groups=2)), IMG, r"^layer 'fn' \(ConvTranspose2d\): groups 2: "
                                                               r"only groups 1"),
    (Fn(nn.ConvTranspose2d(4, 4, 2, stride=2, padding=2)), IMG, r"^layer 'fn' \(ConvTranspose2d\): padding "
                                                                r"\(2, 2\) must be below the kernel"),
    (Fn(lambda y: torch.cat([torch.flatten(y, 1), torch.flatten(y, 1)], 1)), IMG,
     r"^layer 'cat' .*joins a flattened \(C, H, W\) map"),
    (GruLast(), (8, 8, 8), r"^layer 'gru' \(GRU\): one step of the GRU's output \(out\[:, -1\]\) does not "
                           r"convert yet: use out.mean\(1\)"),
    (Lstm(nn.RNN), (8, 8, 8), r"^layer 'lstm' \(RNN\): unsupported op: this recurrent layer is not "
                              r"supported yet: use nn.GRU or nn.LSTM"),
    (LstmLast(), (8, 8, 8), r"^layer 'lstm' \(LSTM\): one step of the LSTM's output \(out\[:, -1\]\) does "
                            r"not convert yet: use out.mean\(1\)"),
    (Lstm(nn.LSTM, num_layers=2), (8, 8, 8), r"^layer 'lstm' \(LSTM\): nn.LSTM with num_layers=2"),
    (Fn(nn.PixelShuffle(2)), IMG, r"^layer 'fn' \(PixelShuffle\): unsupported op: no device kernel for it "
                                  r"\(see `microtrain convert --list-ops`"),
    (Fn(lambda y: y.clamp(-1, 1)), IMG, r"^layer 'clamp' \(method \.clamp\(\)\): clamp\(-1, 1\): only "
                                        r"clamp\(0, 6\) \(= ReLU6\) and clamp\(min=0\)"),
    (Fn(lambda y: y.mean(1)), IMG, r"^layer 'mean' \(method \.mean\(\)\): a mean over dims 1 .*only the mean "
                                   r"over all spatial dims"),
    (Fn(lambda y: F.max_pool2d(y, 2, dilation=2)), IMG, r"^layer 'max_pool2d' \(function max_pool2d\): "
                                                        r"dilation 2 is not supported"),
    (Fn(lambda y: F.avg_pool2d(y, 2, divisor_override=3)), IMG, r"^layer 'avg_pool2d' .*divisor_override"),
    (Fn(lambda y: F.avg_pool2d(y, 3, padding=1)), IMG, r"^layer 'avg_pool2d' .*count_include_pad=False"),
    (Fn(lambda y: F.adaptive_avg_pool2d(y, 2)), IMG, r"^layer 'adaptive_avg_pool2d' .*output_size 2: only "
                                                     r"output_size 1"),
    (Fn(lambda y: y.view(y.size(0), 32, 8)), IMG,
     r"^layer 'view' \(method \.view\(\)\): reshape \(N, 4, 8, 8\) -> \(N, 32, 8\) moves data on the device"),
    (Fn(lambda y: y, pre=lambda x: x.unsqueeze(1)), (8, 8, 8),
     r"^layer 'unsqueeze' .*reshapes the model input \(N, 8, 8\) -> \(N, 1, 8, 8\): give the model its input "
     r"in the shape its first layer takes"),
    (Fn(lambda y: y.reshape(-1)), IMG, r"^layer 'reshape' .*changes the batch dim"),
    (Fn(lambda y: F.max_pool2d(F.pad(y, (1, 1, 1, 1)), 2)), IMG,
     r"^layer 'pad' \(function pad\): zero padding is folded into the conv after it, but layer 'max_pool2d'"),
    (Fn(lambda y: y, pre=lambda x: F.pad(x, (1, 1, 1, 1), mode="reflect"), pad=0), IMG,
     r"^layer 'pad' .*mode='reflect'.*only zero padding"),
    (Fn(lambda y: y, pre=lambda x: F.pad(x, (3, 3, 3, 3)), pad=0), IMG,
     r"^layer 'a' \(Conv2d\): padding \(3, 3\) \(its own plus the zero padding before it\) must be smaller "
     r"than the kernel"),
    (Fn(lambda y: y, pre=lambda x: F.pad(x, (-1, 0, 0, 0)), pad=0), IMG, r"^layer 'pad' .*negative padding"),
    (Fn(lambda y: y, pre=lambda x: F.pad(x, (0, 0, 0, 6)), pad=0), IMG,
     r"^layer 'a' \(Conv2d\): the padding leaves whole windows outside the input \(output 12 x 6 of 8 x 8\)"),
    (Fn(lambda y: y, pre=nn.BatchNorm2d(1)), IMG, r"^layer 'pre' \(BatchNorm2d\): cannot be folded exactly "
                                                  r"into 'a', which pads its input.*padding 0"),
    (BnRelu(), IMG, r"^layer 'bn' \(BatchNorm2d\): a BatchNorm that does not follow a conv/linear is folded "
                    r"into the next conv/linear, but layer 'relu' \(function relu\) comes next"),
    (Fn(lambda y: F.relu(F.log_softmax(y, 1))), IMG, r"^layer 'log_softmax' .*log_softmax inside the model: "
                                                      r"only a final one converts"),
    (Fn(lambda y: F.softmax(y, 0)), IMG, r"^layer 'softmax' .*softmax over dim 0 .*only over a dim after the "
                                         r"batch dim"),
    (Fn(lambda y: y * 2), IMG,
     r"^layer 'mul' \(function mul\): a constant factor converts only right after a matmul \(folded into "
     r"it\): fold it into the data"),
    (Fn(lambda y: y * y.mean(3, keepdim=True)), IMG,
     r"^2 problems, all listed: .*\(2\) layer 'mul' \(function mul\): operands of shapes \(N, 4, 8, 8\) and "
     r"\(N, 4, 8, 1\): only the same shape or a broadcast"),
    (Fn(lambda y: torch.flatten(y, 1)), IMG,
     r"^layer 'flatten' .*the model output is a flattened \(C, H, W\) map.*end the model with a Linear"),
    (Fn(lambda y: F.dropout(y, 0.5)), IMG, r"^layer 'dropout' .*training=True .*pass training=self.training"),
    (Two(), IMG, r"^the model returns 2 tensors \(made by layer 'a' \(Conv2d\), .*\): the file has one "
                  r"output;.*convert a model per head"),
    (Shared(), IMG, r"^layer 'a' \(Conv2d\): module called more than once \(shared weights\)"),
    (FConv(), IMG, r"^layer 'w' \(get_attr w\): a parameter or buffer used outside a module .*use nn.Conv2d"),
    (Branch(), IMG, r"^torch.fx cannot trace Branch in forward\(\) at test_convert_errors.py:\d+ "
                    r"\(if x.sum\(\) > 0:\): .*may depend on the input's rank and its shape except the "
                    r"batch size .*but not on a tensor's values"),
    (nn.Sequential(nn.Linear(8, 4)), IMG, r"^layer '0' \(Linear\): Linear on a rank-4 input .*flatten first"),
]


@pytest.mark.parametrize("model,shape,pattern", REFUSED, ids=[f"{i}-{type(c[0]).__name__}"
                                                              for i, c in enumerate(REFUSED)])
def test_refused_in_one_line_naming_layer_and_nothing_written(model: nn.Module, shape: tuple[int, ...],
                                                              pattern: str, tmp_path: Path) -> None:
    path = tmp_path / "out.mtm"
    torch.manual_seed(0)
    with pytest.raises(cv.ConvertError) as ei:
        cv.convert_to_file(model.eval(), torch.rand(*shape), path, progress=False)
    msg = str(ei.value)
    assert "\n" not in msg
    assert re.search(pattern, msg), msg
    assert list(tmp_path.iterdir()) == []


def test_messages_end_with_the_source_line() -> None:
    for cls, text, name in ((Cat, "torch.cat", "cat"), (Up, "self.up", "up"), (BnRelu, "self.bn(x)", "bn"),
                            (Shared, "self.a(self.a", "a")):
        with pytest.raises(cv.ConvertError) as ei:
            cv.convert(cls().eval(), torch.rand(*IMG), progress=False)
        assert str(ei.value).startswith(f"layer '{name}'")
        assert str(ei.value).endswith(f" [at test_convert_errors.py:{_line_of(cls, text)}]"), str(ei.value)
    with pytest.raises(cv.ConvertError, match=rf"at test_convert_errors.py:{_line_of(Branch, 'if x.sum')} "):
        cv.convert(Branch().eval(), torch.rand(*IMG), progress=False)


CNN = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 5))


@pytest.mark.parametrize("shape,pattern", [
    ((6, 8, 8, 3), r"^calibration data of shape \(6, 8, 8, 3\) do not run through the model: layer '0' "
                   r"\(Conv2d\) fails with: .*; the first layer '0' \(Conv2d\) takes \(N, 3, H, W\) "
                   r"\(PyTorch layout\): the data look channels-last, pass x.transpose\(0, 3, 1, 2\)$"),
    ((6, 3, 9, 9), r"^calibration data of shape \(6, 3, 9, 9\) .*layer '3' \(Linear\) fails with: mat1 and "
                   r"mat2 shapes cannot be multiplied .*takes \(N, 3, H, W\)"),
    ((6, 3, 8, 8, 1), r"^calibration data of shape \(6, 3, 8, 8, 1\) .*layer '0' \(Conv2d\) fails"),
])
def test_calibration_data_of_the_wrong_shape(shape: tuple[int, ...], pattern: str) -> None:
    with pytest.raises(cv.ConvertError) as ei:
        cv.convert(CNN.eval(), torch.rand(*shape), progress=False)
    assert "\n" not in str(ei.value) and re.search(pattern, str(ei.value)), str(ei.value)


def test_missing_channel_axis_is_named() -> None:
    gray = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    with pytest.raises(cv.ConvertError, match=r"takes \(N, 1, H, W\) \(PyTorch layout\): add the channel "
                                              r"axis, x\[:, None\]$"):
        cv.convert(gray.eval(), torch.rand(6, 8, 8), progress=False)


def test_byte_valued_calibration_data_warn() -> None:
    model = CNN.eval()
    x = torch.rand(16, 3, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 0..1 data: no warning at all
        cv.convert(model, x, progress=False)
    with pytest.warns(cv.ConvertWarning, match=r"calibration data are integers in 0\.\.255: if the model was "
                                               r"trained on inputs scaled to 0\.\.1, divide the data by 255"):
        m = cv.convert(model, np.round(x.numpy() * 255).astype(np.uint8), progress=False)
    assert m.tensors[m.input].scale > 0.5  # converted, with the range it was given


# --------------------------------------------------------------------------
# the command line


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = cli.main(["convert", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("microtrain convert: error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_cli_refusal_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.save(Cat(), tmp_path / "cat.pt")
    np.save(tmp_path / "calib.npy", np.random.default_rng(0).random(IMG, dtype=np.float32))
    rc, _, err = _cli([str(tmp_path / "cat.pt"), "--calib", str(tmp_path / "calib.npy"), "-o",
                       str(tmp_path / "m.mtm"), "-q"], capsys)
    assert rc == 2 and not (tmp_path / "m.mtm").exists()
    line = _one_error_line(err)
    assert "layer 'cat' (function cat): cat over dim 2" in line and "test_convert_errors.py:" in line


def test_cli_pickled_class_from_a_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A model pickled by a script that defined its class in ``__main__``."""
    script = tmp_path / "train.py"
    script.write_text("import torch, torch.nn as nn\n"
                      "class MyNet(nn.Module):\n"
                      "    def __init__(self):\n"
                      "        super().__init__()\n"
                      "        self.fc = nn.Linear(4, 2)\n"
                      "    def forward(self, x):\n"
                      "        return self.fc(x)\n"
                      f"torch.save(MyNet(), {str(tmp_path / 'net.pt')!r})\n")
    subprocess.run([sys.executable, str(script)], check=True, cwd=tmp_path)
    np.save(tmp_path / "calib.npy", np.zeros((4, 4), dtype=np.float32))
    rc, _, err = _cli([str(tmp_path / "net.pt"), "--calib", str(tmp_path / "calib.npy"), "-o",
                       str(tmp_path / "m.mtm")], capsys)
    assert rc == 2
    line = _one_error_line(err)
    assert "the pickled model's class 'MyNet' was defined in '__main__'" in line
    assert "pass MODULE:MyNet" in line and "PYTHONPATH" in line and "state_dict" in line


def test_cli_factory_with_arguments_and_control_flow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mt_user_nets.py").write_text(
        "import torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def __init__(self, n):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(4, n)\n"
        "    def forward(self, x):\n"
        "        return self.fc(x)\n"
        "class Branchy(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(4, 2)\n"
        "    def forward(self, x):\n"
        "        if x.sum() > 0:\n"
        "            x = x * 2\n"
        "        return self.fc(x)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    np.save(tmp_path / "calib.npy", np.random.default_rng(0).random((4, 4), dtype=np.float32))
    common = ["--calib", "calib.npy", "-o", "m.mtm", "-q", "--random-weights"]
    rc, _, err = _cli(["mt_user_nets:Net", *common], capsys)
    line = _one_error_line(err)
    assert rc == 2 and "cannot be built without arguments" in line
    assert "factory that takes no arguments" in line
    rc, _, err = _cli(["mt_user_nets:Branchy", *common], capsys)
    line = _one_error_line(err)
    assert rc == 2 and "in forward() at mt_user_nets.py:13 (if x.sum() > 0:)" in line
    assert not (tmp_path / "m.mtm").exists()


def test_cli_layout_error_and_byte_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.save(CNN, tmp_path / "cnn.pt")
    x = np.random.default_rng(0).random((16, 3, 8, 8), dtype=np.float32)
    np.savez(tmp_path / "nhwc.npz", x=x.transpose(0, 2, 3, 1))
    np.savez(tmp_path / "bytes.npz", x=np.round(x * 255).astype(np.uint8))
    out_path = str(tmp_path / "m.mtm")
    model = str(tmp_path / "cnn.pt")
    rc, _, err = _cli([model, "--calib", str(tmp_path / "nhwc.npz"), "-o", out_path, "-q"], capsys)
    assert rc == 2
    assert _one_error_line(err).endswith("the data look channels-last, pass x.transpose(0, 3, 1, 2)")
    rc, _, err = _cli([model, "--calib", str(tmp_path / "bytes.npz"), "-o", out_path, "-q"], capsys)
    assert rc == 0 and Path(out_path).exists()
    assert err.strip().splitlines() == [
        "microtrain convert: warning: calibration data are integers in 0..255: if the model was trained on "
        "inputs scaled to 0..1, divide the data by 255 (the device's input scale is set from this range)"]


def test_cli_softmax_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 3), nn.Softmax(dim=1))
    torch.save(net, tmp_path / "net.pt")
    np.save(tmp_path / "calib.npy", np.random.default_rng(0).random((8, 3, 4), dtype=np.float32))
    rc, out, _ = _cli([str(tmp_path / "net.pt"), "--calib", str(tmp_path / "calib.npy"), "-o",
                       str(tmp_path / "m.mtm")], capsys)
    assert rc == 0
    assert "note: the final softmax '2' is stripped: the file outputs logits" in out


# --------------------------------------------------------------------------
# the registry, --list-ops and docs/ops.md


def test_list_ops_prints_every_registry_entry(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _cli(["--list-ops"], capsys)
    assert rc == 0
    for e in (*cv.REGISTRY, *cv.REFUSALS):
        assert e.forms in out
    for e in cv.REGISTRY:
        assert e.becomes in out


def test_ops_doc_is_generated_from_the_registry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = (ROOT / "docs" / "ops.md").read_text()
    assert doc == cv.ops_doc(), "docs/ops.md is stale: run `microtrain convert --write-doc docs/ops.md`"
    rc, _, _ = _cli(["--write-doc", str(tmp_path / "ops.md")], capsys)
    assert rc == 0 and (tmp_path / "ops.md").read_text() == doc
    rows = [ln for ln in doc.splitlines() if ln.startswith("| ") and not ln.startswith("| PyTorch")]
    assert len(rows) == len(cv.REGISTRY) + len(cv.REFUSALS)


def test_registry_classifies_what_it_lists() -> None:
    """Every module class, function and method in the registry is looked up to its own entry."""
    seen: set[object] = set()
    for e in (*cv.REGISTRY, *cv.REFUSALS):
        for key in (*e.modules, *e.functions, *e.methods):
            assert key not in seen, f"{key} is listed twice"
            seen.add(key)
    for e in cv.REGISTRY:
        for cls in e.modules:
            assert cv._BY_MODULE[cls] is e
        for fn in e.functions:
            assert cv._BY_FUNCTION[fn] is e
        for meth in e.methods:
            assert cv._BY_METHOD[meth] is e
