"""LoRA adapters as the device builds them (python_lib/microtrain/lora.py, docs/lora.md), on a host
``mtm.Model``.

:func:`attach` rewrites a model the way ``LoRA(model, ...)`` rewrites the device's layer list (the
base layer writes ``z``; ``A``, ``B`` and an ``ADD`` follow it), with the same initial values, scales
and multipliers, so that ``RefTrainer(attached.model, train=attached.train, ...)`` trains the
adapters bit for bit as the device's Trainer does. :func:`merge` is the device's ``LoRA.merge``;
:func:`read_adapters` / :func:`write_adapters` the adapter file (docs/lora.md, "Adapter file").
Every float value the device computes in Python is rounded to float32 after each operation there
(``_f32``), so one float32 model serves double- and single-float builds alike.
"""

from __future__ import annotations

import copy
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

from microtrain_tools import mtm
from microtrain_tools.mtm import Act, DType, Kind, Op, Quant
from microtrain_tools.reference import train_ref as tr

MAGIC = b"MTLA"
VERSION = 1
_HEAD = struct.Struct("<4sHHIIII")
_ENTRY = struct.Struct("<HBBiiifI")
f32 = np.float32


@dataclass
class Adapter:
    """One adapted layer: its name and, in the attached model, the indices of the base layer, A, B,
    the add, and the tensors z (base output), u (A's output), v (B's output). MemFLoRA behind a
    global average pool: z is the pool's own output g', pu the pool of u and pt its output."""

    name: str
    base: int
    a: int
    b: int
    add: int
    z: int
    u: int
    v: int
    pu: int | None = None
    pt: int | None = None


@dataclass
class Attached:
    model: mtm.Model  # the rewritten model
    rank: int
    seed: int
    headroom: float = 4
    adapters: list[Adapter] = field(default_factory=list)
    memory_floor: bool = False
    s_y: dict[str, float] = field(default_factory=dict)  # per adapter: the layer's output scale

    @property
    def train(self) -> list[str]:
        """The adapter layers' names (Trainer(train=...)): B alone with memory_floor (MemFLoRA)."""
        return [self.model.layers[j].name for ad in self.adapters
                for j in ((ad.b,) if self.memory_floor else (ad.a, ad.b))]


def _qmult(s_in: float, w_scale: NDArray[np.float32], s_out: float
           ) -> tuple[NDArray[np.int32], NDArray[np.int32]]:
    real = (f32(s_in) * w_scale.astype(np.float32)) / f32(s_out)
    mm = [tr.quantize_multiplier_f32(v) for v in real]
    return np.array([m for m, _ in mm], np.int32), np.array([s for _, s in mm], np.int32)


def _const(m: mtm.Model, data: NDArray, dtype: DType, quant: Quant = Quant.NONE,
           qscales: int | None = None) -> int:
    m.tensors.append(mtm.Tensor(dtype, tuple(data.shape), Kind.CONST, quant, qscales=qscales, data=data))
    return len(m.tensors) - 1


def _act(m: mtm.Model, shape: tuple[int, ...], scale: float, zp: int) -> int:
    m.tensors.append(mtm.Tensor(DType.INT8, shape, Kind.ACTIVATION, Quant.PER_TENSOR, float(scale), zp))
    return len(m.tensors) - 1


def init_a(rank: int, k: int, rng: int) -> tuple[NDArray[np.int8], NDArray[np.float32], int]:
    """A's int8 levels (rank x k, xorshift32 ``r % 255 - 127``), its scales and the new state."""
    w = np.empty(rank * k, np.int8)
    for i in range(rank * k):
        rng ^= (rng << 13) & 0xFFFFFFFF
        rng ^= rng >> 17
        rng ^= (rng << 5) & 0xFFFFFFFF
        w[i] = rng % 255 - 127
    bound = f32(1.0) / np.sqrt(f32(k))
    return w, np.full(rank, bound / f32(127.0), np.float32), rng


def matched_b_scale(s_y: float, rank: int, s_u: float) -> np.float32:
    """MemFLoRA's B weight scale: s_y / (127 r) / s_u in float32 (LoRA._match)."""
    return (f32(s_y) / f32(127 * rank)) / f32(s_u)


def _u_scale0(m: mtm.Model, x: int) -> np.float32:
    t = m.tensors[x]
    top = max(t.zero_point + 128, 127 - t.zero_point)
    return (f32(t.scale) * f32(top)) / f32(127.0)


