"""`make bench-mcu`: instruction counts of microtrain on Cortex-M0/M3/M4/M7 and RV32IMC (QEMU).

The firmware of ports/qemu runs the MicroPython scripts evals/mp/bench_*.py
under QEMU with the mtcount plugin (evals/benchmarks/qemu_plugin), which counts every
executed guest instruction, attributed by address to

- ``native``: code outside the firmware image, i.e. the natmod ``.mpy`` that
  MicroPython loaded into its heap at run time (the kernels and their
  argument checks); on a firmware with microtrain built in (m0fw, rv32), the
  functions compiled from usermod/microtrain, left out of the map so that
  they count as the same category;
- ``interp``: the MicroPython core in the firmware (compilation units under
  ``py/``: VM, runtime, objects, GC, ...), from the firmware's debug info;
- ``rest``: the rest of the firmware (libc/libm/libgcc, the port, semihosting).

The guest marks regions by calling ``micropython.heap_lock()`` (the plugin gets
the address of ``mp_micropython_heap_lock`` as its marker); the order of the
markers is printed by the guest at the end. Counts are exact and deterministic
(``--repeat`` shows two runs agree), so they are comparable across machines.

Training rows measure 8 samples (batch 1) after one unmeasured warm-up sample: data[1..8]
of the 32-sample .mtd ("cold"). DynamicSparse's rate is 1 whenever a sample's loss is a new
maximum, which is frequent so early, so the M7 all-layer runs are also measured in steady
state: after the warm-up, PREPASS = 32 unmeasured samples (one pass over the data, data[1..31],
data[0]), then the same data[1..8] again ("after 32 more"), dense and sparse alike; and over
the first pass from the cold start: the warm-up, then FIRST_PASS = 32 measured samples (data[1..31],
data[0]: every sample once, the loss records at rate 1 included; "first pass").
``sparse01_bwd`` is the steady-state ratio of mean backward instructions dense / sparse,
``sparse01_bwd_cold`` the first pass's; both are printed and written (docs/performance.md says
why the first pass and not the first 8 samples).

Writes docs/performance.md and ends with the one-line summary ``bench-mcu: ...``.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "bench"
PLUGIN_DIR = ROOT / "evals" / "benchmarks" / "qemu_plugin"
PLUGIN = ROOT / "build" / "qemu-plugin" / "mtcount.so"
MP_DIR = ROOT / "evals" / "mp"
PYTHON_LIB = ROOT / "python_lib"
DOC = ROOT / "docs" / "performance.md"
MICROPYTHON = ROOT / ".venv" / "bin" / "micropython"

CATS = ("interp", "rest", "native")  # the plugin's categories: map 0, 1, 2; unmapped last
MARK_SYMBOL = "mp_micropython_heap_lock"
# compilation units of the MicroPython core (interpreter) in the firmware's DWARF
INTERP_DIRS = ("py/",)
# compilation units of microtrain built into a firmware (user C module): "native"
NATIVE_DIRS = ("usermod/microtrain/",)
NATIVE = 2  # firmware_map's category of NATIVE_DIRS functions: not written to the map


def _qemu_run() -> object:
    """ports/qemu/qemu_run.py (the firmware's runner), imported by path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("qemu_run", ROOT / "ports" / "qemu" / "qemu_run.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["qemu_run"] = mod
    spec.loader.exec_module(mod)
    return mod


@dataclass(frozen=True)
class Board:
    name: str  # m0 / m0fw / m3 / m4 / m7 / rv32 (ports/qemu/qemu_run.py)
    firmware: Path
    arch: str | None  # natmod arch loaded on it (None: microtrain built into the firmware)
    heap_kb: int  # GC heap of the runs


def boards() -> dict[str, Board]:
    qr = _qemu_run()
    # M7/M4: 512 KB, so that every configuration fits with the microtrain package's bytecode
    # in RAM (as after `mip install`; frozen into flash on a real board); M0: the
    # enlarged micro:bit has 256 KB of SRAM and the firmware's largest heap is 224 KB; the
    # M3 runs the M0's digits runs, with the M0's heap; rv32: its package is frozen (no bytecode
    # in RAM), so its build's default heap, as on an ESP32-C3.
    heaps = {"m7": 512, "m4": 512, "m3": 224, "m0": 224, "m0fw": 224, "rv32": 256}
    return {b: Board(b, qr.firmware(b), None if qr.BOARDS[b].builtin else qr.BOARDS[b].arch,  # type: ignore
                     heaps[b]) for b in heaps}


# ---------------------------------------------------------------------------------------------
# firmware address map


def _cu_ranges(elf: object) -> list[tuple[int, int, str]]:
    """(low, high, CU name) of every compilation unit with code, from DWARF."""
    from elftools.elf.elffile import ELFFile

    assert isinstance(elf, ELFFile)
    out: list[tuple[int, int, str]] = []
    if not elf.has_dwarf_info():
        return out
    dw = elf.get_dwarf_info()
    rl = dw.range_lists()
    for cu in dw.iter_CUs():
        top = cu.get_top_DIE()
        name_attr = top.attributes.get("DW_AT_name")
        name = name_attr.value.decode(errors="replace") if name_attr else "?"
        at = top.attributes
        if "DW_AT_ranges" in at and rl is not None:
            base = at["DW_AT_low_pc"].value if "DW_AT_low_pc" in at else 0
            for r in rl.get_range_list_at_offset(at["DW_AT_ranges"].value, cu=cu):
                if hasattr(r, "begin_offset") and r.end_offset > r.begin_offset:
                    out.append((base + r.begin_offset, base + r.end_offset, name))
        elif "DW_AT_low_pc" in at and "DW_AT_high_pc" in at:
            lo = at["DW_AT_low_pc"].value
            hi = at["DW_AT_high_pc"].value
            if at["DW_AT_high_pc"].form != "DW_FORM_addr":
                hi += lo  # DWARF 4: high_pc is a length
            if hi > lo:
                out.append((lo, hi, name))
    return out


def _in_dirs(cu_name: str, dirs: tuple[str, ...]) -> bool:
    n = cu_name.replace("\\", "/")
    return any(n.startswith(d) or f"/{d}" in n for d in dirs)


def _is_interp(cu_name: str) -> bool:
    return _in_dirs(cu_name, INTERP_DIRS)


@dataclass
class FirmwareMap:
    path: Path  # the plugin's map file
    mark: int  # marker address
    funcs: list[tuple[int, int, str, int]]  # start, end, symbol, category, in map order
    text: int  # bytes of executable firmware code


def firmware_map(elf_path: Path, out: Path) -> FirmwareMap:
    """Every executable byte of the firmware in a category: functions by the DWARF CU
    that holds them (py/ -> interp, usermod/microtrain -> native, else rest), code between
    symbols -> rest. Native functions stay out of the map file: the plugin counts them as
    unmapped, the category of a natmod's code."""
    from elftools.elf.constants import P_FLAGS
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    with open(elf_path, "rb") as f:
        elf = ELFFile(f)
        segs = [(s["p_vaddr"], s["p_vaddr"] + s["p_memsz"]) for s in elf.iter_segments()
                if s["p_type"] == "PT_LOAD" and s["p_flags"] & P_FLAGS.PF_X and s["p_memsz"]]
        cus = sorted(_cu_ranges(elf))
        syms: dict[int, tuple[int, str]] = {}
        mark = None
        symtab = elf.get_section_by_name(".symtab")
        if not isinstance(symtab, SymbolTableSection):
            raise SystemExit(f"bench-mcu: {elf_path} has no symbol table")
        for s in symtab.iter_symbols():
            if s["st_info"]["type"] != "STT_FUNC" or not s["st_size"]:
                continue
            a = s["st_value"] & ~1
            if s.name == MARK_SYMBOL:
                mark = a
            if a not in syms or syms[a][0] < s["st_size"]:
                syms[a] = (s["st_size"], s.name)
    if mark is None:
        raise SystemExit(f"bench-mcu: {elf_path} has no {MARK_SYMBOL} (micropython.heap_lock)")
    cu_lo = [c[0] for c in cus]

    def category(a: int, name: str) -> int:
        i = int(np.searchsorted(cu_lo, a, side="right")) - 1
        if i >= 0 and cus[i][0] <= a < cus[i][1]:
            return 0 if _is_interp(cus[i][2]) else (NATIVE if _in_dirs(cus[i][2], NATIVE_DIRS) else 1)
        return 1  # libc / libgcc / startup code without debug info

    funcs: list[tuple[int, int, str, int]] = []
    end = 0
    for a in sorted(syms):
        size, name = syms[a]
        if a < end:
            continue  # an alias inside the previous function
        funcs.append((a, a + size, name, category(a, name)))
        end = a + size
    # gaps of the executable segments (veneers, literal pools, vector table): rest
    lines: list[tuple[int, int, str, int]] = []
    for lo, hi in segs:
        cur = lo
        for fs, fe, name, cat in funcs:
            if fe <= lo or fs >= hi:
                continue
            if fs > cur:
                lines.append((cur, fs, "(gap)", 1))
            lines.append((max(fs, lo), min(fe, hi), name, cat))
            cur = max(cur, min(fe, hi))
        if cur < hi:
            lines.append((cur, hi, "(gap)", 1))
    lines = [ln for ln in lines if ln[3] != NATIVE]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(f"{s:x} {e:x} {c}\n" for s, e, _, c in lines))
    return FirmwareMap(out, mark, lines, sum(hi - lo for lo, hi in segs))


