# A GRU or LSTM layer's training (docs/numerics.md, "GRU over a sequence", "LSTM over a
# sequence"; docs/training.md): its backward through time (BACKWARD[16], [17]) and its update
# (backward.Sums.apply). Loaded by plan.backward_plan for a model with a GRU or an LSTM layer:
# a model without one never holds it. The two differ only in their gates (3 or 4 row blocks),
# their scratch and the GRU's b_hn.
import array
import math

from microtrain import backward as B
from microtrain import kern, quant

K = kern.K


def gru(m, bw, cur, scale, ly, j, e, s, policy):
    """Backward through time (gru_s8_backward or lstm_s8_backward, numerics.md): the weight
    gradient summed over the steps into the gradient sums (x part at s_x, h part at s_h, on the
    steps' common 2^A), the error of the input (base scale s * max(s_w) * 2^(A - 8 - R)). Its
    scratch: acc_views[j]."""
    x_t = ly.inputs[0]
    need = x_t in bw.region
    lstm = ly.op == 17
    if not ly.trained:
        if need:
            raise ValueError("backward: a frozen %s layer (%s) passes no error: train it too" %
                             (ly.kind.upper(), ly.name))
        return
    if type(m.update) is not B.Sums:
        raise ValueError("backward: %s layer %s trains with the gradient sums only" %
                         (ly.kind.upper(), ly.name))
    p = ly.params
    t_n, d_n, h_n = p[0], p[1], p[2]
    g_n = 4 if lstm else 3  # the gates' row blocks
    sc = bw.acc_views.get(j)
    if sc is None:  # shifts, acc, int32 gw, gb, a spare ein, dtanh (the tables' last 1 KB)
        z = quant.zeros
        o = 1280 if lstm else 768
        dt = K.mtm_view(memoryview(bytearray(ly.table[o:o + 1024])), 105)  # int32 ('i')
        sc = bw.acc_views[j] = (z("i", t_n), z("i", (g_n + 2) * h_n), z("i", g_n * h_n * (d_n + h_n)),
                                z("i", 4 * h_n), z("b", t_n * d_n), dt)
    dest = B._dest(bw, cur, x_t) if need else sc[4]
    f = K.lstm_s8_backward if lstm else K.gru_s8_backward
    sh = f(p, bw.bufs[x_t], ly.w, ly.wr, sc[5], bw.bufs[ly.output], ly.dtable, e, sc[0], sc[1], sc[2], sc[3],
           dest)
    a = max(sc[0])
    u = math.ldexp(s, a - 8)
    ax = m.tensors[x_t].scale * u
    ah = m.tensors[ly.output].scale * u
    axpy = K.f32_axpy_i32
    gwi, gw = memoryview(sc[2]), memoryview(ly.gw)
    row = d_n + h_n
    for o in range(0, g_n * h_n * row, row):
        axpy(gwi[o:o + d_n], ax, gw[o:o + d_n])
        axpy(gwi[o + d_n:o + row], ah, gw[o + d_n:o + row])
    axpy(sc[3], u, ly.gb)
    if need:
        B._arrive(bw, cur, scale, x_t, dest, math.ldexp(s * ly.ein_top, a + sh - 8 - ly.ein_r))


def apply(ly, mw, mb, t, lr, s_x, r, row):
    """A GRU or LSTM layer's step (numerics.md): update_s8_apply over its gate rows (3H or 4H)
    and their x-scale biases, then every requantisation follows its row's new weight scale (x and
    h parts: the real multiplier times s_w new / old) and a GRU's b_hn (at s_h s_w) takes its
    step; gradient sums zeroed."""
    if mw is not None:
        raise ValueError("%s layer %s: no float32 master copy (not the last layer in mode mixed)" %
                         (ly.kind.upper(), ly.name))
    h_n = ly.params[2]
    h3 = len(ly.w_scale)  # the gate rows: 3H (GRU) or 4H (LSTM)
    old = array.array("f", ly.w_scale)
    mu, shf = ly.mult, ly.shift
    m0, s0 = array.array("i", mu), array.array("i", shf)
    b, gb = memoryview(ly.b), memoryview(ly.gb)
    r = B.optim.F.update_s8_apply(ly.w, ly.w_scale, b[:h3], memoryview(mu)[:h3], memoryview(shf)[:h3], ly.gw,
                                gb[:h3], None, None, t, lr, s_x, s_x, r, row)
    sw = ly.w_scale
    for i in range(2 * h3):
        c = i - h3 if i >= h3 else i
        mu[i], shf[i] = quant.quantize_multiplier(math.ldexp(m0[i], s0[i] - 31) * (sw[c] / old[c]))
    s_h = ly.out_scale
    for c in range(len(ly.b) - h3):  # the GRU's b_hn (H values; an LSTM has none)
        k = 2 * h_n + c
        v = ly.b[h3 + c] * (s_h * old[k]) - lr * gb[h3 + c]
        q = quant.rnd(v / (s_h * sw[k]))
        ly.b[h3 + c] = -1073741824 if q < -1073741824 else (1073741824 if q > 1073741824 else q)
        gb[h3 + c] = 0.0
    ly.refresh_ratios()  # its backward reads them (the carry through W_hh), first trained layer or not
    return r


while len(B.BACKWARD) < 18:  # ops 16 (GRU) and 17 (LSTM) after the 16 of backward.py (0 and 1..15)
    B.BACKWARD.append(gru)
B.Sums.gru_apply = staticmethod(apply)
