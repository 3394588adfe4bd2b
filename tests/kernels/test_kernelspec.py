"""The entry-point spec (tools/microtrain_tools/kernelspec.py) against what carries it.

The generated files must be what ``python -m microtrain_tools.kernelgen --write`` writes;
the native module must be the spec: the same names, each taking the spec's number of
arguments (the binding's argument checks run, with the spec's fewest and most; one fewer
or one more is refused before any of them); and the bindings as compiled (the generated
prologues of mt_bind_gen.h, the hand-written bodies and the helpers both call) run the
spec's checks on the spec's arguments and test its overlap pairs: a check the generator
dropped or a hand-written body that skips one is caught here.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from microtrain_tools import kernelgen, kernelgen_py
from microtrain_tools.kernelspec import FUNCS
from support.harness import ROOT, run_micropython
from support.kernel_harness import ensure_natmod


def test_generated_outputs_current() -> None:
    assert kernelgen.stale() == [], "run: python -m microtrain_tools.kernelgen --write"


def test_stale_output_is_caught(tmp_path: Path) -> None:
    for rel in kernelgen.OUTPUTS:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    assert kernelgen.stale(tmp_path) == []
    stub = tmp_path / "stubs" / "_microtrain.pyi"
    text = stub.read_text()
    stub.write_text(text.replace("def relu_s8_forward(x: _In8, zp: int,", "def relu_s8_forward(x: _In8,"))
    assert kernelgen.stale(tmp_path) == ["stubs/_microtrain.pyi"]
    assert kernelgen.write(tmp_path) == ["stubs/_microtrain.pyi"]
    assert kernelgen.stale(tmp_path) == []


def test_pyk_prologues_generated_and_checked(tmp_path: Path) -> None:
    """Every pure-Python kernel outside HAND_PY carries its generated prologue; an edited
    prologue is stale, a removed one is missing."""
    assert kernelgen_py.missing() == []
    pyk = tmp_path / "pyk"
    shutil.copytree(ROOT / "python_lib" / "microtrain" / "pyk", pyk)
    act = pyk / "activation.py"
    text = act.read_text()
    edited = text.replace("if zp < -128 or zp > 127:", "if zp < -127 or zp > 127:", 1)
    assert edited != text and kernelgen_py.module(edited) == text
    a = text.index("def relu_s8_backward(")
    b = text.index(kernelgen_py.END, a) + len(kernelgen_py.END) + 1
    body_only = text[:a] + "def relu_s8_backward(y, zp, e):\n" + text[b:]
    act.write_text(body_only)
    assert kernelgen_py.missing(pyk) == ["relu_s8_backward"]


def test_kernelgen_check_cli() -> None:
    assert kernelgen.main(["--check"]) == 0


def test_spec_is_the_native_module() -> None:
    ensure_natmod()
    spec = {f.name: (f.n_min, f.n_max) for f in FUNCS}
    # For each name: does the call reach the binding's own checks ("name: ..." messages)
    # with n - 1, n_min, n_max and n_max + 1 arguments (all None)?
    src = (
        "import json, _microtrain as m\n"
        f"spec = {json.dumps(spec)}\n"
        "out = {}\n"
        "for name, (lo, hi) in spec.items():\n"
        "    f = getattr(m, name, None)\n"
        "    if f is None:\n"
        "        out[name] = None\n"
        "        continue\n"
        "    seen = []\n"
        "    for n in (lo - 1, lo, hi, hi + 1):\n"
        "        try:\n"
        "            f(*([None] * n))\n"
        "            seen.append('ran')\n"
        "        except (TypeError, ValueError) as e:\n"
        "            seen.append(str(e).startswith(name + ':'))\n"
        "    out[name] = seen\n"
        "print(json.dumps(out))\n"
        "print(json.dumps(sorted(n for n in dir(m) if not n.startswith('_') and n != 'HAS_FLOAT')))\n"
    )
    proc = run_micropython(src)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen_line, names_line = proc.stdout.strip().split("\n")[-2:]
    assert json.loads(names_line) == sorted(spec)
    seen = json.loads(seen_line)
    bad = {n: s for n, s in seen.items() if s != [False, True, True, False]}
    assert not bad, f"argument counts differ from the spec: {bad}"


# --------------------------------------------------------------------------
# the bindings against the spec: each check the spec names is called by the function's
# binding (its prologue, or a helper either calls) on that argument, and its overlap pairs
# are the binding's mt_no_overlap pairs

BIND = ROOT / "usermod" / "microtrain"
# helpers that check an argument on the binding's behalf: helper -> [(argument, check)]
HELPERS = {
    "mt_conv2d_desc": [("desc", "mt_conv2d_check"), ("desc", "mt_conv2d_dil_check")],
    "mt_check_qparams": [("bias", "mt_bias_check"), ("mult", "mt_requant_params_check")],
    "mt_grad_act": [("lo", "mt_act_lo_check"), ("hi", "mt_act_hi_check"), ("hi", "mt_act_order_check")],
    "mt_gw_window": [("c0", "mt_gw_window_c0_check"), ("gb", "mt_gw_window_n_check"),
                     ("mask", "mt_gw_window_mask_check")],
    "mt_pool_acc": [("acc", "mt_pool_no_acc_check")], "mt_update_g": [("k", "mt_update_k_check")],
    "mt_mtm_tables": [("buf", "mt_mtm_check_tables")],
}
GRADS = [("gw", "gb"), ("gw", "x"), ("gw", "e"), ("gb", "x"), ("gb", "e")]


def _bodies() -> dict[str, str]:
    text = "\n".join(p.read_text() for p in sorted(BIND.glob("mt_bind*.h")))
    # the generated prologues: clang-format off, the same layout as the hand-written code
    text = text.replace("static MT_INLINE void", "static void")
    return {m.group(1): m.group(2) for m in re.finditer(
        r"^static [\w *]+?\b(mod_\w+|mt_\w+)\([^)]*\) \{\n(.*?)^\}", text, re.S | re.M)}


def _binding(name: str, bodies: dict[str, str]) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(argument, check) pairs and overlap pairs of one binding, with what its helpers do."""
    body = bodies["mod_" + name]
    for shared in re.findall(r"\b(mt_\w+_args|mt_s8_apply_call)\(fn", body):
        body += bodies[shared]
    t = "x" if name.startswith("max") else "y"
    if "t_name" in body:  # the prologue the two pool _act kernels share: t_name is x or y
        body = body.replace("t_name", f'"{t}"').replace(f"a.{t}", "a.x")
    direct = re.findall(r'mt_check(?:_v)?\(fn, (?:"(\w+)"|(\w+)), (mt_\w+_check)', body)
    checks = {(a or b, c) for a, b, c in direct}
    scalar = r'mt_(?:fscalar|int_v)\(fn, "(\w+)", args\[\d+\], (mt_\w+_check)\)'
    checks |= {(a, c) for a, c in re.findall(scalar, body)}
    checks |= {("desc", f"mt_{op}_check") for op in re.findall(r"mt_(\w+)_desc\(fn, args", body)}
    for helper, done in HELPERS.items():
        if re.search(rf"\b{helper}\(", body):
            checks |= set(done)
    pairs = set(re.findall(r'mt_no_overlap(?:_unless_same)?\(fn, "(\w+)", [^;]*?, "(\w+)", ', body))
    if "mt_no_overlap_grads" in body:
        pairs |= set(GRADS)
    return checks, pairs


def test_spec_checks_and_overlaps_are_the_bindings() -> None:
    bodies = _bodies()
    bad = []
    for f in FUNCS:
        if f.name.startswith("update_s8_apply"):
            continue  # one loop over every pair of its eleven buffers (mt_s8_apply_call)
        checks, pairs = _binding(f.name, bodies)
        spec_checks = {(a.name, c) for a in f.args for c in a.checks}
        if spec_checks != checks:
            bad.append(f"{f.name}: checks spec - binding {sorted(spec_checks - checks)}, "
                       f"binding - spec {sorted(checks - spec_checks)}")
        if set(f.overlaps) != pairs:
            bad.append(f"{f.name}: overlaps spec - binding {sorted(set(f.overlaps) - pairs)}, "
                       f"binding - spec {sorted(pairs - set(f.overlaps))}")
    assert not bad, "\n".join(bad)
