"""Kernel test harness: case files, the MicroPython runner, the sanitised C driver.

One compact binary *case file* describes many kernel calls; it is executed by

- ``tests/mp/kernel_runner.py`` inside the real MicroPython binary, calling
  ``_microtrain`` (the natmod), and by
- ``tests/c/kernel_driver.c``, a host program calling the C kernels directly
  (built here with ASan/UBSan, once with ``-DMT_FORCE_SOFT_MATH``),

and both write the same *results file*. Everything is little-endian.

Case file::

    b"MTK1" u32 ncases, then per case:
    u8 len, op name | u8 flags (1 = an exception is expected, 2 = repeat count
    follows) | [u16 repeat] | u8 nargs | args
    arg = tag byte and payload:
      N                 None
      i  q              int (int64)
      d  d              float (double)
      T  u8 kind, u8 flags (1 = output, 2 = has data, 4 = hidden), u32 n, [data]
                        buffer of n elements; kind 'y' bytes, 'Y' bytearray, or an
                        array typecode 'b' 'B' 'i' 'I' 'f'; without data it is a
                        placeholder filled with POISON bytes; a hidden buffer is
                        not passed to the function (a base for views)
      A  u8 index, u8 out            the same object as args[index]
      V  u8 index, u32 start, u32 stop, u8 out
                                     memoryview(args[index])[start:stop]
      E  u16 len, source             eval(source) in MicroPython (odd objects)

Results file::

    b"MTR1" u32 ncases, then per case: u8 status (0 ok, 1 raised,
    2 an exception was expected but none was raised), u32 elapsed_us (the
    minimum over the repeats; outputs are those after the last call), then
    status 0/2: ret (N | i q | r u16 len repr) u8 nouts, per output: u8 kind,
                u32 nbytes, raw bytes (outputs in argument order)
    status 1:   u16 len, exception type name, u16 len, message
"""

from __future__ import annotations

import functools
import hashlib
import os
import struct
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

from microtrain_tools import paths

ROOT = paths.ROOT
BUILD_TEST = paths.BUILD / "test"
MICROPYTHON = Path(paths.micropython())  # $MICROTRAIN_MICROPYTHON or the venv's unix port
NATMOD_X64 = paths.natmod_dir("x64")
PYTHON_LIB = paths.PYTHON_LIB
RUNNER = ROOT / "tests" / "mp" / "kernel_runner.py"
DRIVER_SRC = ROOT / "tests" / "c" / "kernel_driver.c"
KERNEL_DIR = ROOT / "usermod" / "microtrain"


def c_sources(name: str, kernel_dir: Path = KERNEL_DIR) -> list[str]:
    """The file names of list ``name`` of usermod/microtrain/sources.mk, where every build takes them."""
    text = (kernel_dir / "sources.mk").read_text().replace("\\\n", " ")
    lists: dict[str, list[str]] = {}
    for line in text.splitlines():
        if " = " in line and not line.startswith("#"):
            key, words = line.split(" = ", 1)
            lists[key] = [f for w in words.split() for f in (lists[w[2:-1]] if w.startswith("$(") else [w])]
    return lists[name]


KERNEL_SOURCES = tuple(s.removesuffix(".c") for s in c_sources("MICROTRAIN_KERNEL_SRC"))
DRIVER_CFLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-g")
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                  "-fno-omit-frame-pointer")
SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:halt_on_error=1:exitcode=99",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=98",
}

POISON = 0xA5  # fill byte of output placeholders: an unwritten element shows up
CASE_MAGIC = b"MTK1"
RESULT_MAGIC = b"MTR1"

BYTE_KINDS = ("y", "Y", "b", "B")  # bytes, bytearray, array('b'), array('B')
KIND_DTYPE: dict[str, type[np.generic]] = {
    "y": np.int8, "Y": np.int8, "b": np.int8, "B": np.uint8,
    "i": np.int32, "I": np.uint32, "f": np.float32,
}


# --------------------------------------------------------------------------
# case description


