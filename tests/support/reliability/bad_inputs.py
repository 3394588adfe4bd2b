"""Bad inputs: every case raises one clear one-line error and leaves
the model, trainer and optimiser state as they were; and training interleaved with all the
cases ends in the same checkpoint, byte for byte, as training without them."""

from __future__ import annotations

from dataclasses import dataclass, field

from support.reliability import run_mp, workdir
from support.reliability.train_files import files


@dataclass
class BadResult:
    cases: int = 0
    clear: int = 0
    unchanged: int = 0
    same_checkpoint: bool = False
    log: list[str] = field(default_factory=list)


def run() -> BadResult:
    model, data = files(24)
    d = workdir("bad")
    res = BadResult()
    ck = {}
    for with_bad in ("1", "0"):
        path = d / f"ck{with_bad}.mtm"
        path.unlink(missing_ok=True)
        p = run_mp("rel_bad.py", [str(model), str(data), str(path), with_bad], timeout=600)
        if p.returncode != 0 or "BAD-DONE" not in p.stdout:
            res.log.append(f"run with_bad={with_bad} failed: {p.stdout[-1000:]} {p.stderr[-1000:]}")
            return res
        ck[with_bad] = path.read_bytes()
        for ln in p.stdout.splitlines():
            if not ln.startswith("BAD "):
                continue
            _, name, status, *msg = ln.split(" ", 3)
            res.cases += 1
            res.clear += status != "UNCLEAR"
            res.unchanged += status != "CHANGED"
            if status != "ok":
                res.log.append(f"{name}: {status}: {' '.join(msg)}")
    res.same_checkpoint = ck["1"] == ck["0"]
    if not res.same_checkpoint:
        res.log.append("the checkpoint after the bad cases differs from the one without them")
    return res