# ---------------------------------------------------------------------------------------------
# running the guest


@dataclass
class Run:
    stdout: str
    marks: list[str]
    counts: list[list[int]]  # cumulative per category at each marker
    results: dict[str, str]
    total: list[int]  # whole run per category
    profile: dict[str, int] = field(default_factory=dict)  # per firmware function (+ "(native)")


def _parse(stdout: str, counts_text: str | None, fmap: FirmwareMap | None) -> Run:
    marks: list[str] = []
    results: dict[str, str] = {}
    for line in stdout.splitlines():
        if line.startswith("@marks "):
            marks.extend(line.split()[1:])
        elif line.startswith("@res "):
            _, k, v = line.split(" ", 2)
            results[k] = v
    counts: list[list[int]] = []
    total: list[int] = [0] * len(CATS)
    profile: dict[str, int] = {}

    def native_last(v: list[int]) -> list[int]:
        # a map with built-in kernels (category 2) adds the plugin's "unmapped" after them: code
        # outside the image (none, without a natmod) counts as native as well
        return v[:len(CATS) - 1] + [sum(v[len(CATS) - 1:])]

    if counts_text is not None:
        for line in counts_text.splitlines():
            f = line.split()
            if f[0] == "M":
                counts.append(native_last([int(v) for v in f[2:]]))
            elif f[0] == "E":
                total = native_last([int(v) for v in f[1:]])
            elif f[0] == "R" and fmap is not None:
                i, n = int(f[1]), int(f[2])
                name = fmap.funcs[i][2] if i < len(fmap.funcs) else "(native)"
                profile[name] = profile.get(name, 0) + n
        if len(counts) != len(marks):
            raise RuntimeError(f"{len(counts)} markers counted but {len(marks)} reported by the guest")
    return Run(stdout, marks, counts, results, total, profile)


def run_guest(board: Board | None, fmap: FirmwareMap | None, script: str, args: Sequence[str],
              heap_kb: int = 256, timeout: float = 3600.0) -> Run:
    """Run evals/mp/<script> with args on the board (None: host micropython, no counts)."""
    BUILD.mkdir(parents=True, exist_ok=True)
    if board is None:
        env = dict(os.environ, MICROPYPATH=f"{ROOT / 'build/natmod/x64'}:{PYTHON_LIB}:{MP_DIR}")
        p = subprocess.run([str(MICROPYTHON), "-X", f"heapsize={heap_kb}k", str(MP_DIR / script), *args],
                           capture_output=True, text=True, timeout=timeout, env=env, cwd=BUILD)
        if p.returncode != 0:
            raise RuntimeError(f"{script} failed on the host:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        return _parse(p.stdout, None, None)
    assert fmap is not None
    qr = _qemu_run()
    counts = BUILD / f"{board.name}.counts"
    # -icount: virtual time follows the instruction count, so nothing depends on the host's speed
    extra = ["-icount", "shift=0", "-plugin", f"{PLUGIN},map={fmap.path},mark={fmap.mark:#x},out={counts}",
             "-d", "plugin"]
    # as on a board after `mip install`: the microtrain package compiled to .mpy, the natmod
    qr.build_pylib()  # type: ignore[attr-defined]
    paths = [str(MP_DIR), *qr.default_paths(board.name, board.arch)]  # type: ignore[attr-defined]
    cmd = qr.qemu_cmd(board.name, str(MP_DIR / script), list(args), heap=f"{heap_kb}k",  # type: ignore
                      paths=paths, extra=extra, elf=board.firmware)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=BUILD,
                       stdin=subprocess.DEVNULL)
    if p.returncode != 0 or "@res done 1" not in p.stdout:
        raise RuntimeError(f"{script} {' '.join(args)} failed on {board.name} (rc {p.returncode}):\n"
                           f"{p.stdout[-3000:]}\n{p.stderr[-2000:]}")
    return _parse(p.stdout, counts.read_text(), fmap)


def regions(run: Run) -> dict[str, list[list[int]]]:
    """name -> per occurrence, instructions per category between "name" and "name_end"."""
    out: dict[str, list[list[int]]] = {}
    open_: dict[str, list[int]] = {}
    for name, c in zip(run.marks, run.counts, strict=True):
        if name.endswith("_end"):
            base = name[:-4]
            b = open_.pop(base)
            out.setdefault(base, []).append([y - x for x, y in zip(b, c, strict=True)])
        else:
            open_[name] = c
    return out


RV32_LIBGCC = "rv32-libgcc"  # label of the rows of the rv32 firmware built with libgcc's soft float


