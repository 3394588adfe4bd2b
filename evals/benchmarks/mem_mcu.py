"""`make mem-mcu`: peak heap of the MLPerf-Tiny-class cases on the 32-bit Cortex-M7 QEMU firmware.

Each case runs evals/mp/mem_case.py on the M7 firmware built with HEAPPEAK=1
(evals/benchmarks/heappeak/heappeak.c: the firmware tracks the GC heap's high-water mark, the
live bytes at every allocation, within 256 B), in a heap large enough to
measure the peak (``--heap``, default 2 MB), with the microtrain package as
.mpy bytecode and the armv7emdp natmod, as `make bench-mcu` runs them. The
peak counts everything from before ``import microtrain`` on: package, model
objects, buffers, the script's samples.

Model bytes (``--load``): ``rom`` (default): QEMU's loader puts the .mtm into
the board's flash (the MPS2's code memory, outside the heap) and the script
passes ``mt.load()`` a bytearray over it; ``file``: ``mt.load(path)`` reads
the file into the heap; ``frozen`` (builtin firmware, ResNet-8 only: the
image has room for one model below the flash area QEMU leaves free): the
.mtm as the bytes constant ``MODEL`` of a module frozen into the firmware.

The cases (MLPerf Tiny models at their published sizes, evals/lib/mlperf_tiny.py,
with seeded untrained weights: memory does not depend on the values; the
Fashion-MNIST transfer CNN of evals/models):

- resnet8_infer: ResNet-8 32x32x3, inference;
- dscnn_last2: DS-CNN-S, training last:2, mixed, SGD momentum with a bfloat16 state
  (SGD(state='bf16'), opt-in), batch 1, recompute=True (the trained pointwise conv made a few
  channels at a time, again in backward: python_lib/microtrain/over.py);
- mbv1_sparse: MobileNetV1-0.25 96x96, last:3, DynamicSparse(0.1), int8, plain SGD, batch 1
  (each layer steps during backward: Trainer sums=False);
- fmnist_all: transfer CNN, all layers, mixed, SGD momentum with a bfloat16 state, batch 16
  folded into the momentum (Trainer sums=False: each gradient / 16, no gradient sums),
  recompute=True (conv1 computes its output again before the first pool's backward, so the
  plan is placed through backward: plan.redo_plan);
- mbv2_035_sparse: MobileNetV2-w0.35 128x128 (the Tiny Training Engine's model), the last
  block's depthwise conv and the classifier, DynamicSparse(0.1), int8, plain SGD, batch 1; its
  bytes are larger than the flash area below, so QEMU's loader puts them in the board's external
  memory (the MPS2's PSRAM, as a QSPI flash mapped into the address space of a real board),
  outside the heap too;
- dscnn_last2_f32, fmnist_all_f32: dscnn_last2 and fmnist_all with the float32 momentum (the
  default state);
- tfm_last2: a transformer encoder block with two-head self-attention over Fashion-MNIST's 28 rows
  as tokens (evals/accuracy/coverage_ops.py ``MhaEncoder``), training last:2, mixed, SGD momentum,
  batch 1.
- gru_har_all: a GRU (H 16) over 64 steps of the 6 smartwatch channels and its two-layer head,
  all layers trained (the GRU with backward through time, its gradient sums), mixed, SGD
  momentum, batch 1.

``microtrain info``'s prediction per case (tools/microtrain_tools/info.py
``peak_heap``: package, model objects, file when read into RAM, one sample,
inference, training) is printed next to the measurement; info_err is the largest |pred - peak| /
peak. A case that fails prints its phase (``FAIL(phase)``), never a number.
The held-out cases (HELD_OUT: other layer sets, modes and batches of the same models, to
which info's constants were not fitted) get a line of their own, ``mem-mcu held-out (FW): ...``.
Ends with ``mem-mcu: resnet8_infer=K dscnn_last2=K mbv1_sparse=K fmnist_all=K mbv2_035_sparse=K
dscnn_last2_f32=K fmnist_all_f32=K tfm_last2=K gru_har_all=K info_err=P``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.lib.mlperf_tiny import MBV2_SPARSE_LAYERS

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "mem"
MP_DIR = ROOT / "evals" / "mp"
# MPS2 code memory (4 MB at 0): QEMU reserves the load addresses of the image's .bss (its
# 3 MB heap array) after the image (the builtin one, with the package frozen, ends near
# 512 KB): the model goes above that, with room for the image to grow, and below 4 MB
ROM_ADDR = 0x00390000
ROM_END = 0x00400000
XIP_ADDR = 0x60000000  # the MPS2's 16 MB PSRAM: the model bytes of a case larger than the flash area
XIP_END = 0x61000000
SAMPLES = 17  # samples per .mtd (batch 16 + 1)


@dataclass(frozen=True)
class MemCase:
    name: str
    model: str  # build/mem/<model>.mtm
    train: str  # "-" = inference only
    mode: str = "mixed"
    sparse: float = 0.0
    batch: int = 1
    steps: int = 3
    momentum: float = 0.9  # SGD(lr=0.01, momentum=...); 0: plain SGD
    sums: bool | None = None  # Trainer(sums=...): None the default, False no gradient sums
    recompute: bool = False  # Trainer(recompute=...): the scratch in a conv output made again
    state: str = "f32"  # SGD(state=...): "bf16" a 16-bit optimiser state


CASES = (
    MemCase("resnet8_infer", "resnet8", "-"),
    # a bfloat16 momentum (opt-in: SGD(state='bf16')) that takes the gradients itself through a
    # float32 window of a few output channels
    MemCase("dscnn_last2", "ds_cnn_s", "last:2", sums=False, recompute=True, state="bf16"),
    # plain SGD, int8 (Deutel et al.'s fully quantised training): float32 momentum (4 bytes per
    # trained parameter) would not fit a board's heap by itself
    MemCase("mbv1_sparse", "mobilenet_v1", "last:3", mode="int8", sparse=0.1, momentum=0.0, sums=False),
    # batch 16 folded into the bfloat16 momentum (each gradient / 16): no gradient sums; the int32
    # scratch in conv1's output, which conv1 computes again before the first pool's backward
    MemCase("fmnist_all", "fmnist", "all", batch=16, steps=17, sums=False, recompute=True, state="bf16"),
    # the Tiny Training Engine's model at 128x128, sparse: the last block's depthwise conv (the policy
    # picks its channels) and the classifier; the frozen 1280-channel pointwise conv between them passes
    # the error down (a trained copy of its int8 weights would not fit)
    MemCase("mbv2_035_sparse", "mobilenet_v2", ",".join(MBV2_SPARSE_LAYERS), mode="int8", sparse=0.1,
            momentum=0.0, sums=False),
    # dscnn_last2 and fmnist_all with the float32 momentum (the default state), beside them
    MemCase("dscnn_last2_f32", "ds_cnn_s", "last:2", sums=False, recompute=True),
    MemCase("fmnist_all_f32", "fmnist", "all", batch=16, steps=17, sums=False, recompute=True),
    # attention: the scores of both heads (2 x 28 x 28) and the tokens of the block kept for backward
    MemCase("tfm_last2", "tfm", "last:2"),
)
# A GRU over 64 steps of the 6 smartwatch channels (coverage_ops.GruHar), all layers trained (the GRU
# with backward through time: its gates of every step kept, its gradient sums)
SEQ_CASES = (MemCase("gru_har_all", "gru_har", "all"),)
# Held out: microtrain info's constants are fitted to CASES; these other layer sets, modes and
# batches check the prediction where it was not fitted (their own line, not the acceptance one)
HELD_OUT = (
    MemCase("resnet8_last3", "resnet8", "last:3", mode="int8", batch=4, steps=5),
    MemCase("dscnn_all", "ds_cnn_s", "all", sums=False),
    MemCase("mbv1_last1", "mobilenet_v1", "last:1", mode="float32", batch=8, steps=9),
    MemCase("fmnist_last2", "fmnist", "last:2", mode="int8", sums=False),
    # an LSTM (H 16, coverage_ops.LstmHar) over the GRU's windows, all layers trained as gru_har_all
    MemCase("lstm_har_all", "lstm_har", "all"),
)
# --bf16: fmnist_all with the gradient sums, float32 and 16-bit optimiser state, next to the
# acceptance case (bfloat16) and its float32 twin (both folding the batch into the momentum)
BF16 = (
    MemCase("fmnist_all_sums", "fmnist", "all", batch=16, steps=17, recompute=True),
    MemCase("fmnist_all_bf16_sums", "fmnist", "all", batch=16, steps=17, recompute=True, state="bf16"),
    CASES[-1], CASES[3],
)


@dataclass
class MemResult:
    case: MemCase
    fw: str
    load: str
    phases: dict[str, int]  # phase -> peak bytes since start, after that phase
    error: str | None  # phase of a MemoryError / failure
    pred: int  # microtrain info's prediction (bytes)
    seconds: float

    @property
    def peak(self) -> int:
        return self.phases.get("peak", 0)

    @property
    def err(self) -> float:
        return abs(self.pred - self.peak) / self.peak if self.peak and not self.error else float("nan")


def _qemu_run() -> object:
    sys.path.insert(0, str(ROOT / "ports" / "qemu"))
    import qemu_run

    return qemu_run


FROZEN = {"resnet8": "mt_frozen_resnet8"}  # model -> frozen module holding MODEL = b"..."


def frozen_modules() -> Path:
    """build/mem/frozen/<module>.py for FROZEN (the BUILTIN firmware freezes the folder)."""
    d = BUILD / "frozen"
    d.mkdir(parents=True, exist_ok=True)
    for model, mod in FROZEN.items():
        data = (BUILD / f"{model}.mtm").read_bytes()
        src = f"# {model}.mtm, frozen into the firmware: the bytes stay in flash\nMODEL = {data!r}\n"
        p = d / f"{mod}.py"
        if not p.is_file() or p.read_text() != src:
            p.write_text(src)
    return d


def firmware(fw: str) -> Path:
    """The M7 single-float firmware with the mtheap module (make -C ports/qemu HEAPPEAK=1);
    fw "builtin": with BUILTIN=1 (kernels and package in flash)."""
    builtin = fw == "builtin"
    p = subprocess.run(["make", "-j2", "-C", str(ROOT / "ports" / "qemu"), "BOARD=m7", "FLOAT=single",
                        "HEAPPEAK=1", f"BUILTIN={int(builtin)}",
                        *([f"MT_FROZEN_DIR={frozen_modules()}"] if builtin else [])],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"mem-mcu: firmware build failed:\n{(p.stdout + p.stderr)[-3000:]}")
    return ROOT / "build" / "qemu" / ("m7-single-heappeak" + ("-builtin" if builtin else "")) / "firmware.elf"


def models() -> None:
    """build/mem/<name>.mtm and .mtd (SAMPLES quantised inputs) of the six models, once."""
    import numpy as np

    from microtrain_tools import convert as cv
    from microtrain_tools import mtm
    from microtrain_tools.mtd import write_mtd

    BUILD.mkdir(parents=True, exist_ok=True)
    need = [n for n in ("resnet8", "ds_cnn_s", "mobilenet_v1", "mobilenet_v2")
            if not (BUILD / f"{n}.mtd").is_file()]
    if need:
        from evals.lib import mlperf_tiny as mlp

        for c in mlp.cases("smoke", only=tuple(need)):
            m = cv.convert(c.model, c.calib, progress=False, method="percentile", percentile=99.99)
            data = mtm.write(m)
            (BUILD / f"{c.name}.mtm").write_bytes(data)
            x = np.concatenate([c.x_tune] * (-(-SAMPLES // len(c.x_tune))))[:SAMPLES]
            y = np.concatenate([c.y_tune] * (-(-SAMPLES // len(c.y_tune))))[:SAMPLES]
            write_mtd(BUILD / f"{c.name}.mtd", cv.quantize_input(data, x), y)
    for name in ("gru_har", "lstm_har"):
        if (BUILD / f"{name}.mtd").is_file():
            continue
        import torch

        from evals.accuracy import coverage_ops
        from evals.lib import datasets as ds

        w = ds.watch_windows(window=coverage_ops.GRU_HAR_SHAPE[0])
        x = np.ascontiguousarray(w.x.transpose(0, 2, 1)[:256])  # (N, T, 6) steps
        torch.manual_seed(0)  # H 16: its float32 sums, momentum and int32 scratch are 3 x 4.2 KB (GRU)
        net = (coverage_ops.GruHar if name == "gru_har" else coverage_ops.LstmHar)(hidden=16).eval()
        data = mtm.write(cv.convert(net, x, progress=False))
        (BUILD / f"{name}.mtm").write_bytes(data)
        write_mtd(BUILD / f"{name}.mtd", cv.quantize_input(data, x[:SAMPLES]), w.y[:SAMPLES] % 7)
    if not (BUILD / "fmnist.mtd").is_file():
        from evals.lib import datasets as ds
        from evals.lib import transfer_model as tm

        shutil.copy2(tm.get_model(progress=False).mtm, BUILD / "fmnist.mtm")
        xt, yt = ds.fashion_mnist("test")
        write_mtd(BUILD / "fmnist.mtd", cv.quantize_input((BUILD / "fmnist.mtm").read_bytes(), xt[:SAMPLES]),
                  yt[:SAMPLES])
    if not (BUILD / "tfm.mtd").is_file():
        import torch

        from evals.accuracy.coverage_ops import MhaEncoder
        from evals.lib import datasets as ds

        xt, yt = ds.fashion_mnist("test")
        torch.manual_seed(0)  # seeded untrained weights, as the MLPerf models
        data = mtm.write(cv.convert(MhaEncoder(1), xt[:256], progress=False))
        (BUILD / "tfm.mtm").write_bytes(data)
        write_mtd(BUILD / "tfm.mtd", cv.quantize_input(data, xt[:SAMPLES]), yt[:SAMPLES])


def breakdown(c: MemCase, fw: str, load: str) -> tuple[dict[str, int], dict[str, Any] | None]:
    """microtrain info's items for the case (bytes): info.peak_heap's, and train_ram's (None:
    inference only)."""
    from microtrain_tools import info, mtm

    path = BUILD / f"{c.model}.mtm"
    m = mtm.read(path.read_bytes())
    tr = None
    if c.train != "-":
        names = c.train.split(",") if "," in c.train else []
        n = len(info.weighted_layers(m)) if c.train == "all" else 1 if names else int(c.train.split(":")[1])
        tr = info.train_ram(m, n, momentum=c.momentum > 0, mode=c.mode, sparse=c.sparse > 0, batch=c.batch,
                            sums=c.sums, recompute=c.recompute, bf16=c.state == "bf16",
                            layers=[i for i, ly in enumerate(m.layers) if ly.name in names])
    # the whole armv7emdp natmod, as the runs load it
    whole = ROOT / "build" / "natmod" / info.NATMOD_ARCH / "_microtrain.mpy"
    nb = whole.stat().st_size if whole.is_file() else None
    return info.peak_heap(m, path.stat().st_size, fw, "file" if load == "file" else "flash", tr, nb), tr


def predict(c: MemCase, fw: str, load: str) -> int:
    """microtrain info's peak heap for the case (bytes; info.peak_heap)."""
    return breakdown(c, fw, load)[0]["total"]


