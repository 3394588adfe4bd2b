"""Flower's deployment engine on loopback for a fleet of boards (docs/fleet.md).

One ``flower-superlink`` and one ``flower-supernode`` per board, on 127.0.0.1, started here
and stopped by PID (with the ``flower-superexec`` processes and anything else they started),
so that nothing is left running. By default with TLS (a CA, and a SuperLink certificate for
127.0.0.1, made by openssl) and SuperNode authentication (``--enable-supernode-auth``: each
SuperNode's EC key registered with ``flwr supernode register`` before it connects). Offline:
telemetry and update checks off, no dependency installation (docs/fleet.md, "Offline").

A run: :meth:`Engine.run` writes the Flower app (a pyproject.toml whose components are
:mod:`microtrain_tools.fleet_server` and :mod:`microtrain_tools.fleet_client`, and whose run
config is the run's) and runs ``flwr run APP fleet --stream``; the run's status comes from
``flwr ls`` (``flwr run`` exits 0 even when a run fails).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from microtrain_tools import paths

FLWR_VERSION = "1.42.0"
OFFLINE_ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children(pid: int) -> list[int]:
    """Every live descendant of pid (from /proc: each process's parent)."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(d.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def kill_tree(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, wait: float = 10.0) -> None:
    """Stop proc and its descendants by PID: sig first, SIGKILL for what is left after wait s."""
    pids = [*children(proc.pid), proc.pid]
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass
    t0 = time.monotonic()
    while time.monotonic() - t0 < wait and any(alive(p) for p in pids):
        proc.poll()
        time.sleep(0.1)
    for p in pids:
        if alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def make_certs(d: Path) -> dict[str, Path]:
    """A CA and a SuperLink certificate for 127.0.0.1 / localhost (openssl, 1 day)."""
    d.mkdir(parents=True, exist_ok=True)
    names = ("ca.key", "ca.crt", "server.key", "server.csr", "server.crt")
    ca_key, ca, key, csr, crt = (d / n for n in names)
    ext = d / "server.ext"
    ext.write_text("subjectAltName = IP:127.0.0.1, DNS:localhost\n")

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=microtrain fleet CA",
        "-keyout", str(ca_key), "-out", str(ca))
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out",
        str(csr))
    ssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial", "-days",
        "1", "-extfile", str(ext), "-out", str(crt))
    return {"ca": ca, "key": key, "crt": crt}


def node_key(d: Path, name: str) -> tuple[Path, Path]:
    """A SuperNode's EC key pair in OpenSSH format (what flower-supernode and `flwr supernode
    register` read)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    k = ec.generate_private_key(ec.SECP384R1())
    priv, pub = d / f"{name}.key", d / f"{name}.pub"
    priv.write_bytes(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                     serialization.NoEncryption()))
    pub.write_bytes(k.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                serialization.PublicFormat.OpenSSH) + b"\n")
    priv.chmod(0o600)
    return priv, pub


PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "mtfleet"
version = "1.0.0"
description = "microtrain boards as Flower clients"
license = "MIT"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "microtrain"

[tool.flwr.app.components]
serverapp = "mtfleet.server:app"
clientapp = "mtfleet.client:app"

[tool.flwr.app.config]
{config}
"""


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))


