"""The recurrent layers' entry points of the kernel spec (kernelspec.py imports this
section into its SECTIONS; the classes are kernelspec's)."""

from __future__ import annotations

from microtrain_tools.kernelspec import Arg, Func, Section

# fmt: off
RNN_SECTION = Section("recurrent: GRU over a sequence (desc: 13 int32)", ops=("gru",), funcs=(
    Func("gru_s8_forward", "None",
         call="mt_gru_s8_forward(p, x, w, bias, mult, shift, lut, y, keep)",
         args=(
        Arg("desc", "desc", checks=("mt_gru_check",)),
        Arg("x", "s8", length="t * d"),
        Arg("w", "s8", length="3 * h * (d + h)"),
        Arg("bias", "i32", length="4 * h", checks=("mt_gru_bias_check",)),
        Arg("mult", "i32", length="6 * h"),
        Arg("shift", "i32", length="6 * h", checks=("mt_gru_rq_check",)),
        Arg("lut", "s8", length="768"),
        Arg("y", "s8", io="out", length="t * h"),
        Arg("keep", "s8", io="out", length="t * 4 * h"),
    ), overlaps=(
        ("y", "x"), ("y", "w"), ("y", "lut"), ("y", "keep"), ("keep", "x"), ("keep", "w"), ("keep", "lut"),
    ), doc="""
The hidden states y (T x H, h_0 = 0) of nn.GRU over x (T x D); keep gets each step's
r, z, n, hn (T x 4H) for gru_s8_backward.
"""),
    Func("gru_s8_backward", "int",
         call="mt_gru_s8_backward(p, x, w, wr, dtanh, y, keep, e, shifts, acc, gw, gb, ein)",
         returns="shift", args=(
        Arg("desc", "desc", checks=("mt_gru_check",)),
        Arg("x", "s8", length="t * d"),
        Arg("w", "s8", length="3 * h * (d + h)"),
        Arg("wr", "i32", length="3 * h", checks=("mt_gru_wr_check",)),
        Arg("dtanh", "i32", length="256", checks=("mt_gru_dtanh_check",)),
        Arg("y", "s8", length="t * h"),
        Arg("keep", "s8", io="inout", length="t * 4 * h"),
        Arg("e", "s8", length="t * h"),
        Arg("shifts", "i32", io="out", length="t"),
        Arg("acc", "i32", io="out", length="5 * h"),
        Arg("gw", "i32", io="out", length="3 * h * (d + h)"),
        Arg("gb", "i32", io="out", length="4 * h"),
        Arg("ein", "s8", io="out", length="t * d"),
    ), overlaps=(
        ("keep", "x"), ("keep", "w"), ("keep", "y"), ("keep", "e"), ("keep", "wr"), ("keep", "dtanh"),
        ("shifts", "acc"), ("shifts", "gw"), ("shifts", "gb"), ("acc", "gw"), ("acc", "gb"), ("gw", "gb"),
        ("ein", "x"), ("ein", "w"), ("ein", "y"), ("ein", "keep"), ("ein", "e"),
        ("gw", "x"), ("gw", "w"), ("gw", "y"), ("gw", "keep"), ("gw", "e"), ("gw", "wr"), ("gw", "dtanh"),
        ("gb", "x"), ("gb", "y"), ("gb", "keep"), ("gb", "e"), ("gb", "wr"), ("gb", "dtanh"),
        ("acc", "wr"), ("acc", "dtanh"), ("shifts", "wr"), ("shifts", "dtanh"),
        ("ein", "shifts"), ("ein", "acc"), ("ein", "gw"), ("ein", "gb"),
    ), doc="""
Backward through time over the last k steps (desc's k; 0 = all) from the forward's x, y,
keep and the output errors e (T x H): gw (3H x (D + H)) and gb (4H) summed over the steps,
ein (T x D) the input errors. keep comes back holding the step errors; shifts[t] each
step's shift (their max A: gw, gb on U 2^A); acc: 5H int32 scratch. Returns ein's shift.
"""),
))
# fmt: on

