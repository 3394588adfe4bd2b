"""`microtrain lab`: the browser lab (ports/webassembly/) served locally, and its test.

The site (build/lab/site/) holds the page, MicroPython's WebAssembly port (npm
package, pinned below, installed by `make lab-setup`) and, under fs/, the files
the page writes into the interpreter's file system: the microtrain package
sources, ports/webassembly/lab_session.py, a small digits CNN (.mtm) and 200
training / 100 test digits (.mtd) from scikit-learn's real 8x8 digits.

`--test N` (make lab-test) drives the page in headless chromium through
chromedriver's W3C WebDriver HTTP interface, trains N steps there, runs the same
script on the unix MicroPython and compares the losses bit for bit.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from microtrain_tools import paths

ROOT = paths.ROOT
PORT_DIR = ROOT / "ports" / "webassembly"
LAB = paths.BUILD / "lab"
SITE = LAB / "site"
WASM_PKG = "@micropython/micropython-webassembly-pyscript"
WASM_VERSION = "1.27.0"  # the version whose results were checked identical under Node
WASM_DIR = LAB / "npm" / "node_modules" / WASM_PKG
PAGE_FILES = ("index.html", "lab.js", "lab.css")
LESSONS = ROOT / "examples" / "lab_lessons"
DATA_FILES = ("digits.mtm", "digits_train.mtd", "digits_test.mtd", "digits_float.json")
N_TRAIN, N_TEST = 200, 100


def ensure_wasm() -> Path:
    """The pinned npm package in build/lab/npm (installed once)."""
    if not (WASM_DIR / "micropython.wasm").exists():
        (LAB / "npm").mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(LAB / "npm"),
                        f"{WASM_PKG}@{WASM_VERSION}"], check=True, stdout=subprocess.DEVNULL)
    return WASM_DIR


def _model_files(dest: Path) -> None:
    """A small CNN trained for a few seconds on the digits, converted; the data as .mtd."""
    import numpy as np
    import torch
    from sklearn.datasets import load_digits
    from torch import nn

    from microtrain_tools import convert as cv
    from microtrain_tools.mtd import write_mtd

    d = load_digits()
    order = np.random.default_rng(0).permutation(len(d.target))
    x = torch.tensor(d.images[order] / 16.0, dtype=torch.float32)[:, None]
    y = torch.tensor(d.target[order], dtype=torch.long)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(6, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 10))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    # trained on the first 400 digits only, briefly: the lab's fine-tuning has room to help
    for _ in range(3):
        for idx in torch.randperm(400).split(32):
            opt.zero_grad()
            nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
            opt.step()
    net.eval()
    from microtrain_tools import mtm

    data = mtm.write(cv.convert(net, x[:256], progress=False))
    (dest / "digits.mtm").write_bytes(data)
    xq = cv.quantize_input(data, x.numpy())
    yn = y.numpy()
    write_mtd(dest / "digits_train.mtd", xq[400:400 + N_TRAIN], yn[400:400 + N_TRAIN])
    write_mtd(dest / "digits_test.mtd", xq[1300:1300 + N_TEST], yn[1300:1300 + N_TEST])
    # the float weights the int8 model was made from, for the int8 lesson (PyTorch layout)
    floats = {k: [round(float(v), 7) for v in t.detach().flatten()] for k, t in net.state_dict().items()}
    (dest / "digits_float.json").write_text(json.dumps(floats))


def lesson_files(dest: Path) -> list[str]:
    """The model, data and lesson scripts (examples/lab_lessons) copied into dest: what a board or
    the unix MicroPython needs next to the lessons; the model and data are made once (cached)."""
    cache = LAB / "data"
    if not all((cache / name).exists() for name in DATA_FILES):
        cache.mkdir(parents=True, exist_ok=True)
        _model_files(cache)
    dest.mkdir(parents=True, exist_ok=True)
    files = []
    for src in [cache / name for name in DATA_FILES] + sorted(LESSONS.glob("*.py")):
        shutil.copy(src, dest / src.name)
        files.append(src.name)
    return files


def build_site(site: Path = SITE) -> Path:
    """The static site: page, WebAssembly port, fs/ files and manifest.json."""
    wasm = ensure_wasm()
    fs = site / "fs"
    if site.exists():
        shutil.rmtree(site)
    (site / "vendor").mkdir(parents=True)
    fs.mkdir()
    for name in PAGE_FILES:
        shutil.copy(PORT_DIR / name, site / name)
    for name in ("micropython.mjs", "micropython.wasm"):
        shutil.copy(wasm / name, site / "vendor" / name)
    files = lesson_files(fs)
    shutil.copy(PORT_DIR / "lab_session.py", fs / "lab_session.py")
    files.append("lab_session.py")
    pkg = paths.PYTHON_LIB / "microtrain"
    for src in sorted(pkg.rglob("*.py")):
        rel = Path("lib") / src.relative_to(paths.PYTHON_LIB)
        (fs / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, fs / rel)
        files.append(rel.as_posix())
    (site / "manifest.json").write_text(json.dumps({"files": files, "wasm": f"{WASM_PKG}@{WASM_VERSION}"}))
    return site


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm",
                      ".py": "text/plain", ".mtm": "application/octet-stream",
                      ".mtd": "application/octet-stream"}

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass


def serve(site: Path, port: int) -> http.server.ThreadingHTTPServer:
    """An HTTP server of the site on 127.0.0.1:port (0: any free port), in a thread."""
    handler = functools.partial(_Handler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


# --------------------------------------------------------------------------
# the same script on the host, and in headless chromium


def _script(steps: int) -> str:
    return ("import lab_session as L\nL.load()\nL.predict(20)\nL.begin(lr=0.005)\n"
            f"for i in range({steps}):\n    print('STEP', L.step())\nL.save('digits_trained.mtm')\n")


def host_run(site: Path, steps: int) -> tuple[list[str], str]:
    """lab_session on the unix MicroPython (native kernels when built, else pure Python) in a copy
    of the page's file system: (step lines, output)."""
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("digits.mtm", "digits_train.mtd", "digits_test.mtd", "lab_session.py"):
            shutil.copy(site / "fs" / name, Path(tmp) / name)
        (Path(tmp) / "run.py").write_text(_script(steps))
        natmod = paths.natmod_dir("x64")
        env = dict(os.environ, MICROPYPATH=f"{natmod}:{paths.PYTHON_LIB}")
        p = subprocess.run([paths.micropython(), "run.py"], cwd=tmp, env=env, capture_output=True, text=True,
                           timeout=600, check=False)
    if p.returncode:
        raise RuntimeError(f"host run failed:\n{p.stdout}{p.stderr}")
    return [ln[5:] for ln in p.stdout.splitlines() if ln.startswith("STEP ")], p.stdout


