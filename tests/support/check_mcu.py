"""`make test-mcu`: microtrain on the QEMU Cortex-M0 / M3 / M4F / M7 firmware (ports/qemu) and the
RV32IMC firmware (ports/qemu/rv32, microtrain built in).

Per board (BOARDS; m0fw is the M0 with microtrain built in as the user C module, as an
RP2040 firmware is built):
- kernel cases (tests/support/kernel_cases.py, tests/mp/kernel_runner.py) through the
  board's .mpy (armv6m on M0, armv7m on M3, armv7emsp on M4, armv7emdp and armv6m on M7) or, on
  m0fw and rv32, its built-in `_microtrain` (float kernels on the project's software float),
  every output bit-exact against the numpy oracle; the cases of functions a module lacks (the
  armv6m module on the hard-float M7 has no float kernels) are left out, cases too big for the
  board's heap too;
- the .mtm mutation set of tests/format/test_mtm_loader.py (tests/mp/mtm_runner.py): only
  accept / ValueError, and the same verdict as the host reader (tools/microtrain_tools/mtm.py);
- training runs (tests/mp/train_runner.py) in each mode (int8, mixed, float32) on a converted
  digits CNN: the checkpoint and the dump of every trained array equal, byte for byte, those of the
  same run on the float32 host twin (ports/host, FLOAT=single).

Ends with one line, a pair of counts per board of BOARDS, in that order
    test-mcu: m0 cases=A/A train=B/B m0fw cases=C/C train=D/D m3 ... m4 ... m7 ... rv32 ...
and exits 1 unless every count is complete (mutation crashes / disagreements also fail).
``--quick`` is the subset tests/firmware/test_mcu.py runs.
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from microtrain_tools import paths

ROOT = paths.ROOT
if str(ROOT / "ports" / "qemu") not in sys.path:
    sys.path.insert(0, str(ROOT / "ports" / "qemu"))  # qemu_run: how a QEMU board is started

import numpy as np  # noqa: E402
import qemu_run  # noqa: E402

from support import kernel_cases, kernel_harness  # noqa: E402
from support.kernel_harness import Case  # noqa: E402

WORK = ROOT / "build" / "qemu" / "check"
TWIN = ROOT / "build" / "host" / "single" / "micropython-fw"
TRAIN_RUNNER = ROOT / "tests" / "mp" / "train_runner.py"
MTM_RUNNER = ROOT / "tests" / "mp" / "mtm_runner.py"
# the boards of `make test-mcu`, in the order of its summary line (ports/qemu/qemu_run.py)
BOARDS = ["m0", "m0fw", "m3", "m4", "m7", "rv32"]
# GC heap of the kernel runs: the M0's largest; 2 MB of the M3/M4/M7's 4 MB RAM (a long run of
# big cases fragments a 256 KB heap; the heap claims are the training runs', at the defaults)
KERNEL_HEAP_KB = {"m7": 2048, "m4": 2048, "m3": 2048, "m0": 224, "m0fw": 224, "rv32": 2048}
# GC heap of the training runs: the builds' default (256 KB) on M3/M4/M7; the M0's largest
# (224 KB), since float32 training of every layer plus the runner's dump copies is near its
# 200 KB default
TRAIN_HEAP_KB = {"m7": 256, "m4": 256, "m3": 256, "m0": 224, "m0fw": 224, "rv32": 256}
# the module of a board with microtrain built in (no natmod on its path)
BUILTIN = "builtin"
# (board, natmod arch or BUILTIN) pairs of the kernel check
KERNEL_RUNS = [("m0", "armv6m"), ("m0fw", BUILTIN), ("m3", "armv7m"), ("m4", "armv7emsp"),
               ("m7", "armv7emdp"), ("m7", "armv6m"), ("rv32", BUILTIN)]
# soft-float boards whose float32 must equal the FPU boards' bit for bit (check_f32_edges)
SOFT_FLOAT_RUNS = [("m0", "armv6m"), ("m0fw", BUILTIN), ("m3", "armv7m"), ("rv32", BUILTIN)]
FPU_RUNS = [("m4", "armv7emsp"), ("m7", "armv7emdp")]

SGDM = {"kind": "sgd", "lr": 0.05, "momentum": 0.9}
ADAM = {"kind": "adam", "lr": 0.01}
DYN = {"kind": "dynamic", "lmin": 0.1, "lmax": 1.0}
# (train, mode, optimizer, sparse, batch); the first three (one per mode) are the quick subset
TRAIN_CONFIGS: list[tuple[str, str, dict[str, Any], dict[str, Any] | None, int]] = [
    ("all", "int8", SGDM, DYN, 4),
    ("last:2", "mixed", ADAM, None, 2),
    ("all", "float32", {**ADAM, "weight_decay": 1e-3, "standardize": True}, DYN, 3),
    ("last:1", "int8", {"kind": "sgd", "lr": 0.05, "rounding": "nearest"}, None, 1),
    ("all", "mixed", {**SGDM, "weight_decay": 1e-3}, {**DYN, "form": "linear"}, 1),
    ("last:2", "float32", {**SGDM, "rounding": "stochastic"}, DYN, 5),
    ("all", "mixed", SGDM, DYN, 1),  # batch 1, SGD momentum: gradients into the momentum
    ("all", "int8", {"kind": "sgd", "lr": 0.05}, None, 1),  # batch 1, plain SGD: steps in backward
    ("all", "mixed", {**SGDM, "state": "bf16"}, DYN, 2),  # a bfloat16 momentum
    ("last:2", "int8", {**ADAM, "state": "bf16"}, None, 1),  # bfloat16 moments
]


def build_all(boards: list[str]) -> None:
    for b in boards:
        qemu_run.build(b)
    qemu_run.build_pylib()
    proc = subprocess.run(["make", "-j2", "-C", str(ROOT / "ports" / "host"), "FLOAT=single"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"twin build failed:\n{(proc.stdout + proc.stderr)[-3000:]}")


# --------------------------------------------------------------------------
# kernels


def _arch(arch: str) -> str | None:
    """qemu_run's natmod arch (None: the board's built-in module, nothing on sys.path)."""
    return None if arch == BUILTIN else arch


def module_functions(board: str, arch: str, work: Path) -> set[str]:
    probe = work / "probe.py"
    probe.write_text("import _microtrain as m\n"
                     "print('NAMES', ' '.join(n for n in dir(m) if callable(getattr(m, n))))\n")
    p = qemu_run.run(board, "probe.py", cwd=work, arch=_arch(arch), timeout=60)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("NAMES ")]
    if p.returncode != 0 or not line:
        raise RuntimeError(f"{board}/{arch}: _microtrain does not import:\n{p.stdout}{p.stderr}")
    return set(line[0].split()[1:])


def kernel_cases_for(board: str, arch: str, per_op: int, seed: int, work: Path) -> list[Case]:
    names = module_functions(board, arch, work)
    cases = [c for op in kernel_cases.ALL_OPS for c in kernel_cases.generate(op, per_op, seed)]
    cases += list(kernel_cases.generate_limits())
    limit = KERNEL_HEAP_KB[board] * 1024 // 8
    # and no single buffer (output placeholders included) over a quarter of the heap: the M0's
    # natmod code sits in its 224 KB heap too, so one 72 KB block may find no room after the
    # float cases ran (fragmentation)
    return [c for c in cases if c.op in names and len(kernel_harness.encode_cases([c])) <= limit
            and _largest_buffer(c) <= KERNEL_HEAP_KB[board] * 1024 // 4]


def _largest_buffer(c: Case) -> int:
    sizes = [0]
    for a in c.args:
        if isinstance(a, kernel_harness.Buf):
            item = 1 if a.kind in "bByY" else (2 if a.kind in "hH" else 4)
            sizes.append(a.data.nbytes if a.data is not None else a.n * item)
    return max(sizes)


def check_kernels(board: str, arch: str, per_op: int, seed: int) -> tuple[int, int, list[str]]:
    work = WORK / f"kernels-{board}-{arch}"
    work.mkdir(parents=True, exist_ok=True)
    cases = kernel_cases_for(board, arch, per_op, seed, work)
    kernel_harness.write_cases(work / "cases.bin", cases)
    res_path = work / "results.bin"
    res_path.unlink(missing_ok=True)
    p = qemu_run.run(board, str(kernel_harness.RUNNER), ["cases.bin", "results.bin"], cwd=work,
                     arch=_arch(arch), heap=f"{KERNEL_HEAP_KB[board]}k")
    results = kernel_harness.decode_results(res_path.read_bytes())[1] if res_path.exists() else []
    bad = []
    passed = 0
    for i, c in enumerate(cases):
        diffs = kernel_harness.compare(c, results[i] if i < len(results) else None)
        if diffs:
            bad.append(f"{board}/{arch} case {i} {kernel_harness.describe_case(c)}: {diffs[:2]}")
        else:
            passed += 1
    if p.returncode != 0:
        bad.append(f"{board}/{arch}: runner exit {p.returncode}: {(p.stdout + p.stderr)[-800:]}")
    return passed, len(cases), bad


# --------------------------------------------------------------------------
# float32 at its edges: the software float (armv6m / armv7m modules, the M0 firmware's built-in
# module) == the FPU boards

F32_RUNNER = ROOT / "tests" / "mp" / "f32_edges_runner.py"
# float32 patterns at the edges: zeros, subnormals, the normal range's ends, 1 and its
# neighbours, powers of two around 2^24 / 2^31, infinities, quiet and signalling NaNs
F32_EDGES = [0x00000000, 0x80000000, 0x00000001, 0x80000003, 0x007FFFFF, 0x00400000, 0x00800000, 0x80800001,
             0x3F800000, 0xBF800001, 0x3F7FFFFF, 0x33800000, 0x34000000, 0x4B800000, 0x4F000000, 0x7F7FFFFF,
             0xFF7FFFFF, 0x7F000000, 0x0C000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC12345, 0x7F800001,
             0x3EAAAAAB, 0xC2C80000]
F32_INTS = [0, 1, -1, 2, 3, 127, -128, 16129, -16256, (1 << 24) + 1, -(1 << 24) - 3, (1 << 25) + 2, 2**31 - 1,
            -(2**31), 1 << 30, -((1 << 30) + 64)]


def f32_edge_calls(seed: int, n_random: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(a bits, x int32, y float32 bits) per call: every edge scale against every (x, edge y)
    pair, then random patterns (half of them with exponents near the subnormal range)."""
    calls = []
    xs = np.array([x for x in F32_INTS for _ in F32_EDGES], dtype=np.int32)
    ys = np.array([y for _ in F32_INTS for y in F32_EDGES], dtype=np.uint32)
    for a in F32_EDGES:
        calls.append((a, xs, ys))
    rng = np.random.default_rng(seed)
    for k in range(16):
        a = int(rng.integers(0, 2**32, dtype=np.uint64))
        if k % 2:  # a small scale: products and sums in and around the subnormal range
            a = (a & 0x807FFFFF) | (int(rng.integers(1, 40)) << 23)
        x = rng.integers(-(2**31), 2**31, n_random, dtype=np.int64).astype(np.int32)
        x[::3] = rng.integers(-16256, 16257, len(x[::3]))  # int8 products, as in the kernels
        y = rng.integers(0, 2**32, n_random, dtype=np.uint64).astype(np.uint32)
        y[::2] = (y[::2] & 0x807FFFFF) | (rng.integers(0, 50, len(y[::2])).astype(np.uint32) << 23)
        calls.append((a, x, y))
    return calls


