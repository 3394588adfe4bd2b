"""Structure of the device package python_lib/microtrain (host-side checks, no micropython run).

- microtrain/fmt.py, the device's one copy of the .mtm format constants, holds the
  values of the host's tools/microtrain_tools/mtm.py and of the C loader
  (usermod/microtrain/mtm_loader.h / .c, mt_kernels.h, checks.c), parsed from the
  sources: the three copies cannot drift apart unnoticed;
- no module of the package imports itself back through others (imports inside
  functions count too: a lazy import still runs the other module's top level).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from microtrain_tools import mtm
from support.harness import PYTHON_LIB, ROOT

PKG = PYTHON_LIB / "microtrain"
FMT = PKG / "fmt.py"
CMOD = ROOT / "usermod" / "microtrain"


def _fmt_values() -> dict[str, Any]:
    """NAME -> value of every module-level assignment of fmt.py (const(x) read as x)."""
    out: dict[str, Any] = {}
    for node in ast.parse(FMT.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            v = node.value
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "const":
                v = v.args[0]
            out[node.targets[0].id] = ast.literal_eval(v)
    return out


def _c_defines() -> dict[str, int]:
    """#define NAME <integer expression> of the C module's sources, evaluated."""
    raw: dict[str, str] = {}
    for path in sorted(CMOD.glob("*.[ch]")):
        for name, val in re.findall(r"^#define\s+(\w+)\s+([^\n/]+?)\s*(?://.*)?$", path.read_text(), re.M):
            raw[name] = val
    out: dict[str, int] = {}
    for name, val in raw.items():
        expr = re.sub(r"\b(0x[0-9A-Fa-f]+|\d+)[uUlL]*\b", r"\1", val)
        if re.fullmatch(r"[\s()0-9A-Fa-fx<>+*|-]+", expr):
            out[name] = int(eval(expr))  # noqa: S307 - digits and operators only (checked above)
    return out


def _c_n_params(defines: dict[str, int]) -> tuple[int, ...]:
    src = (CMOD / "mtm_loader.c").read_text()
    init = re.search(r"mtm_n_params\[\d+\]\s*=\s*\{([^}]*)\}", src, re.S)
    assert init, "mtm_n_params table not found in mtm_loader.c"
    return tuple(int(t) if t.isdigit() else defines[t] for t in (s.strip() for s in init.group(1).split(",")))


