"""Firmware integration: usermod/ as a MicroPython user C module, ports/*/manifest.py.

No MicroPython source tree is available offline, but the MicroPython 1.23 core
(py/, shared/, tools/) that ``make setup`` unpacks from the mpy-cross-v6-3 sdist
is enough to check the integration with MicroPython's own build machinery:

- make: tests/fwport is a tiny host "port" (an interpreter running a script)
  built with ``USER_C_MODULES=<repo>/usermod``, i.e. py/py.mk includes
  usermod/microtrain/micropython.mk exactly as ``make -C ports/unix`` (or
  stm32) does. Built with the unix port's warnings as errors, once with
  single-precision floats (like esp32/rp2/stm32 boards) and once with double
  (like unix). The built-in ``_microtrain`` then runs the seeded kernel cases
  of tools/microtrain_tools/kernel_cases.py through tests/mp/kernel_runner.py
  and must match the numpy oracle bit for bit.
- cmake: py/usermod.cmake consumes ``USER_C_MODULES=<repo>/usermod/micropython.cmake``
  as the rp2/esp32 ports do; the gathered sources, include dirs and compile
  options are compared with the module folder, and the sources are compiled
  through the ``usermod`` INTERFACE target.
- Cortex-M: the firmware-mode sources compile with arm-none-eabi-gcc for
  M0+ (rp2040), M4F (stm32f4), M7 double FPU (stm32f7/h7), M33 (rp2350).
- manifests: each ports/<port>/manifest.py is run by MicroPython's real
  tools/manifestfile.py (stand-in port folder holding the default manifest it
  includes); the rp2 one is frozen into the fwport interpreter with
  tools/makemanifest.py, and the frozen microtrain package, with the built-in
  kernels, runs a converted digits model to the oracle's outputs.

What this cannot show: the ESP-IDF / pico-sdk / stm32 builds themselves
(Xtensa, linking, flash size), which need the port trees (docs/firmware.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from digits_model import digits_model
from harness import ROOT, RUNNER, compare, decode_results, write_cases
from microtrain_tools import kernel_cases

MPY_DIR = ROOT / "build" / "mpy_cross_v6_3-1.1.1" / "micropython"
FWPORT = ROOT / "ports" / "host"
FW_BUILD = ROOT / "build" / "fwport"
USERMOD = ROOT / "usermod"
MODDIR = USERMOD / "microtrain"
MPY_CROSS = ROOT / ".venv" / "bin" / "mpy-cross"
C_SOURCES = sorted(p.name for p in MODDIR.glob("*.c"))
PY_SOURCES = sorted(p.name for p in (ROOT / "python_lib" / "microtrain").glob("*.py"))
# The default manifest each port's FROZEN_MANIFEST replaces, which ours must include (docs/firmware.md).
PORT_DEFAULT_MANIFEST = {
    "unix": "variants/standard/manifest.py",
    "esp32": "boards/manifest.py",
    "rp2": "boards/manifest.py",
    "stm32": "boards/manifest.py",
}
UNIX_CWARN = ["-Wall", "-Werror", "-Wextra", "-Wno-unused-parameter", "-Wpointer-arith", "-Wdouble-promotion",
              "-Wfloat-conversion"]


def _need_core() -> None:
    assert (MPY_DIR / "py" / "py.mk").exists(), f"MicroPython core missing at {MPY_DIR}: run `make setup`"


def _make_fwport(build: Path, flt: str, extra: list[str] | None = None) -> tuple[Path, str]:
    _need_core()
    cmd = ["make", "-j2", "-C", str(FWPORT), f"TOP={MPY_DIR}", f"USER_C_MODULES={USERMOD}", f"BUILD={build}",
           f"MT_FW_FLOAT={flt}", *(extra or [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"fwport build failed:\n{(proc.stdout + proc.stderr)[-4000:]}"
    exe = build / "micropython-fw"
    assert exe.exists()
    return exe, proc.stdout + proc.stderr


def _standin_port() -> Path:
    """A folder standing in for ports/<port>: the default manifests our manifests include, each
    freezing a marker module (so the test sees that the include happened)."""
    port = FW_BUILD / "standin-port"
    for rel in set(PORT_DEFAULT_MANIFEST.values()):
        p = port / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text('module("standin_marker.py")\n')
        (p.parent / "standin_marker.py").write_text("MARK = 1\n")
    lib = FW_BUILD / "standin-mpy-lib"
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "README.md").write_text("stand-in for lib/micropython-lib (nothing is required from it)\n")
    return port


@pytest.fixture(scope="module")
def fw_frozen() -> tuple[Path, str]:
    """Single-precision floats, the rp2 manifest frozen in."""
    port = _standin_port()
    return _make_fwport(FW_BUILD / "frozen", "FLOAT", [
        f"FROZEN_MANIFEST={ROOT / 'ports' / 'rp2' / 'manifest.py'}", f"MICROPY_MANIFEST_PORT_DIR={port}",
        f"MPY_LIB_DIR={FW_BUILD / 'standin-mpy-lib'}", f"MICROPY_MPYCROSS={MPY_CROSS}"])


@pytest.fixture(scope="module")
def fw_double() -> tuple[Path, str]:
    return _make_fwport(FW_BUILD / "double", "DOUBLE")


# --------------------------------------------------------------------------
# the build files themselves


def _mk_sources() -> list[str]:
    text = (MODDIR / "micropython.mk").read_text()
    m = re.search(r"SRC_USERMOD_C\s*\+=\s*\$\(addprefix \$\(MICROTRAIN_MOD_DIR\)/,(.*?)\)", text, re.S)
    assert m, "micropython.mk: no SRC_USERMOD_C += $(addprefix $(MICROTRAIN_MOD_DIR)/, ...)"
    return sorted(m.group(1).replace("\\", " ").split())


def _cmake_sources() -> list[str]:
    text = (MODDIR / "micropython.cmake").read_text()
    m = re.search(r"target_sources\(usermod_microtrain INTERFACE(.*?)\)", text, re.S)
    assert m
    return sorted(s.replace("${CMAKE_CURRENT_LIST_DIR}/", "") for s in m.group(1).split())


def _natmod_sources() -> list[str]:
    m = re.search(r"^SRC\s*=\s*(.*)$", (MODDIR / "Makefile").read_text(), re.M)
    assert m
    return sorted(m.group(1).split())


def test_source_lists_complete() -> None:
    assert C_SOURCES, "no C sources?"
    assert _mk_sources() == C_SOURCES
    assert _cmake_sources() == C_SOURCES
    assert _natmod_sources() == C_SOURCES
    mk = (MODDIR / "micropython.mk").read_text()
    # USERMOD_DIR is reassigned for every module: capture it with an immediate assignment
    assert re.search(r"^MICROTRAIN_MOD_DIR := \$\(USERMOD_DIR\)$", mk, re.M)
    assert re.search(r"^CFLAGS_USERMOD \+=.*-ffp-contract=off", mk, re.M)
    cm = (MODDIR / "micropython.cmake").read_text()
    assert "target_compile_options(usermod_microtrain INTERFACE -ffp-contract=off)" in cm
    assert "target_link_libraries(usermod INTERFACE usermod_microtrain)" in cm
    top = (USERMOD / "micropython.cmake").read_text()
    assert "include(${CMAKE_CURRENT_LIST_DIR}/microtrain/micropython.cmake)" in top


# --------------------------------------------------------------------------
# make: the module built into an interpreter through py/py.mk


@pytest.mark.parametrize("cfg", ["frozen", "double"])
def test_make_usermod_builds_every_source(cfg: str, request: pytest.FixtureRequest) -> None:
    exe, log = request.getfixturevalue(f"fw_{cfg}")
    build = exe.parent
    # py.mk's own message, then one object per C file of the module
    assert f"Including User C Module from {MODDIR}" in log
    objs = sorted(p.name for p in (build / "microtrain").glob("*.o"))
    assert objs == [c[:-2] + ".o" for c in C_SOURCES]


def _run_fw(exe: Path, args: list[str], cwd: Path, heap: int = 64 << 20,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MT_FW_HEAP": str(heap)}
    return subprocess.run([str(exe), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("cfg,seed", [("frozen", 11), ("double", 12)])
def test_builtin_kernels_bitexact(cfg: str, seed: int, request: pytest.FixtureRequest,
                                  tmp_path: Path) -> None:
    exe, _ = request.getfixturevalue(f"fw_{cfg}")
    probe = tmp_path / "probe.py"
    probe.write_text("import _microtrain, sys\nprint(sys.implementation.version, _microtrain.HAS_FLOAT)\n")
    p = _run_fw(exe, [str(probe)], tmp_path)
    assert p.returncode == 0 and p.stdout.split()[-1] == "True", p.stdout + p.stderr  # x64 has an FPU

    cases = [c for op in kernel_cases.ALL_OPS for c in kernel_cases.generate(op, 6, seed)]
    cases += list(kernel_cases.generate_limits())
    cpath, rpath = tmp_path / "cases.bin", tmp_path / "results.bin"
    write_cases(cpath, cases)
    proc = _run_fw(exe, [str(RUNNER), str(cpath), str(rpath)], tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    n, results = decode_results(rpath.read_bytes())
    assert n == len(cases) and len(results) == len(cases)
    ops = {c.op for c in cases}
    assert ops == set(kernel_cases.ALL_OPS)
    bad = [f"{c.op}: {compare(c, r)[:2]}" for c, r in zip(cases, results, strict=True) if compare(c, r)]
    assert not bad, f"{len(bad)}/{len(cases)} cases differ from the oracle: {bad[:5]}"


# --------------------------------------------------------------------------
# cmake: py/usermod.cmake + the usermod INTERFACE target


def test_cmake_usermod(fw_frozen: tuple[Path, str]) -> None:
    assert shutil.which("cmake"), "cmake is not installed (tools/setup.sh installs it)"
    genhdr_build = fw_frozen[0].parent
    bdir = FW_BUILD / "cmake"
    shutil.rmtree(bdir, ignore_errors=True)
    conf = subprocess.run(["cmake", "-S", str(FWPORT / "cmake"), "-B", str(bdir), f"-DMICROPY_DIR={MPY_DIR}",
                           f"-DUSER_C_MODULES={USERMOD / 'micropython.cmake'}",
                           f"-DFWPORT_GENHDR_DIR={genhdr_build}", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"],
                          capture_output=True, text=True, timeout=300)
    assert conf.returncode == 0, conf.stdout + conf.stderr
    assert "Found User C Module(s): usermod_microtrain" in conf.stdout + conf.stderr
    report = dict(line.split("=", 1) for line in (bdir / "usermod_report.txt").read_text().splitlines())
    assert report["modules"] == "usermod_microtrain"
    assert sorted(Path(s).name for s in report["sources"].split(";")) == C_SOURCES
    assert all(Path(s).parent == MODDIR for s in report["sources"].split(";"))
    assert report["includes"] == str(MODDIR)
    assert report["options"] == "-ffp-contract=off"
    build = subprocess.run(["cmake", "--build", str(bdir), "-j2"], capture_output=True, text=True,
                           timeout=600)
    assert build.returncode == 0, (build.stdout + build.stderr)[-4000:]
    cmds = json.loads((bdir / "compile_commands.json").read_text())
    compiled = sorted(Path(c["file"]).name for c in cmds)
    assert compiled == C_SOURCES
    assert all("-ffp-contract=off" in c["command"] and f"-I{MODDIR}" in c["command"] for c in cmds)


# --------------------------------------------------------------------------
# Cortex-M: the firmware-mode sources compile for the boards' cores


@pytest.mark.parametrize("cpu", [
    ["-mcpu=cortex-m0plus"],
    ["-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard"],
    ["-mcpu=cortex-m7", "-mfpu=fpv5-d16", "-mfloat-abi=hard"],
    ["-mcpu=cortex-m33", "-mfpu=fpv5-sp-d16", "-mfloat-abi=hard"],
], ids=["m0plus", "m4f", "m7dp", "m33f"])
def test_cortex_m_firmware_compile(cpu: list[str], fw_frozen: tuple[Path, str], tmp_path: Path) -> None:
    gcc = shutil.which("arm-none-eabi-gcc")
    assert gcc, "arm-none-eabi-gcc is not installed (tools/setup.sh installs it)"
    genhdr_build = fw_frozen[0].parent
    for c in C_SOURCES:
        cmd = [gcc, "-c", "-o", str(tmp_path / (c[:-2] + ".o")), "-mthumb", *cpu, "-std=gnu99", "-Os",
               *UNIX_CWARN, "-ffp-contract=off", f"-I{FWPORT}", f"-I{MPY_DIR}", f"-I{genhdr_build}",
               f"-I{MODDIR}", "-DMT_FW_FLOAT_IMPL=MICROPY_FLOAT_IMPL_FLOAT", str(MODDIR / c)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{c} {' '.join(cpu)}:\n{proc.stderr[-3000:]}"
    nm = subprocess.run(["arm-none-eabi-nm", str(tmp_path / "modmicrotrain.o")], capture_output=True,
                        text=True)
    # the module's globals table is there (MP_REGISTER_MODULE target)
    assert "mt_user_cmodule" in nm.stdout


# --------------------------------------------------------------------------
# manifests


def _run_manifest(port: str) -> list[tuple[str, str]]:
    """(full path, target path) of each file ports/<port>/manifest.py freezes, per MicroPython's
    tools/manifestfile.py."""
    code = (
        "import sys, json\n"
        f"sys.path.insert(0, {str(MPY_DIR / 'tools')!r})\n"
        "import manifestfile as mf\n"
        "m = mf.ManifestFile(mf.MODE_FREEZE, {'MPY_DIR': sys.argv[1], 'MPY_LIB_DIR': sys.argv[2],\n"
        "                                     'PORT_DIR': sys.argv[3], 'BOARD_DIR': sys.argv[3]})\n"
        "m.execute(sys.argv[4])\n"
        "print(json.dumps([[f.full_path, f.target_path] for f in m.files()]))\n")
    port_dir = _standin_port()
    proc = subprocess.run([sys.executable, "-c", code, str(MPY_DIR), str(FW_BUILD / "standin-mpy-lib"),
                           str(port_dir), str(ROOT / "ports" / port / "manifest.py")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [tuple(x) for x in json.loads(proc.stdout)]


@pytest.mark.parametrize("port", sorted(PORT_DEFAULT_MANIFEST))
def test_port_manifest(port: str) -> None:
    files = _run_manifest(port)
    targets = sorted(t for _, t in files)
    assert targets == sorted(["standin_marker.py"] + [f"microtrain/{n}" for n in PY_SOURCES])
    port_dir = FW_BUILD / "standin-port"
    for full, target in files:
        if target == "standin_marker.py":
            assert Path(full) == port_dir / Path(PORT_DEFAULT_MANIFEST[port]).parent / target
        else:
            assert Path(full) == ROOT / "python_lib" / target


FROZEN_SCRIPT = """\
import sys
try:
    import microtrain
    print("IMPORTED")
