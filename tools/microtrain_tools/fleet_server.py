"""The Flower ServerApp of a fleet (docs/fleet.md): Flower's own strategies aggregate.

Run config (written by :mod:`microtrain_tools.fleet_engine`): ``work`` (the folder with
``initial.bin``, the trained part's starting values as a global file, and ``evaluator/``, a
local board holding the base model and the evaluation samples), ``strategy`` (fedavg,
fedprox, fedmedian, fedtrimmedavg, krum), ``rounds``, ``boards`` (nodes to wait for),
``min-train`` (replies a round needs), ``mu`` (FedProx), ``beta`` (FedTrimmedAvg),
``malicious`` (Krum) and the round's board settings (``train``, ``mode``, ``lr``,
``momentum``, ``batch``, ``epochs``, ``keep``, ``seed``).

Replies are checked before the strategy sees them: the same array names and shapes as the
global model and finite values, else the reply is rejected (logged in ``server.json``). What
passes goes to the strategy's own ``aggregate_train``. After each round the global model is
evaluated on the evaluator board (the int8 model a board would run). ``server.json`` records
per round: accuracy, the replies (board, samples, bytes up and down) and the rejections;
``final.npz`` the last global arrays.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp import strategy as fl

from microtrain_tools import fleet_board, fleet_codec

STRATEGIES = {"fedavg": fl.FedAvg, "fedprox": fl.FedProx, "fedmedian": fl.FedMedian,
              "fedtrimmedavg": fl.FedTrimmedAvg, "krum": fl.Krum}
ROUND_KEYS = ("train", "mode", "lr", "momentum", "batch", "epochs", "keep", "seed")

app = ServerApp()


def check_reply(content: Any, want: dict[str, tuple[int, ...]]) -> str | None:
    """None if the reply's arrays have the global model's names and shapes and finite values,
    else why not."""
    recs = list(content.array_records.values())
    if len(recs) != 1:
        return f"{len(recs)} array records"
    arrays = recs[0]
    if set(arrays.keys()) != set(want):
        return f"arrays {sorted(arrays.keys())}, expected {sorted(want)}"
    for k, shape in want.items():
        a = arrays[k].numpy()
        if tuple(a.shape) != shape:
            return f"{k}: shape {tuple(a.shape)}, expected {shape}"
        if not np.isfinite(a).all():
            return f"{k}: not finite"
    return None


def checked(base: type[fl.FedAvg], want: dict[str, tuple[int, ...]], log: list[dict[str, Any]]) -> type:
    """`base` with replies checked (check_reply) before its own aggregation."""

    class Checked(base):  # type: ignore[misc, valid-type]
        def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> Any:
            rec: dict[str, Any] = {"round": server_round, "replies": [], "rejected": [], "failures": 0}
            good = []
            for m in replies:
                if m.has_error():
                    rec["failures"] += 1
                    good.append(m)  # the strategy logs and drops it
                    continue
                met = next(iter(m.content.metric_records.values()))
                info = {k: met.get(k) for k in ("board-id", "num-examples", "uplink-bytes", "downlink-bytes")}
                why = check_reply(m.content, want)
                if why is None:
                    rec["replies"].append(info)
                    good.append(m)
                else:
                    rec["rejected"].append({**info, "why": why})
            log.append(rec)
            return super().aggregate_train(server_round, good)

    Checked.__name__ = f"Checked{base.__name__}"
    return Checked


def make_strategy(rc: dict[str, Any], want: dict[str, tuple[int, ...]],
                  log: list[dict[str, Any]]) -> fl.FedAvg:
    name = str(rc["strategy"])
    kw: dict[str, Any] = {"fraction_train": 1.0, "fraction_evaluate": 0.0,
                          "min_train_nodes": int(rc["min-train"]), "min_available_nodes": int(rc["boards"])}
    if name == "fedprox":
        kw["proximal_mu"] = float(rc["mu"])
    elif name == "fedtrimmedavg":
        kw["beta"] = float(rc["beta"])
    elif name == "krum":
        kw["num_malicious_nodes"] = int(rc["malicious"])
    if name not in STRATEGIES:
        raise ValueError(f"strategy {name!r}: one of {', '.join(STRATEGIES)}")
    strategy: fl.FedAvg = checked(STRATEGIES[name], want, log)(**kw)
    return strategy


def evaluate(work: Path, fp: int, rnd: int, arrays: dict[str, np.ndarray], rc: dict[str, Any]) -> float:
    """Accuracy of the global arrays on the evaluator board's samples."""
    ev = fleet_board.LocalBoard(work / "evaluator")
    res, _ = ev.run({"command": "evaluate", "model": "model.mtm", "train": rc["train"], "mode": rc["mode"],
                     "global": "global.bin", "test": "test.mtd"},
                    {"global.bin": fleet_codec.global_bytes(fp, rnd, arrays)}, None)
    return float(res["acc"])


@app.main()
def main(grid: Grid, context: Context) -> None:
    rc = dict(context.run_config)
    work = Path(str(rc["work"]))
    fp, _, init = fleet_codec.load_global(work / "initial.bin")
    want = {k: tuple(v.shape) for k, v in init.items()}
    log: list[dict[str, Any]] = []
    accs: dict[int, float] = {}

    def evaluate_fn(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        a = {k: arrays[k].numpy().astype(np.float32) for k in arrays}
        accs[rnd] = evaluate(work, fp, rnd, a, rc)
        return MetricRecord({"acc": accs[rnd]})

    config = ConfigRecord({"fingerprint": fp, **{k: rc[k] for k in ROUND_KEYS}})
    strategy = make_strategy(rc, want, log)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord({k: Array(v) for k, v in init.items()}),
                            num_rounds=int(rc["rounds"]), train_config=config, evaluate_fn=evaluate_fn)
    final = {k: result.arrays[k].numpy() for k in result.arrays}
    np.savez(work / "final.npz", **final)
    (work / "server.json").write_text(json.dumps({"acc": accs, "rounds": log, "fp32_bytes":
                                                  fleet_codec.fp32_bytes(init)}, indent=1))
