"""Parity of the int8 device path with PyTorch and with the numpy oracle, on real data.

For each reference model (:mod:`evals.lib.refmodels`, trained and cached
on first use):

1. float predictions of the PyTorch model;
2. the samples are quantised with the ``.mtm`` file's input parameters and run
   inside the real ``micropython`` binary by ``mp/parity_runner.py``
   (``microtrain.load(path).forward(x)`` per sample, native ``_microtrain``
   kernels), which writes every int8 output back to a file;
3. the same int8 inputs go through ``convert.run_mtm`` (the numpy oracle).

Checks: the device's int8 outputs equal the oracle's on every sample (bit for
bit), top-1 agreement of int8 (device) with float is at least 0.99, and the
int8 accuracy is at most 0.005 below the float accuracy. When outputs differ,
the first differing sample is rerun with every activation kept, and the first
layer whose output differs is reported.

Data: ``fmnist`` = all 10,000 Fashion-MNIST test images. ``har`` = every
window (128 samples, stride 64) of the two held-out subjects of the smartwatch
set: the model is trained and calibrated on the other 8 subjects only, so these
are the windows it has never seen (its pretraining windows would flatter the
accuracies), and they are exactly the data later personalised on the device.

The last line printed is the summary::

    parity: fmnist agree=P float_acc=F int8_acc=Q bitexact=N/N har agree=... bitexact=K/K

Exit status 0 when every bar holds, 1 when one fails, 2 on an error.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from tqdm import tqdm

from evals.lib import datasets as ds
from evals.lib import refmodels as rm
from microtrain_tools import convert as cv
from microtrain_tools import mtm, paths

__all__ = [
    "MAX_ACC_DROP",
    "MIN_AGREE",
    "RUNNER",
    "ModelResult",
    "agreement",
    "bitexact_rows",
    "device_layer_outputs",
    "first_divergence",
    "main",
    "oracle_layer_outputs",
    "run_device",
    "run_oracle",
]

ROOT = paths.ROOT
RUNNER = Path(__file__).resolve().parents[1] / "mp" / "parity_runner.py"
WORKDIR = ROOT / "build" / "parity"
MIN_AGREE = 0.99
MAX_ACC_DROP = 0.005
MODELS = ("fmnist", "har")

I8 = NDArray[np.int8]


# --------------------------------------------------------------------------
# metrics


def agreement(a: NDArray[np.integer], b: NDArray[np.integer]) -> float:
    """Fraction of positions where the two label vectors are equal."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"label vectors of shapes {a.shape} and {b.shape}")
    return float(np.mean(a == b)) if len(a) else 0.0


def bitexact_rows(dev: I8, ref: I8) -> NDArray[np.bool_]:
    """Per sample: is every output value of ``dev`` equal to ``ref``?"""
    if dev.shape != ref.shape:
        raise ValueError(f"output arrays of shapes {dev.shape} and {ref.shape}")
    return np.all(dev == ref, axis=1)


# --------------------------------------------------------------------------
# running the device path and the oracle


_PKG: list[Path] = []


def _package() -> Path:
    """The package as a board installs it (``make dist``'s x64 folder: the natmod and the
    package compiled by mpy-cross), built once per process under build/parity/pkg. Importing
    .mpy files allocates only their code: compiling the sources would leave the 256 KB heap
    in pieces of a few KB (its 64-bit objects are larger than a board's, too)."""
    if not _PKG:
        from microtrain_tools import dist

        _PKG.append(dist.host_package(WORKDIR / "pkg"))
    return _PKG[0]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["MICROPYPATH"] = str(_package())
    return env


def _cmd(heapsize: str | None) -> list[str]:
    cmd = [paths.micropython()]
    if heapsize:
        cmd += ["-X", f"heapsize={heapsize}"]
    return cmd + [str(RUNNER)]


