"""Failed training steps: a fault at every trained layer of a batch-1 step (an exception from
the sparse policy, a user's callable: KeyboardInterrupt, MemoryError, ValueError; or a trained
layer's gradient buffer or grad-input ratios made invalid), with SGD momentum, plain SGD and
Adam, in every mode and update mode (gradient sums, each gradient into the momentum with its
copy, each layer stepping after backward: tests/mp/rel_fail.py). Each must raise and leave
weights, optimiser state, counters, the policy's state and the gradient sums as they were;
training that steps through all of them ends in the checkpoint, byte for byte, of training
without them."""

from __future__ import annotations

from dataclasses import dataclass, field

from support.reliability import run_mp, workdir
from support.reliability.train_files import files

OPTS = ("sgd", "sgd0", "adam")
MODES = ("int8", "mixed", "float32")
HOWS = ("hook", "buffer", "buffer-sums")


@dataclass
class FailResult:
    cases: int = 0
    unchanged: int = 0
    same_checkpoint: int = 0  # runs whose checkpoint equals the run without faults
    runs: int = 0
    modes: set[str] = field(default_factory=set)  # the update modes the runs took (backward.py)
    log: list[str] = field(default_factory=list)


def run(modes: tuple[str, ...] = MODES) -> FailResult:
    model, data = files(24)
    d = workdir("fail")
    res = FailResult()
    for opt in OPTS:
        for mode in modes:
            for how in HOWS:
                p = run_mp("rel_fail.py", [str(model), str(data), str(d), opt, mode, how], timeout=600)
                res.runs += 1
                if p.returncode != 0 or "FAIL-DONE" not in p.stdout:
                    res.log.append(f"{opt} {mode} {how} failed: {p.stdout[-1000:]} {p.stderr[-1000:]}")
                    continue
                for ln in p.stdout.splitlines():
                    if ln.startswith("FAIL "):
                        _, name, status, *msg = ln.split(" ", 3)
                        res.cases += 1
                        res.unchanged += status == "ok"
                        if status != "ok":
                            res.log.append(f"{name}: {status}: {msg[0] if msg else ''}")
                    elif ln.startswith("UPDATE "):
                        res.modes.add(ln.split()[1])
                    elif ln.startswith("SAME "):
                        res.same_checkpoint += ln == "SAME True"
                        if ln != "SAME True":
                            res.log.append(f"{opt} {mode} {how}: a checkpoint unlike the fault-free run")
    return res