class WebDriver:
    """The few W3C WebDriver commands the test needs, over chromedriver's HTTP interface."""

    def __init__(self, driver: str = "chromedriver", browser: str = "chromium") -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen([driver, f"--port={self.port}"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        for _ in range(100):
            try:
                self._req("GET", "/status")
                break
            except OSError:
                time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": shutil.which(browser) or browser,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=900,1500"]}}}}
        self.session = self._req("POST", "/session", caps)["sessionId"]

    def _req(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        rq = urllib.request.Request(self.base + path, data=data, method=method,
                                    headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(rq, timeout=600) as r:
            v = json.loads(r.read())["value"]
        if isinstance(v, dict) and "error" in v:
            raise RuntimeError(f"webdriver {path}: {v['error']}: {v.get('message', '')[:500]}")
        return v

    def cmd(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return self._req(method, f"/session/{self.session}{path}", body)

    def js(self, script: str, *args: Any) -> Any:
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait(self, script: str, timeout: float) -> Any:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            v = self.js(script)
            if v:
                return v
            time.sleep(0.25)
        raise TimeoutError(f"page: no {script!r} after {timeout:.0f} s")

    def close(self) -> None:
        try:
            self._req("DELETE", f"/session/{self.session}")
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def browser_run(url: str, steps: int, screenshot: Path) -> tuple[list[str], str, float]:
    """Load the page, click through load / predict / train N / save; (step lines, output, seconds)."""
    import base64

    wd = WebDriver()
    try:
        wd.cmd("POST", "/url", {"url": url})
        err = "return document.body.dataset.error || document.body.dataset.ready"
        if wd.wait(err, 120) != "1":
            raise RuntimeError("page: " + str(wd.js("return document.body.dataset.error")))
        wd.js("document.getElementById('b-load').click()")
        wd.js("document.getElementById('b-predict').click()")
        wd.js(f"document.getElementById('steps').value = '{steps}'")
        t0 = time.monotonic()
        wd.js("document.getElementById('b-train').click()")
        wd.wait("return document.body.dataset.trained", 1800)
        dt = time.monotonic() - t0
        wd.js("document.getElementById('b-save').click()")
        wd.wait("return document.body.dataset.saved", 60)
        # the code cell runs on the same interpreter: the trained model is there
        wd.js("document.getElementById('cell').value = 'print(\\'cell:\\', L.n_steps, L.mt.NATIVE)'")
        wd.js("document.getElementById('b-run').click()")
        wd.wait("return document.getElementById('out').textContent.includes('cell: ')", 60)
        lines = wd.js("return [...document.querySelectorAll('#losses li')].map(e => e.textContent)")
        out = wd.js("return document.getElementById('out').textContent")
        png = wd.cmd("GET", "/screenshot")
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        screenshot.write_bytes(base64.b64decode(png))
        return list(lines), str(out), dt
    finally:
        wd.close()


def lab_test(steps: int, screenshot: Path) -> int:
    site = build_site()
    host, host_out = host_run(site, steps)
    httpd = serve(site, 0)
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/index.html"
        page, page_out, dt = browser_run(url, steps, screenshot)
    finally:
        httpd.shutdown()
    same = sum(1 for a, b in zip(page, host, strict=False) if a.split()[:2] == b.split()[:2])
    saved = [ln for ln in page_out.splitlines() if ln.startswith("saved ")]
    host_saved = [ln for ln in host_out.splitlines() if ln.startswith("saved ")]
    ms = 1000 * dt / max(1, len(page))
    print(f"lab: page trained {len(page)} steps in {dt:.1f} s ({ms:.0f} ms per step, "
          "pure-Python kernels in WebAssembly)")
    print(f"lab: checkpoint page: {saved[-1] if saved else 'none'} | "
          f"host: {host_saved[-1] if host_saved else 'none'}")
    cell = [ln for ln in page_out.splitlines() if ln.startswith("cell: ")]
    print(f"lab: code cell printed {cell[-1] if cell else 'nothing'!r}")
    if len(page) != steps or same != steps or saved != host_saved:
        for a, b in zip(page, host, strict=False):
            if a.split()[:2] != b.split()[:2]:
                print(f"lab: differs: page {a} | host {b}")
                break
    print(f"lab: browser=chromium steps={steps} losses_identical={same}/{steps} screenshot={screenshot}")
    ok = same == steps == len(page) and saved == host_saved and saved and cell == [f"cell: {steps} False"]
    return 0 if ok else 1


DESCRIPTION = (
    "Serve the browser lab (ports/webassembly/, docs/lab.md) on this machine: MicroPython's\n"
    "WebAssembly port in the page runs the microtrain package (pure-Python kernels) with a digits\n"
    "CNN and 300 real 8x8 digits in its file system: load, predict, train the last layer with a\n"
    "live loss / accuracy plot, save and download the checkpoint, and an editable code cell on\n"
    "the same interpreter. Open the printed address in a browser; Ctrl-C stops the server.\n"
    "--test N: headless chromium trains N steps on the page, the same script runs on the unix\n"
    "MicroPython, and the losses must be identical bit for bit (make lab-test).")
EXAMPLE = "  microtrain lab              # then open http://127.0.0.1:8016/index.html\n"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--port", type=int, default=8016, help="HTTP port on 127.0.0.1 (default 8016)")
    ap.add_argument("--build-only", action="store_true", help="write build/lab/site and exit")
    ap.add_argument("--test", type=int, metavar="N", default=0,
                    help="headless chromium trains N steps; compare with the host run (make lab-test)")
    ap.add_argument("--screenshot", type=Path, default=LAB / "lab.png",
                    help="screenshot of --test (default build/lab/lab.png)")


def run(args: argparse.Namespace) -> int:
    if args.test:
        return lab_test(args.test, args.screenshot)
    site = build_site()
    if args.build_only:
        print(f"lab: {site}")
        return 0
    httpd = serve(site, args.port)
    print(f"lab: http://127.0.0.1:{httpd.server_address[1]}/index.html (Ctrl-C stops)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        httpd.shutdown()
    return 0


if __name__ == "__main__":
    _ap = argparse.ArgumentParser(prog="python -m microtrain_tools.lab", description=DESCRIPTION,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(_ap)
    raise SystemExit(run(_ap.parse_args()))
