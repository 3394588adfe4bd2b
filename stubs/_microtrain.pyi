"""Type stubs of ``_microtrain``, the native kernel module of microtrain.

The module is either a dynamic native module (``_microtrain.mpy``, ``make natmod``)
or built into the firmware (``usermod/``). The kernels are defined bit for bit
in docs/numerics.md; the ``.mtm`` accessors follow docs/format.md. These stubs are
for editors and type checkers on the host; they are not copied to boards.

Every argument is checked before a kernel runs: TypeError / ValueError whose
message names the function and the argument ("fn: arg: what"). Arguments are
positional only. Buffers:

- int8 input: any 1-byte buffer (``bytes``, ``bytearray``, ``array('b')``,
  ``array('B')``, ``memoryview`` of one); int8 output: a *writable* 1-byte buffer;
- int32: ``array('i')`` (or a memoryview of one); uint32: ``array('I')`` or ``array('i')``;
- float32: ``array('f')``;
- ``mask``: ``None`` (every channel) or a 1-byte buffer of ``out_c`` values, 0 = skip;
- ``acc`` of the max / average pool grad inputs: ``array('i')`` scratch, or ``None``
  (no scratch, the same results) when the windows do not overlap (stride >= kernel);
- descriptors (``desc``): ``array('i')`` of the op's parameter block (docs/numerics.md).

Outputs must not overlap inputs (ValueError). No function allocates.
"""

from array import array
from typing import TypeAlias

_In8: TypeAlias = bytes | bytearray | memoryview | array[int]
_Out8: TypeAlias = bytearray | memoryview | array[int]
_I32: TypeAlias = array[int] | memoryview
_F32: TypeAlias = array[float]
_Mask: TypeAlias = bytes | bytearray | memoryview | array[int] | None
_Buf: TypeAlias = bytes | bytearray | memoryview | array[int]

HAS_FLOAT: bool
"""True where the ``*_f32`` kernels and ``f32_axpy_i32`` exist (builds for cores with
an FPU: x64, armv7emsp, armv7emdp, Cortex-M4F/M7/M33 firmware). False on armv6m
(Cortex-M0+) and on Xtensa / RISC-V firmware: those three functions are then
absent and ``microtrain.kern.f32`` takes them from the pure-Python kernels."""

# -- conv2d (desc: 17 int32, docs/numerics.md "conv2d") -------------------------------------------

def conv2d_s8_forward(desc: _I32, x: _In8, w: _In8, bias: _I32, mult: _I32, shift: _I32, y: _Out8, /) -> None:
    """y = clamp(requant(bias + sum (x - in_zp) * w) + out_zp, act_min, act_max), NHWC / OHWI."""
def conv2d_s8_grad_input(desc: _I32, e: _In8, w: _In8, wr: _I32, mask: _Mask, acc: _I32, ein: _Out8,
                         lo: int = -129, hi: int = 128, /) -> int:
    """Error of the input from the output error ``e``; ``acc`` is int32 scratch of
    in_h * in_w * in_c. Returns the dynamic shift (real scale of ein =
    s_e * max(s_w) * 2^(shift - R)). With lo, hi (both or neither), ein holds the input's
    producer activation y on entry and ein[i] becomes 0 unless lo < y[i] < hi (relu (zp, 128),
    relu6 (zp, q6), none (-129, 128)): the grad input then relu_s8_backward /
    relu6_s8_backward on y, the same shift."""
def conv2d_s8_grad_weight(desc: _I32, x: _In8, e: _In8, mask: _Mask, gw: _I32, gb: _I32, /) -> None:
    """Integer weight / bias gradients (written, masked rows set to 0)."""
def conv2d_s8_grad_weight_f32(desc: _I32, x: _In8, e: _In8, mask: _Mask, w_scale: float, b_scale: float,
                              gw: _F32, gb: _F32, c0: int = 0, /) -> None:
    """Adds w_scale * gw_int into float32 gw and b_scale * gb_int into gb (FPU builds only).
    Without c0, gw / gb hold every output channel; with c0, they hold the window of
    len(gb) channels from c0 (row r = channel c0 + r), and unless that window is the
    whole layer every channel outside it must be masked."""

# -- linear (desc: 6 int32: in_n, out_n, in_zp, out_zp, act_min, act_max) -------------------------

def linear_s8_forward(desc: _I32, x: _In8, w: _In8, bias: _I32, mult: _I32, shift: _I32, y: _Out8,
                      /) -> None: ...
