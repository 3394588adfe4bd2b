"""The entry points of ``_microtrain``, the native kernel module, declared once.

Every function: its arguments in order (kind, in / out, length rule, optional or
default, the checks.c checks run on it), the buffers that must not share a byte
(``overlaps``) or may be the very same buffer (``same_ok``), the return value and
its docstring. ``python -m microtrain_tools.kernelgen --write`` writes from it
(first line of each: generated): the module table with the argument counts
(usermod/microtrain/mt_funcs.h), the binding's and the C test driver's argument
prologues and kernel calls (usermod/microtrain/mt_bind_gen.h,
tests/c/kernel_driver_gen.h, a marked region of each pure-Python kernel), the stubs
(stubs/_microtrain.pyi), the API table of docs/numerics.md and the bad-input argument
kinds (tests/support/bad_input_specs.py); ``--check`` fails when one is stale.

Kinds: ``desc`` (array('i') parameter block, its op named by its check),
``s8`` (1-byte buffer), ``i32`` (array('i')), ``u32`` (array('I') or ('i')),
``f32`` (array('f')), ``mask`` (None or one byte per channel, 0 = skip),
``buf`` (any byte buffer), ``int``, ``float``, ``view`` (memoryview).
Lengths are in elements, over the descriptor's fields and the other arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("desc", "s8", "i32", "u32", "f32", "mask", "buf", "int", "float", "view")
IOS = ("in", "out", "inout")


@dataclass(frozen=True)
class Arg:
    name: str
    kind: str
    io: str = "in"
    length: str = ""
    optional: bool = False  # None accepted
    default: int | None = None  # a trailing argument that may be left out
    checks: tuple[str, ...] = ()  # checks.c functions applied to it
    bad: str = ""  # the bad-input kind where it is not the one of kind and io


@dataclass(frozen=True)
class Func:
    name: str
    ret: str  # the Python return type: None, int or memoryview
    args: tuple[Arg, ...]
    # The kernel call of the generated bindings (C, over the unpacked arguments, their
    # lengths x_n, the descriptor p); "" where the binding body is hand-written.
    call: str = ""
    returns: str = ""  # what an int return is
    fpu: bool = False  # only where HAS_FLOAT
    overlaps: tuple[tuple[str, str], ...] = ()  # (written, other): no shared byte
    same_ok: tuple[tuple[str, str], ...] = ()  # ... unless the very same buffer
    doc: str = ""

    @property
    def n_min(self) -> int:
        return sum(1 for a in self.args if a.default is None)

    @property
    def n_max(self) -> int:
        return len(self.args)


# update_s8_apply(_keep)'s buffers, in argument order but touched last: no two may share a byte
_APPLY_BUFFERS = ("w", "w_scale", "b", "mult", "shift", "gw", "gb", "master_w", "master_b", "scratch",
                  "touched")


def _pairs(names: tuple[str, ...], read_only: tuple[str, ...] = ()) -> tuple[tuple[str, str], ...]:
    """Every pair of names, in order, but those of two buffers the kernel only reads."""
    return tuple((a, b) for i, a in enumerate(names) for b in names[i + 1:]
                 if not (a in read_only and b in read_only))


@dataclass(frozen=True)
class Section:
    title: str
    funcs: tuple[Func, ...]
    note: str = ""
    kernels: bool = True  # kernels (bad-input specs, API table of docs/numerics.md)
    # the op families of its functions (a natmod's OPS=...): a function belongs to the longest
    # one its name starts with (then "_"); one matching none is in every build
    ops: tuple[str, ...] = ()


# the recurrent layers' section lives in its own file (it reads the classes above)
from microtrain_tools.kernelspec_rnn import LSTM_SECTION, RNN_SECTION  # noqa: E402

# fmt: off
SECTIONS: tuple[Section, ...] = (
    Section('conv2d (desc: 17 int32, docs/numerics.md "conv2d")', ops=("conv2d",), funcs=(
        Func("conv2d_s8_forward", "None",
             call="dil ? mt_conv2d_dil_s8_forward(&pu.d, x, w, bias, mult, shift, y) :"
                  " mt_conv2d_s8_forward(p, x, w, bias, mult, shift, y)",
             args=(
            Arg("desc", "desc", checks=("mt_conv2d_check", "mt_conv2d_dil_check")),
            Arg("x", "s8", length="in_h * in_w * in_c"),
            Arg("w", "s8", length="out_c * k_h * k_w * in_c / groups"),
            Arg("bias", "i32", length="out_c", checks=("mt_bias_check",)),
            Arg("mult", "i32", length="out_c", checks=("mt_requant_params_check",)),
            Arg("shift", "i32", length="out_c"),
            Arg("y", "s8", io="out", length="out_h * out_w * out_c"),
        ), overlaps=(
            ("y", "x"), ("y", "w"),
        ), doc="y = clamp(requant(bias + sum (x - in_zp) * w) + out_zp, act_min, act_max), NHWC / OHWI."),
        Func("conv2d_s8_grad_input", "int",
             call="dil ? mt_conv2d_dil_s8_grad_input(&pu.d, e, w, wr, mask, lo, hi, acc, ein) :"
                  " mt_conv2d_s8_grad_input(p, e, w, wr, mask, lo, hi, acc, ein)",
             returns="shift", args=(
            Arg("desc", "desc", checks=("mt_conv2d_check", "mt_conv2d_dil_check")),
            Arg("e", "s8", length="out_h * out_w * out_c"),
            Arg("w", "s8", length="out_c * k_h * k_w * in_c / groups"),
            Arg("wr", "i32", length="out_c", checks=("mt_wr_check",)),
            Arg("mask", "mask", length="out_c"),
            Arg("acc", "i32", io="out", length="in_h * in_w * in_c"),
            Arg("ein", "s8", io="out", length="in_h * in_w * in_c"),
            Arg("lo", "int", default=-129, checks=("mt_act_lo_check",)),
            Arg("hi", "int", default=128, checks=("mt_act_hi_check", "mt_act_order_check")),
        ), overlaps=(
            ("ein", "e"), ("ein", "acc"), ("acc", "wr"), ("acc", "e"), ("acc", "w"), ("acc", "mask"),
            ("ein", "mask"), ("ein", "w"), ("ein", "wr"),
        ), doc="""
