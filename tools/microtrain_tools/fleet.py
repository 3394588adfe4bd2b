"""``microtrain fleet``: boards that learn together, on Flower's deployment engine (docs/fleet.md).

:func:`run_fleet` sets up a work folder (the evaluator board, the trained part's starting
values, one board per data file: a local one, or a serial one deployed over its port), starts
the SuperLink and one SuperNode per board (:mod:`microtrain_tools.fleet_engine`), runs the
Flower app for the rounds, stops every process and returns what the ServerApp recorded.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from microtrain_tools import fleet_board, fleet_engine

STRATEGIES = ("fedavg", "fedprox", "fedmedian", "fedtrimmedavg", "krum")


@dataclass
class Settings:
    """One fleet run: the trained part, the board's optimiser, the server's strategy."""

    train: str = "last:2"
    mode: str = "mixed"
    lr: float = 0.05
    momentum: float = 0.9
    batch: int = 8
    epochs: int = 1  # local epochs per round
    keep: float = 0.5  # share of each layer's channels a board sends
    seed: int = 1
    strategy: str = "fedavg"
    rounds: int = 3
    mu: float = 0.01  # FedProx
    beta: float = 0.2  # FedTrimmedAvg
    malicious: int = 1  # Krum
    min_train: int = 0  # replies a round needs (0: every board)


@dataclass
class BoardSpec:
    name: str
    data: Path | None  # its samples (.mtd); None: already on the board
    port: str | None = None  # a serial board; None: a local one under the work folder
    arch: str | None = None  # natmod arch to deploy to a serial board (None: built in)
    poison: str = ""  # a bad actor (fleet_client.poisoned)
    deploy: bool = True


@dataclass
class FleetRun:
    work: Path
    status: str
    seconds: float
    acc: dict[int, float]
    rounds: list[dict[str, Any]]
    fp32_bytes: int
    left: list[int] = field(default_factory=list)  # PIDs still alive after the stop (none)


def board_spec(work: Path, b: BoardSpec) -> str:
    return f"serial:{b.port}" if b.port else f"local:{work / 'boards' / b.name}"


def setup(work: Path, model: Path, test: Path, boards: list[BoardSpec], s: Settings) -> int:
    """The evaluator board, initial.bin (the starting values, exported by the board code) and
    the boards' files. Returns the fingerprint."""
    work.mkdir(parents=True, exist_ok=True)
    ev = fleet_board.LocalBoard(work / "evaluator")
    ev.deploy(model, None)
    shutil.copyfile(test, ev.root / "test.mtd")
    res, data = ev.run({"command": "export", "model": "model.mtm", "train": s.train, "mode": s.mode,
                        "global": "initial.bin"}, {}, "initial.bin")
    (work / "initial.bin").write_bytes(data)
    for b in boards:
        if not b.deploy:
            continue
        if b.port:
            fleet_board.SerialBoard(b.port).deploy(model, b.data, b.arch)
        else:
            fleet_board.LocalBoard(work / "boards" / b.name).deploy(model, b.data)
    return int(res["fingerprint"])


def run_config(work: Path, s: Settings, n_boards: int) -> dict[str, Any]:
    d = asdict(s)
    d["min-train"] = d.pop("min_train") or n_boards
    return {"work": str(work), "boards": n_boards, **d}


def run_fleet(work: Path, model: Path, test: Path, boards: list[BoardSpec], s: Settings, tls: bool = True,
              during: Callable[[fleet_engine.Engine], None] | None = None) -> FleetRun:
    """Set up, start the engine and a SuperNode per board, run, stop everything.
    `during(engine)` runs in a thread while the rounds run (the fault runs kill a board)."""
    import threading

    work = Path(work)
    setup(work, model, test, boards, s)
    eng = fleet_engine.Engine(work / "engine", tls=tls, auth=tls)
    try:
        eng.start_superlink()
        for i, b in enumerate(boards):
            nc: dict[str, Any] = {"board": board_spec(work, b), "board-id": i,
                                  "log": str(work / "log" / b.name)}
            if b.poison:
                nc["poison"] = b.poison
            eng.start_supernode(b.name, nc)
        th = threading.Thread(target=during, args=(eng,), daemon=True) if during else None
        if th:
            th.start()
        r = eng.run(run_config(work, s, len(boards)))
        if th:
            th.join(timeout=600)
    finally:
        left = eng.stop()
    sj = work / "server.json"
    rec = json.loads(sj.read_text()) if sj.is_file() else {"acc": {}, "rounds": [], "fp32_bytes": 0}
    acc = {int(k): v for k, v in rec["acc"].items()}
    return FleetRun(work, r["status"], r["seconds"], acc, rec["rounds"], rec["fp32_bytes"], left)


def summary(r: FleetRun) -> str:
    ups = [x["uplink-bytes"] for rd in r.rounds for x in rd["replies"]]
    last = max(r.acc) if r.acc else 0
    return (f"fleet: status={r.status} rounds={len(r.rounds)} acc_start={r.acc.get(0, 0.0):.4f} "
            f"acc_end={r.acc.get(last, 0.0):.4f} uplink_bytes={sum(ups) / max(1, len(ups)):.0f} "
            f"fp32_bytes={r.fp32_bytes} seconds={r.seconds:.0f} left_running={len(r.left)}")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="the base model (.mtm) every board starts from")
    p.add_argument("--data", nargs="+", required=True, metavar="MTD",
                   help="one .mtd per board: its own samples")
    p.add_argument("--test", required=True, metavar="MTD", help="samples the global model is evaluated on")
    p.add_argument("--port", action="append", default=[], metavar="PORT[=ARCH]",
                   help="a serial board (the next --data file goes to it); ARCH: natmod to deploy, "
                        "none: built in")
    p.add_argument("--work", default="build/fleet", help="work folder (default: build/fleet)")
    d = Settings()
    p.add_argument("--strategy", default=d.strategy, choices=STRATEGIES)
    p.add_argument("--rounds", type=int, default=d.rounds)
    p.add_argument("--train", default=d.train, help="trained part (default: last:2)")
    p.add_argument("--mode", default=d.mode, choices=("int8", "mixed", "float32"))
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--epochs", type=int, default=d.epochs, help="local epochs per round")
    p.add_argument("--keep", type=float, default=d.keep,
                   help="share of channels a board sends (default: 0.5)")
    p.add_argument("--mu", type=float, default=d.mu, help="FedProx's proximal mu")
    p.add_argument("--insecure", action="store_true", help="no TLS / node authentication")


def main(a: argparse.Namespace) -> int:
    ports = [p.partition("=") for p in a.port]
    boards = []
    for i, data in enumerate(a.data):
        port, arch = (ports[i][0], ports[i][2] or None) if i < len(ports) else (None, None)
        boards.append(BoardSpec(f"b{i}", Path(data), port, None if arch == "none" else arch))
    s = Settings(train=a.train, mode=a.mode, lr=a.lr, epochs=a.epochs, keep=a.keep, mu=a.mu,
                 strategy=a.strategy, rounds=a.rounds)
    work = Path(a.work) / time.strftime("%Y%m%d-%H%M%S")
    r = run_fleet(work, Path(a.model), Path(a.test), boards, s, tls=not a.insecure)
    for k in sorted(r.acc):
        print(f"round {k}: acc={r.acc[k]:.4f}")
    print(summary(r))
    return 0 if r.status == "finished:completed" and not r.left else 1
