"""Split fits: for several optimisers, batch sizes and schedules (shuffled), a fit of
EPOCHS epochs against the same epochs split at every epoch boundary, on one trainer and
through a checkpoint (save, load, a new Trainer with seed None), and one epoch per checkpoint.
Every split must end in the uninterrupted run's checkpoint, byte for byte."""

from __future__ import annotations

from dataclasses import dataclass, field

from support.reliability import run_mp, workdir
from support.reliability.train_files import files

EPOCHS = 4


@dataclass
class ResumeResult:
    splits: int = 0
    exact: int = 0
    log: list[str] = field(default_factory=list)


def run(epochs: int = EPOCHS) -> ResumeResult:
    model, data = files(24)
    d = workdir("resume")
    res = ResumeResult()
    p = run_mp("rel_resume.py", [str(model), str(data), str(d), str(epochs)], timeout=1200)
    if p.returncode != 0 or "SPLIT-DONE" not in p.stdout:
        res.log.append(f"run failed: {p.stdout[-1000:]} {p.stderr[-1000:]}")
        return res
    for ln in p.stdout.splitlines():
        if ln.startswith("SPLIT "):
            _, name, status = ln.split(" ", 2)
            res.splits += 1
            res.exact += status == "exact"
            if status != "exact":
                res.log.append(f"{name}: differs from the uninterrupted fit")
    return res