@dataclass
class Engine:
    """A SuperLink and SuperNodes on loopback, under ``work``."""

    work: Path
    tls: bool = True
    auth: bool = True
    port: int = 0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started: list[int] = field(default_factory=list)  # every PID this engine started or saw started

    def __post_init__(self) -> None:
        self.work = Path(self.work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.home = self.work / "flwr-home"
        self.home.mkdir(exist_ok=True)
        self.certs = make_certs(self.work / "certs") if self.tls else {}
        bin_dir = str(Path(sys.executable).parent)
        self.env = {**os.environ, **OFFLINE_ENV, "FLWR_HOME": str(self.home),
                    "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
                    "PYTHONPATH": os.pathsep.join([str(paths.ROOT / "tools"), str(paths.ROOT),
                                                   os.environ.get("PYTHONPATH", "")])}
        self.auth = self.auth and self.tls  # Flower authenticates SuperNodes over TLS only

    def _tool(self, name: str) -> str:
        return str(Path(sys.executable).parent / name)

    def _start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.work / f"{name}.log", "wb")  # noqa: SIM115 (kept open by the process)
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=self.env)
        log.close()
        self.procs[name] = p
        self.started.append(p.pid)
        return p

    def _tls_args(self, server: bool) -> list[str]:
        if not self.tls:
            return ["--insecure"]
        if server:
            return ["--ssl-ca-certfile", str(self.certs["ca"]), "--ssl-certfile", str(self.certs["crt"]),
                    "--ssl-keyfile", str(self.certs["key"])]
        return ["--root-certificates", str(self.certs["ca"])]

    def start_superlink(self) -> None:
        self.port = free_port()
        argv = [self._tool("flower-superlink"), *self._tls_args(True), "--host", "127.0.0.1", "--port",
                str(self.port), "--disable-runtime-dependency-installation"]
        # No --database: Flower's in-memory state. Its SQLite state answered "database is locked"
        # on a loaded machine, and a reply lost that way left the run unfinished.
        if self.auth:
            argv.append("--enable-supernode-auth")
        self._start("superlink", argv)
        conn = [f'[superlink.fleet]\naddress = "127.0.0.1:{self.port}"']
        if self.tls:
            conn.append(f'root-certificates = "{self.certs["ca"]}"')
        else:
            conn.append("insecure = true")
        (self.home / "config.toml").write_text("\n".join(conn) + "\n")
        self._wait_port(self.port, "superlink")

    def _wait_port(self, port: int, name: str, timeout: float = 60) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            if self.procs[name].poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"{name} did not start: {(self.work / f'{name}.log').read_text()[-800:]}")

    def flwr(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self._tool("flwr"), *args], capture_output=True, text=True, env=self.env,
                              timeout=timeout, stdin=subprocess.DEVNULL, cwd=self.work)

    def start_supernode(self, name: str, node_config: dict[str, Any]) -> subprocess.Popen[bytes]:
        """A SuperNode for one board (`name` unique); node_config: its key/value pairs."""
        cfg = " ".join(f"{k}={_toml(v)}" for k, v in node_config.items())
        argv = [self._tool("flower-supernode"), *self._tls_args(False), "--superlink",
                f"127.0.0.1:{self.port}", "--host", "127.0.0.1", "--port", str(free_port()),
                "--node-config", cfg]
        if self.auth:
            keys = self.work / "node-keys"
            keys.mkdir(exist_ok=True)
            priv = keys / f"{name}.key"
            if not priv.is_file():
                priv, pub = node_key(keys, name)
                r = self.flwr("supernode", "register", str(pub), "fleet")
                if r.returncode != 0:
                    raise RuntimeError(f"flwr supernode register: {(r.stdout + r.stderr)[-800:]}")
            argv += ["--auth-supernode-private-key", str(priv)]
        return self._start(name, argv)

    def stop_process(self, name: str) -> None:
        p = self.procs.pop(name, None)
        if p is not None:
            self.started += children(p.pid)
            kill_tree(p)

    def run(self, config: dict[str, Any], timeout: float = 7200) -> dict[str, Any]:
        """Write the app with this run config, run it to its end; {"status", "seconds", "log"}."""
        app = self.work / "app"
        (app / "mtfleet").mkdir(parents=True, exist_ok=True)
        (app / "mtfleet" / "__init__.py").write_text("")
        # (an assignment: Flower finds the component by reading the module, not importing it)
        (app / "mtfleet" / "server.py").write_text("from microtrain_tools import fleet_server\n\n"
                                                   "app = fleet_server.app\n")
        (app / "mtfleet" / "client.py").write_text("from microtrain_tools import fleet_client\n\n"
                                                   "app = fleet_client.app\n")
        lines = "\n".join(f"{k} = {_toml(v)}" for k, v in config.items())
        (app / "pyproject.toml").write_text(PYPROJECT.format(config=lines))
        t0 = time.monotonic()
        out = self.work / f"run-{int(time.time() * 1000)}.log"
        with open(out, "w") as f:
            p = subprocess.Popen([self._tool("flwr"), "run", str(app), "fleet", "--stream"], stdout=f,
                                 stderr=subprocess.STDOUT, env=self.env, stdin=subprocess.DEVNULL,
                                 cwd=self.work)
            self.started.append(p.pid)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                kill_tree(p)  # type: ignore[arg-type]
        status = self.status()
        return {"status": status, "seconds": time.monotonic() - t0, "log": str(out)}

    def status(self) -> str:
        """The last run's status from `flwr ls` ("finished:completed" when it went through)."""
        r = self.flwr("ls", "fleet", "--format", "json")
        try:
            runs = json.loads(r.stdout).get("runs", [])
        except json.JSONDecodeError:
            return f"unknown ({(r.stdout + r.stderr)[-300:]})"
        if not runs:
            return "no run"
        last = max(runs, key=lambda x: str(x.get("created-at", "")))
        return str(last.get("status", "unknown"))

    def strays(self) -> list[int]:
        """Live processes that carry this engine's FLWR_HOME but left its process tree (an app
        process whose parent died first is adopted by init)."""
        mark = f"FLWR_HOME={self.home}".encode()
        out = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit() and int(d.name) != os.getpid():
                try:
                    env = (d / "environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                if mark in env and alive(int(d.name)):
                    out.append(int(d.name))
        return out

    def stop(self) -> list[int]:
        """Stop every process by PID (SuperNodes first, then anything of this engine's left over);
        the PIDs still alive after (none)."""
        for name in [n for n in self.procs if n != "superlink"] + ["superlink"]:
            if name in self.procs:
                self.stop_process(name)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.strays():
                self.started.append(pid)
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)
        return [p for p in self.started if alive(p)]

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
