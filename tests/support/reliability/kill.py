"""kill -9 during checkpoint saves: the file is never torn and the resumed run is exact.

A reference run trains E epochs with trainer.save after each. Each trial runs the same
script in a fresh directory and SIGKILLs it at a random moment of a random save (on its
"SAVING" line, after a random delay of 0..3 ms: before, inside or just after the write,
the validation or the rename). Then the checkpoint must be absent or load (torn counts
those that do not), and the script run again resumes from it to E epochs: the final
checkpoint must equal the reference byte for byte (resume_exact). Even trials train with
SGD + momentum, odd ones with Adam (its second moments and bias correction: format 1.3)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field

from support.harness import MICROPYTHON
from support.reliability import MP_DIR, mp_env, run_mp, workdir
from support.reliability.train_files import files

EPOCHS = 6


@dataclass
class KillResult:
    kills: int = 0
    torn: int = 0
    resume_exact: int = 0
    log: list[str] = field(default_factory=list)


def _valid(path: str) -> bool:
    from microtrain_tools import mtm

    try:
        mtm.read(open(path, "rb").read())
    except ValueError:
        return False
    return True


def run(trials: int, seed: int = 1) -> KillResult:
    model, data = files(24)
    d = workdir("kill")
    want = {}
    for opt in ("sgd", "adam"):
        ref = d / f"ref_{opt}.mtm"
        ref.unlink(missing_ok=True)
        p = run_mp("rel_train.py", ["resume", str(model), str(data), str(ref), str(EPOCHS), opt], timeout=600)
        if "DONE" not in p.stdout:
            raise RuntimeError(f"reference run ({opt}) failed: {p.stdout[-500:]} {p.stderr[-2000:]}")
        want[opt] = ref.read_bytes()
    rng = random.Random(seed)
    res = KillResult()
    for k in range(trials):
        ck = d / f"trial{k % 4}.mtm"
        for f in (ck, ck.with_name(ck.name + ".tmp")):
            f.unlink(missing_ok=True)
        at = rng.randrange(EPOCHS)
        delay = rng.uniform(0.0, 0.003)
        opt = ("sgd", "adam")[k & 1]
        proc = subprocess.Popen([str(MICROPYTHON), "-X", "heapsize=16M", str(MP_DIR / "rel_train.py"),
                                 "resume", str(model), str(data), str(ck), str(EPOCHS), opt],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=mp_env())
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(f"SAVING {at}"):
                time.sleep(delay)
                os.kill(proc.pid, signal.SIGKILL)
                break
        proc.stdout.close()
        proc.wait()
        res.kills += 1
        if ck.exists() and not _valid(str(ck)):
            res.torn += 1
            res.log.append(f"trial {k}: torn checkpoint after a kill in save {at}")
            continue
        p = run_mp("rel_train.py", ["resume", str(model), str(data), str(ck), str(EPOCHS), opt], timeout=600)
        if "DONE" in p.stdout and ck.read_bytes() == want[opt]:
            res.resume_exact += 1
        else:
            res.log.append(f"trial {k} ({opt}): resumed run differs (kill in save {at}): {p.stderr[-300:]}")
    return res