def run_device(model_path: Path, q: I8, workdir: Path, name: str = "run", heapsize: str | None = "256k",
               every: int = 500, progress: bool = True, keep: bool = False) -> tuple[I8, dict[str, int]]:
    """Run int8 samples ``q`` (N, input numel; NHWC) through ``micropython`` -> (outputs (N, out), stats).

    Stats: the runner's ``done`` line (n, ms, native, heap_free). Raises
    RuntimeError with the runner's output when it fails or writes too little.
    """
    m = mtm.read(Path(model_path).read_bytes())
    n_in, n_out = m.tensors[m.input].numel, m.tensors[m.output].numel
    q = np.ascontiguousarray(q, dtype=np.int8).reshape(len(q), -1)
    if q.shape[1] != n_in:
        raise ValueError(f"samples have {q.shape[1]} values, the model takes {n_in}")
    workdir.mkdir(parents=True, exist_ok=True)
    fin, fout = workdir / f"{name}.in.bin", workdir / f"{name}.out.bin"
    fin.write_bytes(q.tobytes())
    fout.unlink(missing_ok=True)
    cmd = _cmd(heapsize) + [str(model_path), str(fin), str(fout), str(every)]
    lines: list[str] = []
    bar = tqdm(total=len(q), desc=f"micropython {name}", unit="sample", disable=not progress,
               dynamic_ncols=True, mininterval=0.5)
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
                          cwd=ROOT) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            if line.startswith("progress "):
                done = int(line.split()[1].split("/")[0])
                bar.update(done - bar.n)
        rc = proc.wait()
    bar.close()
    raw = fout.read_bytes() if fout.exists() else b""
    if rc != 0 or len(raw) != len(q) * n_out:
        tail = "\n".join(lines[-20:])
        raise RuntimeError(f"micropython parity runner failed on {name} (exit {rc}, {len(raw)} of "
                           f"{len(q) * n_out} output bytes)\ncommand: {' '.join(cmd)}\n{tail}")
    stats: dict[str, int] = {}
    for line in lines:
        if line.startswith("done "):
            stats = {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
    if not keep:
        fin.unlink(missing_ok=True)
        fout.unlink(missing_ok=True)
    return np.frombuffer(raw, dtype=np.int8).reshape(len(q), n_out).copy(), stats


def run_oracle(model: bytes | mtm.Model, q: I8, chunk: int = 200, progress: bool = True,
               desc: str = "oracle") -> I8:
    """``convert.run_mtm`` over int8 samples (N, input numel), with a progress bar."""
    m = model if isinstance(model, mtm.Model) else mtm.read(model)
    outs = []
    with tqdm(total=len(q), desc=desc, unit="sample", disable=not progress, dynamic_ncols=True,
              mininterval=0.5) as bar:
        for i in range(0, len(q), chunk):
            outs.append(cv.run_mtm(m, q[i:i + chunk]))
            bar.update(len(outs[-1]))
    return np.concatenate(outs) if outs else np.zeros((0, m.tensors[m.output].numel), dtype=np.int8)


def oracle_layer_outputs(model: mtm.Model, sample: I8) -> list[I8]:
    """Every layer's int8 output (in layer order) for one sample, from the oracle kernels."""
    vals: dict[int, I8] = {model.input: np.asarray(sample, dtype=np.int8).reshape(-1)}
    outs = []
    for ly in model.layers:
        vals[ly.output] = cv._run_layer(model, ly, vals)
        outs.append(vals[ly.output])
    return outs


def device_layer_outputs(model_path: Path, sample: I8, workdir: Path,
                         heapsize: str | None = "256k") -> list[I8]:
    """Every layer's int8 output for one sample, from ``micropython`` (runner in dump mode)."""
    m = mtm.read(Path(model_path).read_bytes())
    workdir.mkdir(parents=True, exist_ok=True)
    fin, fout = workdir / "dump.in.bin", workdir / "dump.out.bin"
    fin.write_bytes(np.asarray(sample, dtype=np.int8).tobytes())
    proc = subprocess.run(_cmd(heapsize) + [str(model_path), str(fin), str(fout), "1", "0"],
                          capture_output=True, text=True, env=_env(), cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"parity runner (dump) failed: {proc.stdout}{proc.stderr}")
    raw = np.frombuffer(fout.read_bytes(), dtype=np.int8)
    outs, off = [], 0
    for ly in m.layers:
        n = m.tensors[ly.output].numel
        outs.append(raw[off:off + n].copy())
        off += n
    if off != len(raw):
        raise RuntimeError(f"dump has {len(raw)} bytes, the layers need {off}")
    return outs


def first_divergence(model_path: Path, sample: I8, workdir: Path, heapsize: str | None = "256k",
                     reference: mtm.Model | None = None) -> str:
    """Describe the first layer whose device output differs from the oracle's for ``sample``.

    The oracle runs ``reference`` (default: the same file as the device)."""
    m = mtm.read(Path(model_path).read_bytes())
    dev = device_layer_outputs(model_path, sample, workdir, heapsize)
    ref = oracle_layer_outputs(reference if reference is not None else m, sample)
    for i, (ly, d, r) in enumerate(zip(m.layers, dev, ref, strict=True)):
        diff = np.flatnonzero(d != r)
        if len(diff):
            shape = m.tensors[ly.output].shape
            j = int(diff[0])
            pos = tuple(int(v) for v in np.unravel_index(j, shape))
            return (f"layer {i} '{ly.name}' ({ly.op.name}): {len(diff)}/{len(d)} values differ; first at "
                    f"flat index {j} {pos} (NHWC {shape}): device {int(d[j])}, oracle {int(r[j])}")
    return "every layer output equals the oracle in the dump run (the difference is not reproducible)"


# --------------------------------------------------------------------------
# one model


@dataclass
class ModelResult:
    """Parity of one model on its data set."""

    name: str
    n: int
    float_acc: float
    int8_acc: float  # device outputs
    oracle_acc: float
    agree: float  # device int8 top-1 vs float top-1
    bitexact: int
    params: int
    times: dict[str, float] = field(default_factory=dict)
    device: dict[str, int] = field(default_factory=dict)
    mismatches: list[int] = field(default_factory=list)
    divergence: str = ""

    def failures(self) -> list[str]:
        out = []
        if self.bitexact != self.n:
            out.append(f"{self.name}: device outputs differ from the oracle on {self.n - self.bitexact} "
                       f"of {self.n} samples (first: {self.mismatches[:10]}); {self.divergence}")
        if self.agree < MIN_AGREE:
            out.append(f"{self.name}: int8/float top-1 agreement {self.agree:.4f} < {MIN_AGREE}")
        if self.float_acc - self.int8_acc > MAX_ACC_DROP:
            out.append(f"{self.name}: int8 accuracy {self.int8_acc:.4f} is more than {MAX_ACC_DROP} below "
                       f"float {self.float_acc:.4f}")
        return out

    def summary(self) -> str:
        return (f"{self.name} agree={self.agree:.4f} float_acc={self.float_acc:.4f} "
                f"int8_acc={self.int8_acc:.4f} bitexact={self.bitexact}/{self.n}")


def _data(name: str) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    if name == "fmnist":
        return ds.fashion_mnist("test")
    w = ds.watch_windows()
    _, held = ds.watch_split(w)
    return w.x[held], w.y[held]


def evaluate(name: str, ref: rm.RefModel, x: NDArray[np.float32], y: NDArray[np.int64], workdir: Path,
             heapsize: str | None = "256k", progress: bool = True, keep: bool = False) -> ModelResult:
    """Float, device and oracle predictions of ``ref`` on (x, y) and their comparison."""
    times: dict[str, float] = {}
    t = time.perf_counter()
    f_pred = rm.predict(ref.model, x).argmax(1)
    times["float_s"] = time.perf_counter() - t
    model_bytes = ref.mtm.read_bytes()
    m = mtm.read(model_bytes)
    q = cv.quantize_input(m, x)
    t = time.perf_counter()
    dev, stats = run_device(ref.mtm, q, workdir, name, heapsize=heapsize, progress=progress, keep=keep)
    times["device_s"] = time.perf_counter() - t
    t = time.perf_counter()
    ora = run_oracle(m, q, progress=progress, desc=f"oracle {name}")
    times["oracle_s"] = time.perf_counter() - t
    same = bitexact_rows(dev, ora)
    d_pred, o_pred = dev.argmax(1), ora.argmax(1)  # numpy argmax: first maximum, like the device
    res = ModelResult(name, len(y), agreement(f_pred, y), agreement(d_pred, y), agreement(o_pred, y),
                      agreement(d_pred, f_pred), int(same.sum()), rm.n_params(ref.model), times, stats,
                      [int(i) for i in np.flatnonzero(~same)])
    if res.mismatches:
        try:
            res.divergence = f"sample {res.mismatches[0]}: " + first_divergence(
                ref.mtm, q[res.mismatches[0]], workdir, heapsize)
        except RuntimeError as e:
            res.divergence = f"layer dump failed: {e}"
    return res


def _report(r: ModelResult) -> str:
    dev_ms = r.device.get("ms", 0)
    lines = [
        f"{r.name}: {r.n} samples, {r.params} float parameters",
        f"  float acc {r.float_acc:.4f}  int8 acc (micropython) {r.int8_acc:.4f}  int8 acc (oracle) "
        f"{r.oracle_acc:.4f}  top-1 agreement {r.agree:.4f}",
        f"  bit-exact micropython == oracle: {r.bitexact}/{r.n}",
        f"  time: float {r.times.get('float_s', 0):.1f} s, micropython {r.times.get('device_s', 0):.1f} s "
        f"({dev_ms / max(r.n, 1):.2f} ms/sample inside, native={r.device.get('native', '?')}, "
        f"heap free {r.device.get('heap_free', '?')} B), oracle {r.times.get('oracle_s', 0):.1f} s",
    ]
    if r.divergence:
        lines.append(f"  first divergence: {r.divergence}")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m evals.accuracy.parity",
        description="Parity of the int8 model run inside micropython (microtrain.load().forward) with "
                    "the numpy oracle (bit for bit) and with the float PyTorch model (top-1 agreement >= "
                    f"{MIN_AGREE}, accuracy drop <= {MAX_ACC_DROP}), on Fashion-MNIST (10,000 test images) "
                    "and the smartwatch HAR windows of the held-out subjects. Reference models are trained "
                    "and cached in build/models on first use.",
        epilog="The last line is 'parity: <model> agree=... float_acc=... int8_acc=... bitexact=K/N ...'. "
               "Exit status: 0 all bars hold, 1 a bar fails, 2 an error.")
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS),
                   help="which models to check (default: both)")
    p.add_argument("--limit", type=int, default=None,
                   help="only the first N samples of each data set (quick runs; default all)")
    p.add_argument("--heapsize", default="256k",
                   help="micropython -X heapsize for the runner (default 256k, a board-sized heap; "
                        "'' for the binary's default)")
    p.add_argument("--workdir", type=Path, default=WORKDIR, help=f"scratch files (default {WORKDIR})")
    p.add_argument("--keep", action="store_true", help="keep the int8 input/output files in --workdir")
    p.add_argument("--cache-dir", type=Path, default=rm.MODELS_DIR,
                   help=f"reference model cache (default {rm.MODELS_DIR})")
    p.add_argument("--retrain", action="store_true", help="retrain the reference models (ignore the cache)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    progress = not args.quiet
    results: list[ModelResult] = []
    try:
        paths.micropython()  # FileNotFoundError naming what to do
        if not (ROOT / "build" / "natmod" / "x64" / "_microtrain.mpy").exists():
            raise RuntimeError("build/natmod/x64/_microtrain.mpy not found: run `make natmod ARCH=x64`")
        for name in args.models:
            t0 = time.perf_counter()
            getter = rm.get_fmnist_model if name == "fmnist" else rm.get_har_model
            ref = getter(cache_dir=args.cache_dir, retrain=args.retrain, progress=progress)
            t_model = time.perf_counter() - t0
            x, y = _data(name)
            if args.limit is not None:
                x, y = x[:args.limit], y[:args.limit]
            r = evaluate(name, ref, x, y, args.workdir, heapsize=args.heapsize or None, progress=progress,
                         keep=args.keep)
            r.times["model_s"] = t_model
            print(_report(r), flush=True)
            results.append(r)
    except (OSError, RuntimeError, ValueError) as e:
        print(f"parity: error: {e}", file=sys.stderr)
        return 2
    fails = [f for r in results for f in r.failures()]
    for f in fails:
        print(f"FAIL {f}")
    print("parity: " + " ".join(r.summary() for r in results), flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