DOC = ROOT / "docs" / "memory.md"
BEGIN = "<!-- mem-mcu: begin (generated by `python -m evals.benchmarks.mem_mcu --write-doc`; do not edit) -->"
END = "<!-- mem-mcu: end -->"
BEFORE = "Before (the acceptance line of the previous `--write-doc`): "
# (column, train_ram key) of the training items, in the order the table shows them
TRAIN_COLS = (("kept + prefix activations", "forward"), ("errors", "errors"), ("scratch", "scratch"),
              ("in idle segments", "hosted"), ("gradients / window", "grads"),
              ("momentum", "optimizer_state"), ("master", "master"), ("layer copies", "copies"),
              ("sparse", "sparse_bytes"), ("loss", "loss"))
PHASES = ("import", "load", "infer", "trainer", "train")


def doc_section(results: Sequence[MemResult], before: str) -> list[str]:
    """docs/memory.md's generated part: the measured peak per phase of each case, and where its bytes
    go by microtrain info's items (KB), with the previous acceptance line."""
    lines = [f"Measured ({results[0].fw}, model bytes {results[0].load}), KB: the peak after each phase, "
             "then `microtrain info`'s items. The interpreter and package are *package*; *objects* the model "
             "objects; *sample* the script's input record; *inference* the inference plan (replaced by the "
             "training plan when a Trainer is made); *training* the training plan and its buffers "
             "(the columns after it) plus plan, optimiser and trainer objects.", "",
             "| case | import | load | infer | trainer | train | **peak** | package | objects | sample | "
             "inference | training | " + " | ".join(k for k, _ in TRAIN_COLS) + " |",
             "|---|" + "---:|" * (11 + len(TRAIN_COLS))]
    for r in results:
        ph, tr = breakdown(r.case, r.fw, r.load)
        cells = [_kb(r.phases[p]) if p in r.phases else "-" for p in PHASES]
        cells.append(f"**{'FAIL(' + r.error + ')' if r.error else _kb(r.peak)}**")
        cells += [_kb(ph[k]) for k in ("package", "model_objects", "sample", "inference", "training")]
        cells += [_kb(int(tr[k])) if tr else "-" for _, k in TRAIN_COLS]
        lines.append(f"| {r.case.name} | " + " | ".join(cells) + " |")
    lines += ["", "```", summary(results), "```"]
    if before:
        lines += ["", BEFORE + f"`{before}`"]
    return lines


