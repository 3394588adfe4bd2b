"""`make bench`: microtrain on the host next to PyTorch eager, batch 1, one thread.

The transfer CNN (evals/lib/transfer_model.py: the shipped float model evals/models/fmnist_transfer.pt
and its int8 conversion) on Fashion-MNIST test images:

- *infer*: microtrain ``model.forward(x)`` in the unix ``micropython`` with the x64 natmod vs
  PyTorch eager fp32 ``net(x)`` of the float model under ``torch.inference_mode()``;
- *step last:2* / *step all*: microtrain ``Trainer.step(x, label)`` (mixed mode, SGD lr 0.01
  momentum 0.9, batch 1: forward, loss, backward, update) vs a PyTorch eager step of the same
  layers (forward, cross-entropy, backward, ``torch.optim.SGD(lr=0.01, momentum=0.9).step()``,
  ``zero_grad``), batch 1, the float model in eval mode (batch-norm statistics and dropout
  frozen, as in the converted model); "last:2" trains fc1 and fc2 only (the other parameters
  do not require gradients), "all" every parameter.

Both sides run in rounds, interleaved (round r: micropython, then PyTorch), and each figure is
the minimum over the rounds of one loop's time divided by its samples (and the median over
the rounds: the table's last columns, the ``bench-median:`` line). A loop is timed around
the whole loop (nothing subtracted; microtrain: time.ticks_us and the process's CPU time from
/proc/self/stat inside micropython; PyTorch: time.perf_counter and time.process_time); its
length is set from a calibration round so it lasts ``--seconds``. The ratios use process CPU
time (robust on a shared machine); wall times are shown too.

With ``--fit`` it also measures the feature cache (python_lib/microtrain/cache.py): Trainer.fit
last:2 over ``--fit`` samples for 3 epochs with ``cache=None`` and ``cache="ram"``.

Writes docs/performance-host.md (unless --no-doc or --quick) and ends with
``bench: infer_vs_torch=R1 step_last2_vs_torch=R2 step_all_vs_torch=R3 drift=D`` (microtrain /
PyTorch; D: a fresh last:2 Trainer's CPU time over its steps 9,000-10,000 divided by its steps
0-1,000, one run after the rounds: the step time must not grow as the momentum decays).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "bench-host"
SCRIPT = ROOT / "evals" / "mp" / "bench_host.py"
MICROPYTHON = ROOT / ".venv" / "bin" / "micropython"
NATMOD = ROOT / "build" / "natmod" / "x64"
DOC = ROOT / "docs" / "performance-host.md"
N_DATA = 64  # distinct test images the loops cycle through
BENCHES = ("infer", "step_last2", "step_all")
FIT_EPOCHS = 3
N_DRIFT = 10000  # steps of the drift run (its first and last 1,000 timed)
# sections of --profile-only / --mcu-only / --builds-only runs, for --saved
SAVED = {"profile": BUILD / "profile.md", "mcu": BUILD / "mcu.md", "builds": BUILD / "builds.md"}


@dataclass
class Times:
    """Per bench: the loops' per-sample times (seconds), one per round."""

    cpu: dict[str, list[float]] = field(default_factory=dict)
    wall: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, n: int, wall: float, cpu: float) -> None:
        self.wall.setdefault(name, []).append(wall / n)
        self.cpu.setdefault(name, []).append(cpu / n if cpu >= 0 else wall / n)

    def best(self, name: str, clock: str = "cpu") -> float:
        return min((self.cpu if clock == "cpu" else self.wall)[name])

    def median(self, name: str, clock: str = "cpu") -> float:
        return statistics.median((self.cpu if clock == "cpu" else self.wall)[name])


# ---------------------------------------------------------------------------------------------
# model and data


def prepare() -> tuple[Path, Path, nn.Module, np.ndarray, np.ndarray]:
    """The int8 model and N_DATA quantised test images (files for micropython), the float model
    and the same images as float32 (N, 1, 28, 28) with their labels."""
    from evals.lib import datasets as ds
    from evals.lib import transfer_model as tm
    from microtrain_tools import convert as cv
    from microtrain_tools.mtd import write_mtd

    BUILD.mkdir(parents=True, exist_ok=True)
    ref = tm.get_model(progress=False)
    mtm_path, mtd_path = BUILD / "fmnist.mtm", BUILD / "fmnist.mtd"
    shutil.copy2(ref.mtm, mtm_path)
    xt, yt = ds.fashion_mnist("test")
    x, y = xt[:N_DATA], yt[:N_DATA]
    write_mtd(mtd_path, cv.quantize_input(mtm_path.read_bytes(), x), y)
    return mtm_path, mtd_path, ref.model, np.ascontiguousarray(x, dtype=np.float32), y


