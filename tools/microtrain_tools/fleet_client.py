"""The Flower ClientApp that bridges one board (docs/fleet.md).

Its SuperNode's node config names the board (``board="local:DIR"`` or ``"serial:PORT"``,
:mod:`microtrain_tools.fleet_board`) and, optionally, ``log`` (a host folder where each
round's global and delta files are kept) and ``poison`` (a bad actor for the fault runs:
``nan``, ``shape``, ``scale`` or ``mix``, which cycles through the three by round).

A train message carries the global arrays (``arrays``) and the round's settings (``config``:
the fingerprint, the trained part, the optimiser's settings, FedProx's ``proximal-mu``). The
reply: the board's model as Flower arrays (global + dequantised delta, fleet_codec's rule) and
its metrics, ``num-examples`` the board's sample count.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from microtrain_tools import fleet_board, fleet_codec

# the settings of a round that the ServerApp's config passes to the board as they are
ROUND_KEYS = ("train", "mode", "lr", "momentum", "batch", "epochs", "keep")
POISON_SCALE = 50.0  # a "scaled-up" update: the delta times this

app = ClientApp()


def poisoned(kind: str, rnd: int, glob: fleet_codec.Arrays, local: fleet_codec.Arrays) -> fleet_codec.Arrays:
    """A bad actor's reply in place of `local`: NaN values, a wrong shape or a scaled-up delta."""
    if kind == "mix":
        kind = ("nan", "shape", "scale")[rnd % 3]
    out = dict(local)
    first = sorted(out)[0]
    if kind == "nan":
        out[first] = out[first].copy()
        out[first][0] = np.nan
    elif kind == "shape":
        out[first] = out[first][:, :-1].copy() if out[first].ndim == 2 else out[first][:-1].copy()
    elif kind == "scale":
        out = {k: glob[k] + np.float32(POISON_SCALE) * (local[k] - glob[k]) for k in local}
    else:
        raise ValueError(f"poison {kind!r}: expected nan, shape, scale or mix")
    return out


@app.train()
def train(msg: Message, context: Context) -> Message:
    nc = context.node_config
    board = fleet_board.open_board(str(nc["board"]))
    conf = msg.content["config"]
    arrays = msg.content["arrays"]
    glob = {k: arrays[k].numpy().astype(np.float32) for k in arrays}
    rnd = int(conf["server-round"])
    cfg = {k: conf[k] for k in ROUND_KEYS if k in conf}
    cfg.update(model="model.mtm", data="data.mtd", mu=float(conf.get("proximal-mu", 0.0)),
               seed=int(conf.get("seed", 1)) * 1000 + rnd)
    down = fleet_codec.global_bytes(int(conf["fingerprint"]), rnd, glob)
    _, up = board.round(cfg, down)
    delta = fleet_codec.read_delta(up)
    if "log" in nc:
        log = Path(str(nc["log"]))
        log.mkdir(parents=True, exist_ok=True)
        (log / f"global_r{rnd}.bin").write_bytes(down)
        (log / f"delta_r{rnd}.bin").write_bytes(up)
    dense = delta.dense()
    local = {k: glob[k] + dense[k] for k in glob}
    if nc.get("poison"):
        local = poisoned(str(nc["poison"]), rnd, glob, local)
    metrics = MetricRecord({"num-examples": delta.samples, "train-loss": float(delta.loss),
                            "train-acc": float(delta.acc), "uplink-bytes": len(up),
                            "downlink-bytes": len(down),
                            "board-id": int(nc.get("board-id", 0))})
    return Message(RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in local.items()}),
                               "metrics": metrics}), reply_to=msg)