def write_doc(results: Sequence[MemResult]) -> None:
    """Replace docs/memory.md's generated part; the acceptance line it held becomes the "before" line."""
    text = DOC.read_text()
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise SystemExit(f"mem-mcu: {DOC} needs one {BEGIN!r} ... {END!r} pair")
    a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
    old = re.findall(r"^(mem-mcu: .*)$", text[a:b], re.M)
    new = "\n".join(doc_section(results, old[0] if old else ""))
    DOC.write_text(text[:a] + "\n" + new + "\n" + text[b:])


def _script(c: MemCase) -> Path:
    """mem_case.py, or for another optimiser state (SGD(state=...)) or a list of layers to train
    (TRAIN names joined by commas: Trainer(train=[...])) a copy of it that passes them: the script is
    compiled into the measured heap, so the acceptance cases' script stays as it is."""
    src = MP_DIR / "mem_case.py"
    lst = "," in c.train
    if c.state == "f32" and not lst:
        return src
    text = src.read_text()
    if c.state != "f32":
        call = "optimizer=mt.SGD(lr=0.01, momentum=mom)"
        assert text.count(call) == 1, "mem_case.py: the SGD call moved"
        text = text.replace(call, f"optimizer=mt.SGD(lr=0.01, momentum=mom, state={c.state!r})")
    if lst:
        assert text.count("train=train,") == 1, "mem_case.py: the Trainer call moved"
        text = text.replace("train=train,", "train=train.split(','),")
    dst = BUILD / f"mem_case_{c.name}.py"
    dst.write_text(text)
    return dst


