"""Row bands of a conv pair (python_lib/microtrain/place.py ``_chains`` / ``_chain``), in the real
micropython binary, native and pure-Python kernels.

A run of convs, each reading only the output of the one before it, makes those outputs a band of
rows at a time just before the next reads them: MobileNetV2's inverted residuals, the pointwise
expand, the depthwise 3x3 (stride 1 or 2) and the pointwise project (adding into the block's skip
where the block has one). The outputs of a forward with the
bands must be the bytes of the same forward with whole buffers (plan.forward_fit's, which
Model.plan takes where place.py cannot be imported), in inference and in a training plan's
frozen prefix; the arena must be smaller.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from evals.lib.mlperf_tiny import _InvRes as _Block
from microtrain_tools import convert as cv
from microtrain_tools import mtm
from support.harness import run_micropython


class TinyV2(nn.Module):
    """conv 3x3 stride 2, inverted residuals (t=1 narrowing; t=6 stride 2; t=6 stride 1 with the
    add; t=4 stride 2), pool, linear: 64x64x3 input (tensors larger than a band), layer 12 the last
    project."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
                                      _Block(8, 4, 1, 1), _Block(4, 8, 2, 6), _Block(8, 8, 1, 6),
                                      _Block(8, 16, 2, 4))
        self.fc = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("bands")
    torch.manual_seed(0)
    net = TinyV2()
    with torch.no_grad():  # BN statistics away from the identity: varied requantisation
        for mod in net.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 2.0)
    net.eval()
    x = torch.rand(56, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    path = work / "tiny.mtm"
    cv.convert_to_file(net, x[:48], path, progress=False)
    data = work / "x.bin"
    cv.quantize_input(path.read_bytes(), x[48:]).tofile(data)
    return path, data


RUN = """
import sys
import microtrain as mt
from microtrain import model as M
path, data, keep = sys.argv[1], sys.argv[2], sys.argv[3]
keep = None if keep == "-" else int(keep)
raw = open(data, "rb").read()
def outs(whole):
    if whole:
        M._place = lambda *a: None  # whole buffers: plan.forward_fit's, as where place.py cannot load
    m = mt.load(path)
    n = m.input.numel
    res = []
    for i in range(len(raw) // n):
        res.append(bytes(m.forward(raw[i * n:(i + 1) * n], keep_from=keep)))
    fz = m._fused.get(-1 if keep is None else keep) or {}
    bands = []  # per run: its layers, the last B, and whether B adds into a skip
    for j in sorted(fz):
        if j >= 0 and type(fz[j]) is tuple and len(fz[j]) > 3:
            f = fz[j]
            As = ".".join(str(f[k].index) for k in range(9, len(f), 3))  # (A, band, descriptor per A)
            bands.append(As + "." + str(j) + ("+" if fz[j][0] else ""))
    owners = []
    for b in m.owners(keep).values():
        if not any(b is o for o in owners):
            owners.append(b)
    return res, bands, sum(len(b) for b in owners)
a, bands, size = outs(False)
b, none, whole = outs(True)
print("SAME", a == b, len(a))
print("BANDS", ",".join(str(j) for j in bands))
print("NONE", len(none))
print("BYTES", size, whole)
"""


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
@pytest.mark.parametrize("keep", ["-", "12"], ids=["inference", "training-prefix"])
def test_bands_give_the_bytes_of_whole_buffers(tiny: tuple[Path, Path], pure: bool, keep: str,
                                               monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path, data = tiny
    script = tmp_path / "bands.py"
    script.write_text(RUN)
    if pure:
        monkeypatch.setenv("MICROTRAIN_PURE", "1")
    p = run_micropython(script, [str(path), str(data), keep], timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    out = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in p.stdout.splitlines() if " " in ln}
    assert out["SAME"] == "True 8", out
    runs = out["BANDS"].split(",")
    lys = mtm.read(path.read_bytes()).layers
    assert out["NONE"] == "0", out  # the whole-buffer plan has no bands
    # expand -> depthwise 3x3 (stride 1, then 2) -> project runs, one adding into its block's skip
    shapes = set()
    for r in runs:
        idx = [int(v) for v in r.rstrip("+").split(".")]
        shapes.add(tuple((lys[j].params[6], lys[j].params[8]) for j in idx) + (r.endswith("+"),))
    assert ((1, 1), (3, 2), (1, 1), False) in shapes, runs
    assert ((1, 1), (3, 1), (1, 1), True) in shapes, runs
    size, whole = (int(v) for v in out["BYTES"].split())
    assert size < whole, out
