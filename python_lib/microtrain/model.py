# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# The model: a validated .mtm file used in place, its forward and backward passes, checkpoint writing.
# Memory rules (docs/api.md, "Memory"): frozen weights are zero-copy views of the model bytes; activation
# buffers are shared between tensors whose lifetimes do not overlap; activations are kept only from the first
# trained layer on; trained layers own mutable copies of their parameters and float32 gradient sums.
import array
import math
import struct

from micropython import const

from microtrain import fmt, kern
from microtrain.quant import softmax_lut, zeros

K = kern.K

try:
    import uctypes
except ImportError:  # CircuitPython and minimal ports: int32 tensors get copied
    uctypes = None

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
# The .mtm constants this module reads, private: inlined, no globals entry.
_TENSOR_ENTRY = const(48)
_NONE_I32 = const(-1)
_FLAG_TRAINED = const(1)
_T_SCALE = const(32)
_INFO_FLAGS = const(2)
_INFO_TOTAL_LEN = const(3)
_INFO_N_TENSORS = const(4)
_INFO_N_LAYERS = const(5)
_INFO_TENSOR_TABLE_OFF = const(6)
_INFO_INPUT = const(12)
_INFO_OUTPUT = const(13)
_INFO_TRAIN_STEPS = const(14)
_TROW_DTYPE = const(0)
_TROW_RANK = const(1)
_TROW_KIND = const(2)
_TROW_QUANT = const(3)
_TROW_FLAGS = const(4)
_TROW_SHAPE0 = const(5)
_TROW_DATA_OFF = const(9)
_TROW_DATA_LEN = const(10)
_TROW_ZERO_POINT = const(12)
_TROW_QSCALES = const(13)
_LROW_OP = const(0)
_LROW_ACT = const(1)
_LROW_N_PARAMS = const(2)
_LROW_FLAGS = const(4)
_LROW_NAME_OFF = const(5)
_LROW_NAME_LEN = const(6)
_LROW_FUSED_OFF = const(7)
_LROW_FUSED_LEN = const(8)
_LROW_IN0 = const(9)
_LROW_IN1 = const(10)
_LROW_OUT = const(11)
_LROW_WEIGHT = const(12)
_LROW_BIAS = const(13)
_LROW_MULT = const(14)
_LROW_SHIFT = const(15)
_LROW_STATE0 = const(16)
_LROW_STATE1 = const(17)
_LROW_STATE2 = const(18)
_LROW_STATE3 = const(19)
_LROW_PARAMS_OFF = const(20)
_LROW_STATE4 = const(21)
_LROW_STATE5 = const(22)
_INFO_N = const(15)
_TENSOR_N = const(14)
_LAYER_N = const(23)
_DT_INT8 = const(1)
_DT_INT32 = const(2)
_DT_F32 = const(3)
_KIND_ACT = const(0)
_KIND_CONST = const(1)
_KIND_STATE = const(2)
_OP_CONV2D = const(1)
_OP_LINEAR = const(2)
_OP_RELU = const(3)
_OP_RELU6 = const(4)
_OP_MAXPOOL = const(5)
_OP_AVGPOOL = const(6)
_OP_GAP = const(7)
_OP_ADD = const(8)
_OP_LUT = const(9)
_OP_CONCAT = const(10)
_OP_UPSAMPLE = const(11)
_OP_MUL = const(12)
_OP_LAYERNORM = const(13)
_OP_SOFTMAX = const(14)
_OP_MATMUL = const(15)
_OP_GRU = const(16)
_OP_LSTM = const(17)
# --- generated: end

# Descriptor entries (docs/numerics.md, "Python binding") read here (backward.py reads the
# backward ones).
_P_RELU_ZP = const(1)  # relu / relu6: (n, zp[, q6])
_P_RELU6_Q6 = const(2)
_P_GAP_HW = const(0)  # global_avgpool: (hw, c)
_P_GAP_C = const(1)
_P_CONV_OUT_C = const(5)  # conv2d: out_c, k_h, k_w, groups
_P_CONV_K_H = const(6)
_P_CONV_K_W = const(7)
_P_CONV_GROUPS = const(12)
_P_LIN_OUT_N = const(1)  # linear: (in_n, out_n, ...)


class Tensor:
    """One tensor of the file: shape (NHWC), dtype, quantisation, data view."""

    # The common values live on the class and an instance stores only what differs: every
    # attribute costs 8 bytes of the instance's hash table (rounded up to the next table
    # size), and a 0.0 scale would be a float object of its own (docs/memory.md)
    dtype = _DT_INT8
    kind = _KIND_CONST
    quant = 0
    flags = 0
    data_off = 0
    data_len = 0
    scale = 0.0
    zero_point = 0
    qscales = _NONE_I32
    data = None  # view (or mutable copy) of the values for CONST / STATE

    def __init__(self, index, row, scale):
        self.index = index
        if row[_TROW_DTYPE] != _DT_INT8:
            self.dtype = row[_TROW_DTYPE]
        if row[_TROW_KIND] != _KIND_CONST:
            self.kind = row[_TROW_KIND]
        if row[_TROW_QUANT]:
            self.quant = row[_TROW_QUANT]
        if row[_TROW_FLAGS]:
            self.flags = row[_TROW_FLAGS]
        self.shape = tuple(row[_TROW_SHAPE0 + d] for d in range(row[_TROW_RANK]))
        if row[_TROW_DATA_OFF]:
            self.data_off = row[_TROW_DATA_OFF]
        if row[_TROW_DATA_LEN]:
            self.data_len = row[_TROW_DATA_LEN]
        if scale != 0.0:
            self.scale = scale
        if row[_TROW_ZERO_POINT]:
            self.zero_point = row[_TROW_ZERO_POINT]
        if row[_TROW_QSCALES] != _NONE_I32:
            self.qscales = row[_TROW_QSCALES]
        n = 1
        for d in self.shape:
            n *= d
        self.numel = n

    def __repr__(self):
        dt = ("?", "int8", "int32", "float32", "uint8")[self.dtype]
        kind = ("activation", "const", "state")[self.kind]
        q = ""
        if self.kind == _KIND_ACT:
            q = " scale=%.6g zp=%d" % (self.scale, self.zero_point)
        return "<Tensor %d %s %s %s%s %dB>" % (self.index, kind, dt, self.shape, q,
                                               self.numel * fmt.ITEMSIZE[self.dtype])


