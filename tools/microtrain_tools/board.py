"""``microtrain run`` / ``deploy`` / ``flash``: MicroPython on the host and on boards.

- ``run``: the host ``micropython`` (the unix port in the venv) with the native module
  and the ``microtrain`` package compiled to .mpy on its path, as a board installs them:
  the same script, and the same heap in one piece, as on the board.
- ``deploy``: ``mpremote`` copies the package for one architecture (``make dist``
  output ``dist/<arch>_6.3/``), a model and a script to a board.
- ``flash``: MicroPython firmware onto a board: ``esptool`` (ESP32 family, with the
  chip's flash offset), copy of a ``.uf2`` to the RPI-RP2 drive (rp2), ``dfu-util``
  (stm32 ``.dfu``).

Every command line is built first and can be printed (``--dry-run``) instead of run;
bad arguments raise ValueError / FileNotFoundError with a one-line message.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from microtrain_tools import mtm, paths

__all__ = [
    "BOARD_ARCHS",
    "board_package",
    "ESP_FLASH_OFFSETS",
    "MPY_SUFFIX",
    "deploy_commands",
    "flash_commands",
    "micropython_binary",
    "run_command",
    "run_commands",
    "tool",
]

ROOT = paths.ROOT
PYTHON_LIB = paths.PYTHON_LIB
NATMOD_DIR = paths.NATMOD
DIST_DIR = ROOT / "dist"
MPY_SUFFIX = "_6.3"  # .mpy format version of the dist folders (MicroPython >= 1.22)
HOST_ARCHS = ("x64",)
BOARD_ARCHS = ("armv6m", "armv7m", "armv7emsp", "armv7emdp")

# First flash address of the MicroPython firmware image per ESP chip (MicroPython's
# ports/esp32 deploy notes): the ESP32 and ESP32-S2 bootloader sits at 0x1000, the
# newer chips' at 0x0.
ESP_FLASH_OFFSETS = {"esp32": "0x1000", "esp32s2": "0x1000", "esp32s3": "0x0", "esp32c3": "0x0",
                     "esp32c6": "0x0"}
CHIPS = (*ESP_FLASH_OFFSETS, "rp2", "stm32")
FIRMWARE_SUFFIX = {**{c: ".bin" for c in ESP_FLASH_OFFSETS}, "rp2": ".uf2", "stm32": ".dfu"}
DEFAULT_BAUD = 460800


def tool(name: str) -> str:
    """An executable: the one next to this Python (the venv's), else the one on PATH, else the name."""
    here = Path(sys.executable).parent / name
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which(name) or name


def micropython_binary() -> str:
    """The MicroPython binary (:func:`paths.micropython`)."""
    return paths.micropython()


def _heapsize(s: str) -> str:
    if not re.fullmatch(r"[1-9][0-9]*[kKmM]?", s):
        raise ValueError(f"--heapsize {s!r}: expected a size like 256k, 1M or 65536")
    return s


RUN_DIR = ROOT / "build" / "run"


def board_package(arch: str = "x64", natmod_folder: str | None = None) -> Path:
    """The package as a board installs it (``make dist``'s ``<arch>_6.3`` folder: the natmod
    and ``microtrain/*.mpy``) for the current sources and natmod: built once per content,
    under ``build/run/<digest>/``, so concurrent runs never see it half written. Importing
    .mpy files allocates only their code; compiling the .py sources inside a board-sized heap
    leaves it in pieces (the largest free block a fraction of the free bytes).
    ``natmod_folder``: the natmod of build/natmod/<that folder> (some op families only) in
    place of build/natmod/<arch>'s."""
    from microtrain_tools import dist

    natmod = NATMOD_DIR / (natmod_folder or arch) / dist.NATMOD_NAME
    h = hashlib.sha256(natmod.read_bytes())
    for rel in dist.python_sources(PYTHON_LIB):
        h.update(rel.as_posix().encode() + b"\0" + (PYTHON_LIB / rel).read_bytes())
    home = RUN_DIR / h.hexdigest()[:16]
    pkg = home / f"{arch}{MPY_SUFFIX}"
    if (pkg / "package.json").is_file():
        return pkg
    if arch not in HOST_ARCHS:
        raise ValueError(f"--arch {arch}: the host runs {', '.join(HOST_ARCHS)} packages only")
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="tmp-", dir=RUN_DIR))
    try:
        built = dist.host_package(tmp)
        shutil.copyfile(natmod, built / dist.NATMOD_NAME)
        # the pure-Python kernels' path: the same .mpy package without the native module
        (tmp / "pure").mkdir()
        (tmp / "pure" / dist.PACKAGE).symlink_to(Path("..") / built.name / dist.PACKAGE)
        try:
            tmp.rename(home)
        except OSError:  # another run built the same content first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return pkg


