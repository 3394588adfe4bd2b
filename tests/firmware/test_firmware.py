"""Firmware integration: usermod/ as a MicroPython user C module, ports/*/manifest.py.

No MicroPython source tree is available offline, but the MicroPython 1.23 core
(py/, shared/, tools/) that ``make setup`` unpacks from the mpy-cross-v6-3 sdist
is enough to check the integration with MicroPython's own build machinery:

- make: ports/host is a tiny host "port" (an interpreter running a script)
  built with ``USER_C_MODULES=<repo>/usermod``, i.e. py/py.mk includes
  usermod/microtrain/micropython.mk exactly as ``make -C ports/unix`` (or
  stm32) does. Built with the unix port's warnings as errors, once with
  single-precision floats (like esp32/rp2/stm32 boards) and once with double
  (like unix). The built-in ``_microtrain`` then runs the seeded kernel cases
  of tests/support/kernel_cases.py through tests/mp/kernel_runner.py
  and must match the numpy oracle bit for bit. make's own compile commands
  (dry run) show -ffp-contract=off on microtrain's objects and on no other
  (py/objfloat.c, py/modmath.c keep the port's floating-point contraction).
- cmake: py/usermod.cmake consumes ``USER_C_MODULES=<repo>/usermod/micropython.cmake``
  as the rp2/esp32 ports do; the gathered sources, include dirs and compile
  options are compared with the module folder, and the sources are compiled
  through the ``usermod`` INTERFACE target next to two of the firmware's own
  files: -ffp-contract=off is on exactly microtrain's compile commands.
- Cortex-M: the firmware-mode sources compile with arm-none-eabi-gcc for
  M0+ (rp2040), M4F (stm32f4), M7 double FPU (stm32f7/h7), M33 (rp2350).
  In firmware mode too, every defined global symbol starts with ``mt_``.
- manifests: each ports/<port>/manifest.py is run by MicroPython's real
  micropython/tools/manifestfile.py (stand-in port folder holding the default manifest it
  includes); the rp2 one is frozen into the fwport interpreter with
  micropython/tools/makemanifest.py, and the frozen microtrain package, with the built-in
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

from support import kernel_cases
from support.digits_model import digits_model
from support.fwbuild import (
    FW_BUILD,
    FWPORT,
    MPY_DIR,
    PORT_DEFAULT_MANIFEST,
    USERMOD,
    frozen_firmware,
    make_fwport,
    standin_port,
)
from support.harness import ROOT, RUNNER, compare, decode_results, write_cases
from support.kernel_harness import c_sources
from support.symbols import SOFTFLOAT_ABI, foreign_globals, softfloat_abi_routines

MODDIR = USERMOD / "microtrain"
C_SOURCES = sorted(p.name for p in MODDIR.glob("*.c"))
PY_SOURCES = sorted(p.relative_to(ROOT / "python_lib" / "microtrain").as_posix()  # pyk/ included
                    for p in (ROOT / "python_lib" / "microtrain").rglob("*.py"))
UNIX_CWARN = ["-Wall", "-Werror", "-Wextra", "-Wno-unused-parameter", "-Wpointer-arith", "-Wdouble-promotion",
              "-Wfloat-conversion"]


@pytest.fixture(scope="module")
def fw_frozen() -> tuple[Path, str]:
    """Single-precision floats, the rp2 manifest frozen in."""
    return frozen_firmware()


@pytest.fixture(scope="module")
def fw_double() -> tuple[Path, str]:
    return make_fwport(FW_BUILD / "double", "DOUBLE")


# --------------------------------------------------------------------------
# the build files themselves


def test_source_lists_complete() -> None:
    assert C_SOURCES, "no C sources?"
    assert sorted(c_sources("MICROTRAIN_SRC")) == C_SOURCES  # the one list (sources.mk) every build reads
    natmod = (MODDIR / "Makefile").read_text()
    assert re.search(r"^include sources\.mk$", natmod, re.M)
    assert re.search(r"^SRC = \$\(MICROTRAIN_SRC\) \$\(MICROTRAIN_BIND_H\)$", natmod, re.M)
    # every header modmicrotrain.c includes from this folder is scanned for qstrs
    bind_h = [p.name for p in MODDIR.glob("mt_bind*.h")] + ["mt_funcs.h"]
    assert sorted(c_sources("MICROTRAIN_BIND_H")) == sorted(bind_h)
    mk = (MODDIR / "micropython.mk").read_text()
    assert re.search(r"^include \$\(MICROTRAIN_MOD_DIR\)/sources\.mk$", mk, re.M)
    assert "\nMICROTRAIN_SRC_C := $(addprefix $(MICROTRAIN_MOD_DIR)/,$(MICROTRAIN_SRC))\n" in mk
    # USERMOD_DIR is reassigned for every module: capture it with an immediate assignment
    assert re.search(r"^MICROTRAIN_MOD_DIR := \$\(USERMOD_DIR\)$", mk, re.M)
    assert re.search(r"^SRC_USERMOD_C \+= \$\(MICROTRAIN_SRC_C\)$", mk, re.M)
    # the flag is on our objects only (test_make_fp_contract_scoped checks what make runs)
    assert not re.search(r"^CFLAGS_USERMOD.*-ffp-contract", mk, re.M)
    assert re.search(r"^\$\(MICROTRAIN_OBJ\): private CFLAGS \+= -ffp-contract=off$", mk, re.M)
    cm = (MODDIR / "micropython.cmake").read_text()
    assert "file(READ ${CMAKE_CURRENT_LIST_DIR}/sources.mk MICROTRAIN_MK)" in cm
    assert "target_sources(usermod_microtrain INTERFACE ${MICROTRAIN_SOURCES})" in cm
    assert "target_compile_options" not in cm  # INTERFACE options would reach the whole firmware
    assert ("set_property(SOURCE ${MICROTRAIN_SOURCES} APPEND PROPERTY COMPILE_OPTIONS -ffp-contract=off)"
            in cm)
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
    # firmware mode: every global is mt_-prefixed; the module object mt_user_cmodule is one of them
    bad = foreign_globals(sorted((build / "microtrain").glob("*.o")), allowed=set())
    assert not bad, f"globals without the mt_ prefix: {bad}"


def test_make_fp_contract_scoped(fw_double: tuple[Path, str]) -> None:
    """-ffp-contract=off reaches each of microtrain's objects and no other object of the firmware
    (py/objfloat.c, py/modmath.c keep the port's FP contraction). Every compile command of a
    clean build, as make runs it (dry run: -n -B, V=1 prints whole commands). The port's own
    whole-firmware flag is turned off (MT_PORT_FPFLAGS=), as upstream ports have none."""
    build = fw_double[0].parent
    cmd = ["make", "-n", "-B", "V=1", "-C", str(FWPORT), f"TOP={MPY_DIR}", f"USER_C_MODULES={USERMOD}",
           f"BUILD={build}", "MT_FW_FLOAT=DOUBLE", "MT_PORT_FPFLAGS="]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    flags: dict[str, bool] = {}
    for line in proc.stdout.splitlines():
        m = re.search(r" -c .*?-o (\S+\.o) ", line)
        if m:
            flags[str(Path(m.group(1)).relative_to(build))] = "-ffp-contract=off" in line.split()
    ours = {f"microtrain/{c[:-2]}.o" for c in C_SOURCES}
    assert ours <= set(flags), sorted(ours - set(flags))
    assert {"py/objfloat.o", "py/modmath.o"} <= set(flags)
    assert len(flags) > len(ours) + 50  # the whole core was listed
    assert sorted(o for o, on in flags.items() if on) == sorted(ours)


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
    # no INTERFACE options: they would reach every source of the firmware
    assert report["options"].endswith("NOTFOUND"), report["options"]
    build = subprocess.run(["cmake", "--build", str(bdir), "-j2"], capture_output=True, text=True,
                           timeout=600)
    assert build.returncode == 0, (build.stdout + build.stderr)[-4000:]
    cmds = json.loads((bdir / "compile_commands.json").read_text())
    compiled = sorted(Path(c["file"]).name for c in cmds)
    # the module's sources and two of the firmware's own (ports/host/cmake/CMakeLists.txt)
    assert compiled == sorted([*C_SOURCES, "modmath.c", "objfloat.c"])
    for c in cmds:
        ours = Path(c["file"]).parent == MODDIR
        assert ("-ffp-contract=off" in c["command"].split()) == ours, c["command"]
        assert f"-I{MODDIR}" in c["command"]


# --------------------------------------------------------------------------
# Cortex-M: the firmware-mode sources compile for the boards' cores


@pytest.mark.parametrize("cpu,impl", [
    (["-mcpu=cortex-m0plus"], "FLOAT"),
    (["-mcpu=cortex-m0plus"], "DOUBLE"),
    (["-mcpu=cortex-m3"], "FLOAT"),
    (["-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard"], "FLOAT"),
    (["-mcpu=cortex-m7", "-mfpu=fpv5-d16", "-mfloat-abi=hard"], "FLOAT"),
    (["-mcpu=cortex-m33", "-mfpu=fpv5-sp-d16", "-mfloat-abi=hard"], "FLOAT"),
], ids=["m0plus", "m0plus-double", "m3", "m4f", "m7dp", "m33f"])
def test_cortex_m_firmware_compile(cpu: list[str], impl: str, fw_frozen: tuple[Path, str],
                                   tmp_path: Path) -> None:
    """As the user C module is compiled into firmware, with no define of ours: the float kernels
    are built on every core, FPU-less ones (M0+, M3) through softfloat.c's weak __aeabi_f*."""
    gcc = shutil.which("arm-none-eabi-gcc")
    assert gcc, "arm-none-eabi-gcc is not installed (tools/setup.sh installs it)"
    genhdr_build = fw_frozen[0].parent
    for c in C_SOURCES:
        cmd = [gcc, "-c", "-o", str(tmp_path / (c[:-2] + ".o")), "-mthumb", *cpu, "-std=gnu99", "-Os",
               *UNIX_CWARN, "-ffp-contract=off", f"-I{FWPORT}", f"-I{MPY_DIR}", f"-I{genhdr_build}",
               f"-I{MODDIR}", f"-DMT_FW_FLOAT_IMPL=MICROPY_FLOAT_IMPL_{impl}", str(MODDIR / c)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{c} {' '.join(cpu)}:\n{proc.stderr[-3000:]}"
    nm = subprocess.run(["arm-none-eabi-nm", str(tmp_path / "modmicrotrain.o")], capture_output=True,
                        text=True)
    # the module's globals table is there (MP_REGISTER_MODULE target)
    assert "mt_user_cmodule" in nm.stdout
    # the float kernels are in (the binding calls them only where MT_HAS_FLOAT)
    assert "U mt_f32_axpy_i32" in nm.stdout
    soft = "-mfloat-abi=hard" not in cpu
    objs = sorted(tmp_path.glob("*.o"))
    bad = foreign_globals(objs, "arm-none-eabi-nm", allowed=SOFTFLOAT_ABI if soft else set())
    assert not bad, f"{' '.join(cpu)}: globals without the mt_ prefix: {bad}"
    abi = subprocess.run(["arm-none-eabi-nm", "-g", "--defined-only", str(tmp_path / "softfloat.o")],
                         capture_output=True, text=True, check=True).stdout.split()
    # FPU-less: every ABI name, weak (libgcc's or a port's own take over without a clash)
    want = {n: "W" for n in SOFTFLOAT_ABI} if soft else {}
    assert {n: t for t, n in zip(abi[1::3], abi[2::3], strict=True) if not n.startswith("mt_")} == want


# --------------------------------------------------------------------------
# RISC-V: the firmware-mode sources compile for ESP32-C3 / C6, RP2350 RISC-V (rv32imc, no FPU)
# and a RISC-V core with a single-precision FPU (rv32imafc), with the float kernels; without an FPU
# they are built on the project's software float, which then defines libgcc's float entry points
# (unless -DMT_NO_SOFT_FLOAT keeps libgcc's)

RISCV_LIBGCC_FLOAT = {"__addsf3", "__subsf3", "__mulsf3", "__divsf3", "__floatsisf", "__floatunsisf",
                      "__fixsfsi", "__fixunssfsi", "__eqsf2", "__nesf2", "__ltsf2", "__lesf2", "__gtsf2",
                      "__gesf2", "__unordsf2"}


@pytest.mark.parametrize("arch,soft,flags", [("rv32imc", True, []), ("rv32imafc", False, []),
                                             ("rv32imc", False, ["-DMT_NO_SOFT_FLOAT"])],
                         ids=["rv32imc", "rv32imafc", "rv32imc-libgcc"])
def test_riscv_firmware_compile(arch: str, soft: bool, flags: list[str], fw_frozen: tuple[Path, str],
                                tmp_path: Path) -> None:
    gcc = shutil.which("riscv64-unknown-elf-gcc")
    assert gcc, "riscv64-unknown-elf-gcc is not installed (tools/setup.sh installs it)"
    genhdr_build = fw_frozen[0].parent
    abi = "ilp32f" if "f" in arch[4:] else "ilp32"
    for c in C_SOURCES:
        cmd = [gcc, "-c", "-o", str(tmp_path / (c[:-2] + ".o")), f"-march={arch}", f"-mabi={abi}",
               "--specs=picolibc.specs", "-std=gnu99", "-Os", *UNIX_CWARN, "-ffp-contract=off",
               f"-I{FWPORT}", f"-I{MPY_DIR}", f"-I{genhdr_build}", f"-I{MODDIR}",
               "-DMT_FW_FLOAT_IMPL=MICROPY_FLOAT_IMPL_FLOAT", *flags, str(MODDIR / c)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{c} {arch}:\n{proc.stderr[-3000:]}"
    objs = sorted(tmp_path.glob("*.o"))
    nm = subprocess.run(["riscv64-unknown-elf-nm", "-g", "--defined-only", *map(str, objs)],
                        capture_output=True, text=True, check=True).stdout
    defined = {ln.split()[-1] for ln in nm.splitlines() if ln.strip() and not ln.endswith(":")}
    assert {"mt_user_cmodule", "mt_f32_axpy_i32", "mt_conv2d_s8_grad_weight_f32"} <= defined  # float kernels
    assert (defined & RISCV_LIBGCC_FLOAT) == (RISCV_LIBGCC_FLOAT if soft else set())
    bad = foreign_globals(objs, "riscv64-unknown-elf-nm", allowed=RISCV_LIBGCC_FLOAT if soft else set())
    assert not bad, f"{arch}: globals without the mt_ prefix: {bad}"


def test_natmod_unknown_arch_says_what_the_core_lacks() -> None:
    """An arch the core's natmod tools do not know stops `make natmod`, naming what is missing and
    the way out (MPY_DIR, or the user C module), and builds nothing. (rv32imc and xtensawin have
    their own messages: tests/firmware/test_natmod_optional_archs.py.)"""
    out = ROOT / "build" / "natmod" / "armv8m" / "_microtrain.mpy"
    p = subprocess.run(["make", "-s", "natmod", "ARCH=armv8m"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0 and not out.exists()
    msg = p.stderr
    assert "ARCH=armv8m is not supported by the MicroPython core" in msg, msg
    assert "mpy_ld.py" in msg and "MPY_DIR=" in msg and "user C module" in msg, msg


# --------------------------------------------------------------------------
# manifests


def _run_manifest(port: str) -> list[tuple[str, str]]:
    """(full path, target path) of each file ports/<port>/manifest.py freezes, per MicroPython's
    micropython/tools/manifestfile.py."""
    code = (
        "import sys, json\n"
        f"sys.path.insert(0, {str(MPY_DIR / 'tools')!r})\n"
        "import manifestfile as mf\n"
        "m = mf.ManifestFile(mf.MODE_FREEZE, {'MPY_DIR': sys.argv[1], 'MPY_LIB_DIR': sys.argv[2],\n"
        "                                     'PORT_DIR': sys.argv[3], 'BOARD_DIR': sys.argv[3]})\n"
        "m.execute(sys.argv[4])\n"
        "print(json.dumps([[f.full_path, f.target_path] for f in m.files()]))\n")
    port_dir = standin_port()
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


@pytest.mark.parametrize("lto", [False, True], ids=["plain", "lto"])
def test_soft_float_abi_links_into_firmware(lto: bool, tmp_path: Path) -> None:
    """A Cortex-M0 program linked with the module's softfloat.c as firmware links it (newlib,
    libgcc, --gc-sections, with and without -flto): gcc's float calls reach softfloat.c's
    routines (each ABI name at its mt_ routine's address), not libgcc's."""
    gcc = shutil.which("arm-none-eabi-gcc")
    assert gcc, "arm-none-eabi-gcc is not installed (tools/setup.sh installs it)"
    (tmp_path / "main.c").write_text(
        "volatile float a = 1.5f, b = 2.25f, c;\n"
        "volatile int i = -7;\n"
        "int main(void) { c = (a + b) * a / b - (float)i; return c < b; }\n")
    elf = tmp_path / "t.elf"
    proc = subprocess.run([gcc, "-mcpu=cortex-m0", "-mthumb", "-Os", *(["-flto"] if lto else []),
                           "-std=gnu99", *UNIX_CWARN, "-ffunction-sections", f"-I{MODDIR}",
                           "--specs=nosys.specs", "-Wl,--gc-sections", "-o", str(elf),
                           str(tmp_path / "main.c"), str(MODDIR / "softfloat.c")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    nm = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True)
    rows = [line.split() for line in nm.stdout.splitlines()]
    addr = {r[2]: r[0] for r in rows if len(r) == 3}
    routines = softfloat_abi_routines(MODDIR)
    # the ABI calls main.c makes
    for op in ("fadd", "fsub", "fmul", "fdiv", "i2f", "fcmplt"):
        abi = f"__aeabi_{op}"
        mt = routines[abi]
        assert abi in addr and addr[abi] == addr.get(mt), (abi, addr.get(abi), mt, addr.get(mt))
