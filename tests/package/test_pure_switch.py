"""Forcing the pure-Python kernels: MICROTRAIN_PURE and ``microtrain run --pure``.

Hiding the natmod from MICROPYPATH cannot hide a ``_microtrain`` built into the
binary (a firmware). So ``microtrain.kern`` reads MICROTRAIN_PURE (os.getenv) and
``run --pure`` sets it; a binary that cannot be switched (built-in module, no
os.getenv) is refused with a one-line error instead of silently running native.

- the switch wins over an importable ``_microtrain`` (the natmod on the path): the
  package uses microtrain.pyk, and the outputs equal the numpy oracle's;
- ``run --pure`` in the venv's micropython: pure kernels, natmod off the path;
  without ``--pure`` a leftover MICROTRAIN_PURE export does not apply;
- the fwport interpreter of tests/firmware/test_firmware.py (``_microtrain`` built in,
  microtrain frozen, no ``os`` module) is refused by ``run --pure``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from microtrain_tools import board
from support.digits_model import digits_model
from support.harness import (
    MICROPYTHON,
    NATMOD_X64,
    PYTHON_LIB,
    ROOT,
    binary_has_builtin_microtrain,
    ensure_natmod,
)

SCRIPT = """
import sys
try:
    import _microtrain
    print("IMPORT _microtrain ok")
except ImportError:
    print("IMPORT _microtrain missing")
import microtrain as mt
print("NATIVE", mt.NATIVE)
m = mt.load(sys.argv[1])
x = open(sys.argv[2], "rb").read()
n = m.input.numel
for i in range(len(x) // n):
    print("OUT", " ".join(str(v) for v in m.forward(x[i * n:(i + 1) * n])))
pre = "microtrain.pyk."
print("PYK", " ".join(sorted(k[len(pre):] for k in sys.modules if k.startswith(pre))))
"""


def _files(tmp: Path) -> tuple[Path, Path, Path, list[str]]:
    dm = digits_model()
    mfile, xfile, script = tmp / "m.mtm", tmp / "x.bin", tmp / "s.py"
    mfile.write_bytes(dm.mtm)
    xfile.write_bytes(dm.x[:4].tobytes())
    script.write_text(SCRIPT)
    want = [" ".join(str(int(v)) for v in row) for row in dm.expected[:4]]
    return mfile, xfile, script, want


def _parse(stdout: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        k, _, v = line.partition(" ")
        out.setdefault(k, []).append(v)
    return out


@pytest.mark.parametrize("value,pure", [("1", True), ("0", False), ("", False), (None, False)])
def test_env_switch_wins_over_an_importable_native_module(tmp_path: Path, value: str | None,
                                                          pure: bool) -> None:
    ensure_natmod()
    mfile, xfile, script, want = _files(tmp_path)
    env = dict(os.environ, MICROPYPATH=f"{NATMOD_X64}:{PYTHON_LIB}")
    env.pop("MICROTRAIN_PURE", None)
    if value is not None:
        env["MICROTRAIN_PURE"] = value
    p = subprocess.run([str(MICROPYTHON), str(script), str(mfile), str(xfile)], env=env, capture_output=True,
                       text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    got = _parse(p.stdout)
    assert got["IMPORT"] == ["_microtrain ok"]  # the native module is there either way
    assert got["NATIVE"] == [str(not pure)]
    assert got["OUT"] == want
    mods = set(got["PYK"][0].split())
    if pure:  # forward and load took their kernels from microtrain.pyk, one module each
        # (conv2d with fused relu, maxpool, linear: activation, add, softmax_xent, sparse not needed;
        # load dropped the validator, mtm_loader, once the model was read: kern.release)
        assert mods == {"checks", "conv2d", "linear", "pool", "quant", "accumulate"}, mods
    else:
        assert not mods


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    e = dict(env, PYTHONPATH=str(ROOT / "tools"))
    return subprocess.run([sys.executable, "-m", "microtrain_tools.cli", *args], capture_output=True,
                          text=True, env=e, timeout=300, check=False)


def test_run_pure_runs_the_pure_python_kernels(tmp_path: Path) -> None:
    ensure_natmod()
    mfile, xfile, script, want = _files(tmp_path)
    env = dict(os.environ, MICROTRAIN_MICROPYTHON=str(MICROPYTHON))
    env["MICROTRAIN_PURE"] = "1"  # a leftover export: only --pure decides
    for pure in (True, False):
        r = _cli("run", *(["--pure"] if pure else []), str(script), str(mfile), str(xfile), env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        got = _parse(r.stdout)
        assert got["NATIVE"] == [str(not pure)] and got["OUT"] == want
        # --pure takes the natmod off the path; a built-in _microtrain stays importable (unused)
        builtin = binary_has_builtin_microtrain()
        assert got["IMPORT"] == ["_microtrain missing" if pure and not builtin else "_microtrain ok"]
    cmd, e = board.run_command(str(script), [], native=False)
    pkg = board.board_package()
    assert e["MICROTRAIN_PURE"] == "1" and e["MICROPYPATH"].split(":")[0] == str(pkg.parent / "pure")
    assert not (pkg.parent / "pure" / "_microtrain.mpy").exists()
    cmd, e = board.run_command(str(script), [], native=True)
    assert "MICROTRAIN_PURE" not in e and e["MICROPYPATH"].split(":")[0] == str(pkg)
    assert (pkg / "_microtrain.mpy").read_bytes() == (NATMOD_X64 / "_microtrain.mpy").read_bytes()


def test_run_pure_refuses_a_firmware_it_cannot_switch(tmp_path: Path) -> None:
    """The fwport interpreter (tests/support/fwbuild.py: _microtrain built in, the rp2
    manifest's microtrain frozen in, no os module) would run native under --pure."""
    from support.fwbuild import frozen_firmware

    exe, _ = frozen_firmware()
    script = tmp_path / "s.py"
    # the fwport interpreter has no json module: microtrain imports up to the trainer (as in
    # test_firmware.py's frozen-package test), microtrain.kern is in sys.modules
    script.write_text("import sys\ntry:\n    import microtrain\nexcept ImportError:\n    pass\n"
                      "print('NATIVE', sys.modules['microtrain.kern'].NATIVE)\n")
    # the firmware itself: native kernels, whatever MICROTRAIN_PURE says
    p = subprocess.run([str(exe), str(script)], env=dict(os.environ, MICROTRAIN_PURE="1"),
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0 and p.stdout.strip() == "NATIVE True", p.stdout + p.stderr
    env = dict(os.environ, MICROTRAIN_MICROPYTHON=str(exe))
    r = _cli("run", "--pure", str(script), env=env)
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1, (r.returncode, r.stdout, r.stderr)
    assert err.startswith("microtrain run: error: --pure:") and "_microtrain built in" in err, err
    assert "NATIVE" not in r.stdout  # the script did not run
    r = _cli("run", str(script), env=env)  # without --pure it runs, natively
    assert r.returncode == 0 and r.stdout.strip() == "NATIVE True", r.stdout + r.stderr
