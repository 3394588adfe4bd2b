# The model: a validated .mtm file used in place, its forward pass, its
# backward pass for the trained layers, and checkpoint writing.
#
# Memory rules (docs/api.md, "Memory"): frozen weights are zero-copy views of the model
# bytes; activation buffers are shared between tensors whose lifetimes do not
# overlap; activations are kept only from the first trained layer on; trained
# layers own mutable copies of their parameters plus float32 gradient sums
# (their size does not depend on the batch size).
import array
import math
import struct

from micropython import const

from microtrain import kern
from microtrain.fmt import (
    ACT_NAMES,
    ACT_RELU,
    ACT_RELU6,
    DT_F32,
    DT_INT8,
    DT_INT32,
    FLAG_TRAINED,
    INFO_N,
    ITEMSIZE,
    KIND_ACT,
    KIND_CONST,
    KIND_STATE,
    LAYER_N,
    NONE_I32,
    OP_ADD,
    OP_AVGPOOL,
    OP_CONCAT,
    OP_CONV2D,
    OP_GAP,
    OP_LINEAR,
    OP_LUT,
    OP_MAXPOOL,
    OP_NAMES,
    OP_RELU,
    OP_RELU6,
    OP_UPSAMPLE,
    TENSOR_N,
)
from microtrain.loss import argmax
from microtrain.quant import merge_ratios, softmax_lut, zeros

K = kern.K

try:
    import uctypes
except ImportError:  # CircuitPython and minimal ports: int32 tensors get copied
    uctypes = None

# Descriptor entries (docs/numerics.md, "Python binding") read here.
_P_ACT_MIN = const(-2)  # conv2d, linear, add: the fused activation's clamp is the
_P_ACT_MAX = const(-1)  # last two entries (act_min = out_zp; act_max = q6 for relu6)
_P_RELU_ZP = const(1)  # relu / relu6: (n, zp[, q6])
_P_RELU6_Q6 = const(2)
_P_GAP_HW = const(0)  # global_avgpool: (hw, c)
_P_GAP_C = const(1)
_P_CONV_OUT_C = const(5)  # conv2d: out_c, k_h, k_w, groups
_P_CONV_K_H = const(6)
_P_CONV_K_W = const(7)
_P_CONV_GROUPS = const(12)
_P_LIN_OUT_N = const(1)  # linear: (in_n, out_n, ...)
_P_LUT_DSHIFT = const(3)  # lut: (n, in_zp, out_zp, d_shift)


class Tensor:
    """One tensor of the file: shape (NHWC), dtype, quantisation, data view."""

    # The common values live on the class and an instance stores only what differs: every
    # attribute costs 8 bytes of the instance's hash table (rounded up to the next table
    # size), and a 0.0 scale would be a float object of its own (docs/memory.md)
    dtype = DT_INT8
    kind = KIND_CONST
    quant = 0
    flags = 0
    data_off = 0
    data_len = 0
    scale = 0.0
    zero_point = 0
    qscales = NONE_I32
    data = None  # view (or mutable copy) of the values for CONST / STATE

    def __init__(self, index, row, scale):
        self.index = index
        if row[0] != DT_INT8:
            self.dtype = row[0]
        if row[2] != KIND_CONST:
            self.kind = row[2]
        if row[3]:
            self.quant = row[3]
        if row[4]:
            self.flags = row[4]
        self.shape = tuple(row[5 + d] for d in range(row[1]))
        if row[9]:
            self.data_off = row[9]
        if row[10]:
            self.data_len = row[10]
        if scale != 0.0:
            self.scale = scale
        if row[12]:
            self.zero_point = row[12]
        if row[13] != NONE_I32:
            self.qscales = row[13]
        n = 1
        for d in self.shape:
            n *= d
        self.numel = n

    def __repr__(self):
        dt = ("?", "int8", "int32", "float32", "uint8")[self.dtype]
        kind = ("activation", "const", "state")[self.kind]
        q = ""
        if self.kind == KIND_ACT:
            q = " scale=%.6g zp=%d" % (self.scale, self.zero_point)
        return "<Tensor %d %s %s %s%s %dB>" % (self.index, kind, dt, self.shape, q,
                                               self.numel * ITEMSIZE[self.dtype])


_ratios = None  # update_f32_ratios, looked up on first use


def _nothing():
    pass


def _place(model, bufs, owner, last_use):
    # the inference plan's placement (microtrain/place.py), imported for it and forgotten
    # again: where the package is loaded as .mpy files its code would stay in the heap.
    # Compiled from source on a full heap it may not fit: None, and the plan falls back
    # to whole buffers (the training plans' placement: more RAM, the same results)
    try:
        from microtrain.place import place
    except MemoryError:
        _forget()
        return None
    try:
        return place(model, bufs, owner, last_use)
    finally:
        _forget()


def _forget():
    import sys

    sys.modules.pop("microtrain.place", None)
    pkg = sys.modules.get("microtrain")  # not imported here: the package imports this module
    try:  # not dir(): it would call the package's __getattr__ for every name
        d = pkg.__dict__
    except AttributeError:
        return
    if "place" in d:
        setattr(pkg, "place", None)  # noqa: B010 (the map keeps a deleted value)
        delattr(pkg, "place")