# fmt: off
LSTM_SECTION = Section("recurrent: LSTM over a sequence (desc: 13 int32)", ops=("lstm",), funcs=(
    Func("lstm_s8_forward", "None",
         call="mt_lstm_s8_forward(p, x, w, bias, mult, shift, lut, y, keep)",
         args=(
        Arg("desc", "desc", checks=("mt_lstm_check",)),
        Arg("x", "s8", length="t * d"),
        Arg("w", "s8", length="4 * h * (d + h)"),
        Arg("bias", "i32", length="4 * h", checks=("mt_lstm_bias_check",)),
        Arg("mult", "i32", length="8 * h"),
        Arg("shift", "i32", length="8 * h", checks=("mt_lstm_rq_check",)),
        Arg("lut", "s8", length="1280"),
        Arg("y", "s8", io="out", length="t * h"),
        Arg("keep", "s8", io="out", length="t * 6 * h"),
    ), overlaps=(
        ("y", "x"), ("y", "w"), ("y", "lut"), ("y", "keep"), ("keep", "x"), ("keep", "w"), ("keep", "lut"),
    ), doc="""
The hidden states y (T x H, h_0 = c_0 = 0) of nn.LSTM over x (T x D); keep gets each
step's i, f, g, o, c, tanh(c) (T x 6H) for lstm_s8_backward.
"""),
    Func("lstm_s8_backward", "int",
         call="mt_lstm_s8_backward(p, x, w, wr, dtanh, y, keep, e, shifts, acc, gw, gb, ein)",
         returns="shift", args=(
        Arg("desc", "desc", checks=("mt_lstm_check",)),
        Arg("x", "s8", length="t * d"),
        Arg("w", "s8", length="4 * h * (d + h)"),
        Arg("wr", "i32", length="4 * h", checks=("mt_lstm_wr_check",)),
        Arg("dtanh", "i32", length="256", checks=("mt_gru_dtanh_check",)),
        Arg("y", "s8", length="t * h"),
        Arg("keep", "s8", io="inout", length="t * 6 * h"),
        Arg("e", "s8", length="t * h"),
        Arg("shifts", "i32", io="out", length="t"),
        Arg("acc", "i32", io="out", length="6 * h"),
        Arg("gw", "i32", io="out", length="4 * h * (d + h)"),
        Arg("gb", "i32", io="out", length="4 * h"),
        Arg("ein", "s8", io="out", length="t * d"),
    ), overlaps=(
        ("keep", "x"), ("keep", "w"), ("keep", "y"), ("keep", "e"), ("keep", "wr"), ("keep", "dtanh"),
        ("shifts", "acc"), ("shifts", "gw"), ("shifts", "gb"), ("acc", "gw"), ("acc", "gb"), ("gw", "gb"),
        ("ein", "x"), ("ein", "w"), ("ein", "y"), ("ein", "keep"), ("ein", "e"),
        ("gw", "x"), ("gw", "w"), ("gw", "y"), ("gw", "keep"), ("gw", "e"), ("gw", "wr"), ("gw", "dtanh"),
        ("gb", "x"), ("gb", "y"), ("gb", "keep"), ("gb", "e"), ("gb", "wr"), ("gb", "dtanh"),
        ("acc", "wr"), ("acc", "dtanh"), ("shifts", "wr"), ("shifts", "dtanh"),
        ("ein", "shifts"), ("ein", "acc"), ("ein", "gw"), ("ein", "gb"),
    ), doc="""
Backward through time over the last k steps (desc's k; 0 = all) from the forward's x, y,
keep and the output errors e (T x H): gw (4H x (D + H)) and gb (4H) summed over the steps,
ein (T x D) the input errors. keep's first 4H a step come back holding the gate errors;
shifts[t] each step's shift (their max A: gw, gb on U 2^A); acc: 6H int32 scratch.
Returns ein's shift.
"""),
))
# fmt: on