def f32_edge_expected(calls: list[tuple[int, np.ndarray, np.ndarray]]) -> np.ndarray:
    """numpy float32 (x64 SSE): y + a * float32(x), each operation rounded to float32."""
    out = []
    with np.errstate(all="ignore"):
        for a, x, y in calls:
            af = np.array([a], dtype=np.uint32).view(np.float32)[0]
            out.append((y.view(np.float32) + af * x.astype(np.float32)).view(np.uint32))
    return np.concatenate(out)


F32Calls = list[tuple[int, np.ndarray, np.ndarray]]


def run_f32_edges(board: str, arch: str, calls: F32Calls) -> np.ndarray | None:
    """The results of f32_edges_runner.py on a board (None if it did not complete)."""
    work = WORK / f"f32-{board}-{arch}"
    work.mkdir(parents=True, exist_ok=True)
    parts = [struct.pack("<I", len(calls))]
    for a, x, y in calls:
        parts += [struct.pack("<II", len(x), a), x.astype("<i4").tobytes(), y.astype("<u4").tobytes()]
    (work / "in.bin").write_bytes(b"".join(parts))
    (work / "out.bin").unlink(missing_ok=True)
    p = qemu_run.run(board, str(F32_RUNNER), ["in.bin", "out.bin"], cwd=work, arch=_arch(arch), timeout=300)
    if p.returncode != 0 or f"F32-EDGES-DONE {len(calls)}" not in p.stdout:
        return None
    return np.frombuffer((work / "out.bin").read_bytes(), dtype="<u4")


