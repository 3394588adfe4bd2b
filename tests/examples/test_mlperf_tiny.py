"""examples/mlperf_tiny and `make coverage`, small: the four MLPerf Tiny models (seeded init, untrained)
convert and run bit-exact in micropython against the oracle; two idiom models of the coverage suite
go end to end (trained in PyTorch, converted, agreement, bit-exact, fine-tuned on the device)."""

from __future__ import annotations

import re
import subprocess
import sys

from support.harness import ROOT, ensure_natmod


def _run(args: list[str]) -> str:
    ensure_natmod()
    p = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=900, cwd=ROOT,
                       check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def test_mlperf_models_convert_and_run_bitexact() -> None:
    out = _run([str(ROOT / "examples" / "mlperf_tiny" / "run.py"), "--mode", "smoke"])
    m = re.search(r"^mlperf_tiny: models=\d+/4 agree_min=[0-9.]+ bitexact=(\d+)/(\d+) train=\d+/4$", out,
                  re.M)
    assert m, out[-2000:]
    assert int(m.group(2)) == 16 and m.group(1) == m.group(2), m.group(0)
    for name in ("ds_cnn_s", "resnet8", "mobilenet_v1", "autoencoder"):
        assert re.search(rf"^  {name} +mlperf agree=[0-9.]+ bitexact=4/4 ", out, re.M), name


def test_coverage_idiom_models_end_to_end() -> None:
    out = _run(["-m", "evals.accuracy.coverage", "--no-mlperf", "--only", "residual_add", "hardswish"])
    last = out.strip().splitlines()[-1]
    m = re.fullmatch(r"coverage: models=(\d+)/2 agree_min=([0-9.]+) bitexact=(\d+)/(\d+) train=(\d+)/2 "
                     r"ops=(\d+)", last)
    assert m, last
    assert m.group(1) == "2" and m.group(5) == "2", last
    assert float(m.group(2)) >= 0.98 and m.group(3) == m.group(4), last
    assert int(m.group(6)) >= 5  # conv, linear, relu, add, mean-pool, LUT, ...
