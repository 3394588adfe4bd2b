"""`make fleet-eval`: boards that learn together, on Flower's deployment engine (docs/fleet.md).

The smartwatch HAR CNN trained without the ROW activity (evals/accuracy/adapt/ncm_watch.py's
base model) learns it on a fleet: ten boards, one subject each (evals/lib/fleet_data.py; two of
the eight pretraining subjects on two boards each), QEMU_BOARDS of them the project's QEMU M7
boards in board mode driven over their serial REPL, the rest the host micropython; the trained
part is the last two layers; the held-out subjects 9 and 10 only evaluate. Per seed, three runs
of ROUNDS rounds on a SuperLink and ten SuperNodes (TLS, SuperNode authentication):

- FedAvg, with one board killed (SIGKILL of its micropython) in round KILL_ROUND: the round goes
  on without it (min-train = boards - 1); it rejoins the next round with the current global
  model; afterwards every board's files load (torn = those that do not);
- FedProx (mu on the boards);
- ROBUST with one board of ten poisoned (NaN, wrong shape and scaled-up updates in turn).

Centralised: the same layers trained on the ten boards' pooled samples with the same settings
and budget (ROUNDS epochs), in the host micropython (evals/mp/fleet_central.py).

Ends with
    fleet: engine=flwr-1.42.0 boards=B qemu_boards=Q rounds=R fedavg_acc=A central_acc=C gap=G
    fedprox_gap=P uplink_bytes=U fp32_bytes=F killed=K rejoined=K poisoned_drop=D torn=0
(one line; accuracies in percent, means of the seeds; gap = central - fedavg, fedprox_gap =
central - fedprox, poisoned_drop = fedavg - robust-with-a-poisoned-board, in points; U the mean
bytes a board sends per round, F the float32 bytes of the same update) and exits 1 unless the
bars hold. `--write-doc` rewrites the measured part of docs/fleet.md and its figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from evals.accuracy.adapt import ncm_watch
from evals.lib import datasets as ds
from evals.lib import experiments as ex
from evals.lib import fleet_data as fd
from microtrain_tools import flashimg, fleet, fleet_board, fleet_codec, fleet_engine, mtm, paths
from microtrain_tools.mtd import write_mtd

WORK = paths.BUILD / "fleet-eval"
SEEDS = (1, 2, 3)
ROUNDS = 10
BOARDS = 10
SETTINGS = fleet.Settings(train="last:2", mode="mixed", lr=0.05, momentum=0.0, batch=8, epochs=1, keep=0.5,
                          rounds=ROUNDS, mu=0.01, beta=0.2, malicious=1)
QEMU_BOARDS = ("s3", "s4")  # on the QEMU M7 over its serial REPL (the two smallest data sets)
QEMU = "m7fw"  # the M7 with microtrain built in: its heap holds no natmod or bytecode
KILL_BOARD, KILL_ROUND = "s5", 2
POISON_BOARD = "s6"
ROBUST = "fedtrimmedavg"
DOC = paths.ROOT / "docs" / "fleet.md"
BARS = {"boards": 10, "qemu_boards": 2, "rounds": 20, "gap": 1.5, "saving": 4.0, "killed": 1, "drop": 2.0}


def data(work: Path) -> tuple[Path, list[tuple[str, Path]], Path, Path]:
    """(model, [(board, its .mtd)], pooled .mtd, held-out .mtd)."""
    ref = ncm_watch.base_model()
    w = ds.watch_windows()
    boards, held = fd.har_boards(w, BOARDS)
    q = ex.quantize(ref.mtm, w.x)
    work.mkdir(parents=True, exist_ok=True)
    out = []
    for b in boards:
        p = work / f"{b.name}.mtd"
        write_mtd(p, q[b.idx], w.y[b.idx])
        out.append((b.name, p))
    pooled = np.concatenate([b.idx for b in boards])
    write_mtd(work / "pooled.mtd", q[pooled], w.y[pooled])
    write_mtd(work / "held.mtd", q[held], w.y[held])
    return ref.mtm, out, work / "pooled.mtd", work / "held.mtd"


def central(model: Path, pooled: Path, held: Path, seed: int, work: Path) -> list[float]:
    s = SETTINGS
    cfg = {"model": str(model), "train": str(pooled), "test": str(held), "layers": s.train, "mode": s.mode,
           "lr": s.lr, "momentum": s.momentum, "batch": s.batch, "epochs": s.rounds * s.epochs, "seed": seed}
    old = ex.DEVICE_SCRIPT
    try:
        ex.DEVICE_SCRIPT = paths.ROOT / "evals" / "mp" / "fleet_central.py"
        r = ex.run_device(cfg, work, f"central_s{seed}", echo=False)
    finally:
        ex.DEVICE_SCRIPT = old
    return [float(a) for a in r["acc"]]


class QemuBoards:
    """The QEMU boards in board mode, each with its own flash image, deployed once."""

    def __init__(self, work: Path, names: tuple[str, ...]) -> None:
        sys.path.insert(0, str(paths.ROOT / "ports" / "qemu"))
        import qemu_run

        self.qr = qemu_run
        self.work = work
        self.names = names
        self.boards: dict[str, Any] = {}

    def start(self, files: dict[str, Path], model: Path) -> dict[str, str]:
        self.qr.build(QEMU, boardmode=True)
        self.work.mkdir(parents=True, exist_ok=True)
        ports = {}
        for n in self.names:
            img = flashimg.new_image(self.work / f"{n}.img")
            sb = self.qr.SerialBoard(QEMU, img, heap="256k")
            ports[n] = sb.start()
            self.boards[n] = sb
            b = self.qr.BOARDS[QEMU]
            fleet_board.SerialBoard(ports[n]).deploy(model, files[n], None if b.builtin else b.arch)
        return ports

    def stop(self) -> None:
        for sb in self.boards.values():
            sb.stop()

    def files(self, n: str) -> dict[str, bytes]:
        img = self.work / f"{n}.img"
        names = [f for f in flashimg.listdir(img) if f.endswith((".mtm", ".bin"))]
        return {f: flashimg.read_file(img, "/" + f) for f in names}


def torn_files(files: dict[str, bytes]) -> list[str]:
    """The board's files that would not load: .mtm through the host validator, the delta file
    through its parser."""
    bad = []
    for name, b in files.items():
        try:
            if name.endswith(".mtm"):
                mtm.read(b)
            elif name == "delta.bin":
                fleet_codec.read_delta(b)
        except Exception:  # noqa: BLE001 (any failure to load is a torn file)
            bad.append(name)
    return bad


def local_files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in root.iterdir() if p.suffix in (".mtm", ".bin")}


def killer(work: Path) -> Any:
    """A `during` hook: SIGKILL of KILL_BOARD's micropython once it runs round KILL_ROUND."""
    import os
    import signal

    def kill(_: fleet_engine.Engine) -> None:
        pidfile = work / "boards" / KILL_BOARD / "board.pid"
        before = work / "log" / KILL_BOARD / f"delta_r{KILL_ROUND - 1}.bin"
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3600:
            if before.is_file() and pidfile.is_file():
                try:
                    os.kill(int(pidfile.read_text()), signal.SIGKILL)
                    (work / "killed.txt").write_text(f"{KILL_BOARD} round {KILL_ROUND}\n")
                    return
                except (ValueError, ProcessLookupError):
                    pass
            time.sleep(0.005)

    return kill


