"""CircuitPython semantics (docs/circuitpython.md), checked on the real unix MicroPython.

``tests/mp/cpy_semantics.py`` runs a script with bytearray / array / memoryview
element stores range-checked (CircuitPython raises OverflowError where
MicroPython truncates) and ``time`` reduced to a CircuitPython board's
(no ``ticks_*``). Under it:

- the checker itself raises on an out-of-range store and on ``time.ticks_ms``
  (so the checks below can fail);
- seeded cases of every pure-Python kernel, also with memoryview arguments,
  are bit-exact against the numpy oracle;
- the device package trains (Trainer steps, sparse updates, checkpoint save,
  JSON log) with the pure-Python kernels and with the native module, and
  every weight, state array and loss equals the unchecked native run.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from support import kernel_cases
from support.harness import (
    BUILD_TEST,
    MICROPYTHON,
    NATMOD_X64,
    PYTHON_LIB,
    ROOT,
    RUNNER,
    Case,
    RunOutcome,
    assert_complete,
    decode_results,
    ensure_natmod,
    failures,
    write_cases,
)
from support.kernel_cases import ALL_OPS
from support.training_cases import (
    ADAM,
    DYN,
    SGD,
    SGDM,
    STATIC,
    Setup,
    build_setups,
    device,
    labels_of,
    read_dump,
)
from support.training_cases import RUNNER as TRAIN_RUNNER

CPY = ROOT / "tests" / "mp" / "cpy_semantics.py"
SHIM = ROOT / "tests" / "mp" / "pykernel_shim.py"
SEED = 1616


def _run(args: list[str], path: str, pure: bool, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, MICROPYPATH=path)
    if pure:
        env["MICROTRAIN_PURE"] = "1"
    else:
        env.pop("MICROTRAIN_PURE", None)
    # the heap of the pure-Python kernel runs (test_pykernels): the default one fragments on the
    # biggest generated cases
    return subprocess.run([str(MICROPYTHON), "-X", "heapsize=64M", str(CPY), *args], capture_output=True,
                          text=True,
                          timeout=timeout, env=env, check=False)


def _stores(out: str) -> int:
    m = re.search(r"cpy_semantics: checked_stores=(\d+)", out)
    assert m, out[-2000:]
    return int(m.group(1))


def test_checker_refuses_what_circuitpython_refuses(tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(
        "import time\nfrom array import array\n"
        "def t(f):\n"
        "    try:\n        f()\n        print('ok')\n"
        "    except Exception as e:\n        print(type(e).__name__)\n"
        "a = array('b', [0, 0])\n"
        "t(lambda: a.__setitem__(0, 127))\n"
        "t(lambda: a.__setitem__(0, 128))\n"
        "t(lambda: memoryview(a).__setitem__(1, 255))\n"
        "t(lambda: memoryview(a)[0:2].__setitem__(1, -128))\n"
        "t(lambda: bytearray(2).__setitem__(0, -1))\n"
        "t(lambda: memoryview(bytearray(2))[1:].__setitem__(0, 256))\n"
        "t(lambda: array('b', memoryview(b'\\xff')))\n"
        "t(lambda: array('b', b'\\xff'))\n"
        "t(lambda: array('i', [0]).__setitem__(0, 1 << 31))\n"
        "t(lambda: time.ticks_ms())\n"
        "t(lambda: time.monotonic_ns())\n")
    p = _run([str(script)], str(PYTHON_LIB), pure=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[:11] == ["ok", "OverflowError", "OverflowError", "ok", "OverflowError",
                                     "OverflowError", "OverflowError", "ok", "OverflowError",
                                     "AttributeError", "ok"]


def _run_cases(cases: list[Case], name: str) -> tuple[RunOutcome, int]:
    wd = BUILD_TEST / "runs"
    wd.mkdir(parents=True, exist_ok=True)
    cpath = wd / f"cpy-{name}-{os.getpid()}.cases"
    rpath = cpath.with_suffix(".results")
    write_cases(cpath, cases)
    rpath.unlink(missing_ok=True)
    proc = _run(["--host-time", str(SHIM), str(RUNNER), str(cpath), str(rpath)], str(PYTHON_LIB), pure=True)
    ncases, results = decode_results(rpath.read_bytes() if rpath.exists() else b"")
    outcome = RunOutcome(results, proc.returncode, proc.stdout, proc.stderr, ncases or len(cases), cpath)
    return outcome, _stores(proc.stdout)


def test_pure_python_kernels_store_in_range() -> None:
    from kernels.test_pykernels import _as_views as as_views  # the same view cases

    src = kernel_cases.generate_all(SEED, 12)
    flat = [c for op in ALL_OPS for c in src[op]]
    rng = random.Random(SEED)
    views = [as_views(c, rng) for op in ALL_OPS for c in kernel_cases.generate_all(SEED + 1, 4)[op]]
    outcome, stores = _run_cases(flat + views, "kernels")
    assert_complete(outcome, flat + views, "cpy_semantics + pykernels")
    bad = failures(flat + views, outcome.results)
    assert not bad, "\n".join(bad)
    assert stores > 10000


@pytest.fixture(scope="module")
def setups(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Setup]:
    return build_setups(tmp_path_factory.mktemp("cpy_training"))


# (kernels, model, Trainer arguments): every mode, both optimisers, both sparse policies,
# Trainer.fit with the feature cache and shuffling, batches, checkpoint and log
RUNS = {
    "pure-mixed-sgdm-dynamic": ("pure", "res", dict(train="all", mode="mixed", opt=SGDM, sparse=DYN,
                                                     batch=2)),
    "native-mixed-sgdm-dynamic": ("native", "res", dict(train="all", mode="mixed", opt=SGDM, sparse=DYN,
                                                       batch=2)),
    "pure-int8-adam-static-fit": ("pure", "cnn", dict(train="last:2", mode="int8", opt=ADAM, sparse=STATIC,
                                                      batch=3,
                                                      fit={"epochs": 2, "shuffle": True, "seed": 5})),
    "pure-float32-sgd": ("pure", "misc", dict(train="all", mode="float32", opt=SGD, batch=2)),
}


@pytest.mark.parametrize("run", list(RUNS))
def test_device_package_trains_under_circuitpython_rules(setups: dict[str, Setup], tmp_path: Path,
                                                          run: str) -> None:
    """Trainer steps or fit, a checkpoint save and a JSON log under the checks equal the
    unchecked native run bit for bit."""
    kernels, name, kw = RUNS[run]
    s = setups[name]
    extra: dict[str, Any] = {"log": str(tmp_path / "ref.log"), "save": str(tmp_path / "ref.mtm")}
    ref = device(s, tmp_path, "ref", order=range(6), labels=labels_of(s), **kw, **extra)
    cfg = json.loads((tmp_path / "ref.json").read_text())
    cfg.update(out=str(tmp_path / "cpy.dump"), log=str(tmp_path / "cpy.log"), save=str(tmp_path / "cpy.mtm"))
    (tmp_path / "cpy.json").write_text(json.dumps(cfg))
    if kernels == "native":
        ensure_natmod()
        path = f"{NATMOD_X64}:{PYTHON_LIB}"
    else:
        path = str(PYTHON_LIB)
    p = _run([str(TRAIN_RUNNER), str(tmp_path / "cpy.json")], path, pure=kernels == "pure")
    assert p.returncode == 0 and "TRAIN-RUNNER-DONE" in p.stdout, (p.stdout + p.stderr)[-3000:]
    assert _stores(p.stdout) > 100
    got = read_dump(tmp_path / "cpy.dump")
    assert ref.keys() == got.keys()
    diffs = [k for k in ref if not np.array_equal(ref[k], got[k])]
    assert not diffs, f"runs under CircuitPython rules differ in {diffs}"
    assert (tmp_path / "cpy.mtm").read_bytes() == (tmp_path / "ref.mtm").read_bytes()
    n_log = len((tmp_path / "ref.log").read_text().splitlines())
    assert n_log > 0 and len((tmp_path / "cpy.log").read_text().splitlines()) == n_log


def test_refused_native_module_is_reported(tmp_path: Path) -> None:
    """A _microtrain.mpy that the interpreter refuses (ValueError: another arch / .mpy version; on
    CircuitPython every MicroPython .mpy) is not a silent fallback: one line says why, NATIVE is
    False, kern.NATIVE_ERROR holds the reason, and the package still works (pure-Python kernels)."""
    ensure_natmod()
    data = bytearray((NATMOD_X64 / "_microtrain.mpy").read_bytes())
    data[2] = (data[2] & 0x03) | (9 << 2)  # the header's arch field: an arch this binary is not
    (tmp_path / "_microtrain.mpy").write_bytes(bytes(data))
    src = ("import microtrain as mt\nprint('native', mt.NATIVE, mt.kern.NATIVE_ERROR)\n"
           "print('kernel', mt.kern.K.dyn_requant_s8 is mt.kern.py('dyn_requant_s8'))\n")
    env = dict(os.environ, MICROPYPATH=f"{tmp_path}:{PYTHON_LIB}")
    env.pop("MICROTRAIN_PURE", None)
    p = subprocess.run([str(MICROPYTHON), "-c", src], capture_output=True, text=True, timeout=60, env=env,
                       check=False)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    m = re.fullmatch(r"microtrain: _microtrain not loaded \((incompatible .mpy [a-z]+)\): "
                     r"using the pure-Python kernels", lines[0])
    assert m, lines
    assert lines[1:] == [f"native False {m.group(1)}", "kernel True"]


def test_dist_circuitpython_bundle(tmp_path: Path) -> None:
    """make dist's CircuitPython bundle: lib/microtrain holds every package source unchanged (no
    MicroPython .mpy, which CircuitPython refuses), its zip is the same tree and reproducible, and
    the bundle's package loads a model and predicts under CircuitPython rules."""
    import zipfile

    from microtrain_tools import dist

    ensure_natmod()
    args = ["--no-build", "--archs", "x64", "--out", str(tmp_path / "a"), "--quiet"]
    assert dist.main(args) == 0
    # built again (the bundle only): the zip must be the same bytes
    srcs_rel = dist.python_sources(PYTHON_LIB)
    dist.build_circuitpython(tmp_path / "b", PYTHON_LIB, srcs_rel, dist.package_version(PYTHON_LIB))
    outs = [tmp_path / "a", tmp_path / "b"]
    lib = outs[0] / "circuitpython" / "lib"
    srcs = sorted(p.relative_to(PYTHON_LIB).as_posix() for p in (PYTHON_LIB / "microtrain").rglob("*.py"))
    got = sorted(p.relative_to(lib).as_posix() for p in lib.rglob("*") if p.is_file())
    assert got == srcs
    assert all((lib / s).read_bytes() == (PYTHON_LIB / s).read_bytes() for s in srcs)
    zips = [next(o.glob("microtrain-circuitpython-*.zip")) for o in outs]
    assert zips[0].read_bytes() == zips[1].read_bytes()
    with zipfile.ZipFile(zips[0]) as z:
        assert sorted(z.namelist()) == ["lib/" + s for s in srcs]
        assert all(z.read("lib/" + s) == (PYTHON_LIB / s).read_bytes() for s in srcs)
    from support.digits_model import digits_model

    dm = digits_model(4)
    (tmp_path / "m.mtm").write_bytes(dm.mtm)
    script = tmp_path / "predict.py"
    script.write_text(f"import microtrain as mt\nm = mt.load({str(tmp_path / 'm.mtm')!r})\n"
                      + "".join(f"print(list(m.forward({bytes(x.tobytes())!r})))\n" for x in dm.x))
    p = _run([str(script)], str(lib), pure=True)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [ln for ln in p.stdout.splitlines() if ln.startswith("[")]
    assert rows == [str([int(v) for v in row]) for row in dm.expected]


