"""Each folder has one job and a README saying what is in it (README.md's promise): every folder
of the repository's top two levels holds a README.md; and the lists of `microtrain` commands in
README.md and tools/README.md name every subcommand the CLI has."""

from __future__ import annotations

import re

from microtrain_tools import cli
from support import doc_paths as dp
from support.harness import ROOT


def test_every_folder_of_the_top_two_levels_has_a_readme() -> None:
    tree = dp.Tree()  # tracked folders only: build outputs and caches are not tracked
    folders = [d for d in tree.dirs if d.count("/") <= 1 and not d.startswith(".")]  # not .ci/
    assert "evals/accuracy" in folders and "usermod" in folders
    missing = sorted(d for d in folders if f"{d}/README.md" not in tree.files)
    assert not missing, f"folders without a README.md: {missing}"


def _commands() -> set[str]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sub.choices
    return set(sub.choices)


def test_readme_command_lists_are_complete() -> None:
    commands = _commands()
    assert {"convert", "lab", "build"} <= commands
    top = (ROOT / "README.md").read_text()
    para = top[top.index("The `microtrain` command"):]
    para = para[:para.index("\n\n")]
    row = next(line for line in (ROOT / "tools" / "README.md").read_text().splitlines()
               if line.startswith("| `cli.py` |"))
    for where, text in (("README.md", para), ("tools/README.md", row)):
        listed = set(re.findall(r"`([a-z][a-z-]*)`", text)) - {"microtrain"}
        assert listed == commands, f"{where}: lists {sorted(listed)}, the CLI has {sorted(commands)}"
