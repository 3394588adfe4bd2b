# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# The GRU and LSTM layers' rules of the pure-Python .mtm validator (mtm_loader.py; the C side:
# mtm_rules_rnn.c), imported only for a file with such a layer: a model without
# one never compiles them.
import struct

from microtrain.pyk.checks import _numel, _shape_is

try:
    from micropython import const
except ImportError:  # CPython (the host's tests)
    def const(x):
        return x

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
# The .mtm constants this module reads, private: inlined, no globals entry.
_KIND_CONST = const(1)
_OP_LSTM = const(17)
# --- generated: end

_unp = struct.unpack_from


def rnn_rules(c, L, p, op):
    """op 16 (GRU) or 17 (LSTM): None, or the rule the layer breaks (mtm_rules_rnn.c): x, the
    tables (in1), y, weight, bias, mult, shift."""
    if op == _OP_LSTM:  # gate rows i, f, g, o; 8H requantisations; five 256 B activation tables
        from microtrain.pyk.lstm_s8 import _lstm_check as check

        g, n_rq, lut = 4, 8, 1280
    else:  # r, z, n; 6H; three tables
        from microtrain.pyk.gru_s8 import _gru_check as check

        g, n_rq, lut = 3, 6, 768
    m = check(p[:13])
    if m:
        return m
    T, D, H = p[0], p[1], p[2]
    n_tab = lut + 1024  # the tables, then dtanh's 256 int32
    x, tab, y, w, bias, mult, shift = [c.t(L[k]) for k in range(9, 16)]
    if _numel(x) != T * D or x[4 + x[1]] != D:
        return "input numel != T * D or last dim != D"
    if _numel(y) != T * H or y[4 + y[1]] != H:
        return "output numel != T * H or last dim != H"
    if p[3] != x[12] or y[12] != 0:
        return "x_zp differs from the input's zero point or the output's is not 0"
    if w[0] != 1 or w[3] != 2 or not _shape_is(w, 2, (g * H, D + H)):
        return "weight must be int8 PER_CHANNEL of shape (%dH, D + H)" % g
    if bias[0] != 2 or bias[3] != 3 or not _shape_is(bias, 1, (4 * H,)):
        return "bias must be int32 BIAS of shape (4H,)"
    if (mult[0] != 2 or mult[3] != 0 or not _shape_is(mult, 1, (n_rq * H,)) or shift[0] != 2 or shift[3] != 0
            or not _shape_is(shift, 1, (n_rq * H,))):
        return "mult / shift must be int32 quant NONE of shape (%dH,)" % n_rq
    if tab[2] != _KIND_CONST or tab[0] != 1 or tab[3] != 0 or not _shape_is(tab, 1, (n_tab,)):
        return "tables (in1) must be a CONST int8 quant NONE tensor of shape (%d,)" % n_tab
    b = c.b
    for k in range(4 * H):
        v = _unp("<i", b, bias[9] + 4 * k)[0]
        if v > 1073741824 or v < -1073741824:
            return "|bias| > 2^30"
    for k in range(n_rq * H):
        sv = _unp("<i", b, shift[9] + 4 * k)[0]
        if _unp("<i", b, mult[9] + 4 * k)[0] < 0 or sv < -31 or sv > 31:
            return "mult < 0 or shift outside [-31, 31]"
    for k in range(lut, n_tab, 4):
        if _unp("<i", b, tab[9] + k)[0] < 0:
            return "dtanh (tables[%d:]) < 0" % lut
    return None