Error of the input from the output error ``e``; ``acc`` is int32 scratch of
in_h * in_w * in_c. Returns the dynamic shift (real scale of ein =
s_e * max(s_w) * 2^(shift - R)). With lo, hi (both or neither), ein holds the input's
producer activation y on entry and ein[i] becomes 0 unless lo < y[i] < hi (relu (zp, 128),
relu6 (zp, q6), none (-129, 128)): the grad input then relu_s8_backward /
relu6_s8_backward on y, the same shift.
"""),
        Func("conv2d_s8_grad_weight", "None",
             call="dil ? mt_conv2d_dil_s8_grad_weight(&pu.d, x, e, mask, gw, gb) :"
                  " mt_conv2d_s8_grad_weight(p, x, e, mask, gw, gb)",
             args=(
            Arg("desc", "desc", checks=("mt_conv2d_check", "mt_conv2d_dil_check")),
            Arg("x", "s8", length="in_h * in_w * in_c"),
            Arg("e", "s8", length="out_h * out_w * out_c"),
            Arg("mask", "mask", length="out_c"),
            Arg("gw", "i32", io="out", length="out_c * k_h * k_w * in_c / groups"),
            Arg("gb", "i32", io="out", length="out_c"),
        ), overlaps=(
            ("gw", "gb"), ("gw", "x"), ("gw", "e"), ("gb", "x"), ("gb", "e"),
        ), doc="Integer weight / bias gradients (written, masked rows set to 0)."),
        Func("conv2d_s8_grad_weight_f32", "None",
             call="dil ? mt_conv2d_dil_s8_grad_weight_f32(&pu.d, x, e, mask, w_scale, b_scale, gw, gb,"
                  " c0) : mt_conv2d_s8_grad_weight_f32(p, x, e, mask, w_scale, b_scale, gw, gb, c0)",
             fpu=True, args=(
            Arg("desc", "desc", checks=("mt_conv2d_check", "mt_conv2d_dil_check")),
            Arg("x", "s8", length="in_h * in_w * in_c"),
            Arg("e", "s8", length="out_h * out_w * out_c"),
            Arg("mask", "mask", length="out_c", checks=("mt_gw_window_mask_check",)),
            Arg("w_scale", "float"),
            Arg("b_scale", "float"),
            Arg("gw", "f32", io="inout", length="out_c * k_h * k_w * in_c / groups"),
            Arg("gb", "f32", io="inout", length="out_c", checks=("mt_gw_window_n_check",)),
            Arg("c0", "int", default=0, checks=("mt_gw_window_c0_check",)),
        ), overlaps=(
            ("gw", "gb"), ("gw", "x"), ("gw", "e"), ("gb", "x"), ("gb", "e"),
        ), doc="""
Adds w_scale * gw_int into float32 gw and b_scale * gb_int into gb (FPU builds only).
Without c0, gw / gb hold every output channel; with c0, they hold the window of
len(gb) channels from c0 (row r = channel c0 + r), and unless that window is the
whole layer every channel outside it must be masked.
"""),
    )),
    Section("linear (desc: 6 int32: in_n, out_n, in_zp, out_zp, act_min, act_max)", ops=("linear",), funcs=(
        Func("linear_s8_forward", "None",
             call="mt_linear_s8_forward(p, x, w, bias, mult, shift, y)",
             args=(
            Arg("desc", "desc", checks=("mt_linear_check",)),
            Arg("x", "s8", length="in_n"),
            Arg("w", "s8", length="in_n * out_n"),
            Arg("bias", "i32", length="out_n", checks=("mt_bias_check",)),
            Arg("mult", "i32", length="out_n", checks=("mt_requant_params_check",)),
            Arg("shift", "i32", length="out_n"),
            Arg("y", "s8", io="out", length="out_n"),
        ), overlaps=(
            ("y", "x"), ("y", "w"),
        )),
        Func("linear_s8_grad_input", "int",
             call="mt_linear_s8_grad_input(p, e, w, wr, mask, lo, hi, acc, ein)",
             returns="shift", args=(
            Arg("desc", "desc", checks=("mt_linear_check",)),
            Arg("e", "s8", length="out_n"),
            Arg("w", "s8", length="in_n * out_n"),
            Arg("wr", "i32", length="out_n", checks=("mt_wr_check",)),
            Arg("mask", "mask", length="out_n"),
            Arg("acc", "i32", io="out", length="in_n"),
            Arg("ein", "s8", io="out", length="in_n"),
            Arg("lo", "int", default=-129, checks=("mt_act_lo_check",)),
            Arg("hi", "int", default=128, checks=("mt_act_hi_check", "mt_act_order_check")),
        ), overlaps=(
            ("ein", "e"), ("ein", "acc"), ("acc", "wr"), ("acc", "e"), ("acc", "w"), ("acc", "mask"),
            ("ein", "mask"), ("ein", "w"), ("ein", "wr"),
        ), doc="lo, hi (both or neither; ein then holds the activation) as conv2d_s8_grad_input's."),
        Func("linear_s8_grad_weight", "None",
             call="mt_linear_s8_grad_weight(p, x, e, mask, gw, gb)",
             args=(
            Arg("desc", "desc", checks=("mt_linear_check",)),
            Arg("x", "s8", length="in_n"),
            Arg("e", "s8", length="out_n"),
            Arg("mask", "mask", length="out_n"),
            Arg("gw", "i32", io="out", length="in_n * out_n"),
            Arg("gb", "i32", io="out", length="out_n"),
        ), overlaps=(
            ("gw", "gb"), ("gw", "x"), ("gw", "e"), ("gb", "x"), ("gb", "e"),
        )),
        Func("linear_s8_grad_weight_f32", "None",
             call="mt_linear_s8_grad_weight_f32(p, x, e, mask, w_scale, b_scale, gw, gb, c0)",
             fpu=True, args=(
            Arg("desc", "desc", checks=("mt_linear_check",)),
            Arg("x", "s8", length="in_n"),
            Arg("e", "s8", length="out_n"),
            Arg("mask", "mask", length="out_n", checks=("mt_gw_window_mask_check",)),
            Arg("w_scale", "float"),
            Arg("b_scale", "float"),
            Arg("gw", "f32", io="inout", length="in_n * out_n"),
            Arg("gb", "f32", io="inout", length="out_n", checks=("mt_gw_window_n_check",)),
            Arg("c0", "int", default=0, checks=("mt_gw_window_c0_check",)),
        ), overlaps=(
            ("gw", "gb"), ("gw", "x"), ("gw", "e"), ("gb", "x"), ("gb", "e"),
        ), doc="FPU builds only; the output window c0 as conv2d_s8_grad_weight_f32's."),
    )),
    Section("activations (y may be x for the forward; backward is in place on e)", ops=("lut",), funcs=(
        Func("relu_s8_forward", "None",
             call="mt_relu_s8_forward(x, y, x_n, zp)",
             args=(
            Arg("x", "s8"),
            Arg("zp", "int", checks=("mt_level_check",)),
            Arg("y", "s8", io="out", length="len(x)"),
        ), overlaps=(
            ("y", "x"),
        ), same_ok=(("y", "x"),)
        ),
        Func("relu6_s8_forward", "None",
             call="mt_relu6_s8_forward(x, y, x_n, zp, q6)",
             args=(
            Arg("x", "s8"),
            Arg("zp", "int", checks=("mt_level_check",)),
            Arg("q6", "int", checks=("mt_q6_check", "mt_level_check")),
            Arg("y", "s8", io="out", length="len(x)"),
        ), overlaps=(
            ("y", "x"),
        ), same_ok=(("y", "x"),)
        ),
        Func("relu_s8_backward", "None",
             call="mt_relu_s8_backward(y, e, y_n, zp)",
             args=(
            Arg("y", "s8"),
            Arg("zp", "int", checks=("mt_level_check",)),
            Arg("e", "s8", io="inout", length="len(y)"),
        ), overlaps=(
            ("e", "y"),
        ), same_ok=(("e", "y"),)
        ),
        Func("relu6_s8_backward", "None",
             call="mt_relu6_s8_backward(y, e, y_n, zp, q6)",
             args=(
            Arg("y", "s8"),
            Arg("zp", "int", checks=("mt_level_check",)),
            Arg("q6", "int", checks=("mt_q6_check", "mt_level_check")),
            Arg("e", "s8", io="inout", length="len(y)"),
        ), overlaps=(
            ("e", "y"),
        ), same_ok=(("e", "y"),)
        ),
        Func("lut_s8_forward", "None",
             call="mt_lut_s8_forward(x, table, y, x_n)",
             args=(
            Arg("x", "s8"),
            Arg("table", "s8", length="256"),
            Arg("y", "s8", io="out", length="len(x)"),
        ), overlaps=(
            ("y", "x"), ("y", "table"),
        ), same_ok=(("y", "x"),)
        , doc="y = table[x + 128] (table: 256 int8)."),
        Func("lut_s8_grad_input", "int",
             call="mt_lut_s8_grad_input(x, e, dtable, ein, x_n)",
             returns="shift", args=(
            Arg("x", "s8"),
            Arg("e", "s8", length="len(x)"),
            Arg("dtable", "i32", length="256", checks=("mt_lut_dtable_check",)),
            Arg("ein", "s8", io="out", length="len(x)"),
        ), overlaps=(
            ("ein", "e"), ("ein", "x"), ("ein", "dtable"),
        ), same_ok=(("ein", "e"),)
        , doc="""