def rv32_libgcc_firmware() -> Path:
    """The rv32 firmware built with libgcc's float routines (make -C ports/qemu/rv32 SOFTFLOAT=libgcc)."""
    subprocess.run(["make", "-j2", "-C", str(ROOT / "ports" / "qemu" / "rv32"), "SOFTFLOAT=libgcc"],
                   check=True, capture_output=True)
    return ROOT / "build" / "qemu" / "rv32-single-libgcc" / "firmware.elf"


# ---------------------------------------------------------------------------------------------
# models and data


# MLPerf Tiny models (evals/lib/mlperf_tiny.py, the .mtm / .mtd of `make mem-mcu`), per training
# sample beside their own inference on M7: model, layers trained, DynamicSparse's lambda_min (0: dense)
MLPERF = (("ds_cnn_s", "last:2", 0.0), ("resnet8", "last:3", 0.0), ("mobilenet_v1", "last:3", 0.1))
MLPERF_HEAP_KB = 2048  # MobileNetV1's float32 momentum of its last layers does not fit 512 KB
MHZ = 480  # a Cortex-M7 board's clock, for the ms column (one instruction per cycle assumed)


def mlperf_models() -> None:
    """build/bench/<name>.mtm / .mtd of the MLPERF models: mem_mcu's, made by it if missing."""
    from evals.benchmarks import mem_mcu

    mem_mcu.models()
    BUILD.mkdir(parents=True, exist_ok=True)
    for name, _, _ in MLPERF:
        for ext in (".mtm", ".mtd"):
            src, dst = mem_mcu.BUILD / f"{name}{ext}", BUILD / f"{name}{ext}"
            if not dst.is_file() or dst.read_bytes() != src.read_bytes():
                shutil.copy2(src, dst)


