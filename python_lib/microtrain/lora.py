# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# LoRA adapters on a loaded model (docs/lora.md): y = W x + B A x next to a
# frozen int8 layer W, with A (rank r, the layer's geometry) and B (1x1 / r
# inputs) ordinary int8 layers that the Trainer trains in any mode.
#
# Imported on use (`from microtrain.lora import LoRA`): `import microtrain`
# does not load it. Attaching rewrites the model's layer list in RAM:
#   W: x -> z (the base layer, frozen, in place; its output requantised to z)
#   A: x -> u, B: u -> v, ADD(z, v) -> y (y = the base layer's output tensor,
#   with the base layer's fused activation)
# MemFLoRA on a layer read by a global average pool alone: the branch joins behind
# the pool instead (base and pool unchanged, the pool writing g'):
#   A: x -> u, POOL: u -> u' (rank r), B: u' -> v, ADD(g', v) -> g
# so forward, backward, the optimisers, the sparse policies and the feature
# cache work on the adapters unchanged. detach() restores the file's graph.
import array
import math
import struct

from micropython import const

from microtrain import kern
from microtrain.model import Layer, Tensor
from microtrain.quant import quantize_multiplier, zeros

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
# The .mtm constants this module reads, private: inlined, no globals entry.
_TROW_DTYPE = const(0)
_TROW_RANK = const(1)
_TROW_KIND = const(2)
_TROW_QUANT = const(3)
_TROW_SHAPE0 = const(5)
_TROW_ZERO_POINT = const(12)
_TROW_QSCALES = const(13)
_TENSOR_N = const(14)
_DT_INT8 = const(1)
_KIND_ACT = const(0)
_Q_TENSOR = const(1)
_OP_CONV2D = const(1)
_OP_LINEAR = const(2)
_OP_GAP = const(7)
_OP_ADD = const(8)
_ACT_NONE = const(0)
# --- generated: end

MAGIC = b"MTLA"
VERSION = 1
_HEAD = "<4sHHIIII"  # magic, version, n adapters, rank, base total_len, base crc, seed
_ENTRY = "<HBBiiifI"  # name len, op, act, out_c, k (A row), k (B row) = rank, s_u, data bytes


def _f32(v):
    # one float32 rounding: each float op below is one f32 operation on every build
    return array.array("f", (v,))[0]


def _mults(ly, mult, shift):
    """(mult, shift) per channel = quantize_multiplier((s_in * w_scale[c]) / s_out) in
    float32, as update_s8_apply computes them."""
    s_in, s_out = ly.in_scale, ly.out_scale
    for c in range(len(mult)):
        m, s = quantize_multiplier(_f32(_f32(s_in * ly.w_scale[c]) / s_out))
        mult[c], shift[c] = m, s


class _Node(Layer):
    # A layer of the adapter path: not in the file; its parameters are private arrays. What it
    # does not set here is Layer's class default.

    fused = "lora"

    def __init__(self, model, op, act, name, inputs, output, params):
        self.model = model
        self.index = -1
        self.op = op
        self.act = act
        self._nm = name
        self.inputs = inputs
        self.output = output
        self.params = params

    def _own(self):
        pass  # its arrays are its own already: no copies


def _tensor(model, shape, scale, zp):
    row = [0] * _TENSOR_N  # the fields mtm_tensor would give an activation tensor
    row[_TROW_DTYPE], row[_TROW_RANK], row[_TROW_KIND] = _DT_INT8, len(shape), _KIND_ACT
    row[_TROW_QUANT], row[_TROW_ZERO_POINT], row[_TROW_QSCALES] = _Q_TENSOR, zp, -1
    for d in range(len(shape)):
        row[_TROW_SHAPE0 + d] = shape[d]
    t = Tensor(len(model.tensors), row, scale)
    model.tensors.append(t)
    return t


