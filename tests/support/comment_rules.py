"""Comments say why, without issue numbers (``make lint``, tests/docs/test_comments.py).

An issue number ("issue 14", "issue-13", "issue #7") is a pointer into a tracker a reader of the
code may not have, and it goes stale; the comment should carry the reason itself. Checked in the
comments and docstrings of the project's code: Python (``#`` comments and docstrings), C
(``//`` and ``/* */``), Makefiles, shell, CMake and linker scripts (``#`` and ``/* */``).

Run: ``python -m support.comment_rules`` (PYTHONPATH=tests) prints each hit and exits 1 if any is
in a file not listed in KNOWN.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import PurePosixPath

from support.doc_paths import ROOT, tracked

ISSUE = re.compile(r"\bissues?[- ]#?\d+", re.IGNORECASE)

# Files tolerated with an issue number in a comment while a parallel change is merged in; empty on
# main. A file listed without a hit fails the test, so the set only shrinks.
KNOWN: frozenset[str] = frozenset()

_C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_HASH_COMMENT = re.compile(r"(?:^|\s)#[^\n]*")


def _python_comments(text: str) -> list[tuple[int, str]]:
    out = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)
           if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                out.append((first.lineno, first.value.value))
    return out


def comments(name: str, text: str) -> list[tuple[int, str]]:
    """(line, text) of each comment or docstring of a file (empty when the kind is not checked)."""
    p = PurePosixPath(name)
    if p.suffix in {".py", ".pyi"}:
        return _python_comments(text)
    found: list[tuple[int, str]] = []
    if p.suffix in {".c", ".h", ".ld", ".js", ".css"}:
        found += [(text.count("\n", 0, m.start()) + 1, m.group()) for m in _C_COMMENT.finditer(text)]
    if p.suffix in {".mk", ".sh", ".cmake", ".txt", ".toml"} or p.name == "Makefile":
        found += [(text.count("\n", 0, m.start()) + 1, m.group()) for m in _HASH_COMMENT.finditer(text)]
    return found


def hits(name: str, text: str) -> list[tuple[int, str]]:
    return sorted((line + body[:m.start()].count("\n"), m.group())
                  for line, body in comments(name, text) for m in ISSUE.finditer(body))


def check() -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = {}
    for name in tracked(ROOT):
        if name == "tests/support/comment_rules.py":
            continue
        try:
            text = (ROOT / name).read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        found = hits(name, text)
        if found:
            out[name] = found
    return out


def main() -> int:
    found = check()
    new = {f: h for f, h in found.items() if f not in KNOWN}
    gone = sorted(KNOWN - set(found))
    for f, h in sorted(new.items()):
        for line, what in h:
            print(f"comments: {f}:{line}: {what!r} (say why instead of naming the issue)")
    for f in gone:
        print(f"comments: {f} has no issue number left: remove it from KNOWN in comment_rules.py")
    n_new = sum(len(h) for h in new.values())
    n_known = sum(len(h) for f, h in found.items() if f in KNOWN)
    print(f"comments: {n_new} issue numbers, {n_known} known (other branches' files)")
    return 1 if new or gone else 0


if __name__ == "__main__":
    raise SystemExit(main())
