"""The C argument prologues of kernelspec.py's entry points, for kernelgen.py to write.

One plan per entry point (its arguments unpacked in the binding's order, each with the
checks.c checks the spec names, then the overlap tests) rendered twice: into
usermod/microtrain/mt_bind_gen.h, where a failed check raises (mt_bind.h's helpers), and
into tests/c/kernel_driver_gen.h, where it records the first failure (kernel_driver.c's
helpers) and the host driver calls the same kernel without MicroPython. Each entry point
gets an argument struct and a prologue that fills it; where the spec gives the kernel
call, the whole function is written, else the hand-written one calls the prologue.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from microtrain_tools.kernelspec import FUNCS, SECTIONS, Arg, Func

# Whole bindings by hand (no generated prologue): their argument rules are their own.
HAND = ("update_s8_apply", "update_s8_apply_keep", "mtm_validate", "mtm_view")
# The prologue stops before this argument; the hand-written body unpacks the rest.
UNTIL = {"update_f32_decay": "q"}
# Overlaps tested by the hand-written body (sizes it computes itself).
OWN_OVERLAPS = ("conv2d_add_s8_forward", "update_f32_decay")
# Checks run after every argument is unpacked (or after the named argument).
LATE = ("mt_bias_check", "mt_requant_params_check", "mt_wr_check", "mt_q6_check")
LATE_AFTER = {"conv2d_add_s8_forward": "shift"}
# Entry points whose prologue is another's but for one argument's name (passed in, t_name):
# one shared prologue, not inlined, for both.
TWINS = {"avgpool_s8_grad_input_act": ("maxpool_s8_grad_input_act", "y", "x")}
TWINNED = {v[0]: (k, v[1], v[2]) for k, v in TWINS.items()}

# The descriptor kind of a desc argument, by its first check.
DESC = {"mt_conv2d_check": "conv2d", "mt_linear_check": "linear", "mt_pool_check": "pool",
        "mt_add_check": "add", "mt_concat_check": "concat", "mt_upsample_check": "upsample",
        "mt_mul_check": "mul", "mt_matmul_check": "matmul", "mt_softmax_check": "softmax",
        "mt_layernorm_check": "layernorm", "mt_gru_check": "gru",
        "mt_lstm_check": "lstm"}
PARAMS_T = {k: f"mt_{k}_params_t" for k in DESC.values()}
NPARAMS = {k: f"MT_{k.upper()}_NPARAMS" for k in DESC.values()}

# checks.c functions: (C arguments, with {x} the checked argument; has a %d vector)
CHECKS: dict[str, tuple[str, bool]] = {
    "mt_level_check": ("{x}", True), "mt_act_lo_check": ("{x}", True), "mt_act_hi_check": ("{x}", True),
    "mt_hw_check": ("{x}", True), "mt_channels_check": ("{x}", True), "mt_ratio_check": ("{x}", True),
    "mt_part_check": ("{x}", True), "mt_zo_eps_check": ("{x}", True), "mt_zo_step_check": ("{x}", True),
    "mt_zo_index_check": ("{x}", True), "mt_update_n_check": ("{x}", True),
    "mt_update_rng_check": ("{x}", True), "mt_ratio_r_check": ("{x}", True),
    "mt_lut_dtable_check": ("{x}", True),
    "mt_q6_check": ("q6, zp", False), "mt_act_order_check": ("lo, hi", False),
    "mt_hw_c_check": ("hw, c", False), "mt_gap_channels_check": ("hw, (uint32_t)e_n", False),
    "mt_classes_check": ("(uint32_t){x}_n", False), "mt_label_check": ("{x}, (uint32_t)logits_n", True),
    "mt_softmax_lut_check": ("{x}, (uint32_t){x}_n", True),
    "mt_l1_norm_len_check": ("(uint32_t)e_n, c", True), "mt_channel_count_check": ("(uint32_t){x}_n", False),
    "mt_topk_k_check": ("{x}, (uint32_t)norms_n", True), "mt_scales_check": ("{x}, (int32_t){x}_n", False),
    "mt_pool_disjoint_check": ("p", False), "mt_conv_add_n_check": ("add_desc->n, mt_conv_out_n(p)", True),
    "mt_tile_check": ("(uint32_t)tile_n, p->out_w * p->out_c", True),
    "mt_index_check": ("{x}, mt_mtm_n_{table}(buf)", True),
    "mt_gru_bias_check": ("{x}, p->h", False), "mt_gru_rq_check": ("mult, {x}, p->h", False),
    "mt_gru_wr_check": ("{x}, p->h", False), "mt_gru_dtanh_check": ("{x}, 256", False),
    "mt_lstm_bias_check": ("{x}, p->h", False), "mt_lstm_rq_check": ("mult, {x}, p->h", False),
    "mt_lstm_wr_check": ("{x}, p->h", False),
}
# Checks a helper runs on the way (the descriptor readers, the optional buffers).
DONE_BY_HELPER = ("mt_conv2d_check", "mt_conv2d_dil_check", "mt_linear_check", "mt_pool_check",
                  "mt_add_check", "mt_concat_check", "mt_upsample_check", "mt_pool_no_acc_check",
                  "mt_mul_check", "mt_matmul_check", "mt_softmax_check", "mt_layernorm_check",
                  "mt_gru_check", "mt_lstm_check", "mt_update_k_check",
                  "mt_gw_window_c0_check", "mt_gw_window_n_check", "mt_gw_window_mask_check",
                  "mt_mtm_check_tables")
FLOAT_CHECKS = ("mt_finite_check", "mt_nonneg_check", "mt_positive_check", "mt_unit_check",
                "mt_closed_unit_check")

# Lengths (the spec's words) that are not products of descriptor fields and arguments.
LENGTH_C = {
    "in_h * in_w * in_c": "mt_conv_in_n(p)", "out_h * out_w * out_c": "mt_conv_out_n(p)",
    "out_c * k_h * k_w * in_c / groups": "mt_conv_w_n(p)",
    "hw * (c2 if part else c1)": "p->hw * (part ? p->c2 : p->c1)", "2 * len(g)": "2 * (int32_t)g_n",
    "hw * len(e)": "hw * (int32_t)e_n", "len(g) / k": "n_ch", "len(x) / k": "n_ch", "len(y) / k": "n_ch",
}
ANY = ("1..256", "a multiple of c", "1..65535")
ELEM = {"s8": 1, "mask": 1, "buf": 1, "i32": 4, "u32": 4, "f32": 4, "desc": 4}
CTYPE = {("s8", "in"): "const int8_t *", ("s8", "out"): "int8_t *", ("s8", "inout"): "int8_t *",
         ("i32", "in"): "const int32_t *", ("i32", "out"): "int32_t *", ("i32", "inout"): "int32_t *",
         ("u32", "in"): "const uint32_t *", ("u32", "out"): "uint32_t *", ("u32", "inout"): "uint32_t *",
         ("f32", "in"): "const float *", ("f32", "out"): "float *", ("f32", "inout"): "float *",
         ("mask", "in"): "const uint8_t *", ("buf", "in"): "const uint8_t *"}
DT = {"s8": "MT_S8", "i32": "MT_I32", "u32": "MT_U32", "f32": "MT_F32"}


@dataclass
class Step:
    kind: str
    name: str = ""
    i: int = -1
    expr: str = ""  # a length, a check's call
    extra: tuple[str, ...] = ()


@dataclass
class Plan:
    func: Func
    members: list[tuple[str, str]] = field(default_factory=list)  # (C type, name)
    steps: list[Step] = field(default_factory=list)
    uses_v: bool = False
    uses_n_args: bool = False


def _desc_kind(a: Arg) -> str:
    return DESC[a.checks[0]] if a.checks and a.checks[0] in DESC else ""


def _fields(p: Plan) -> set[str]:
    return {n for _, n in p.members}


def c_expr(text: str, names: set[str]) -> str:
    """The C of a length or call over the argument struct `a`: argument and derived names
    become a->name, descriptor fields a->p->field."""
    def sub(m: re.Match[str]) -> str:
        w = m.group(0)
        if w in names:
            return "a->" + w
        return w

    return re.sub(r"(?<![.>\w])[A-Za-z_]\w*\b(?!\s*\()", sub, text)


def _length(f: Func, a: Arg, desc: str) -> str | None:
    """The C length of a buffer argument (None: any length, kept in <name>_n)."""
    t = a.length
    if not t or t in ANY or t.startswith("at least") or t.endswith("int8 or int32"):
        return None
    if t in LENGTH_C and (desc == "conv2d" or not LENGTH_C[t].startswith("mt_conv")):
        return LENGTH_C[t]
    m = re.fullmatch(r"len\((\w+)\)", t)
    if m:
        return f"(int32_t){m.group(1)}_n"
    fields = {"in_h", "in_w", "c", "out_h", "out_w", "in_n", "out_n", "out_c", "n", "hw", "c1", "c2",
              "hw2", "rows", "inner", "cols", "outer", "heads"}
    if desc in ("gru", "lstm"):
        fields = {"t", "d", "h"}
    arg_names = {x.name for x in f.args}

    def sub(m: re.Match[str]) -> str:
        w = m.group(0)
        if w in arg_names:
            return w
        return "p->" + w if w in fields and desc else w

    return re.sub(r"[A-Za-z_]\w*", sub, t)


def _deps(expr: str) -> set[str]:
    names = set(re.findall(r"(?<![.>\w])([A-Za-z_]\w*)\b(?!\s*\()", expr))
    return {n for n in names if not n.isupper()} - {"int32_t", "uint32_t", "p"}


def plan(f: Func) -> Plan:
    """The binding's steps for f: the arguments in the spec's order, except that a buffer
    whose length needs a later argument waits for it and an update primitive's k is read
    with its buffer; each check as soon as what it reads is unpacked (LATE ones last);
    then the overlap tests."""
    pl = Plan(f)
    args = list(f.args)
    stop = UNTIL.get(f.name)
    if stop:
        args = args[: [a.name for a in args].index(stop)]
    names = [a.name for a in f.args]
    desc = ""
    have: set[str] = set()
    pending_checks: list[tuple[Arg, str]] = []
    late: list[tuple[Arg, str]] = []
    done: set[str] = set()
    table = "tensors" if f.name == "mtm_tensor" else "layers"

    def member(ctype: str, name: str) -> None:
        if name not in _fields(pl):
            pl.members.append((ctype, name))

    def check_step(a: Arg, chk: str) -> Step:
        cargs, has_v = CHECKS[chk]
        call = f"{chk}({cargs.format(x=a.name, table=table)}" + (", v)" if has_v else ")")
        pl.uses_v |= has_v
        label = a.name
        if chk == "mt_hw_c_check":
            label = "x"
        elif chk in ("mt_gap_channels_check", "mt_l1_norm_len_check"):
            label = "e"
        return Step("check_v" if has_v else "check", label, expr=call)

    queued: set[tuple[str, str]] = set()

    def flush(cur: str = "") -> None:
        # a check runs as soon as every name it reads is unpacked, the argument's own first
        for a, chk in sorted(pending_checks, key=lambda p: p[0].name != cur):
            if _deps(CHECKS[chk][0].format(x=a.name, table=table)) <= have:
                pl.steps.append(check_step(a, chk))
                pending_checks.remove((a, chk))

    deferred: list[Arg] = []
    # k of an update primitive is read with the buffer it divides (mt_update_g)
    kidx = next((i for i, a in enumerate(args) if "mt_update_k_check" in a.checks), None)
    queue = list(args)
    while queue or deferred:
        a = None
        for d in deferred:
            ln = _length(f, d, desc)
            if ln is None or _deps(ln) <= have | {"n_ch"}:
                a = d
                deferred.remove(d)
                break
        if a is None:
            if not queue:
                break
            a = queue.pop(0)
        if a.name in done:
            continue
        i = names.index(a.name)
        ln = _length(f, a, desc)
        late_len = ln is not None and not _deps(ln) <= have | {"n_ch", "p"}
        if a.kind not in ("desc", "int", "float") and late_len:  # global_avgpool's x: after hw, c
            deferred.append(a)
            # a buffer whose length needs later arguments: its checks on them come first
            for chk in a.checks:
                pending_checks.append((a, chk))
                queued.add((a.name, chk))
            continue
        for chk in a.checks:
            if chk in DONE_BY_HELPER or chk in FLOAT_CHECKS or (a.name, chk) in queued:
                continue
            queued.add((a.name, chk))
            (late if chk in LATE else pending_checks).append((a, chk))
        dk = _desc_kind(a)
        if dk:
            un = "pu" if a.name == "desc" else a.name + "_u"
            ptr = "p" if a.name == "desc" else a.name
            member(f"mt_{dk}_desc_u", un)
            member(f"const {PARAMS_T[dk]} *", ptr)
            if dk == "conv2d":
                member("int", "dil")
            pl.steps.append(Step("desc", ptr, i, extra=(dk, un, a.name)))
            have.add(ptr)
            if f.name == "conv2d_add_s8_forward" and dk == "conv2d":
                pl.steps.append(Step("nodil"))
            if a.name == "desc":
                desc = dk
        elif a.kind == "int":
            if a.default is not None:
                if a.name == "lo":  # lo, hi: both or neither (mt_grad_act)
                    member("int32_t", "lo")
                    member("int32_t", "hi")
                    pl.steps.append(Step("grad_act"))
                    pl.uses_n_args = True
                    have |= {"lo", "hi"}
                    done |= {"lo", "hi"}
                    pending_checks[:] = [(x, c) for x, c in pending_checks if x.name not in ("lo", "hi")]
                    flush()
                    continue
                done.add(a.name)
                continue  # c0: read by the window (gw)
            member("int32_t", a.name)
            own = [c for c in a.checks if CHECKS.get(c, ("", False))[0] == "{x}" and c not in LATE]
            if own:  # the int with its first check in one call (mt_int_v)
                queued.add((a.name, own[0]))
                pending_checks[:] = [(x, c) for x, c in pending_checks if (x.name, c) != (a.name, own[0])]
            pl.steps.append(Step("int", a.name, i, expr=own[0] if own else ""))
        elif a.kind == "float":
            member("float", a.name)
            fc = [c for c in a.checks if c in FLOAT_CHECKS]
            pl.steps.append(Step("float", a.name, i, expr=fc[0] if fc else ""))
        elif a.kind == "mask":
            member("const uint8_t *", a.name)
            pl.steps.append(Step("mask", a.name, i, expr=ln or ""))
        elif a.kind == "buf":
            member("const uint8_t *", a.name)
            pl.steps.append(Step("mtm_tables", a.name, i))
        elif a.optional and "mt_pool_no_acc_check" in a.checks:
            member("int32_t *", a.name)
            pl.steps.append(Step("pool_acc", a.name, i, expr=ln or ""))
        elif a.kind == "f32" and a.io == "inout" and ln is None and kidx is not None:
            k = args[kidx]
            member("float *", a.name)
            member("size_t", a.name + "_n")
            member("int32_t", "k")
            member("int32_t", "n_ch")
            pl.steps.append(Step("update_g", a.name, i, extra=(str(names.index(k.name)),)))
            have |= {a.name, a.name + "_n", "k", "n_ch"}
            done.add(k.name)
            kidx = None
            flush(k.name)
            continue
        elif a.name == "gw" and "c0" in names:
            out_c = "p->out_c" if desc == "conv2d" else "p->out_n"
            k = "p->k_h * p->k_w * mt_conv_cpg(p)" if desc == "conv2d" else "p->in_n"
            for n in ("gw", "gb"):
                member("float *", n)
            member("int32_t", "c0")
            member("int32_t", "n_win")
            pl.steps.append(Step("gw_window", "gw", i, extra=(out_c, k)))
            pl.uses_n_args = True
            have |= {"gw", "gb", "c0", "n_win"}
            done |= {"gw", "gb", "c0"}
            continue
        elif a.io == "inout" and ln is None and a.kind == "s8":
            member("int8_t *", a.name)
            member("size_t", a.name + "_n")
            pl.steps.append(Step("inout_any", a.name, i))
            have.add(a.name + "_n")
        else:
            wr = a.io != "in"
            member(CTYPE[(a.kind, a.io)], a.name)
            if ln is None:
                member("size_t", a.name + "_n")
                have.add(a.name + "_n")
            pl.steps.append(Step("buf", a.name, i, expr=ln or "", extra=(a.kind, "1" if wr else "0")))
        have.add(a.name)
        done.add(a.name)
        flush(a.name)
        anchor = LATE_AFTER.get(f.name)
        if anchor == a.name:
            _late(pl, late, check_step)
    if not LATE_AFTER.get(f.name):
        _late(pl, late, check_step)
    assert not pending_checks and not deferred, (f.name, pending_checks, deferred)
    if f.name not in OWN_OVERLAPS:
        _overlaps(pl, desc)
    return pl


def _late(pl: Plan, late: list[tuple[Arg, str]], check_step: Callable[[Arg, str], Step]) -> None:
    f = pl.func
    outn = "p->out_c" if "out_c" in " ".join(a.length for a in f.args) else "p->out_n"
    for a, chk in late:
        if chk == "mt_bias_check":
            pl.steps.append(Step("qparams", "bias", expr=outn))
        elif chk == "mt_requant_params_check":
            continue
        elif chk == "mt_wr_check":
            terms = "p->k_h * p->k_w * opg" if outn == "p->out_c" else "p->out_n"
            pl.steps.append(Step("wr", "wr", expr=f"mt_wr_check(wr, {outn}, {terms})"))
        else:
            pl.steps.append(check_step(a, chk))
    late.clear()


def _bytes(pl: Plan, name: str, desc: str) -> str:
    f = pl.func
    a = next(x for x in f.args if x.name == name)
    if name in ("gw", "gb") and "c0" in {x.name for x in f.args}:
        k = "p->k_h * p->k_w * mt_conv_cpg(p)" if desc == "conv2d" else "p->in_n"
        return "(size_t)(n_win * " + k + ") * 4" if name == "gw" else "(size_t)n_win * 4"
    ln = _length(f, a, desc)
    n = f"{name}_n" if ln is None else ln
    if ln is not None and not re.fullmatch(r"\(int32_t\)\w+_n", ln):
        n = f"(size_t)({n})" if " " in n else f"(size_t){n}"
    elif ln is not None:
        n = ln.replace("(int32_t)", "")
    if ln is None and a.kind == "mask":
        n = "n_ch"
    return n + (" * 4" if ELEM[a.kind] == 4 else "")


GRADS = [("gw", "gb"), ("gw", "x"), ("gw", "e"), ("gb", "x"), ("gb", "e")]


def _overlaps(pl: Plan, desc: str) -> None:
    f = pl.func
    pairs = list(f.overlaps)
    opt = {a.name for a in f.args if a.kind == "mask" or a.optional}
    if pairs[:5] == GRADS:
        pl.steps.append(Step("grads", extra=tuple(_bytes(pl, n, desc) for n in ("gw", "gb", "x", "e"))))
        pairs = pairs[5:]
    for o, n in pairs:
        cond = [f"a->{x} != NULL" for x in (o, n) if x in opt]
        helper = "mt_no_overlap_unless_same" if (o, n) in f.same_ok else "mt_no_overlap"
        pl.steps.append(Step("overlap", o, expr=" && ".join(cond),
                             extra=(n, _bytes(pl, o, desc), _bytes(pl, n, desc), helper)))


# --------------------------------------------------------------------------
# rendering


def _struct(pl: Plan) -> list[str]:
    lines = [f"typedef struct {{  // {pl.func.name}"]
    lines += [f"    {t}{'' if t.endswith('*') else ' '}{n};" for t, n in pl.members]
    return lines + [f"}} mt_{pl.func.name}_args_t;"]


def _a(pl: Plan, text: str) -> str:
    """text with every argument-struct name as a->name."""
    return c_expr(text, _fields(pl) | {"opg"}).replace("a->opg", "opg")


def _call(pl: Plan) -> str:
    return c_expr(pl.func.call, _fields(pl)).replace("a->", "a.")


def _bind_step(pl: Plan, s: Step) -> list[str]:
    i = f"args[{s.i}]"
    nm = f'"{s.name}"'
    if s.kind == "desc":
        dk, un, arg = s.extra
        if dk == "conv2d":
            return [f"a->{s.name} = mt_conv2d_desc(fn, {i}, &a->{un}, &a->dil);"]
        if arg != "desc":  # a second descriptor (conv2d_add's add_desc), read as the first
            return [f'mt_desc(fn, "{arg}", {i}, a->{un}.a, {NPARAMS[dk]});', f"a->{s.name} = &a->{un}.s;",
                    f'mt_check(fn, "{arg}", mt_{dk}_check(a->{s.name}));']
        return [f"a->{s.name} = mt_{dk}_desc(fn, {i}, &a->{un});"]
    if s.kind == "nodil":
        return ["if (a->dil) {", '    MT_VALUE_ERR(fn, "desc", MT_MSG_NO_ROW_BLOCK);', "}"]
    if s.kind == "int":
        if s.expr:
            return [f"a->{s.name} = mt_int_v(fn, {nm}, {i}, {s.expr});"]
        return [f"a->{s.name} = mt_int(fn, {nm}, {i});"]
    if s.kind == "float":
        if s.expr:
            return [f"a->{s.name} = mt_fscalar(fn, {nm}, {i}, {s.expr});"]
        return [f"a->{s.name} = mt_float(fn, {nm}, {i});"]
    if s.kind == "mask":
        helper = "mt_mask(fn, " if s.name == "mask" else "mt_touched(fn, "
        return [f"a->{s.name} = {helper}{i}, {_a(pl, s.expr)});"]
    if s.kind == "mtm_tables":
        return [f"a->{s.name} = mt_mtm_tables(fn, {i});"]
    if s.kind == "pool_acc":
        return [f"a->{s.name} = mt_pool_acc(fn, {i}, a->p, {_a(pl, s.expr)});"]
    if s.kind == "update_g":
        return [f"a->{s.name} = mt_update_g(fn, {nm}, {i}, args[{s.extra[0]}], &a->k, &a->{s.name}_n);",
                "a->n_ch = (int32_t)mt_udiv_u32((uint32_t)a->" + s.name + "_n, (uint32_t)a->k);"]
    if s.kind == "gw_window":
        out_c, k = s.extra
        return [f"mt_gw_window(fn, n_args, args, a->mask, {_a(pl, out_c)}, {_a(pl, k)}, "
                "&a->gw, &a->gb, &a->c0, &a->n_win);"]
    if s.kind == "inout_any":
        return [f"(void)mt_in_s8(fn, {nm}, {i}, -1, &a->{s.name}_n);",
                f"a->{s.name} = mt_out_s8(fn, {nm}, {i}, (int32_t)a->{s.name}_n);"]
    if s.kind == "buf":
        kind, wr = s.extra
        t = next(t for t, n in pl.members if n == s.name)
        if s.expr:
            ln = _a(pl, s.expr)
            if kind == "s8":
                return [f"a->{s.name} = mt_{'out' if wr == '1' else 'in'}_s8(fn, {nm}, {i}, {ln}"
                        + (")" if wr == "1" else ", NULL)") + ";"]
            if kind == "i32":
                return [f"a->{s.name} = mt_{'out' if wr == '1' else 'in'}_i32(fn, {nm}, {i}, {ln});"]
            if kind == "f32" and wr == "1":
                return [f"a->{s.name} = mt_out_f32(fn, {nm}, {i}, {ln});"]
            return [f"a->{s.name} = ({t})mt_buf(fn, {nm}, {i}, {DT[kind]}, {ln}, {wr}, NULL);"]
        if kind == "s8" and wr == "0":
            return [f"a->{s.name} = mt_in_s8(fn, {nm}, {i}, -1, &a->{s.name}_n);"]
        return [f"a->{s.name} = ({t})mt_buf(fn, {nm}, {i}, {DT[kind]}, -1, {wr}, &a->{s.name}_n);"]
    if s.kind == "check":
        return [f'mt_check(fn, "{s.name}", {_a(pl, s.expr)});']
    if s.kind == "check_v":
        return [f'mt_check_v(fn, "{s.name}", {_a(pl, s.expr)}, v);']
    if s.kind == "qparams":
        return [f"mt_check_qparams(fn, a->bias, a->mult, a->shift, {_a(pl, s.expr)});"]
    if s.kind == "wr":
        pre = []
        if "opg" in s.expr:
            pre = ["const int32_t opg = (int32_t)mt_udiv_u32((uint32_t)a->p->out_c, (uint32_t)a->p->groups);"]
        return pre + [f'mt_check(fn, "wr", {_a(pl, s.expr)});']
    if s.kind == "grad_act":
        return ["mt_grad_act(fn, n_args, args, &a->lo, &a->hi);"]
    if s.kind == "grads":
        gw, gb, x, e = (_a(pl, t) for t in s.extra)
        return [f"mt_no_overlap_grads(fn, a->gw, {gw}, a->gb, {gb}, a->x, {x}, a->e, {e});"]
    if s.kind == "overlap":
        n, ob, ib, helper = s.extra
        line = f'{helper}(fn, "{s.name}", a->{s.name}, {_a(pl, ob)}, "{n}", a->{n}, {_a(pl, ib)});'
        if s.expr:
            return [f"if ({s.expr}) {{", "    " + line, "}"]
        return [line]
    raise ValueError(s.kind)


def bind_prologue(pl: Plan) -> list[str]:
    f = pl.func
    twin = TWINS.get(f.name)
    shared = TWINNED.get(f.name)
    out: list[str] = []
    if not twin:
        out = _struct(pl)
        head = f"static {'' if shared else 'MT_INLINE '}void mt_{f.name}_args(const char *fn, size_t n_args, "
        extra = ", const char *t_name" if shared else ""
        out.append(head + f"const mp_obj_t *args, mt_{f.name}_args_t *a{extra}) {{")
        if not pl.uses_n_args:
            out.append("    (void)n_args;")
        if pl.uses_v:
            out.append("    int32_t v[MT_MSG_NVALS];")
        for s in pl.steps:
            lines = _bind_step(pl, s)
            if shared:
                lines = [line.replace(f'"{shared[2]}"', "t_name") for line in lines]
            out += ["    " + line for line in lines]
        out.append("}")
    if f.call:
        pro = twin[0] if twin else f.name
        call = _call(pl)
        if twin:
            call = re.sub(rf"\ba\.{twin[1]}\b", f"a.{twin[2]}", call)
        out += [f"static mp_obj_t mod_{f.name}(size_t n_args, const mp_obj_t *args) {{",
                f'    static const char fn[] = "{f.name}";',
                f"    mt_{pro}_args_t a;",
                f"    mt_{pro}_args(fn, n_args, args, &a"
                + (f', "{twin[1]}"' if twin else f', "{shared[2]}"' if shared else "") + ");"]
        if f.ret == "int":
            out.append(f"    return mp_obj_new_int({call});")
        else:
            out += [f"    {call};", "    return mp_const_none;"]
        out.append("}")
    return out


GEN = "kernelgen.py from tools/microtrain_tools/kernelspec.py; do not edit"


def bind_gen_h() -> str:
    out = [f"// Generated by {GEN}.",
           "// clang-format off",
           "// The argument prologues of _microtrain's entry points: per function, a struct of its",
           "// unpacked arguments and mt_<name>_args, which checks and unpacks them in the binding's",
           "// order (mt_bind.h's helpers raise on the first failure), then the overlap tests; and the",
           "// whole binding where the spec gives the kernel call (else it is in mt_bind_*.h).",
           "// Included once, by modmicrotrain.c.",
           "#ifndef MT_BIND_GEN_H", "#define MT_BIND_GEN_H", ""]
    for f in FUNCS:
        if f.name in HAND:
            continue
        body = bind_prologue(plan(f))
        if f.fpu:
            body = ["#if MT_HAS_FLOAT", *body, "#endif"]
        out += body + [""]
    out += ["#endif", ""]
    return "\n".join(out)


def kernel_funcs() -> list[Func]:
    return [f for s in SECTIONS if s.kernels for f in s.funcs]


# --------------------------------------------------------------------------
# tests/c/kernel_driver_gen.h: the same plans over kernel_driver.c's helpers, which record
# the first failure (the prologue then returns 0); the driver tests no overlaps (its case
# buffers are each their own allocation).


def _drv_step(pl: Plan, s: Step) -> list[str]:
    i = s.i
    nm = f'"{s.name}"'
    if s.kind == "desc":
        dk, un, arg = s.extra
        if dk == "conv2d":
            return [f"a->{s.name} = conv_desc(c, {i}, &a->{un}, &a->dil);"]
        if dk == "matmul":  # 11 ints or 12 (heads)
            return [f"a->{s.name} = matmul_desc(c, {i}, &a->{un});", "if (failed(c)) return 0;"]
        return [f'desc_arg(c, {i}, "{arg}", a->{un}.a, {NPARAMS[dk]});',
                f"a->{s.name} = &a->{un}.s;",
                "if (failed(c)) return 0;",
                f'check(c, "{arg}", mt_{dk}_check(a->{s.name}));']
    if s.kind == "nodil":
        return ['if (a->dil) fail(c, "ValueError", "desc", MT_MSG_NO_ROW_BLOCK);']
    if s.kind == "int":
        if s.expr:
            return [f"a->{s.name} = checked_int(c, {i}, {nm}, {s.expr});"]
        return [f"a->{s.name} = int_arg(c, {i}, {nm});"]
    if s.kind == "float":
        if s.expr:
            return [f"a->{s.name} = checked_float(c, {i}, {nm}, {s.expr});"]
        return [f"a->{s.name} = (float)float_arg(c, {i}, {nm});"]
    if s.kind == "mask":
        helper = "mask_arg" if s.name == "mask" else "upd_touched"
        return [f"a->{s.name} = {helper}(c, {i}, {_a(pl, s.expr)});"]
    if s.kind == "pool_acc":
        return [f"a->{s.name} = pool_acc(c, {i}, a->p, {_a(pl, s.expr)});"]
    if s.kind == "update_g":
        return [f"a->{s.name} = upd_g(c, {i}, {nm}, {s.extra[0]}, &a->k, &a->{s.name}_n, &a->n_ch);"]
    if s.kind == "gw_window":
        out_c, k = s.extra
        return [f"gw_window(c, a->mask, {_a(pl, out_c)}, {_a(pl, k)}, &a->gw, &a->gb, &a->c0, &a->n_win);"]
    if s.kind == "inout_any":
        return [f"(void)buf(c, {i}, {nm}, S8, -1, 0, &a->{s.name}_n);",
                f"a->{s.name} = buf(c, {i}, {nm}, S8, (int64_t)a->{s.name}_n, 1, NULL);"]
    if s.kind == "buf":
        kind, wr = s.extra
        dt = {"s8": "S8", "i32": "I32", "u32": "U32", "f32": "F32"}[kind]
        if s.expr:
            return [f"a->{s.name} = buf(c, {i}, {nm}, {dt}, {_a(pl, s.expr)}, {wr}, NULL);"]
        return [f"a->{s.name} = buf(c, {i}, {nm}, {dt}, -1, {wr}, &a->{s.name}_n);"]
    if s.kind == "check":
        return [f'check(c, "{s.name}", {_a(pl, s.expr)});']
    if s.kind == "check_v":
        return [f'check_v(c, "{s.name}", {_a(pl, s.expr)}, v);']
    if s.kind == "qparams":
        n = _a(pl, s.expr)
        return [f'check(c, "bias", mt_bias_check(a->bias, {n}));',
                f'check(c, "mult/shift", mt_requant_params_check(a->mult, a->shift, {n}));']
    if s.kind == "wr":
        pre = []
        if "opg" in s.expr:
            pre = ["const int32_t opg = (int32_t)mt_udiv_u32((uint32_t)a->p->out_c, (uint32_t)a->p->groups);"]
        return pre + [f'check(c, "wr", {_a(pl, s.expr)});']
    if s.kind == "grad_act":
        return ["grad_act(c, &a->lo, &a->hi);"]
    if s.kind in ("grads", "overlap"):
        return []
    raise ValueError(s.kind)


def drv_prologue(pl: Plan) -> list[str]:
    f = pl.func
    twin = TWINS.get(f.name)
    shared = TWINNED.get(f.name)
    out: list[str] = []
    if not twin:
        out = _struct(pl)
        extra = ", const char *t_name" if shared else ""
        out.append(f"static int drv_{f.name}_args(call_t *c, mt_{f.name}_args_t *a{extra}) {{")
        if pl.uses_v:
            out.append("    int32_t v[MT_MSG_NVALS];")
        for s in pl.steps:
            lines = _drv_step(pl, s)
            if not lines:
                continue
            if shared:
                lines = [line.replace(f'"{shared[2]}"', "t_name") for line in lines]
            out += ["    " + line for line in lines] + ["    if (failed(c)) return 0;"]
        out += ["    return 1;", "}"]
    if f.call:
        pro = twin[0] if twin else f.name
        call = _call(pl)
        if twin:
            call = re.sub(rf"\ba\.{twin[1]}\b", f"a.{twin[2]}", call)
        name_arg = f', "{twin[1]}"' if twin else f', "{shared[2]}"' if shared else ""
        out += [f"static int run_{f.name}(call_t *c, int32_t *ret) {{",
                f"    mt_{pro}_args_t a;",
                f"    if (!drv_{pro}_args(c, &a{name_arg})) return 0;"]
        if f.ret == "int":
            out += [f"    *ret = {call};", "    return 1;"]
        else:
            out += ["    (void)ret;", f"    {call};", "    return 0;"]
        out.append("}")
    return out


def driver_gen_h() -> str:
    out = [f"// Generated by {GEN}.",
           "// clang-format off",
           "// The C test driver's argument prologues (kernel_driver.c): per kernel, the binding's",
           "// argument struct and checks in the binding's order (usermod/microtrain/mt_bind_gen.h),",
           "// over the driver's helpers, which record the first failure; the whole runner where",
           "// the spec gives the kernel call; and RUNS, every kernel with its argument counts.",
           "#ifndef KERNEL_DRIVER_GEN_H", "#define KERNEL_DRIVER_GEN_H", ""]
    funcs = [f for f in kernel_funcs() if f.name not in HAND]
    for f in funcs:
        body = drv_prologue(plan(f))
        if f.fpu:
            body = ["#if MT_HAS_FLOAT", *body, "#endif"]
        out += body + [""]
    out += ["// Every kernel: name, runner (NULL: not in this build), fewest and most arguments.",
            "static const run_t RUNS[] = {"]
    for f in kernel_funcs():
        row = f'    {{"{f.name}", run_{f.name}, {f.n_min}, {f.n_max}}},'
        if f.fpu:
            out += ["#if MT_HAS_FLOAT", row, "#else", row.replace(f"run_{f.name}", "NULL"), "#endif"]
        else:
            out.append(row)
    out += ["};", "", "#endif", ""]
    return "\n".join(out)
