"""``make dist`` packages (tools/microtrain_tools/dist.py).

- Every arch: package.json lists exactly the files of the package (the natmod
  plus one .mpy per python_lib/microtrain/*.py), and every .mpy header has the
  expected version bytes. The x64 natmod's version/arch bytes must equal what
  the real micropython reports in ``sys.implementation._mpy``.
- x64: installed with the real ``mpremote mip install`` into a fresh folder of
  the real unix micropython (mpremote talks to its raw REPL through a pair of
  pseudo-terminals), then run with only that folder on MICROPYPATH: the
  package imports from the installed .mpy files, uses the native kernels, and
  a converted digits model loaded from a file gives the oracle's outputs.
- Failures are clear: no .py files, a .py that does not compile.
"""

from __future__ import annotations

import ast
import json
import os
import pty
import select
import subprocess
import sys
import threading
import tty
from pathlib import Path

import pytest

from microtrain_tools import dist
from support.digits_model import digits_model
from support.harness import (
    MICROPYTHON,
    ROOT,
    binary_has_builtin_microtrain,
    ensure_natmod,
    skip_reason_builtin,
)

ARCHS = ("x64", "armv6m", "armv7m", "armv7emsp", "armv7emdp")
# MicroPython's native arch numbers (docs: "MicroPython .mpy files", header byte 2 = arch << 2 | sub-version).
ARCH_CODE = {"x64": 2, "armv6m": 4, "armv7m": 5, "armv7emsp": 7, "armv7emdp": 8}
MPREMOTE = ROOT / ".venv" / "bin" / "mpremote"
PY_SOURCES = sorted(p.relative_to(ROOT / "python_lib" / "microtrain").as_posix()  # pyk/ included
                    for p in (ROOT / "python_lib" / "microtrain").rglob("*.py"))