# ---------------------------------------------------------------------------------------------
# microtrain side


def run_micropython(mtm: Path, mtd: Path, counts: dict[str, int], n_fit: int = 0,
                    natmod: Path = NATMOD, n_drift: int = 0) -> dict[str, tuple[int, int, int]]:
    """One run of evals/mp/bench_host.py -> name -> (samples, wall us, cpu us)."""
    env = dict(os.environ, MICROPYPATH=f"{natmod}:{ROOT / 'python_lib'}")
    args = [str(os.sysconf("SC_CLK_TCK")), str(counts["infer"]), str(counts["step_last2"]),
            str(counts["step_all"]), str(n_fit), str(FIT_EPOCHS), str(n_drift)]
    p = subprocess.run([str(MICROPYTHON), str(SCRIPT), str(mtm), str(mtd), *args], capture_output=True,
                       text=True, env=env, cwd=BUILD, timeout=3600)
    if p.returncode != 0 or "@host done" not in p.stdout:
        raise RuntimeError(f"bench_host.py failed (rc {p.returncode}):\n{p.stdout[-2000:]}\n"
                           f"{p.stderr[-2000:]}")
    out = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if f[0] == "@host" and len(f) == 5:
            out[f[1]] = (int(f[2]), int(f[3]), int(f[4]))
    return out


# ---------------------------------------------------------------------------------------------
# PyTorch side


def torch_loops(net: nn.Module, x: np.ndarray, y: np.ndarray) -> dict[str, Callable[[int], None]]:
    """name -> loop(n): n samples of that bench, batch 1, cycling through x."""
    xs = [torch.from_numpy(x[i:i + 1]).clone() for i in range(len(x))]
    ys = [torch.tensor([int(v)]) for v in y]
    k = len(xs)

    def infer(n: int) -> None:
        net.eval()
        with torch.inference_mode():
            for i in range(n):
                net(xs[i % k])

    def stepper(train: str) -> Callable[[int], None]:
        names = ("fc1.", "fc2.") if train == "last:2" else ("",)
        params = []
        for name, p in net.named_parameters():
            p.requires_grad_(name.startswith(names))
            if p.requires_grad:
                params.append(p)
        opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
        loss_fn = nn.CrossEntropyLoss()

        def loop(n: int) -> None:
            for name, p in net.named_parameters():  # this configuration's trained set
                p.requires_grad_(name.startswith(names))
            net.eval()
            for i in range(n):
                opt.zero_grad(set_to_none=True)
                loss_fn(net(xs[i % k]), ys[i % k]).backward()
                opt.step()

        return loop

    return {"infer": infer, "step_last2": stepper("last:2"), "step_all": stepper("all")}


def time_torch(loop: Callable[[int], None], n: int) -> tuple[float, float]:
    """(wall s, cpu s) of loop(n)."""
    c0, t0 = time.process_time(), time.perf_counter()
    loop(n)
    return time.perf_counter() - t0, time.process_time() - c0


# ---------------------------------------------------------------------------------------------
# profile: x86 instructions (valgrind --tool=callgrind) of the microtrain side

PROFILE_SCRIPT = ROOT / "evals" / "mp" / "bench_host_profile.py"
PHASES = ("fwd", "fwdbwd", "step")
_CG_LINE = re.compile(r"^\s*([\d,]+) \([^)]*\)\s+(\S.*)$")


@dataclass
class Callgrind:
    total: int
    incl: dict[str, int]  # function -> inclusive instructions
    self_: dict[str, int]  # function -> self instructions
    kernels: dict[str, str]  # callgrind name of a natmod entry point -> kernel name


