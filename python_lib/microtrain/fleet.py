# Fleet learning, the board's part of one federated round (docs/fleet.md): take the global
# values of the trained layers, train on the board's own samples, return a compact delta.
#
# The host sends real values (float32) of the trained layers; the board puts them into its
# int8 layers with the optimiser's own requantisation (update_s8_apply at rate 0 with the
# global values as master copy), so a round starts from exactly what a fresh board would
# run. The delta (local - global) goes back as int8 per output channel with a float32 scale
# each, only for the channels with the largest change (the sparse channel set), and the
# bias deltas of those channels as float32. Both files start with a fingerprint of the
# frozen part, so an update made for another base model or shape is refused.
import os
import struct

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


def read_global(path, model, idx, fp):
    """[(layer, w, b)] of the global file at path (float32 arrays), after checking that it
    was made for this base model (fingerprint) and these trained layers (shapes)."""
    with open(path, "rb") as f:
        head = f.read(struct.calcsize(GLOBAL_HEAD))
        if len(head) != struct.calcsize(GLOBAL_HEAD):
            raise ValueError("fleet: %s: short header" % path)
        magic, got, rnd, n, _ = struct.unpack(GLOBAL_HEAD, head)
        if magic != GLOBAL_MAGIC:
            raise ValueError("fleet: %s is not a global update (magic %r)" % (path, magic))
        if got != fp:
            raise ValueError("fleet: update for another base model or trained part (fingerprint %08x, "
                             "this board's %08x): refused, the model is unchanged" % (got, fp))
        if n != len(idx):
            raise ValueError("fleet: update has %d layers, the board trains %d" % (n, len(idx)))
        out = []
        for i in idx:
            ly = model.layers[i]
            li, c, k = struct.unpack(LAYER_HEAD, f.read(struct.calcsize(LAYER_HEAD)))
            want = (ly.index, len(ly.b), len(ly.w) // len(ly.b))
            if (li, c, k) != want:
                raise ValueError("fleet: layer %s: update shape %r, the model's %r: refused" % (
                    ly.name, (li, c, k), want))
            w, b = zeros("f", c * k), zeros("f", c)
            for a in (w, b):
                if f.readinto(a) != 4 * len(a):
                    raise ValueError("fleet: %s: short file" % path)
            for a in (w, b):
                if F.update_f32_check(a) >= 0:
                    raise ValueError("fleet: layer %s: global values not finite: refused" % ly.name)
            out.append((ly, w, b))
    return rnd, out


def apply(glob):
    """Put the global values into the trained layers in RAM (int8 weights, scales, bias,
    requantisation; the float32 master copies where the mode keeps them)."""
    for ly, w, b in glob:
        if ly.master_w is not None:
            ly.master_w[:] = w
            ly.master_b[:] = b
            w, b = ly.master_w, ly.master_b
        row = zeros("f", len(ly.b))
        # rate 0 and zero sums (a new trainer's): w_new = the master values, refit, requantise
        r = F.update_s8_apply(ly.w, ly.w_scale, ly.b, ly.mult, ly.shift, ly.gw, ly.gb, w, b, None, 0.0,
                              ly.in_scale, ly.out_scale, -1, row)
        if r < -1:
            raise ValueError("fleet: layer %s: channel %d of the global values cannot be requantised"
                             % (ly.name, -2 - r))
        ly.refresh_ratios()


class ProxSGD(SGD):
    """SGD with FedProx's proximal term: each step's direction gets mu * (w - w_global)
    (w the layer's real values, master copy or int8 times scale), on the board."""

    def __init__(self, mu, **kw):
        super().__init__(**kw)
        self.mu = mu
        self.glob = {}

    def bind(self, glob):
        """The global values of this round: [(layer, w, b)] of the trained layers."""
        for ly, w, b in glob:  # the update views hold the layer's own arrays: found by identity
            self.glob[id(ly.w)] = w
            self.glob[id(ly.b)] = b

    def direction(self, p, st, n):
        g = self.glob.get(id(p.q)) if self.mu else None
        if g is not None:  # g / n + mu * real, then - mu * global: one pass each, natively
            F.update_f32_decay(p.g, p.k, p.touched, n, self.mu, p.q, p.scale, p.f, p.master)
            F.update_f32_axpby(p.g, g, p.k, p.touched, 1.0, -self.mu)
            n = 1
        super().direction(p, st, n)


def _replace(tmp, path):
    try:
        os.rename(tmp, path)
    except OSError:  # FAT will not rename over an existing file
        os.remove(path)
        os.rename(tmp, path)


def _real(ly):
    """The layer's real values (float32): its master copies, or int8 times scale."""
    c = len(ly.b)
    k = len(ly.w) // c
    d = zeros("f", c * k)
    db = zeros("f", c)
    F.update_f32_decay(d, k, None, 1, 1.0, ly.w, ly.w_scale, 1.0, ly.master_w)  # 0 + 1 * real
    F.update_f32_decay(db, 1, None, 1, 1.0, ly.b, ly.w_scale, ly.in_scale, ly.master_b)
    return d, db


def export(cfg):
    """Write the trained layers' current real values as a global file (round 0): the
    starting point of a fleet, made by the same code the boards run."""
    model = load(cfg["model"])
    idx = model.select(cfg["train"])
    fp = fingerprint(model, idx)
    _trainer(model, cfg)  # the trained layers as a round trains them (master copies by mode)
    tmp = cfg["global"] + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack(GLOBAL_HEAD, GLOBAL_MAGIC, fp, 0, len(idx), 0))
        for i in idx:
            ly = model.layers[i]
            f.write(struct.pack(LAYER_HEAD, ly.index, len(ly.b), len(ly.w) // len(ly.b)))
            for a in _real(ly):
                f.write(a)
    _replace(tmp, cfg["global"])
    return {"fingerprint": fp, "layers": [model.layers[i].name for i in idx]}


def _delta(ly, w, b, keep):
    """(kept channels, their scales, their bias deltas, their int8 rows) of local - global."""
    c = len(ly.b)
    k = len(ly.w) // c
    d, db = _real(ly)
    F.update_f32_axpby(d, w, k, None, 1.0, -1.0)
    F.update_f32_axpby(db, b, 1, None, 1.0, -1.0)
    # quantise d per channel with the optimiser's requantisation: from q = 0, a step of -d
    F.update_f32_scale(d, k, None, -1.0)
    q = zeros("b", c * k)
    sc = zeros("f", c)
    for i in range(c):  # (per channel) a start scale that any change replaces: a channel
        sc[i] = 1e-30  # without change keeps it and ranks last
    tmp = (zeros("i", c), zeros("i", c), zeros("i", c), zeros("f", c), zeros("f", c))
    r = F.update_s8_apply(q, sc, tmp[0], tmp[1], tmp[2], d, tmp[3], None, None, None, 1.0, 1.0, 1.0, -1,
                          tmp[4])
    if r < -1:
        raise ValueError("fleet: layer %s: delta of channel %d cannot be quantised" % (ly.name, -2 - r))
    n = c if keep >= 1.0 else max(1, int(keep * c + 0.999999))
    # the channels with the largest change: by max |delta| (= 127 * its scale)
    order = sorted(range(c), key=lambda i: -sc[i])
    kept = sorted(order[:n])
    return kept, sc, db, q, k


def write_delta(path, glob, keep, fp, rnd, n, loss, acc):
    """The delta file (DELTA_HEAD, then per layer DELTA_LAYER, the kept-channel bit mask,
    their scales, bias deltas and int8 rows), written atomically. Returns its size."""
    tmp = path + ".tmp"
    size = 0
    with open(tmp, "wb") as f:
        head = struct.pack(DELTA_HEAD, DELTA_MAGIC, fp, rnd, n, loss, acc, len(glob), 0)
        size += f.write(head)
        for ly, w, b in glob:
            kept, sc, db, q, k = _delta(ly, w, b, keep)
            c = len(ly.b)
            mask = bytearray((c + 7) >> 3)
            for i in kept:
                mask[i >> 3] |= 1 << (i & 7)
            parts = [struct.pack(DELTA_LAYER, ly.index, c, k, len(kept), 0), mask,
                     zeros("f", 0), zeros("f", 0)]
            for i in kept:
                parts[2].append(sc[i])
                parts[3].append(db[i])
            for p in parts:
                size += f.write(p)
            mv = memoryview(q)
            for i in kept:
                size += f.write(mv[i * k:(i + 1) * k])
    _replace(tmp, path)
    return size


def _trainer(model, cfg):
    opt = ProxSGD(cfg.get("mu", 0.0), lr=cfg.get("lr", 0.01), momentum=cfg.get("momentum", 0.0))
    # gradient sums on: the proximal term joins the direction, which the sums path builds
    return Trainer(model, train=cfg["train"], mode=cfg.get("mode", "mixed"), optimizer=opt,
                   batch=cfg.get("batch", 8), seed=cfg.get("seed", 1), sums=True)


def run_round(cfg):
    """One round from the config dict: load the base model, apply the global file, save the
    global model as the board's model (atomic), train, write the delta. Returns the record
    the host reads."""
    model = load(cfg["model"])
    idx = model.select(cfg["train"])
    fp = fingerprint(model, idx)
    rnd, glob = read_global(cfg["global"], model, idx, fp)  # before anything is trained or saved
    tr = _trainer(model, cfg)
    apply(glob)
    tr.opt.bind(glob)
    if cfg.get("save"):
        model.save(cfg["save"])  # the current global model: what the board runs between rounds
    data = FileDataset(cfg["data"])
    hist = tr.fit(data, epochs=cfg.get("epochs", 1), verbose=False)
    tr.flush()
    h = hist[-1]
    size = write_delta(cfg["delta"], glob, cfg.get("keep", 1.0), fp, rnd, len(data), h["loss"], h["acc"])
    return {"round": rnd, "n": len(data), "loss": h["loss"], "acc": h["acc"], "fingerprint": fp,
            "delta_bytes": size}


def evaluate(cfg):
    """Accuracy of the global file's values on cfg["test"] (the int8 model a board runs)."""
    model = load(cfg["model"])
    idx = model.select(cfg["train"])
    fp = fingerprint(model, idx)
    tr = _trainer(model, cfg)
    if cfg.get("global"):
        _, glob = read_global(cfg["global"], model, idx, fp)
        apply(glob)
    ev = tr.evaluate(FileDataset(cfg["test"]), confusion=False)
    return {"acc": ev["acc"], "loss": ev["loss"], "n": ev["n"], "fingerprint": fp}


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
