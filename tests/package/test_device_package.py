"""Structure of the device package python_lib/microtrain (host-side checks, no micropython run).

No module of the package imports itself back through others (imports inside functions
count too: a lazy import still runs the other module's top level). (microtrain/fmt.py, the
.mtm layout on the device, is generated from tools/microtrain_tools/mtm_layout.py:
tests/format/test_mtm_layout.py checks it.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from support.harness import PYTHON_LIB

PKG = PYTHON_LIB / "microtrain"


# --------------------------------------------------------------------------
# import graph


def _module_name(path: Path) -> str:
    rel = path.relative_to(PYTHON_LIB).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """module -> package modules it imports (anywhere in the file)."""
    files = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import
                    pkg = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                    base = ".".join(pkg[:len(pkg) - node.level + 1] + ([base] if base else []))
                # `from pkg import sub` imports the submodule sub
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for n in names:
                if n in files and n != mod:
                    deps.add(n)
        graph[mod] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                cyc = visit(d)
                if cyc:
                    return cyc
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            cyc = visit(m)
            if cyc:
                return cyc
    return None


def test_find_cycle_sees_a_cycle() -> None:
    """The checker itself: a two-module cycle and a longer one are found, a DAG passes."""
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_in_the_device_package() -> None:
    graph = import_graph()
    # the graph is real: the edges that matter are seen (lazy ones included)
    assert "microtrain.checkpoint" in graph["microtrain.model"]  # Model.save, a lazy import
    assert "microtrain.fmt" in graph["microtrain.checkpoint"]
    assert "microtrain.pyk.checks" in graph["microtrain.pyk.conv2d"]
    assert "microtrain.pyk" in graph["microtrain.kern"]
    cyc = find_cycle(graph)
    assert cyc is None, "import cycle: " + " -> ".join(cyc)


@pytest.mark.parametrize("mod", ["microtrain.fmt", "microtrain.pyk.checks"])
def test_leaf_modules_import_nothing_heavy(mod: str) -> None:
    """fmt imports nothing of the package and pyk.checks only fmt: the kernels a board
    loads one by one pull in no model, trainer or validator code."""
    graph = import_graph()
    assert graph[mod] <= {"microtrain.fmt"}, graph[mod]
