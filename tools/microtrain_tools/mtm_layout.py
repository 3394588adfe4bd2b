"""The ``.mtm`` layout, written once (docs/format.md): header, tensor-table entry, layer-table
entry, the int32 rows the device accessors fill (``mtm_info`` / ``mtm_tensor`` / ``mtm_layer``),
the enumerations and the limits.

Everything else takes it from here: the host reader / writer ``mtm.py`` imports it; the C loader
includes ``usermod/microtrain/mtm_layout.h`` and the device package imports
``python_lib/microtrain/fmt.py``, both generated from it by
``python -m microtrain_tools.mtm_layout`` (``--check`` says whether they are current;
``tests/format/test_mtm_layout.py`` fails when they are not).
"""

from __future__ import annotations

import argparse
import io
import re
import struct
import sys
import tokenize
from pathlib import Path

# (name, struct code, count): one field of a table entry, little-endian, no padding
Field = tuple[str, str, int]

MAGIC = b"MTMF"
VERSION_MAJOR = 1
# 1.1 LUT, 1.2 CONCAT / UPSAMPLE / dilated CONV2D, 1.3 Adam state[4..6), 1.4 MUL / LAYERNORM /
# SOFTMAX / MATMUL, 1.5 GRU / LSTM and multi-head MATMUL (13 params); files: the oldest that fits
VERSION_MINOR = 5

HEADER: list[Field] = [
    ("magic", "4s", 1),
    ("version_major", "H", 1),
    ("version_minor", "H", 1),
    ("header_size", "I", 1),
    ("flags", "I", 1),
    ("total_len", "I", 1),
    ("n_tensors", "I", 1),
    ("tensor_table_off", "I", 1),
    ("n_layers", "I", 1),
    ("layer_table_off", "I", 1),
    ("strings_off", "I", 1),
    ("strings_len", "I", 1),
    ("data_off", "I", 1),
    ("data_len", "I", 1),
    ("input", "I", 1),
    ("output", "I", 1),
    ("train_steps", "I", 1),
]

TENSOR: list[Field] = [
    ("dtype", "B", 1),
    ("rank", "B", 1),
    ("kind", "B", 1),
    ("quant", "B", 1),
    ("flags", "I", 1),
    ("shape", "I", 4),
    ("data_off", "I", 1),
    ("data_len", "I", 1),
    ("scale", "f", 1),
    ("zero_point", "i", 1),
    ("qscales", "I", 1),
    ("reserved", "I", 1),
]

LAYER: list[Field] = [
    ("op", "B", 1),
    ("act", "B", 1),
    ("n_params", "B", 1),
    ("n_inputs", "B", 1),
    ("flags", "I", 1),
    ("name_off", "I", 1),
    ("name_len", "I", 1),
    ("fused_off", "I", 1),
    ("fused_len", "I", 1),
    ("in0", "I", 1),
    ("in1", "I", 1),
    ("out", "I", 1),
    ("weight", "I", 1),
    ("bias", "I", 1),
    ("mult", "I", 1),
    ("shift", "I", 1),
    ("state", "I", 4),
    # Adam's second moments state[4], state[5] (1.3; 0xFFFF: none); before 1.3 a reserved u32, 0
    ("state4", "H", 1),
    ("state5", "H", 1),
    ("params", "i", 20),
]

# The int32 rows the accessors fill (C mtm_loader.c, pure Python pyk/mtm_loader.py): u32 fields
# as their bit pattern (NONE reads as -1, the f32 scale as raw bits). Each row value is a field
# of the entry, except where a comment says otherwise.
INFO_ROW: list[str] = [
    "version_major", "version_minor", "flags", "total_len", "n_tensors", "n_layers",
    "tensor_table_off", "layer_table_off", "strings_off", "strings_len", "data_off", "data_len",
    "input", "output", "train_steps",
]
TENSOR_ROW: list[str] = [
    "dtype", "rank", "kind", "quant", "flags", "shape0", "shape1", "shape2", "shape3", "data_off",
    "data_len", "scale", "zero_point", "qscales",
]
LAYER_ROW: list[str] = [
    "op", "act", "n_params", "n_inputs", "flags",
    "name_off",  # absolute: the string pool's offset added
    "name_len",
    "fused_off",  # absolute
    "fused_len", "in0", "in1", "out", "weight", "bias", "mult", "shift",
    "state0", "state1", "state2", "state3",
    "params_off",  # absolute file offset of the layer's params
    "state4", "state5",  # -1 when absent (and in files before 1.3)
]