@dataclass(frozen=True)
class Buf:
    """A buffer argument. ``data`` None = output placeholder of ``n`` POISON elements.
    ``hidden``: only a base for ``View`` arguments, not passed to the function."""

    kind: str
    data: NDArray[np.generic] | None = None
    n: int = 0
    out: bool = False
    hidden: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KIND_DTYPE:
            raise ValueError(f"unknown buffer kind {self.kind!r}")
        if self.data is not None:
            object.__setattr__(self, "n", int(np.asarray(self.data).size))

    def raw(self) -> bytes:
        if self.data is None:
            return bytes([POISON]) * (self.n * itemsize(self.kind))
        return to_raw(self.kind, self.data)


@dataclass(frozen=True)
class Alias:
    """The very object of ``args[index]`` (in-place calls)."""

    index: int
    out: bool = False


@dataclass(frozen=True)
class View:
    """``memoryview(args[index])[start:stop]`` (overlap tests)."""

    index: int
    start: int
    stop: int
    out: bool = False


@dataclass(frozen=True)
class Expr:
    """An arbitrary object built in MicroPython by ``eval(src)`` (bad-input tests)."""

    src: str


Arg = None | bool | int | float | Buf | Alias | View | Expr


@dataclass
class Expected:
    """What a call must produce: the return value and every output, in argument order."""

    ret: int | None
    outs: list[NDArray[np.generic]]


@dataclass
class Case:
    op: str
    args: list[Arg]
    label: str = ""
    expect_error: bool = False
    expected: Expected | None = None
    # for expect_error cases: exception type name and substrings the message must hold
    error_type: str | tuple[str, ...] = ("TypeError", "ValueError")
    error_has: tuple[str, ...] = ()
    error_any: tuple[str, ...] = ()  # ... and at least one of these (e.g. "fn: arg: " prefixes)
    repeat: int = 1  # timing: the call is made this many times, the fastest is reported

    def out_indices(self) -> list[int]:
        return [i for i, a in enumerate(self.args) if isinstance(a, (Buf, Alias, View)) and a.out]


def itemsize(kind: str) -> int:
    return 1 if kind in BYTE_KINDS else 4


def to_raw(kind: str, data: ArrayLike) -> bytes:
    """Raw little-endian bytes of ``data`` stored as buffer kind ``kind``."""
    arr = np.asarray(data)
    if kind in BYTE_KINDS:
        if arr.dtype in (np.int8, np.uint8):
            return arr.tobytes()
        return (arr.astype(np.int64) & 0xFF).astype(np.uint8).tobytes()
    if kind == "f":
        return arr.astype("<f4").tobytes()
    if kind == "i" and arr.dtype == np.uint32:
        return arr.astype("<u4").tobytes()
    if kind == "I" and arr.dtype == np.int32:
        return arr.astype("<i4").tobytes()
    a64 = arr.astype(np.int64)
    lo, hi = (-(2**31), 2**31 - 1) if kind == "i" else (0, 2**32 - 1)
    if a64.size and (a64.min() < lo or a64.max() > hi):
        raise ValueError(f"values do not fit buffer kind {kind!r}")
    return a64.astype("<i4" if kind == "i" else "<u4").tobytes()


# buffer constructors ------------------------------------------------------


def s8(data: ArrayLike, kind: str = "y") -> Buf:
    """Read-only int8 input (default ``bytes``)."""
    return Buf(kind, np.asarray(data).astype(np.int64).astype(np.int8))


def u8(data: ArrayLike, kind: str = "y") -> Buf:
    """Byte input holding unsigned values (masks)."""
    return Buf(kind, np.asarray(data).astype(np.int64).astype(np.uint8))


def i32(data: ArrayLike) -> Buf:
    return Buf("i", np.asarray(data, dtype=np.int64).astype(np.int32))


def u32(data: ArrayLike, kind: str = "I") -> Buf:
    return Buf(kind, np.asarray(data, dtype=np.int64).astype(np.uint32))