def _annotate(out: Path, inclusive: bool) -> dict[str, int]:
    inc = "yes" if inclusive else "no"
    p = subprocess.run(["callgrind_annotate", f"--inclusive={inc}", "--threshold=100", str(out)],
                       capture_output=True, text=True, check=True)
    res: dict[str, int] = {}
    for line in p.stdout.splitlines():
        m = _CG_LINE.match(line)
        if m and "PROGRAM TOTALS" not in line:
            name = m.group(2)
            name = re.sub(r" \[[^\]]*\]$", "", name)  # the object file
            name = re.sub(r"^\S*/(py|extmod|ports|shared)/", r"\1/", name)  # source paths, shortened
            res[name] = res.get(name, 0) + int(m.group(1).replace(",", ""))
    return res


def callgrind(mtm: Path, mtd: Path, train: str, phase: str, steps: int) -> Callgrind:
    out = BUILD / f"cg.{train.replace(':', '')}.{phase}.{steps}"
    env = dict(os.environ, MICROPYPATH=f"{NATMOD}:{ROOT / 'python_lib'}")
    p = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(MICROPYTHON),
                        str(PROFILE_SCRIPT), str(mtm), str(mtd), train, phase, str(steps)],
                       capture_output=True, text=True, env=env, cwd=BUILD, timeout=7200)
    if p.returncode != 0 or "@done" not in p.stdout:
        raise RuntimeError(f"callgrind run failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    kernels = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if f[0] == "@fn":
            kernels[f"???:0x{int(f[2], 16):016x}"] = f[1]
    m = re.search(r"Collected : (\d+)", p.stderr)
    assert m, p.stderr[-1000:]
    return Callgrind(int(m.group(1)), _annotate(out, True), _annotate(out, False), kernels)


@dataclass
class Prof:
    """Instructions per sample of one phase: total, per kernel (inclusive, argument checks and
    buffer protocol included), and the self instructions of every other function."""

    total: float
    kernels: dict[str, float]
    other: dict[str, float]

    @property
    def native(self) -> float:
        return sum(self.kernels.values())


def _diff(a: Callgrind, b: Callgrind, n: int) -> Prof:
    ka = {v: a.incl.get(k, 0) for k, v in a.kernels.items()}
    kb = {v: b.incl.get(k, 0) for k, v in b.kernels.items()}
    kern = {k: (kb[k] - ka.get(k, 0)) / n for k in kb if kb[k] - ka.get(k, 0) > 0}
    nat = set(a.kernels) | set(b.kernels)
    other = {}
    for f in set(a.self_) | set(b.self_):
        if f not in nat and not f.startswith("???:0x"):
            d = (b.self_.get(f, 0) - a.self_.get(f, 0)) / n
            if d > 0:
                other[f] = d
    return Prof((b.total - a.total) / n, kern, other)


def profile(mtm: Path, mtd: Path, steps: int) -> dict[tuple[str, str], Prof]:
    out = {}
    for train in ("last:2", "all"):
        base = callgrind(mtm, mtd, train, "step", 0)
        for ph in PHASES:
            out[(train, ph)] = _diff(base, callgrind(mtm, mtd, train, ph, steps), steps)
            print(f"profile {train} {ph}: {out[(train, ph)].total / 1e6:.2f} M instructions per sample",
                  flush=True)
    return out


def _mi(v: float) -> str:
    return f"{v / 1e6:.2f} M"


def profile_section(prof: dict[tuple[str, str], Prof], steps: int) -> list[str]:
    lines = [
        "## Where microtrain's host time goes (x86 instructions, callgrind)",
        "",
        "`valgrind --tool=callgrind` counts the x86-64 instructions of the same micropython run",
        "(`.venv/bin/python -m evals.benchmarks.bench_host --profile`; evals/mp/bench_host_profile.py), per",
        f"sample: the difference of a run with {steps} samples and one with none (start-up, loading and",
        "3 warm-up steps cancel). *native* is the `_microtrain` natmod: the inclusive count of each",
        "kernel's entry point (argument checks and buffer access included); everything else is",
        "MicroPython (bytecode VM, objects, floats, GC) and libc. Phases: *forward* =",
        "`model.forward(x, first)`; *loss + backward* = `Trainer.step` with the update never due,",
        "minus the forward; *update* = `Trainer.step` at batch 1 minus that.",
        "",
        "| train | phase | instructions | native | native % | largest native parts |",
        "|---|---|---:|---:|---:|---|",
    ]
    for train in ("last:2", "all"):
        f, fb, st = (prof[(train, ph)] for ph in PHASES)
        parts = (("forward", f.total, f.native, f.kernels, {}),
                 ("loss + backward", fb.total - f.total, fb.native - f.native, fb.kernels, f.kernels),
                 ("update", st.total - fb.total, st.native - fb.native, st.kernels, fb.kernels),
                 ("whole step", st.total, st.native, st.kernels, {}))
        for name, tot, nat, k1, k0 in parts:
            d = {k: v - k0.get(k, 0.0) for k, v in k1.items()}
            top = sorted(((v, k) for k, v in d.items() if v > 0.005 * max(tot, 1)), reverse=True)[:4]
            ks = ", ".join(f"`{k}` {_mi(v)}" for v, k in top) or "-"
            lines.append(f"| {train} | {name} | {_mi(tot)} | {_mi(nat)} | {100 * nat / tot:.1f} % | {ks} |")
    lines += ["", "Largest MicroPython / libc functions (self instructions per sample) of the update and",
              "of loss + backward, last:2:", "", "| function | update | loss + backward |", "|---|---:|---:|"]
    f, fb, st = (prof[("last:2", ph)] for ph in PHASES)
    upd = {k: v - fb.other.get(k, 0.0) for k, v in st.other.items()}
    bwd = {k: v - f.other.get(k, 0.0) for k, v in fb.other.items()}
    for k in sorted(upd, key=lambda k: -upd[k])[:12]:
        lines.append(f"| `{k}` | {_mi(upd[k])} | {_mi(max(0.0, bwd.get(k, 0.0)))} |")
    return lines + [""]


# ---------------------------------------------------------------------------------------------
# the feature cache on Cortex-M7 (QEMU, exact instruction counts)

MCU_RUNS = ((1, 16, 2), (16, 32, 3))  # (batch, samples, epochs): batch 1 is 6 times as long per sample


def mcu_cache(mtm: Path, mtd: Path) -> list[str]:
    """evals/mp/bench_cache.py on the M7 firmware (bench_mcu's runner and counter): instructions
    per sample and epoch of Trainer.fit, last:2, with and without the RAM cache."""
    from evals.benchmarks import bench_mcu as bm

    subprocess.run(["make", "-s", "-C", str(bm.PLUGIN_DIR), "all"], check=True)
    subprocess.run(["make", "-s", "-C", str(ROOT), "natmod", "ARCH=armv7emdp"], check=True)
    board = bm.boards()["m7"]
    if not board.firmware.is_file():
        raise SystemExit(f"bench: no firmware {board.firmware} (make firmware-mcu)")
    fmap = bm.firmware_map(board.firmware, bm.BUILD / "m7.map")
    shutil.copy2(mtm, bm.BUILD / "cache_fmnist.mtm")
    shutil.copy2(mtd, bm.BUILD / "cache_fmnist.mtd")
    rows = []
    for batch, n_samples, epochs in MCU_RUNS:
        args = ["cache_fmnist.mtm", "cache_fmnist.mtd", "last:2", str(batch), str(epochs), str(n_samples)]
        run = bm.run_guest(board, fmap, "bench_cache.py", args, heap_kb=board.heap_kb)
        reg = bm.regions(run)
        n = n_samples * epochs
        a, b = sum(reg["fit_nocache"][0]) / n, sum(reg["fit_ram"][0]) / n
        if run.results["same"] != "1":
            raise RuntimeError("bench: the M7 fit with the cache trained other weights than without")
        rows.append(f"| {batch} | {n_samples} | {epochs} | {_mi(a)} | {_mi(b)} | {_mi(a - b)} "
                    f"({100 * (a - b) / a:.1f} %) |")
        print(f"m7 fit last:2 batch {batch}: {a / 1e6:.2f} M -> {b / 1e6:.2f} M instructions per sample "
              "and epoch", flush=True)
    return [
        "### On Cortex-M7 (QEMU, instructions)",
        "",
        "The same comparison under the project's M7 firmware "
        "(`.venv/bin/python -m evals.benchmarks.bench_host --mcu`,",
        "evals/mp/bench_cache.py; counted as by `make bench-mcu`): `Trainer.fit` over Fashion-MNIST",
        "samples, last:2, mixed, SGD momentum, instructions per sample and epoch, the fill included;",
        "both runs end with identical weights (checked on the device).",
        "",
        "| batch | samples | epochs | no cache | RAM cache | saved |",
        "|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
    ]


# ---------------------------------------------------------------------------------------------
# x64 natmod build flags: what inference would take with other optimisation levels

BUILDS = {"O2": "-O2", "O3": "-O3", "O3-v3": "-O3 -march=x86-64-v3"}
_WRAP_MK = """# usermod/microtrain/Makefile with other optimisation flags \
(evals/benchmarks/bench_host.py --builds):
# appended after dynruntime.mk's -Os, so they win
include {makefile}
CFLAGS += {flags}
"""
_SAME = """
import sys
import microtrain as mt
m = mt.load(sys.argv[1])
ds = mt.FileDataset(sys.argv[2])
h = 0
for i in range(len(ds)):
    x, y = ds[i]
    for v in m.forward(x):
        h = (h * 31 + v) & 0xFFFFFFFF
tr = mt.Trainer(m, train="all", mode="mixed", optimizer=mt.SGD(lr=0.01, momentum=0.9))
for i in range(4):
    x, y = ds[i]
    tr.step(x, y)
for ly in tr.layers:
    for a in (ly.w, ly.b, ly.gw, ly.gb):
        for v in bytes(a):
            h = (h * 31 + v) & 0xFFFFFFFF
print("@hash", h)
"""


def build_variant(name: str, flags: str) -> Path:
    """build/natmod-<name>/x64/_microtrain.mpy: the x64 natmod with `flags` after -Os."""
    out = ROOT / "build" / f"natmod-{name}" / "x64"
    obj = out / "obj"
    obj.mkdir(parents=True, exist_ok=True)
    wrap = out / "wrap.mk"
    wrap.write_text(_WRAP_MK.format(makefile=ROOT / "usermod" / "microtrain" / "Makefile", flags=flags))
    mpy_dir = ROOT / "build" / "mpy_cross_v6_3-1.1.1" / "micropython"
    py = ROOT / ".venv" / "bin" / "python"
    src = ROOT / "usermod" / "microtrain"
    tools = mpy_dir / "tools"
    subprocess.run(["make", "--no-print-directory", "-s", "-C", str(src), "-f", str(wrap),
                    f"MPY_DIR={mpy_dir}", "ARCH=x64", f"BUILD={obj}", f"PYTHON={py}",
                    f"MPY_LD={py} {tools / 'mpy_ld.py'}", f"MPY_TOOL={py} {tools / 'mpy-tool.py'}", "Q=@",
                    "ECHO=@true"], check=True, capture_output=True)
    (src / "_microtrain.mpy").replace(out / "_microtrain.mpy")
    return out


def _hash(natmod: Path, mtm: Path, mtd: Path) -> str:
    script = BUILD / "same.py"
    script.write_text(_SAME)
    env = dict(os.environ, MICROPYPATH=f"{natmod}:{ROOT / 'python_lib'}")
    p = subprocess.run([str(MICROPYTHON), str(script), str(mtm), str(mtd)], capture_output=True, text=True,
                       env=env, cwd=BUILD, check=True)
    return p.stdout.split("@hash")[-1].strip()


def builds_section(mtm: Path, mtd: Path, rounds: int, seconds: float) -> list[str]:
    """Inference time of the x64 natmod built with each of BUILDS (micropython side only, CPU
    time, min over rounds, interleaved with the shipped -Os build), and whether its outputs,
    trained weights and gradients equal the shipped build's bit for bit."""
    dirs = {"Os (shipped)": NATMOD} | {k: build_variant(k, v) for k, v in BUILDS.items()}
    ref = _hash(NATMOD, mtm, mtd)
    same = {k: _hash(d, mtm, mtd) == ref for k, d in dirs.items()}
    times: dict[str, list[float]] = {}
    for _ in range(rounds):
        for k, d in dirs.items():
            cal = run_micropython(mtm, mtd, {"infer": 20, "step_last2": 0, "step_all": 0}, natmod=d)
            n = max(20, math.ceil(seconds * 1e6 * 20 / max(1, cal["infer"][1])))
            n_, wall, cpu = run_micropython(mtm, mtd, {"infer": n, "step_last2": 0, "step_all": 0},
                                            natmod=d)["infer"]
            times.setdefault(k, []).append((cpu if cpu > 0 else wall) * 1e-6 / n_)
    base = min(times["Os (shipped)"])
    rows = [f"| {k} | `{BUILDS.get(k, '-Os')}` | {(d / '_microtrain.mpy').stat().st_size:,} | "
            f"{_ms(min(times[k]))} | {base / min(times[k]):.2f} | {'yes' if same[k] else 'NO'} |"
            for k, d in dirs.items()]
    return [
        "## The x64 natmod's build flags",
        "",
        "MicroPython 1.23's `py/dynruntime.mk` builds natmods at `-Os`. The same sources built with",
        "other flags appended "
        "(`.venv/bin/python -m evals.benchmarks.bench_host --builds-only`; build/natmod-*/),",
        "inference per sample (CPU time, min over rounds), and whether the outputs of the 64 images,",
        "and weights and gradients after 4 all-layer training steps, equal the shipped build's:",
        "",
        "| build | flags | .mpy bytes | inference ms | speed-up | bit-exact |",
        "|---|---|---:|---:|---:|---|",
        *rows,
        "",
    ]


# ---------------------------------------------------------------------------------------------
# report


def _ms(v: float) -> str:
    return f"{1e3 * v:.3f}"


def table(mt: Times, pt: Times) -> list[str]:
    what = {"infer": "inference (batch 1)", "step_last2": "training step, last:2 (fc1, fc2)",
            "step_all": "training step, all layers"}
    out = ["| | microtrain CPU ms | PyTorch CPU ms | ratio (CPU) | microtrain wall ms | PyTorch wall ms |"
           " ratio (wall) | microtrain CPU ms, median | PyTorch CPU ms, median | ratio (CPU, median) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for b in BENCHES:
        out.append(f"| {what[b]} | {_ms(mt.best(b))} | {_ms(pt.best(b))} | {mt.best(b) / pt.best(b):.2f} "
                   f"| {_ms(mt.best(b, 'wall'))} | {_ms(pt.best(b, 'wall'))} "
                   f"| {mt.best(b, 'wall') / pt.best(b, 'wall'):.2f} "
                   f"| {_ms(mt.median(b))} | {_ms(pt.median(b))} | {mt.median(b) / pt.median(b):.2f} |")
    return out


def median_line(mt: Times, pt: Times) -> str:
    """The summary line's ratios from the medians over the rounds (CPU time)."""
    r = [mt.median(b) / pt.median(b) for b in BENCHES]
    return (f"bench-median: infer_vs_torch={r[0]:.2f} step_last2_vs_torch={r[1]:.2f} "
            f"step_all_vs_torch={r[2]:.2f}")


def summary_line(mt: Times, pt: Times) -> str:
    r = [mt.best(b) / pt.best(b) for b in BENCHES]
    line = f"bench: infer_vs_torch={r[0]:.2f} step_last2_vs_torch={r[1]:.2f} step_all_vs_torch={r[2]:.2f}"
    if "drift_last" in mt.cpu:
        line += f" drift={mt.best('drift_last') / mt.best('drift_first'):.2f}"
    return line


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mp = subprocess.run([str(MICROPYTHON), "-c", "import sys; print(sys.version.split('; ')[-1])"],
                        capture_output=True, text=True).stdout.strip()
    load = os.getloadavg()[0]
    return (f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()} (load average "
            f"{load:.1f} at the end of the run); Python {platform.python_version()}, "
            f"torch {torch.__version__} ({torch.get_num_threads()} thread); {mp} (unix port)")


def write_doc(mt: Times, pt: Times, line: str, meta: dict[str, str], fit: list[str]) -> None:
    lines = [
        "# Performance on the host (microtrain vs PyTorch)",
        "",
        "Generated by `make bench` (evals/benchmarks/bench_host.py); do not edit by hand. "
        "Times depend on the",
        "machine and its load, unlike the instruction counts of [performance.md](performance.md).",
        "",
        f"Machine: {meta['machine']}.",
        "",
        "<!-- not run: long -->",
        "```sh",
        "make bench                               # this page",
        ".venv/bin/python -m evals.benchmarks.bench_host --quick   # one short round, no page",
        "```",
        "",
        "Model: the Fashion-MNIST transfer CNN (evals/lib/transfer_model.py; 28x28x1, conv3x3(16), pool,",
        "conv3x3(32), pool, depthwise3x3, pointwise(32), pool, fc 288->32, fc 32->10): microtrain runs",
        "its int8 conversion in the unix `micropython` with the x64 natmod; PyTorch (eager, fp32, one",
        "thread) the float model. Batch 1, cycling through "
        f"{N_DATA} Fashion-MNIST test images.",
        "",
        "- *inference*: `model.forward(x)` vs `net(x)` under `torch.inference_mode()`;",
        "- *training step*: `Trainer.step(x, label)` (mode mixed, `SGD(lr=0.01, momentum=0.9)`,",
        "  batch 1: forward, loss, backward, update) vs forward, cross-entropy, backward,",
        "  `torch.optim.SGD(lr=0.01, momentum=0.9).step()` and `zero_grad` of the same layers",
        "  (the float model in eval mode: batch-norm statistics and dropout frozen, as in the",
        "  converted model; last:2 = fc1 and fc2, the others without gradients; all = every",
        "  parameter, batch-norm scales included).",
        "",
        f"Method: {meta['rounds']} rounds, interleaved (each round runs micropython once for the three",
        "benchmarks, then PyTorch); each loop lasts about "
        f"{meta['seconds']} s (its sample count set by a",
        "calibration round) and is timed around the whole loop, nothing subtracted: in micropython",
        "with `time.ticks_us` and the process's CPU time (`/proc/self/stat`, read inside the",
        "process, so start-up and model loading are not included; garbage collection is), in",
        "PyTorch with `time.perf_counter` and `time.process_time`. Figures are the minimum over",
        "the rounds of time per sample, and in the last three columns the median over them;",
        "ratios are microtrain / PyTorch, from CPU time.",
        "",
        *table(mt, pt),
        "",
        "```",
        line,
        "```",
        "",
    ]
    if fit:
        lines += fit
    if meta.get("profile"):
        lines += [meta["profile"], ""]
    DOC.write_text("\n".join(lines))


def fit_section(mt: Times, n_fit: int) -> list[str]:
    a, b = mt.best("fit_last2_nocache"), mt.best("fit_last2_cache")
    f, s = mt.best("fwd_last2_full"), mt.best("fwd_last2_from_first")
    return [
        "## Feature cache (Trainer.fit, last:2)",
        "",
        f"`Trainer.fit` over {n_fit} samples, {FIT_EPOCHS} epochs, last:2, mode mixed, SGD momentum,",
        "batch 1,"
        " with `cache=None` and with `cache=\"ram\"` (the frozen layers' outputs computed once per",
        "sample, then read back; docs/training.md \"Feature cache\"), CPU time per sample and epoch,",
        "the cache's fill included:",
        "",
        "| | ms per sample and epoch |",
        "|---|---:|",
        f"| no cache | {_ms(a)} |",
        f"| RAM cache | {_ms(b)} |",
        # (a quick run's fit can take less CPU time than the clock resolves: no share then)
        f"| saved | {_ms(a - b)} ({100 * (a - b) / a:.1f} %) |" if a > 0 else f"| saved | {_ms(a - b)} |",
        "",
        "One fit per round, the minimum over the rounds (CPU time: noisy on a loaded machine; the",
        "exact instruction counts of a training sample on Cortex-M7 are in performance.md).",
        "",
        "The training forward alone (`model.forward(x, first)`, last:2) takes "
        f"{_ms(f)} ms per sample;",
        "from the first trained layer on (`forward(None, first, start=first)`, what remains with the",
        f"cache) {_ms(s)} ms ({100 * s / f:.1f} %). The rest of a step (loss, backward, the update)",
        "is unchanged by the cache, so the saving grows as that part gets faster.",
        "",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="one short round, fit over 8 samples, no page (a check of the bench)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0, help="length of each timed loop")
    ap.add_argument("--fit", type=int, default=64, help="samples of the feature-cache fit (0: skip)")
    ap.add_argument("--no-doc", action="store_true", help="do not write docs/performance-host.md")
    ap.add_argument("--profile", action="store_true", help="also count instructions with callgrind "
                    "(minutes) and add where they go to the page")
    ap.add_argument("--profile-only", action="store_true",
                    help="only the callgrind profile (printed, saved for --saved)")
    ap.add_argument("--mcu", action="store_true", help="also count the feature cache's saving on the "
                    "QEMU Cortex-M7 firmware and add it to the page")
    ap.add_argument("--mcu-only", action="store_true", help="only that count (printed, saved for --saved)")
    ap.add_argument("--builds-only", action="store_true", help="only inference with the x64 natmod built "
                    "at -O2 / -O3 (printed, saved for --saved)")
    ap.add_argument("--saved", action="store_true", help="add the sections of earlier --profile-only / "
                    "--mcu-only runs to the page")
    ap.add_argument("--profile-steps", type=int, default=4, help="samples per profiled run")
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.seconds, a.fit, a.no_doc = 1, 0.1, min(a.fit, 8), True
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if not (NATMOD / "_microtrain.mpy").is_file():
        raise SystemExit(f"bench: no {NATMOD / '_microtrain.mpy'} (make natmod)")
    mtm, mtd, net, x, y = prepare()
    if a.mcu_only or a.profile_only or a.builds_only:  # sections for a later page (--saved): minutes each
        if a.builds_only:
            key, sec = "builds", builds_section(mtm, mtd, a.rounds, a.seconds)
        elif a.mcu_only:
            key, sec = "mcu", mcu_cache(mtm, mtd)
        else:
            key, sec = "profile", profile_section(profile(mtm, mtd, a.profile_steps), a.profile_steps)
        head = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                              capture_output=True, text=True).stdout.strip()
        sec += [f"(Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at commit {head}.)", ""]
        SAVED[key].write_text("\n".join(sec))
        print("\n".join(sec))
        return 0
    loops = torch_loops(net, x, y)
    # calibration: per-sample times from short loops -> loop lengths of about a.seconds
    cal = run_micropython(mtm, mtd, {"infer": 20, "step_last2": 3, "step_all": 3})
    n_mt = {b: max(3, math.ceil(a.seconds * 1e6 * cal[b][0] / max(1, cal[b][1]))) for b in BENCHES}
    n_pt = {}
    for b in BENCHES:
        loops[b](3)  # warm-up
        _, c = time_torch(loops[b], 20)
        n_pt[b] = max(3, math.ceil(a.seconds * 20 / max(c, 1e-6)))
    mt, pt = Times(), Times()
    for r in range(a.rounds):
        res = run_micropython(mtm, mtd, n_mt, a.fit)
        for name, (n, wall, cpu) in res.items():
            mt.add(name, n, wall * 1e-6, cpu * 1e-6 if cpu >= 0 else -1)
        for b in BENCHES:
            wall_s, cpu_s = time_torch(loops[b], n_pt[b])
            pt.add(b, n_pt[b], wall_s, cpu_s)
        print(f"round {r + 1}/{a.rounds}: " + " ".join(
            f"{b} {_ms(mt.cpu[b][-1])}/{_ms(pt.cpu[b][-1])} ms" for b in BENCHES), flush=True)
    if not a.quick:  # the step time late in a long run against its start (one run: about 10 s)
        res = run_micropython(mtm, mtd, {b: 1 for b in BENCHES}, 0, n_drift=N_DRIFT)
        for name in ("drift_first", "drift_last"):
            n, wall, cpu = res[name]
            mt.add(name, n, wall * 1e-6, cpu * 1e-6 if cpu >= 0 else -1)
        print(f"drift: last:2 step {_ms(mt.best('drift_first'))} ms over its first {res['drift_first'][0]}, "
              f"{_ms(mt.best('drift_last'))} ms over the last {res['drift_last'][0]}", flush=True)
    print()
    print("\n".join(table(mt, pt)))
    fit = fit_section(mt, a.fit) if a.fit else []
    if fit and a.mcu:
        fit += mcu_cache(mtm, mtd)
    elif fit and a.saved and SAVED["mcu"].is_file():
        fit += SAVED["mcu"].read_text().splitlines() + [""]
    if fit:
        print()
        print("\n".join(fit))
    line = summary_line(mt, pt)
    if not a.no_doc:
        meta = {"machine": machine(), "rounds": str(a.rounds), "seconds": f"{a.seconds:g}", "profile": ""}
        if a.profile:
            meta["profile"] = "\n".join(profile_section(profile(mtm, mtd, a.profile_steps), a.profile_steps))
        elif a.saved and SAVED["profile"].is_file():
            meta["profile"] = SAVED["profile"].read_text()
        if a.saved and SAVED["builds"].is_file():
            meta["profile"] += "\n" + SAVED["builds"].read_text()
        write_doc(mt, pt, line, meta, fit)
        print(f"wrote {DOC.relative_to(ROOT)}")
    print(median_line(mt, pt))
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