# fmt.py name -> (mtm.py value, C macro or None when the C loader has no such macro)
def _expected() -> dict[str, tuple[Any, str | None]]:
    e: dict[str, tuple[Any, str | None]] = {
        "MAGIC": (mtm.MAGIC, None),
        "VERSION_MAJOR": (mtm.VERSION_MAJOR, None),
        "VERSION_MINOR": (mtm.VERSION_MINOR, None),
        "HEADER_SIZE": (mtm.HEADER_SIZE, "MTM_HEADER_SIZE"),
        "TENSOR_ENTRY": (mtm.TENSOR_ENTRY, "MTM_TENSOR_ENTRY"),
        "LAYER_ENTRY": (mtm.LAYER_ENTRY, "MTM_LAYER_ENTRY"),
        "PARAMS_OFF": (mtm.PARAMS_OFF, "MTM_PARAMS_OFF"),
        "N_PARAMS_MAX": (mtm.N_PARAMS_MAX, None),
        "MAX_TENSORS": (mtm.MAX_TENSORS, "MTM_MAX_TENSORS"),
        "MAX_LAYERS": (mtm.MAX_LAYERS, "MTM_MAX_LAYERS"),
        "MAX_DIM": (mtm.MAX_DIM, "MTM_MAX_DIM"),
        "MAX_ELEMS": (mtm.MAX_ELEMS, "MT_MAX_ELEMS"),
        "MAX_NAME": (mtm.MAX_NAME, None),
        "MAX_FUSED": (mtm.MAX_FUSED, None),
        "NONE": (mtm.NONE, "MTM_NONE"),
        "NONE_I32": (mtm.NONE - (1 << 32), None),
        "INFO_N": (None, "MTM_INFO_N"),
        "TENSOR_N": (None, "MTM_TENSOR_N"),
        "LAYER_N": (None, "MTM_LAYER_N"),
        "FLAG_TRAINED": (mtm.FLAG_TRAINED, "MTM_FLAG_TRAINED"),
        "FLAG_HAS_STATE": (mtm.FLAG_HAS_STATE, "MTM_FLAG_HAS_STATE"),
        "TFLAG_SIGNAL_1D": (mtm.TFLAG_SIGNAL_1D, None),
        "LFLAG_TRAINED": (mtm.LFLAG_TRAINED, None),
        "DT_INT8": (mtm.DType.INT8, "MTM_DT_INT8"),
        "DT_INT32": (mtm.DType.INT32, "MTM_DT_INT32"),
        "DT_F32": (mtm.DType.FLOAT32, "MTM_DT_FLOAT32"),
        "DT_UINT8": (mtm.DType.UINT8, "MTM_DT_UINT8"),
        "KIND_ACT": (mtm.Kind.ACTIVATION, "MTM_K_ACT"),
        "KIND_CONST": (mtm.Kind.CONST, "MTM_K_CONST"),
        "KIND_STATE": (mtm.Kind.STATE, "MTM_K_STATE"),
        "Q_NONE": (mtm.Quant.NONE, "MTM_Q_NONE"),
        "Q_TENSOR": (mtm.Quant.PER_TENSOR, "MTM_Q_TENSOR"),
        "Q_CHANNEL": (mtm.Quant.PER_CHANNEL, "MTM_Q_CHANNEL"),
        "Q_BIAS": (mtm.Quant.BIAS, "MTM_Q_BIAS"),
        "OP_GAP": (mtm.Op.GLOBAL_AVGPOOL, "MTM_OP_GAP"),
        "ACT_NONE": (mtm.Act.NONE, None),
        "ACT_RELU": (mtm.Act.RELU, None),
        "ACT_RELU6": (mtm.Act.RELU6, None),
        "N_PARAMS": (tuple([0] + [mtm.N_PARAMS[op] for op in sorted(mtm.Op)]), None),
        "ITEMSIZE": (tuple([0] + [np.dtype(d.np).itemsize for d in sorted(mtm.DType)]), None),
        "OP_NAMES": (tuple(["?"] + [op.name.lower() for op in sorted(mtm.Op)]), None),
        "ACT_NAMES": (tuple("" if a == mtm.Act.NONE else a.name.lower() for a in sorted(mtm.Act)), None),
        "TRAINER_TAG": (mtm.TRAINER_TAG, None),
        "ADAM_TAG": (mtm.ADAM_TAG, None),
    }
    for op in mtm.Op:
        if op != mtm.Op.GLOBAL_AVGPOOL:
            e[f"OP_{op.name}"] = (op, f"MTM_OP_{op.name}")
    return e


def test_fmt_constants_equal_host_and_c() -> None:
    dev = _fmt_values()
    want = _expected()
    extra, missing = sorted(set(dev) - set(want)), sorted(set(want) - set(dev))
    assert not extra and not missing, f"fmt.py names not mapped: {extra}; missing: {missing}"
    c = _c_defines()
    bad = []
    n_c = 0
    for name, (host, macro) in want.items():
        if host is not None and dev[name] != host:
            bad.append(f"{name}: fmt.py {dev[name]!r} != mtm.py {host!r}")
        if macro is not None:
            n_c += 1
            if macro not in c:
                bad.append(f"{name}: #define {macro} not found in usermod/microtrain")
            elif c[macro] != dev[name]:
                bad.append(f"{name}: fmt.py {dev[name]!r} != C {macro} {c[macro]!r}")
    assert not bad, "\n".join(bad)
    assert n_c >= 30
    assert dev["N_PARAMS"] == _c_n_params(c), "fmt.N_PARAMS != mtm_loader.c mtm_n_params"


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