def _version() -> str:
    tree = ast.parse((ROOT / "python_lib" / "microtrain" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__version__" for t in node.targets):
            assert isinstance(node.value, ast.Constant)
            return str(node.value.value)
    raise AssertionError("python_lib/microtrain/__init__.py has no __version__")


def _host_mpy() -> int:
    proc = subprocess.run([str(MICROPYTHON), "-c", "import sys; print(sys.implementation._mpy)"],
                          capture_output=True, text=True, timeout=30, check=True)
    return int(proc.stdout)


@pytest.fixture(scope="module")
def all_dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    ensure_natmod()
    out = tmp_path_factory.mktemp("dist")
    # the CLI as `make dist` runs it, but building (with make) whatever natmod is missing or stale
    proc = subprocess.run([sys.executable, "-m", "microtrain_tools.dist", "--out", str(out), "--quiet"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "tools")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, proc.stdout


def test_help() -> None:
    proc = subprocess.run([sys.executable, "-m", "microtrain_tools.dist", "--help"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT / "tools")})
    assert proc.returncode == 0 and "package.json" in proc.stdout


def test_last_line(all_dist: tuple[Path, str]) -> None:
    _, stdout = all_dist
    assert stdout.rstrip("\n").splitlines()[-1] == "dist: ok archs=x64,armv6m,armv7m,armv7emsp,armv7emdp"


@pytest.mark.parametrize("arch", ARCHS)
def test_package_json_lists_every_file(all_dist: tuple[Path, str], arch: str) -> None:
    out, _ = all_dist
    pkg = out / f"{arch}_6.3"
    meta = json.loads((pkg / "package.json").read_text())
    assert set(meta) == {"urls", "version"}
    assert meta["version"] == _version()
    dests = [d for d, _ in meta["urls"]]
    assert all(d == s for d, s in meta["urls"]), "dest and src are the same relative path"
    assert len(dests) == len(set(dests))
    expected = {"_microtrain.mpy"} | {f"microtrain/{n[:-3]}.mpy" for n in PY_SOURCES}
    assert set(dests) == expected
    on_disk = {p.relative_to(pkg).as_posix() for p in pkg.rglob("*") if p.is_file()} - {"package.json"}
    assert on_disk == expected
    natmod = (pkg / "_microtrain.mpy").read_bytes()
    assert natmod == (ROOT / "build" / "natmod" / arch / "_microtrain.mpy").read_bytes()


@pytest.mark.parametrize("arch", ARCHS)
def test_mpy_headers(all_dist: tuple[Path, str], arch: str) -> None:
    out, _ = all_dist
    pkg = out / f"{arch}_6.3"
    natmod = (pkg / "_microtrain.mpy").read_bytes()[:4]
    assert natmod[:2] == b"M\x06"
    assert natmod[2] == (ARCH_CODE[arch] << 2) | 3, f"{arch}: arch/sub-version byte {natmod[2]:#x}"
    assert natmod[3] <= 31
    for name in PY_SOURCES:
        head = (pkg / "microtrain" / f"{name[:-3]}.mpy").read_bytes()[:4]
        assert head[:2] == b"M\x06", name
        # bytecode only: arch 0 (the loader then skips the sub-version check), board-sized small ints
        assert head[2] >> 2 in (0, ARCH_CODE[arch]), name
        assert head[3] <= 31, name


def test_x64_natmod_matches_host_runtime(all_dist: tuple[Path, str]) -> None:
    if binary_has_builtin_microtrain():
        pytest.skip(skip_reason_builtin("it loads no x64 natmod (its sys.implementation._mpy "
                                        "need not name x64)"))
    out, _ = all_dist
    mpy = _host_mpy()  # version | (arch << 2 | sub-version) << 8
    head = (out / "x64_6.3" / "_microtrain.mpy").read_bytes()[:3]
    assert head[1] == mpy & 0xFF and head[2] == (mpy >> 8) & 0xFF


# --------------------------------------------------------------------------
# install with mpremote mip into the real micropython, run from the install


def _mip_install(package_json: Path, target: Path,
                 timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """``mpremote connect <tty> resume mip install --target <target> <package.json>`` against the unix
    micropython: its REPL runs on one pseudo-terminal, mpremote opens another, a thread relays the bytes
    (``resume``: the unix port has no soft reset)."""
    mp_master, mp_slave = pty.openpty()
    rm_master, rm_slave = pty.openpty()
    tty.setraw(mp_slave)
    tty.setraw(rm_slave)
    proc = subprocess.Popen([str(MICROPYTHON)], stdin=mp_slave, stdout=mp_slave, stderr=mp_slave,
                            cwd=target.parent, close_fds=True)
    stop = threading.Event()

    def relay() -> None:
        while not stop.is_set():
            ready, _, _ = select.select([mp_master, rm_master], [], [], 0.05)
            for fd in ready:
                try:
                    data = os.read(fd, 4096)
                except OSError:
                    return
                os.write(rm_master if fd == mp_master else mp_master, data)

    t = threading.Thread(target=relay, daemon=True)
    t.start()
    try:
        return subprocess.run([str(MPREMOTE), "connect", os.ttyname(rm_slave), "resume", "mip", "install",
                               "--target", str(target), str(package_json)],
                              capture_output=True, text=True, timeout=timeout)
    finally:
        stop.set()
        t.join(timeout=5)
        proc.kill()
        proc.wait(timeout=10)
        for fd in (mp_master, mp_slave, rm_master, rm_slave):
            os.close(fd)


RUN_SCRIPT = """\
import sys
import binascii
import microtrain as mt
import microtrain.model
print("NATIVE", mt.NATIVE)
print("FILE", mt.__file__)
print("FILE", microtrain.model.__file__)
m = mt.load(sys.argv[1])
with open(sys.argv[2], "rb") as f:
    xs = f.read()
n = m.input.numel
for i in range(len(xs) // n):
    out = m.forward(xs[i * n:(i + 1) * n])
    print("OUT", binascii.hexlify(bytes(out)).decode(), m.predict(xs[i * n:(i + 1) * n]))
"""


def test_x64_mip_install_and_run(tmp_path: Path) -> None:
    if binary_has_builtin_microtrain():
        pytest.skip(skip_reason_builtin("the mip-installed x64 _microtrain.mpy would never be imported"))
    ensure_natmod()
    out = tmp_path / "dist"
    assert dist.main(["--archs", "x64", "--out", str(out), "--no-build", "--quiet"]) == 0
    pkg = out / "x64_6.3"
    board = tmp_path / "board"
    board.mkdir()
    lib = board / "lib"
    res = _mip_install(pkg / "package.json", lib)
    assert res.returncode == 0, res.stdout + res.stderr
    meta = json.loads((pkg / "package.json").read_text())
    installed = {p.relative_to(lib).as_posix() for p in lib.rglob("*") if p.is_file()}
    assert installed == {d for d, _ in meta["urls"]}
    for dest, src in meta["urls"]:
        assert (lib / dest).read_bytes() == (pkg / src).read_bytes(), dest

    dm = digits_model()
    (board / "model.mtm").write_bytes(dm.mtm)
    (board / "x.bin").write_bytes(dm.x.tobytes())
    (board / "run.py").write_text(RUN_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "MICROPYPATH"}
    env["MICROPYPATH"] = str(lib)
    proc = subprocess.run([str(MICROPYTHON), "-X", "heapsize=256k", "run.py", "model.mtm", "x.bin"],
                          cwd=board, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "NATIVE True" in lines
    files = [ln.split(" ", 1)[1] for ln in lines if ln.startswith("FILE ")]
    assert len(files) == 2 and all(f.startswith(str(lib)) and f.endswith(".mpy") for f in files), files
    outs = [ln.split() for ln in lines if ln.startswith("OUT ")]
    assert len(outs) == len(dm.x)
    for i, (_, hexed, pred) in enumerate(outs):
        got = bytes.fromhex(hexed)
        want = dm.expected[i].tobytes()
        assert got == want, f"sample {i}: device {got.hex()} oracle {want.hex()}"
        assert int(pred) == int(dm.expected[i].argmax())


# --------------------------------------------------------------------------
# clear failures


def test_no_sources_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ensure_natmod()
    (tmp_path / "lib" / "microtrain").mkdir(parents=True)
    rc = dist.main(["--archs", "x64", "--out", str(tmp_path / "out"), "--no-build", "--quiet",
                    "--python-lib", str(tmp_path / "lib")])
    assert rc == 1
    err = capsys.readouterr().err
    assert "no .py files" in err and "dist: ok" not in err


def test_compile_error_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ensure_natmod()
    pkg = tmp_path / "lib" / "microtrain"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "9.9"\n')
    (pkg / "broken.py").write_text("def f(:\n    pass\n")
    rc = dist.main(["--archs", "x64", "--out", str(tmp_path / "out"), "--no-build", "--quiet",
                    "--python-lib", str(tmp_path / "lib")])
    assert rc == 1
    captured = capsys.readouterr()
    assert "mpy-cross failed on" in captured.err and "broken.py" in captured.err
    assert "dist: ok" not in captured.out
