"""`make test-mcu`: microtrain on the QEMU Cortex-M0 / M4F / M7 firmware (ports/qemu).

Per board:
- kernel cases (tests/support/kernel_cases.py, tests/mp/kernel_runner.py) through the
  board's .mpy (armv6m on M0, armv7emsp on M4, armv7emdp and armv6m on M7), every output bit-exact
  against the numpy oracle; the cases of functions a module lacks (the armv6m build has no float
  kernels) are left out, cases too big for the board's heap too;
- the .mtm mutation set of tests/format/test_mtm_loader.py (tests/mp/mtm_runner.py): only
  accept / ValueError, and the same verdict as the host reader (tools/microtrain_tools/mtm.py);
- training runs (tests/mp/train_runner.py) in each mode (int8, mixed, float32) on a converted
  digits CNN: the checkpoint and the dump of every trained array equal, byte for byte, those of the
  same run on the float32 host twin (ports/host, FLOAT=single).

Ends with one line
    test-mcu: m0 cases=A/A train=B/B m4 cases=C/C train=D/D m7 cases=E/E train=F/F
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
# GC heap of the kernel runs: the M0's largest; 2 MB of the M4/M7's 4 MB RAM (a long run of
# big cases fragments a 256 KB heap; the heap claims are the training runs', at the defaults)
KERNEL_HEAP_KB = {"m7": 2048, "m4": 2048, "m0": 224}
# GC heap of the training runs: the builds' default (256 KB) on M4/M7; the M0's largest (224 KB),
# since float32 training of every layer plus the runner's dump copies is near its 200 KB default
TRAIN_HEAP_KB = {"m7": 256, "m4": 256, "m0": 224}
# (board, natmod arch) pairs of the kernel check
KERNEL_RUNS = [("m0", "armv6m"), ("m4", "armv7emsp"), ("m7", "armv7emdp"), ("m7", "armv6m")]

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


def module_functions(board: str, arch: str, work: Path) -> set[str]:
    probe = work / "probe.py"
    probe.write_text("import _microtrain as m\n"
                     "print('NAMES', ' '.join(n for n in dir(m) if callable(getattr(m, n))))\n")
    p = qemu_run.run(board, "probe.py", cwd=work, arch=arch, timeout=60)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("NAMES ")]
    if p.returncode != 0 or not line:
        raise RuntimeError(f"{board}/{arch}: _microtrain does not import:\n{p.stdout}{p.stderr}")
    return set(line[0].split()[1:])


def kernel_cases_for(board: str, arch: str, per_op: int, seed: int, work: Path) -> list[Case]:
    names = module_functions(board, arch, work)
    cases = [c for op in kernel_cases.ALL_OPS for c in kernel_cases.generate(op, per_op, seed)]
    cases += list(kernel_cases.generate_limits())
    limit = KERNEL_HEAP_KB[board] * 1024 // 8
    return [c for c in cases if c.op in names and len(kernel_harness.encode_cases([c])) <= limit]


def check_kernels(board: str, arch: str, per_op: int, seed: int) -> tuple[int, int, list[str]]:
    work = WORK / f"kernels-{board}-{arch}"
    work.mkdir(parents=True, exist_ok=True)
    cases = kernel_cases_for(board, arch, per_op, seed, work)
    kernel_harness.write_cases(work / "cases.bin", cases)
    res_path = work / "results.bin"
    res_path.unlink(missing_ok=True)
    p = qemu_run.run(board, str(kernel_harness.RUNNER), ["cases.bin", "results.bin"], cwd=work, arch=arch,
                     heap=f"{KERNEL_HEAP_KB[board]}k")
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


def twin_training(work: Path, n_configs: int, steps: int) -> dict[int, tuple[bytes, bytes]]:
    out = {}
    model = (work / "model.mtm").read_bytes()
    for i, cfg in enumerate(TRAIN_CONFIGS[:n_configs]):
        tag = f"twin{i}"
        _clear(work, tag)
        name = _train_cfg(work, tag, cfg, steps)
        p = subprocess.run([str(TWIN), "-X", "heapsize=256k", "-p", str(qemu_run.PYLIB),
                            str(TRAIN_RUNNER), name], cwd=work, capture_output=True, text=True, timeout=600)
        got = _outputs(work, tag)
        if p.returncode != 0 or got is None:
            raise RuntimeError(f"twin training {cfg[:2]} failed:\n{(p.stdout + p.stderr)[-2000:]}")
        if got[0] == model:
            raise RuntimeError(f"twin training {cfg[:2]}: the checkpoint equals the untrained model")
        out[i] = got
    return out


def check_training(board: str, work: Path, twin: dict[int, tuple[bytes, bytes]], steps: int
                   ) -> tuple[int, int, list[str]]:
    passed, bad = 0, []
    for i, cfg in enumerate(TRAIN_CONFIGS[:len(twin)]):
        tag = f"{board}-{i}"
        _clear(work, tag)
        name = _train_cfg(work, tag, cfg, steps)
        p = qemu_run.run(board, str(TRAIN_RUNNER), [name], cwd=work, heap=f"{TRAIN_HEAP_KB[board]}k")
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
    ap.add_argument("--boards", default="m0,m4,m7")
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
