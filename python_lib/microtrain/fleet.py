# Fleet learning, the board's part of one federated round (docs/fleet.md): take the global
# values of the trained layers, train on the board's own samples, return a compact delta.
#
# The host sends real values (float32) of the trained layers; the board puts them into its
# int8 layers with the optimiser's own requantisation (update_s8_apply), so a round starts from
# what a fresh board would run, and saves that model atomically. The delta (local - global)
# goes back as int8 per output channel with a float32 scale each, only for the channels with
# the largest change (the sparse channel set), with the float32 bias deltas of those channels.
# Both files carry a fingerprint of the frozen part: an update made for another base model or
# shape is refused before anything changes.
#
# RAM: the global values are never held whole. They are read from the file, a layer at a
# time, into the layer's gradient sums (idle before and after training), for the checks, the
# apply and the delta; FedProx keeps an int8 copy of the applied global layer (a quarter of
# float32) for its proximal term. With a trainer live a small heap has only small free blocks
# left: the delta's int8 rows are made a block of channels at a time, never a layer's at once.
import gc
import os
import struct

from micropython import const

from microtrain import load
from microtrain.checkpoint import _crc
from microtrain.data import FileDataset
from microtrain.optim import SGD, F
from microtrain.quant import zeros
from microtrain.trainer import Trainer

GLOBAL_MAGIC = b"MTG1"
DELTA_MAGIC = b"MTD1"
GLOBAL_HEAD = "<4sIIHH"  # magic, fingerprint, round, layers, 0
DELTA_HEAD = "<4sIIIffHH"  # magic, fingerprint, round, samples, train loss, train acc, layers, 0
LAYER_HEAD = "<HHI"  # layer index, output channels, values per channel
DELTA_LAYER = "<HHIHH"  # layer index, output channels, values per channel, channels sent, 0
_BLOCK = const(8)  # channels a delta quantises at a time