def f32(data: ArrayLike) -> Buf:
    return Buf("f", np.asarray(data, dtype=np.float32))


def out(kind: str, n: int) -> Buf:
    """Output placeholder (POISON-filled) of n elements."""
    return Buf(kind, None, int(n), out=True)


def inout(buf: Buf) -> Buf:
    """The same buffer, recorded after the call (in-place / accumulated outputs)."""
    return Buf(buf.kind, buf.data, buf.n, out=True)


# --------------------------------------------------------------------------
# encoding


def _encode_arg(a: Arg, parts: list[bytes]) -> None:
    if a is None:
        parts.append(b"N")
    elif isinstance(a, bool):
        parts.append(b"E" + struct.pack("<H", 4 if a else 5) + (b"True" if a else b"False"))
    elif isinstance(a, int):
        if not -(2**63) <= a < 2**63:
            src = repr(a).encode()
            parts.append(b"E" + struct.pack("<H", len(src)) + src)
        else:
            parts.append(b"i" + struct.pack("<q", a))
    elif isinstance(a, float):
        parts.append(b"d" + struct.pack("<d", a))
    elif isinstance(a, Buf):
        flags = (1 if a.out else 0) | (2 if a.data is not None else 0) | (4 if a.hidden else 0)
        parts.append(b"T" + struct.pack("<cBI", a.kind.encode(), flags, a.n))
        if a.data is not None:
            parts.append(a.raw())
    elif isinstance(a, Alias):
        parts.append(b"A" + struct.pack("<BB", a.index, int(a.out)))
    elif isinstance(a, View):
        parts.append(b"V" + struct.pack("<BIIB", a.index, a.start, a.stop, int(a.out)))
    elif isinstance(a, Expr):
        src = a.src.encode()
        parts.append(b"E" + struct.pack("<H", len(src)) + src)
    else:
        raise TypeError(f"cannot encode argument {a!r}")


def encode_cases(cases: Sequence[Case]) -> bytes:
    parts = [CASE_MAGIC, struct.pack("<I", len(cases))]
    for c in cases:
        name = c.op.encode()
        parts.append(struct.pack("<B", len(name)) + name)
        flags = (1 if c.expect_error else 0) | (2 if c.repeat != 1 else 0)
        parts.append(struct.pack("<B", flags))
        if c.repeat != 1:
            parts.append(struct.pack("<H", c.repeat))
        parts.append(struct.pack("<B", len(c.args)))
        for a in c.args:
            _encode_arg(a, parts)
    return b"".join(parts)


def write_cases(path: Path, cases: Sequence[Case]) -> None:
    path.write_bytes(encode_cases(cases))


# --------------------------------------------------------------------------
# results


@dataclass
class Result:
    status: int  # 0 ok, 1 raised, 2 expected exception not raised
    elapsed_us: int
    ret: int | str | None = None
    outs: list[tuple[str, bytes]] = field(default_factory=list)
    exc_type: str = ""
    exc_msg: str = ""

    def out_array(self, i: int) -> NDArray[np.generic]:
        kind, raw = self.outs[i]
        return np.frombuffer(raw, dtype=np.dtype(KIND_DTYPE[kind]).newbyteorder("<"))


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise EOFError("truncated results")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt: str) -> tuple[int, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))


def decode_results(data: bytes) -> tuple[int, list[Result]]:
    """(ncases announced, complete results); a crash leaves the list short."""
    if len(data) < 8 or data[:4] != RESULT_MAGIC:
        return 0, []
    rd = _Reader(data)
    rd.take(4)
    (ncases,) = rd.unpack("<I")
    results: list[Result] = []
    try:
        for _ in range(ncases):
            status, us = rd.unpack("<BI")
            if status == 1:
                (n,) = rd.unpack("<H")
                etype = rd.take(n).decode("utf-8", "replace")
                (n,) = rd.unpack("<H")
                msg = rd.take(n).decode("utf-8", "replace")
                results.append(Result(status, us, exc_type=etype, exc_msg=msg))
                continue
            tag = rd.take(1)
            ret: int | str | None = None
            if tag == b"i":
                (ret,) = rd.unpack("<q")
            elif tag == b"r":
                (n,) = rd.unpack("<H")
                ret = rd.take(n).decode("utf-8", "replace")
            (nouts,) = rd.unpack("<B")
            outs = []
            for _ in range(nouts):
                kind, nbytes = rd.unpack("<cI")
                outs.append((kind.decode(), rd.take(nbytes)))
            results.append(Result(status, us, ret, outs))
    except EOFError:
        pass
    return ncases, results