ein = dyn_requant(e * dtable[x + 128]) from the stored input x (dtable: 256 int32,
|d| < 2^24); ein may be e. Returns the shift.
"""),
    )),
    Section("pools (desc: 11 int32)", ops=("maxpool", "avgpool", "global_avgpool"), funcs=(
        Func("maxpool_s8_forward", "None",
             call="mt_maxpool_s8_forward(p, x, y)",
             args=(
            Arg("desc", "desc", checks=("mt_pool_check",)),
            Arg("x", "s8", length="in_h * in_w * c"),
            Arg("y", "s8", io="out", length="out_h * out_w * c"),
        ), overlaps=(
            ("y", "x"),
        )),
        Func("maxpool_s8_grad_input", "int",
             call="mt_maxpool_s8_grad_input(p, x, e, acc, ein)",
             returns="shift", args=(
            Arg("desc", "desc", checks=("mt_pool_check",)),
            Arg("x", "s8", length="in_h * in_w * c"),
            Arg("e", "s8", length="out_h * out_w * c"),
            Arg("acc", "i32", io="out", length="in_h * in_w * c", optional=True,
                checks=("mt_pool_no_acc_check",)),
            Arg("ein", "s8", io="out", length="in_h * in_w * c"),
        ), overlaps=(
            ("ein", "x"), ("ein", "e"), ("ein", "acc"),
        )),
        Func("avgpool_s8_forward", "None",
             call="mt_avgpool_s8_forward(p, x, y)",
             args=(
            Arg("desc", "desc", checks=("mt_pool_check",)),
            Arg("x", "s8", length="in_h * in_w * c"),
            Arg("y", "s8", io="out", length="out_h * out_w * c"),
        ), overlaps=(
            ("y", "x"),
        )),
        Func("avgpool_s8_grad_input", "int",
             call="mt_avgpool_s8_grad_input(p, e, acc, ein)",
             returns="shift", args=(
            Arg("desc", "desc", checks=("mt_pool_check",)),
            Arg("e", "s8", length="out_h * out_w * c"),
            Arg("acc", "i32", io="out", length="in_h * in_w * c", optional=True,
                checks=("mt_pool_no_acc_check",)),
            Arg("ein", "s8", io="out", length="in_h * in_w * c"),
        ), overlaps=(
            ("ein", "e"), ("ein", "acc"),
        )),
        Func("maxpool_s8_grad_input_act", "int",
             call="mt_maxpool_s8_grad_input_act(p, x, e, lo, hi, ein)",
             returns="shift", args=(
            Arg("desc", "desc", checks=("mt_pool_check", "mt_pool_disjoint_check")),
            Arg("x", "s8", length="in_h * in_w * c"),
            Arg("e", "s8", length="out_h * out_w * c"),
            Arg("lo", "int", checks=("mt_act_lo_check",)),
            Arg("hi", "int", checks=("mt_act_hi_check", "mt_act_order_check")),
            Arg("ein", "s8", io="out", length="in_h * in_w * c"),
        ), overlaps=(
            ("ein", "x"), ("ein", "e"),
        ), same_ok=(("ein", "x"),)
        , doc="""
maxpool_s8_grad_input(desc, x, e, None, ein) then ein[i] = 0 unless lo < x[i] < hi (x as
before the call): relu (zp, 128), relu6 (zp, q6), none (-129, 128). Windows must not overlap;
ein may be x itself. Returns the shift.
"""),
        Func("maxpool_s8_grad_input_act_l1", "int",
             call="mt_maxpool_s8_grad_input_act_l1(p, x, e, lo, hi, ein, norms)",
             returns="shift", args=(
            Arg("desc", "desc", checks=("mt_pool_check", "mt_pool_disjoint_check")),
            Arg("x", "s8", length="in_h * in_w * c"),
            Arg("e", "s8", length="out_h * out_w * c"),
            Arg("lo", "int", checks=("mt_act_lo_check",)),
            Arg("hi", "int", checks=("mt_act_hi_check", "mt_act_order_check")),
            Arg("ein", "s8", io="out", length="in_h * in_w * c"),
            Arg("norms", "i32", io="out", length="c"),
        ), overlaps=(
            ("ein", "x"), ("ein", "e"), ("norms", "x"), ("norms", "e"), ("norms", "ein"),
        ), same_ok=(("ein", "x"),)
        , doc="""
maxpool_s8_grad_input_act(desc, x, e, lo, hi, ein) then l1_norm_s8(ein, c, norms): the
sparse policy's channel norms of the pool's producer, formed as the windows are routed.
Returns the shift.
"""),
        Func("avgpool_s8_grad_input_act", "int",
             call="mt_avgpool_s8_grad_input_act(p, y, e, lo, hi, ein)",
             returns="shift", args=(
            Arg("desc", "desc", checks=("mt_pool_check", "mt_pool_disjoint_check")),
            Arg("y", "s8", length="in_h * in_w * c"),
            Arg("e", "s8", length="out_h * out_w * c"),
            Arg("lo", "int", checks=("mt_act_lo_check",)),
            Arg("hi", "int", checks=("mt_act_hi_check", "mt_act_order_check")),
            Arg("ein", "s8", io="out", length="in_h * in_w * c"),
        ), overlaps=(
            ("ein", "y"), ("ein", "e"),
        ), same_ok=(("ein", "y"),)
        , doc="""
