"""Small-heap sweep: load, train one epoch and save in micropython -X heapsize=H for a range of
H. Every run must end in OK or a clean MemoryError (after which the model still infers as
before); a signal, another exception or a torn checkpoint is a crash."""

from __future__ import annotations

from dataclasses import dataclass, field

from support.reliability import run_mp, workdir
from support.reliability.train_files import files


@dataclass
class HeapResult:
    heaps: int = 0
    crashes: int = 0
    ok: int = 0
    log: list[str] = field(default_factory=list)


def run(sizes: list[int]) -> HeapResult:
    model, data = files(24)
    d = workdir("heaps")
    res = HeapResult()
    for h in sizes:
        ck = d / "ck.mtm"
        ck.unlink(missing_ok=True)
        p = run_mp("rel_train.py", ["heap", str(model), str(data), str(ck)], heapsize=str(h), timeout=300)
        res.heaps += 1
        out = p.stdout.split()
        last = ((p.stdout + p.stderr).strip().splitlines() or [""])[-1]  # the unix port prints tracebacks
        # on stdout
        # a MemoryError is clean when the model still infers: as before if it came while
        # training (set-up fails before the first update), trained if it came in save(),
        # which then must leave no file behind (no checkpoint existed before the run)
        in_save = out[:3] == ["MEMORY", "save", "trained"] and not ck.exists() \
            and not ck.with_name(ck.name + ".tmp").exists()
        memory_ok = out[:3] == ["MEMORY", "train", "True"] or in_save
        clean = ((p.returncode == 0 and (out[:1] == ["OK"] or memory_ok))
                 or (p.returncode == 1 and last.startswith("MemoryError")))
        if out[:1] == ["OK"]:
            res.ok += 1
            from microtrain_tools import mtm

            try:
                mtm.read(ck.read_bytes())
            except (OSError, ValueError) as e:
                clean = False
                last = f"checkpoint does not load: {e}"
        if not clean:
            res.crashes += 1
            res.log.append(f"heap {h}: rc {p.returncode} {p.stdout[-200:]} {p.stderr[-400:]}")
    return res