def run_command(script: str, args: list[str], heapsize: str | None = None, arch: str = "x64",
                native: bool = True, build: bool = True, check_pure: bool = True,
                source: bool = False, ops: str | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) to run ``script`` in the host micropython.

    MICROPYPATH = the package as a board installs it (:func:`board_package`: the natmod and
    the package compiled to .mpy), or without the natmod when ``native`` is False (the
    package's pure-Python kernels), then MicroPython's defaults. ``source``: the natmod
    folder ``build/natmod/<arch>`` and the .py sources of ``python_lib`` instead (compiled
    inside the heap: a small heap ends up in pieces, unlike a board's). A missing natmod is
    built with ``make natmod`` when ``build``. ``ops``: a natmod of only these op families
    (families, profiles or .mtm files, comma-separated: :func:`natmod.resolve`), built first.

    ``native`` False also sets MICROTRAIN_PURE=1, which makes ``microtrain.kern``
    take the pure-Python kernels even when the binary has ``_microtrain`` built in
    (leaving the natmod off the path cannot hide that). With ``check_pure`` the
    binary is asked first (one short run) and a ValueError says so when it would
    still use the native kernels (a firmware whose ``os`` has no ``getenv``)."""
    if arch not in HOST_ARCHS:
        raise ValueError(f"--arch {arch}: the host micropython runs {', '.join(HOST_ARCHS)} native "
                         "modules only (boards: use deploy)")
    if not Path(script).is_file():
        raise FileNotFoundError(f"{script}: no such script")
    exe = micropython_binary()
    natmod = NATMOD_DIR / arch
    folder = None
    if ops is not None and native:
        from microtrain_tools import natmod as nm

        want = nm.resolve(ops)
        folder = nm.folder(arch, want)
        natmod = nm.build(arch, want).parent
    if native or not source:  # (the .mpy package is built from the natmod folder too)
        if not (natmod / "_microtrain.mpy").is_file():
            if not build or not (ROOT / "Makefile").is_file():
                raise FileNotFoundError(f"{natmod / '_microtrain.mpy'} is missing: run `microtrain build`")
            print(f"microtrain run: building the native module ({arch}) first", file=sys.stderr)
            proc = subprocess.run(["make", "-C", str(ROOT), "--no-print-directory", "natmod", f"ARCH={arch}"],
                                  capture_output=True, text=True, check=False)
            if proc.returncode or not (natmod / "_microtrain.mpy").is_file():
                tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
                raise ValueError(f"make natmod ARCH={arch} failed: {tail[0]}")
    if source:
        path = [str(natmod), str(PYTHON_LIB)] if native else [str(PYTHON_LIB)]
    else:
        pkg = board_package(arch, folder)
        path = [str(pkg if native else pkg.parent / "pure")]
    env = dict(os.environ)
    env["MICROPYPATH"] = ":".join([*path, ".frozen", "~/.micropython/lib", "/usr/lib/micropython"])
    env.pop(PURE_ENV, None)  # the --pure flag decides, not a leftover export
    cmd = [exe]
    if heapsize:
        cmd += ["-X", f"heapsize={_heapsize(heapsize)}"]
    if not native:
        env[PURE_ENV] = "1"
        if check_pure:
            _check_pure(exe, env)
    return cmd + [script, *args], env


PURE_ENV = "MICROTRAIN_PURE"  # read by python_lib/microtrain/kern.py (os.getenv)
# What microtrain.kern decides in that binary; where the package does not import
# fully (a minimal firmware), the two facts it decides on.
_KERNELS_PROBE = """
import sys
try:
    import microtrain.kern
except ImportError:
    pass
k = sys.modules.get("microtrain.kern")
if k is not None:
    native = k.NATIVE
else:
    try:
        import _microtrain
        native = True
    except ImportError:
        native = False
    try:
        from os import getenv
        native = native and getenv("MICROTRAIN_PURE") in (None, "", "0")
    except ImportError:
        pass
print("MICROTRAIN-KERNELS", "native" if native else "pure")
"""


def _check_pure(exe: str, env: dict[str, str]) -> None:
    """ValueError when ``exe`` with ``env`` would still run microtrain on the native kernels."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "kernels_probe.py"
        probe.write_text(_KERNELS_PROBE)
        proc = subprocess.run([exe, str(probe)], env=env, capture_output=True, text=True, timeout=60,
                              check=False)
    if "MICROTRAIN-KERNELS native" in proc.stdout:
        raise ValueError(f"--pure: {exe} has _microtrain built in and ignores {PURE_ENV} (no os.getenv): "
                         "it would run the native kernels; use a micropython without the module")


def dist_dir(arch: str, dist: str | None = None) -> Path:
    return Path(dist) if dist else DIST_DIR / f"{arch}{MPY_SUFFIX}"


def _check_dist(d: Path) -> None:
    if not (d / "_microtrain.mpy").is_file() or not (d / "microtrain").is_dir():
        raise FileNotFoundError(f"{d}: not a microtrain dist folder (needs _microtrain.mpy and microtrain/; "
                                "build it with `make dist`)")


def deploy_commands(port: str, arch: str, model: str | None = None, script: str | None = None,
                    dist: str | None = None, lib: str = "/lib", root: str = "/",
                    verify: bool = True, builtin: bool = False, ops: str | None = None) -> list[list[str]]:
    """Command lines that put the package, model and script on a board.

    The first command is ``make dist`` when the default dist folder does not exist yet.
    Then, with ``mpremote connect PORT``: create ``lib`` if missing, copy
    ``microtrain/`` and ``_microtrain.mpy`` into it, copy the model and the script to
    ``root``, and (``verify``) import the package on the board. ``builtin``: the firmware has
    microtrain built in (user C module, package frozen, e.g. an ESP32-C3 or RP2350 RISC-V
    build): only the model and the script are copied (``arch`` is not used). The natmod holds
    the op families of ``ops`` (families, profiles or .mtm files, comma-separated), by default
    those of ``model`` (every op without one): a natmod of fewer ops, built first by ``make
    natmod ARCH=... OPS=...``, replaces the dist folder's, so the board's heap keeps the rest."""
    if not port:
        raise ValueError("--port is required (e.g. /dev/ttyACM0; `mpremote devs` lists them)")
    if not builtin and arch not in BOARD_ARCHS:
        raise ValueError(f"--arch {arch}: unknown board architecture (one of {', '.join(BOARD_ARCHS)})")
    for what, p, suffix in (("--model", model, ".mtm"), ("--script", script, ".py")):
        if p is None:
            continue
        if not Path(p).is_file():
            raise FileNotFoundError(f"{what} {p}: no such file")
        if not p.endswith(suffix):
            raise ValueError(f"{what} {p}: expected a {suffix} file")
    if model is not None:
        try:
            mtm.load(model)
        except ValueError as e:
            raise ValueError(f"--model {model}: not a valid .mtm file: {e}") from None
    for what, p in (("--lib", lib), ("--root", root)):
        if not p.startswith("/"):
            raise ValueError(f"{what} {p}: must be an absolute path on the board")
    cmds: list[list[str]] = []
    d = dist_dir(arch, dist)
    if builtin:
        pass
    elif dist is not None or d.is_dir():
        _check_dist(d)
    else:
        cmds.append(["make", "-C", str(ROOT), "dist", f"ARCH={arch}"])
    natmod_file = d / "_microtrain.mpy"
    if not builtin and (ops is not None or model is not None):
        from microtrain_tools import natmod as nm
        from microtrain_tools.kernelspec import OPS, ops_tag

        want = nm.resolve(ops if ops is not None else str(model))
        if set(want) != set(OPS):
            cmds.append(["make", "-C", str(ROOT), "--no-print-directory", "natmod", f"ARCH={arch}",
                         f"OPS={ops_tag(want)}"])
            natmod_file = NATMOD_DIR / nm.folder(arch, want) / nm.NAME
    mp = [tool("mpremote"), "connect", port]
    lib = lib.rstrip("/") or "/"
    root = root.rstrip("/") or "/"
    parent, _, base = lib.rpartition("/")
    parent = parent or "/"
    q = json.dumps  # double-quoted Python string literals: the printed command line stays readable
    if not builtin:
        cmds.append([*mp, "exec", f"import os;{q(base)} in os.listdir({q(parent)}) or os.mkdir({q(lib)})"])
        cmds.append([*mp, "fs", "cp", "-r", str(d / "microtrain"), f":{lib}/"])
        cmds.append([*mp, "fs", "cp", str(natmod_file), f":{lib}/_microtrain.mpy"])
    for p in (model, script):
        if p is not None:
            dest = f"{root}/{Path(p).name}" if root != "/" else f"/{Path(p).name}"
            cmds.append([*mp, "fs", "cp", p, f":{dest}"])
    if verify:
        cmds.append([*mp, "exec", 'import microtrain;print("microtrain", "native" if microtrain.NATIVE '
                                  'else "pure-python", "ok")'])
    return cmds


def flash_commands(chip: str, firmware: str, port: str | None = None, baud: int = DEFAULT_BAUD,
                   erase: bool = False, drive: str | None = None) -> list[list[str]]:
    """Command lines that flash MicroPython firmware (see the module doc)."""
    if chip not in CHIPS:
        raise ValueError(f"--chip {chip}: unknown (one of {', '.join(CHIPS)})")
    if not Path(firmware).is_file():
        raise FileNotFoundError(f"{firmware}: no such firmware file")
    want = FIRMWARE_SUFFIX[chip]
    if Path(firmware).suffix.lower() != want:
        raise ValueError(f"{firmware}: {chip} firmware must be a {want} file")
    if chip in ESP_FLASH_OFFSETS:
        if not port:
            raise ValueError(f"--port is required for {chip} (e.g. /dev/ttyUSB0 or /dev/ttyACM0)")
        if baud <= 0:
            raise ValueError(f"--baud {baud}: must be positive")
        esp = [tool("esptool"), "--chip", chip, "--port", port]
        cmds = [[*esp, "erase-flash"]] if erase else []
        return cmds + [[*esp, "--baud", str(baud), "write-flash", "-z", ESP_FLASH_OFFSETS[chip], firmware]]
    if erase:
        raise ValueError(f"--erase is for ESP32 chips only ({chip}: flashing replaces the firmware; "
                         "the filesystem is kept)")
    if chip == "rp2":
        if not drive:
            raise ValueError("--drive is required for rp2: the mounted RPI-RP2 drive (hold BOOTSEL while "
                             "plugging the board in), e.g. /media/$USER/RPI-RP2")
        if not Path(drive).is_dir():
            raise FileNotFoundError(f"--drive {drive}: not a mounted directory (hold BOOTSEL while plugging "
                                    "the board in)")
        return [["cp", firmware, str(Path(drive)) + "/"], ["sync"]]
    # stm32: DfuSe file through the ST system bootloader (BOOT0 high at reset, or machine.bootloader())
    return [[tool("dfu-util"), "--alt", "0", "-D", firmware]]


def run_commands(cmds: list[list[str]], dry_run: bool, what: str) -> int:
    """Print (``dry_run``) or run each command; stop at the first failure and return its code."""
    for c in cmds:
        if dry_run:
            print(shlex.join(c))
            continue
        exe = c[0]
        if shutil.which(exe) is None and not Path(exe).is_file():
            hint = {"dfu-util": " (apt-get install dfu-util; board in DFU mode: BOOT0 high, then reset)"}
            raise FileNotFoundError(f"{exe}: not found{hint.get(Path(exe).name, '')}")
        print(f"microtrain {what}: {shlex.join(c)}", file=sys.stderr)
        rc = subprocess.call(c)
        if rc:
            print(f"microtrain {what}: command failed with exit code {rc}: {shlex.join(c)}", file=sys.stderr)
            return rc if rc > 0 else 128 - rc
    return 0