# enumerations: (device / C name, host enum member, value)
DTYPES = [("INT8", "INT8", 1), ("INT32", "INT32", 2), ("F32", "FLOAT32", 3), ("UINT8", "UINT8", 4)]
ITEMSIZE = {1: 1, 2: 4, 3: 4, 4: 1}  # bytes per element, by dtype
KINDS = [("ACT", "ACTIVATION", 0), ("CONST", "CONST", 1), ("STATE", "STATE", 2)]
QUANTS = [("NONE", "NONE", 0), ("TENSOR", "PER_TENSOR", 1), ("CHANNEL", "PER_CHANNEL", 2),
          ("BIAS", "BIAS", 3)]
# op: (device / C name, host enum member, value, n_params, n_inputs, first minor version)
OPS = [
    ("CONV2D", "CONV2D", 1, 17, 1, 0),
    ("LINEAR", "LINEAR", 2, 6, 1, 0),
    ("RELU", "RELU", 3, 2, 1, 0),
    ("RELU6", "RELU6", 4, 3, 1, 0),
    ("MAXPOOL", "MAXPOOL", 5, 11, 1, 0),
    ("AVGPOOL", "AVGPOOL", 6, 11, 1, 0),
    ("GAP", "GLOBAL_AVGPOOL", 7, 2, 1, 0),
    ("ADD", "ADD", 8, 13, 2, 0),
    ("LUT", "LUT", 9, 4, 1, 1),
    ("CONCAT", "CONCAT", 10, 10, 2, 2),
    ("UPSAMPLE", "UPSAMPLE", 11, 9, 1, 2),
    ("MUL", "MUL", 12, 11, 2, 4),
    ("LAYERNORM", "LAYERNORM", 13, 7, 1, 4),
    ("SOFTMAX", "SOFTMAX", 14, 3, 1, 4),
    ("MATMUL", "MATMUL", 15, 12, 2, 4),
    ("GRU", "GRU", 16, 13, 1, 5),
    ("LSTM", "LSTM", 17, 13, 1, 5),
]
ACTS = [("NONE", "NONE", 0), ("RELU", "RELU", 1), ("RELU6", "RELU6", 2)]

FLAG_TRAINED = 1  # header flags
FLAG_HAS_STATE = 2
TFLAG_SIGNAL_1D = 1  # tensor flags
LFLAG_TRAINED = 1  # layer flags

MAX_TENSORS = 4096
MAX_LAYERS = 1024
MAX_DIM = 65535
MAX_ELEMS = 1 << 26  # the kernels' largest tensor / buffer (checks.c)
MAX_NAME = 63
MAX_FUSED = 255
NONE = 0xFFFFFFFF  # "no tensor"
NONE16 = 0xFFFF  # an absent state[4] / state[5] in a 1.3 file
# Runtime limits (docs/format.md, "Runtime limits"): a file within them runs inference and a
# training step; every loader checks them.
SCALE_EXP = 40  # every activation scale and weight scale in [2^-40, 2^40]: products stay normal in float32
SCALE_MIN_BITS = (127 - SCALE_EXP) << 23  # as IEEE binary32 bits (positive floats order as their bits)
SCALE_MAX_BITS = (127 + SCALE_EXP) << 23
MAX_GAP_HW = 65536  # global_avgpool positions
MAX_GRAD_TERMS = 131071  # conv k_h * k_w * out_c / groups: the grad-input bound (checks.c mt_wr_check)
MAX_CLASSES = 32767  # model output values: softmax_xent_s8 classes
# a SOFTMAX layer's output quantisation (softmax_s8_forward's): scale 2^-8, zero point -128
SOFTMAX_SCALE_BITS = (127 - 8) << 23
SOFTMAX_ZP = -128
# The trainer record at the end of a checkpoint's string pool (docs/format.md, "Trainer record"):
# the tag, 8 lowercase hex digits (the shuffle generator's seed state), optionally 8 more (the
# epochs fit completed; older records have none), optionally ADAM_TAG and Adam's beta1^t,
# beta2^t as 2 x 8 hex digits (float32 bits), then NUL.
TRAINER_TAG = b"trainer:rng="
ADAM_TAG = b",adam="


def fmt(fields: list[Field], raw_float: bool = False) -> str:
    """The struct format of an entry (raw_float: the f32 read as its u32 bits)."""
    out = "<"
    for _, code, n in fields:
        code = "I" if raw_float and code == "f" else code
        out += (f"{n}{code}" if n > 1 else code) if code != "4s" else code
    return out


