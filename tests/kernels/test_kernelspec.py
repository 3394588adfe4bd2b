"""The entry-point spec (tools/microtrain_tools/kernelspec.py) and what is generated from it.

The generated files must be what ``python -m microtrain_tools.kernelgen --write`` writes,
and the native module must be the spec: the same names, each taking the spec's
number of arguments (the binding's argument checks run, with the spec's fewest and
most; one fewer or one more is refused before any of them).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from microtrain_tools import kernelgen
from microtrain_tools.kernelspec import FUNCS
from support.harness import ROOT, run_micropython
from support.kernel_harness import ensure_natmod


def test_generated_outputs_current() -> None:
    assert kernelgen.stale() == [], "run: python -m microtrain_tools.kernelgen --write"


def test_stale_output_is_caught(tmp_path: Path) -> None:
    for rel in kernelgen.OUTPUTS:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    assert kernelgen.stale(tmp_path) == []
    stub = tmp_path / "stubs" / "_microtrain.pyi"
    text = stub.read_text()
    stub.write_text(text.replace("def relu_s8_forward(x: _In8, zp: int,", "def relu_s8_forward(x: _In8,"))
    assert kernelgen.stale(tmp_path) == ["stubs/_microtrain.pyi"]
    assert kernelgen.write(tmp_path) == ["stubs/_microtrain.pyi"]
    assert kernelgen.stale(tmp_path) == []


def test_kernelgen_check_cli() -> None:
    assert kernelgen.main(["--check"]) == 0


def test_spec_is_the_native_module() -> None:
    ensure_natmod()
    spec = {f.name: (f.n_min, f.n_max) for f in FUNCS}
    # For each name: does the call reach the binding's own checks ("name: ..." messages)
    # with n - 1, n_min, n_max and n_max + 1 arguments (all None)?
    src = (
        "import json, _microtrain as m\n"
        f"spec = {json.dumps(spec)}\n"
        "out = {}\n"
        "for name, (lo, hi) in spec.items():\n"
        "    f = getattr(m, name, None)\n"
        "    if f is None:\n"
        "        out[name] = None\n"
        "        continue\n"
        "    seen = []\n"
        "    for n in (lo - 1, lo, hi, hi + 1):\n"
        "        try:\n"
        "            f(*([None] * n))\n"
        "            seen.append('ran')\n"
        "        except (TypeError, ValueError) as e:\n"
        "            seen.append(str(e).startswith(name + ':'))\n"
        "    out[name] = seen\n"
        "print(json.dumps(out))\n"
        "print(json.dumps(sorted(n for n in dir(m) if not n.startswith('_') and n != 'HAS_FLOAT')))\n"
    )
    proc = run_micropython(src)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen_line, names_line = proc.stdout.strip().split("\n")[-2:]
    assert json.loads(names_line) == sorted(spec)
    seen = json.loads(seen_line)
    bad = {n: s for n, s in seen.items() if s != [False, True, True, False]}
    assert not bad, f"argument counts differ from the spec: {bad}"