# --------------------------------------------------------------------------
# running


@dataclass
class RunOutcome:
    results: list[Result]
    returncode: int
    stdout: str
    stderr: str
    ncases: int
    case_file: Path | None = None  # kept for reproduction when the run was not clean

    @property
    def complete(self) -> bool:
        return self.returncode == 0 and len(self.results) == self.ncases


@functools.cache
def binary_has_builtin_microtrain() -> bool:
    """True when the MicroPython under test has ``_microtrain`` built in (a firmware such as
    the host twin ``ports/host``): with no natmod on the path, ``import _microtrain`` works.

    Such a binary always uses its own module (a built-in wins over any ``.mpy`` on the path,
    and its ``HAS_FLOAT`` cannot be changed), so tests about loading the x64 natmod skip
    there, saying so; the pure-Python kernels are forced with MICROTRAIN_PURE=1 instead."""
    empty = BUILD_TEST / "empty-path"
    empty.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, MICROPYPATH=str(empty))
    p = subprocess.run([str(MICROPYTHON), "-c", "import _microtrain"], env=env, capture_output=True,
                       text=True, timeout=60, cwd=empty, check=False)
    return p.returncode == 0


def skip_reason_builtin(what: str) -> str:
    """The skip message of a test that cannot apply to a binary with ``_microtrain`` built in."""
    return f"{MICROPYTHON} has _microtrain built in: {what}"


def micropython_env() -> dict[str, str]:
    env = dict(os.environ)
    env["MICROPYPATH"] = f"{NATMOD_X64}:{PYTHON_LIB}"
    return env