_backward = None  # microtrain.backward, imported by the first set_trained


def _nothing():
    pass


def _place(model, bufs, owner, last_use, keep, bwd):
    # the forward plan's placement (microtrain/place.py), imported for it and forgotten
    # again: where the package is loaded as .mpy files its code would stay in the heap.
    # Compiled from source on a full heap it may not fit: None, and the plan falls back
    # to whole buffers (plan.forward_fit: more RAM, the same results)
    try:
        from microtrain.place import place
    except MemoryError:
        kern.forget("place")
        return None
    try:
        return place(model, bufs, owner, last_use, keep, None, bwd)
    finally:
        kern.forget("place")


def _sums():
    # the default update mode (backward.Sums), its module imported with the first trained layer
    global _backward
    if _backward is None:
        from microtrain import backward as _backward
    return _backward.Sums()


class Layer:
    """One layer: op, fused activation, descriptor (`params`), tensors.

    For a trained layer `w`, `b`, `mult`, `shift`, `w_scale` are private
    mutable copies and `gw`, `gb` the float32 gradient sums of the batch."""

    _ratios = None  # update_f32_ratios, looked up on first use
    _touch = None  # (touched buffer, a view of it), reused by every batch of a sparse policy (touch)

    # Defaults on the class, as for Tensor: a frozen layer stores only what its op uses
    # (a conv 18 attributes, an add 9) and training sets the rest on the trained layers
    act = 0
    flags = 0
    _fz = ""  # `fused`, and `name` (_nm): the string, or its place in the model bytes (__init__)
    state_t = (_NONE_I32,) * 6
    trained = False
    modified = False  # parameters updated on the device (TRAINED flag in checkpoints)
    grad = None  # (gw, gb) float32 arrays while trained
    w = b = mult = shift = w_scale = None
    table = dtable = None  # lut: forward, derivative tables; gru, lstm: in1's tables, (dtable) kept gates
    gw = gb = None  # the update mode's (model.update): gradient sums, or the momentum itself
    master_w = master_b = None  # float32 master copies (float modes)
    touched = None  # sparse training: channels with a gradient since the last update
    wr = None
    ein_r = None  # R of the grad-input ratios (from the descriptor; None: not worked out yet)

    def __init__(self, model, index, row):
        self.model = model
        self.index = index
        self.op = row[_LROW_OP]
        if row[_LROW_ACT]:
            self.act = row[_LROW_ACT]
        if row[_LROW_FLAGS]:
            self.flags = row[_LROW_FLAGS]
        b = model.buf
        # where the name and the folded modules' names are in the model bytes, as one small int
        # (offset << 10 | length; the string itself where that would not fit): no strings kept,
        # the properties read them
        o, n = row[_LROW_NAME_OFF], row[_LROW_NAME_LEN]
        self._nm = o << 10 | n if n < 1024 and o < 1 << 20 else str(bytes(b[o:o + n]), "utf-8")
        o, n = row[_LROW_FUSED_OFF], row[_LROW_FUSED_LEN]
        if n:
            self._fz = o << 10 | n if n < 1024 and o < 1 << 20 else str(bytes(b[o:o + n]), "utf-8")
        i0, i1 = row[_LROW_IN0], row[_LROW_IN1]
        self.inputs = (i0,) if i1 == _NONE_I32 or self.op == _OP_GRU or self.op == _OP_LSTM else (i0, i1)
        self.output = row[_LROW_OUT]
        st = (row[_LROW_STATE0], row[_LROW_STATE1], row[_LROW_STATE2], row[_LROW_STATE3],
              row[_LROW_STATE4], row[_LROW_STATE5])  # (STATE4, 5: format 1.3)
        if st != Layer.state_t:
            self.state_t = st
        # the kernel descriptor, zero-copy
        self.params = model._i32(row[_LROW_PARAMS_OFF], row[_LROW_N_PARAMS])
        if self.op == _OP_CONV2D or self.op == _OP_LINEAR or self.op == _OP_GRU or self.op == _OP_LSTM:
            c = model._const
            self.w = c(row[_LROW_WEIGHT])
            q = model._trow[_TROW_QSCALES]  # the weights' scales
            self.b = c(row[_LROW_BIAS])
            self.mult = c(row[_LROW_MULT])
            self.shift = c(row[_LROW_SHIFT])
            self.w_scale = c(q)
        if self.op == _OP_LUT:
            self.table = model._const(row[_LROW_WEIGHT])
            self.dtable = model._const(row[_LROW_BIAS])
        if self.op == _OP_GRU or self.op == _OP_LSTM:  # its activations' tables, then dtanh (in1)
            self.table = model._const(i1)

    @property
    def name(self):
        v = self._nm
        return v if type(v) is str else str(bytes(self.model.buf[v >> 10:(v >> 10) + (v & 1023)]), "utf-8")

    @property
    def fused(self):
        v = self._fz
        return v if type(v) is str else str(bytes(self.model.buf[v >> 10:(v >> 10) + (v & 1023)]), "utf-8")

    @property
    def kind(self):
        return fmt.OP_NAMES[self.op]

    @property
    def n_params(self):
        if self.w is None:
            return 0
        return len(self.w) + len(self.b)

    @property
    def out_c(self):
        p = self.params
        if self.op >= _OP_GRU:  # its weight rows: the gates' units (GRU 3, LSTM 4)
            return (3 if self.op == _OP_GRU else 4) * p[2]
        return p[_P_CONV_OUT_C] if self.op == _OP_CONV2D else p[_P_LIN_OUT_N]

    @property
    def in_scale(self):
        return self.model.tensors[self.inputs[0]].scale

    @property
    def out_scale(self):
        return self.model.tensors[self.output].scale

    def __repr__(self):
        t = self.model.tensors
        s = "<Layer %d %s %s%s %s -> %s" % (self.index, self.name, fmt.OP_NAMES[self.op],
                                            ("+" + fmt.ACT_NAMES[self.act]) if self.act else "",
                                            t[self.inputs[0]].shape, t[self.output].shape)
        if self.w is not None:
            s += " params=%d" % self.n_params
        if self.trained:
            s += " trained"
        return s + ">"

    # -- training state -------------------------------------------------------------------

    def make_trainable(self, sums=True):
        """Private mutable copies of the parameters and (sums) float32 gradient sums."""
        if self.w is None:
            raise ValueError("layer %s (%s) has no parameters to train" % (self.name, self.kind))
        if sums and self.gw is None:
            # the large float32 sums first, while the heap is least fragmented
            self.gw = zeros("f", len(self.w))
            self.gb = zeros("f", len(self.b))
            self.grad = (self.gw, self.gb)
        if self.model.update is None:  # (a layer made trainable by hand: its sums are stepped)
            self.model.update = _sums()
        if not self.trained:
            self._own()
            self.trained = True
            self.modified = True
        self.refresh_ratios()

    def _own(self):
        # private copies of the parameters: a raw byte copy (array("b", view) would convert
        # element by element, and a view of the file bytes reads 0..255, which CircuitPython
        # refuses to store)
        w = zeros("b", len(self.w))
        w[:] = self.w
        self.w = w
        self.b = array.array("i", self.b)
        self.mult = array.array("i", self.mult)
        self.shift = array.array("i", self.shift)
        self.w_scale = array.array("f", self.w_scale)  # (checkpoints write the layer's arrays)
        if self.op >= _OP_GRU:  # (GRU, LSTM) its descriptor holds backward's factor of the weight scales
            self.params = array.array("i", self.params)

    def refresh_ratios(self):
        """Grad-input weight ratios for the current per-channel weight scales
        (update_f32_ratios: float32 on every build; the optimiser calls this
        after each update). None for the first trained layer: no error goes below it."""
        bw = self.model.backward_plan
        if bw is not None and bw.first == self.index and self.op < _OP_GRU:  # (an RNN's carry reads them)
            self.wr = None
            return
        if self.wr is None:
            self.wr = zeros("i", self.out_c)
        if self.ein_r is None:
            p = self.params
            if self.op == _OP_CONV2D:
                terms = p[_P_CONV_K_H] * p[_P_CONV_K_W] * (p[_P_CONV_OUT_C] // p[_P_CONV_GROUPS])
            else:
                terms = self.out_c
            # R: the largest R <= 15 with max(wr) * terms * 16384 <= 2^31 - 1 (numerics.md)
            r = 15
            while r > 0 and (1 << r) * terms * 16384 > 2147483647:
                r -= 1
            self.ein_r = r
        if Layer._ratios is None:  # (a class attribute: not an entry of the module's globals)
            Layer._ratios = kern.f32("update_f32_ratios")
        # the index of max(w_scale): backward reads that one float (max() over the array would
        # box every scale: most of a training step's garbage); not cached: 16 B per layer
        self._ein_i = Layer._ratios(self.w_scale, self.ein_r, self.wr)
        if self.op >= _OP_GRU:  # backward's (m_w, sh_w): max(s_w) 2^-R (numerics.md, GRU, LSTM)
            from microtrain.quant import quantize_multiplier
            self.params[11], self.params[12] = quantize_multiplier(math.ldexp(self.ein_top, -self.ein_r))

    def touch(self, mask):
        """Sparse training: mark mask's channels (1 = kept) as touched since the last update."""
        t = self.touched
        if t is None:  # the first sample since the update: none touched yet
            tb = self._touch
            if tb is None:  # kept with a view that cannot resize it; a new array a sample was garbage
                t = bytearray(self.out_c)
                tb = self._touch = (t, memoryview(t))
            t = self.touched = tb[0]
            if mask:  # (a buffer of channels, never empty: None the falsy case)
                try:
                    tb[1][:] = mask  # zeros | mask: the mask itself
                    return
                except Exception:  # another length or type: zeros | mask by the kernel, which names it
                    t[:] = bytes(len(t))
        K.update_u8_touch(t, mask)

    def rewire(self, params, shift, output, act):
        """Give the layer another descriptor, shifts, output tensor and fused activation (LoRA
        attaching an adapter); the grad-input ratios follow the new descriptor."""
        self.params, self.shift, self.output, self.act = params, shift, output, act
        self.ein_r = None

    def tensor_ids(self):
        """(weight, bias, mult, shift): the indices of the layer's parameter tensors, -1 where
        it has none, read again from the model's layer table (not kept: every attribute of a
        layer is heap, and only saving needs them)."""
        row = zeros("i", _LAYER_N)
        K.mtm_layer(self.model.buf, self.index, row)
        return row[_LROW_WEIGHT], row[_LROW_BIAS], row[_LROW_MULT], row[_LROW_SHIFT]

    @property
    def ein_top(self):
        """max(w_scale): the grad-input error scale factor."""
        return self.w_scale[self._ein_i]


class Model:
    """A loaded .mtm model. See `load`."""

    # how a trained layer's gradient reaches its weights (set_trained: backward.Sums; a Trainer
    # may put backward.IntoMomentum or stepwise.StepInBackward there): backward hands it each
    # trained layer's gradient, the optimiser's step applies what it holds
    update = None
    lora = None  # the attached microtrain.lora.LoRA (its layers are in self.layers)
    loss_bufs = None  # (err, int32 scratch) of the output, for mse / bce (a class default: a slot less)

    def __init__(self, buf, words):
        self.buf = buf  # 1-byte view of the whole file (validated)
        self._words = words  # array('i') of the whole file, or None
        info = zeros("i", _INFO_N)
        K.mtm_info(buf, info)
        self.flags = info[_INFO_FLAGS]
        self.train_steps = info[_INFO_TRAIN_STEPS] & 0xFFFFFFFF
        self.size = info[_INFO_TOTAL_LEN]
        n_t, n_l = info[_INFO_N_TENSORS], info[_INFO_N_LAYERS]
        self._tt = info[_INFO_TENSOR_TABLE_OFF]  # tensor table offset
        self._trow = zeros("i", _TENSOR_N)  # one tensor's fields (mtm_tensor)
        # A layer holds the views of its constants itself (a trained one its copies): their
        # Tensor objects are not kept (None in `tensors`; tensor(i) reads one again), about
        # 100 B of heap per constant.
        # Constants no layer holds get theirs after the layers.
        ts = self.tensors = [None] * n_t
        trow = self._trow
        for i in range(n_t):
            K.mtm_tensor(buf, i, trow)
            if trow[_TROW_KIND] != _KIND_CONST:
                ts[i] = self._read_tensor(i)
        self._held = held = set()  # the constants the layers take (_const)
        self.layers = []
        row = zeros("i", _LAYER_N)
        for j in range(n_l):
            K.mtm_layer(buf, j, row)
            self.layers.append(Layer(self, j, row))
        for i in range(n_t):
            if ts[i] is None and i not in held:
                ts[i] = self._read_tensor(i)
        self._held = None
        self.input = self.tensors[info[_INFO_INPUT]]
        self.output = self.tensors[info[_INFO_OUTPUT]]
        self._plans = {}
        self._owner = {}  # plan key -> its whole buffers, each under a tensor it holds
        self._fused = {}  # plan key -> its fused conv + add pairs (_fusable), or None
        self._lut = None
        self._lut_scale = 0.0
        self.ce_bufs = None  # (err, stats) of the output, for cross_entropy
        self.last_out = None
        self._last_keep = -2  # keep_from of the last forward (backward checks it)
        self.backward_plan = None  # backward plan of the trained layers
        self.trained_layers = []

    # -- views -----------------------------------------------------------------------------

    def _data(self, row):
        # the values of the tensor whose fields are in row (mtm_tensor): a view of the model
        # bytes, or a copy for what is updated in place (STATE) or cannot be viewed
        dt, kind = row[_TROW_DTYPE], row[_TROW_KIND]
        off, n = row[_TROW_DATA_OFF], row[_TROW_DATA_LEN]
        if dt == _DT_INT8:
            return self._s8(off, n) if n else None
        if dt == _DT_INT32:
            return self._i32(off, n >> 2, kind == _KIND_STATE)
        if dt == _DT_F32:
            # per-channel scales: views like the weights; optimiser state and master
            # copies (STATE) are updated in place: copied
            v = None if kind == _KIND_STATE else self._view(off, n, 102)
            return array.array("f", self._raw(off, n)) if v is None else v
        return None

    def _const(self, i):
        # a layer's constant i at load: its data, no Tensor object (its fields stay in _trow)
        K.mtm_tensor(self.buf, i, self._trow)
        if self._trow[_TROW_KIND] != _KIND_CONST:
            return self._read_tensor(i).data  # (a checkpoint's tensor of another kind)
        self._held.add(i)
        return self._data(self._trow)

    def _read_tensor(self, i):
        buf, row = self.buf, self._trow
        K.mtm_tensor(buf, i, row)
        scale = struct.unpack_from("<f", buf, self._tt + _TENSOR_ENTRY * i + _T_SCALE)[0]
        t = Tensor(i, row, scale)
        t.data = self._data(row)
        return t

    def tensor(self, i):
        """Tensor i: tensors[i], or for a layer's constant (None there: the layer holds its
        data, as w, b, mult, shift, w_scale) one read again from the model bytes."""
        t = self.tensors[i]
        return self._read_tensor(i) if t is None else t

    def _s8(self, off, n):
        return memoryview(self.buf)[off:off + n]

    def _i32(self, off, n, copy=False):
        if self._words is not None:
            off >>= 2
            return memoryview(self._words)[off:off + n]
        v = None if copy else self._view(off, 4 * n, 105)
        return v if v is not None else array.array("i", self._raw(off, 4 * n))

    def _view(self, off, n, code):
        # int32 / float32 items in place in a bytes-like model (frozen bytes, flash): a
        # 1-byte view retyped by the loader binding; None where it cannot be (an unaligned
        # buffer, or the pure-Python kernels, which copy), and the caller copies
        if not kern.NATIVE:
            return None
        try:
            return K.mtm_view(memoryview(self.buf)[off:off + n], code)
        except (TypeError, ValueError):  # e.g. CircuitPython's memoryview of another type
            return None

    def _raw(self, off, n):
        # bytes off..off+n of the file for array(typecode, ...), which takes a
        # bytes / bytearray as raw bytes but a memoryview element by element
        seg = self.buf[off:off + n]
        return bytes(seg) if type(seg) is memoryview else seg

    def layer(self, name):
        """The layer called `name` (KeyError if none)."""
        for ly in self.layers:
            if ly.name == name:
                return ly
        raise KeyError(name)

    def select(self, spec):
        """Layer indices for a train spec: "last:N" (the last N layers with
        parameters), "all", a name, or a list of names / indices."""
        weighted = [ly.index for ly in self.layers if ly.w is not None]
        if not weighted:
            raise ValueError("train=%r: the model has no layers with parameters (conv2d / linear)" % (spec,))
        if spec is None or spec == "all":
            return weighted
        if isinstance(spec, str) and spec.startswith("last:"):
            try:
                n = int(spec[5:])
            except ValueError:
                n = 0
            if not 1 <= n <= len(weighted):
                raise ValueError("train=%r: need 'last:N' with N in 1..%d (the layers with parameters)" %
                                 (spec, len(weighted)))
            return weighted[-n:]
        orig = spec
        if isinstance(spec, (str, int)):
            spec = [spec]
        if not isinstance(spec, (list, tuple)) or not spec:
            raise ValueError("train=%r: expected 'last:N', 'all', a layer name, an index or a non-empty "
                             "list of them" % (spec,))
        out = []
        n_l = len(self.layers)
        for s in spec:
            if type(s) is int:
                if not 0 <= s < n_l:
                    raise ValueError("train=%r: layer index %d outside 0..%d" % (orig, s, n_l - 1))
                ly = self.layers[s]
            elif isinstance(s, str):
                try:
                    ly = self.layer(s)
                except KeyError:
                    raise ValueError("train=%r: no layer named %r" % (orig, s)) from None
            else:
                raise ValueError("train=%r: %r is neither a layer name nor an index" % (orig, s))
            if ly.w is None:
                raise ValueError("layer %s (%s) has no parameters to train" % (ly.name, ly.kind))
            if ly.index not in out:
                out.append(ly.index)
        out.sort()
        return out

    # -- buffers ---------------------------------------------------------------------------

    def plan(self, keep_from):
        """Activation buffers for a forward pass that keeps every activation
        used by layers >= keep_from (None: inference only)."""
        # while layers are trained, their plan serves inference too: one set of buffers, not an
        # inference plan beside the training one (docs/memory.md)
        if keep_from is None and self.backward_plan is not None:
            keep_from = self.backward_plan.first
        key = -1 if keep_from is None else keep_from
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        tensors, layers = self.tensors, self.layers
        last_use = {}
        for ly in layers:
            for t in ly.inputs:
                last_use[t] = ly.index
        owner = {}  # the whole buffers, each under a tensor it holds
        bufs = {}  # tensor -> its buffer (a view of the bytes of a larger one: exact lengths)
        keep = ()
        if keep_from is not None:  # what backward reads is never freed
            from microtrain import plan as rules

            keep = rules.kept(self, keep_from)
            rules = None
            kern.forget("plan")  # (not beside place.py: fewer entries in the module tables at once)
        fz = self._fused.get(key)  # a tuple: placed through backward (plan.backward_plan asks so)
        fz = _place(self, bufs, owner, last_use, keep, fz if type(fz) is tuple else None)
        if fz is not None:
            fz, free = fz
            if keep_from is not None:
                fz[-1] = free  # the arena's gaps idle during backward, until plan.backward_plan takes them
            free = None
        else:  # whole buffers (plan.py's rules) where place.py did not fit
            from microtrain import plan as rules

            owner[self.input.index] = bufs[self.input.index] = zeros("b", self.input.numel)
            bid, size, _ = rules.forward_fit(self, keep)
            made = [None] * len(size)
            for ly in layers:
                t = ly.output
                b = bid[t]
                buf = made[b]
                if buf is None:  # (made in plan order)
                    buf = made[b] = zeros("b", size[b])
                n = tensors[t].numel
                owner[t] = buf
                bufs[t] = buf if len(buf) == n else memoryview(buf)[:n]
            bid = size = made = None
        self._owner[key] = owner
        self._fused[key] = fz
        steps = []
        for ly in layers:
            steps.append(self._step(ly, bufs, fz))
        plan = (bufs, steps)
        # buffers of other plans stay cached: inference and training plans coexist
        self._plans[key] = plan
        return plan

    def owners(self, keep_from):
        """{tensor: buffer}: the plan keeping from keep_from's whole buffers, each under a tensor it holds."""
        return self._owner[-1 if keep_from is None else keep_from]

    def has_plan(self, keep_from):
        """Whether the forward plan keeping from keep_from is made (its buffers allocated)."""
        return (-1 if keep_from is None else keep_from) in self._plans

    def forget_plans(self):
        """Forget every plan, forward and backward (the layer list changed: LoRA)."""
        self._plans = {}
        self._owner = {}
        self.backward_plan = None
        self.trained_layers = []
        self._last_keep = -2

    def drop_plans(self, keep):
        """Forget every forward plan but the one keeping from `keep` (its buffers are garbage
        then): a Trainer's plan replaces the inference plan."""
        for key in list(self._plans):
            if key != keep:
                del self._plans[key]
                self._owner.pop(key, None)
                self._fused.pop(key, None)

    def _step(self, ly, bufs, fz=None):
        op, p = ly.op, ly.params
        x = bufs.get(ly.inputs[0])
        y = bufs.get(ly.output)
        f = fz.get(ly.index) if fz else None
        if type(f) is int:  # done by its conv (conv2d_add_s8_forward)
            return (_nothing, (), ly)
        if f is not None and len(f) == 2:  # over its input, or split (over.py over, win)
            return (f[0], (ly, x, f[1], bufs), ly)
        if f is not None and len(f) > 3:  # the b of a chain (place.py): a's rows a band at a time
            a = f[3]
            return (f[8], (a, ly, bufs[a.inputs[0]], f, bufs[(ly if f[0] is None else f[0]).output]), ly)
        if f is not None:
            a, side, tile = f
            return (K.conv2d_add_s8_forward, (p, x, ly.w, ly.b, ly.mult, ly.shift, a.params, side,
                                              bufs[a.output], tile), ly)
        if op == _OP_CONV2D:
            return (K.conv2d_s8_forward, (p, x, ly.w, ly.b, ly.mult, ly.shift, y), ly)
        if op == _OP_LINEAR:
            return (K.linear_s8_forward, (p, x, ly.w, ly.b, ly.mult, ly.shift, y), ly)
        if op == _OP_LUT:
            return (K.lut_s8_forward, (x, ly.table, y), ly)
        if op == _OP_RELU:
            return (K.relu_s8_forward, (x, p[_P_RELU_ZP], y), ly)
        if op == _OP_RELU6:
            return (K.relu6_s8_forward, (x, p[_P_RELU_ZP], p[_P_RELU6_Q6], y), ly)
        if op == _OP_MAXPOOL:
            return (K.maxpool_s8_forward, (p, x, y), ly)
        if op == _OP_AVGPOOL:
            return (K.avgpool_s8_forward, (p, x, y), ly)
        if op == _OP_GAP:
            return (K.global_avgpool_s8_forward, (x, p[_P_GAP_HW], p[_P_GAP_C], y), ly)
        if op == _OP_ADD:
            return (K.add_s8_forward, (p, x, bufs[ly.inputs[1]], y), ly)
        if op == _OP_CONCAT:
            return (K.concat_s8_forward, (p, x, bufs[ly.inputs[1]], y), ly)
        if op == _OP_UPSAMPLE:
            return (K.upsample_s8_forward, (p, x, y), ly)
        if op == _OP_MUL:
            return (K.mul_s8_forward, (p, x, bufs[ly.inputs[1]], y), ly)
        if op == _OP_LAYERNORM:
            return (K.layernorm_s8_forward, (p, x, y), ly)
        if op == _OP_MATMUL:  # (the factor after the descriptor: the backward's)
            return (K.matmul_s8_forward, (p[:len(p) - 1], x, bufs[ly.inputs[1]], y), ly)
        if op == _OP_GRU:
            if ly.dtable is None:
                ly.dtable = bytearray(4 * p[0] * p[2])  # T x 4H
            return (K.gru_s8_forward, (p, x, ly.w, ly.b, ly.mult, ly.shift, memoryview(ly.table)[:768], y,
                                       ly.dtable), ly)
        if op == _OP_LSTM:  # keeps T x 6H: i, f, g, o, c, tanh(c)
            ly.dtable = ly.dtable or bytearray(6 * p[0] * p[2])
            return (K.lstm_s8_forward, (p, x, ly.w, ly.b, ly.mult, ly.shift, memoryview(ly.table)[:1280], y,
                                        ly.dtable), ly)
        if op == _OP_SOFTMAX:
            if ly.table is None:  # the exp table of its input's scale (fixed: activation scales stay)
                ly.table = softmax_lut(self.tensors[ly.inputs[0]].scale)
            return (K.softmax_s8_forward, (p, x, ly.table, y), ly)
        raise ValueError("unknown op %d" % op)

    def rebind(self):
        """Rebuild the forward call tables after a layer's parameter arrays were
        replaced (make_trainable; the optimisers call it after each update)."""
        for key, plan in self._plans.items():
            bufs, steps = plan
            fz = self._fused.get(key)
            for i in range(len(steps)):
                steps[i] = self._step(steps[i][2], bufs, fz)

    # -- inference -------------------------------------------------------------------------

    def forward(self, x, keep_from=None, start=0):
        """Run layers start.. on the int8 input x (NHWC, input numel);
        return the int8 output buffer (reused by the next call: copy to keep).

        keep_from: index of the first layer whose inputs must survive for
        backward (the Trainer passes the first trained layer)."""
        bufs, steps = self.plan(keep_from)
        if start == 0:
            xb = bufs[self.input.index]
            if x is None or isinstance(x, (int, float)):
                raise TypeError("forward: the input must be an int8 buffer (bytes, bytearray, array('b') "
                                "or a memoryview of one), got %s" % type(x).__name__)
            if len(x) != len(xb):
                raise ValueError("forward: input has %d values, the model takes %d %s" %
                                 (len(x), len(xb), self.input.shape))
            try:
                xb[:] = x  # raw byte copy: bytes, bytearray and array('b') all work
            except (TypeError, ValueError, NotImplementedError):
                raise TypeError("forward: the input must be an int8 buffer (bytes, bytearray, array('b') "
                                "or a memoryview of one), got %s" % type(x).__name__) from None
        for i in range(start, len(steps)):
            s = steps[i]
            s[0](*s[1])
        out = bufs[self.output.index]
        self.last_out = out
        self._last_keep = -1 if keep_from is None else keep_from
        return out

    def activation(self, t, keep_from=None):
        """The buffer of tensor index t in the given plan (after forward)."""
        b = self.plan(keep_from)[0].get(t)
        if b is None:
            raise ValueError("activation: tensor %d is not kept whole in this plan (a conv's output added "
                             "into the residual path a few rows at a time, or made a few channels at a time "
                             "into its pool); use a plan with keep_from at or before its layer" % t)
        return b

    def predict(self, x):
        """Class index: argmax of the int8 output (the first maximum wins)."""
        from microtrain.loss import argmax  # (here: an entry less in the module's globals)

        return argmax(self.forward(x))

    def quantize_input(self, values, out=None):
        """Float values (NHWC order) -> int8 bytearray with the input's scale/zero point."""
        t = self.input
        if len(values) != t.numel:
            raise ValueError("quantize_input: got %d values, the input has %d %s" %
                             (len(values), t.numel, t.shape))
        mk = 0xFF  # stores must fit the element (CircuitPython refuses 200 in a signed one)
        if out is None:
            out = bytearray(t.numel)
        elif t.numel:
            try:
                out[0] = -1
                if out[0] == -1:
                    mk = -1  # signed elements: the value itself
            except OverflowError:  # CircuitPython: unsigned elements
                pass
        inv, zp, fl = 1.0 / t.scale, t.zero_point, math.floor
        for i in range(t.numel):
            x = values[i]
            v = x * inv + 0.5
            if -256.0 < v < 256.0:  # beyond, q saturates the same: no int() of a huge float
                q = int(fl(v)) + zp
                out[i] = (127 if q > 127 else (-128 if q < -128 else q)) & mk
            elif x - x == 0.0:  # finite (inf - inf and NaN - NaN are NaN), v large or overflowed
                out[i] = (127 if v > 0.0 else -128) & mk
            else:
                raise ValueError("quantize_input: value %d is %r (not a finite number)" % (i, x))
        return out

    def dequantize_output(self, q=None):
        """Float values of the int8 output (default: the last forward's)."""
        t = self.output
        q = q if q is not None else self.last_out
        if q is None:
            raise ValueError("dequantize_output: run forward first or pass the output")
        s, zp = t.scale, t.zero_point
        return [s * (v - zp) for v in q]

    # -- training --------------------------------------------------------------------------

    def set_trained(self, spec, sums=True, window=0, redo=False):
        """Mark the layers of `spec` (see `select`) as trained and build the
        backward plan: error buffers only from the first trained layer on.
        sums=False: no gradient sums (a Trainer that adds gradients into its momentum or
        steps each layer during backward); window: bytes of a float32 buffer backward
        uses too (stepwise.StepInBackward's gradient window), placed with its buffers (bw.window, or None
        where no idle forward buffer holds it: a memoryview of its bytes), negative: -bytes of
        backward.IntoMomentum's copy of the momentum, placed the same way; redo: where
        nothing else holds the int32 scratch, an activation may, made again during backward
        (plan.recompute_host; Trainer(recompute=True)); 2: the training plan may then be
        placed through backward (plan.redo_plan; that activation is not kept after the
        forward); | 4: the update takes the first trained layer's gradient by windows of
        channels, so a conv there whose output only a pool reads may make it by windows
        (over.py split)."""
        idx = self.select(spec)
        global _backward
        if _backward is None:  # (its code before the training buffers: a heap in fewer pieces)
            from microtrain import backward as _backward
        if self.update is not None:  # the last trainer's: what it lent the layers goes back
            self.update.release()
        self.update = _sums()
        self.backward_plan = None  # (refresh_ratios: every trained layer's ratios until it is made)
        for ly in self.layers:
            if ly.index in idx:
                ly.make_trainable(sums)
            elif ly.trained:  # trained before: keep its updated weights, drop its gradient buffers
                ly.trained = False
                ly.gw = ly.gb = ly.grad = None
        first = idx[0]
        # (4: the update takes the gradient by windows: over.py may split a conv there)
        sp = first if redo & 4 and self.layers[first].op == _OP_CONV2D else -1
        redo &= 3
        if sp != getattr(self, "_split", -1):  # (set where used: no class or instance entry else)
            self._split = sp
            self.drop_plans(-2)
        self.drop_plans(first)
        self.rebind()
        for ly in self.layers[first:]:
            if ly.w is not None and not ly.trained:
                ly.refresh_ratios()  # a frozen conv/linear between trained layers back-propagates
        from microtrain import plan as rules

        self.backward_plan = rules.backward_plan(self, first, window, redo)
        self.layers[first].refresh_ratios()  # (the first: none, no grad input; a GRU's carry: its own)
        rules = None
        self.trained_layers = [self.layers[i] for i in idx]
        kern.forget("plan")  # planned: training does not need plan.py's code
        return self.trained_layers

    def backward(self, err, err_scale, policy=None):
        """Back-propagate the int8 error of the output (real value err_scale * err)
        through the layers from the first trained one on, handing each trained layer's
        gradient to the update mode (`update`: by default added into its gw / gb).

        err is modified in place. policy(layer, e) may return a channel mask
        (1-byte buffer, 1 = keep) for a trained layer given its int8 output
        error e: masked channels get no gradient and no back-propagation."""
        bw = self.backward_plan
        if bw is None:
            raise ValueError("backward: no trained layers (use Trainer or set_trained first)")
        if self._last_keep != bw.first:
            raise ValueError("backward: run forward(x, keep_from=%d) first (the first trained layer); "
                             "other forwards do not keep the activations backward needs" % bw.first)
        _backward.run(self, err, err_scale, policy)

    # -- loss ------------------------------------------------------------------------------

    def lut(self):
        """The softmax exp table for the output scale (made once; made again when the
        scale changes, in the same array unless the new table is longer)."""
        s = self.output.scale
        if self._lut is None or self._lut_scale != s:
            self._lut = softmax_lut(s, self._lut)
            self._lut_scale = s
        return self._lut

    # -- summary ---------------------------------------------------------------------------

    def ram(self, keep_from=None):
        """Bytes of activation buffers for a forward pass (keeping from keep_from)."""
        if keep_from is None and self.backward_plan is not None:  # (plan's rule)
            keep_from = self.backward_plan.first
        key = -1 if keep_from is None else keep_from
        if key not in self._plans:
            self.plan(keep_from)
            del self._plans[key]
        seen = []
        total = 0
        for b in self._owner[key].values():
            if not any(b is s for s in seen):
                seen.append(b)
                total += len(b)
        if key not in self._plans:
            del self._owner[key]
        return total

    def summary(self):
        """Print layers, shapes, parameters and RAM (microtrain/show.py, loaded for it)."""
        from microtrain.show import summary

        summary(self, self.flags & _FLAG_TRAINED)
        kern.forget("show")

    def __repr__(self):
        return "<Model %d layers %s -> %s, %d params, %d bytes>" % (
            len(self.layers), self.input.shape, self.output.shape,
            sum(ly.n_params for ly in self.layers), self.size)

    def save(self, path, trainer=None):
        if self.lora is not None:
            raise ValueError("save: LoRA adapters are attached: lora.save(path) writes them, lora.merge() "
                             "folds them into the model first")
        from microtrain import checkpoint

        checkpoint.save(self, path, trainer)


def _read_file(path):
    import os

    try:
        size = os.stat(path)[6]
    except OSError as e:  # the port's message names no path
        from microtrain.checkpoint import os_error

        raise os_error(e, "load", path) from None
    if size < 68 or size & 3:
        raise ValueError("load: %s: not a .mtm file (length %d)" % (path, size))
    try:
        words = zeros("i", size >> 2)  # grown in place: no transient copy of the file size
    except MemoryError:
        _too_large(path, size)  # raises, saying what fits; returns when the block is free now
        words = zeros("i", size >> 2)
    if uctypes is not None:
        view = uctypes.bytearray_at(uctypes.addressof(words), size)
    else:
        view = None
    with open(path, "rb") as f:
        got = f.readinto(view if view is not None else memoryview(words))
    if got != size:
        raise ValueError("load: %s: short read (%d of %d bytes)" % (path, got, size))
    return view, words


def _too_large(path, size):
    # the file size, the largest free block and how to keep the model in flash (memplan,
    # imported on this error path only and forgotten again); where even that import does not
    # fit, the allocation's own MemoryError stands
    try:
        from microtrain import memplan
    except MemoryError:
        raise MemoryError("load: %s is %d bytes and no heap block that large is free: keep the model "
                          "in flash, mt.load(bytes-like) (docs/memory.md)" % (path, size)) from None
    try:
        memplan.file_error(path, size)
    finally:
        memplan.forget()


def load(src):
    """Load a .mtm model from a path or a bytes-like object.

    The file is validated completely (magic, version, CRC, every offset,
    shape, op and quantisation parameter) before anything is used; a bad file
    raises ValueError naming the problem. A path is read into one word-aligned
    buffer and every tensor is a zero-copy view of it. A bytes object (e.g.
    frozen into flash) is used in place for int8 weights; its int32 tensors
    (biases, multipliers, descriptors: a few hundred bytes) are copied."""
    words = None
    if isinstance(src, str):
        buf, words = _read_file(src)
        if buf is None:  # no uctypes: one more copy as bytes
            buf = bytes(words)
            words = None
    else:
        buf = src
    try:
        K.mtm_validate(buf)
    except ValueError as e:
        if not isinstance(src, str):
            raise
        raise ValueError("load: %s: not a valid .mtm file: %s" % (src, e)) from None
    m = Model(buf, words)
    kern.release("mtm_loader")
    return m
