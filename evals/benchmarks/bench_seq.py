"""Instructions per element / MAC of the sequence and attention kernels (mul, matmul,
softmax) on the QEMU boards: evals/mp/bench_seq_kernels.py through the board's natmod,
counted by the mtcount plugin as `make bench-mcu` counts the conv / linear kernels
(bench_mcu.py: only the native category, i.e. the kernel and its argument checks).

    python -m evals.benchmarks.bench_seq [--boards m7,m4]

Prints one line per kernel: board, shape, kernel, native instructions, per unit.
"""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Sequence

from evals.benchmarks import bench_mcu


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boards", default="m7")
    a = ap.parse_args(argv)
    subprocess.run(["make", "-s", "-C", str(bench_mcu.PLUGIN_DIR), "all"], check=True)
    bds = bench_mcu.boards()
    for b in a.boards.split(","):
        fmap = bench_mcu.firmware_map(bds[b].firmware, bench_mcu.BUILD / f"{b}.map")
        run = bench_mcu.run_guest(bds[b], fmap, "bench_seq_kernels.py", [], heap_kb=bds[b].heap_kb)
        native = bench_mcu.CATS.index("native")
        for name, occ in bench_mcu.regions(run).items():
            if name == "empty":
                continue
            shape = name.split(".")[0]
            unit = "macs" if f"{shape}.macs" in run.results else "elems"
            n = int(run.results[f"{shape}.{unit}"])
            v = occ[0][native]
            print(f"{b} {name:10s} native={v:8d} per {unit[:-1]}={v / n:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
