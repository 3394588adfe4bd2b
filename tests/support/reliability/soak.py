"""Soak: many training steps in one process with evaluations, saves and reloads between
rounds; the live heap after a collection must not grow (leak)."""

from __future__ import annotations

from dataclasses import dataclass, field

from support.reliability import run_mp, workdir
from support.reliability.train_files import files

LEAK_BYTES = 1024  # growth of the live heap from the second round to the last that counts as a leak


@dataclass
class SoakResult:
    steps: int = 0
    leak: int = 0
    live: list[int] = field(default_factory=list)
    log: list[str] = field(default_factory=list)


def run(steps: int, round_steps: int = 2000) -> SoakResult:
    model, data = files(64)
    d = workdir("soak")
    # 320 KB: the unix port compiles the package from source (a board runs .mpy or frozen
    # bytecode), and the code objects of the modules compiled late (trainer, checkpoint) leave
    # a 256 KB heap in pieces of a few KB; the soak looks for leaks, `make mem-mcu` and
    # train-eval's heap256k for the 256 KB budget
    p = run_mp("rel_train.py", ["soak", str(model), str(data), str(d / "ck.mtm"), str(steps),
                                str(round_steps)], heapsize="320K", timeout=7200)
    res = SoakResult()
    for ln in p.stdout.splitlines():
        if ln.startswith("LIVE"):
            res.live.append(int(ln.split()[1]))
        if ln.startswith("DONE"):
            res.steps = int(ln.split()[1])
    if p.returncode != 0 or not res.steps:
        res.log.append(f"soak failed: rc {p.returncode} {p.stderr[-1000:]}")
        res.leak = 1
    elif len(res.live) >= 3 and res.live[-1] - res.live[1] > LEAK_BYTES:
        res.leak = 1
        res.log.append(f"live heap grew: {res.live}")
    return res
