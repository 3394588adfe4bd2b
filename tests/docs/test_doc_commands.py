"""Every shell block of the docs (README.md and docs/*.md, fenced as sh / bash / shell / console)
either runs in the suite or says why it cannot, with a marker on the line before it:

- ``<!-- run: sh -->``: run with bash (``.venv/bin`` first on PATH). docs/getting-started.md's
  run in document order in an empty folder (tests/docs/test_docs.py, with the checks it names);
  the other pages' here, from the repository's root. A ``<!-- output -->`` text block after
  one is its real output (``<!-- output: tail -->``: its last lines), compared with every
  float literal masked (test_docs.py's rule).
- ``<!-- not run: REASON -->`` with a REASON of ``NOT_RUN``: a board, another project's
  checkout, the QEMU firmware, a server or REPL, an install, the suite itself, or a measurement
  of minutes that has its own make target.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.harness import ROOT, ensure_natmod

SHELL = ("sh", "bash", "shell", "console")
NOT_RUN = {
    "board": "needs a board on a serial port or its USB drive",
    "checkout": "builds in another project's checkout (MicroPython, CircuitPython, ESP-IDF)",
    "firmware": "runs the project's QEMU firmware or host twin (tests/firmware runs the same steps)",
    "server": "serves or waits for input until stopped (a web server, a REPL)",
    "setup": "installs the toolchain (make setup: the suite runs after it)",
    "suite": "is the test suite itself",
    "long": "a measurement of minutes with its own make target",
}
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_MARK = re.compile(r"<!--\s*(run:\s*\S+|not run:\s*\S+|output(?::\s*tail)?|check:\s*\S+|file:\s*\S+)\s*-->")
_FENCE = re.compile(r"^```(\w*)\s*$")
_FLOAT = re.compile(r"-?\d+(?:\.\d+(?:e[-+]?\d+)?|e[-+]?\d+)")  # as tests/docs/test_docs.py masks them


@dataclass
class Shell:
    page: str
    line: int
    code: str
    marks: list[str]
    output: str | None = None
    tail: bool = False

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def shell_blocks(path: Path) -> list[Shell]:
    lines = path.read_text().splitlines()
    out: list[Shell] = []
    marks: list[str] = []
    last_fence: Shell | None = None
    i = 0
    while i < len(lines):
        text = lines[i].strip()
        mk = _MARK.fullmatch(text)
        fence = _FENCE.match(lines[i])
        if mk:
            marks.append(" ".join(mk.group(1).split()))
        elif fence:
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            code = "\n".join(lines[i + 1:j]) + "\n"
            out_mark = next((m for m in marks if m.startswith("output")), None)
            if out_mark and last_fence is not None:
                last_fence.output, last_fence.tail = code, out_mark.endswith("tail")
            elif fence.group(1) in SHELL:
                last_fence = Shell(str(path.relative_to(ROOT)), i + 1, code, marks)
                out.append(last_fence)
            else:
                last_fence = None
            marks = []
            i = j
        elif text:
            marks = []
            last_fence = None if not text.startswith("<!--") else last_fence
        i += 1
    return out


ALL = [b for p in PAGES for b in shell_blocks(p)]
RUN_HERE = [b for b in ALL if "run: sh" in b.marks and b.page != "docs/getting-started.md"]


def test_every_shell_block_runs_or_says_why() -> None:
    assert len(ALL) >= 30
    problems = []
    for b in ALL:
        run = [m for m in b.marks if m.startswith("run:")]
        skip = [m.split(":", 1)[1].strip() for m in b.marks if m.startswith("not run:")]
        if run == ["run: sh"] and not skip:
            continue
        if not run and len(skip) == 1 and skip[0] in NOT_RUN:
            if skip[0] == "long":  # each make target it names exists
                targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
                named = re.findall(r"\bmake ([a-z][\w-]*)", b.code)
                if not named or not set(named) <= targets:
                    problems.append(f"{b.where}: a 'long' block names make targets that exist: {named}")
            continue
        problems.append(f"{b.where}: needs <!-- run: sh --> or <!-- not run: REASON --> with a REASON of "
                        f"{sorted(NOT_RUN)} on the line before it (has {b.marks})")
    assert not problems, "\n".join(problems)
    assert RUN_HERE, "no shell block outside getting-started.md runs"


def _masked(text: str) -> list[list[str]]:
    return [_FLOAT.sub("#", ln).split() for ln in text.strip().splitlines()]


@pytest.mark.parametrize("block", RUN_HERE, ids=[b.where for b in RUN_HERE])
def test_shell_block_runs(block: Shell) -> None:
    ensure_natmod()
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["MPLBACKEND"] = "Agg"
    for k in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS"):  # as a user types it, not as a sub-make of `make test`
        env.pop(k, None)
    p = subprocess.run(["bash", "-e", "-c", block.code], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=900, check=False, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"{block.where}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    if block.output is not None:
        want = _masked(block.output)
        got = _masked(p.stdout)
        if block.tail:
            got = got[-len(want):]
        assert got == want, (f"{block.where}: the output shown is not what the block prints (float literals "
                             f"masked)\n--- doc ---\n{block.output}--- real ---\n{p.stdout[-3000:]}")