def size(fields: list[Field]) -> int:
    return struct.calcsize(fmt(fields))


def offsets(fields: list[Field]) -> dict[str, int]:
    """Field name -> byte offset inside its entry."""
    out: dict[str, int] = {}
    pos = 0
    for name, code, n in fields:
        out[name] = pos
        pos += struct.calcsize("<" + code) * n
    return out


HEADER_SIZE = size(HEADER)
TENSOR_ENTRY = size(TENSOR)
LAYER_ENTRY = size(LAYER)
PARAMS_OFF = offsets(LAYER)["params"]
N_PARAMS_MAX = LAYER[-1][2]
N_STATE = 6  # state[0..4) plus state4, state5
INFO_N, TENSOR_N, LAYER_N = len(INFO_ROW), len(TENSOR_ROW), len(LAYER_ROW)
HEADER_FMT, TENSOR_FMT, LAYER_FMT = fmt(HEADER), fmt(TENSOR), fmt(LAYER)
HEADER_OFF, TENSOR_OFF, LAYER_OFF = offsets(HEADER), offsets(TENSOR), offsets(LAYER)

# --------------------------------------------------------------------------
# generated files

ROOT = Path(__file__).resolve().parents[2]
C_HEADER = ROOT / "usermod" / "microtrain" / "mtm_layout.h"
DEVICE_FMT = ROOT / "python_lib" / "microtrain" / "fmt.py"
DEVICE_STUB = ROOT / "stubs" / "microtrain" / "fmt.pyi"
GEN_CMD = "python -m microtrain_tools.mtm_layout"
BEGIN = "# --- generated from tools/microtrain_tools/mtm_layout.py: begin"
END = "# --- generated: end"


def _c_name(s: str) -> str:
    return s.upper()


def c_header() -> str:
    """The text of usermod/microtrain/mtm_layout.h."""
    w = [f"// Generated by `{GEN_CMD}` from tools/microtrain_tools/mtm_layout.py: do not edit.",
         "// clang-format off",
         "// The .mtm layout (docs/format.md): entry sizes, field offsets, accessor rows, codes, limits.",
         "#ifndef MTM_LAYOUT_H", "#define MTM_LAYOUT_H", "",
         f"#define MTM_VERSION_MAJOR {VERSION_MAJOR}u", f"#define MTM_VERSION_MINOR {VERSION_MINOR}u",
         f"#define MTM_HEADER_SIZE {HEADER_SIZE}u", f"#define MTM_TENSOR_ENTRY {TENSOR_ENTRY}u",
         f"#define MTM_LAYER_ENTRY {LAYER_ENTRY}u", f"#define MTM_PARAMS_OFF {PARAMS_OFF}u",
         f"#define MTM_N_PARAMS_MAX {N_PARAMS_MAX}u", f"#define MTM_MAX_TENSORS {MAX_TENSORS}u",
         f"#define MTM_MAX_LAYERS {MAX_LAYERS}u", f"#define MTM_MAX_DIM {MAX_DIM}u",
         f"#define MTM_MAX_ELEMS {MAX_ELEMS}u  // any activation: the kernels' buffer limit",
         f"#define MTM_MAX_NAME {MAX_NAME}u", f"#define MTM_MAX_FUSED {MAX_FUSED}u",
         f"#define MTM_NONE 0x{NONE:X}u", f"#define MTM_NONE16 0x{NONE16:X}u",
         f"#define MTM_SCALE_MIN_BITS {SCALE_MIN_BITS}u  // 2^-{SCALE_EXP} as IEEE binary32 bits",
         f"#define MTM_SCALE_MAX_BITS {SCALE_MAX_BITS}u  // 2^{SCALE_EXP}",
         f"#define MTM_MAX_GAP_HW {MAX_GAP_HW}u  // global_avgpool positions",
         f"#define MTM_MAX_GRAD_TERMS {MAX_GRAD_TERMS}u  // conv k_h*k_w*out_c/groups: grad-input bound",
         f"#define MTM_MAX_CLASSES {MAX_CLASSES}u  // model output values: softmax_xent_s8 classes",
         f"#define MTM_SOFTMAX_SCALE_BITS {SOFTMAX_SCALE_BITS}u  // a SOFTMAX output's scale, 2^-8",
         f"#define MTM_FLAG_TRAINED {FLAG_TRAINED}u", f"#define MTM_FLAG_HAS_STATE {FLAG_HAS_STATE}u",
         f"#define MTM_TFLAG_SIGNAL_1D {TFLAG_SIGNAL_1D}u", f"#define MTM_LFLAG_TRAINED {LFLAG_TRAINED}u", ""]
    for title, prefix, fields in (("header", "MTM_H_", HEADER), ("tensor entry", "MTM_T_", TENSOR),
                                  ("layer entry", "MTM_L_", LAYER)):
        w.append(f"// byte offsets in the {title}")
        for name, off in offsets(fields).items():
            w.append(f"#define {prefix}{_c_name(name)} {off}u")
        w.append("")
    for title, prefix, row in (("mtm_info", "MTM_INFO_", INFO_ROW), ("mtm_tensor", "MTM_TROW_", TENSOR_ROW),
                               ("mtm_layer", "MTM_LROW_", LAYER_ROW)):
        w.append(f"// the int32 row {title} fills: index of each value, and the count")
        for k, name in enumerate(row):
            w.append(f"#define {prefix}{_c_name(name)} {k}")
        w.append("")
    w += [f"#define MTM_INFO_N {INFO_N}", f"#define MTM_TENSOR_N {TENSOR_N}",
          f"#define MTM_LAYER_N {LAYER_N}", ""]
    for title, prefix, items in (("tensor dtype", "MTM_DT_", DTYPES), ("tensor kind", "MTM_K_", KINDS),
                                 ("tensor quantisation", "MTM_Q_", QUANTS),
                                 ("fused activation", "MTM_ACT_", ACTS)):
        w.append(f"// {title}")
        w += [f"#define {prefix}{n} {v}u" for n, _, v in items]
        w.append("")
    w.append("// layer op")
    w += [f"#define MTM_OP_{o[0]} {o[2]}u" for o in OPS]
    w += [f"#define MTM_OP_LAST MTM_OP_{OPS[-1][0]}", "", "#endif", ""]
    return "\n".join(w)