def linear_s8_grad_input(desc: _I32, e: _In8, w: _In8, wr: _I32, mask: _Mask, acc: _I32, ein: _Out8,
                         lo: int = -129, hi: int = 128, /) -> int:
    """lo, hi (both or neither; ein then holds the activation) as conv2d_s8_grad_input's."""
def linear_s8_grad_weight(desc: _I32, x: _In8, e: _In8, mask: _Mask, gw: _I32, gb: _I32, /) -> None: ...
def linear_s8_grad_weight_f32(desc: _I32, x: _In8, e: _In8, mask: _Mask, w_scale: float, b_scale: float,
                              gw: _F32, gb: _F32, c0: int = 0, /) -> None:
    """FPU builds only; the output window c0 as conv2d_s8_grad_weight_f32's."""

# -- activations (y may be x for the forward; backward is in place on e) --------------------------

def relu_s8_forward(x: _In8, zp: int, y: _Out8, /) -> None: ...
def relu6_s8_forward(x: _In8, zp: int, q6: int, y: _Out8, /) -> None: ...
def relu_s8_backward(y: _In8, zp: int, e: _Out8, /) -> None: ...
def relu6_s8_backward(y: _In8, zp: int, q6: int, e: _Out8, /) -> None: ...
def lut_s8_forward(x: _In8, table: _In8, y: _Out8, /) -> None:
    """y = table[x + 128] (table: 256 int8)."""
def lut_s8_grad_input(x: _In8, e: _In8, dtable: _I32, ein: _Out8, /) -> int:
    """ein = dyn_requant(e * dtable[x + 128]) from the stored input x (dtable: 256 int32,
    |d| < 2^24); ein may be e. Returns the shift."""

# -- pools (desc: 11 int32) -----------------------------------------------------------------------

def maxpool_s8_forward(desc: _I32, x: _In8, y: _Out8, /) -> None: ...
def maxpool_s8_grad_input(desc: _I32, x: _In8, e: _In8, acc: _I32 | None, ein: _Out8, /) -> int: ...
def avgpool_s8_forward(desc: _I32, x: _In8, y: _Out8, /) -> None: ...
def avgpool_s8_grad_input(desc: _I32, e: _In8, acc: _I32 | None, ein: _Out8, /) -> int: ...
def maxpool_s8_grad_input_act(desc: _I32, x: _In8, e: _In8, lo: int, hi: int, ein: _Out8, /) -> int:
    """maxpool_s8_grad_input(desc, x, e, None, ein) then ein[i] = 0 unless lo < x[i] < hi (x as
    before the call): relu (zp, 128), relu6 (zp, q6), none (-129, 128). Windows must not overlap;
    ein may be x itself. Returns the shift."""
def maxpool_s8_grad_input_act_l1(desc: _I32, x: _In8, e: _In8, lo: int, hi: int, ein: _Out8, norms: _I32,
                                 /) -> int:
    """maxpool_s8_grad_input_act(desc, x, e, lo, hi, ein) then l1_norm_s8(ein, c, norms): the
    sparse policy's channel norms of the pool's producer, formed as the windows are routed.
    Returns the shift."""
def avgpool_s8_grad_input_act(desc: _I32, y: _In8, e: _In8, lo: int, hi: int, ein: _Out8, /) -> int:
    """avgpool_s8_grad_input(desc, e, None, ein) then ein[i] = 0 unless lo < y[i] < hi, y the
    pool's input (lo, hi as maxpool_s8_grad_input_act). Windows must not overlap; ein may be y
    itself. Returns the shift."""
def global_avgpool_s8_forward(x: _In8, hw: int, c: int, y: _Out8, /) -> None: ...
def global_avgpool_s8_grad_input(e: _In8, hw: int, ein: _Out8, /) -> None: ...

# -- residual add (desc: 13 int32) ----------------------------------------------------------------

def add_s8_forward(desc: _I32, x1: _In8, x2: _In8, y: _Out8, /) -> None: ...
def add_s8_grad_merge(ea: _In8, ra: int, eb: _In8, rb: int, out: _Out8, /) -> int:
    """out = dyn_requant(ea * ra + eb * rb); returns the shift (ra, rb in 0..2^15)."""
def conv2d_add_s8_forward(desc: _I32, x: _In8, w: _In8, bias: _I32, mult: _I32, shift: _I32, add_desc: _I32,
                          side: int, skip: _Out8, tile: _Out8, /) -> None:
    """skip = add_s8_forward(add_desc, conv, skip) (side 1: (skip, conv)), conv = conv2d_s8_forward's
    output made a block of rows at a time in tile (at least one row, out_w * out_c; its contents
    after the call are undefined): the conv's output never exists whole. Not for dilated convs."""

