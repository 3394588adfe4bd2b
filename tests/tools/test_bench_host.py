"""`make bench` (evals/benchmarks/bench_host.py) runs end to end and prints its summary line.

A benchmark, not a test of speed: the ratios are not asserted, only that a short run
(`--quick`: one round of short loops) of both sides works and the line is well formed."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

from support.harness import ROOT, ensure_natmod

LINE = re.compile(r"bench: infer_vs_torch=(\S+) step_last2_vs_torch=(\S+) step_all_vs_torch=(\S+)")
MEDIAN = re.compile(r"bench-median: infer_vs_torch=(\S+) step_last2_vs_torch=(\S+) step_all_vs_torch=(\S+)")


def test_quick_bench_prints_a_well_formed_summary_line() -> None:
    ensure_natmod()
    doc = ROOT / "docs" / "performance-host.md"
    before = doc.read_bytes() if doc.exists() else None
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'tools'}:{ROOT}")
    p = subprocess.run([sys.executable, "-m", "evals.benchmarks.bench_host", "--quick"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    lines = p.stdout.strip().splitlines()
    m = LINE.fullmatch(lines[-1])
    assert m, lines[-1]
    assert all(math.isfinite(float(v)) and float(v) > 0 for v in m.groups())
    # the medians over the rounds, the same three ratios
    med = MEDIAN.fullmatch(lines[-2])
    assert med, lines[-2]
    assert all(math.isfinite(float(v)) and float(v) > 0 for v in med.groups())
    # the table and the feature-cache section were printed; --quick leaves the page alone
    assert any(ln.startswith("| inference (batch 1) |") for ln in lines)
    assert any(ln.startswith("| RAM cache |") for ln in lines)
    assert (doc.read_bytes() if doc.exists() else None) == before


def test_drift_run_times_the_first_and_last_steps() -> None:
    """The drift run (`make bench`'s drift=D, not in --quick) of the micropython side: a short one
    reports its first and last window of steps, each of the window's length."""
    ensure_natmod()
    sys.path.insert(0, str(ROOT))
    from evals.benchmarks import bench_host as bh

    mtm, mtd, _, _, _ = bh.prepare()
    res = bh.run_micropython(mtm, mtd, {b: 1 for b in bh.BENCHES}, 0, n_drift=40)
    assert res["drift_first"][0] == res["drift_last"][0] == 20, res
    assert res["drift_first"][1] > 0 and res["drift_last"][1] > 0, res