def mlperf_table(rows: list[TrainRow]) -> list[str]:
    out = ["| model | train | sparse | per inference | ms at 480 MHz | per training sample | ms at 480 MHz "
           "| training / inference | backward | update | peak heap |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.model not in {m for m, _, _ in MLPERF}:
            continue
        sp = f"DynamicSparse({r.sparse:g}, 1.0)" if r.sparse else "dense"
        out.append(f"| {r.model} | {r.train} | {sp} | {_m(r.infer)} | {r.infer / MHZ / 1e3:.1f} "
                   f"| {_m(r.total)} | {r.total / MHZ / 1e3:.1f} | {r.total / r.infer:.2f} | {_m(r.bwd)} "
                   f"| {_m(r.update)} | {r.heap_peak / 1024:.1f} KB |")
    return out


def digits_model() -> Path:
    """The getting-started digits CNN (docs/getting-started.md: conv 1->8, pool, 128->32->10),
    trained and converted the same way, and 32 quantised samples."""
    from microtrain_tools import convert as cv
    from microtrain_tools.mtd import write_mtd

    path = BUILD / "digits.mtm"
    if path.is_file() and (BUILD / "digits.mtd").is_file():
        return path
    from collections import OrderedDict

    import torch
    import torch.nn as nn
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    x = (digits.images[order] / 16.0).astype(np.float32)[:, None]
    y = digits.target[order]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    net = nn.Sequential(OrderedDict([
        ("conv", nn.Conv2d(1, 8, 3, padding=1)), ("relu", nn.ReLU()), ("pool", nn.MaxPool2d(2)),
        ("flat", nn.Flatten()), ("fc1", nn.Linear(8 * 4 * 4, 32)), ("relu1", nn.ReLU()),
        ("fc2", nn.Linear(32, 10)),
    ]))
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    xt, yt = torch.from_numpy(x[:400]), torch.from_numpy(y[:400])
    for _ in range(6):
        for idx in torch.randperm(400).split(32):
            opt.zero_grad()
            nn.functional.cross_entropy(net(xt[idx]), yt[idx]).backward()
            opt.step()
    net.eval()
    BUILD.mkdir(parents=True, exist_ok=True)
    cv.convert_to_file(net, x[:200], path, progress=False)
    data = path.read_bytes()
    write_mtd(BUILD / "digits.mtd", cv.quantize_input(data, x[400:432]), y[400:432])
    return path


def transfer_model() -> tuple[Path, str]:
    """The Fashion-MNIST transfer CNN (the shipped float model of evals/models, converted to
    int8) and 32 quantised Fashion-MNIST test samples."""
    from evals.lib import datasets as ds
    from evals.lib import transfer_model as tm
    from microtrain_tools import convert as cv
    from microtrain_tools.mtd import write_mtd

    BUILD.mkdir(parents=True, exist_ok=True)
    path = BUILD / "fmnist.mtm"
    shutil.copy2(tm.get_model(progress=False).mtm, path)
    xt, yt = ds.fashion_mnist("test")
    write_mtd(BUILD / "fmnist.mtd", cv.quantize_input(path.read_bytes(), xt[:32]), yt[:32])
    return path, "shipped (evals/models/fmnist_transfer.pt)"


# ---------------------------------------------------------------------------------------------
# benchmarks

KERNELS = ("fwd", "gi", "gw_f32", "gw_i32")
STEPS_B1 = 8  # measured samples at batch 1 (each with its update); batch B: B samples, one update
# Steady-state rows: this many unmeasured samples (one pass over the 32 of the .mtd) before the
# measured ones, so that DynamicSparse's L_max is established (docs/performance.md)
PREPASS = 32
# sparse01_bwd_cold's rows: a fresh Trainer's first pass over the data, every sample measured once
FIRST_PASS = 32
# SGD's rate of those rows and of the steady-state ones (the other rows: LR): at LR with momentum
# 0.9 the transfer CNN's dense all-layer training collapses within its first pass (constant logits,
# fc1's ReLU passes no error: the errors reaching the pools are all zero), so its backward would be
# measured on dead errors; at SPARSE_LR the dense run keeps live errors through both passes
LR = 0.01
SPARSE_LR = 0.001
# the element-wise forwards, measured per output element (their "macs" are outputs)
ELEMWISE = ("avgpool", "maxpool", "add")
SHAPES = ("conv3x3", "dw3x3", "pw", "fc") + ELEMWISE
SHAPE_TEXT = {"conv3x3": "conv 3x3 16->32, 16x16, s1 p1", "dw3x3": "depthwise 3x3 x32, 16x16",
              "pw": "pointwise 32->64, 8x8", "fc": "linear 256->64", "avgpool": "avgpool 2x2 s2, 16x16x32",
              "maxpool": "maxpool 2x2 s2, 16x16x32", "add": "add, 8,192 elements"}


@dataclass
class KernelRow:
    board: str
    shape: str
    kernel: str
    macs: int
    native: int
    total: int


def bench_kernels(board: Board | None, fmap: FirmwareMap | None) -> tuple[list[KernelRow], Run]:
    run = run_guest(board, fmap, "bench_kernels.py", [], heap_kb=1024)  # buffers of all four shapes
    if board is None:
        return [], run
    reg = regions(run)
    rows = []
    for s in SHAPES:
        macs = int(run.results[f"{s}.macs"])
        for k in KERNELS:
            for v in reg.get(f"{s}.{k}", []):
                rows.append(KernelRow(board.name, s, k, macs, v[CATS.index("native")], sum(v)))
    return rows, run


@dataclass
class TrainRow:
    board: str
    model: str
    train: str
    sparse: float
    batch: int
    steps: int
    infer: float  # instructions per inference (forward of the frozen model)
    total: float  # per training sample
    fwd: float
    bwd: float
    update: float  # optimiser update, per sample (amortised over the batch)
    kernels: float  # native instructions outside the update, per sample
    native_all: float  # native instructions incl. the update, per sample
    update_per_param: float  # per trained parameter per update
    params: int
    heap_peak: int  # bytes
    heap_total: int
    heap_package: int  # bytes of the imported microtrain package (bytecode in RAM)
    prepass: int = 0  # unmeasured training samples between the warm-up and the measured ones
    rates: tuple[float, ...] = ()  # DynamicSparse's rate of each measured sample
    garbage: int = 0  # bytes a measured step leaves to the garbage collector
    heap_free: int = 0  # free heap after a collection (at the end of the run)
    gc_cost: float = 0.0  # instructions of one gc.collect() after the run
    gc_in: int = 0  # measured steps that held a collection

    @property
    def gc_per_step(self) -> float:
        """One collection's cost amortised over the steps that fill the free heap."""
        return self.gc_cost * self.garbage / self.heap_free if self.heap_free else float("nan")

    @property
    def interp(self) -> float:
        return self.total - self.kernels - self.update

    @property
    def py_share(self) -> float:
        return 1.0 - self.native_all / self.total if self.total else float("nan")


def model_natmod(board: Board, model: str) -> Board:
    """The board loading the natmod of ``model``'s ops only, as `microtrain deploy --model`
    gives it (the whole natmod would take heap a small board's run needs)."""
    from microtrain_tools import natmod

    if board.arch is None:  # microtrain built into the firmware
        return board
    ops = natmod.model_ops(BUILD / f"{model}.mtm")
    natmod.build(board.arch, ops)
    return replace(board, arch=natmod.folder(board.arch, ops))


def bench_train(board: Board | None, fmap: FirmwareMap | None, model: str, train: str, sparse: float,
                batch: int, steps: int, heap_kb: int, prepass: int = 0,
                lr: float = LR, recompute: bool = False) -> tuple[TrainRow | None, Run]:
    if board is not None:
        board = model_natmod(board, model)
    run = run_guest(board, fmap, "bench_train.py",
                    [f"{model}.mtm", f"{model}.mtd", train, f"{sparse:g}", str(batch), str(steps), "mixed",
                     "2", str(prepass), f"{lr:g}", str(int(recompute))],
                    heap_kb=heap_kb)
    if board is None:
        return None, run
    reg = regions(run)
    nat = CATS.index("native")

    def tot(name: str, cat: int | None = None) -> float:
        return float(sum(v[cat] if cat is not None else sum(v) for v in reg.get(name, [])))

    n = len(reg["step"])
    upd = reg.get("upd", [])
    params = int(run.results["trained_params"])
    return TrainRow(
        board.name, model, train, sparse, batch, n,
        infer=tot("inf") / len(reg["inf"]), total=tot("step") / n, fwd=tot("fwd") / n, bwd=tot("bwd") / n,
        update=tot("upd") / n, kernels=(tot("step", nat) - tot("upd", nat)) / n,
        native_all=tot("step", nat) / n,
        update_per_param=(tot("upd") / len(upd) / params) if upd else float("nan"), params=params,
        heap_peak=int(run.results["heap.peak"]), heap_total=int(run.results["heap.total"]),
        heap_package=int(run.results["heap.package"]), prepass=prepass,
        rates=tuple(float(run.results[f"rate.{i}"]) for i in range(n) if f"rate.{i}" in run.results),
        garbage=int(run.results["garbage"]), heap_free=int(run.results["heap.free"]), gc_cost=tot("gc"),
        gc_in=int(run.results["gc.in"])), run


# ---------------------------------------------------------------------------------------------
# report


def _m(v: float) -> str:
    return f"{v / 1e6:.2f} M" if v >= 1e5 else f"{v / 1e3:.1f} k"


def kernel_table(rows: list[KernelRow]) -> list[str]:
    out = ["| board | shape | MACs | kernel | instr/MAC (native) | instr/MAC (call incl. Python) |",
           "|---|---|---:|---|---:|---:|"]
    for r in rows:
        if r.shape not in ELEMWISE:
            out.append(f"| {r.board} | {SHAPE_TEXT[r.shape]} | {r.macs:,} | {r.kernel} "
                       f"| {r.native / r.macs:.2f} | {r.total / r.macs:.2f} |")
    return out


def elemwise_table(rows: list[KernelRow]) -> list[str]:
    out = ["| board | kernel | outputs | instr/output (native) | instr/output (call incl. Python) |",
           "|---|---|---:|---:|---:|"]
    for r in rows:
        if r.shape in ELEMWISE:
            out.append(f"| {r.board} | {SHAPE_TEXT[r.shape]} | {r.macs:,} | {r.native / r.macs:.2f} "
                       f"| {r.total / r.macs:.2f} |")
    return out


def _when(r: TrainRow) -> str:
    if r.prepass:
        return f"after {r.prepass} more"
    return "first pass" if r.batch == 1 and r.steps == FIRST_PASS else "cold"


def train_table(rows: list[TrainRow]) -> list[str]:
    out = ["| board | model | train | sparse | batch | measured | per inference | per training sample "
           "| forward | backward "
           "| update | kernels | interpreter | update % | py share | update / param | trained params "
           "| peak heap |",
           "|---|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.model in {m for m, _, _ in MLPERF}:
            continue  # their own table (mlperf_table)
        sp = f"DynamicSparse({r.sparse:g}, 1.0)" if r.sparse else "dense"
        upp = f"{r.update_per_param:,.0f}" if not math.isnan(r.update_per_param) else "-"
        when = _when(r)
        out.append(f"| {r.board} | {r.model} | {r.train} | {sp} | {r.batch} | {when} | {_m(r.infer)} "
                   f"| {_m(r.total)} "
                   f"| {_m(r.fwd)} | {_m(r.bwd)} | {_m(r.update)} | {_m(r.kernels)} | {_m(r.interp)} "
                   f"| {100 * r.update / r.total:.1f} % | {100 * r.py_share:.1f} % | {upp} | {r.params:,} "
                   f"| {r.heap_peak / 1024:.1f} KB |")
    return out


def summary_line(krows: list[KernelRow], trows: list[TrainRow]) -> str:
    def k(shape: str, kernel: str, board: str = "m7") -> str:
        for r in krows:
            if r.board == board and r.shape == shape and r.kernel == kernel:
                return f"{r.native / r.macs:.2f}"
        return "n/a"

    def t(board: str, model: str, train: str, sparse: float, batch: int,
          when: str = "cold") -> TrainRow | None:
        key = (board, model, train, sparse, batch, when)
        return next((r for r in trows if (r.board, r.model, r.train, r.sparse, r.batch, _when(r)) == key),
                    None)

    l2, al = t("m7", "fmnist", "last:2", 0.0, 1), t("m7", "fmnist", "all", 0.0, 1)
    ds = t("m7", "ds_cnn_s", "last:2", 0.0, 1)
    steady = f"after {PREPASS} more"
    al_ss, al_sp_ss = t("m7", "fmnist", "all", 0.0, 1, steady), t("m7", "fmnist", "all", 0.1, 1, steady)
    al_fp, al_sp_fp = (t("m7", "fmnist", "all", sp, 1, "first pass") for sp in (0.0, 0.1))
    d2 = t("m0", "digits", "last:2", 0.0, 1)
    rv_d2 = t("rv32", "digits", "last:2", 0.0, 1)
    d2_m3, d2_fw = t("m3", "digits", "last:2", 0.0, 1), t("m0fw", "digits", "last:2", 0.0, 1)
    na = "n/a"
    fields = [
        "m7", f"conv3x3={k('conv3x3', 'fwd')}", f"dw3x3={k('dw3x3', 'fwd')}", f"pw={k('pw', 'fwd')}",
        f"fc={k('fc', 'fwd')}", f"gi_conv3x3={k('conv3x3', 'gi')}", f"gw_conv3x3={k('conv3x3', 'gw_f32')}",
        f"avgpool={k('avgpool', 'fwd')}", f"maxpool={k('maxpool', 'fwd')}", f"add={k('add', 'fwd')}",
        f"dw_gi={k('dw3x3', 'gi')}", f"fc_gw_f32={k('fc', 'gw_f32')}", f"fc_gi={k('fc', 'gi')}",
        f"update_per_param={l2.update_per_param:.1f}" if l2 else f"update_per_param={na}",
        f"py_share_last2={100 * l2.py_share:.1f}%" if l2 else f"py_share_last2={na}",
        f"py_share_all={100 * al.py_share:.1f}%" if al else f"py_share_all={na}",
        f"sparse01_bwd={al_ss.bwd / al_sp_ss.bwd:.2f}" if al_ss and al_sp_ss else f"sparse01_bwd={na}",
        f"sparse01_bwd_cold={al_fp.bwd / al_sp_fp.bwd:.2f}" if al_fp and al_sp_fp
        else f"sparse01_bwd_cold={na}",
        f"dscnn_last2_over_infer={ds.total / ds.infer:.2f}" if ds else f"dscnn_last2_over_infer={na}",
        "m0", f"digits_last2={d2.total:.0f}" if d2 else f"digits_last2={na}",
        f"heap_last2={l2.heap_peak / 1024:.1f}" if l2 else f"heap_last2={na}",
        "m3", f"digits_last2={d2_m3.total:.0f}" if d2_m3 else f"digits_last2={na}",
        "m0fw", f"digits_last2={d2_fw.total:.0f}" if d2_fw else f"digits_last2={na}",
        "rv32", f"conv3x3={k('conv3x3', 'fwd', 'rv32')}", f"fc={k('fc', 'fwd', 'rv32')}",
        f"digits_last2={rv_d2.total:.0f}" if rv_d2 else f"digits_last2={na}",
    ]
    return "bench-mcu: " + " ".join(fields)


def cold_note(trows: list[TrainRow]) -> list[str]:
    """Why sparse01_bwd_cold is the first pass's ratio, with the rows' own rates and ratios."""
    def row(sparse: float, when: str) -> TrainRow | None:
        return next((r for r in trows if (r.board, r.model, r.train, r.batch, r.sparse, _when(r))
                     == ("m7", "fmnist", "all", 1, sparse, when)), None)

    d8, s8, dfp, sfp = row(0.0, "cold"), row(0.1, "cold"), row(0.0, "first pass"), row(0.1, "first pass")
    if not (d8 and s8 and dfp and sfp):
        return []
    n8, nfp = sum(v >= 1.0 for v in s8.rates), sum(v >= 1.0 for v in sfp.rates)
    bound = f"{STEPS_B1} / {n8} = {STEPS_B1 / n8:.2f}" if n8 else "nothing"
    return [
        "## What sparse01_bwd_cold measures", "",
        "DynamicSparse (Deutel et al., arXiv 2407.10734; docs/training.md) has no warm-up: a",
        "sample's rate is clamp(L / L_max, 0.1, 1), so every sample whose loss is a new maximum runs",
        "at rate 1, a dense backward, as the paper's text has it (the hardest sample so far updates",
        "every channel); the first sample of a run (L_max = 0) is one. That rule stays: it is the",
        "paper's, and what training pays. The paper's 6.64x is a mean backward speed-up per sample over",
        "training runs, where these records are a vanishing share. Measured over the cold rows' first",
        f"{STEPS_B1} samples, {n8} of them records, the ratio is bounded by {bound} whatever the",
        "kernels do: that window measured where the records fall in the data order, not the sparse",
        "backward. So sparse01_bwd_cold is the ratio over the first pass from the cold start: the",
        f"{FIRST_PASS} samples after the warm-up, every sample of the data once, its {nfp} records included:",
        f"{dfp.bwd / sfp.bwd:.2f} (the first {STEPS_B1} alone: {d8.bwd / s8.bwd:.2f}). The warm-up sample",
        "stays unmeasured, as in every row: its dense side also holds one-time costs (plans, buffers) that",
        "would flatter the ratio.", ""]


def write_doc(krows: list[KernelRow], trows: list[TrainRow], line: str, meta: dict[str, str]) -> None:
    lines = [
        "# Performance on Cortex-M (instruction counts)",
        "",
        "Generated by `make bench-mcu` (evals/benchmarks/bench_mcu.py); do not edit by hand.",
        "Host times next to PyTorch: [performance-host.md](performance-host.md) (`make bench`).",
        "",
        "Instruction counts come from the project's QEMU firmware (ports/qemu) and its TCG plugin",
        "(evals/benchmarks/qemu_plugin/mtcount.c), which counts every executed guest instruction exactly, so",
        "the numbers are the same on every machine and every run (times are not). Each instruction",
        "is attributed by its address:",
        "",
        "- **native**: code outside the firmware image, i.e. the `_microtrain.mpy` natmod that",
        "  MicroPython loaded into its heap (the kernels and their argument checks); on m0fw,",
        "  the firmware's functions from usermod/microtrain (the module built in);",
        "- **interpreter**: the MicroPython core of the firmware (functions whose compilation unit",
        "  is under `py/`: bytecode VM, runtime, objects, GC), from the firmware's debug info;",
        "- **rest**: everything else in the firmware (libc, libm, libgcc, the port, semihosting).",
        "",
        "Regions are marked by the guest calling `micropython.heap_lock()`: the plugin snapshots",
        f"the counts whenever `{MARK_SYMBOL}` executes. A marker pair costs about",
        f"{meta.get('marker_cost', '?')} instructions (on M7), included in each region. QEMU runs with",
        "`-icount shift=0`. The firmware's `time.ticks_us` reads QEMU's semihosting clock, which",
        "follows the host's wall clock (and costs a value-dependent 64-bit division), so the bench",
        "gives the Trainer's backward timer builtins in its place (`int`, `max`: a few",
        "instructions, like reading a hardware timer); nothing else is changed.",
        "",
        "## Reproduce",
        "",
        "<!-- not run: long -->",
        "```sh",
        "make bench-mcu            # builds the firmware, natmods and plugin; runs everything (minutes)",
        ".venv/bin/python -m evals.benchmarks.bench_mcu --quick   # a subset",
        "make -C evals/benchmarks/qemu_plugin check   # plugin self-test: known loops, counted exactly",
        "```",
        "",
        "## Kernels: instructions per MAC",
        "",
        "Each kernel is called once through the `.mpy` from MicroPython on the firmware",
        "(evals/mp/bench_kernels.py). *native* counts only the instructions executed inside the",
        "natmod (kernel plus its argument checks, no subtraction); *call* counts everything between",
        "the two markers (Python call, buffer protocol, argument checks). `gw_f32` is the weight",
        "gradient accumulated in float32 (what training uses on FPU boards), `gw_i32` the int32",
        "variant; `gi` the input gradient (dense). Data are fixed pseudo-random int8. M4 and M7",
        "run the same Thumb-2 code (the armv7emsp and armv7emdp natmods differ only in how",
        "doubles are passed), so their instruction counts agree; their cycles would not (the M7",
        "dual-issues). The m0 rows run the armv6m natmod (Cortex-M0 code: no DSP, no float",
        "kernels) on the M7 firmware, whose heap holds the buffers (the M0 board's does not); the",
        "same Thumb-1 code executes the same instructions on either core.",
        "",
        "The rv32 rows run on the RV32IMC firmware (ports/qemu/rv32), whose kernels are built in",
        "(user C module): *native* there counts the instructions of the functions compiled from",
        "usermod/microtrain (found through the firmware's debug info), the same code a natmod holds.",
        "rv32imc has no SIMD: its forward takes the scalar blocking of `MT_RV` (mt_dsp.h). Its float",
        "arithmetic is the project's software float under libgcc's names; the rv32-libgcc rows are",
        "the same firmware built with libgcc's instead (`make -C ports/qemu/rv32 SOFTFLOAT=libgcc`),",
        "whose float routines count as *rest*, so compare their *call* column.",
        "",
        *kernel_table(krows),
        "",
        "The element-wise forwards, per output element (the same bench script): average and max",
        "pooling 2x2 stride 2 on 16x16x32, and the residual add of two int8 tensors (TFLite's",
        "rescaling, left shift 20):",
        "",
        *elemwise_table(krows),
        "",
        "## Inference and training per sample",
        "",
        f"Models: the Fashion-MNIST transfer CNN ({meta.get('fmnist', '?')}; 28x28x1, conv3x3(16),",
        "pool, conv3x3(32), pool, depthwise3x3, pointwise(32), pool, fc 288->32, fc 32->10) on",
        "Cortex-M7 (armv7emdp natmod), and the getting-started digits CNN (8x8x1, conv3x3(8), pool,",
        "fc 128->32, fc 32->10) on Cortex-M0 (armv6m natmod: no FPU, its float32 weight gradients",
        "run natively in the project's software float, see below). The digits last:2 batch-1 row is",
        "also measured on the Cortex-M3 (armv7m natmod, software float, the M0's heap) and on *m0fw*,",
        "the M0 firmware with microtrain built in as the user C module (as an RP2040 firmware is",
        "built, ports/qemu BUILTIN=1: no extra define; its *kernels* are the compilation units of",
        "usermod/microtrain, whose software float also serves the firmware's Python floats; the",
        "package is frozen, so its peak heap holds no package bytecode), and the same digits runs on the",
        "RV32IMC firmware (rv32: microtrain built in, the package frozen; rv32-libgcc: libgcc's soft",
        "float, last:2 only). Each training run loads the natmod of its model's ops only, as",
        "`microtrain deploy --model` builds it (`make natmod ARCH=... OPS=...`: the M0 and M3 digits",
        "runs, conv2d + maxpool + linear); the kernel rows load the whole one. Trainer in mixed mode,",
        f"SGD(lr={LR:g}, momentum=0.9) (lr={SPARSE_LR:g} in the *after {PREPASS} more* and *first pass*",
        f"rows: at lr={LR:g} the dense all-layer training collapses within its first pass, constant logits",
        "and no error reaching the pools, so the backward would be measured on dead errors), one",
        f"unmeasured warm-up sample, then {STEPS_B1} measured samples at batch 1 and 16 at batch 16",
        "(evals/mp/bench_train.py; *measured* = cold); the figures are means per sample. The M7",
        "all-layer batch-1 runs are measured a second way too (*measured* = after 32 more): after the",
        f"warm-up, {PREPASS} unmeasured samples (one pass over the 32 samples of the data, in order),",
        f"then the same {STEPS_B1} samples as the cold rows; and a third way (*measured* = first pass):",
        f"after the warm-up, {FIRST_PASS} measured samples, one pass over the data from the cold start.",
        "DynamicSparse's rate is 1 whenever a",
        "sample's loss is a new maximum L_max, which is frequent in the first samples of any run;",
        "after one pass L_max is established, as in training after its first few samples. Rates of",
        "the measured sparse samples:",
        "",
        *[f"- {r.board} {r.model} {r.train} batch {r.batch} {_when(r)}: "
          + ", ".join(f"{v:.2f}" for v in r.rates) for r in trows
          if r.rates and r.batch == 1 and r.train == "all"],
        "",
        "Garbage collections run where the heap fills up, so one may fall inside a measured sample",
        "(it then counts in that sample, as it would on a board) or in none. So that this is visible,",
        "the runs report how many measured samples held a collection, the garbage a step leaves, the",
        "cost of one collection (*gc*, one `gc.collect()` at the end of the run) and the free heap",
        "after it: training pays one collection every *free heap / garbage* steps, *gc / step*",
        "amortised (all-layer batch-1 rows):",
        "",
        *[f"- {r.board} {r.model} {r.train} {'DynamicSparse' if r.sparse else 'dense'} {_when(r)}: "
          f"{r.gc_in} of {r.steps} measured samples held a collection; garbage {r.garbage:,} B a step, "
          f"free heap {r.heap_free / 1024:.0f} KB, gc {_m(r.gc_cost)}, gc / step {_m(r.gc_per_step)}"
          for r in trows if r.batch == 1 and r.train == "all"],
        "",
        "Figures:",
        "",
        "- *per inference*: `model.forward(x)` of the frozen model;",
        "- *per training sample*: `Trainer.step(x, label)` (forward, loss, backward, and every",
        "  `batch` samples the optimiser update, amortised over the batch);",
        "- *update*: the optimiser step (`opt.step`, Python and native), per sample;",
        "- *kernels*: native instructions outside the update; *interpreter*: all other",
        "  instructions outside the update (MicroPython and the rest of the firmware);",
        "- *py share*: instructions not in native code (interpreter, including the",
        "  update's Python) / all instructions of a sample;",
        "- *update / param*: instructions of one update per trained parameter;",
        "- *peak heap*: the largest live heap (`gc.collect(); gc.mem_alloc()`) at the end of",
        "  forward, backward and update of a probe sample, after model load and Trainer set-up,",
        f"  on the 32-bit firmware with a {meta.get('heap_kb', '?')} KB heap (M0: 224 KB). It includes the",
        "  microtrain package imported from its `.mpy` files as after `mpremote mip install`",
        f"  ({meta.get('package_kb', '?')} KB of bytecode on M7), which a firmware with the package",
        "  frozen into flash does not need.",
        "",
        *train_table(trows),
        "",
        "## MLPerf Tiny models: training per sample beside inference",
        "",
        "DS-CNN-S (keyword spotting), ResNet-8 (CIFAR-10) and MobileNetV1-0.25 (96x96 visual wake",
        "words) at their published sizes (evals/lib/mlperf_tiny.py; the `.mtm` and `.mtd` of `make",
        "mem-mcu`, evals/benchmarks/mem_mcu.py), on the M7 as above (mixed, SGD momentum 0.9, batch 1,",
        f"one warm-up sample, then {STEPS_B1} measured), with a {MLPERF_HEAP_KB} KB heap: MobileNetV1's",
        "float32 momentum of its last three layers does not fit 512 KB. *ms at 480 MHz* converts the",
        f"instruction counts to time on a {MHZ} MHz Cortex-M7 assuming one instruction per cycle (an",
        "assumption, not a measurement: the M7 dual-issues some pairs and waits on memory for others).",
        "*training / inference*: instructions of a training sample over those of an inference.",
        "",
        *mlperf_table(trows),
        "",
        "## Summary line",
        "",
        "```",
        line,
        "```",
        "",
        "conv3x3 .. gw_conv3x3, dw_gi (depthwise grad input), fc_gw_f32, fc_gi: native instructions per",
        "MAC on M7; avgpool, maxpool, add: native instructions per output element on M7;",
        "update_per_param: instructions",
        "per trained parameter per update (transfer CNN, last:2, batch 1); py_share_*: interpreter",
        "share of a batch-1 training sample (transfer CNN, dense); sparse01_bwd: mean backward",
        "instructions dense / DynamicSparse(0.1, 1.0), all layers trained, batch 1, the rows measured",
        f"after {PREPASS} more samples (steady state); sparse01_bwd_cold: the same ratio over the first",
        f"pass from the cold start (the {FIRST_PASS} samples after the warm-up, below);",
        "dscnn_last2_over_infer: DS-CNN-S's training",
        "sample (last:2) over its inference, in instructions (the table above); digits_last2:",
        "instructions per training sample of the digits CNN on M0 (last:2, batch 1); heap_last2:",
        "peak heap in KB, transfer CNN last:2 on M7; m3 / m0fw digits_last2: the same digits sample",
        "on the Cortex-M3 and on the M0 firmware with microtrain built in; rv32: native instructions",
        "per MAC of the conv3x3 and fc forward kernels and digits_last2 on the RV32IMC firmware.",
        "",
        *cold_note(trows),
    ]
    if meta.get("softfloat"):
        lines += ["## Software float on Cortex-M0", "",
                  "Instructions per call of each float32 operation on the M0 "
                  "(evals/benchmarks/bench_softfloat.py: a",
                  "bare-metal image on QEMU's micro:bit, counted by the same plugin, the loop's own cost",
                  "subtracted; normal operands in +-[2^-12, 2^4), int8-product integers): the armv6m",
                  "natmod's own routines (usermod/microtrain/softfloat.c, exactly rounded like an FPU,",
                  "docs/numerics.md) next to libgcc's, which the firmware's Python floats use. Below the",
                  "ABI routines: a zero operand (zero gradients and weights are common), and the two fused",
                  "routines of the update's int8 path (int8 level x scale; trunc(x + 128 + offset)), next",
                  "to the libgcc calls the same C makes.", "",
                  meta["softfloat"], ""]
    if meta.get("repeat"):
        lines += ["## Repeatability", "", meta["repeat"], ""]
    if meta.get("profile"):
        lines += ["## Where the instructions go (M7, transfer CNN, last:2, batch 1)", "",
                  "Top functions over the whole run of that configuration (model load, inference,",
                  f"warm-up, the {STEPS_B1} measured samples, the heap probe); `(native)` is the natmod:", "",
                  meta["profile"], ""]
    DOC.write_text("\n".join(lines))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", action="store_true", help="run the guest scripts in the host micropython "
                    "(no counts; checks the scripts)")
    ap.add_argument("--quick", action="store_true", help="kernels on M7 and two training runs only")
    ap.add_argument("--no-doc", action="store_true", help="do not write docs/performance.md")
    ap.add_argument("--heap-kb", type=int, default=1024, help="heap of --host runs (64-bit objects)")
    ap.add_argument("--boards", default="", help="only these boards, e.g. rv32 (default: all; no doc)")
    a = ap.parse_args(argv)
    t0 = time.time()
    if not a.host:
        subprocess.run(["make", "-s", "-C", str(PLUGIN_DIR), "all"], check=True)
    fm_path, origin = transfer_model()
    digits_model()
    bds = boards()
    fmaps: dict[str, FirmwareMap] = {}
    used = ["m7"] if a.quick else ["m7", "m4", "m0", "m3", "m0fw", "rv32"]
    if a.boards:
        used = a.boards.split(",")
    if not a.host:
        for b in used:
            if not bds[b].firmware.is_file():
                raise SystemExit(f"bench-mcu: no firmware {bds[b].firmware} (build ports/qemu first)")
            fmaps[b] = firmware_map(bds[b].firmware, BUILD / f"{b}.map")

    def brd(name: str) -> tuple[Board | None, FirmwareMap | None]:
        return (None, None) if a.host else (bds[name], fmaps[name])

    krows: list[KernelRow] = []
    meta: dict[str, str] = {"fmnist": origin, "heap_kb": str(bds["m7"].heap_kb)}
    kruns: dict[str, Run] = {}
    for b in [b for b in ("m7", "m4") if b in used]:
        rows, kruns[b] = bench_kernels(*brd(b))
        krows += rows
        print(f"kernels on {b}: done ({time.time() - t0:.0f} s)", flush=True)
    if not a.quick and not a.host and "m7" in used and "m0" in used:
        # M0 rows: the armv6m natmod on the M7 firmware, whose heap holds the four shapes' buffers
        # (the M0 board's 224 KB does not); the same Thumb-1 code executes the same instructions.
        m7 = bds["m7"]
        rows, _ = bench_kernels(Board(m7.name, m7.firmware, "armv6m", m7.heap_kb), fmaps["m7"])
        krows += [replace(r, board="m0") for r in rows]
        print(f"kernels on m0 (armv6m natmod): done ({time.time() - t0:.0f} s)", flush=True)
    if "rv32" in used and not a.host:
        rows, kruns["rv32"] = bench_kernels(*brd("rv32"))
        krows += rows
        print(f"kernels on rv32: done ({time.time() - t0:.0f} s)", flush=True)
    if not a.host and "m7" in kruns:
        empty = regions(kruns["m7"])["empty"][0]
        meta["marker_cost"] = f"{sum(empty):,}"
    trows: list[TrainRow] = []
    truns: dict[tuple[str, str, float, int], Run] = {}
    configs = [(tr, sp, bt, 0) for tr in ("last:1", "last:2", "all") for sp in (0.0, 0.1) for bt in (1, 16)]
    if a.quick:
        configs = [("last:2", 0.0, 1, 0), ("all", 0.0, 1, 0), ("all", 0.1, 1, 0)]
    # sparse01_bwd's steady state (M7): the same 8 samples after one more pass over the data;
    # sparse01_bwd_cold's first pass: FIRST_PASS samples measured from the cold start
    # (the measured samples and SGD's rate follow the prepass)
    steady = [("all", 0.0, 1, PREPASS, STEPS_B1, SPARSE_LR), ("all", 0.1, 1, PREPASS, STEPS_B1, SPARSE_LR),
              ("all", 0.0, 1, 0, FIRST_PASS, SPARSE_LR), ("all", 0.1, 1, 0, FIRST_PASS, SPARSE_LR)]
    # the M0's digits sample (last:2, batch 1) also on the M3 (armv7m natmod) and on m0fw, the M0
    # firmware with microtrain built in as the user C module
    one = [("last:2", 0.0, 1, 0)]
    runs_of = {"m7": configs + steady, "m0": configs, "m3": one, "m0fw": one, "rv32": configs}
    models = {"m7": "fmnist", "m0": "digits", "m3": "digits", "m0fw": "digits", "rv32": "digits"}
    for bname, model in models.items():
        if bname not in used or (a.host and bname == "rv32"):  # rv32: the same host runs as m0
            continue
        for tr, sp, bt, pre, *more in runs_of[bname]:
            n = more[0] if more else STEPS_B1 if bt == 1 else bt
            lr = more[1] if more else LR
            heap = a.heap_kb if a.host else bds[bname].heap_kb
            try:
                r, run = bench_train(*brd(bname), model, tr, sp, bt, n, heap, prepass=pre, lr=lr)
            except RuntimeError as ex:  # a small board's heap may not hold the case: n/a, said why
                if bname == "m7" or "MemoryError" not in str(ex):
                    raise
                why = [ln for ln in str(ex).splitlines() if "MemoryError" in ln][-1]
                print(f"{bname} {model} {tr} sparse={sp:g} batch={bt}: n/a, {why}", flush=True)
                continue
            if not more:
                truns[(bname, tr, sp, bt)] = run
            print(f"{bname} {model} {tr} sparse={sp:g} batch={bt} prepass={pre}"
                  + (f" steps={n}" if more and not pre else "") + (f" lr={lr:g}" if more else "") + ": "
                  + (f"{r.total:,.0f} instr/sample" if r else "ok")
                  + (f", backward {r.bwd:,.0f}, rates {' '.join(f'{v:.2f}' for v in r.rates)}"
                     if r and r.rates else "") + f" ({time.time() - t0:.0f} s)",
                  flush=True)
            if r:
                trows.append(r)
    if not a.quick and "m7" in used:
        mlperf_models()
        for model, tr, sp in MLPERF:
            r, _ = bench_train(*brd("m7"), model, tr, sp, 1, STEPS_B1,
                               a.heap_kb if a.host else MLPERF_HEAP_KB)
            print(f"m7 {model} {tr} sparse={sp:g}: "
                  + (f"{r.total:,.0f} instr/sample, inference {r.infer:,.0f}" if r else "ok")
                  + f" ({time.time() - t0:.0f} s)", flush=True)
            if r:
                trows.append(r)
    if not a.host and "rv32" in used:
        # the rv32 firmware again with libgcc's soft float in place of the project's (SOFTFLOAT=libgcc)
        lg = replace(bds["rv32"], firmware=rv32_libgcc_firmware())
        lg_map = firmware_map(lg.firmware, BUILD / "rv32-libgcc.map")
        rows, _ = bench_kernels(lg, lg_map)
        krows += [replace(r, board=RV32_LIBGCC) for r in rows if r.kernel == "gw_f32"]
        r, _ = bench_train(lg, lg_map, "digits", "last:2", 0.0, 1, STEPS_B1, lg.heap_kb)
        if r:
            trows.append(replace(r, board=RV32_LIBGCC))
            print(f"{RV32_LIBGCC} digits last:2: {r.total:,.0f} instr/sample ({time.time() - t0:.0f} s)",
                  flush=True)
    if not a.host and not a.boards:
        # repeatability: the same runs again must give the same count at every marker
        pairs = [(kruns["m7"], bench_kernels(*brd("m7"))[1])]
        again = [("m7", "fmnist")] + ([("m0", "digits")] if "m0" in used else [])
        for bname, model in again:
            pairs.append((truns[(bname, "last:2", 0.0, 1)],
                          bench_train(*brd(bname), model, "last:2", 0.0, 1, STEPS_B1, bds[bname].heap_kb)[1]))
        same = all(x.counts == y.counts and x.total == y.total for x, y in pairs)
        meta["repeat"] = (
            "`make bench-mcu` runs the M7 kernel bench and the batch-1 last:2 training benches (M7, M0) "
            f"twice: {'identical' if same else 'DIFFERENT'} counts at all "
            f"{sum(len(y.counts) for _, y in pairs)} markers and in all "
            f"{sum(sum(y.total) for _, y in pairs):,} instructions of the second runs.")
        print(meta["repeat"])
        if not same:
            raise SystemExit("bench-mcu: two runs gave different counts")
        t1 = truns[("m7", "last:2", 0.0, 1)]
        prof = sorted(t1.profile.items(), key=lambda kv: -kv[1])[:15]
        tot = sum(t1.total)
        meta["profile"] = "\n".join(["| function | instructions | share |", "|---|---:|---:|"]
                                     + [f"| `{n}` | {v:,} | {100 * v / tot:.1f} % |" for n, v in prof])
    if a.host:
        print("bench-mcu: host run of the guest scripts ok")
        return 0
    if not a.boards:
        from evals.benchmarks import bench_softfloat

        meta["softfloat"] = "\n".join(bench_softfloat.table(*bench_softfloat.measure()))
    print()
    print("\n".join(kernel_table(krows)))
    print()
    print("\n".join(elemwise_table(krows)))
    print()
    print("\n".join(train_table(trows)))
    line = summary_line(krows, trows)
    if trows:
        meta["package_kb"] = f"{trows[0].heap_package / 1024:.1f}"
    if not a.no_doc and not a.boards:
        write_doc(krows, trows, line, meta)
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