def run_micropython(script: Path | str, args: Sequence[str] = (), heapsize: str | None = None,
                    timeout: float = 300.0, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real MicroPython binary on a script file (Path) or source code (str).

    MICROPYPATH points at build/natmod/x64 and python_lib, so ``import _microtrain``
    loads the natmod. Never raises on a non-zero exit; check ``returncode``.
    """
    cmd = [str(MICROPYTHON)]
    if heapsize:
        cmd += ["-X", f"heapsize={heapsize}"]
    cmd += [str(script)] if isinstance(script, Path) else ["-c", script]
    cmd += list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=micropython_env(),
                          cwd=cwd, check=False)


def _paths(workdir: Path | None, name: str) -> tuple[Path, Path, bool]:
    """Case and result file paths; files in the default directory are removed after a clean run."""
    temp = workdir is None
    wd = BUILD_TEST / "runs" if workdir is None else workdir
    wd.mkdir(parents=True, exist_ok=True)
    stem = f"{name}-{os.getpid()}" if temp else name
    return wd / f"{stem}.cases", wd / f"{stem}.results", temp


def _finish(cpath: Path, rpath: Path, temp: bool, proc: subprocess.CompletedProcess[str],
            nexpected: int) -> RunOutcome:
    ncases, results = decode_results(rpath.read_bytes() if rpath.exists() else b"")
    outcome = RunOutcome(results, proc.returncode, proc.stdout, proc.stderr, ncases or nexpected)
    if temp and outcome.complete and not proc.stderr.strip():
        cpath.unlink(missing_ok=True)
        rpath.unlink(missing_ok=True)
    else:
        outcome.case_file = cpath
    return outcome


def run_cases_micropython(cases: Sequence[Case], workdir: Path | None = None, heapsize: str = "64M",
                          timeout: float = 600.0, name: str = "mp") -> RunOutcome:
    """Execute cases in one MicroPython process through tests/mp/kernel_runner.py."""
    cpath, rpath, temp = _paths(workdir, name)
    write_cases(cpath, cases)
    rpath.unlink(missing_ok=True)
    proc = run_micropython(RUNNER, [str(cpath), str(rpath)], heapsize=heapsize, timeout=timeout)
    return _finish(cpath, rpath, temp, proc, len(cases))


def driver_sources(kernel_dir: Path = KERNEL_DIR) -> list[Path]:
    return [DRIVER_SRC] + [kernel_dir / f"{s}.c" for s in KERNEL_SOURCES]


def build_driver(soft_math: bool = False, sanitize: bool = True, kernel_dir: Path = KERNEL_DIR,
                 extra_flags: Sequence[str] = ()) -> Path:
    """Compile tests/c/kernel_driver.c with the kernels of ``kernel_dir``.

    ASan + UBSan (``-fno-sanitize-recover=all``) unless ``sanitize`` is False;
    ``soft_math`` adds ``-DMT_FORCE_SOFT_MATH`` (the Cortex-M0 integer paths).
    Cached in build/test by a hash of the sources and flags.
    """
    flags = list(DRIVER_CFLAGS) + (list(SANITIZE_FLAGS) if sanitize else []) + list(extra_flags)
    if soft_math:
        flags.append("-DMT_FORCE_SOFT_MATH")
    srcs = driver_sources(kernel_dir)
    h = hashlib.sha256(" ".join(flags).encode())
    h.update(str(kernel_dir.resolve()).encode())
    for p in srcs + sorted(kernel_dir.glob("*.h")) + sorted(DRIVER_SRC.parent.glob("*.h")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    tag = ("soft" if soft_math else "hard") + ("-asan" if sanitize else "-plain")
    if kernel_dir.resolve() != KERNEL_DIR.resolve() or extra_flags:
        tag += "-custom"
    BUILD_TEST.mkdir(parents=True, exist_ok=True)
    exe = BUILD_TEST / f"kernel_driver-{tag}-{h.hexdigest()[:12]}"
    if exe.exists():
        return exe
    for stale in BUILD_TEST.glob(f"kernel_driver-{tag}-*"):
        if stale.suffix == "" and stale != exe:
            stale.unlink(missing_ok=True)
    tmp = exe.with_name(exe.name + f".tmp{os.getpid()}")
    cmd = ["gcc", *flags, f"-I{kernel_dir}", *map(str, srcs), "-o", str(tmp)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"driver build failed ({' '.join(cmd)}):\n{proc.stdout}{proc.stderr}")
    tmp.replace(exe)
    return exe


def run_cases_driver(cases: Sequence[Case], exe: Path, workdir: Path | None = None,
                     timeout: float = 600.0, name: str = "drv") -> RunOutcome:
    """Execute cases with the host C driver (sanitiser options set; see SANITIZER_ENV)."""
    cpath, rpath, temp = _paths(workdir, name)
    write_cases(cpath, cases)
    rpath.unlink(missing_ok=True)
    env = dict(os.environ, **SANITIZER_ENV)
    proc = subprocess.run([str(exe), str(cpath), str(rpath)], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)
    return _finish(cpath, rpath, temp, proc, len(cases))


# --------------------------------------------------------------------------
# comparison


def expected_raw(case: Case) -> list[tuple[str, bytes]]:
    """(kind, raw bytes) of each expected output, in the buffer kinds of the call."""
    assert case.expected is not None
    kinds = [_kind_of(case, i) for i in case.out_indices()]
    if len(kinds) != len(case.expected.outs):
        raise ValueError(f"{case.op}: {len(kinds)} output buffers but {len(case.expected.outs)} expected")
    return [(k, to_raw(k, a)) for k, a in zip(kinds, case.expected.outs, strict=True)]


def _kind_of(case: Case, i: int) -> str:
    a = case.args[i]
    while isinstance(a, (Alias, View)):
        a = case.args[a.index]
    assert isinstance(a, Buf)
    return a.kind


def compare(case: Case, res: Result | None) -> list[str]:
    """Differences between a result and the case's expectation (empty = bit-exact / as expected)."""
    if res is None:
        return ["no result (process died before this case)"]
    if case.expect_error:
        if res.status != 1:
            return [f"expected {case.error_type}, but the call returned {res.ret!r}"]
        types = (case.error_type,) if isinstance(case.error_type, str) else case.error_type
        errs = []
        if res.exc_type not in types:
            errs.append(f"raised {res.exc_type}({res.exc_msg!r}), expected one of {types}")
        errs += [f"message {res.exc_msg!r} lacks {s!r}" for s in case.error_has if s not in res.exc_msg]
        if case.error_any and not any(s in res.exc_msg for s in case.error_any):
            errs.append(f"{res.exc_type}({res.exc_msg!r}) names none of {case.error_any}")
        return errs
    if res.status != 0:
        return [f"raised {res.exc_type}: {res.exc_msg}"]
    assert case.expected is not None
    errs = []
    if res.ret != case.expected.ret:
        errs.append(f"return {res.ret!r} != {case.expected.ret!r}")
    exp = expected_raw(case)
    if len(res.outs) != len(exp):
        return errs + [f"{len(res.outs)} outputs, expected {len(exp)}"]
    for j, ((ek, eb), (gk, gb)) in enumerate(zip(exp, res.outs, strict=True)):
        if ek != gk or eb != gb:
            errs.append(_describe_diff(case, j, ek, eb, gk, gb))
    return errs


def _describe_diff(case: Case, j: int, ek: str, eb: bytes, gk: str, gb: bytes) -> str:
    idx = case.out_indices()[j]
    if ek != gk or len(eb) != len(gb):
        return f"arg {idx}: kind/len {gk}/{len(gb)} != {ek}/{len(eb)}"
    dt = np.dtype(KIND_DTYPE[ek]).newbyteorder("<")
    e, g = np.frombuffer(eb, dtype=dt), np.frombuffer(gb, dtype=dt)
    bad = np.flatnonzero(e.view(f"u{dt.itemsize}") != g.view(f"u{dt.itemsize}"))
    first = ", ".join(f"[{k}] {g[k]!r} != {e[k]!r}" for k in bad[:4])
    return f"arg {idx}: {bad.size}/{e.size} elements differ: {first}"


def describe_case(case: Case) -> str:
    """A short, reproducible description of a case's scalar arguments and sizes."""
    parts = []
    for a in case.args:
        if isinstance(a, Buf):
            if a.data is not None and a.kind == "i" and a.n <= 17:
                parts.append(f"i{list(np.asarray(a.data).tolist())}")
            else:
                parts.append(f"{a.kind}[{a.n}]{'*' if a.out else ''}")
        else:
            parts.append(repr(a))
    return f"{case.op}({', '.join(parts)}) {case.label}"


def natmod_stale() -> bool:
    mpy = NATMOD_X64 / "_microtrain.mpy"
    if not mpy.exists():
        return True
    t = mpy.stat().st_mtime
    srcs = [*KERNEL_DIR.glob("*.c"), *KERNEL_DIR.glob("*.h"), KERNEL_DIR / "Makefile"]
    return any(p.stat().st_mtime > t for p in srcs)


def ensure_natmod() -> Path:
    """build/natmod/x64/_microtrain.mpy, rebuilt with ``make natmod ARCH=x64`` if missing or stale."""
    mpy = NATMOD_X64 / "_microtrain.mpy"
    if natmod_stale():
        proc = subprocess.run(["make", "--no-print-directory", "natmod", "ARCH=x64"], cwd=ROOT,
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not mpy.exists():
            raise RuntimeError(f"make natmod ARCH=x64 failed:\n{proc.stdout}{proc.stderr}")
    return mpy