def test_quantize_input_stores_fit_any_int8_buffer(tmp_path: Path) -> None:
    """Model.quantize_input into its own bytearray, a given array('b'), array('B') or a memoryview
    of array('b'), under CircuitPython rules: the same int8 values as the host converter's."""
    from microtrain_tools import convert as cv
    from support.digits_model import digits_model

    dm = digits_model(4)
    (tmp_path / "m.mtm").write_bytes(dm.mtm)
    rng = np.random.default_rng(16)
    x = rng.uniform(-0.6, 1.6, size=(3, 1, 8, 8))
    x[0, 0, 0, :3] = [1e30, -1e30, 0.0]  # saturating values
    expected = cv.quantize_input(dm.mtm, x)
    script = tmp_path / "q.py"
    rows = [[float(v) for v in row.reshape(-1)] for row in x]
    script.write_text(
        "from array import array\nimport microtrain as mt\n"
        f"m = mt.load({str(tmp_path / 'm.mtm')!r})\n"
        f"for vals in {rows!r}:\n"
        "    outs = [m.quantize_input(vals), m.quantize_input(vals, array('b', bytes(64))),\n"
        "            m.quantize_input(vals, array('B', bytes(64))),\n"
        "            m.quantize_input(vals, memoryview(array('b', bytes(64))))]\n"
        "    print(' '.join(bytes(o).hex() for o in outs))\n")
    p = _run([str(script)], str(PYTHON_LIB), pure=True)
    assert p.returncode == 0, p.stdout + p.stderr
    got = [ln.split() for ln in p.stdout.splitlines() if not ln.startswith("cpy_semantics")]
    assert got == [[row.tobytes().hex()] * 4 for row in expected]