avgpool_s8_grad_input(desc, e, None, ein) then ein[i] = 0 unless lo < y[i] < hi, y the
pool's input (lo, hi as maxpool_s8_grad_input_act). Windows must not overlap; ein may be y
itself. Returns the shift.
"""),
        Func("global_avgpool_s8_forward", "None",
             call="mt_global_avgpool_s8_forward(x, hw, c, y)",
             args=(
            Arg("x", "s8", length="hw * c", checks=("mt_hw_c_check",)),
            Arg("hw", "int", checks=("mt_hw_check",)),
            Arg("c", "int", checks=("mt_channels_check",)),
            Arg("y", "s8", io="out", length="c"),
        ), overlaps=(
            ("y", "x"),
        )),
        Func("global_avgpool_s8_grad_input", "None",
             call="mt_global_avgpool_s8_grad_input(e, hw, (int32_t)e_n, ein)",
             args=(
            Arg("e", "s8", checks=("mt_gap_channels_check",)),
            Arg("hw", "int", checks=("mt_hw_check",)),
            Arg("ein", "s8", io="out", length="hw * len(e)"),
        ), overlaps=(
            ("ein", "e"),
        )),
    )),
    Section("residual add (desc: 13 int32)", ops=("add", "conv2d_add"), funcs=(
        Func("add_s8_forward", "None",
             call="mt_add_s8_forward(p, x1, x2, y)",
             args=(
            Arg("desc", "desc", checks=("mt_add_check",)),
            Arg("x1", "s8", length="n"),
            Arg("x2", "s8", length="n"),
            Arg("y", "s8", io="out", length="n"),
        ), overlaps=(
            ("y", "x1"), ("y", "x2"),
        ), same_ok=(("y", "x1"), ("y", "x2"))
        ),
        Func("add_s8_grad_merge", "int",
             call="mt_add_s8_grad_merge(ea, ra, eb, rb, ea_n, out)",
             returns="shift", args=(
            Arg("ea", "s8"),
            Arg("ra", "int", checks=("mt_ratio_check",)),
            Arg("eb", "s8", length="len(ea)"),
            Arg("rb", "int", checks=("mt_ratio_check",)),
            Arg("out", "s8", io="out", length="len(ea)"),
        ), overlaps=(
            ("out", "ea"), ("out", "eb"),
        ), same_ok=(("out", "ea"), ("out", "eb"))
        , doc="out = dyn_requant(ea * ra + eb * rb); returns the shift (ra, rb in 0..2^15)."),
        Func("conv2d_add_s8_forward", "None", args=(
            Arg("desc", "desc", checks=("mt_conv2d_check", "mt_conv2d_dil_check")),
            Arg("x", "s8", length="in_h * in_w * in_c"),
            Arg("w", "s8", length="out_c * k_h * k_w * in_c / groups"),
            Arg("bias", "i32", length="out_c", checks=("mt_bias_check",)),
            Arg("mult", "i32", length="out_c", checks=("mt_requant_params_check",)),
            Arg("shift", "i32", length="out_c"),
            Arg("add_desc", "i32", length="13", checks=("mt_add_check", "mt_conv_add_n_check")),
            Arg("side", "int", checks=("mt_part_check",)),
            Arg("skip", "s8", io="inout", length="out_h * out_w * out_c"),
            Arg("tile", "s8", io="out", length="at least out_w * out_c",
                checks=("mt_tile_check",), bad="skip"),
        ), overlaps=(
            ("skip", "x"), ("skip", "w"), ("tile", "x"), ("tile", "w"), ("tile", "skip"),
        ), doc="""
skip = add_s8_forward(add_desc, conv, skip) (side 1: (skip, conv)), conv = conv2d_s8_forward's
output made a block of rows at a time in tile (at least one row, out_w * out_c; its contents
after the call are undefined): the conv's output never exists whole. Not for dilated convs.
"""),
    )),
    Section("channel concatenation (desc: 10 int32), upsampling (desc: 9 int32)", ops=("concat", "upsample"),
            funcs=(
        Func("concat_s8_forward", "None",
             call="mt_concat_s8_forward(p, x1, x2, y)",
             args=(
            Arg("desc", "desc", checks=("mt_concat_check",)),
            Arg("x1", "s8", length="hw * c1"),
            Arg("x2", "s8", length="hw * c2"),
            Arg("y", "s8", io="out", length="hw * (c1 + c2)"),
        ), overlaps=(
            ("y", "x1"), ("y", "x2"),
        )),
        Func("concat_s8_grad_input", "None",
             call="mt_concat_s8_grad_input(p, e, part, ein)",
             args=(
            Arg("desc", "desc", checks=("mt_concat_check",)),
            Arg("e", "s8", length="hw * (c1 + c2)"),
            Arg("part", "int", checks=("mt_part_check",)),
            Arg("ein", "s8", io="out", length="hw * (c2 if part else c1)"),
        ), overlaps=(
            ("ein", "e"),
        ), doc="The output error's slice of input ``part`` (0 or 1), exact, same scale."),
        Func("upsample_s8_forward", "None",
             call="mt_upsample_s8_forward(p, x, y)",
             args=(
            Arg("desc", "desc", checks=("mt_upsample_check",)),
            Arg("x", "s8", length="in_h * in_w * c"),
            Arg("y", "s8", io="out", length="out_h * out_w * c"),
        ), overlaps=(
            ("y", "x"),
        )),
        Func("upsample_s8_grad_input", "int",
             call="mt_upsample_s8_grad_input(p, e, ein)",
             returns="shift", args=(
            Arg("desc", "desc", checks=("mt_upsample_check",)),
            Arg("e", "s8", length="out_h * out_w * c"),
            Arg("ein", "s8", io="out", length="in_h * in_w * c"),
        ), overlaps=(
            ("ein", "e"),
        ), doc="ein = dyn_requant(sum of the errors each input fed); returns the shift."),
    )),
    Section("loss, sparse updates, misc", funcs=(
        Func("softmax_xent_s8", "int",
             call="mt_softmax_xent_s8(logits, (int32_t)logits_n, label, lut, (int32_t)lut_n, err, stats)",
             returns="shift", args=(
            Arg("logits", "s8", checks=("mt_classes_check",)),
            Arg("label", "int", checks=("mt_label_check",)),
            Arg("lut", "u32", length="1..256", checks=("mt_softmax_lut_check",)),
            Arg("err", "s8", io="out", length="len(logits)"),
            Arg("stats", "i32", io="out", length="3"),
        ), overlaps=(
            ("err", "logits"),
        ), doc="""
