"""examples/digits_mlp: the MLP trained inside micropython reaches 85 % and its logits stay bit-exact."""

from __future__ import annotations

import re
import subprocess
import sys

from support.harness import ROOT


def test_demo_trains_digits_mlp_to_85_percent() -> None:
    p = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "digits_mlp" / "run_demo.py")],
        capture_output=True, text=True, timeout=600, cwd=ROOT, check=False,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    last = p.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"demo: test_accuracy=([0-9.]+)", last)
    assert m, last
    assert float(m.group(1)) >= 0.85
    # the device's final logits were re-checked against the oracle by the demo itself
    assert "bit-exact vs oracle" in p.stdout