def one_seed(seed: int, model: Path, held: Path, files: list[tuple[str, Path]], ports: dict[str, str],
             echo: bool) -> dict[str, Any]:
    base = replace(SETTINGS, seed=seed)
    out: dict[str, Any] = {}
    for run, strategy, poison in (("fedavg", "fedavg", ""), ("fedprox", "fedprox", ""),
                                  ("robust", ROBUST, POISON_BOARD)):
        work = WORK / f"seed{seed}" / run
        boards = [fleet.BoardSpec(n, p, ports.get(n), poison="mix" if n == poison else "",
                                  deploy=n not in ports) for n, p in files]
        s = replace(base, strategy=strategy, min_train=BOARDS - 1)
        t0 = time.monotonic()
        r = fleet.run_fleet(work, model, held, boards, s, tls=True,
                            during=killer(work) if run == "fedavg" else None)
        rec: dict[str, Any] = {"status": r.status, "acc": r.acc, "rounds": r.rounds, "fp32": r.fp32_bytes,
                               "left": r.left, "seconds": time.monotonic() - t0}
        if run == "fedavg":
            rec.update(faults(work, r, [n for n, _ in files]))
        out[run] = rec
        if echo:
            accs = [round(100 * r.acc[k], 2) for k in sorted(r.acc)]
            print(f"  seed {seed} {run}: {r.status}, acc {accs}, "
                  f"{rec['seconds']:.0f} s", flush=True)
    return out


