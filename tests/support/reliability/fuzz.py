"""libFuzzer with ASan/UBSan on the .mtm loader and, on every accepted file, the kernels of a
forward pass and a training step (tests/c/mtm_libfuzzer.c). Needs clang-14 with its libFuzzer
runtime (Debian: clang-14, libclang-rt-14-dev; tools/setup.sh installs them)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from support.harness import KERNEL_DIR, ROOT
from support.kernel_harness import c_sources
from support.reliability import BUILD

TARGET = ROOT / "tests" / "c" / "mtm_libfuzzer.c"
SOURCES = [*c_sources("MICROTRAIN_MTM_SRC"), *c_sources("MICROTRAIN_KERNEL_SRC")]


@dataclass
class FuzzResult:
    execs: int = 0
    crashes: int = 0
    log: list[str] = field(default_factory=list)


def clang() -> str | None:
    for c in ("clang-14", "clang"):
        p = shutil.which(c)
        if p:
            return p
    return None


def build() -> Path:
    cc = clang()
    if cc is None:
        raise RuntimeError("clang not found: apt-get install clang-14 libclang-rt-14-dev (tools/setup.sh)")
    BUILD.mkdir(parents=True, exist_ok=True)
    exe = BUILD / "mtm_libfuzzer"
    srcs = [TARGET, *(KERNEL_DIR / s for s in SOURCES)]
    if exe.exists() and all(exe.stat().st_mtime > s.stat().st_mtime for s in srcs):
        return exe
    cmd = [cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-fsanitize=fuzzer,address,undefined",
           "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", f"-I{KERNEL_DIR}", *map(str, srcs), "-o",
           str(exe)]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"building the fuzz target failed: {p.stderr[-3000:]}")
    return exe


def seeds() -> Path:
    """Valid files to start from: the small PyTorch models of the format tests (with a format 1.3
    Adam checkpoint, the 1.4 sequence ops and a 1.5 GRU) and the digits CNN. The folder is named by
    the newest format version the seeds cover, so a build folder seeded before 1.5 is not reused."""
    d = BUILD / "fuzz_seeds_1.5"
    if not d.exists() or not any(d.iterdir()):
        from support.digits_model import digits_model
        from support.mtm_files import torch_model_files

        d.mkdir(parents=True, exist_ok=True)
        for i, f in enumerate([*torch_model_files(), digits_model(4).mtm]):
            (d / f"seed{i}.mtm").write_bytes(f)
    return d


def run(execs: int, seed: int = 1, jobs: int = 1) -> FuzzResult:
    """`execs` libFuzzer executions (each input validated as given and with its CRC fixed)."""
    exe = build()
    sd = seeds()
    corpus = BUILD / f"fuzz_corpus_{seed}"
    corpus.mkdir(parents=True, exist_ok=True)
    art = BUILD / "fuzz_artifacts"
    art.mkdir(parents=True, exist_ok=True)
    res = FuzzResult()
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    for j in range(jobs):
        n = execs // jobs + (1 if j < execs % jobs else 0)
        p = subprocess.run([str(exe), f"-runs={n}", f"-seed={seed + j}", "-max_len=16384", "-timeout=20",
                            "-rss_limit_mb=2048", f"-artifact_prefix={art}/", str(corpus), str(sd)],
                           capture_output=True, text=True, check=False, env=env)
        m = re.search(r"Done (\d+) runs", p.stderr)
        if p.returncode == 0 and m:
            res.execs += int(m.group(1))
        else:
            res.crashes += 1
            done = re.findall(r"#(\d+)", p.stderr)  # the last status line before the crash
            res.execs += int(done[-1]) if done else 0
            res.log.append(p.stderr[-4000:])
    return res