# -- channel concatenation (desc: 10 int32), upsampling (desc: 9 int32) ---------------------------

def concat_s8_forward(desc: _I32, x1: _In8, x2: _In8, y: _Out8, /) -> None: ...
def concat_s8_grad_input(desc: _I32, e: _In8, part: int, ein: _Out8, /) -> None:
    """The output error's slice of input ``part`` (0 or 1), exact, same scale."""
def upsample_s8_forward(desc: _I32, x: _In8, y: _Out8, /) -> None: ...
def upsample_s8_grad_input(desc: _I32, e: _In8, ein: _Out8, /) -> int:
    """ein = dyn_requant(sum of the errors each input fed); returns the shift."""

# -- loss, sparse updates, misc -------------------------------------------------------------------

def softmax_xent_s8(logits: _In8, label: int, lut: array[int], err: _Out8, stats: _I32, /) -> int:
    """Int8 error of the logits (Q15 softmax minus one-hot, dynamically requantised) into
    ``err``; ``stats`` (3 int32) = [shift, S, qmax]; ``lut`` = uint32 exp table of 1..256
    entries (docs/numerics.md).
    Returns the shift: real scale of err = 2^(shift - 15)."""
def l1_norm_s8(e: _In8, c: int, norms: _I32, /) -> None: ...
def topk_mask(norms: _I32, k: int, mask: _Out8, /) -> None:
    """mask[i] = 1 for the k largest norms (ties to the lower index), else 0."""
def zo_perturb_s8(base: _In8, eps: int, rng: array[int], w: _Out8, /) -> None:
    """w = clamp(base + eps z, -127, 127), z = +-1 from the xorshift32 state rng[0] (advanced);
    w may be base itself. eps in -127..127."""
def zo_perturb_h_s8(base: _In8, eps: int, rng: array[int], row: int, i0: int, w: _Out8, /) -> None:
    """w = clamp(base + eps h z, -127, 127): z as zo_perturb_s8's, h[i] = -1 where popcount(row &
    (i0 + i)) is odd, else +1 (a Hadamard row). row, i0 in 0..2^24 - 1."""
def zo_update_s8(base: _In8, step: int, rng: array[int], w: _Out8, /) -> None:
    """w = clamp(base - sign(step) m z, -127, 127): z from rng[0] as zo_perturb_s8's, m =
    |step| / 2^16 stochastically rounded by draws from rng[1] (both advanced). |step| <= 255 * 2^16."""
def dyn_requant_s8(acc: _I32, out: _Out8, /) -> int: ...
def f32_axpy_i32(x: _I32, a: float, y: _F32, /) -> None:
    """y[i] += float32(a) * float32(x[i]) (FPU builds only)."""

# -- optimiser-update primitives (update.c, docs/numerics.md "Update") ----------------------------
# A tensor is len(g) / k channels of k values; ``touched`` = None (every channel) or one byte
# per channel, 0 = skip the channel. All float32 (FPU builds; update_u8_touch everywhere).

def update_u8_touch(touched: _Out8, mask: _Mask, /) -> None:
    """touched[c] = 1 where mask[c] != 0 (every channel when mask is None)."""
def update_f32_check(x: _F32, /) -> int:
    """Index of the first inf / NaN in x, or -1."""
def update_f32_decay(g: _F32, k: int, touched: _Mask, n: int, wd: float, q: _Buf | None, scale: _F32 | None,
                     f: float, master: _F32 | None, /) -> None:
    """g = g * (1 / n) + wd * real, real = master[i] or ((float)q[i] * f) * scale[c]
    (q int8 or int32)."""
def update_f32_standardize(g: _F32, k: int, touched: _Mask, n: int, /) -> None:
    """g = (g / n - mean) / (std + 1e-8) over the touched values."""
def update_f32_axpby(y: _F32, x: _F32, k: int, touched: _Mask, a: float, b: float, /) -> None:
    """y = a * y + b * x."""
def update_f32_momentum(g: _F32, v: _F32, k: int, touched: _Mask, mom: float, /) -> None:
    """v = mom * v + g; g = v."""
def update_f32_scale(x: _F32, k: int, touched: _Mask, a: float, /) -> None:
    """x = a * x (a finite): SGD momentum at batch 1 scales v before the sample's gradient."""