def faults(work: Path, r: fleet.FleetRun, names: list[str]) -> dict[str, Any]:
    """killed / rejoined / torn of the FedAvg run (names: the boards in board-id order)."""
    kid = names.index(KILL_BOARD)
    ids = {rd["round"]: [x["board-id"] for x in rd["replies"]] for rd in r.rounds}
    killed = (work / "killed.txt").is_file() and kid not in ids.get(KILL_ROUND, [])
    later = [k for k in ids if k > KILL_ROUND and kid in ids[k]]
    rejoined = False
    if killed and later:
        # the global it was sent when it came back is the one the other boards of that round
        # were sent (a board that missed round k has no global of it)
        k = later[0]
        mine = (work / "log" / KILL_BOARD / f"global_r{k}.bin").read_bytes()
        took = [names[i] for i in ids[k] if i != kid]
        if not took:
            raise RuntimeError(f"faults: round {k} has no reply but {KILL_BOARD}'s: nothing to compare "
                               "its global with")
        rejoined = all(mine == (work / "log" / n / f"global_r{k}.bin").read_bytes() for n in took)
    torn = []
    for d in sorted((work / "boards").iterdir()):
        torn += [f"{d.name}/{f}" for f in torn_files(local_files(d))]
    return {"killed": int(killed), "rejoined": int(rejoined), "torn": torn}


MNIST = fleet.Settings(train="last:2", mode="mixed", lr=0.02, momentum=0.0, batch=16, epochs=1, keep=0.5,
                       rounds=ROUNDS)
ALPHA = 0.3


def mnist_run(seed: int = 1) -> dict[str, Any]:
    """The FMNIST-CNN -> MNIST transfer on ten local boards split by a Dirichlet(ALPHA) label
    skew, FedAvg, next to centralised training on the pooled digits (one seed)."""
    from evals.lib import transfer_model

    ref = transfer_model.get_model(progress=False)
    x, y, xt, yt = ds.mnist5k_split()
    work = WORK / "mnist"
    work.mkdir(parents=True, exist_ok=True)
    q, qt = ex.quantize(ref.mtm, x), ex.quantize(ref.mtm, xt)
    boards = fd.dirichlet_boards(y, BOARDS, ALPHA, seed)
    specs = []
    for b in boards:
        write_mtd(work / f"{b.name}.mtd", q[b.idx], y[b.idx])
        specs.append(fleet.BoardSpec(b.name, work / f"{b.name}.mtd"))
    write_mtd(work / "train.mtd", q, y)
    write_mtd(work / "test.mtd", qt, yt)
    s = replace(MNIST, seed=seed)
    r = fleet.run_fleet(work / "run", ref.mtm, work / "test.mtd", specs, s, tls=True)
    cfg = {"model": str(ref.mtm), "train": str(work / "train.mtd"), "test": str(work / "test.mtd"),
           "layers": s.train, "mode": s.mode, "lr": s.lr, "momentum": s.momentum, "batch": s.batch,
           "epochs": s.rounds * s.epochs, "seed": seed}
    old = ex.DEVICE_SCRIPT
    try:
        ex.DEVICE_SCRIPT = paths.ROOT / "evals" / "mp" / "fleet_central.py"
        cen = ex.run_device(cfg, work, f"central_mnist_s{seed}", echo=False)["acc"]
    finally:
        ex.DEVICE_SCRIPT = old
    top = float(np.mean([np.bincount(y[b.idx], minlength=10).max() / len(b.idx) for b in boards]))
    return {"status": r.status, "left": r.left, "acc": r.acc, "central": cen, "top_share": top,
            "sizes": [len(b.idx) for b in boards]}