except ImportError as e:  # the fwport interpreter has no json/os modules; the submodules before stay
    print("PARTIAL", e)
model = sys.modules["microtrain.model"]
kern = sys.modules["microtrain.kern"]
print("NATIVE", kern.NATIVE)
print("FILE", model.__file__)
f = open(sys.argv[1], "rb")
m = model.load(f.read())
f.close()
f = open(sys.argv[2], "rb")
xs = f.read()
f.close()
n = m.input.numel
for i in range(len(xs) // n):
    out = m.forward(xs[i * n:(i + 1) * n])
    print("OUT", list(out))
"""


def test_frozen_package_runs_model(fw_frozen: tuple[Path, str], tmp_path: Path) -> None:
    exe, _ = fw_frozen
    dm = digits_model()
    (tmp_path / "model.mtm").write_bytes(dm.mtm)
    (tmp_path / "x.bin").write_bytes(dm.x.tobytes())
    script = tmp_path / "run.py"
    script.write_text(FROZEN_SCRIPT)
    proc = _run_fw(exe, [str(script), "model.mtm", "x.bin"], tmp_path, heap=256 << 10, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    partial = [ln for ln in lines if ln.startswith("PARTIAL ")]
    # a partial import may only stop at a module this test interpreter lacks, never at microtrain's own
    assert "IMPORTED" in lines or (partial and "microtrain" not in partial[0]), lines[:3]
    assert "NATIVE True" in lines
    assert "FILE microtrain/model.py" in lines  # frozen: no filesystem path
    outs = [ln[4:] for ln in lines if ln.startswith("OUT ")]
    assert len(outs) == len(dm.x)
    for i, got in enumerate(outs):
        want = [int(v) for v in dm.expected[i]]
        assert json.loads(got) == want, f"sample {i}: firmware {got} oracle {want}"