def update_f32_adam(g: _F32, m: _F32, v: _F32, k: int, touched: _Mask, b1: float, b2: float, b1t: float,
                    b2t: float, eps: float, /) -> None:
    """Adam moments and direction with bias correction (b1t = b1^t, b2t = b2^t)."""
def update_bf16_momentum(g: _F32, v: _Out8, k: int, touched: _Mask, mom: float, /) -> None:
    """update_f32_momentum with a bfloat16 v (2 B a value, nearest even); mom in [0, 1]."""
def update_bf16_adam(g: _F32, m: _Out8, v: _Out8, k: int, touched: _Mask, b1: float, b2: float, b1t: float,
                     b2t: float, eps: float, /) -> None:
    """update_f32_adam with bfloat16 moments (2 bytes a value, rounded to nearest even)."""
def update_s8_apply(w: _Out8, w_scale: _F32, b: _I32, mult: _I32, shift: _I32, gw: _F32, gb: _F32,
                    master_w: _F32 | None, master_b: _F32 | None, touched: _Mask, lr: float, s_in: float,
                    s_out: float, rng: int, scratch: _F32, /) -> int:
    """The fully quantised step of a layer: w_new = w_real - lr * gw, per-channel refit of
    w_scale, requantisation (rng = -1: nearest, else xorshift16 stochastic), bias and mult/shift,
    gradient sums zeroed; scratch holds at least len(w_scale) floats (the first used). Returns the
    new rng."""
def update_s8_apply_keep(w: _Out8, w_scale: _F32, b: _I32, mult: _I32, shift: _I32, gw: _F32, gb: _F32,
                         master_w: _F32 | None, master_b: _F32 | None, touched: _Mask, lr: float,
                         s_in: float, s_out: float, rng: int, scratch: _F32, /) -> int:
    """update_s8_apply with gw and gb only read (the optimiser's momentum as the step direction):
    the same results bit for bit; scratch holds at least 2 * len(w_scale) floats (new scales, new
    biases).
    Returns the new rng."""
def update_f32_ratios(w_scale: _F32, r: int, wr: _I32, /) -> int:
    """wr[i] = floor((2^r * w_scale[i]) / max(w_scale) + 0.5) in float32 (grad-input ratios).
    Returns the index of the first maximum of w_scale."""

# -- sequence / attention: mul, matmul (desc: 12 int32), softmax (3), LayerNorm (7) ---------------

def mul_s8_forward(desc: _I32, x1: _In8, x2: _In8, y: _Out8, /) -> None:
    """y = clamp(requant((x1 - in1_zp) * (x2 - in2_zp)) + out_zp), x2 broadcast (hw2, c2 = 1)."""
def mul_s8_grad_x1(desc: _I32, e: _In8, x2: _In8, ein: _Out8, /) -> int:
    """ein = dyn_requant(e * (x2 - in2_zp)); base scale s_e * s_2; ein may be e."""
def mul_s8_grad_x2(desc: _I32, e: _In8, x1: _In8, acc: _I32, ein: _Out8, /) -> int:
    """ein = dyn_requant(acc), acc[j] = sum of e * (x1 - in1_zp) over the elements that read x2[j]
    (int32 scratch of len(x2)); base scale s_e * s_1."""
def matmul_s8_forward(desc: _I32, a: _In8, b: _In8, y: _Out8, /) -> None:
    """y = clamp(requant(sum (a - a_zp) * (b - b_zp)) + out_zp): A B, A B^T with tb 1; per head."""
def matmul_s8_grad_a(desc: _I32, e: _In8, b: _In8, acc: _I32, ein: _Out8, /) -> int:
    """Error of a (acc: int32 scratch of len(a)); base scale s_e * s_b."""
def matmul_s8_grad_b(desc: _I32, e: _In8, a: _In8, acc: _I32, ein: _Out8, /) -> int:
    """Error of b, laid out as b (acc: int32 scratch of len(b)); base scale s_e * s_a."""
def softmax_s8_forward(desc: _I32, x: _In8, lut: array[int], y: _Out8, /) -> None:
    """Softmax over the n of outer x n x inner: y = round(256 * p) - 128 (scale 1/256, zero point
    -128), p from softmax_xent_s8's exp table ``lut`` of x's scale; y may be x."""
def softmax_s8_grad_input(desc: _I32, y: _In8, e: _In8, ein: _Out8, /) -> int:
    """ein = dyn_requant(u * (256 e - sum u e)), u = y + 128 (stored output); base s_e / 2^16."""
