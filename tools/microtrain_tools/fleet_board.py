"""One board of a fleet, reached as ``microtrain run`` / ``microtrain deploy`` reach a board.

A board is named by a spec string (a SuperNode's ``board`` node-config value):

- ``local:DIR``: the host ``micropython`` with the package as a board installs it
  (:func:`microtrain_tools.board.run_command`), DIR its file system;
- ``serial:PORT``: a board on a serial port (a real one, or a QEMU board-mode board's
  pseudo-terminal), driven with mpremote: files copied with ``fs cp``, the round run with
  ``exec`` on the board.

A round puts ``global.bin`` and ``round.json`` on the board, runs ``microtrain.fleet.main``
there and brings ``delta.bin`` back (:func:`Board.round`). The board keeps ``model.mtm`` (the
base model, deployed once), ``data.mtd`` (its own samples) and ``fleet.mtm`` (the current
global model, saved atomically each round).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from microtrain_tools import board as board_tools

MAIN = "from microtrain import fleet\nfleet.main('round.json')\n"


Reply = tuple[dict[str, Any], bytes]  # the board's FLEET record, the file it sent back


class BoardError(RuntimeError):
    """The board's run failed (its output's tail in the message)."""


def _result(out: str, what: str) -> dict[str, Any]:
    for line in out.splitlines():
        if line.startswith("FLEET "):
            r: dict[str, Any] = json.loads(line[6:])
            return r
    raise BoardError(f"{what}: no FLEET line: {out[-600:]}")


class Board:
    spec = ""

    def run(self, cfg: dict[str, Any], put: dict[str, bytes], get: str | None) -> Reply:
        raise NotImplementedError

    def round(self, cfg: dict[str, Any], global_file: bytes) -> Reply:
        """One round: the board's FLEET record and the delta file's bytes."""
        return self.run({**cfg, "command": "round", "global": "global.bin", "delta": "delta.bin",
                         "save": "fleet.mtm"}, {"global.bin": global_file}, "delta.bin")


class LocalBoard(Board):
    """The host micropython, DIR as its file system (one process per command: nothing stays
    in memory between rounds, as on a board that sleeps)."""

    def __init__(self, root: Path, heapsize: str | None = None) -> None:
        self.root = Path(root)
        self.spec = f"local:{self.root}"
        self.heapsize = heapsize
        self.pidfile = self.root / "board.pid"  # the running micropython: a fault test kills it

    def deploy(self, model: Path, data: Path | None) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(model, self.root / "model.mtm")
        if data is not None:
            shutil.copyfile(data, self.root / "data.mtd")
        (self.root / "fleet_main.py").write_text(MAIN)

    def run(self, cfg: dict[str, Any], put: dict[str, bytes], get: str | None) -> Reply:
        for name, data in put.items():
            (self.root / name).write_bytes(data)
        (self.root / "round.json").write_text(json.dumps(cfg))
        if get:
            (self.root / get).unlink(missing_ok=True)
        argv, env = board_tools.run_command(str(self.root / "fleet_main.py"), [], heapsize=self.heapsize)
        proc = subprocess.Popen(argv, cwd=self.root, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        self.pidfile.write_text(str(proc.pid))
        try:
            out, _ = proc.communicate(timeout=1800)
        finally:
            self.pidfile.unlink(missing_ok=True)
        if proc.returncode != 0:
            raise BoardError(f"{self.spec}: exit {proc.returncode}: {out[-600:]}")
        res = _result(out, self.spec)
        return res, (self.root / get).read_bytes() if get else b""


class SerialBoard(Board):
    """A board on a serial port, through mpremote (one connection per command)."""

    def __init__(self, port: str) -> None:
        self.port = port
        self.spec = f"serial:{port}"

    def _mpremote(self, *args: str, timeout: float = 1800) -> str:
        p = subprocess.run([board_tools.tool("mpremote"), "connect", self.port, *args], capture_output=True,
                           text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise BoardError(f"{self.spec}: mpremote {' '.join(args[:3])}: exit {p.returncode}: "
                             f"{(p.stdout + p.stderr)[-600:]}")
        return p.stdout

    def deploy(self, model: Path, data: Path | None, arch: str | None) -> None:
        """The package (natmod `arch`, or none with microtrain built in) and the model, with
        ``microtrain deploy``; the board's samples with ``mpremote fs cp``."""
        from microtrain_tools import paths

        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(paths.ROOT / "tools"),
                                                            os.environ.get("PYTHONPATH", "")])}
        if arch:  # the package of the current sources (deploy takes an existing dist folder as it is)
            p = subprocess.run([sys.executable, "-m", "microtrain_tools.dist", "--no-build", "--archs", arch],
                               capture_output=True, text=True, timeout=900, env=env, cwd=paths.ROOT)
            if p.returncode != 0:
                raise BoardError(f"{self.spec}: dist: {(p.stdout + p.stderr)[-600:]}")
        with tempfile.TemporaryDirectory() as td:
            shutil.copyfile(model, Path(td) / "model.mtm")  # (deploy keeps the file's name)
            args = ["deploy", "--port", self.port, "--model", str(Path(td) / "model.mtm")]
            args += ["--arch", arch] if arch else ["--builtin"]
            p = subprocess.run([sys.executable, "-m", "microtrain_tools.cli", *args], capture_output=True,
                               text=True, timeout=900, stdin=subprocess.DEVNULL, env=env)
            if p.returncode != 0:
                raise BoardError(f"{self.spec}: deploy: {(p.stdout + p.stderr)[-600:]}")
            cp = []
            if data is not None:
                cp += ["fs", "cp", str(data), ":data.mtd", "+"]
            main = Path(td) / "fleet_main.py"
            main.write_text(MAIN)
            self._mpremote(*cp, "fs", "cp", str(main), ":fleet_main.py")

    def run(self, cfg: dict[str, Any], put: dict[str, bytes], get: str | None) -> Reply:
        with tempfile.TemporaryDirectory() as td:
            args: list[str] = []
            for name, data in {**put, "round.json": json.dumps(cfg).encode()}.items():
                (Path(td) / name).write_bytes(data)
                args += ["fs", "cp", str(Path(td) / name), f":{name}", "+"]
            args += ["exec", MAIN]
            if get:
                args += ["+", "fs", "cp", f":{get}", str(Path(td) / get)]
            out = self._mpremote(*args)
            res = _result(out, self.spec)
            return res, (Path(td) / get).read_bytes() if get else b""


def open_board(spec: str, heapsize: str | None = None) -> Board:
    kind, _, where = spec.partition(":")
    if kind == "local":
        return LocalBoard(Path(where), heapsize)
    if kind == "serial":
        return SerialBoard(where)
    raise ValueError(f"board {spec!r}: expected local:DIR or serial:PORT")