def mnist_line(m: dict[str, Any]) -> str:
    acc = {int(k): v for k, v in m["acc"].items()}
    return (f"fleet-mnist: boards={BOARDS} dirichlet_alpha={ALPHA} top_class_share={m['top_share']:.2f} "
            f"rounds={ROUNDS} fedavg_acc={100 * acc[max(acc)]:.2f} central_acc={100 * m['central'][-1]:.2f} "
            f"status={m['status']}")


def draw_topology(path: Path) -> None:
    """Who talks to whom: the flwr CLI, the SuperLink with the ServerApp, a SuperNode per board
    with its ClientApp, and the boards behind them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    fig, ax = plt.subplots(figsize=(10, 5.6))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 6)
    ax.axis("off")

    def box(x: float, y: float, w: float, h: float, text: str, color: str) -> None:
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.05", fc=color, ec="black", lw=1))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=8)

    def arrow(x0: float, y0: float, x1: float, y1: float, text: str = "") -> None:
        ax.annotate("", (x1, y1), (x0, y0), arrowprops={"arrowstyle": "<->", "lw": 1})
        if text:
            ax.text((x0 + x1) / 2 + 0.05, (y0 + y1) / 2, text, fontsize=7, ha="left", va="center")

    box(0.2, 4.6, 2.0, 0.9, "flwr run\n(microtrain fleet)", "#eeeeee")
    box(3.6, 4.4, 3.0, 1.3, "flower-superlink\n127.0.0.1, TLS, SuperNode auth\nServerApp: Flower strategy\n"
        "(FedAvg / FedProx / FedMedian /\nFedTrimmedAvg / Krum)", "#cfe2f3")
    box(7.4, 4.6, 2.4, 0.9, "evaluator board\n(host micropython)\nheld-out subjects", "#d9ead3")
    arrow(2.3, 5.05, 3.5, 5.05, "")
    arrow(6.7, 5.05, 7.3, 5.05, "")
    xs = (0.3, 2.7, 5.1, 7.5)
    labels = ("SuperNode 1", "SuperNode 2", "...", "SuperNode B")
    boards = ("local board\nhost micropython", "QEMU M7 board\nserial REPL (pty)", "...",
              "real board\nserial port")
    for x, lab, bd in zip(xs, labels, boards, strict=True):
        if lab == "...":
            ax.text(x + 1.0, 2.7, "...", fontsize=14, ha="center")
            continue
        box(x, 2.3, 2.0, 0.9, f"flower-supernode\n{lab}\nClientApp (bridge)", "#fff2cc")
        box(x, 0.4, 2.0, 0.9, f"{bd}\nmicrotrain.fleet", "#d9ead3")
        arrow(x + 1.0, 3.3, 5.1, 4.3, "")
        arrow(x + 1.0, 1.4, x + 1.0, 2.2, "global.bin down\ndelta.bin up")
    ax.text(5.0, 3.85, "Message API over TLS: ArrayRecord (float32 trained layers), ConfigRecord, "
            "MetricRecord",
            fontsize=7, ha="center", bbox={"fc": "white", "ec": "none"})
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_accuracy(path: Path, curves: dict[str, list[float]]) -> None:
    """Accuracy per round (mean of the seeds) of each run next to centralised training per epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, ys in curves.items():
        ax.plot(range(len(ys)), ys, marker="o" if name.startswith("central") else ".", label=name)
    ax.set_xlabel("round (centralised: epoch over the pooled samples)")
    ax.set_ylabel("accuracy on the held-out subjects (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _mean_curve(runs: list[dict[int, float]]) -> list[float]:
    n = min(len(r) for r in runs)
    return [100 * float(np.mean([r[k] for r in runs])) for k in range(n)]


def write_doc(res: dict[str, Any], line: str) -> None:
    """The measured part of docs/fleet.md (between its markers) and its figures."""
    draw_topology(DOC.parent / "fleet-topology.png")
    curves = {f"FedAvg (a board killed in round {KILL_ROUND})":
              _mean_curve([s["fedavg"]["acc"] for s in res["seeds"]]),
              "FedProx": _mean_curve([s["fedprox"]["acc"] for s in res["seeds"]]),
              f"{ROBUST}, one board poisoned": _mean_curve([s["robust"]["acc"] for s in res["seeds"]]),
              "centralised (pooled samples)":
              [100 * float(np.mean(c)) for c in zip(*res["central"], strict=True)]}
    plot_accuracy(DOC.parent / "fleet-accuracy.png", curves)
    rd = res["seeds"][0]["fedavg"]["rounds"][0]
    up = [x["uplink-bytes"] for x in rd["replies"]]
    down = [x["downlink-bytes"] for x in rd["replies"]]
    fp32 = res["seeds"][0]["fedavg"]["fp32"]
    rows = [f"| per board | {down[0]} | {min(up)}-{max(up)} | {fp32} | {fp32} |",
            f"| {len(up)} boards, one round | {sum(down)} | {sum(up)} | {fp32 * len(up)} | "
            f"{fp32 * len(up)} |"]
    block = "\n".join([
        "<!-- fleet-eval: begin (make fleet-eval FLEET_ARGS=--write-doc writes this part) -->",
        f"Measured by `make fleet-eval` ({res['date']}, {len(res['seeds'])} seeds"
        + (f", {res['minutes']:.0f} minutes on this machine" if res["minutes"] else "") + "):",
        "", "```", line, *([mnist_line(res["mnist"])] if "mnist" in res else []), "```", "",
        "![accuracy per round](fleet-accuracy.png)", "",
        "Bytes per round, FedAvg run of seed 1, round 1 (down: the global file; up: the delta file; "
        "float32: the same values as float32, what a plain float client would send each way):", "",
        "| | down | up | float32 down | float32 up |", "|---|---|---|---|---|", *rows, "",
        "<!-- fleet-eval: end -->"])
    text = DOC.read_text()
    end = "<!-- fleet-eval: end -->"
    a, b = text.index("<!-- fleet-eval: begin"), text.index(end) + len(end)
    DOC.write_text(text[:a] + block + text[b:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    ap.add_argument("--write-doc", action="store_true", help="rewrite the measured part of docs/fleet.md")
    ap.add_argument("--no-mnist", action="store_true", help="skip the MNIST Dirichlet run")
    ap.add_argument("--mnist-only", action="store_true", help="only the MNIST Dirichlet run")
    ap.add_argument("--figures-only", action="store_true",
                    help="redraw the figures and the doc from the last results")
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    results = WORK / "results.json"
    if a.figures_only:
        res = json.loads(results.read_text())
        if "mnist" not in res and (WORK / "mnist.json").is_file():
            res["mnist"] = json.loads((WORK / "mnist.json").read_text())
        if "torn_qemu" not in res:  # results of the seeds done so far: the boards' images now
            res["torn_qemu"] = [f"{n}/{f}" for n in QEMU_BOARDS
                                for f in torn_files(QemuBoards(WORK / "qemu", QEMU_BOARDS).files(n))]
        res.setdefault("minutes", 0.0)
        res.setdefault("date", time.strftime("%Y-%m-%d"))
        line, ok, _, _ = summarize(res)
        write_doc(res, line)
        print(line)
        return 0 if ok else 1
    if a.mnist_only:
        m = mnist_run()
        (WORK / "mnist.json").write_text(json.dumps(m, indent=1, default=str))
        print(mnist_line(m), flush=True)
        return 0 if m["status"] == "finished:completed" and not m["left"] else 1
    model, files, pooled, held = data(WORK / "data")
    qemu = QemuBoards(WORK / "qemu", QEMU_BOARDS)
    res: dict[str, Any] = {"seeds": [], "central": [], "boards": len(files)}
    try:
        print(f"fleet-eval: {len(files)} boards ({', '.join(QEMU_BOARDS)} on QEMU {QEMU} over serial), "
              f"{ROUNDS} rounds, seeds {a.seeds}", flush=True)
        ports = qemu.start(dict(files), model)
        for seed in a.seeds:
            res["central"].append(central(model, pooled, held, seed, WORK / "central"))
            print(f"  seed {seed} central: {[round(100 * x, 2) for x in res['central'][-1]]}", flush=True)
            res["seeds"].append(one_seed(seed, model, held, files, ports, echo=True))
            results.write_text(json.dumps(res, indent=1, default=str))  # (kept if a later seed fails)
    finally:
        qemu.stop()
    res["torn_qemu"] = [f"{n}/{f}" for n in QEMU_BOARDS for f in torn_files(qemu.files(n))]
    res["minutes"] = (time.monotonic() - t0) / 60
    res["date"] = time.strftime("%Y-%m-%d")
    results.write_text(json.dumps(res, indent=1, default=str))
    if not a.no_mnist:
        res["mnist"] = mnist_run()
        print(mnist_line(res["mnist"]), flush=True)
    line, ok, completed, rejected = summarize(res)
    res["line"] = line
    res["minutes"] = (time.monotonic() - t0) / 60
    results.write_text(json.dumps(res, indent=1, default=str))
    print(f"  runs completed and stopped: {completed}; poisoned replies rejected: {rejected}; "
          f"{res['minutes']:.1f} minutes", flush=True)
    if a.write_doc:
        write_doc(res, line)
    print(line, flush=True)
    return 0 if ok else 1


def summarize(res: dict[str, Any]) -> tuple[str, bool, bool, int]:
    """(the fleet: line, bars met, every run completed and stopped, poisoned replies rejected)."""
    seeds = res["seeds"]
    for s in seeds:
        for run in ("fedavg", "fedprox", "robust"):
            s[run]["acc"] = {int(k): v for k, v in s[run]["acc"].items()}
    last = ROUNDS
    fedavg = 100 * float(np.mean([s["fedavg"]["acc"][last] for s in seeds]))
    fedprox = 100 * float(np.mean([s["fedprox"]["acc"][last] for s in seeds]))
    robust = 100 * float(np.mean([s["robust"]["acc"][last] for s in seeds]))
    cen = 100 * float(np.mean([c[-1] for c in res["central"]]))
    ups = [x["uplink-bytes"] for s in seeds for run in ("fedavg", "fedprox") for rd in s[run]["rounds"]
           for x in rd["replies"]]
    u = float(np.mean(ups))
    f32 = seeds[0]["fedavg"]["fp32"]
    killed = sum(s["fedavg"]["killed"] for s in seeds)
    rejoined = sum(s["fedavg"]["rejoined"] for s in seeds)
    torn = sum(len(s["fedavg"]["torn"]) for s in seeds) + len(res.get("torn_qemu", []))
    rejected = sum(len(rd["rejected"]) for s in seeds for rd in s["robust"]["rounds"])
    completed = all(s[r]["status"] == "finished:completed" and not s[r]["left"] for s in seeds
                    for r in ("fedavg", "fedprox", "robust"))
    gap, pgap, drop = cen - fedavg, cen - fedprox, fedavg - robust
    n_boards = int(res.get("boards", BOARDS))
    line = (f"fleet: engine=flwr-{fleet_engine.FLWR_VERSION} boards={n_boards} "
            f"qemu_boards={len(QEMU_BOARDS)} "
            f"rounds={ROUNDS} fedavg_acc={fedavg:.2f} central_acc={cen:.2f} gap={gap:.2f} "
            f"fedprox_gap={pgap:.2f} uplink_bytes={u:.0f} fp32_bytes={f32} killed={killed} "
            f"rejoined={rejoined} poisoned_drop={drop:.2f} torn={torn}")
    ok = (completed and n_boards >= BARS["boards"] and len(QEMU_BOARDS) >= BARS["qemu_boards"]
          and ROUNDS <= BARS["rounds"] and gap <= BARS["gap"] and f32 / u >= BARS["saving"]
          and killed >= BARS["killed"] and rejoined == killed and drop <= BARS["drop"] and torn == 0)
    return line, ok, completed, rejected


if __name__ == "__main__":
    sys.exit(main())