def layernorm_s8_forward(desc: _I32, x: _In8, y: _Out8, /) -> None:
    """LayerNorm's normalisation of each row of c, in integers (no affine); y may be x."""
def layernorm_s8_grad_input(desc: _I32, x: _In8, e: _In8, ein: _Out8, /) -> int:
    """Error of x from the stored input; base scale s_e / (s_x * 2^8); ein may be e."""

# -- recurrent: GRU over a sequence (desc: 13 int32) ----------------------------------------------

def gru_s8_forward(desc: _I32, x: _In8, w: _In8, bias: _I32, mult: _I32, shift: _I32, lut: _In8, y: _Out8,
                   keep: _Out8, /) -> None:
    """The hidden states y (T x H, h_0 = 0) of nn.GRU over x (T x D); keep gets each step's
    r, z, n, hn (T x 4H) for gru_s8_backward."""
def gru_s8_backward(desc: _I32, x: _In8, w: _In8, wr: _I32, dtanh: _I32, y: _In8, keep: _Out8, e: _In8,
                    shifts: _I32, acc: _I32, gw: _I32, gb: _I32, ein: _Out8, /) -> int:
    """Backward through time over the last k steps (desc's k; 0 = all) from the forward's x, y,
    keep and the output errors e (T x H): gw (3H x (D + H)) and gb (4H) summed over the steps,
    ein (T x D) the input errors. keep comes back holding the step errors; shifts[t] each
    step's shift (their max A: gw, gb on U 2^A); acc: 5H int32 scratch. Returns ein's shift."""

# -- recurrent: LSTM over a sequence (desc: 13 int32) ---------------------------------------------

def lstm_s8_forward(desc: _I32, x: _In8, w: _In8, bias: _I32, mult: _I32, shift: _I32, lut: _In8, y: _Out8,
                    keep: _Out8, /) -> None:
    """The hidden states y (T x H, h_0 = c_0 = 0) of nn.LSTM over x (T x D); keep gets each
    step's i, f, g, o, c, tanh(c) (T x 6H) for lstm_s8_backward."""
def lstm_s8_backward(desc: _I32, x: _In8, w: _In8, wr: _I32, dtanh: _I32, y: _In8, keep: _Out8, e: _In8,
                     shifts: _I32, acc: _I32, gw: _I32, gb: _I32, ein: _Out8, /) -> int:
    """Backward through time over the last k steps (desc's k; 0 = all) from the forward's x, y,
    keep and the output errors e (T x H): gw (4H x (D + H)) and gb (4H) summed over the steps,
    ein (T x D) the input errors. keep's first 4H a step come back holding the gate errors;
    shifts[t] each step's shift (their max A: gw, gb on U 2^A); acc: 6H int32 scratch.
    Returns ein's shift."""

# -- .mtm model files (docs/format.md) ------------------------------------------------------------

def mtm_validate(buf: _Buf, /) -> None:
    """Validate a whole .mtm file (every check of docs/format.md, "Validation");
    ValueError "mtm_validate: <check> (tensor i | layer i 'name')" on the first failure."""
def mtm_info(buf: _Buf, out: _I32, /) -> None:
    """Header into out (15 int32): version_major, version_minor, flags, total_len,
    n_tensors, n_layers, tensor_table_off, layer_table_off, strings_off, strings_len,
    data_off, data_len, input, output, train_steps."""
def mtm_tensor(buf: _Buf, i: int, out: _I32, /) -> None:
    """Tensor entry i into out (14 int32): dtype, rank, kind, quant, flags, shape[0..4),
    data_off, data_len, scale (the float32's bits), zero_point, qscales (-1 = none)."""
def mtm_layer(buf: _Buf, i: int, out: _I32, /) -> None:
    """Layer entry i into out (23 int32): op, act, n_params, n_inputs, flags, name_off,
    name_len, fused_off, fused_len (string offsets absolute in the file), in0, in1, out,
    weight, bias, mult, shift, state[0..4) (-1 = none), the absolute file offset of the
    layer's int32 params (its kernel descriptor), then state[4], state[5] (Adam's second
    moments, format 1.3; -1 = none)."""
def mtm_view(view: memoryview, typecode: int, /) -> memoryview:
    """view (1-byte items over 4 * n bytes, 4-byte aligned) retyped in place to n int32
    (typecode ord('i')) or float32 (ord('f')) items and returned: zero-copy tensors of a model
    loaded from a bytes-like object. The pure-Python kernel returns a copy (an array)."""