def attach(base: mtm.Model, rank: int = 4, layers: str | Sequence[str | int] = "last:3",
           calib: Sequence[ArrayLike] | None = None, seed: int = 1, headroom: float = 4,
           data: dict[str, list[NDArray]] | None = None, memory_floor: bool = False) -> Attached:
    """The model with adapters on ``layers`` (device: ``LoRA(model, rank, layers, calib, seed,
    memory_floor=...)``). ``data``: adapter values from an adapter file (``read_adapters``)
    instead of the init."""
    m = copy.deepcopy(base)
    idx = tr.select(m, layers)
    out = Attached(m, rank, seed, headroom, memory_floor=memory_floor)
    rng = (seed * 2654435761 + 12345) & 0xFFFFFFFF or 1
    new_layers: list[mtm.Layer] = []
    readers: dict[int, list[int]] = {}
    for j, ly in enumerate(m.layers):
        for t in ly.inputs:
            readers.setdefault(t, []).append(j)
    behind: dict[int, tuple[str, list[mtm.Layer], Adapter]] = {}  # pool index -> nodes to put after it
    for j, ly in enumerate(m.layers):
        new_layers.append(ly)
        if j in behind:
            nm, nodes_, ad_ = behind.pop(j)
            i0 = len(new_layers)
            ad_.a, ad_.pu, ad_.b, ad_.add = i0, i0 + 1, i0 + 2, i0 + 3
            new_layers += nodes_
            out.adapters.append(ad_)
        if j not in idx:
            continue
        rd = readers.get(ly.output, [])
        if memory_floor and len(rd) == 1 and m.layers[rd[0]].op == Op.GLOBAL_AVGPOOL:
            rng = _pooled(out, ly, rd[0], data, rng, behind, len(new_layers) - 1)
            continue
        if ly.op == Op.CONV2D and ly.params[12] != 1:
            raise ValueError(f"layer {ly.name}: grouped conv")
        conv = ly.op == Op.CONV2D
        p = list(ly.params)
        yt = m.tensors[ly.output]
        shp = tuple(yt.shape)
        out_c = shp[-1]
        wq = m.data(ly.weight).reshape(-1)
        k = len(wq) // out_c
        act = ly.act != Act.NONE
        z = _act(m, shp, float(f32(2.0) * f32(yt.scale)), 0) if act else _act(m, shp, yt.scale, yt.zero_point)
        if data is None:
            s_u = _u_scale0(m, ly.inputs[0])
            aw, asc, rng = init_a(rank, k, rng)
            ab = np.zeros(rank, np.int32)
            bw = np.zeros(out_c * rank, np.int8)
            bsc = np.full(out_c, (f32(1.0) / np.sqrt(f32(rank))) / f32(127.0), np.float32)
            if memory_floor:
                bsc[:] = matched_b_scale(yt.scale, rank, float(s_u))
            bb = np.zeros(out_c, np.int32)
        else:
            s_u = f32(data[ly.name][0][0])
            aw, asc, ab, bw, bsc, bb = data[ly.name][1:]
        u = _act(m, shp[:-1] + (rank,), float(s_u), 0)
        v = _act(m, shp, float(f32(2.0) * f32(yt.scale)), 0)
        if conv:
            pa = list(p)
            pa[5], pa[14], pa[15], pa[16] = rank, 0, -128, 127
            pb = [p[3], p[4], rank, p[3], p[4], out_c, 1, 1, 1, 1, 0, 0, 1, 0, 0, -128, 127]
            ashape: tuple[int, ...] = (rank, p[6], p[7], p[2])
            bshape: tuple[int, ...] = (out_c, 1, 1, rank)
        else:
            pa = [p[0], rank, p[2], 0, -128, 127]
            pb = [rank, out_c, 0, 0, -128, 127]
            ashape, bshape = (rank, p[0]), (out_c, rank)
        s_x = m.tensors[ly.inputs[0]].scale
        nodes = []
        for nm, pp, w, sc, b, shape, xin, yout, si in (
                ("lora_A", pa, aw, asc, ab, ashape, ly.inputs[0], u, s_x),
                ("lora_B", pb, bw, bsc, bb, bshape, u, v, float(s_u))):
            mu, sh = _qmult(si, sc, m.tensors[yout].scale)
            qs = _const(m, np.asarray(sc, np.float32), DType.FLOAT32)
            wt = _const(m, np.asarray(w, np.int8).reshape(shape), DType.INT8, Quant.PER_CHANNEL, qs)
            bt = _const(m, np.asarray(b, np.int32), DType.INT32, Quant.BIAS)
            mt_ = _const(m, mu, DType.INT32)
            st = _const(m, sh, DType.INT32)
            nodes.append(mtm.Layer(ly.op, f"{ly.name}.{nm}", [xin], yout, pp,
                                   Act.NONE, wt, bt, mt_, st, fused="lora"))
        o = 14 if conv else 3
        mul = [1 << 30, 0 if act else -1, 1 << 30, 0, 1 << 30, -17]
        padd = [yt.numel, m.tensors[z].zero_point, 0, p[o], *mul, 20, p[o + 1], p[o + 2]]
        add = mtm.Layer(Op.ADD, f"{ly.name}.lora_add", [z, v], ly.output, padd, ly.act, fused="lora")
        # the base: output z; with a fused activation at twice the scale (shift - 1), no clamp
        ly.output = z
        if act:
            ly.params = list(ly.params)
            ly.params[o], ly.params[o + 1], ly.params[o + 2] = 0, -128, 127
            shift = m.data(ly.shift).astype(np.int32) - 1
            ly.shift = _const(m, shift, DType.INT32)
            ly.act = Act.NONE
        base_i = len(new_layers) - 1
        new_layers += [*nodes, add]
        out.s_y[ly.name] = float(yt.scale)
        out.adapters.append(Adapter(ly.name, base_i, base_i + 1, base_i + 2, base_i + 3, z, u, v))
    m.layers = new_layers
    if data is None and calib is not None:
        calibrate(out, calib)
    return out