class _Adapter:
    # One adapted layer: the base layer, its saved descriptor fields, A, B, the add.

    def __init__(self, base):
        self.base = base
        self.saved = (base.params, base.shift, base.output, base.act)
        self.a = self.b = self.add = None
        self.z = self.u = self.v = None  # base output (pre-add), A's output (rank r), B's output
        self.pool = self.pu = None  # memory floor behind a pool: the pool layer, pool of u
        self.ts = None  # the tensors it added, in order
        self.s_y = 0.0  # the layer's output scale (memory_floor: B's scale follows u's)


class LoRA:
    """Rank-`rank` adapters on the layers `layers` selects ("last:N", "all", names,
    indices: Model.select) of `model`, attached at once.

    calib:  samples ((x, label) pairs or x buffers) to set the scale of A's int8
            output u from A x on them (docs/lora.md); None: from the input range.
    headroom: u's range over the largest |A x| of calib at the start (A grows).
    seed:   of A's random init (xorshift32; B starts at zero, so the adapted model
            computes the base model).
    memory_floor: MemFLoRA (docs/lora.md): A stays frozen (a random down-projection),
            only B is trained, its weight scale matched to the layer's output scale
            (B at full range on u at full range spans y's range), so backward's weight
            gradients read the rank-r u and never a full-width input; on a layer that a
            global average pool alone reads, the branch joins behind the pool (B on the
            pooled u), so that backward reads no mask of the layer's output either.
    Train with Trainer(model, train=lora.train, mode=...); save() writes the
    adapters alone; merge() folds them into the base layers (requantised)."""

    def __init__(self, model, rank=4, layers="last:3", calib=None, seed=1, headroom=4, memory_floor=False,
                 _data=None):
        if type(rank) is not int or not 1 <= rank <= 256:
            raise ValueError("LoRA: rank must be an int in 1..256, got %r" % (rank,))
        if type(headroom) not in (int, float) or not 1 <= headroom <= 127:
            raise ValueError("LoRA: headroom must be a number in 1..127, got %r" % (headroom,))
        if type(seed) is not int:
            raise ValueError("LoRA: seed must be an int, got %r" % (seed,))
        if model.lora is not None:
            raise ValueError("LoRA: the model already has adapters (detach() or merge() them first)")
        if any(ly.trained for ly in model.layers) or model.backward_plan is not None:
            raise ValueError("LoRA: attach adapters before making a Trainer (the model has trained layers)")
        idx = model.select(layers)
        for j in idx:
            ly = model.layers[j]
            if ly.op == _OP_CONV2D and ly.params[12] != 1:
                raise ValueError("LoRA: layer %s is a grouped conv (groups=%d): adapters need groups=1" %
                                 (ly.name, ly.params[12]))
            sh = ly.shift
            if ly.act != _ACT_NONE and min(sh) - 1 < -31:
                raise ValueError("LoRA: layer %s: output multiplier too small for the adapter's sum" %
                                 ly.name)
        self.model = model
        self.rank = rank
        self.seed = seed
        self.headroom = headroom
        self.memory_floor = bool(memory_floor)
        self._file = model.buf  # the base this was attached to (its length and CRC)
        self._merged = False
        self.adapters = [_Adapter(model.layers[j]) for j in idx]
        self._rng = (seed * 2654435761 + 12345) & 0xFFFFFFFF or 1
        for ad in self.adapters:
            self._build(ad, None if _data is None else _data[ad.base.name])
        self._relink()
        model.lora = self
        if _data is None and calib is not None:
            self.calibrate(calib)

    # -- the graph -------------------------------------------------------------------------

    def _build(self, ad, data):
        m, ly, r = self.model, ad.base, self.rank
        if self.memory_floor:
            pool = self._reader(ly)
            if pool is not None and pool.op == _OP_GAP:
                return self._build_pooled(ad, data, pool)
        p = ly.params
        conv = ly.op == _OP_CONV2D
        yt = m.tensors[ly.output]
        xt = m.tensors[ly.inputs[0]]
        out_c = ly.out_c
        k = len(ly.w) // out_c  # fan-in of one output (k_h * k_w * in_c)
        shp = yt.shape
        ushape = shp[:-1] + (r,)
        # the base's pre-activation z: with a fused activation at twice the output scale
        # and zero point 0 (its negative values survive until the add), else the output's
        if ly.act != _ACT_NONE:
            zt = _tensor(m, shp, _f32(2.0 * yt.scale), 0)
        else:
            zt = _tensor(m, shp, yt.scale, yt.zero_point)
        if data is None:
            s_u = self._u_scale0(xt)
        else:
            s_u = data[0]
        ut = _tensor(m, ushape, s_u, 0)
        vt = _tensor(m, shp, _f32(2.0 * yt.scale), 0)  # B's output: the whole range of y
        ad.u, ad.v = ut, vt
        # A: the base geometry with r outputs
        if conv:
            pa = array.array("i", p)
            pa[5], pa[14], pa[15], pa[16] = r, 0, -128, 127
            pb = array.array("i", (p[3], p[4], r, p[3], p[4], out_c, 1, 1, 1, 1, 0, 0, 1, 0, 0, -128, 127))
        else:
            pa = array.array("i", (p[0], r, p[2], 0, -128, 127))
            pb = array.array("i", (r, out_c, 0, 0, -128, 127))
        a = _Node(m, ly.op, _ACT_NONE, ly.name + ".lora_A", (ly.inputs[0],), ut.index, pa)
        b = _Node(m, ly.op, _ACT_NONE, ly.name + ".lora_B", (ut.index,), vt.index, pb)
        if data is None:
            self._init_a(a, r, k)
            b.w = array.array("b", bytes(out_c * r))
            b.w_scale = array.array("f", [_f32(_f32(1.0 / _f32(math.sqrt(r))) / 127.0)] * out_c)
            b.b = zeros("i", out_c)
        else:
            a.w, a.w_scale, a.b, b.w, b.w_scale, b.b = data[1:]
        if data is None and self.memory_floor:
            self._match(ad, b, s_u, yt.scale)
        for n in (a, b):
            n.mult = zeros("i", len(n.b))
            n.shift = zeros("i", len(n.b))
            _mults(n, n.mult, n.shift)
        # the add: exact power-of-two multipliers (docs/lora.md), the base's activation clamp;
        # v at 2 s_y, z at 2 s_y (activation) or s_y: twice_max = 4 s_y, out 4 s_y / (2^20 s_y)
        o = 3 if not conv else 14
        if ly.act != _ACT_NONE:
            m1, s1, m2, s2, mo, so = 1 << 30, 0, 1 << 30, 0, 1 << 30, -17
        else:
            m1, s1, m2, s2, mo, so = 1 << 30, -1, 1 << 30, 0, 1 << 30, -17
        padd = array.array("i", (yt.numel, zt.zero_point, 0, p[o], m1, s1, m2, s2, mo, so, 20, p[o + 1],
                                 p[o + 2]))
        add = _Node(m, _OP_ADD, ly.act, ly.name + ".lora_add", (zt.index, vt.index), ly.output, padd)
        ad.a, ad.b, ad.add = a, b, add
        ad.z = zt
        ad.ts = [zt, ut, vt]

    def _reader(self, ly):
        # the one layer reading ly's output (None if none or several)
        got = None
        for o in self.model.layers:
            if ly.output in o.inputs:
                if got is not None:
                    return None
                got = o
        return got

    def _build_pooled(self, ad, data, pool):
        # MemFLoRA behind the pool: pool(act(W x)) + B pool(A x), the branch joining after the
        # activation, moved through the linear pool: B's gradient reads the r pooled values alone
        m, ly, r = self.model, ad.base, self.rank
        p = ly.params
        out_c = ly.out_c
        k = len(ly.w) // out_c
        gt = m.tensors[pool.output]
        s_u = self._u_scale0(m.tensors[ly.inputs[0]]) if data is None else data[0]
        g2 = _tensor(m, gt.shape, gt.scale, gt.zero_point)  # the pool's own output g'
        ut = _tensor(m, m.tensors[ly.output].shape[:-1] + (r,), s_u, 0)
        pt = _tensor(m, (r,), s_u, 0)  # the pool keeps the scale
        vt = _tensor(m, (out_c,), gt.scale, 0)  # g's own quantum: no dithering over positions here
        ad.z, ad.u, ad.v, ad.ts = g2, ut, vt, [g2, ut, pt, vt]
        ad.pool = pool
        ad.pool_out = pool.output
        if ly.op == _OP_CONV2D:
            pa = array.array("i", p)
            pa[5], pa[14], pa[15], pa[16] = r, 0, -128, 127
        else:
            pa = array.array("i", (p[0], r, p[2], 0, -128, 127))
        a = _Node(m, ly.op, _ACT_NONE, ly.name + ".lora_A", (ly.inputs[0],), ut.index, pa)
        pu = _Node(m, _OP_GAP, _ACT_NONE, ly.name + ".lora_pool", (ut.index,), pt.index,
                   array.array("i", (ut.numel // r, r)))
        b = _Node(m, _OP_LINEAR, _ACT_NONE, ly.name + ".lora_B", (pt.index,), vt.index,
                  array.array("i", (r, out_c, 0, 0, -128, 127)))
        if data is None:
            self._init_a(a, r, k)
            b.w = array.array("b", bytes(out_c * r))
            b.w_scale = zeros("f", out_c)
            b.b = zeros("i", out_c)
            self._match(ad, b, s_u, gt.scale)
        else:
            a.w, a.w_scale, a.b, b.w, b.w_scale, b.b = data[1:]
            ad.s_y = gt.scale
        for n in (a, b):
            n.mult = zeros("i", len(n.b))
            n.shift = zeros("i", len(n.b))
            _mults(n, n.mult, n.shift)
        # g' and v at s_g: twice_max = 2 s_g, each input at 1/2, out 2 s_g / (2^20 s_g)
        padd = array.array("i", (gt.numel, gt.zero_point, 0, gt.zero_point, 1 << 30, 0, 1 << 30, 0, 1 << 30,
                                 -18, 20, -128, 127))
        ad.a, ad.pu, ad.b = a, pu, b
        ad.add = _Node(m, _OP_ADD, _ACT_NONE, ly.name + ".lora_add", (g2.index, vt.index), pool.output, padd)

    def _init_a(self, a, r, k):
        # A ~ U(-1/sqrt(k), 1/sqrt(k)) (PyTorch LoRA's kaiming_uniform(a=sqrt(5))) as int8
        # levels -127..127 of scale bound / 127; B = 0
        bound = _f32(1.0 / _f32(math.sqrt(k)))
        a.w = array.array("b", bytes(r * k))
        rng = self._rng
        w = a.w
        for i in range(r * k):
            rng ^= (rng << 13) & 0xFFFFFFFF
            rng ^= rng >> 17
            rng ^= (rng << 5) & 0xFFFFFFFF
            w[i] = rng % 255 - 127
        self._rng = rng
        a.w_scale = array.array("f", [_f32(bound / 127.0)] * r)
        a.b = zeros("i", r)

    def _match(self, ad, b, s_u, s_y):
        # MemFLoRA's scale-matched up-projection: 127 r levels of B on u's 127 levels reach
        # y's 127 levels (B is still zero when its scale changes: the model is unchanged)
        ad.s_y = s_y
        s = _f32(_f32(s_y / _f32(127 * self.rank)) / s_u)
        for c in range(len(b.w_scale)):
            b.w_scale[c] = s

    def _u_scale0(self, xt):
        # u's scale without calibration: |u| up to the input's largest |x - zp|
        top = xt.zero_point + 128
        if 127 - xt.zero_point > top:
            top = 127 - xt.zero_point
        return _f32(_f32(xt.scale * top) / 127.0)

    def _relink(self):
        """The model's layer list with every adapter in place (base, A, B, add)."""
        m = self.model
        if not hasattr(self, "_orig"):
            self._orig = m.layers
        layers = []
        for ly in self._orig:
            layers.append(ly)
            for ad in self.adapters:
                if ad.pool is ly:
                    self._point(ad, True)
                    layers += [ad.a, ad.pu, ad.b, ad.add]
                elif ad.base is ly and ad.pool is None:
                    self._point(ad, True)
                    layers += [ad.a, ad.b, ad.add]
        for i in range(len(layers)):
            layers[i].index = i
        m.layers = layers
        self._reset()

    def _point(self, ad, on):
        ly = ad.base
        if ad.pool is not None:  # the base as it is; the pool writes g' while attached
            pl = ad.pool
            pl.rewire(pl.params, pl.shift, ad.z.index if on else ad.pool_out, pl.act)
            return
        if not on:
            ly.rewire(*ad.saved)
        elif ly.act != _ACT_NONE:
            p = array.array("i", ly.params)
            o = 3 if ly.op == _OP_LINEAR else 14
            p[o], p[o + 1], p[o + 2] = 0, -128, 127
            sh = array.array("i", ly.shift)
            for c in range(len(sh)):
                sh[c] -= 1  # half the multiplier: z = W x at twice the output scale
            ly.rewire(p, sh, ad.z.index, _ACT_NONE)
        else:
            ly.rewire(ly.params, ly.shift, ad.z.index, ly.act)

    def _reset(self):
        self.model.forget_plans()

    def detach(self):
        """Restore the model's own graph (the adapters stay in this object: save / attach again)."""
        m = self.model
        if m.lora is not self:
            return
        for ly in m.layers:
            if ly.trained:
                ly.trained = False
                ly.gw = ly.gb = ly.grad = None
        for ad in self.adapters:
            self._point(ad, False)
        m.layers = self._orig
        for i in range(len(m.layers)):
            m.layers[i].index = i
        del m.tensors[self._n_tensors():]
        self._reset()
        m.lora = None

    def _n_tensors(self):
        return self.adapters[0].z.index

    def attach(self):
        """Put detached adapters back on the model (not after merge)."""
        m = self.model
        if m.lora is not None or self._merged:
            raise ValueError("LoRA: the model already has adapters" if m.lora is not None else
                             "LoRA: merged into the base already")
        for ad in self.adapters:  # the same indices as before: the model's own tensors do not change
            m.tensors += ad.ts
        self._relink()
        m.lora = self

    # -- calibration -----------------------------------------------------------------------

    def calibrate(self, samples, passes=4):
        """Set each adapter's u scale from A x on `samples` (docs/lora.md): the largest
        |u| seen, times `headroom` (room for A to grow in training), over 127. A pass
        that saturates u (|q| = 127) retries with 4x the scale."""
        m = self.model
        first = min(ad.a.index for ad in self.adapters)
        todo = list(self.adapters)
        for _ in range(passes):
            top = [0] * len(todo)
            bufs = m.plan(first)[0]
            for s in samples:
                x = s[0] if isinstance(s, (tuple, list)) else s
                m.forward(x, first)
                for i in range(len(todo)):
                    u = bufs[todo[i].u.index]
                    t = max(max(u), -min(u))
                    if t > top[i]:
                        top[i] = t
            again = []
            for i in range(len(todo)):
                ad = todo[i]
                s = ad.u.scale
                if top[i] >= 127:
                    self._set_u(ad, _f32(s * 4.0))
                    again.append(ad)
                elif top[i] > 0:
                    self._set_u(ad, _f32(_f32(s * top[i]) / _f32(127.0 / self.headroom)))
            todo = again
            if not todo:
                break

    def _set_u(self, ad, s):
        ad.u.scale = s
        if ad.pool is not None:
            ad.ts[2].scale = s  # the pooled u (the pool keeps the scale)
        if self.memory_floor:
            self._match(ad, ad.b, s, ad.s_y)
        _mults(ad.a, ad.a.mult, ad.a.shift)
        _mults(ad.b, ad.b.mult, ad.b.shift)
        self.model.rebind()

    # -- what to train ---------------------------------------------------------------------

    @property
    def train(self):
        """The adapter layers' names, for Trainer(train=...): B alone with memory_floor."""
        out = []
        for ad in self.adapters:
            out += [ad.b.name] if self.memory_floor else [ad.a.name, ad.b.name]
        return out

    @property
    def n_params(self):
        """Trainable values: A (not with memory_floor) and B weights and biases of every adapter."""
        return sum((0 if self.memory_floor else ad.a.n_params) + ad.b.n_params for ad in self.adapters)

    def __repr__(self):
        return "<%s rank=%d on %s, %d params%s>" % (
            "MemFLoRA" if self.memory_floor else "LoRA", self.rank,
            ",".join(ad.base.name for ad in self.adapters), self.n_params,
            "" if self.model.lora is self else " (detached)")

    # -- adapter files ---------------------------------------------------------------------

    def save(self, path):
        """Write the adapters alone (docs/lora.md, adapter file): a few KB."""
        import os

        from microtrain.checkpoint import _crc, os_error

        base_len, base_crc = _base_id(self._file)
        try:
            f = open(path + ".tmp", "wb")
        except OSError as e:
            raise os_error(e, "lora.save", path) from None
        try:
            head = struct.pack(_HEAD, MAGIC, VERSION, len(self.adapters), self.rank, base_len, base_crc,
                               self.seed & 0xFFFFFFFF)
            crc = _crc(head, 0)
            f.write(head)
            for ad in self.adapters:
                a, b = ad.a, ad.b
                name = ad.base.name.encode()
                k = len(a.w) // self.rank
                parts = (a.w, a.w_scale, a.b, b.w, b.w_scale, b.b)
                n = 0
                for q in parts:
                    n += len(bytes(q))
                e = struct.pack(_ENTRY, len(name), ad.base.op, ad.saved[3], ad.base.out_c, k, self.rank,
                                ad.u.scale, n) + name
                crc = _crc(e, crc)
                f.write(e)
                for q in parts:
                    q = bytes(q)
                    crc = _crc(q, crc)
                    f.write(q)
            f.write(struct.pack("<I", crc & 0xFFFFFFFF))
        except BaseException as e:  # a full file system: no partial .tmp left, the old file kept
            f.close()
            os.remove(path + ".tmp")
            if isinstance(e, OSError):
                raise os_error(e, "lora.save", path) from None
            raise
        f.close()
        try:
            os.remove(path)
        except OSError:
            pass
        os.rename(path + ".tmp", path)

    # -- merge -----------------------------------------------------------------------------

    def merge(self):
        """Fold the adapters into the base layers (docs/lora.md, merge): each becomes
        W' = W + B A, bias b + B b_A + b_B, requantised per output channel with
        update_s8_apply; the adapters are detached. model.save() then writes the merged
        layers."""
        for ad in self.adapters:
            if ad.pool is not None:
                raise ValueError("LoRA.merge: %s's memory-floor branch joins behind the pool, after the "
                                 "activation: it does not fold into the layer" % ad.base.name)
        self.detach()
        self._merged = True
        F = kern.f32
        decay, axpy, apply = F("update_f32_decay"), F("f32_axpy_i32"), F("update_s8_apply")
        for ad in self.adapters:
            ly, a, b = ad.base, ad.a, ad.b
            r = self.rank
            out_c = ly.out_c
            k = len(ly.w) // out_c
            s_x = ly.in_scale
            s_u = ad.u.scale
            mw = zeros("f", len(ly.w))
            mb = zeros("f", out_c)
            decay(mw, k, None, 1, 1.0, ly.w, ly.w_scale, 1.0, None)  # W real
            decay(mb, 1, None, 1, 1.0, ly.b, ly.w_scale, s_x, None)  # bias real
            rows = [array.array("i", a.w[j * k:(j + 1) * k]) for j in range(r)]
            ba = [_f32(_f32(_f32(a.b[j]) * s_x) * a.w_scale[j]) for j in range(r)]  # A's bias, real
            mv = memoryview(mw)
            for o in range(out_c):
                row = mv[o * k:(o + 1) * k]
                acc = _f32(_f32(_f32(b.b[o]) * s_u) * b.w_scale[o])  # B's bias, real
                for j in range(r):
                    c = _f32(b.w[o * r + j] * b.w_scale[o])  # B[o, j], real
                    axpy(rows[j], _f32(c * a.w_scale[j]), row)
                    acc = _f32(acc + _f32(c * ba[j]))
                mb[o] = _f32(mb[o] + acc)
            rows = mv = None
            ly.make_trainable()
            apply(ly.w, ly.w_scale, ly.b, ly.mult, ly.shift, ly.gw, ly.gb, mw, mb, None, 0.0, s_x,
                  ly.out_scale, -1, zeros("f", out_c))
            ly.trained = False
            ly.gw = ly.gb = ly.grad = None
            ly.refresh_ratios()
        self.model.rebind()
        return self.model


def _base_id(buf):
    """(total length, CRC32) of the base model file: the last 4 bytes are its CRC."""
    n = len(buf)
    return n, struct.unpack_from("<I", buf, n - 4)[0]


def load(model, path, memory_floor=False):
    """Attach the adapters of an adapter file (LoRA.save) to `model`. Refuses a file
    made for another base (length / CRC of the .mtm) or whose layers do not match.
    memory_floor: train B alone from here on (the file holds B's matched scales already)."""
    from microtrain.checkpoint import _crc, os_error

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise os_error(e, "lora.load", path) from None
    where = "lora.load: %s: " % path
    hs = struct.calcsize(_HEAD)
    es = struct.calcsize(_ENTRY)
    if len(data) < hs + 4 or data[:4] != MAGIC:
        raise ValueError(where + "not a LoRA adapter file")
    magic, ver, n, rank, base_len, base_crc, seed = struct.unpack_from(_HEAD, data, 0)
    if ver != VERSION:
        raise ValueError(where + "version %d, this reads %d" % (ver, VERSION))
    end = len(data) - 4
    if (_crc(memoryview(data)[:end], 0) & 0xFFFFFFFF) != struct.unpack_from("<I", data, end)[0]:
        raise ValueError(where + "CRC mismatch (a damaged or truncated file)")
    my_len, my_crc = _base_id(model.buf)
    if (base_len, base_crc) != (my_len, my_crc):
        raise ValueError(where + "made for another base model (base %d bytes, CRC %08x; this model: "
                         "%d bytes, CRC %08x)" % (base_len, base_crc, my_len, my_crc))
    if not 1 <= rank <= 256 or n < 1:
        raise ValueError(where + "bad rank %d or adapter count %d" % (rank, n))
    pos = hs
    names = []
    got = {}
    for _ in range(n):
        if pos + es > len(data) - 4:
            raise ValueError(where + "truncated adapter table")
        ln, op, act, out_c, k, r, s_u, nb = struct.unpack_from(_ENTRY, data, pos)
        pos += es
        name = str(data[pos:pos + ln], "utf-8")
        pos += ln
        try:
            ly = model.layer(name)
        except KeyError:
            raise ValueError(where + "the model has no layer %r" % name) from None
        if ly.op != op or ly.act != act or ly.w is None or ly.out_c != out_c or len(ly.w) != out_c * k \
                or r != rank:
            raise ValueError(where + "layer %r does not match the adapter (op, activation or shape)" % name)
        sizes = (r * k, 4 * r, 4 * r, out_c * r, 4 * out_c, 4 * out_c)
        if sum(sizes) != nb or pos + nb > len(data) - 4 or not s_u > 0.0:
            raise ValueError(where + "adapter %r: bad sizes or scale" % name)
        vals = [s_u]
        for i in range(6):
            vals.append(array.array("bfibfi"[i], data[pos:pos + sizes[i]]))
            pos += sizes[i]
        for sc in (vals[2], vals[5]):
            for v in sc:
                if not 2.0 ** -40 <= v <= 2.0 ** 40:
                    raise ValueError(where + "adapter %r: weight scale %r out of range" % (name, v))
        names.append(name)
        got[name] = vals
    if pos != len(data) - 4:
        raise ValueError(where + "%d bytes after the adapters" % (len(data) - 4 - pos))
    return LoRA(model, rank, names, seed=seed, memory_floor=memory_floor, _data=got)
