"""Seeded abusive calls: the native module and the pure-Python kernels, identical verdicts.

The valid base call of every binding function (support.bad_input_cases.BASES) is written
as a Python literal; tests/mp/rel_abuse.py mutates it (wrong types and sizes, edge ints
and floats, NaN, str, aliases, single bad elements of valid buffers, missing and extra
arguments) and makes each call on both implementations. A chunk whose process dies is a
crash (the native module took the interpreter down)."""

from __future__ import annotations

from dataclasses import dataclass, field

from support.bad_input_cases import BASES
from support.harness import Buf
from support.kernel_harness import to_raw
from support.reliability import run_mp, workdir

CHUNK = 5000  # calls per micropython process


@dataclass
class AbuseResult:
    calls: int = 0
    crashes: int = 0
    mismatches: int = 0
    lines: list[str] = field(default_factory=list)


def _literal(a: object) -> str:
    if isinstance(a, Buf):
        n = a.n if a.data is None else len(a.data)
        raw = to_raw(a.kind, a.data) if a.data is not None else bytes([0xA5]) * (n * (1 if a.kind in "yYbB"
                                                                                    else 4))
        if a.kind == "y":
            return repr(raw)
        if a.kind == "Y":
            return f"bytearray({raw!r})"
        return f"array({a.kind!r}, {raw!r})"
    if a is None or isinstance(a, (bool, int, float)):
        return repr(a)
    raise TypeError(f"base argument {a!r} not supported")


def bases_file() -> str:
    p = workdir("abuse") / "bases.py"
    items = [f"({op!r}, [{', '.join(_literal(a) for a in case.args)}])" for op, case in sorted(BASES.items())]
    p.write_text("[\n" + ",\n".join(items) + "\n]\n")
    return str(p)


def run(calls: int, seed: int = 1) -> AbuseResult:
    path = bases_file()
    res = AbuseResult()
    chunk = 0
    while res.calls < calls:
        n = min(CHUNK, calls - res.calls)
        p = run_mp("rel_abuse.py", [path, str(seed * 100003 + chunk), str(n)], heapsize="16M", timeout=1800)
        chunk += 1
        res.calls += n
        done = [ln for ln in p.stdout.splitlines() if ln.startswith("ABUSE-DONE")]
        if p.returncode != 0 or not done:
            res.crashes += 1
            res.lines.append(f"chunk {chunk}: rc {p.returncode}: {p.stderr[-500:]}")
            continue
        res.mismatches += int(done[0].split()[2])
        res.lines += [ln for ln in p.stdout.splitlines() if ln.startswith("MISMATCH")][:5]
    return res
