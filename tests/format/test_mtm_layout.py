"""The .mtm layout is written once (tools/microtrain_tools/mtm_layout.py) and every other copy is
generated from it or imported: the C header usermod/microtrain/mtm_layout.h and the device's
python_lib/microtrain/fmt.py are current, the host reader imports it, docs/format.md's tables
agree with it, and the loaders' loops over runs of fields rely on runs that the layout has."""

from __future__ import annotations

import ast
import re
import struct
from typing import Any

import pytest

from microtrain_tools import mtm
from microtrain_tools import mtm_layout as L
from support.harness import ROOT

CMOD = ROOT / "usermod" / "microtrain"


def test_generated_files_are_current() -> None:
    assert L.stale() == [], f"run `{L.GEN_CMD}` (from tools/)"
    for path in L.outputs():
        first = path.read_text().splitlines()[0].lower()
        assert "generated" in first, f"{path}: first line must say generated"


def test_a_stale_file_is_seen() -> None:
    c_text = L.C_HEADER.read_text()
    fmt_text = L.DEVICE_FMT.read_text()
    assert L.c_header() == c_text and L.device_fmt(fmt_text) == fmt_text
    edited = c_text.replace(f"#define MTM_LAYER_ENTRY {L.LAYER_ENTRY}u", "#define MTM_LAYER_ENTRY 151u")
    assert edited != c_text and L.c_header() != edited
    edited = fmt_text.replace(f"MAX_ELEMS = const({L.MAX_ELEMS})", f"MAX_ELEMS = const({L.MAX_ELEMS + 1})")
    assert edited != fmt_text and L.device_fmt(edited) == fmt_text  # the generator restores it
    model_py = L.DEVICE_FMT.parent / "model.py"
    text = model_py.read_text()
    edited = text.replace(f"_LAYER_N = const({L.LAYER_N})", f"_LAYER_N = const({L.LAYER_N + 1})")
    assert edited != text and L.outputs()[model_py] == text
    assert L._replace_section(model_py, edited, L.private_section(edited)) == text
    with pytest.raises(ValueError, match="generated section"):
        L.device_fmt(fmt_text.replace(L.END, ""))


def _fmt_values() -> dict[str, Any]:
    """NAME -> value of every module-level assignment of fmt.py (const(x) read as x), and of the
    private `_NAME = const(x)` the generated sections of the other device modules hold."""
    out: dict[str, Any] = {}
    for path in [L.DEVICE_FMT, *L.device_modules()]:
        text = path.read_text()
        if path != L.DEVICE_FMT:
            sec = re.search(re.escape(L.BEGIN) + ".*?" + re.escape(L.END), text, re.S)
            if not sec:
                continue
            text = sec.group(0)
        for node in ast.parse(text).body:
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)):
                continue
            v = node.value
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "const":
                v = v.args[0]
            name = node.targets[0].id
            val = ast.literal_eval(v)
            if path != L.DEVICE_FMT:
                name = name[1:]
            assert out.setdefault(name, val) == val, (path, name)  # one value wherever it is
    return out


def test_sizes_match_struct_and_host() -> None:
    assert (L.HEADER_SIZE, L.TENSOR_ENTRY, L.LAYER_ENTRY) == (
        struct.calcsize(L.HEADER_FMT), struct.calcsize(L.TENSOR_FMT), struct.calcsize(L.LAYER_FMT))
    assert L.PARAMS_OFF + 4 * L.N_PARAMS_MAX == L.LAYER_ENTRY
    assert L.TENSOR_ENTRY % 8 == 0 and L.LAYER_ENTRY % 8 == 0 and L.HEADER_SIZE % 8 == 0  # params 8-aligned
    dev = _fmt_values()
    assert (dev["HEADER_SIZE"], dev["TENSOR_ENTRY"], dev["LAYER_ENTRY"], dev["PARAMS_OFF"]) == (
        mtm.HEADER_SIZE, mtm.TENSOR_ENTRY, mtm.LAYER_ENTRY, mtm.PARAMS_OFF)
    assert dev["N_PARAMS"] == tuple([0] + [mtm.N_PARAMS[op] for op in sorted(mtm.Op)])
    assert dev["OP_NAMES"][1:] == tuple(op.name.lower() for op in sorted(mtm.Op))
    assert dev["ITEMSIZE"][1:] == tuple(d.itemsize for d in sorted(mtm.DType))
    f32_bits = struct.Struct("<f")
    assert (dev["SCALE_MIN_BITS"], dev["SCALE_MAX_BITS"]) == tuple(
        struct.unpack("<I", f32_bits.pack(v))[0] for v in (mtm.SCALE_MIN, mtm.SCALE_MAX))
    assert (mtm.SCALE_MIN, mtm.SCALE_MAX) == (2.0**-40, 2.0**40)  # docs/format.md, "Runtime limits"
    assert struct.calcsize(dev["TENSOR_FMT"]) == L.TENSOR_ENTRY
    assert struct.calcsize(dev["LAYER_HEAD_FMT"]) == L.LAYER_OFF["state4"]


