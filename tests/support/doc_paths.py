"""Every repository path the docs, READMEs and code name exists (``make lint``, tests/docs/test_doc_paths.py).

What counts as a repository path: a token that starts with one of the repository's top-level
folders (``docs/numerics.md``, ``evals/mp/``), not preceded by a letter, digit, ``/``, ``.``,
``$`` or ``-``. A path of another tree is written from that tree's root, which the rule leaves
alone: ``micropython/ports/rp2/README.md`` or ``$MPY/ports/rp2`` (MicroPython),
``circuitpython/ports/raspberrypi``, ``qemu/docs/devel/tcg-plugins.rst``, and ``./ports/unix``
for a path relative to a command's current folder. Patterns are checked as patterns: ``*``,
``<name>`` and ``{a,b}`` must match something. A build output (a path ``.gitignore`` covers,
e.g. ``usermod/microtrain/_microtrain.mpy``) needs not exist. ``python -m pkg.mod`` names of the
project's packages (evals, microtrain_tools, support) must name a module. In markdown, every
relative link target ``[text](path)`` must exist, relative to the file.

Run: ``python -m support.doc_paths`` (PYTHONPATH=tests) prints each miss and exits 1 if any is
not in KNOWN.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[2]

SUFFIXES = {".md", ".py", ".pyi", ".c", ".h", ".mk", ".cmake", ".txt", ".toml", ".sh", ".ld", ".js",
            ".html", ".css", ".json"}
NAMES = {"Makefile", "CMakeLists.txt"}

# Stale (file, path) pairs tolerated while a parallel change is merged in; empty on main. An
# entry that no longer misses fails the test, so the set only shrinks.
KNOWN: frozenset[tuple[str, str]] = frozenset()

# Files whose paths are examples of the rule or the KNOWN list: stale on purpose.
EXAMPLES = {"tests/docs/test_doc_paths.py", "tests/support/doc_paths.py"}

MODULE_ROOTS = {"evals": "evals", "microtrain_tools": "tools/microtrain_tools", "support": "tests/support"}
_MODULE = re.compile(r"-m\s+((?:" + "|".join(MODULE_ROOTS) + r")(?:\.\w+)+)")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


@dataclass(frozen=True)
class Miss:
    file: str
    line: int
    path: str
    why: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.path} ({self.why})"


def tracked(root: Path = ROOT) -> list[str]:
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, text=True,
                         check=True)
    return [f for f in out.stdout.split("\0") if f]


class Tree:
    """The tracked files and the folders holding them; .gitignore for build outputs."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self.files = set(tracked(root))
        self.dirs: set[str] = set()
        for f in self.files:
            for parent in PurePosixPath(f).parents:
                if str(parent) != ".":
                    self.dirs.add(str(parent))
        self.top = sorted(d for d in self.dirs if "/" not in d)
        self.all = sorted(self.files | self.dirs)

    def exists(self, path: str) -> bool:
        p = path.rstrip("/")
        return p in self.files or p in self.dirs

    def matches(self, pattern: str) -> bool:
        p = pattern.rstrip("/")
        return any(fnmatch.fnmatchcase(x, p) for x in self.all)

    def ignored(self, path: str) -> bool:
        r = subprocess.run(["git", "-C", str(self.root), "check-ignore", "-q", "--no-index", path],
                           capture_output=True, check=False)
        return r.returncode == 0


def _expand(token: str) -> list[str]:
    """``a/{b,c}.py`` -> [a/b.py, a/c.py]; ``<x>`` -> ``*``."""
    token = re.sub(r"<[^<>/]*>|\{\w*\}", "*", token)  # <name>, an f-string's {field}
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    return [x for alt in m.group(1).split(",") for x in _expand(token[:m.start()] + alt + token[m.end():])]


def _path_pattern(top: list[str]) -> re.Pattern[str]:
    folders = "|".join(map(re.escape, top))
    return re.compile(r"(?<![\w/.$-])((?:" + folders + r")/[\w./<>{},*-]*[\w/*>}])")


def check_text(tree: Tree, name: str, text: str) -> list[Miss]:
    misses: list[Miss] = []
    pat = _path_pattern(tree.top)
    is_md = name.endswith(".md")
    for n, line in enumerate(text.splitlines(), 1):
        for m in pat.finditer(line):
            token = m.group(1)
            for open_, close in ("{}", "<>"):  # cut at a brace or <placeholder> that the token does not close
                if open_ in token and close not in token[token.index(open_):]:
                    token = token[:token.index(open_)] + "*"
            token = token.rstrip(".,")
            if not all(tree.matches(p) if "*" in p else tree.exists(p) for p in _expand(token)):
                if not tree.ignored(token):
                    misses.append(Miss(name, n, token, "no such path"))
        for m in _MODULE.finditer(line):
            mod = m.group(1).split(".")
            base = MODULE_ROOTS[mod[0]] + "".join("/" + x for x in mod[1:])
            if not (tree.exists(base + ".py") or tree.exists(base + "/__init__.py")):
                misses.append(Miss(name, n, m.group(1), "no such module"))
        if is_md:
            for m in _LINK.finditer(line):
                target = m.group(1).split("#", 1)[0]
                if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):  # anchor, URL, mailto
                    continue
                rel = PurePosixPath(name).parent / target
                parts: list[str] = []
                for part in rel.parts:
                    if part == "..":
                        if not parts:
                            break
                        parts.pop()
                    elif part != ".":
                        parts.append(part)
                else:
                    resolved = "/".join(parts)
                    if resolved and (tree.exists(resolved) or resolved in {"."}):
                        continue
                misses.append(Miss(name, n, target, "link target missing"))
    return misses


def scanned(name: str) -> bool:
    p = PurePosixPath(name)
    return p.suffix in SUFFIXES or p.name in NAMES


def check(root: Path = ROOT) -> list[Miss]:
    tree = Tree(root)
    misses: list[Miss] = []
    for name in sorted(tree.files):
        if not scanned(name) or name in EXAMPLES:
            continue
        try:
            text = (root / name).read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        misses += check_text(tree, name, text)
    return misses


def main() -> int:
    misses = check()
    new = [m for m in misses if (m.file, m.path) not in KNOWN]
    gone = sorted(KNOWN - {(m.file, m.path) for m in misses})
    for m in new:
        print(f"doc-paths: {m}")
    for f, p in gone:
        print(f"doc-paths: {f} no longer names {p}: remove it from KNOWN in tests/support/doc_paths.py")
    known = len(misses) - len(new)
    print(f"doc-paths: {len(new)} missing, {known} known (other branches' files), {len(gone)} stale known")
    return 1 if new or gone else 0


if __name__ == "__main__":
    raise SystemExit(main())