def check_f32_edges(boards: list[str], seed: int, n_random: int) -> tuple[int, list[str]]:
    """f32_axpy_i32 at the float32 edges: the software-float boards (SOFT_FLOAT_RUNS) equal the
    M4 (armv7emsp) and M7 (armv7emdp) FPUs bit for bit, NaNs included; every board equals numpy
    float32 (x64) wherever the result is not a NaN (NaN bits differ between Arm and x64 FPUs by
    design). Returns (values compared, problems)."""
    calls = f32_edge_calls(seed, n_random)
    want = f32_edge_expected(calls)
    runs = {b: run_f32_edges(b, a, calls) for b, a in SOFT_FLOAT_RUNS + FPU_RUNS if b in boards}
    bad = [f"f32 edges {b}: the runner did not complete" for b, r in runs.items() if r is None]
    got = {b: r for b, r in runs.items() if r is not None}
    nan = (want & 0x7FFFFFFF) > 0x7F800000
    for b, r in got.items():
        if len(r) != len(want):
            bad.append(f"f32 edges {b}: {len(r)} values, expected {len(want)}")
            continue
        diff = np.flatnonzero((r != want) & ~nan | (nan != ((r & 0x7FFFFFFF) > 0x7F800000)))
        bad += [f"f32 edges {b}: value {i}: 0x{r[i]:08x}, numpy 0x{want[i]:08x}" for i in diff[:5]]
    ref = [b for b, _ in FPU_RUNS if b in got]
    for s in [b for b, _ in SOFT_FLOAT_RUNS if b in got]:
        for b in ref:
            diff = np.flatnonzero(got[s] != got[b]) if len(got[s]) == len(got[b]) else [0]
            bad += [f"f32 edges {s} vs {b}: value {i}: 0x{got[s][i]:08x} != 0x{got[b][i]:08x}"
                    for i in diff[:5]]
    return len(want), bad


