"""A natmod of some op families only (``make natmod ARCH=x64 OPS=...``), in the real micropython.

Built for conv2d and maxpool: its table is exactly the spec's functions of those ops and of
none (kernelspec.in_build); each kept kernel is bit-exact against the numpy oracle on the
seeded cases; a left-out one raises AttributeError naming its op and the build that has it; a
model with a layer of a left-out op (linear) is refused at load, naming it and the fix, and the
validator's rules of the left-out ops are not in the module; it is smaller than the whole one; and
`microtrain run --ops` runs a script with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from microtrain_tools.kernelspec import FUNCS, in_build, parse_ops
from support import kernel_cases
from support.harness import (
    MICROPYTHON,
    PYTHON_LIB,
    ROOT,
    RUNNER,
    RunOutcome,
    assert_complete,
    decode_results,
    ensure_natmod,
    failures,
    write_cases,
)
from support.kernel_cases import ALL_OPS

OPS = "conv2d,maxpool"
SEED = 2929
PER_OP = 12  # one cycle of the conv variants


@pytest.fixture(scope="module")
def natmod_dir() -> Path:
    proc = subprocess.run(["make", "--no-print-directory", "natmod", "ARCH=x64", f"OPS={OPS}"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    d = ROOT / "build" / "natmod" / "x64-conv2d+maxpool"
    assert (d / "_microtrain.mpy").is_file(), proc.stdout
    return d


def _run(natmod_dir: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, MICROPYPATH=f"{natmod_dir}:{PYTHON_LIB}")
    return subprocess.run([str(MICROPYTHON), *argv], capture_output=True, text=True, timeout=300, env=env,
                          check=False)


def test_table_is_the_spec_subset(natmod_dir: Path) -> None:
    proc = _run(natmod_dir, ["-c", "import _microtrain as m\nprint(' '.join(sorted(dir(m))))"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = {n for n in proc.stdout.split() if not n.startswith("_") and n != "HAS_FLOAT"}
    want = {f.name for f in FUNCS if in_build(f, parse_ops(OPS))}
    assert names == want
    assert "conv2d_s8_forward" in names and "linear_s8_forward" not in names


def test_kept_kernels_bitexact(natmod_dir: Path, tmp_path: Path) -> None:
    kept = [op for op in ALL_OPS if in_build(next(f for f in FUNCS if f.name == op), parse_ops(OPS))]
    assert "conv2d_s8_grad_input" in kept and "maxpool_s8_forward" in kept and "relu_s8_backward" in kept
    cases = [c for op in kept for c in kernel_cases.generate(op, PER_OP, SEED)]
    cpath, rpath = tmp_path / "ops.cases", tmp_path / "ops.results"
    write_cases(cpath, cases)
    proc = _run(natmod_dir, ["-X", "heapsize=64M", str(RUNNER), str(cpath), str(rpath)])
    n, results = decode_results(rpath.read_bytes() if rpath.exists() else b"")
    outcome = RunOutcome(results, proc.returncode, proc.stdout, proc.stderr, n or len(cases))
    assert_complete(outcome, cases, "kernel runner on the conv2d,maxpool natmod")
    bad = failures(cases, results)
    assert not bad, "\n".join(bad)


def test_left_out_function_names_its_op(natmod_dir: Path) -> None:
    code = "\n".join([
        "import _microtrain as m",
        "print(hasattr(m, 'linear_s8_forward'), hasattr(m, 'conv2d_s8_forward'))",
        "for n in ('linear_s8_grad_input', 'conv2d_add_s8_forward', 'matmul_s8_forward', 'nope'):",
        "    try:",
        "        getattr(m, n)",
        "    except AttributeError as e:",
        "        print('ERR', e)",
    ])
    proc = _run(natmod_dir, ["-c", code])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "False True"
    errs = [ln for ln in lines if ln.startswith("ERR ")]
    assert len(errs) == 4, proc.stdout
    tail = ("is not in this natmod (OPS=conv2d+maxpool); build one with it "
            "(make natmod ARCH=x64 OPS=conv2d+maxpool,")
    assert errs[0] == (f"ERR _microtrain has no linear_s8_grad_input: op linear {tail}linear, or OPS=all) "
                       "or let `microtrain deploy --model` pick the model's ops")
    assert errs[1].startswith(f"ERR _microtrain has no conv2d_add_s8_forward: op conv2d,add {tail}conv2d,add")
    assert errs[2].startswith(f"ERR _microtrain has no matmul_s8_forward: op matmul {tail}matmul,")
    assert errs[3] == "ERR _microtrain has no nope (this natmod: OPS=conv2d+maxpool)"


def test_package_refuses_a_model_with_a_left_out_layer(natmod_dir: Path, tmp_path: Path) -> None:
    """A model whose linear layer's op was left out: refused at load by the natmod's validator,
    naming the layer, its op and the build that has it (no crash, no fallback to the pure-Python
    kernels); the same file loads with the whole natmod."""
    torch = pytest.importorskip("torch")
    from microtrain_tools import convert as cv

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 4))
    x = torch.rand(8, 1, 4, 4).numpy()
    path = tmp_path / "fc.mtm"
    cv.convert_to_file(net, x, path, progress=False)
    code = "\n".join([
        "import microtrain as mt",
        "print('native', mt.NATIVE)",
        "try:",
        f"    m = mt.load({str(path)!r})",
        "    print('loaded', len(m.forward(bytes(16))))",
        "except ValueError as e:",
        "    print('ERR', e)",
    ])
    proc = _run(natmod_dir, ["-c", code])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "native True" in proc.stdout
    want = ("op linear is not in this natmod (OPS=conv2d+maxpool); build one with it (make natmod ARCH=x64 "
            "OPS=conv2d+maxpool,linear, or OPS=all) or let `microtrain deploy --model` pick the model's ops")
    err = [ln for ln in proc.stdout.splitlines() if ln.startswith("ERR ")]
    assert len(err) == 1 and "mtm_validate: layer 0 '" in err[0] and err[0].endswith(want), proc.stdout
    proc = _run(ensure_natmod().parent, ["-c", code])
    assert proc.returncode == 0 and "loaded 4" in proc.stdout, proc.stdout + proc.stderr


def test_left_out_ops_rules_not_linked(natmod_dir: Path) -> None:
    """The validator's rules of the ops a build leaves out are not in it: the GRU / LSTM and the
    sequence ops' messages are in the whole natmod only."""
    rules = [b"dtanh (tables[768:]) < 0", b"dtanh (tables[1280:]) < 0",
             b"output quantisation must be scale 1/256, zero point -128"]
    whole = ensure_natmod().read_bytes()
    part = (natmod_dir / "_microtrain.mpy").read_bytes()
    assert all(r in whole for r in rules), [r for r in rules if r not in whole]
    assert not any(r in part for r in rules), [r for r in rules if r in part]


def test_smaller_than_the_whole_module(natmod_dir: Path) -> None:
    full = ensure_natmod().stat().st_size
    part = (natmod_dir / "_microtrain.mpy").stat().st_size
    assert part < full * 0.8, (part, full)


def test_microtrain_run_ops(natmod_dir: Path, tmp_path: Path) -> None:
    """`microtrain run --ops` puts that natmod in the package it runs the script with."""
    script = tmp_path / "names.py"
    script.write_text("import _microtrain as K\nprint(sorted(n for n in dir(K) if not n.startswith('_')))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
    proc = subprocess.run([sys.executable, "-m", "microtrain_tools.cli", "run", "--ops", OPS, str(script)],
                          capture_output=True, text=True, timeout=600, env=env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    want = sorted([f.name for f in FUNCS if in_build(f, parse_ops(OPS))] + ["HAS_FLOAT"])
    assert proc.stdout.strip() == repr(want)