def _pooled(at: Attached, ly: mtm.Layer, pj: int, data: dict[str, list[NDArray]] | None, rng: int,
            behind: dict[int, tuple[str, list[mtm.Layer], Adapter]], base_i: int) -> int:
    """MemFLoRA on ``ly`` read by the global average pool ``pj`` alone (LoRA._build_pooled): A, the
    pool of u, B (linear on the pooled u) and the add join behind the pool; returns the new rng."""
    m, rank = at.model, at.rank
    pool = m.layers[pj]
    gt = m.tensors[pool.output]
    out_c = m.tensors[ly.output].shape[-1]
    wq = m.data(ly.weight).reshape(-1)
    k = len(wq) // out_c
    if data is None:
        s_u = _u_scale0(m, ly.inputs[0])
        aw, asc, rng = init_a(rank, k, rng)
        ab = np.zeros(rank, np.int32)
        bw = np.zeros(out_c * rank, np.int8)
        bsc = np.full(out_c, matched_b_scale(gt.scale, rank, float(s_u)), np.float32)
        bb = np.zeros(out_c, np.int32)
    else:
        s_u = f32(data[ly.name][0][0])
        aw, asc, ab, bw, bsc, bb = data[ly.name][1:]
    g2 = _act(m, tuple(gt.shape), gt.scale, gt.zero_point)
    ushape = tuple(m.tensors[ly.output].shape[:-1]) + (rank,)
    u = _act(m, ushape, float(s_u), 0)
    pt = _act(m, (rank,), float(s_u), 0)
    v = _act(m, (out_c,), gt.scale, 0)
    p = list(ly.params)
    if ly.op == Op.CONV2D:
        pa = list(p)
        pa[5], pa[14], pa[15], pa[16] = rank, 0, -128, 127
        ashape: tuple[int, ...] = (rank, p[6], p[7], p[2])
    else:
        pa = [p[0], rank, p[2], 0, -128, 127]
        ashape = (rank, p[0])
    nodes = []
    for nm, op, pp, w, sc, b, shape, xin, yout, si in (
            ("lora_A", ly.op, pa, aw, asc, ab, ashape, ly.inputs[0], u, m.tensors[ly.inputs[0]].scale),
            ("lora_B", Op.LINEAR, [rank, out_c, 0, 0, -128, 127], bw, bsc, bb, (out_c, rank), pt, v,
             float(s_u))):
        mu, sh = _qmult(si, sc, m.tensors[yout].scale)
        qs = _const(m, np.asarray(sc, np.float32), DType.FLOAT32)
        wt = _const(m, np.asarray(w, np.int8).reshape(shape), DType.INT8, Quant.PER_CHANNEL, qs)
        bt = _const(m, np.asarray(b, np.int32), DType.INT32, Quant.BIAS)
        mt_ = _const(m, mu, DType.INT32)
        st = _const(m, sh, DType.INT32)
        nodes.append(mtm.Layer(op, f"{ly.name}.{nm}", [xin], yout, pp, Act.NONE, wt, bt, mt_, st,
                               fused="lora"))
    nodes.insert(1, mtm.Layer(Op.GLOBAL_AVGPOOL, f"{ly.name}.lora_pool", [u], pt,
                              [m.tensors[u].numel // rank, rank], fused="lora"))
    padd = [gt.numel, gt.zero_point, 0, gt.zero_point, 1 << 30, 0, 1 << 30, 0, 1 << 30, -18, 20, -128, 127]
    nodes.append(mtm.Layer(Op.ADD, f"{ly.name}.lora_add", [g2, v], pool.output, padd, Act.NONE, fused="lora"))
    pool.output = g2
    at.s_y[ly.name] = float(gt.scale)
    behind[pj] = (ly.name, nodes, Adapter(ly.name, base_i, -1, -1, -1, g2, u, v, -1, pt))
    return rng


def _set_u(at: Attached, ad: Adapter, s: np.float32) -> None:
    m = at.model
    m.tensors[ad.u].scale = float(s)
    if ad.pt is not None:
        m.tensors[ad.pt].scale = float(s)  # the pooled u (the pool keeps the scale)
    if at.memory_floor:
        qs = m.tensors[m.layers[ad.b].weight].qscales
        m.tensors[qs].data = np.full(len(m.data(qs)), matched_b_scale(at.s_y[ad.name], at.rank, float(s)),
                                     np.float32)
    for j in (ad.a, ad.b):
        ly = m.layers[j]
        sc = m.data(m.tensors[ly.weight].qscales)
        mu, sh = _qmult(m.tensors[ly.inputs[0]].scale, sc, m.tensors[ly.output].scale)
        m.tensors[ly.mult].data = mu
        m.tensors[ly.shift].data = sh


def calibrate(at: Attached, samples: Sequence[ArrayLike], passes: int = 4) -> None:
    """LoRA.calibrate: u's scale = headroom * max |u| / 127 over the samples; 4x and again when
    saturated."""
    todo = list(at.adapters)
    for _ in range(passes):
        ref = tr.RefTrainer(at.model, at.train)
        top = [0] * len(todo)
        for x in samples:
            vals = ref.forward(x)
            for i, ad in enumerate(todo):
                top[i] = max(top[i], int(np.abs(vals[ad.u].astype(np.int32)).max()))
        again = []
        for i, ad in enumerate(todo):
            s = f32(at.model.tensors[ad.u].scale)
            if top[i] >= 127:
                _set_u(at, ad, s * f32(4.0))
                again.append(ad)
            elif top[i] > 0:
                _set_u(at, ad, (s * f32(top[i])) / f32(127.0 / at.headroom))
        todo = again
        if not todo:
            break


def values(at: Attached, ref: tr.RefTrainer | None = None) -> dict[str, list[NDArray]]:
    """Per adapter (by base layer name): [s_u], A w, A w_scale, A b, B w, B w_scale, B b; from a
    trainer's current state when given."""
    m = at.model
    out: dict[str, list[NDArray]] = {}
    for ad in at.adapters:
        vals: list[NDArray] = [np.array([m.tensors[ad.u].scale], np.float32)]
        for j in (ad.a, ad.b):
            rl = ref.layers.get(j) if ref is not None else None
            ly = m.layers[j]
            if rl is not None:
                vals += [rl.w.astype(np.int8), rl.w_scale.astype(np.float32), rl.b.astype(np.int32)]
            else:
                vals += [m.data(ly.weight).reshape(-1).astype(np.int8),
                         m.data(m.tensors[ly.weight].qscales).astype(np.float32),
                         m.data(ly.bias).astype(np.int32)]
        out[ad.name] = vals
    return out


def base_id(base: bytes) -> tuple[int, int]:
    """(length, CRC32) of the base .mtm file (its last 4 bytes)."""
    return len(base), struct.unpack_from("<I", base, len(base) - 4)[0]


def write_adapters(path: str | Path, base: bytes, base_model: mtm.Model, rank: int, seed: int,
                   vals: dict[str, list[NDArray]]) -> None:
    """The adapter file the device's LoRA.save writes."""
    blen, bcrc = base_id(base)
    out = bytearray(_HEAD.pack(MAGIC, VERSION, len(vals), rank, blen, bcrc, seed & 0xFFFFFFFF))
    for name, v in vals.items():
        ly = base_model.layer(name)
        out_c = len(v[6])
        k = len(v[1]) // rank
        payload = b"".join(np.ascontiguousarray(a).tobytes() for a in v[1:])
        nb = name.encode()
        out += _ENTRY.pack(len(nb), int(ly.op), int(ly.act), out_c, k, rank, float(v[0][0]), len(payload))
        out += nb + payload
    out += struct.pack("<I", zlib.crc32(bytes(out)) & 0xFFFFFFFF)
    Path(path).write_bytes(bytes(out))


def read_adapters(path: str | Path, base: bytes | None = None) -> tuple[int, int, dict[str, list[NDArray]]]:
    """(rank, seed, values by layer name) of an adapter file; with ``base`` (the .mtm bytes) also
    checks that it was made for that base. ValueError naming the problem."""
    b = Path(path).read_bytes()
    if len(b) < _HEAD.size + 4 or b[:4] != MAGIC:
        raise ValueError(f"{path}: not a LoRA adapter file")
    _, ver, n, rank, blen, bcrc, seed = _HEAD.unpack_from(b, 0)
    if ver != VERSION:
        raise ValueError(f"{path}: version {ver}, this reads {VERSION}")
    if zlib.crc32(b[:-4]) & 0xFFFFFFFF != struct.unpack_from("<I", b, len(b) - 4)[0]:
        raise ValueError(f"{path}: CRC mismatch (a damaged or truncated file)")
    if base is not None and (blen, bcrc) != base_id(base):
        raise ValueError(f"{path}: made for another base model (base {blen} bytes, CRC {bcrc:08x}; "
                         f"this model: {len(base)} bytes, CRC {base_id(base)[1]:08x})")
    pos = _HEAD.size
    out: dict[str, list[NDArray]] = {}
    for _ in range(n):
        ln, _op, _act, out_c, k, r, s_u, nb = _ENTRY.unpack_from(b, pos)
        pos += _ENTRY.size
        name = b[pos:pos + ln].decode()
        pos += ln
        sizes = (r * k, 4 * r, 4 * r, out_c * r, 4 * out_c, 4 * out_c)
        if sum(sizes) != nb or r != rank:
            raise ValueError(f"{path}: adapter {name!r}: bad sizes")
        vals: list[NDArray] = [np.array([s_u], np.float32)]
        for dt, sz in zip(("<i1", "<f4", "<i4", "<i1", "<f4", "<i4"), sizes, strict=True):
            vals.append(np.frombuffer(b, dt, sz // np.dtype(dt).itemsize, pos).copy())
            pos += sz
        out[name] = vals
    if pos != len(b) - 4:
        raise ValueError(f"{path}: {len(b) - 4 - pos} bytes after the adapters")
    return rank, seed, out


def merge(base: mtm.Model, rank: int, vals: dict[str, list[NDArray]]) -> mtm.Model:
    """LoRA.merge: each adapted layer of ``base`` gets W + B A, bias b + B b_A + b_B (float32, the
    device's operation order), requantised by the update's apply (lr 0, nearest)."""
    m = copy.deepcopy(base)
    for name, v in vals.items():
        j = [ly.name for ly in m.layers].index(name)
        ly = m.layers[j]
        s_u = f32(v[0][0])
        aw, asc, ab, bw, bsc, bb = v[1:]
        rl = tr.RefLayer(m, j)
        out_c, k = rl.out_c, rl.k
        s_x = f32(m.tensors[ly.inputs[0]].scale)
        sw = rl.w_scale.astype(np.float32)
        mw = (rl.w.astype(np.float32).reshape(out_c, k) * sw[:, None]).astype(np.float32)
        mb = (rl.b.astype(np.float32) * s_x) * sw
        a_rows = aw.astype(np.int32).reshape(rank, k).astype(np.float32)
        ba = (ab.astype(np.float32) * s_x) * asc
        for o in range(out_c):
            acc = (f32(bb[o]) * s_u) * bsc[o]
            for i in range(rank):
                c = f32(bw[o * rank + i]) * bsc[o]
                mw[o] = mw[o] + (c * asc[i]) * a_rows[i]
                acc = acc + c * ba[i]
            mb[o] = mb[o] + acc
        rl.master_w, rl.master_b = mw.reshape(-1), mb.astype(np.float32)
        tr._update(tr.SGD(lr=1.0, rounding="nearest"), rl, 0.0, 1, (f32(1.0), f32(1.0)), -1)
        ly.trained = True
        wt = m.tensors[ly.weight]
        wt.data = rl.w.reshape(wt.shape).astype(np.int8)
        m.tensors[ly.bias].data = rl.b.astype(np.int32)
        m.tensors[ly.mult].data = rl.mult.astype(np.int32)
        m.tensors[ly.shift].data = rl.shift.astype(np.int32)
        m.tensors[wt.qscales].data = rl.w_scale.astype(np.float32)  # type: ignore[index]
    return m