F32_OPS_RUNNER = ROOT / "tests" / "mp" / "f32_ops_runner.py"


def f32_ops_expected(vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """numpy float32 (x64 SSE) for f32_ops_runner.py: (a + b, a - b, a * b, a / b) bits and the
    comparison flags per pair (a-major), int(a) per value (0 where it would not fit int32)."""
    f = vals.view(np.float32)
    a, b = np.repeat(f, len(f)), np.tile(f, len(f))
    with np.errstate(all="ignore"):
        ar = np.stack([a + b, a - b, a * b, a / b], axis=1).view(np.uint32)
        ar[:, 3] = np.where(b == 0, np.uint32(0xFFFFFFFF), ar[:, 3])
        flags = ((a < b) | (a <= b) << 1 | (a > b) << 2 | (a >= b) << 3 | (a == b) << 4
                 | (a != b) << 5).astype(np.uint8)
        ok = np.isfinite(f) & (f >= -2.0**31) & (f < 2.0**31)
        ints = np.where(ok, np.trunc(np.where(ok, f, 0)).astype(np.float64), 0).astype(np.int32)
    return ar, flags, ints


def check_f32_ops(boards: list[str]) -> tuple[int, list[str]]:
    """Python float +, -, *, /, comparisons and int() on every pair of the float32 edge patterns
    (F32_EDGES plus the int8-range integers): each board equals numpy float32, a NaN result by
    being a NaN (NaN bits differ between FPUs and software float by design). Returns (values
    compared per board, problems)."""
    vals = np.array(F32_EDGES + [int(v) for v in np.array(F32_INTS[:9], np.float32).view(np.uint32)],
                    dtype=np.uint32)
    ar, flags, ints = f32_ops_expected(vals)
    n = len(vals)
    bad: list[str] = []
    for board in boards:
        work = WORK / f"f32ops-{board}"
        work.mkdir(parents=True, exist_ok=True)
        (work / "in.bin").write_bytes(struct.pack("<I", n) + vals.astype("<u4").tobytes())
        (work / "out.bin").unlink(missing_ok=True)
        p = qemu_run.run(board, str(F32_OPS_RUNNER), ["in.bin", "out.bin"], cwd=work, timeout=300)
        if p.returncode != 0 or f"F32-OPS-DONE {n}" not in p.stdout:
            bad.append(f"f32 ops {board}: the runner did not complete: {(p.stdout + p.stderr)[-500:]}")
            continue
        raw = (work / "out.bin").read_bytes()
        rec = np.dtype([("r", "<u4", 4), ("c", "u1")])
        got = np.frombuffer(raw[:n * n * rec.itemsize], dtype=rec)
        got_ints = np.frombuffer(raw[n * n * rec.itemsize:], dtype="<i4")
        nan_w, nan_g = (ar & 0x7FFFFFFF) > 0x7F800000, (got["r"] & 0x7FFFFFFF) > 0x7F800000
        diff = np.argwhere((got["r"] != ar) & ~nan_w | (nan_w != nan_g))
        ops = "+-*/"
        bad += [f"f32 ops {board}: 0x{vals[i // n]:08x} {ops[k]} 0x{vals[i % n]:08x} = "
                f"0x{got['r'][i, k]:08x}, numpy 0x{ar[i, k]:08x}" for i, k in diff[:5]]
        bad += [f"f32 ops {board}: compare 0x{vals[i // n]:08x}, 0x{vals[i % n]:08x}: flags "
                f"{got['c'][i]:06b}, numpy {flags[i]:06b}" for i in np.flatnonzero(got["c"] != flags)[:5]]
        bad += [f"f32 ops {board}: int(0x{vals[i]:08x}) = {got_ints[i]}, numpy {ints[i]}"
                for i in np.flatnonzero(got_ints != ints)[:5]]
    return n * n * 5 + n, bad


# --------------------------------------------------------------------------
# the .mtm mutation set


@dataclass
class MutationOutcome:
    files: int
    accepted: int
    crashes: list[str]
    disagreements: list[str]


def mutation_corpus(n: int) -> tuple[list[bytes], list[bool]]:
    """The valid files and the first n mutations of the loader tests (tests/support/mtm_files.py),
    with the host reader's verdicts."""
    from support import mtm_files

    valid = mtm_files.torch_model_files()
    files = list(valid) + mtm_files.mutation_corpus(valid, n)[1]
    return files, [mtm_files.host_verdict(f)[0] for f in files]


def check_mutations(board: str, files: list[bytes], verdicts: list[bool]) -> MutationOutcome:
    work = WORK / f"mtm-{board}"
    work.mkdir(parents=True, exist_ok=True)
    parts = [b"MTMC", struct.pack("<I", len(files))]
    for f in files:
        parts += [struct.pack("<I", len(f)), f]
    (work / "corpus.bin").write_bytes(b"".join(parts))
    p = qemu_run.run(board, str(MTM_RUNNER), ["corpus.bin"], cwd=work)
    lines = p.stdout.splitlines()
    done = f"MTM-RUNNER-DONE {len(files)}" in lines
    lines = [ln for ln in lines if not ln.startswith("MTM-RUNNER-DONE")]
    crashes = [f"#{k}: {ln}" for k, ln in enumerate(lines) if ln.startswith("E")]
    if p.returncode != 0 or not done or len(lines) != len(files):
        crashes.append(f"runner exit {p.returncode} after {len(lines)}/{len(files)} files: "
                       f"{(p.stdout + p.stderr)[-500:]}")
    pairs = enumerate(zip(verdicts, lines, strict=False))
    dis = [f"#{k}: host {'accepts' if v else 'rejects'}, {board}: {ln}"
           for k, (v, ln) in pairs if (ln == "1") != v and not ln.startswith("E")]
    return MutationOutcome(len(files), sum(ln == "1" for ln in lines), crashes, dis)


# --------------------------------------------------------------------------
# training: board == twin, byte for byte


def training_setup() -> Path:
    """The digits CNN (tests/support/digits_model.py) and its 16 samples in WORK/train."""
    from support.digits_model import digits_model

    work = WORK / "train"
    work.mkdir(parents=True, exist_ok=True)
    dm = digits_model()
    (work / "model.mtm").write_bytes(dm.mtm)
    (work / "x.bin").write_bytes(dm.x.astype(np.int8).tobytes())
    (work / "labels.json").write_text(json.dumps([int(v) for v in dm.labels]))
    return work


def _train_cfg(work: Path, tag: str, cfg: tuple[str, str, dict[str, Any], dict[str, Any] | None, int],
               steps: int) -> str:
    train, mode, opt, sparse, batch = cfg
    labels = json.loads((work / "labels.json").read_text())
    c = {"model": "model.mtm", "samples": "x.bin", "numel": 64, "labels": labels,
         "order": [i % len(labels) for i in range(steps)], "train": train, "mode": mode, "opt": opt,
         "sparse": sparse, "batch": batch, "save": f"{tag}.ck.mtm", "out": f"{tag}.dump"}
    (work / f"{tag}.json").write_text(json.dumps(c))
    return f"{tag}.json"


def _outputs(work: Path, tag: str) -> tuple[bytes, bytes] | None:
    ck, dump = work / f"{tag}.ck.mtm", work / f"{tag}.dump"
    if not (ck.exists() and dump.exists()):
        return None
    return ck.read_bytes(), dump.read_bytes()


def _clear(work: Path, tag: str) -> None:
    for suffix in (".ck.mtm", ".dump"):
        (work / f"{tag}{suffix}").unlink(missing_ok=True)


def twin_training(work: Path, n_configs: int, steps: int, exe: Path = TWIN, prefix: str = "twin"
                  ) -> dict[int, tuple[bytes, bytes]]:
    """The first n_configs of TRAIN_CONFIGS on a host build of the port (default: the float32 twin)."""
    out = {}
    model = (work / "model.mtm").read_bytes()
    for i, cfg in enumerate(TRAIN_CONFIGS[:n_configs]):
        tag = f"{prefix}{i}"
        _clear(work, tag)
        name = _train_cfg(work, tag, cfg, steps)
        p = subprocess.run([str(exe), "-X", "heapsize=256k", "-p", str(qemu_run.PYLIB),
                            str(TRAIN_RUNNER), name], cwd=work, capture_output=True, text=True, timeout=600)
        got = _outputs(work, tag)
        if p.returncode != 0 or got is None:
            raise RuntimeError(f"twin training {cfg[:2]} failed:\n{(p.stdout + p.stderr)[-2000:]}")
        if got[0] == model:
            raise RuntimeError(f"twin training {cfg[:2]}: the checkpoint equals the untrained model")
        out[i] = got
    return out


def _train_arch(board: str) -> str | None:
    """The natmod of the digits CNN's op families (OPS=core) for a board without microtrain built in:
    a natmod's code sits in the GC heap, and the whole module leaves the M0's float32 runs too little."""
    return None if qemu_run.BOARDS[board].builtin else f"{qemu_run.BOARDS[board].arch}-core"


def check_training(board: str, work: Path, twin: dict[int, tuple[bytes, bytes]], steps: int
                   ) -> tuple[int, int, list[str]]:
    passed, bad = 0, []
    for i, cfg in enumerate(TRAIN_CONFIGS[:len(twin)]):
        tag = f"{board}-{i}"
        _clear(work, tag)
        name = _train_cfg(work, tag, cfg, steps)
        p = qemu_run.run(board, str(TRAIN_RUNNER), [name], cwd=work, heap=f"{TRAIN_HEAP_KB[board]}k",
                         arch=_train_arch(board))
        got = _outputs(work, tag)
        if p.returncode != 0 or got is None:
            bad.append(f"{board} {cfg[:2]}: exit {p.returncode}: {(p.stdout + p.stderr)[-800:]}")
        elif got[0] != twin[i][0]:
            bad.append(f"{board} {cfg[:2]}: checkpoint differs from the twin's")
        elif got[1] != twin[i][1]:
            bad.append(f"{board} {cfg[:2]}: losses / trained arrays differ from the twin's")
        else:
            passed += 1
    return passed, len(twin), bad


# --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="microtrain on the QEMU Cortex-M boards")
    ap.add_argument("--quick", action="store_true", help="the pytest subset")
    ap.add_argument("--boards", default=",".join(BOARDS))
    a = ap.parse_args(argv)
    boards = a.boards.split(",")
    per_op, mutations, n_train, steps = (2, 60, 3, 8) if a.quick else (12, 3600, len(TRAIN_CONFIGS), 24)
    t0 = time.time()
    build_all(boards)
    problems: list[str] = []

    cases: dict[str, list[int]] = {b: [0, 0] for b in boards}
    for board, arch in KERNEL_RUNS:
        if board in boards:
            ok, n, bad = check_kernels(board, arch, per_op, seed=4242)
            cases[board][0] += ok
            cases[board][1] += n
            problems += bad
            print(f"kernels {board}/{arch}: {ok}/{n} bit-exact", flush=True)

    n_f32, bad_f32 = check_f32_edges(boards, seed=4242, n_random=512 if a.quick else 2048)
    problems += bad_f32
    print(f"f32 edges {','.join(boards)}: {n_f32} values, {len(bad_f32)} problems", flush=True)

    n_ops, bad_ops = check_f32_ops(boards)
    problems += bad_ops
    print(f"f32 ops {','.join(boards)}: {n_ops} values a board, {len(bad_ops)} problems", flush=True)

    files, verdicts = mutation_corpus(mutations)
    for board in boards:
        m = check_mutations(board, files, verdicts)
        problems += m.crashes + m.disagreements
        print(f"mtm {board}: files={m.files} accepted={m.accepted} crashes={len(m.crashes)} "
              f"disagreements={len(m.disagreements)}", flush=True)

    work = training_setup()
    twin = twin_training(work, n_train, steps)
    train: dict[str, tuple[int, int]] = {}
    for board in boards:
        ok, n, bad = check_training(board, work, twin, steps)
        train[board] = (ok, n)
        problems += bad
        print(f"train {board}: {ok}/{n} runs equal the twin's checkpoint", flush=True)

    for p in problems[:20]:
        print("FAIL", p)
    print(f"({time.time() - t0:.0f} s)")
    print("test-mcu: " + " ".join(f"{b} cases={cases[b][0]}/{cases[b][1]} train={train[b][0]}/{train[b][1]}"
                                  for b in boards))
    complete = all(cases[b][0] == cases[b][1] > 0 and train[b][0] == train[b][1] > 0 for b in boards)
    return 0 if complete and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