# Every module-level name of fmt.py costs a globals-dict entry in RAM on the device, frozen or
# not: fmt.py gets only the names the device package uses (the host takes them all from here).
# The byte offsets and the accessor rows are the layout's details: the device modules that read
# them get them as private consts in a generated section of their own (`_H_FLAGS = const(12)`:
# inlined by the compiler, no globals entry).


def detail_values() -> dict[str, int]:
    """Name -> value of each byte offset (H_, T_, L_) and accessor-row index (INFO_, TROW_, LROW_)."""
    d = {f"H_{_c_name(n)}": o for n, o in HEADER_OFF.items() if n != "magic"}
    d.update({f"T_{_c_name(n)}": o for n, o in TENSOR_OFF.items() if n != "dtype"})
    d.update({f"L_{_c_name(n)}": o for n, o in LAYER_OFF.items() if n not in ("op", "params")})
    for prefix, row in (("INFO_", INFO_ROW), ("TROW_", TENSOR_ROW), ("LROW_", LAYER_ROW)):
        d.update({f"{prefix}{_c_name(n)}": k for k, n in enumerate(row)})
    return d


_SECTION = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)


def _names(text: str) -> set[str]:
    """The names in a module's code outside its generated section (not comments or strings)."""
    src = io.StringIO(_SECTION.sub("", text)).readline
    return {t.string for t in tokenize.generate_tokens(src) if t.type == tokenize.NAME}


def device_modules() -> list[Path]:
    """The device package's modules other than fmt.py (python_lib/microtrain and pyk/)."""
    return [p for p in sorted(DEVICE_FMT.parent.rglob("*.py")) if p != DEVICE_FMT]


def device_names() -> set[str]:
    """The names the device package's code uses (fmt.py's generated section not counted)."""
    names = _names(DEVICE_FMT.read_text())
    for path in device_modules():
        names |= _names(path.read_text())
    return names


def const_values() -> dict[str, int]:
    """Name -> value of each small-int constant of the layout on the device: the byte offsets,
    the accessor-row indices and every `const()` of fmt.py's full section."""
    found = re.finditer(r"^(\w+) = const\((-?\d+)\)", _device_lines(), re.M)
    return {**{m.group(1): int(m.group(2)) for m in found}, **detail_values()}


def private_section(text: str) -> str:
    """The generated part of a device module other than fmt.py (text: the module): the layout's
    small ints it reads as `_NAME`, private consts."""
    names = _names(text)
    w = [BEGIN, f"# (`{GEN_CMD}`): do not edit by hand.",
         "# The .mtm constants this module reads, private: inlined, no globals entry."]
    w += [f"_{n} = const({v})" for n, v in const_values().items() if "_" + n in names]
    w.append(END)
    return "\n".join(w)