def _u32_run(fields: list[L.Field], first: str, n: int) -> list[str]:
    """Names of the n consecutive u32 values of an entry from field `first` on (arrays unrolled)."""
    names: list[str] = []
    on = False
    for name, code, count in fields:
        on = on or name == first
        if on and len(names) < n:
            assert code in "Ifi", f"{name} is not a 32-bit field"
            names += [name] if count == 1 else [f"{name}{k}" for k in range(count)]
    return names[:n]


def test_accessor_rows_follow_the_entries() -> None:
    """The C and pure-Python accessors copy runs of u32 fields into the rows with loops."""
    info = L.INFO_ROW
    assert info[info.index("layer_table_off"):] == _u32_run(L.HEADER, "layer_table_off", 8)
    assert [L.HEADER_OFF[n] for n in ("tensor_table_off", "n_layers", "layer_table_off")] == [24, 28, 32]
    assert all(n in L.HEADER_OFF for n in info)
    t = L.TENSOR_ROW
    assert t[:4] == [f[0] for f in L.TENSOR[:4]]
    assert t[4:] == _u32_run(L.TENSOR, "flags", L.TENSOR_N - 4)
    lr = L.LAYER_ROW
    assert lr[:4] == [f[0] for f in L.LAYER[:4]]
    assert lr[4:lr.index("state3") + 1] == _u32_run(L.LAYER, "flags", lr.index("state3") - 3)
    assert lr[lr.index("state3") + 1:] == ["params_off", "state4", "state5"]


def test_c_n_params_table_matches() -> None:
    raw: dict[str, int] = {}
    for path in sorted(CMOD.glob("*.h")):
        for name, val in re.findall(r"^#define\s+(\w+)\s+(\d+)u?\b", path.read_text(), re.M):
            raw[name] = int(val)
    src = (CMOD / "mtm_loader.c").read_text()
    init = re.search(r"mtm_n_params\[\d+\]\s*=\s*\{([^}]*)\}", src, re.S)
    assert init, "mtm_n_params table not found in mtm_loader.c"
    table = tuple(int(t) if t.isdigit() else raw[t] for t in (s.strip() for s in init.group(1).split(",")))
    assert table == tuple([0] + [o[3] for o in L.OPS])


_TYPES = {"u8": "B", "u16": "H", "u32": "I", "i32": "i", "f32": "f", "4 bytes": "4s"}


def _doc_table(title: str) -> list[tuple[int, str, int, str]]:
    """(off, struct code, count, field name) of the rows of docs/format.md's table under `title`."""
    text = (ROOT / "docs" / "format.md").read_text()
    sec = text[text.index(title):]
    rows = []
    for line in sec.splitlines()[1:]:
        if line.startswith("#"):
            break
        m = re.match(r"\| (\d+) \| ([^|]+?) \| (.*)$", line)
        if not m:
            continue
        typ = m.group(2)
        a = re.fullmatch(r"(\w+)\[(\d+)\]", typ)
        code, count = (_TYPES[a.group(1)], int(a.group(2))) if a else (_TYPES[typ], 1)
        name = re.search(r"`([^`]+)`", m.group(3))
        nm = name.group(1) if name else m.group(3).split(",")[0].strip()
        nm = re.sub(r"\[(\d+)\]$", r"\1", nm)
        nm = re.sub(r"\[.*$", "", nm)
        rows.append((int(m.group(1)), code, count, nm))
    return rows


@pytest.mark.parametrize("title,fields", [("## Header (", L.HEADER), ("## Tensor table (", L.TENSOR),
                                          ("## Layer table (", L.LAYER)])
def test_docs_format_tables_agree(title: str, fields: list[L.Field]) -> None:
    doc = _doc_table(title)
    off = L.offsets(fields)
    want = []
    for name, code, count in fields:
        if want and name == "state5":  # the doc's one u16[2] row holds state[4], state[5]
            o, c, n, nm = want[-1]
            want[-1] = (o, c, n + 1, nm)
            continue
        want.append((off[name], code, count, name))
    assert doc == want
    size = re.search(r"\((\d+) bytes", title + (ROOT / "docs" / "format.md").read_text().split(title)[1])
    assert size and int(size.group(1)) == L.size(fields)