class Layer:
    """One layer: op, fused activation, descriptor (`params`), tensors.

    For a trained layer `w`, `b`, `mult`, `shift`, `w_scale` are private
    mutable copies and `gw`, `gb` the float32 gradient sums of the batch."""

    _touch = None  # (touched buffer, its zeros), reused by every batch of a sparse policy

    # Defaults on the class, as for Tensor: a frozen layer stores only what its op uses
    # (a conv 18 attributes, an add 9) and training sets the rest on the trained layers
    act = 0
    flags = 0
    fused = ""
    weight_t = bias_t = mult_t = shift_t = NONE_I32
    state_t = (NONE_I32,) * 6
    trained = False
    modified = False  # parameters updated on the device (TRAINED flag in checkpoints)
    grad = None  # (gw, gb) float32 arrays while trained
    w = b = mult = shift = w_scale = None
    table = dtable = None  # lut: the forward table (weight slot) and the derivative table (bias slot)
    gw = gb = None
    # batch-1 SGD momentum (Trainer): gw / gb are the optimiser's momentum arrays and backward
    # adds each gradient into them after scaling them by _fold, the momentum (docs/memory.md)
    _fold = None
    _folded = False  # scaled and added since the last update
    master_w = master_b = None  # float32 master copies (float modes)
    touched = None  # sparse training: channels with a gradient since the last update
    _params = None  # the optimiser's views of w and b (optim.Param) and s_in, s_out
    wr = None
    _wr_r = None  # R of the grad-input ratios (from the descriptor)
    ein_r = 0

    def __init__(self, model, index, row):
        self.model = model
        self.index = index
        self.op = row[0]
        if row[1]:
            self.act = row[1]
        if row[4]:
            self.flags = row[4]
        b = model._bytes
        self.name = str(bytes(b[row[5]:row[5] + row[6]]), "utf-8")
        if row[8]:
            self.fused = str(bytes(b[row[7]:row[7] + row[8]]), "utf-8")
        self.inputs = (row[9],) if row[10] == NONE_I32 else (row[9], row[10])
        self.output = row[11]
        if row[12] != NONE_I32:
            self.weight_t = row[12]
        if row[13] != NONE_I32:
            self.bias_t = row[13]
        if row[14] != NONE_I32:
            self.mult_t, self.shift_t = row[14], row[15]
        st = (row[16], row[17], row[18], row[19], row[21], row[22])  # [4], [5]: format 1.3
        if st != Layer.state_t:
            self.state_t = st
        self.params = model._i32(row[20], row[2])  # the kernel descriptor, zero-copy
        if self.op == OP_CONV2D or self.op == OP_LINEAR:
            c = model._const
            self.w = c(self.weight_t)
            q = model._trow[13]  # the weights' scales
            self.b = c(self.bias_t)
            self.mult = c(self.mult_t)
            self.shift = c(self.shift_t)
            self.w_scale = c(q)
        if self.op == OP_LUT:
            self.table = model._const(self.weight_t)
            self.dtable = model._const(self.bias_t)

    @property
    def kind(self):
        return OP_NAMES[self.op]

    @property
    def n_params(self):
        if self.w is None:
            return 0
        return len(self.w) + len(self.b)

    @property
    def out_c(self):
        p = self.params
        return p[_P_CONV_OUT_C] if self.op == OP_CONV2D else p[_P_LIN_OUT_N]

    @property
    def in_scale(self):
        return self.model.tensors[self.inputs[0]].scale

    @property
    def out_scale(self):
        return self.model.tensors[self.output].scale

    def __repr__(self):
        t = self.model.tensors
        s = "<Layer %d %s %s%s %s -> %s" % (self.index, self.name, OP_NAMES[self.op],
                                            ("+" + ACT_NAMES[self.act]) if self.act else "",
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
        if self._fold is not None:  # its gw / gb were a batch-1 momentum trainer's momentum
            self._fold = None
            self._folded = False
            self.gw = self.gb = self.grad = self._params = None
        if sums and self.gw is None:
            # the large float32 sums first, while the heap is least fragmented
            self.gw = zeros("f", len(self.w))
            self.gb = zeros("f", len(self.b))
            self.grad = (self.gw, self.gb)
        if not self.trained:
            # a raw byte copy: array("b", view) would convert element by element, and a
            # view of the file bytes reads 0..255, which CircuitPython refuses to store
            w = zeros("b", len(self.w))
            w[:] = self.w
            self.w = w
            self.b = array.array("i", self.b)
            self.mult = array.array("i", self.mult)
            self.shift = array.array("i", self.shift)
            self.w_scale = array.array("f", self.w_scale)  # (checkpoints write the layer's arrays)
            self.trained = True
            self.modified = True
        self.refresh_ratios()

    def refresh_ratios(self):
        """Grad-input weight ratios for the current per-channel weight scales
        (update_f32_ratios: float32 on every build; the optimiser calls this
        after each update)."""
        if self.wr is None:
            self.wr = zeros("i", self.out_c)
        if self._wr_r is None:
            p = self.params
            if self.op == OP_CONV2D:
                terms = p[_P_CONV_K_H] * p[_P_CONV_K_W] * (p[_P_CONV_OUT_C] // p[_P_CONV_GROUPS])
            else:
                terms = p[_P_LIN_OUT_N]
            # R: the largest R <= 15 with max(wr) * terms * 16384 <= 2^31 - 1 (numerics.md)
            r = 15
            while r > 0 and (1 << r) * terms * 16384 > 2147483647:
                r -= 1
            self._wr_r = r
        self.ein_r = self._wr_r
        global _ratios
        if _ratios is None:
            _ratios = kern.f32("update_f32_ratios")
        # the index of max(w_scale): backward reads that one float (max() over the array would
        # box every scale: most of a training step's garbage); not cached: 16 B per layer
        self._ein_i = _ratios(self.w_scale, self.ein_r, self.wr)

    @property
    def ein_top(self):
        """max(w_scale): the grad-input error scale factor."""
        return self.w_scale[self._ein_i]


def _act_keep(ly):
    # (lo, hi): the outputs of ly whose error its fused activation keeps, lo < y < hi (as
    # relu_s8_backward / relu6_s8_backward; -129, 128: all), from its current descriptor
    p = ly.params
    if ly.act == ACT_RELU:
        return p[_P_ACT_MIN], 128
    if ly.act == ACT_RELU6:
        return p[_P_ACT_MIN], p[_P_ACT_MAX]
    return -129, 128


def _fold(ly, mask, sw, s):
    # Batch 1, SGD momentum: v = m * v now (the sample's channels), and the grad-weight kernel
    # adds the gradient into v: the bits of update_f32_momentum's m * v + g (each gradient
    # value is one rounded term). A scale bound keeps v finite (|term| <= scale * 2^31 and
    # |v| <= max|term| / (1 - m)); past it the gradient has diverged and this layer is left
    # as it was (the layers above have taken the sample: Trainer.step completes their step).
    # Batch n > 1 (Trainer sums=False): v = m * v at the batch's first sample (every channel: no
    # sparse policy), and each sample's gradient goes in with the scales sw / n, s / n (the
    # platform float's quotient, rounded to float32 by the kernel's binding): v = m v + sum g / n.
    # Returns n.
    model = ly.model
    n = model._fdiv
    if ly._folded and n == 1:
        raise ValueError("backward: layer %s adds its gradient into the momentum (Trainer batch 1): "
                         "one backward per update" % ly.name)
    lim = model._flim  # FLT_MAX (1 - m) / 2^33 (Trainer); per sample at any batch
    if not (-lim <= sw <= lim and -lim <= s <= lim):  # (NaN fails too)
        raise ValueError("backward: layer %s: gradient scale %r is not finite or too large (a diverged "
                         "gradient; lower the learning rate)" % (ly.name, sw))
    if ly._folded:  # a later sample of the batch
        return n
    m = ly._fold
    global _scale
    if _scale is None:
        _scale = kern.f32("update_f32_scale")
    gb = ly.gb
    _scale(ly.gw, len(ly.gw) // len(gb), mask, m)
    _scale(gb, 1, mask, m)
    ly._folded = True
    return n


_scale = None


def _retyped(v, code):
    # v (bytes) as int32 / float32 items in place (loader binding mtm_view), None where it
    # cannot be (unaligned; the pure-Python kernels)
    try:
        return K.mtm_view(v, code)
    except (TypeError, ValueError):
        return None


class _BackwardPlan:
    # What set_trained prepares for backward: the first trained layer, the
    # tensors whose error is propagated (region), the forward buffers kept
    # for it, the int8 error buffers (ebuf; etmp / emerge for tensors with two
    # consumers) and the int32 accumulator view per layer (accv).

    def __init__(self, first, region, bufs, ebuf, etmp, emerge, accv, inplace):
        self.first = first
        self.inplace = inplace
        self.region = region
        self.bufs = bufs
        self.ebuf = ebuf
        self.etmp = etmp
        self.emerge = emerge
        self.accv = accv


class Model:
    """A loaded .mtm model. See `load`."""

    _now = None  # a batch-1 plain SGD Trainer's now.Now: trained layers step during backward
    _fdiv = 1  # the batch a momentum-folding Trainer divides each gradient by (_fold; sums=False)

    _lora = None  # the attached microtrain.lora.LoRA (its layers are in self.layers)

    def __init__(self, buf, words):
        self._bytes = buf  # 1-byte view of the whole file (validated)
        self._words = words  # array('i') of the whole file, or None
        info = zeros("i", INFO_N)
        K.mtm_info(buf, info)
        self.flags = info[2]
        self.train_steps = info[14] & 0xFFFFFFFF
        self.size = info[3]
        n_t, n_l = info[4], info[5]
        self._tt = info[6]  # tensor table offset
        self._trow = zeros("i", TENSOR_N)  # one tensor's fields (mtm_tensor)
        # A layer holds the views of its constants itself (a trained one its copies): their
        # Tensor objects are not kept (None in `tensors`; tensor(i) reads one again), about
        # 100 B of heap per constant.
        # Constants no layer holds get theirs after the layers.
        ts = self.tensors = [None] * n_t
        trow = self._trow
        for i in range(n_t):
            K.mtm_tensor(buf, i, trow)
            if trow[2] != KIND_CONST:
                ts[i] = self._read_tensor(i)
        self._held = held = set()  # the constants the layers take (_const)
        self.layers = []
        row = zeros("i", LAYER_N)
        for j in range(n_l):
            K.mtm_layer(buf, j, row)
            self.layers.append(Layer(self, j, row))
        for i in range(n_t):
            if ts[i] is None and i not in held:
                ts[i] = self._read_tensor(i)
        self._held = None
        self.input = self.tensors[info[12]]
        self.output = self.tensors[info[13]]
        self._plans = {}
        self._owner = {}  # plan key -> {tensor: the whole buffer it uses}
        self._fused = {}  # plan key -> its fused conv + add pairs (_fusable), or None
        self._lut = None
        self._lut_scale = 0.0
        self._ce = None  # (err, stats) of the output, for cross_entropy
        self._lb = None  # (err, int32 scratch) of the output, for mse / bce
        self._last_out = None
        self._last_keep = -2  # keep_from of the last forward (backward checks it)
        self._bw = None  # backward plan of the trained layers
        self.trained_layers = []

    # -- views -----------------------------------------------------------------------------

    def _data(self, row):
        # the values of the tensor whose fields are in row (mtm_tensor): a view of the model
        # bytes, or a copy for what is updated in place (STATE) or cannot be viewed
        dt, kind, off, n = row[0], row[2], row[9], row[10]
        if dt == DT_INT8:
            return self._s8(off, n) if n else None
        if dt == DT_INT32:
            return self._i32(off, n >> 2, kind == KIND_STATE)
        if dt == DT_F32:
            # per-channel scales: views like the weights; optimiser state and master
            # copies (STATE) are updated in place: copied
            v = None if kind == KIND_STATE else self._view(off, n, 102)
            return array.array("f", self._raw(off, n)) if v is None else v
        return None

    def _const(self, i):
        # a layer's constant i at load: its data, no Tensor object (its fields stay in _trow)
        K.mtm_tensor(self._bytes, i, self._trow)
        if self._trow[2] != KIND_CONST:
            return self._read_tensor(i).data  # (a checkpoint's tensor of another kind)
        self._held.add(i)
        return self._data(self._trow)

    def _read_tensor(self, i):
        buf, row = self._bytes, self._trow
        K.mtm_tensor(buf, i, row)
        scale = struct.unpack_from("<f", buf, self._tt + 48 * i + 32)[0]
        t = Tensor(i, row, scale)
        t.data = self._data(row)
        return t

    def tensor(self, i):
        """Tensor i: tensors[i], or for a layer's constant (None there: the layer holds its
        data, as w, b, mult, shift, w_scale) one read again from the model bytes."""
        t = self.tensors[i]
        return self._read_tensor(i) if t is None else t

    def _s8(self, off, n):
        return memoryview(self._bytes)[off:off + n]

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
            return K.mtm_view(memoryview(self._bytes)[off:off + n], code)
        except (TypeError, ValueError):  # e.g. CircuitPython's memoryview of another type
            return None

    def _raw(self, off, n):
        # bytes off..off+n of the file for array(typecode, ...), which takes a
        # bytes / bytearray as raw bytes but a memoryview element by element
        seg = self._bytes[off:off + n]
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

    def _plan(self, keep_from):
        """Activation buffers for a forward pass that keeps every activation
        used by layers >= keep_from (None: inference only)."""
        keep_from = self._keep(keep_from)
        key = -1 if keep_from is None else keep_from
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        tensors, layers = self.tensors, self.layers
        last_use = {}
        for ly in layers:
            for t in ly.inputs:
                last_use[t] = ly.index
        keep = set()
        if keep_from is not None:
            for ly in layers[keep_from:]:
                for t in ly.inputs:
                    keep.add(t)
                keep.add(ly.output)
        # best-fit reuse: a buffer is free once its tensor's last consumer ran; a
        # tensor takes the smallest free buffer that is large enough (a view of
        # its first bytes: kernels get exact lengths) or a new one of its size.
        # The model input and output have buffers of their own.
        free = []  # whole buffers not in use
        owner = {}  # tensor -> the whole buffer it uses
        bufs = {}
        inp = self.input.index
        out_t = self.output.index
        bufs[inp] = zeros("b", self.input.numel)
        fz = None
        if keep_from is None:
            fz = _place(self, bufs, owner, last_use)
        for ly in layers if fz is None else ():
            t = tensors[ly.output]
            n = t.numel
            buf = None
            if ly.output != out_t:
                best = -1
                for k in range(len(free)):
                    if len(free[k]) >= n and (best < 0 or len(free[k]) < len(free[best])):
                        best = k
                if best >= 0:
                    buf = free.pop(best)
            if buf is None:
                buf = zeros("b", n)
            owner[ly.output] = buf
            bufs[ly.output] = buf if len(buf) == n else memoryview(buf)[:n]
            for k, ti in enumerate(ly.inputs):
                if k and ti == ly.inputs[0]:
                    continue  # x + x: one buffer, freed once
                if last_use.get(ti) == ly.index and ti not in keep and ti != inp and ti != out_t:
                    free.append(owner[ti])
        self._owner[key] = owner
        self._fused[key] = fz
        steps = []
        for ly in layers:
            steps.append(self._step(ly, bufs, fz))
        plan = (bufs, steps)
        # buffers of other plans stay cached: inference and training plans coexist
        self._plans[key] = plan
        return plan

    def _keep(self, keep_from):
        # while layers are trained, their plan serves inference too: one set of buffers,
        # not an inference plan beside the training one (docs/memory.md)
        if keep_from is None and self._bw is not None:
            return self._bw.first
        return keep_from

    def _drop_plans(self, keep):
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
        if f is not None:
            a, side, tile = f
            return (K.conv2d_add_s8_forward, (p, x, ly.w, ly.b, ly.mult, ly.shift, a.params, side,
                                              bufs[a.output], tile), ly)
        if op == OP_CONV2D:
            return (K.conv2d_s8_forward, (p, x, ly.w, ly.b, ly.mult, ly.shift, y), ly)
        if op == OP_LINEAR:
            return (K.linear_s8_forward, (p, x, ly.w, ly.b, ly.mult, ly.shift, y), ly)
        if op == OP_LUT:
            return (K.lut_s8_forward, (x, ly.table, y), ly)
        if op == OP_RELU:
            return (K.relu_s8_forward, (x, p[_P_RELU_ZP], y), ly)
        if op == OP_RELU6:
            return (K.relu6_s8_forward, (x, p[_P_RELU_ZP], p[_P_RELU6_Q6], y), ly)
        if op == OP_MAXPOOL:
            return (K.maxpool_s8_forward, (p, x, y), ly)
        if op == OP_AVGPOOL:
            return (K.avgpool_s8_forward, (p, x, y), ly)
        if op == OP_GAP:
            return (K.global_avgpool_s8_forward, (x, p[_P_GAP_HW], p[_P_GAP_C], y), ly)
        if op == OP_ADD:
            return (K.add_s8_forward, (p, x, bufs[ly.inputs[1]], y), ly)
        if op == OP_CONCAT:
            return (K.concat_s8_forward, (p, x, bufs[ly.inputs[1]], y), ly)
        if op == OP_UPSAMPLE:
            return (K.upsample_s8_forward, (p, x, y), ly)
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
        bufs, steps = self._plan(keep_from)
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
        self._last_out = out
        self._last_keep = -1 if keep_from is None else keep_from
        return out

    def activation(self, t, keep_from=None):
        """The buffer of tensor index t in the given plan (after forward)."""
        b = self._plan(keep_from)[0].get(t)
        if b is None:
            raise ValueError("activation: tensor %d is not kept whole in this plan (a conv's output added "
                             "into the residual path a few rows at a time); use a plan with keep_from at or "
                             "before its layer" % t)
        return b

    def predict(self, x):
        """Class index: argmax of the int8 output (the first maximum wins)."""
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
        q = q if q is not None else self._last_out
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
        uses too (now.Now's gradient window), placed with its buffers (bw.window, or None
        where no idle forward buffer holds it: a memoryview of its bytes); redo: where
        nothing else holds the int32 scratch, an activation may, made again during backward
        (_recompute_host; Trainer(recompute=True))."""
        idx = self.select(spec)
        for ly in self.layers:
            if ly.index in idx:
                ly.make_trainable(sums)
            elif ly.trained:  # trained before: keep its updated weights, drop its gradient buffers
                ly.trained = False
                ly.gw = ly.gb = ly.grad = ly._fold = None
        first = idx[0]
        self._drop_plans(first)
        self.rebind()
        for ly in self.layers[first:]:
            if ly.w is not None and not ly.trained:
                ly.refresh_ratios()  # a frozen conv/linear between trained layers back-propagates
        bufs, _ = self._plan(first)
        region = set()
        for ly in self.layers[first:]:
            region.add(ly.output)
        inplace = self._inplace_errors(first, region, not window)
        ebuf, etmp, emerge = {}, {}, {}
        for t in inplace:
            ebuf[t] = bufs[t]
        need, acc_n, host = self._scratch_plan(first, region, inplace)
        # the error buffers and the int32 scratch (its own bytes unless an idle error
        # buffer holds it) go into the forward buffers idle during backward where they fit
        # (docs/memory.md, "Where backward's buffers live"), else into new buffers
        idle = self._idle(first)
        sizes = [len(b) for b in idle]
        items, at = self._pack(first, region, inplace, 4 * acc_n if acc_n and host is None and kern.NATIVE
                               else 0, sizes, window if kern.NATIVE else 0)
        acc = win = src = None  # src: (buffer, offset) of the int32 scratch's bytes
        for i in range(len(items)):
            n, t, kind = items[i]
            p = at.get(i)
            if t < 0:  # the scratch / window: retyped by the loader binding (an unaligned buffer cannot be)
                if p is not None:
                    v = memoryview(idle[p[0]])[p[1]:p[1] + n]
                    if t == -2:
                        win = v  # bytes: now.Now retypes it (and zeroes it through them)
                        continue
                    acc = _retyped(v, 105)
                    if acc is not None:
                        src = (idle[p[0]], p[1])
                continue
            v = zeros("b", n) if p is None else memoryview(idle[p[0]])[p[1]:p[1] + n]
            (ebuf, etmp, emerge)[kind][t] = v
        items = at = idle = None
        if host is not None:  # the int32 scratch in place in an idle int8 error buffer
            acc = _retyped(memoryview(ebuf[host])[:4 * acc_n], 105)
            if acc is not None:
                src = (ebuf[host], 0)
        r = None
        if redo and acc is None and acc_n:
            r = self._recompute_host(first, inplace, need, acc_n)
        redo = None
        if r is not None:  # in an activation whose producer runs again before its pool's backward
            b = self._owner[first][r[0]]
            acc = _retyped(memoryview(b)[:4 * acc_n], 105)
            if acc is not None:
                src = (b, 0)
                redo = (r[2], r[1])
        if acc is None and acc_n:
            acc = zeros("i", acc_n)
        # the same bytes as float32: the optimiser's update scratch (optim.step; idle then)
        frow = _retyped(memoryview(src[0])[src[1]:src[1] + 4 * acc_n], 102) if src is not None else None
        accv = {}
        for ly in need:
            accv[ly.index] = memoryview(acc)[:self.tensors[ly.inputs[0]].numel]
        self._bw = _BackwardPlan(first, region, bufs, ebuf, etmp, emerge, accv, inplace)
        self._bw.window = win
        self._bw.frow = frow  # float32 view of the scratch (None: the optimiser makes its own row)
        self._bw.redo = redo  # (pool index, producer index): the forward to run again there
        self.trained_layers = [self.layers[i] for i in idx]
        return self.trained_layers

    def _idle(self, first):
        # the whole buffers of the training plan keeping from `first` (see _plan) that hold
        # no kept tensor: a buffer reused for several tensors only when none of them is kept,
        # the model input's when no layer from first on reads it. Idle from the end of a
        # forward to the next one (backward's buffers go there: _pack). In plan order, the
        # model input's first, as memplan.py and info.py list them.
        keep = set()
        for ly in self.layers[first:]:
            for t in ly.inputs:
                keep.add(t)
            keep.add(ly.output)
        keep.add(self.output.index)
        owner = self._owner[first]
        seen, kept = [], []
        for ly in self.layers:
            b = owner[ly.output]
            k = 0
            while k < len(seen) and seen[k] is not b:
                k += 1
            if k == len(seen):
                seen.append(b)
                kept.append(False)
            if ly.output in keep:
                kept[k] = True
        out = [] if self.input.index in keep else [self._plans[first][0][self.input.index]]
        for k in range(len(seen)):
            if not kept[k]:
                out.append(seen[k])
        return out

    def _pack(self, first, region, inplace, scratch, sizes, window=0):
        # backward's buffers in the idle forward buffers of lengths `sizes` (_idle), for
        # memplan.py too: items (bytes, tensor, kind), kind 0 ebuf, 1 etmp, 2 emerge (the
        # tensors read by two layers), tensor -1 the int32 scratch (scratch bytes, 0: none),
        # -2 now.Now's float32 window (window bytes); first fit decreasing (ties in item
        # order), offsets rounded up to 4 (scratch and window are retyped). All are alive
        # through the whole backward: none overlap.
        # Returns (items, {item index: (buffer index, offset)}); the others get new buffers.
        cons = {}
        for ly in self.layers[first:]:
            for t in ly.inputs:
                if t in region:
                    cons[t] = cons.get(t, 0) + 1
        items = [(scratch, -1, 0)] if scratch else []
        if window:  # now.Now's float32 gradient window (tensor -2), zeroed by Now before use
            items.append((window, -2, 0))
        for ly in self.layers[first:]:
            t = ly.output
            if t in inplace:
                continue
            n = self.tensors[t].numel
            items.append((n, t, 0))
            if cons.get(t, 0) > 1:
                items.append((n, t, 1))
                items.append((n, t, 2))
        at = {}
        if sizes:
            used = [0] * len(sizes)
            for i in sorted(range(len(items)), key=lambda i: (-items[i][0], i)):
                n = items[i][0]
                for b in range(len(sizes)):
                    o = (used[b] + 3) & ~3
                    if o + n <= sizes[b]:
                        at[i] = (b, o)
                        used[b] = o + n
                        break
        return items, at

    def _inplace_errors(self, first, region, over=True):
        # {t: its producer}: activations whose int8 error is written over the activation
        # itself (docs/memory.md), for memplan.py too:
        # - t's only reader in backward is a pool with disjoint windows, and t's producer is
        #   a conv / linear whose fused activation mask (_act_keep) the pool's
        #   *_grad_input_act kernel applies as it writes;
        # - (over) t's only reader is a conv / linear, which reads t for its weight gradient
        #   before its grad input writes t's error, and t's producer reads nothing of t in
        #   its own backward: no fused activation, or a conv / linear's fused ReLU / ReLU6,
        #   whose mask the grad input applies as it writes (lo, hi: _act_keep); not a ReLU
        #   layer. Not where the reader steps during backward (now.Now: grad input first).
        made, cons = {}, {}
        for ly in self.layers[first:]:
            made[ly.output] = ly
            for t in ly.inputs:
                cons[t] = cons.get(t, 0) + 1
        out = {}
        for ly in self.layers[first:]:
            t, p, op = ly.inputs[0], ly.params, ly.op
            if t not in region or cons[t] != 1 or t == self.output.index:
                continue
            src = made[t]
            if (op == OP_MAXPOOL or op == OP_AVGPOOL) and p[7] >= p[5] and p[8] >= p[6]:
                if src.op == OP_CONV2D or src.op == OP_LINEAR:
                    out[t] = src
            elif over and (op == OP_CONV2D or op == OP_LINEAR) and src.op != OP_RELU and src.op != OP_RELU6 \
                    and (not src.act or src.op == OP_CONV2D or src.op == OP_LINEAR):
                out[t] = src
        return out

    def _recompute_host(self, first, inplace, need, n):
        # (t, its producer's index, its reader's index) of an activation whose buffer can hold
        # the int32 scratch (n values) when nothing else does (docs/memory.md): t takes its
        # error from a pool with disjoint windows (inplace), every layer using the scratch
        # comes after that pool (backward runs them before it), and the producer, a conv /
        # linear, runs its forward again just before the pool's backward: its input is kept.
        # For memplan.py too. None when there is no such t.
        if not need or not kern.NATIVE:
            return None
        for t, src in inplace.items():
            for ly in self.layers[src.index + 1:]:
                if ly.inputs[0] == t:
                    break
            if (ly.op == OP_MAXPOOL or ly.op == OP_AVGPOOL) and need[0].index > ly.index and \
                    self.tensors[t].numel >= 4 * n:
                return t, src.index, ly.index
        return None

    def _scratch_plan(self, first, region, inplace):
        # backward's int32 grad-input scratch (docs/memory.md), for memplan.py too: the
        # layers that need it (conv / linear; pools whose windows overlap, pool.c), its
        # size, and the tensor whose int8 error buffer can hold it (else None): one with
        # a single consumer below every such layer (its error is written after the
        # scratch's last use), of 4 bytes per value, and not an activation taking its own
        # error (inplace: _inplace_errors). Not with the pure-Python kernels, whose mtm_view
        # copies.
        need, n, cons = [], 0, {}
        for ly in self.layers[first:]:
            t, p, op = ly.inputs[0], ly.params, ly.op
            if t in region and (op == OP_CONV2D or op == OP_LINEAR or (
                    (op == OP_MAXPOOL or op == OP_AVGPOOL) and (p[7] < p[5] or p[8] < p[6]))):
                need.append(ly)
                n = max(n, self.tensors[t].numel)
            for t in ly.inputs:
                cons[t] = -1 if t in cons else ly.index  # -1: two consumers or more
        if need and kern.NATIVE:
            for ly in self.layers[first:]:
                if 0 <= cons.get(ly.output, -1) < need[0].index and self.tensors[ly.output].numel >= 4 * n \
                        and ly.output not in inplace:
                    return need, n, ly.output
        return need, n, None

    def backward(self, err, err_scale, policy=None):
        """Back-propagate the int8 error of the output (real value err_scale * err)
        through the layers from the first trained one on, adding float32
        weight gradients into each trained layer's gw / gb.

        err is modified in place. policy(layer, e) may return a channel mask
        (1-byte buffer, 1 = keep) for a trained layer given its int8 output
        error e: masked channels get no gradient and no back-propagation."""
        if self._bw is None:
            raise ValueError("backward: no trained layers (use Trainer or set_trained first)")
        bw = self._bw
        first, region, bufs, ebuf, etmp, emerge, accv = (bw.first, bw.region, bw.bufs, bw.ebuf, bw.etmp,
                                                          bw.emerge, bw.accv)
        inplace = bw.inplace
        if self._last_keep != first:
            raise ValueError("backward: run forward(x, keep_from=%d) first (the first trained layer); "
                             "other forwards do not keep the activations backward needs" % first)
        tensors = self.tensors
        ldexp = math.ldexp
        out_t = self.output.index
        cur = {out_t: err}
        scale = {out_t: err_scale}
        conv_gw = kern.f32("conv2d_s8_grad_weight_f32")
        lin_gw = kern.f32("linear_s8_grad_weight_f32")
        redo = bw.redo
        for j in range(len(self.layers) - 1, first - 1, -1):
            ly = self.layers[j]
            t_out = ly.output
            e = cur.pop(t_out, None)  # (every consumer has arrived: its entries are done)
            if e is None:
                continue
            if redo is not None and j == redo[0]:  # its input held the scratch: made again
                st = self._plans[first][1][redo[1]]
                st[0](*st[1])
            s = scale.pop(t_out)
            op, p = ly.op, ly.params
            y = bufs[t_out]
            if t_out in inplace:
                pass  # masked by the pool below, which wrote the error over y
            elif ly.act == ACT_RELU:
                K.relu_s8_backward(y, p[_P_ACT_MIN], e)
            elif ly.act == ACT_RELU6:
                K.relu6_s8_backward(y, p[_P_ACT_MIN], p[_P_ACT_MAX], e)
            x_t = ly.inputs[0]
            need = x_t in region
            s_in = None  # the scale of x_t's error written into dest (one input)
            if op == OP_CONV2D or op == OP_LINEAR:
                mask = None
                if ly.trained:
                    if policy is not None:
                        mask = policy(ly, e)
                        t = ly.touched
                        if t is None:  # the first sample since the update: none touched yet
                            tb = ly._touch
                            if tb is None:  # kept with zeros to clear it: a new array a sample was garbage
                                c = ly.out_c
                                tb = ly._touch = (bytearray(c), bytes(c))
                            t = ly.touched = tb[0]
                            t[:] = tb[1]
                        K.update_u8_touch(t, mask)  # the update skips channels no sample touched
                    x = bufs[x_t]
                    sw = tensors[x_t].scale * s
                    sb = s
                    if ly._fold is not None and _fold(ly, mask, sw, s) != 1:
                        n = ly.model._fdiv  # batch n folded into the momentum: each gradient / n
                        sw, sb = sw / n, s / n
                    if ly.gw is None:  # steps below, once its grad input used the weights (now.Now)
                        if self._now is None:
                            raise ValueError("backward: layer %s keeps no gradient sums "
                                             "(set_trained(sums=False)): only a Trainer steps it" % ly.name)
                    elif op == OP_CONV2D:
                        conv_gw(p, x, e, mask, sw, sb, ly.gw, ly.gb)
                    else:
                        lin_gw(p, x, e, mask, sw, sb, ly.gw, ly.gb)
                if need:
                    dest = self._dest(x_t, cur, ebuf, etmp)
                    gin = K.conv2d_s8_grad_input if op == OP_CONV2D else K.linear_s8_grad_input
                    a = inplace.get(x_t)  # over the activation: its producer's mask as it writes
                    if a is not None and a.act:
                        lo, hi = _act_keep(a)
                        sh = gin(p, e, ly.w, ly.wr, mask, accv[j], dest, lo, hi)
                    else:
                        sh = gin(p, e, ly.w, ly.wr, mask, accv[j], dest)
                    s_in = ldexp(s * ly.w_scale[ly._ein_i], sh - ly.ein_r)  # (ein_top)
                if ly.trained and ly.gw is None:
                    self._now.layer(ly, conv_gw if op == OP_CONV2D else lin_gw, p, x, e, mask, sw, s)
            elif not need:
                pass
            elif op == OP_RELU or op == OP_RELU6:
                dest = self._dest(x_t, cur, ebuf, etmp)
                dest[:] = e
                if op == OP_RELU:
                    K.relu_s8_backward(y, p[_P_RELU_ZP], dest)
                else:
                    K.relu6_s8_backward(y, p[_P_RELU_ZP], p[_P_RELU6_Q6], dest)
                s_in = s
            elif op == OP_LUT:  # from the stored input; base scale s * 2^-d_shift
                dest = self._dest(x_t, cur, ebuf, etmp)
                sh = K.lut_s8_grad_input(bufs[x_t], e, ly.dtable, dest)
                s_in = ldexp(s, sh - p[_P_LUT_DSHIFT])
            elif op == OP_MAXPOOL:
                dest = self._dest(x_t, cur, ebuf, etmp)
                a = inplace.get(x_t)
                if a is not None:  # over the activation itself, with its producer's mask
                    lo, hi = _act_keep(a)
                    sh = K.maxpool_s8_grad_input_act(p, bufs[x_t], e, lo, hi, dest)
                else:
                    sh = K.maxpool_s8_grad_input(p, bufs[x_t], e, accv.get(j), dest)
                s_in = ldexp(s, sh)
            elif op == OP_AVGPOOL:
                dest = self._dest(x_t, cur, ebuf, etmp)
                a = inplace.get(x_t)
                if a is not None:
                    lo, hi = _act_keep(a)
                    sh = K.avgpool_s8_grad_input_act(p, bufs[x_t], e, lo, hi, dest)
                else:
                    sh = K.avgpool_s8_grad_input(p, e, accv.get(j), dest)
                s_in = ldexp(s, sh - 16)
            elif op == OP_GAP:
                dest = self._dest(x_t, cur, ebuf, etmp)
                K.global_avgpool_s8_grad_input(e, p[_P_GAP_HW], dest)
                s_in = s / p[_P_GAP_HW]
            elif op == OP_UPSAMPLE:  # sum of the errors each input fed; base scale s
                dest = self._dest(x_t, cur, ebuf, etmp)
                sh = K.upsample_s8_grad_input(p, e, dest)
                s_in = ldexp(s, sh)
            if s_in is not None:  # its error arrives at x_t: the first, or merged with one there
                if x_t not in cur:
                    cur[x_t] = dest
                    scale[x_t] = s_in
                else:
                    self._arrive(x_t, dest, s_in, cur, scale, ebuf, etmp, emerge)
            if op == OP_CONCAT:  # each input its slice of e, exact, same scale
                for part in (0, 1):
                    t = ly.inputs[part]
                    if t in region:
                        dest = self._dest(t, cur, ebuf, etmp)
                        K.concat_s8_grad_input(p, e, part, dest)
                        self._arrive(t, dest, s, cur, scale, ebuf, etmp, emerge)
            if op == OP_ADD:
                for t in ly.inputs:
                    if t in region:
                        dest = self._dest(t, cur, ebuf, etmp)
                        dest[:] = e
                        self._arrive(t, dest, s, cur, scale, ebuf, etmp, emerge)

    def _dest(self, t, cur, ebuf, etmp):
        return ebuf[t] if t not in cur else etmp[t]

    def _arrive(self, t, dest, s, cur, scale, ebuf, etmp, emerge):
        if t not in cur:
            cur[t] = dest
            scale[t] = s
            return
        # a second consumer's error: merge the two (each with its own scale)
        s0 = scale[t]
        ra, rb = merge_ratios(s0, s)
        out = emerge[t]
        sh = K.add_s8_grad_merge(cur[t], ra, dest, rb, out)
        emerge[t] = cur[t]
        ebuf[t] = out
        cur[t] = out
        scale[t] = math.ldexp(s0 if s0 > s else s, sh - 15)

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
        keep_from = self._keep(keep_from)
        key = -1 if keep_from is None else keep_from
        if key in self._plans:
            bufs = self._plans[key][0]
        else:
            bufs = self._plan(keep_from)[0]
            del self._plans[key]
        seen = []
        total = len(bufs[self.input.index])
        for b in self._owner[key].values():
            if not any(b is s for s in seen):
                seen.append(b)
                total += len(b)
        if key not in self._plans:
            del self._owner[key]
        return total

    def summary(self):
        """Print layers, shapes, parameters and RAM."""
        t = self.tensors
        print("model: %d layers, %d tensors, %d bytes%s" % (
            len(self.layers), len(t), self.size, " (trained %d steps)" % self.train_steps
            if self.flags & FLAG_TRAINED else ""))
        print("%-3s %-16s %-18s %-16s %-16s %8s" % ("#", "name", "op", "input", "output", "params"))
        total = 0
        for ly in self.layers:
            op = OP_NAMES[ly.op] + (("+" + ACT_NAMES[ly.act]) if ly.act else "")
            shp = "+".join(str(t[i].shape) for i in ly.inputs)
            print("%-3d %-16s %-18s %-16s %-16s %8d%s" % (
                ly.index, ly.name[:16], op, shp, str(t[ly.output].shape), ly.n_params,
                "  trained" if ly.trained else ""))
            total += ly.n_params
        print("params: %d (%d bytes of weights in the model bytes, not copied)" % (
            total, sum(len(ly.w) + 4 * len(ly.b) for ly in self.layers if ly.w is not None)))
        print("RAM: activations %d bytes (inference)" % self.ram())
        print("input %s scale=%.6g zp=%d; output %s scale=%.6g zp=%d" % (
            self.input.shape, self.input.scale, self.input.zero_point,
            self.output.shape, self.output.scale, self.output.zero_point))

    def __repr__(self):
        return "<Model %d layers %s -> %s, %d params, %d bytes>" % (
            len(self.layers), self.input.shape, self.output.shape,
            sum(ly.n_params for ly in self.layers), self.size)

    def save(self, path, trainer=None):
        if self._lora is not None:
            raise ValueError("save: LoRA adapters are attached: lora.save(path) writes them, lora.merge() "
                             "folds them into the model first")
        from microtrain import checkpoint

        checkpoint.save(self, path, trainer)


def _read_file(path):
    import os

    size = os.stat(path)[6]
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
    K.mtm_validate(buf)
    m = Model(buf, words)
    kern.release("mtm_loader")
    return m