def device_section() -> str:
    """The generated part of python_lib/microtrain/fmt.py (between BEGIN and END)."""
    return "\n".join(_used_lines(_device_lines().split("\n"), device_names()))


def _device_lines() -> str:
    """fmt.py's section with every name of the layout (device_section keeps the used ones)."""
    w = [BEGIN, f"# (`{GEN_CMD}`): do not edit by hand.",
         f"MAGIC = {MAGIC!r}", f"VERSION_MAJOR = const({VERSION_MAJOR})",
         f"VERSION_MINOR = const({VERSION_MINOR})",
         f"HEADER_SIZE = const({HEADER_SIZE})", f"TENSOR_ENTRY = const({TENSOR_ENTRY})",
         f"LAYER_ENTRY = const({LAYER_ENTRY})",
         f"PARAMS_OFF = const({PARAMS_OFF})  # the params in a layer entry",
         f"N_PARAMS_MAX = const({N_PARAMS_MAX})", f"MAX_TENSORS = const({MAX_TENSORS})",
         f"MAX_LAYERS = const({MAX_LAYERS})", f"MAX_DIM = const({MAX_DIM})",
         f"MAX_ELEMS = const({MAX_ELEMS})  # 2^26: the kernels' largest tensor / buffer (checks.c)",
         f"MAX_NAME = const({MAX_NAME})", f"MAX_FUSED = const({MAX_FUSED})",
         f"NONE = 0x{NONE:X}  # \"no tensor\" in the file (not const(): a big int on 32-bit ports)",
         "NONE_I32 = const(-1)  # the same as the accessors (mtm_tensor / mtm_layer) report it",
         f"SCALE_MIN_BITS = const({SCALE_MIN_BITS})  # 2^-{SCALE_EXP}: scales' range as float32 bits",
         f"SCALE_MAX_BITS = {SCALE_MAX_BITS}  # 2^{SCALE_EXP} (not const(): a big int on 32-bit ports)",
         f"MAX_GAP_HW = const({MAX_GAP_HW})", f"MAX_GRAD_TERMS = const({MAX_GRAD_TERMS})",
         f"MAX_CLASSES = const({MAX_CLASSES})",
         f"SOFTMAX_SCALE_BITS = const({SOFTMAX_SCALE_BITS})  # a SOFTMAX output's scale 2^-8 as float32 bits",
         f"SOFTMAX_ZP = const({SOFTMAX_ZP})  # a SOFTMAX output's zero point",
         "# the trainer record (docs/format.md): tag + 8 or 16 hex digits (+ ADAM_TAG + 16 for Adam) + NUL",
         f"TRAINER_TAG = {TRAINER_TAG!r}", f"ADAM_TAG = {ADAM_TAG!r}",
         f"FLAG_TRAINED = const({FLAG_TRAINED})", f"FLAG_HAS_STATE = const({FLAG_HAS_STATE})",
         f"TFLAG_SIGNAL_1D = const({TFLAG_SIGNAL_1D})", f"LFLAG_TRAINED = const({LFLAG_TRAINED})",
         "# entry formats for struct (the f32 scale read as its bits)",
         f"TENSOR_FMT = {fmt(TENSOR, raw_float=True)!r}",
         f"LAYER_HEAD_FMT = {fmt(LAYER[:LAYER.index(('state4', 'H', 1))])!r}  # op .. state[3]"]
    w.append("# byte offsets in the header, in a tensor entry and in a layer entry")
    w += [f"{n} = const({v})" for n, v in detail_values().items() if n[0] in "HTL" and n[1] == "_"]
    for title, prefix in (("mtm_info", "INFO_"), ("mtm_tensor", "TROW_"), ("mtm_layer", "LROW_")):
        w.append(f"# the int32 row {title} fills: index of each value")
        w += [f"{n} = const({v})" for n, v in detail_values().items() if n.startswith(prefix)]
    w += ["# the lengths of the int32 rows mtm_info, mtm_tensor and mtm_layer fill",
          f"INFO_N = const({INFO_N})", f"TENSOR_N = const({TENSOR_N})", f"LAYER_N = const({LAYER_N})"]
    for title, prefix, items in (("tensor dtype", "DT_", DTYPES), ("tensor kind", "KIND_", KINDS),
                                 ("tensor quantisation", "Q_", QUANTS)):
        w.append(f"# {title}")
        w += [f"{prefix}{n} = const({v})" for n, _, v in items]
    w.append("# layer op and fused activation")
    w += [f"OP_{o[0]} = const({o[2]})" for o in OPS]
    w += [f"ACT_{n} = const({v})" for n, _, v in ACTS]
    w.append(f"N_PARAMS = {tuple([0] + [o[3] for o in OPS])!r}  # params per op (index: OP_*)")
    items = tuple([0] + [ITEMSIZE[v] for _, _, v in DTYPES])
    w.append(f"ITEMSIZE = {items!r}  # bytes per element (index: DT_*)")
    w.append("OP_NAMES = (")
    w += [f"    {n!r}," for n in ["?"] + [o[1].lower() for o in OPS]]
    w.append(")")
    w.append(f"ACT_NAMES = {tuple('' if v == 0 else n.lower() for n, _, v in ACTS)!r}")
    w.append(END)
    return "\n".join(w)