Int8 error of the logits (Q15 softmax minus one-hot, dynamically requantised) into
``err``; ``stats`` (3 int32) = [shift, S, qmax]; ``lut`` = uint32 exp table of 1..256
entries (docs/numerics.md).
Returns the shift: real scale of err = 2^(shift - 15).
"""),
        Func("l1_norm_s8", "None",
             call="mt_l1_norm_s8(e, mt_udiv_u32((uint32_t)e_n, (uint32_t)c), c, norms)",
             args=(
            Arg("e", "s8", length="a multiple of c", checks=("mt_l1_norm_len_check",)),
            Arg("c", "int", checks=("mt_channels_check",)),
            Arg("norms", "i32", io="out", length="c"),
        )),
        Func("topk_mask", "None",
             call="mt_topk_mask(norms, (int32_t)norms_n, k, (uint8_t *)mask)",
             args=(
            Arg("norms", "i32", checks=("mt_channel_count_check",)),
            Arg("k", "int", checks=("mt_topk_k_check",)),
            Arg("mask", "s8", io="out", length="len(norms)"),
        ), doc="mask[i] = 1 for the k largest norms (ties to the lower index), else 0."),
        Func("zo_perturb_s8", "None",
             call="mt_zo_perturb_s8(base, base_n, eps, rng, w)",
             args=(
            Arg("base", "s8"),
            Arg("eps", "int", checks=("mt_zo_eps_check",)),
            Arg("rng", "u32", io="inout", length="1"),
            Arg("w", "s8", io="out", length="len(base)"),
        ), overlaps=(
            ("w", "base"), ("w", "rng"), ("rng", "base"),
        ), same_ok=(("w", "base"),)
        , doc="""
w = clamp(base + eps z, -127, 127), z = +-1 from the xorshift32 state rng[0] (advanced);
w may be base itself. eps in -127..127.
"""),
        Func("zo_perturb_h_s8", "None",
             call="mt_zo_perturb_h_s8(base, base_n, eps, (uint32_t)row, (uint32_t)i0, rng, w)",
             args=(
            Arg("base", "s8"),
            Arg("eps", "int", checks=("mt_zo_eps_check",)),
            Arg("rng", "u32", io="inout", length="1"),
            Arg("row", "int", checks=("mt_zo_index_check",)),
            Arg("i0", "int", checks=("mt_zo_index_check",)),
            Arg("w", "s8", io="out", length="len(base)"),
        ), overlaps=(
            ("w", "base"), ("w", "rng"), ("rng", "base"),
        ), same_ok=(("w", "base"),)
        , doc="""
w = clamp(base + eps h z, -127, 127): z as zo_perturb_s8's, h[i] = -1 where popcount(row &
(i0 + i)) is odd, else +1 (a Hadamard row). row, i0 in 0..2^24 - 1.
"""),
        Func("zo_update_s8", "None",
             call="mt_zo_update_s8(base, base_n, step, rng, w)",
             args=(
            Arg("base", "s8"),
            Arg("step", "int", checks=("mt_zo_step_check",)),
            Arg("rng", "u32", io="inout", length="2"),
            Arg("w", "s8", io="out", length="len(base)"),
        ), overlaps=(
            ("w", "base"), ("w", "rng"), ("rng", "base"),
        ), same_ok=(("w", "base"),)
        , doc="""
w = clamp(base - sign(step) m z, -127, 127): z from rng[0] as zo_perturb_s8's, m =
|step| / 2^16 stochastically rounded by draws from rng[1] (both advanced). |step| <= 255 * 2^16.
"""),
        Func("dyn_requant_s8", "int",
             call="mt_dyn_requant_s8(acc, acc_n, out)",
             returns="shift", args=(
            Arg("acc", "i32"),
            Arg("out", "s8", io="out", length="len(acc)"),
        ), overlaps=(
            ("out", "acc"),
        )),
        Func("f32_axpy_i32", "None",
             call="mt_f32_axpy_i32(y, x, x_n, a)",
             fpu=True, args=(
            Arg("x", "i32"),
            Arg("a", "float"),
            Arg("y", "f32", io="inout", length="len(x)"),
        ), overlaps=(
            ("y", "x"),
        ), doc="y[i] += float32(a) * float32(x[i]) (FPU builds only)."),
    )),
    Section('optimiser-update primitives (update.c, docs/numerics.md "Update")',
        note="A tensor is len(g) / k channels of k values; ``touched`` = None (every channel) or one byte\n"
        "per channel, 0 = skip the channel. All float32 (FPU builds; update_u8_touch everywhere).", funcs=(
        Func("update_u8_touch", "None",
             call="mt_update_u8_touch((uint8_t *)touched, mask, touched_n)",
             args=(
            Arg("touched", "s8", io="inout"),
            Arg("mask", "mask", length="len(touched)", bad="skip"),
        ), overlaps=(
            ("touched", "mask"),
        ), doc="touched[c] = 1 where mask[c] != 0 (every channel when mask is None)."),
        Func("update_f32_check", "int",
             call="mt_update_f32_check(x, x_n)",
             returns="index or -1", fpu=True, args=(
            Arg("x", "f32", bad="f32any"),
        ), doc="Index of the first inf / NaN in x, or -1."),
        Func("update_f32_decay", "None", fpu=True, args=(
            Arg("g", "f32", io="inout"),
            Arg("k", "int", checks=("mt_update_k_check",)),
            Arg("touched", "mask", length="len(g) / k", bad="skip"),
            Arg("n", "int", checks=("mt_update_n_check",)),
            Arg("wd", "float", checks=("mt_nonneg_check",)),
            Arg("q", "buf", length="len(g), int8 or int32", optional=True, bad="skip"),
            Arg("scale", "f32", length="n_ch", optional=True, bad="skip"),
            Arg("f", "float", checks=("mt_finite_check",), bad="skip"),
            Arg("master", "f32", length="len(g)", optional=True, bad="skip"),
        ), overlaps=(
            ("g", "scale"), ("g", "master"), ("g", "touched"),
        ), doc="""