def fingerprint(model, idx):
    """CRC32 of what a round must not change: every frozen layer's parameters and the
    index and shape of each trained layer."""
    c = _crc(struct.pack("<H", len(model.layers)), 0)
    for ly in model.layers:
        if ly.w is None:
            continue
        if ly.index in idx:
            c = _crc(struct.pack(LAYER_HEAD, ly.index, len(ly.b), len(ly.w) // len(ly.b)), c)
        else:
            for a in (ly.w, ly.b, ly.mult, ly.shift, ly.w_scale):
                c = _crc(a, c)
    return c & 0xFFFFFFFF


class Global:
    """The global file at path, checked against the model (fingerprint, layers, shapes) and
    read a layer at a time."""

    def __init__(self, path, model, idx, fp):
        self.path = path
        self.layers = [model.layers[i] for i in idx]
        with open(path, "rb") as f:
            head = f.read(struct.calcsize(GLOBAL_HEAD))
        if len(head) != struct.calcsize(GLOBAL_HEAD):
            raise ValueError("fleet: %s: short header" % path)
        magic, got, self.round, n, _ = struct.unpack(GLOBAL_HEAD, head)
        if magic != GLOBAL_MAGIC:
            raise ValueError("fleet: %s is not a global update (magic %r)" % (path, magic))
        if got != fp:
            raise ValueError("fleet: update for another base model or trained part (fingerprint %08x, "
                             "this board's %08x): refused, the model is unchanged" % (got, fp))
        if n != len(idx):
            raise ValueError("fleet: update has %d layers, the board trains %d" % (n, len(idx)))

    def each(self, w_of, b_of):
        """For each trained layer: read its values into w_of(ly), b_of(ly) (float32 arrays of
        its shape), check them, then yield the layer."""
        with open(self.path, "rb") as f:
            f.read(struct.calcsize(GLOBAL_HEAD))
            for ly in self.layers:
                li, c, k = struct.unpack(LAYER_HEAD, f.read(struct.calcsize(LAYER_HEAD)))
                want = (ly.index, len(ly.b), len(ly.w) // len(ly.b))
                if (li, c, k) != want:
                    raise ValueError("fleet: layer %s: update shape %r, the model's %r: refused" % (
                        ly.name, (li, c, k), want))
                for a in (w_of(ly), b_of(ly)):
                    if f.readinto(a) != 4 * len(a):
                        raise ValueError("fleet: %s: short file" % self.path)
                    if F.update_f32_check(a) >= 0:
                        raise ValueError("fleet: layer %s: global values not finite: refused" % ly.name)
                yield ly


def _gw(ly):
    return ly.gw


def _gb(ly):
    return ly.gb


def _minus_real(ly, k):
    """gw, gb (holding global values) = real - global, one native pass each."""
    F.update_f32_scale(ly.gw, k, None, -1.0)
    F.update_f32_scale(ly.gb, 1, None, -1.0)
    F.update_f32_decay(ly.gw, k, None, 1, 1.0, ly.w, ly.w_scale, 1.0, ly.master_w)  # + 1 * real
    F.update_f32_decay(ly.gb, 1, None, 1, 1.0, ly.b, ly.w_scale, ly.in_scale, ly.master_b)


def apply(glob):
    """Put the global values into the trained layers (of a new trainer: zero gradient sums)
    in RAM: int8 weights, scales, bias, requantisation, master copies where the mode keeps
    them. The whole file is checked first: a refused file changes nothing."""
    for _ in glob.each(_gw, _gb):
        pass
    for ly in glob.each(lambda ly: ly.master_w if ly.master_w is not None else ly.gw,
                        lambda ly: ly.master_b if ly.master_b is not None else ly.gb):
        k = len(ly.w) // len(ly.b)
        row = zeros("f", len(ly.b))
        if ly.master_w is not None:
            F.update_f32_scale(ly.gw, k, None, 0.0)
            F.update_f32_scale(ly.gb, 1, None, 0.0)
            lr = 0.0  # w_new = the master values: refit, requantise
        else:
            _minus_real(ly, k)
            lr = 1.0  # w_new = real - (real - global)
        r = F.update_s8_apply(ly.w, ly.w_scale, ly.b, ly.mult, ly.shift, ly.gw, ly.gb, ly.master_w,
                              ly.master_b, None, lr, ly.in_scale, ly.out_scale, -1, row)
        if r < -1:
            raise ValueError("fleet: layer %s: channel %d of the global values cannot be requantised"
                             % (ly.name, -2 - r))
        ly.refresh_ratios()


class ProxSGD(SGD):
    """SGD with FedProx's proximal term: each step's direction gets mu * (w - w_global), w
    the layer's real values and w_global the applied global layer (int8 and scales, kept by
    `snapshot`), on the board."""

    def __init__(self, mu, **kw):
        super().__init__(**kw)
        self.mu = mu
        self.snap = {}

    def snapshot(self, layers):
        """Keep the layers' current values (the applied global model) for the proximal term."""
        for ly in layers:  # the update views hold the layer's own arrays: found by identity
            s = ly.w_scale[:]
            self.snap[id(ly.w)] = (ly.w[:], s)
            self.snap[id(ly.b)] = (ly.b[:], s)

    def direction(self, p, st, n):
        s = self.snap.get(id(p.q)) if self.mu else None
        if s is not None:  # g / n + mu * real - mu * global (decay adds only: negate around it)
            F.update_f32_decay(p.g, p.k, p.touched, n, self.mu, p.q, p.scale, p.f, p.master)
            F.update_f32_scale(p.g, p.k, p.touched, -1.0)
            F.update_f32_decay(p.g, p.k, p.touched, 1, self.mu, s[0], s[1], p.f, None)
            F.update_f32_scale(p.g, p.k, p.touched, -1.0)
            n = 1
        super().direction(p, st, n)


def _replace(tmp, path):
    try:
        os.rename(tmp, path)
    except OSError:  # FAT will not rename over an existing file
        os.remove(path)
        os.rename(tmp, path)


def _rows(ly, c0, c1, sc, q):
    """Int8 rows of channels c0..c1 of gw (= global - local, read only) into q (zeros of
    their size), their scales into sc[c0:c1]: the optimiser's requantisation of a step of
    -gw at rate 1 from q = 0 (max |delta| = 127 * scale)."""
    k = len(ly.w) // len(ly.b)
    n = c1 - c0
    tmp = (zeros("i", n), zeros("i", n), zeros("i", n), zeros("f", n), zeros("f", 2 * n))
    g = memoryview(ly.gw)[c0 * k:c1 * k]
    r = F.update_s8_apply_keep(q, memoryview(sc)[c0:c1], tmp[0], tmp[1], tmp[2], g, tmp[3], None, None, None,
                               1.0, 1.0, 1.0, -1, tmp[4])
    if r < -1:
        raise ValueError("fleet: layer %s: delta of channel %d cannot be quantised" % (ly.name, c0 - 2 - r))


def _quantise(ly, keep):
    """(kept channels, scales) of gw = local - global: per channel the scale of its int8 row
    (_rows), the channels with the largest change. A block of channels at a time: no row
    buffer of the whole layer (after training the heap has no such block to spare)."""
    c = len(ly.b)
    k = len(ly.w) // c
    F.update_f32_scale(ly.gw, k, None, -1.0)
    sc = zeros("f", c)
    for i in range(c):  # (per channel) a start scale that any change replaces: a channel
        sc[i] = 1e-30  # without change keeps it and ranks last
    for c0 in range(0, c, _BLOCK):
        c1 = min(c, c0 + _BLOCK)
        _rows(ly, c0, c1, sc, zeros("b", (c1 - c0) * k))
    n = c if keep >= 1.0 else max(1, int(keep * c + 0.999999))
    order = sorted(range(c), key=lambda i: -sc[i])
    return sorted(order[:n]), sc, k


def write_delta(path, glob, keep, fp, n, loss, acc):
    """The delta file (DELTA_HEAD, then per layer DELTA_LAYER, the kept-channel bit mask,
    their scales, bias deltas and int8 rows), written atomically. Returns its size."""
    tmp = path + ".tmp"
    size = 0
    with open(tmp, "wb") as f:
        size += f.write(struct.pack(DELTA_HEAD, DELTA_MAGIC, fp, glob.round, n, loss, acc, len(glob.layers),
                                    0))
        for ly in glob.each(_gw, _gb):
            _minus_real(ly, len(ly.w) // len(ly.b))
            kept, sc, k = _quantise(ly, keep)
            c = len(ly.b)
            mask = bytearray((c + 7) >> 3)
            scales, bias = zeros("f", len(kept)), zeros("f", len(kept))
            for j, i in enumerate(kept):
                mask[i >> 3] |= 1 << (i & 7)
                scales[j] = sc[i]
                bias[j] = ly.gb[i]
            for part in (struct.pack(DELTA_LAYER, ly.index, c, k, len(kept), 0), mask, scales, bias):
                size += f.write(part)
            for i in kept:  # each kept row again, as _quantise made it (the same scale)
                q = zeros("b", k)
                _rows(ly, i, i + 1, sc, q)
                size += f.write(q)
    _replace(tmp, path)
    return size


def _setup(cfg):
    """The base model and a trainer of its trained part (gradient sums on: the proximal term
    joins the direction, which the sums path builds), the trainer's buffers allocated first,
    while the heap is in one piece."""
    gc.collect()  # the import's garbage: long-lived buffers go low, not above holes
    model = load(cfg["model"])
    idx = model.select(cfg["train"])
    fp = fingerprint(model, idx)
    gc.collect()  # and the load's
    opt = ProxSGD(cfg.get("mu", 0.0), lr=cfg.get("lr", 0.01), momentum=cfg.get("momentum", 0.0))
    tr = Trainer(model, train=cfg["train"], mode=cfg.get("mode", "mixed"), optimizer=opt,
                 batch=cfg.get("batch", 8), seed=cfg.get("seed", 1), sums=True)
    return model, idx, fp, tr


def run_round(cfg):
    """One round from the config dict: the base model, the global file applied, the global
    model saved as the board's model (atomic), local training, the delta written. Returns
    the record the host reads."""
    model, idx, fp, tr = _setup(cfg)
    glob = Global(cfg["global"], model, idx, fp)
    apply(glob)
    model.drop_plans(tr.first)  # any plan but the trainer's (the apply's inference) goes
    if cfg.get("mu", 0.0):  # FedProx's copy first, while the heap has blocks its size (the save
        gc.collect()  # writes its tables an entry at a time)
        tr.opt.snapshot(glob.layers)
    if cfg.get("save"):  # the current global model: what the board runs between rounds
        gc.collect()
        model.save(cfg["save"])
    data = FileDataset(cfg["data"])
    n = len(data)
    hist = tr.fit(data, epochs=cfg.get("epochs", 1), verbose=False)
    tr.flush()
    h = hist[-1]
    # the delta needs the layers' arrays only: the forward and backward buffers go, so that
    # its int8 rows find room in a heap the training left in pieces
    data = hist = model.backward_plan = None
    model.drop_plans(-1)
    gc.collect()
    size = write_delta(cfg["delta"], glob, cfg.get("keep", 1.0), fp, n, h["loss"], h["acc"])
    return {"round": glob.round, "n": n, "loss": h["loss"], "acc": h["acc"], "fingerprint": fp,
            "delta_bytes": size}


def evaluate(cfg):
    """Accuracy of the global file's values on cfg["test"] (the int8 model a board runs)."""
    model, idx, fp, tr = _setup(cfg)
    if cfg.get("global"):
        apply(Global(cfg["global"], model, idx, fp))
    ev = tr.evaluate(FileDataset(cfg["test"]), confusion=False)
    return {"acc": ev["acc"], "loss": ev["loss"], "n": ev["n"], "fingerprint": fp}


def export(cfg):
    """Write the trained layers' real values as a global file (round 0): the starting point
    of a fleet, made by the code the boards run."""
    model, idx, fp, _ = _setup(cfg)
    tmp = cfg["global"] + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack(GLOBAL_HEAD, GLOBAL_MAGIC, fp, 0, len(idx), 0))
        for i in idx:
            ly = model.layers[i]
            k = len(ly.w) // len(ly.b)
            f.write(struct.pack(LAYER_HEAD, ly.index, len(ly.b), k))
            F.update_f32_decay(ly.gw, k, None, 1, 1.0, ly.w, ly.w_scale, 1.0, ly.master_w)  # 0 + real
            F.update_f32_decay(ly.gb, 1, None, 1, 1.0, ly.b, ly.w_scale, ly.in_scale, ly.master_b)
            f.write(ly.gw)
            f.write(ly.gb)
    _replace(tmp, cfg["global"])
    return {"fingerprint": fp, "layers": [model.layers[i].name for i in idx]}


def main(path):
    """Run the command of the JSON file at path ("round", "evaluate", "export" or
    "fingerprint") and print one line "FLEET {json}"."""
    import json

    with open(path) as f:
        cfg = json.load(f)
    what = cfg.get("command", "round")
    if what == "round":
        res = run_round(cfg)
    elif what == "evaluate":
        res = evaluate(cfg)
    elif what == "export":
        res = export(cfg)
    else:
        model = load(cfg["model"])
        res = {"fingerprint": fingerprint(model, model.select(cfg["train"]))}
    print("FLEET " + json.dumps(res))