def _used_lines(w: list[str], used: set[str]) -> list[str]:
    """The section w (BEGIN, the header line, ..., END) without the assignments of names the
    device package does not use, nor the comments left with nothing under them."""
    out, pending, seen, keep = w[:2], [], False, True
    for line in w[2:-1]:
        if line.startswith("#"):  # a comment heads the assignments up to the next comment
            if seen:
                pending, seen = [], False
            pending.append(line)
            continue
        if not line.startswith((" ", ")")):  # an assignment (else a continuation line)
            seen, keep = True, line.split("=", 1)[0].strip() in used
        if keep:
            out += pending + [line]
            pending = []
    return out + [w[-1]]


def stub_section() -> str:
    """The generated part of stubs/microtrain/fmt.pyi: each name of device_section() typed."""
    import ast

    w = [BEGIN, f"# (`{GEN_CMD}`): do not edit by hand."]
    for line in device_section().splitlines():
        if line.startswith("#") or line.startswith(" ") or line == ")" or "=" not in line:
            continue
        name, rest = (x.strip() for x in line.split("=", 1))
        node = ast.parse(line if not line.endswith("(") else line + ")").body[0]
        assert isinstance(node, ast.Assign)
        v = node.value
        if isinstance(v, ast.Call):
            v = v.args[0]
        val = ast.literal_eval(v) if not line.endswith("(") else ("op name",)  # OP_NAMES: one per line
        typ = {bytes: "bytes", str: "str", int: "int"}.get(type(val), "")
        if isinstance(val, tuple):
            typ = "tuple[str, ...]" if isinstance(val[0], str) else "tuple[int, ...]"
        note = rest.split("#", 1)[1].strip() if "#" in rest else repr(val)
        note = "op code -> name" if name == "OP_NAMES" else note
        w.append(f"{name}: {typ}  # {note}")
    w.append(END)
    return "\n".join(w)


def _replace_section(path: Path, current: str, section: str) -> str:
    pat = _SECTION
    if len(pat.findall(current)) != 1:
        raise ValueError(f"{path}: needs exactly one generated section ({BEGIN!r} .. {END!r})")
    return pat.sub(lambda _: section, current)


def device_fmt(current: str) -> str:
    """fmt.py with its generated section replaced."""
    return _replace_section(DEVICE_FMT, current, device_section())


def outputs() -> dict[Path, str]:
    """Every generated file -> the text it must have."""
    out = {C_HEADER: c_header(), DEVICE_FMT: device_fmt(DEVICE_FMT.read_text()),
           DEVICE_STUB: _replace_section(DEVICE_STUB, DEVICE_STUB.read_text(), stub_section())}
    for path in device_modules():
        text = path.read_text()
        if BEGIN in text:
            out[path] = _replace_section(path, text, private_section(text))
    return out


def stale() -> list[str]:
    return [str(p.relative_to(ROOT)) for p, text in outputs().items()
            if not p.exists() or p.read_text() != text]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=GEN_CMD, description="write the files generated from the .mtm layout")
    ap.add_argument("--check", action="store_true", help="only say whether they are current (exit 1 if not)")
    a = ap.parse_args(argv)
    if a.check:
        bad = stale()
        for p in bad:
            print(f"stale: {p} (run `{GEN_CMD}`)")
        return 1 if bad else 0
    for p, text in outputs().items():
        if not p.exists() or p.read_text() != text:
            p.write_text(text)
            print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