def run_case(c: MemCase, fw: str, elf: Path, load: str, heap: str, timeout: float = 3600) -> MemResult:
    qr = _qemu_run()
    mtm_path = BUILD / f"{c.model}.mtm"
    args = [mtm_path.name, f"{c.model}.mtd", c.train, c.mode, f"{c.sparse:g}", str(c.batch), str(c.steps),
            f"{c.momentum:g}", {None: "-", True: "1", False: "0"}[c.sums], str(int(c.recompute))]
    extra: list[str] = []
    if load == "frozen":
        args.append("frozen:" + FROZEN[c.model])
    elif load == "rom":
        size = mtm_path.stat().st_size
        addr = ROM_ADDR if ROM_ADDR + size <= ROM_END else XIP_ADDR
        if addr + size > (ROM_END if addr == ROM_ADDR else XIP_END):
            raise SystemExit(f"mem-mcu: {mtm_path} fits neither the flash area at {ROM_ADDR:#x} nor the "
                             f"external memory at {XIP_ADDR:#x}")
        args.append(str(addr))
        extra = ["-device", f"loader,file={mtm_path},addr={addr:#x},force-raw=on"]
    paths = [str(MP_DIR)]
    if fw == "natmod":  # the package as .mpy files and the natmod, read into the heap on import
        qr.build_pylib()  # type: ignore[attr-defined]
        paths += qr.default_paths("m7")  # type: ignore[attr-defined]
    cmd = qr.qemu_cmd("m7", str(_script(c)), args, heap=heap, paths=paths,  # type: ignore
                      extra=extra)
    cmd[cmd.index("-kernel") + 1] = str(elf)
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=BUILD,
                       stdin=subprocess.DEVNULL)
    phases = {k: int(v) for k, v in re.findall(r"^mem\.(\w+)=(\d+)$", p.stdout, re.M)}
    m = re.search(r"^mem\.error=(\w+)$", p.stdout, re.M)
    error = m.group(1) if m else None
    if error is None and (p.returncode != 0 or "peak" not in phases):
        error = f"rc{p.returncode}"
        sys.stderr.write(f"{c.name}: {p.stdout[-2000:]}\n{p.stderr[-2000:]}\n")
    return MemResult(c, fw, load, phases, error, predict(c, fw, load), time.time() - t0)