g = g * (1 / n) + wd * real, real = master[i] or ((float)q[i] * f) * scale[c]
(q int8 or int32).
"""),
        Func("update_f32_standardize", "None",
             call="mt_update_f32_standardize(g, n_ch, k, touched, n)",
             fpu=True, args=(
            Arg("g", "f32", io="inout"),
            Arg("k", "int", checks=("mt_update_k_check",)),
            Arg("touched", "mask", length="len(g) / k", bad="skip"),
            Arg("n", "int", checks=("mt_update_n_check",)),
        ), overlaps=(
            ("g", "touched"),
        ), doc="g = (g / n - mean) / (std + 1e-8) over the touched values."),
        Func("update_f32_axpby", "None",
             call="mt_update_f32_axpby(y, x, n_ch, k, touched, a, b)",
             fpu=True, args=(
            Arg("y", "f32", io="inout"),
            Arg("x", "f32", length="len(y)", bad="f32io"),
            Arg("k", "int", checks=("mt_update_k_check",)),
            Arg("touched", "mask", length="len(y) / k", bad="skip"),
            Arg("a", "float", checks=("mt_finite_check",)),
            Arg("b", "float", checks=("mt_finite_check",)),
        ), overlaps=(
            ("y", "x"), ("y", "touched"),
        ), doc="y = a * y + b * x."),
        Func("update_f32_momentum", "None",
             call="mt_update_f32_momentum(g, v, n_ch, k, touched, mom)",
             fpu=True, args=(
            Arg("g", "f32", io="inout"),
            Arg("v", "f32", io="inout", length="len(g)"),
            Arg("k", "int", checks=("mt_update_k_check",)),
            Arg("touched", "mask", length="len(g) / k", bad="skip"),
            Arg("mom", "float", checks=("mt_unit_check",)),
        ), overlaps=(
            ("v", "g"), ("g", "touched"), ("v", "touched"),
        ), doc="v = mom * v + g; g = v."),
        Func("update_f32_scale", "None",
             call="mt_update_f32_scale(x, n_ch, k, touched, a)",
             fpu=True, args=(
            Arg("x", "f32", io="inout"),
            Arg("k", "int", checks=("mt_update_k_check",)),
            Arg("touched", "mask", length="len(x) / k", bad="skip"),
            Arg("a", "float", checks=("mt_finite_check",)),
        ), overlaps=(
            ("x", "touched"),
        ), doc="x = a * x (a finite): SGD momentum at batch 1 scales v before the sample's gradient."),
        Func("update_f32_adam", "None",
             call="mt_update_f32_adam(g, m, v, n_ch, k, touched, b1, b2, b1t, b2t, eps)",
             fpu=True, args=(
            Arg("g", "f32", io="inout"),
            Arg("m", "f32", io="inout", length="len(g)"),
            Arg("v", "f32", io="inout", length="len(g)"),
            Arg("k", "int", checks=("mt_update_k_check",)),
            Arg("touched", "mask", length="len(g) / k", bad="skip"),
            Arg("b1", "float", checks=("mt_unit_check",)),
            Arg("b2", "float", checks=("mt_unit_check",)),
            Arg("b1t", "float", checks=("mt_unit_check",)),
            Arg("b2t", "float", checks=("mt_unit_check",)),
            Arg("eps", "float", checks=("mt_positive_check",)),
        ), overlaps=(
            ("m", "g"), ("v", "g"), ("v", "m"), ("g", "touched"), ("m", "touched"), ("v", "touched"),
        ), doc="Adam moments and direction with bias correction (b1t = b1^t, b2t = b2^t)."),
        Func("update_bf16_momentum", "None",
             call="mt_update_bf16_momentum(g, v, n_ch, k, touched, mom)",
             fpu=True, args=(
            Arg("g", "f32", io="inout"),
            Arg("v", "s8", io="inout", length="2 * len(g)"),
            Arg("k", "int", checks=("mt_update_k_check",)),
            Arg("touched", "mask", length="len(g) / k", bad="skip"),
            Arg("mom", "float", checks=("mt_closed_unit_check",)),
        ), overlaps=(
            ("v", "g"), ("g", "touched"), ("v", "touched"),
        ), doc="update_f32_momentum with a bfloat16 v (2 B a value, nearest even); mom in [0, 1]."),
        Func("update_bf16_adam", "None",
             call="mt_update_bf16_adam(g, m, v, n_ch, k, touched, b1, b2, b1t, b2t, eps)",
             fpu=True, args=(
            Arg("g", "f32", io="inout"),
            Arg("m", "s8", io="inout", length="2 * len(g)"),
            Arg("v", "s8", io="inout", length="2 * len(g)"),
            Arg("k", "int", checks=("mt_update_k_check",)),
            Arg("touched", "mask", length="len(g) / k", bad="skip"),
            Arg("b1", "float", checks=("mt_unit_check",)),
            Arg("b2", "float", checks=("mt_unit_check",)),
            Arg("b1t", "float", checks=("mt_unit_check",)),
            Arg("b2t", "float", checks=("mt_unit_check",)),
            Arg("eps", "float", checks=("mt_positive_check",)),
        ), overlaps=(
            ("m", "g"), ("v", "g"), ("v", "m"), ("g", "touched"), ("m", "touched"), ("v", "touched"),
        ), doc="update_f32_adam with bfloat16 moments (2 bytes a value, rounded to nearest even)."),
        Func("update_s8_apply", "int", returns="rng", fpu=True, args=(
            Arg("w", "s8", io="inout", length="n_ch * k"),
            Arg("w_scale", "f32", io="inout", length="n_ch in 1..65535", checks=("mt_channel_count_check",)),
            Arg("b", "i32", io="out", length="n_ch"),
            Arg("mult", "i32", io="out", length="n_ch"),
            Arg("shift", "i32", io="out", length="n_ch"),
            Arg("gw", "f32", io="inout", length="len(w)"),
            Arg("gb", "f32", io="inout", length="n_ch"),
            Arg("master_w", "f32", length="len(w)", optional=True, bad="skip"),
            Arg("master_b", "f32", length="n_ch", optional=True, bad="skip"),
            Arg("touched", "mask", length="n_ch", bad="skip"),
            Arg("lr", "float", checks=("mt_nonneg_check",)),
            Arg("s_in", "float", checks=("mt_positive_check",)),
            Arg("s_out", "float", checks=("mt_positive_check",)),
            Arg("rng", "int", checks=("mt_update_rng_check",)),
            Arg("scratch", "f32", io="inout", length="at least n_ch", bad="f32min"),
        ), overlaps=_pairs(_APPLY_BUFFERS), doc="""
The fully quantised step of a layer: w_new = w_real - lr * gw, per-channel refit of
w_scale, requantisation (rng = -1: nearest, else xorshift16 stochastic), bias and mult/shift,
gradient sums zeroed; scratch holds at least len(w_scale) floats (the first used). Returns the
new rng.
"""),
        Func("update_s8_apply_keep", "int", returns="rng", fpu=True, args=(
            Arg("w", "s8", io="inout", length="n_ch * k"),
            Arg("w_scale", "f32", io="inout", length="n_ch in 1..65535", checks=("mt_channel_count_check",)),
            Arg("b", "i32", io="out", length="n_ch"),
            Arg("mult", "i32", io="out", length="n_ch"),
            Arg("shift", "i32", io="out", length="n_ch"),
            Arg("gw", "f32", length="len(w)", bad="f32io"),
            Arg("gb", "f32", length="n_ch", bad="f32io"),
            Arg("master_w", "f32", length="len(w)", optional=True, bad="skip"),
            Arg("master_b", "f32", length="n_ch", optional=True, bad="skip"),
            Arg("touched", "mask", length="n_ch", bad="skip"),
            Arg("lr", "float", checks=("mt_nonneg_check",)),
            Arg("s_in", "float", checks=("mt_positive_check",)),
            Arg("s_out", "float", checks=("mt_positive_check",)),
            Arg("rng", "int", checks=("mt_update_rng_check",)),
            Arg("scratch", "f32", io="inout", length="at least 2 * n_ch", bad="f32min"),
        ), overlaps=_pairs(_APPLY_BUFFERS, read_only=("gw", "gb", "touched")), doc="""