def _kb(n: int) -> str:
    return f"{n / 1024:.1f}"


def table(results: Sequence[MemResult]) -> list[str]:
    phases = ("import", "load", "infer", "trainer", "train")
    head = " | ".join(f"after {p}" for p in phases)
    lines = [f"| case | kernels, package | model bytes | {head} | peak | info | info err |",
             "|---|---|---|" + "---|" * len(phases) + "---|---|---|"]
    for r in results:
        cells = [_kb(r.phases[p]) if p in r.phases else "-" for p in phases]
        peak = f"FAIL({r.error})" if r.error else _kb(r.peak)
        lines.append(f"| {r.case.name} | {r.fw} | {r.load} | " + " | ".join(cells) +
                     f" | {peak} | {_kb(r.pred)} | {r.err:.2f} |")
    return lines


def summary(results: Sequence[MemResult], tag: str = "") -> str:
    parts = [f"{r.case.name}={'FAIL(' + r.error + ')' if r.error else _kb(r.peak)}" for r in results]
    errs = [r.err for r in results if not r.error]
    parts.append(f"info_err={max(errs):.2f}" if errs else "info_err=n/a")
    return f"mem-mcu{tag}: " + " ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--load", choices=("rom", "file", "frozen", "both", "all"), default="rom",
                    help="model bytes in flash (rom), read from the file into the heap, a frozen bytes "
                         "constant (builtin, ResNet-8); both: file and rom; all: the three")
    ap.add_argument("--heap", default="2m", help="GC heap of the runs (large enough to measure the peak)")
    ap.add_argument("--fw", choices=("natmod", "builtin", "both"), default="both",
                    help="kernels and package: natmod + .mpy files (read into the heap on import), or "
                         "built into the firmware (flash)")
    ap.add_argument("--only", nargs="*", default=(), help="case names")
    ap.add_argument("--no-held-out", action="store_true",
                    help="skip the held-out cases (other layer sets, modes, batches: a check of microtrain "
                         "info where its constants were not fitted)")
    ap.add_argument("--bf16", action="store_true", help="only fmnist_all with float32 and bfloat16 optimiser "
                    "state, with the gradient sums and folded into the momentum")
    ap.add_argument("--write-doc", action="store_true",
                    help="write the acceptance cases' table into docs/memory.md (its generated part)")
    a = ap.parse_args(argv)
    cases = BF16 if a.bf16 else CASES + SEQ_CASES + (() if a.no_held_out else HELD_OUT)
    models()
    loads = {"both": ("file", "rom"), "all": ("file", "frozen", "rom")}.get(a.load, (a.load,))
    fws = ("natmod", "builtin") if a.fw == "both" else (a.fw,)
    results: list[MemResult] = []
    for fw in fws:
        elf = firmware(fw)
        for load in loads:
            for c in cases:
                if (a.only and c.name not in a.only) or (load == "frozen" and (fw != "builtin"
                                                                               or c.model not in FROZEN)):
                    continue
                r = run_case(c, fw, elf, load, a.heap)
                results.append(r)
                peak = f"FAIL({r.error})" if r.error else _kb(r.peak)
                print(f"{c.name} ({fw}, {load}): peak {peak} KB, info {_kb(r.pred)} KB, "
                      f"phases {r.phases} ({r.seconds:.0f} s)", flush=True)
    print("\n".join(table(results)))
    held = [r for r in results if r.case in HELD_OUT and r.load == loads[-1]]
    results = [r for r in results if r.case not in HELD_OUT]
    for fw in fws:
        if any(r.fw == fw for r in held):
            print(summary([r for r in held if r.fw == fw], f" held-out ({fw})"))
    for fw in fws[:-1]:
        print(summary([r for r in results if r.fw == fw and r.load == loads[-1]], f" ({fw})"))
    # the acceptance line: the last configuration (built-in, model in flash, unless told otherwise)
    final = [r for r in results if r.fw == fws[-1] and r.load == loads[-1]]
    if a.write_doc and final:
        write_doc(final)
    print(summary(final))
    return 0


if __name__ == "__main__":
    sys.exit(main())