update_s8_apply with gw and gb only read (the optimiser's momentum as the step direction):
the same results bit for bit; scratch holds at least 2 * len(w_scale) floats (new scales, new
biases).
Returns the new rng.
"""),
        Func("update_f32_ratios", "int",
             call="mt_update_f32_ratios(w_scale, (int32_t)w_scale_n, r, wr)",
             returns="index of the first max(w_scale)", fpu=True, args=(
            Arg("w_scale", "f32", length="1..65535",
                checks=("mt_channel_count_check", "mt_scales_check"), bad="f32io"),
            Arg("r", "int", checks=("mt_ratio_r_check",)),
            Arg("wr", "i32", io="out", length="len(w_scale)"),
        ), overlaps=(
            ("wr", "w_scale"),
        ), doc="""
wr[i] = floor((2^r * w_scale[i]) / max(w_scale) + 0.5) in float32 (grad-input ratios).
Returns the index of the first maximum of w_scale.
"""),
    )),
    Section("sequence / attention: mul, matmul (desc: 12 int32), softmax (3), LayerNorm (7)",
            ops=("mul", "matmul", "softmax", "layernorm"), funcs=(
        Func("mul_s8_forward", "None",
             call="mt_mul_s8_forward(p, x1, x2, y)",
             args=(
            Arg("desc", "desc", checks=("mt_mul_check",)),
            Arg("x1", "s8", length="hw * c"),
            Arg("x2", "s8", length="hw2 * c2"),
            Arg("y", "s8", io="out", length="hw * c"),
        ), overlaps=(
            ("y", "x1"), ("y", "x2"),
        ), same_ok=(("y", "x1"), ("y", "x2")),
            doc="y = clamp(requant((x1 - in1_zp) * (x2 - in2_zp)) + out_zp), x2 broadcast (hw2, c2 = 1)."),
        Func("mul_s8_grad_x1", "int",
             call="mt_mul_s8_grad_x1(p, e, x2, ein)",
             returns="shift", args=(
            Arg("desc", "desc", checks=("mt_mul_check",)),
            Arg("e", "s8", length="hw * c"),
            Arg("x2", "s8", length="hw2 * c2"),
            Arg("ein", "s8", io="out", length="hw * c"),
        ), overlaps=(
            ("ein", "e"), ("ein", "x2"),
        ), same_ok=(("ein", "e"),),
            doc="ein = dyn_requant(e * (x2 - in2_zp)); base scale s_e * s_2; ein may be e."),
        Func("mul_s8_grad_x2", "int",
             call="mt_mul_s8_grad_x2(p, e, x1, acc, ein)",
             returns="shift", args=(
            Arg("desc", "desc", checks=("mt_mul_check",)),
            Arg("e", "s8", length="hw * c"),
            Arg("x1", "s8", length="hw * c"),
            Arg("acc", "i32", io="out", length="hw2 * c2"),
            Arg("ein", "s8", io="out", length="hw2 * c2"),
        ), overlaps=(
            ("ein", "e"), ("ein", "x1"), ("ein", "acc"), ("acc", "e"), ("acc", "x1"),
        ), doc="""
ein = dyn_requant(acc), acc[j] = sum of e * (x1 - in1_zp) over the elements that read x2[j]
(int32 scratch of len(x2)); base scale s_e * s_1.
"""),
        Func("matmul_s8_forward", "None",
             call="mt_matmul_s8_forward(p, a, b, y)",
             args=(
            Arg("desc", "desc", checks=("mt_matmul_check",)),
            Arg("a", "s8", length="heads * rows * inner"),
            Arg("b", "s8", length="heads * inner * cols"),
            Arg("y", "s8", io="out", length="heads * rows * cols"),
        ), overlaps=(
            ("y", "a"), ("y", "b"),
        ), doc="y = clamp(requant(sum (a - a_zp) * (b - b_zp)) + out_zp): A B, A B^T with tb 1; per head."),
        Func("matmul_s8_grad_a", "int",
             call="mt_matmul_s8_grad_a(p, e, b, acc, ein)",
             returns="shift", args=(
            Arg("desc", "desc", checks=("mt_matmul_check",)),
            Arg("e", "s8", length="heads * rows * cols"),
            Arg("b", "s8", length="heads * inner * cols"),
            Arg("acc", "i32", io="out", length="heads * rows * inner"),
            Arg("ein", "s8", io="out", length="heads * rows * inner"),
        ), overlaps=(
            ("ein", "e"), ("ein", "b"), ("ein", "acc"), ("acc", "e"), ("acc", "b"),
        ), doc="Error of a (acc: int32 scratch of len(a)); base scale s_e * s_b."),
        Func("matmul_s8_grad_b", "int",
             call="mt_matmul_s8_grad_b(p, e, a, acc, ein)",
             returns="shift", args=(
            Arg("desc", "desc", checks=("mt_matmul_check",)),
            Arg("e", "s8", length="heads * rows * cols"),
            Arg("a", "s8", length="heads * rows * inner"),
            Arg("acc", "i32", io="out", length="heads * inner * cols"),
            Arg("ein", "s8", io="out", length="heads * inner * cols"),
        ), overlaps=(
            ("ein", "e"), ("ein", "a"), ("ein", "acc"), ("acc", "e"), ("acc", "a"),
        ), doc="Error of b, laid out as b (acc: int32 scratch of len(b)); base scale s_e * s_a."),
        Func("softmax_s8_forward", "None",
             call="mt_softmax_s8_forward(p, x, lut, (int32_t)lut_n, y)",
             args=(
            Arg("desc", "desc", checks=("mt_softmax_check",)),
            Arg("x", "s8", length="outer * n * inner"),
            Arg("lut", "u32", length="1..256", checks=("mt_softmax_lut_check",)),
            Arg("y", "s8", io="out", length="outer * n * inner"),
        ), overlaps=(
            ("y", "x"), ("y", "lut"),
        ), same_ok=(("y", "x"),), doc="""
Softmax over the n of outer x n x inner: y = round(256 * p) - 128 (scale 1/256, zero point
-128), p from softmax_xent_s8's exp table ``lut`` of x's scale; y may be x.
"""),
        Func("softmax_s8_grad_input", "int",
             call="mt_softmax_s8_grad_input(p, y, e, ein)",
             returns="shift", args=(
            Arg("desc", "desc", checks=("mt_softmax_check",)),
            Arg("y", "s8", length="outer * n * inner"),
            Arg("e", "s8", length="outer * n * inner"),
            Arg("ein", "s8", io="out", length="outer * n * inner"),
        ), overlaps=(
            ("ein", "e"), ("ein", "y"),
        ), same_ok=(("ein", "e"),),
            doc="ein = dyn_requant(u * (256 e - sum u e)), u = y + 128 (stored output); base s_e / 2^16."),
        Func("layernorm_s8_forward", "None",
             call="mt_layernorm_s8_forward(p, x, y)",
             args=(
            Arg("desc", "desc", checks=("mt_layernorm_check",)),
            Arg("x", "s8", length="rows * c"),
            Arg("y", "s8", io="out", length="rows * c"),
        ), overlaps=(
            ("y", "x"),
        ), same_ok=(("y", "x"),),
            doc="LayerNorm's normalisation of each row of c, in integers (no affine); y may be x."),
        Func("layernorm_s8_grad_input", "int",
             call="mt_layernorm_s8_grad_input(p, x, e, ein)",
             returns="shift", args=(
            Arg("desc", "desc", checks=("mt_layernorm_check",)),
            Arg("x", "s8", length="rows * c"),
            Arg("e", "s8", length="rows * c"),
            Arg("ein", "s8", io="out", length="rows * c"),
        ), overlaps=(
            ("ein", "e"), ("ein", "x"),
        ), same_ok=(("ein", "e"),),
            doc="Error of x from the stored input; base scale s_e / (s_x * 2^8); ein may be e."),
    )),
    RNN_SECTION,
    LSTM_SECTION,
    Section(".mtm model files (docs/format.md)", kernels=False, funcs=(
        Func("mtm_validate", "None", args=(
            Arg("buf", "buf"),
        ), doc="""
Validate a whole .mtm file (every check of docs/format.md, "Validation");
ValueError "mtm_validate: <check> (tensor i | layer i 'name')" on the first failure.
"""),
        Func("mtm_info", "None",
             call="mt_mtm_info(buf, out)",
             args=(
            Arg("buf", "buf", checks=("mt_mtm_check_tables",)),
            Arg("out", "i32", io="out", length="MTM_INFO_N"),
        ), doc="""
Header into out (15 int32): version_major, version_minor, flags, total_len,
n_tensors, n_layers, tensor_table_off, layer_table_off, strings_off, strings_len,
data_off, data_len, input, output, train_steps.
"""),
        Func("mtm_tensor", "None",
             call="mt_mtm_tensor(buf, (uint32_t)i, out)",
             args=(
            Arg("buf", "buf", checks=("mt_mtm_check_tables",)),
            Arg("i", "int", checks=("mt_index_check",)),
            Arg("out", "i32", io="out", length="MTM_TENSOR_N"),
        ), doc="""
Tensor entry i into out (14 int32): dtype, rank, kind, quant, flags, shape[0..4),
data_off, data_len, scale (the float32's bits), zero_point, qscales (-1 = none).
"""),
        Func("mtm_layer", "None",
             call="mt_mtm_layer(buf, (uint32_t)i, out)",
             args=(
            Arg("buf", "buf", checks=("mt_mtm_check_tables",)),
            Arg("i", "int", checks=("mt_index_check",)),
            Arg("out", "i32", io="out", length="MTM_LAYER_N"),
        ), doc="""
Layer entry i into out (23 int32): op, act, n_params, n_inputs, flags, name_off,
name_len, fused_off, fused_len (string offsets absolute in the file), in0, in1, out,
weight, bias, mult, shift, state[0..4) (-1 = none), the absolute file offset of the
layer's int32 params (its kernel descriptor), then state[4], state[5] (Adam's second
moments, format 1.3; -1 = none).
"""),
        Func("mtm_view", "memoryview", args=(
            Arg("view", "view"),
            Arg("typecode", "int"),
        ), doc="""
view (1-byte items over 4 * n bytes, 4-byte aligned) retyped in place to n int32
(typecode ord('i')) or float32 (ord('f')) items and returned: zero-copy tensors of a model
loaded from a bytes-like object. The pure-Python kernel returns a copy (an array).
"""),
    )),

)
# fmt: on

FUNCS: tuple[Func, ...] = tuple(f for s in SECTIONS for f in s.funcs)
BY_NAME: dict[str, Func] = {f.name: f for f in FUNCS}


# ---------------------------------------------------------------------------------------------
# Op families: a natmod built with OPS=... holds only their functions (and those of no family:
# the .mtm accessors, loss, sparse selection, optimiser updates, ReLU, zeroth order); the
# linker drops every kernel no kept function reaches.

# an op made of others: in a build exactly when all of them are (the fused conv + add)
COMBINED: dict[str, tuple[str, ...]] = {"conv2d_add": ("conv2d", "add")}
# every op family a build can name, in spec order
OPS: tuple[str, ...] = tuple(o for s in SECTIONS for o in s.ops if o not in COMBINED)
# named op sets; "core": the layers of the classic CNN / MLP models
PROFILES: dict[str, tuple[str, ...]] = {
    "core": ("conv2d", "linear", "maxpool", "avgpool", "global_avgpool", "add"),
    "all": OPS,
}
# .mtm layer ops whose kernels are in every build
BASE_LAYER_OPS = ("relu", "relu6")


def op_of(f: Func) -> str:
    """f's op family ("" = none: in every build)."""
    for s in SECTIONS:
        if f in s.funcs:
            hits = [o for o in s.ops if f.name.startswith(o + "_")]
            return max(hits, key=len) if hits else ""
    raise KeyError(f.name)


def parse_ops(text: str) -> tuple[str, ...]:
    """The op families of OPS=text: families and profiles separated by ',' or '+', in spec order;
    ValueError naming the valid ones."""
    want: set[str] = set()
    for w in (w.strip() for w in text.replace("+", ",").split(",")):
        if w in PROFILES:
            want.update(PROFILES[w])
        elif w in OPS:
            want.add(w)
        elif w not in BASE_LAYER_OPS:
            raise ValueError(f"unknown op {w!r}: give ops from {', '.join(OPS)} or a profile "
                             f"({', '.join(PROFILES)})")
    return tuple(o for o in OPS if o in want)


def ops_tag(ops: tuple[str, ...]) -> str:
    """The name of a build's op set (its folder build/natmod/<arch>-<tag>): a profile's name
    where the set is one, else the families joined by '+'."""
    for name, prof in PROFILES.items():
        if set(prof) == set(ops):
            return name
    return "+".join(ops)


def in_build(f: Func, ops: tuple[str, ...]) -> bool:
    o = op_of(f)
    return not o or all(p in ops for p in COMBINED.get(o, (o,)))
