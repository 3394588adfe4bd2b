"""`microtrain lab`: the browser lab (ports/webassembly/) served locally, and its test.

The site (build/lab/site/) holds the page, a MicroPython WebAssembly build and, under fs/, the files
the page writes into the interpreter's file system: the microtrain package
sources, ports/webassembly/lab_session.py, a small digits CNN (.mtm) and 200
training / 100 test digits (.mtd) from scikit-learn's real 8x8 digits. The build is
the project's own (ports/webassembly, `make wasm`: microtrain's C kernels built in)
when build/wasm/ holds it, else MicroPython's npm package (pinned below, installed
by `make lab-setup`) with the pure-Python kernels.

`--test N` (make lab-test) drives the page in headless chromium through
chromedriver's W3C WebDriver HTTP interface, trains N steps there, runs the five
lessons (examples/lab_lessons; lesson 5 with digits drawn through pointer events)
and passes their checks, runs the same code on the unix MicroPython and compares
the losses bit for bit.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import math
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
OWN_WASM = paths.BUILD / "wasm"  # ports/webassembly/Makefile's output
PAGE_FILES = ("index.html", "lab.js", "lessons.js", "lab.css")
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


def own_wasm() -> Path | None:
    """The project's own WebAssembly build (C kernels built in), if `make wasm` made it."""
    return OWN_WASM if (OWN_WASM / "micropython.wasm").exists() else None


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
    """The static site: page, WebAssembly build, fs/ files and manifest.json."""
    own = own_wasm()
    wasm = own or ensure_wasm()
    fs = site / "fs"
    if site.exists():
        shutil.rmtree(site)
    (site / "vendor").mkdir(parents=True)
    fs.mkdir()
    for name in PAGE_FILES:
        shutil.copy(PORT_DIR / name, site / name)
    for name in ("micropython.mjs", "micropython.wasm"):
        shutil.copy(wasm / name, site / "vendor" / name)
    # vendor/loader.mjs: loadMicroPython, the one name the page imports
    if own:
        shutil.copy(PORT_DIR / "mtlab.mjs", site / "vendor" / "loader.mjs")
    else:
        (site / "vendor" / "loader.mjs").write_text('export { loadMicroPython } from "./micropython.mjs";\n')
    files = lesson_files(fs)
    shutil.copy(PORT_DIR / "lab_session.py", fs / "lab_session.py")
    files.append("lab_session.py")
    pkg = paths.PYTHON_LIB / "microtrain"
    for src in sorted(pkg.rglob("*.py")):
        rel = Path("lib") / src.relative_to(paths.PYTHON_LIB)
        (fs / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, fs / rel)
        files.append(rel.as_posix())
    if own:  # the npm package has json built in; the own build takes the ports' small one
        shutil.copy(ROOT / "ports" / "common" / "lib" / "json.py", fs / "lib" / "json.py")
        files.append("lib/json.py")
    name = "own (ports/webassembly, C kernels)" if own else f"{WASM_PKG}@{WASM_VERSION}"
    (site / "manifest.json").write_text(json.dumps({"files": files, "wasm": name}))
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
    return ("import time\nimport lab_session as L\nL.load()\nL.predict(20)\nL.begin(lr=0.005)\n"
            "t0 = time.ticks_us()\n"
            f"for i in range({steps}):\n    print('STEP', L.step())\n"
            f"print('HOSTMS', time.ticks_diff(time.ticks_us(), t0) / 1000 / {steps})\n"
            "L.save('digits_trained.mtm')\n")


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


# Lesson 5's scripted learner: digits as strokes in a unit box (y down), drawn with a thick
# pen and slanted, each with its own small wobble: a hand unlike the digits the model saw.
STROKES: dict[int, list[tuple[float, float]]] = {
    0: [(0.5 + 0.32 * math.sin(2 * math.pi * k / 16), 0.5 - 0.45 * math.cos(2 * math.pi * k / 16))
        for k in range(17)],
    1: [(0.3, 0.22), (0.55, 0.04), (0.55, 0.96)],
    2: [(0.2, 0.25), (0.35, 0.06), (0.65, 0.06), (0.8, 0.28), (0.7, 0.5), (0.2, 0.95), (0.85, 0.95)],
    3: [(0.2, 0.08), (0.75, 0.08), (0.45, 0.45), (0.75, 0.6), (0.75, 0.85), (0.5, 0.97), (0.2, 0.88)],
    4: [(0.62, 0.96), (0.62, 0.04), (0.12, 0.66), (0.88, 0.66)],
    5: [(0.8, 0.05), (0.25, 0.05), (0.2, 0.45), (0.6, 0.4), (0.8, 0.6), (0.75, 0.85), (0.5, 0.97),
        (0.2, 0.88)],
    6: [(0.7, 0.04), (0.35, 0.35), (0.2, 0.7), (0.35, 0.96), (0.65, 0.96), (0.8, 0.72), (0.6, 0.5),
        (0.28, 0.62)],
    7: [(0.12, 0.05), (0.88, 0.05), (0.4, 0.96)],
    8: [(0.5, 0.5), (0.22, 0.28), (0.5, 0.04), (0.78, 0.28), (0.5, 0.5), (0.2, 0.75), (0.5, 0.97),
        (0.8, 0.75), (0.5, 0.5)],
    9: [(0.75, 0.35), (0.5, 0.52), (0.25, 0.35), (0.35, 0.08), (0.7, 0.08), (0.75, 0.35), (0.7, 0.96)],
}
DRAW_TRAIN, DRAW_HELD = 5, 3  # drawings per digit: for training, held out


def drawn_strokes(seed: int = 7) -> list[tuple[int, bool, list[list[float]]]]:
    """(label, held_out, points in pad pixels) for every drawing the test makes."""
    import random

    rng = random.Random(seed)
    out = []
    for rep in range(DRAW_TRAIN + DRAW_HELD):
        for label in range(10):
            slant, size = rng.uniform(0.3, 0.45), rng.uniform(0.75, 0.95)
            pts = []
            for x, y in STROKES[label]:
                x, y = x + rng.uniform(-0.04, 0.04), y + rng.uniform(-0.04, 0.04)
                x += slant * (0.5 - y)  # leaning right
                pts.append([100 + 130 * size * (x - 0.5), 100 + 150 * size * (y - 0.5)])
            out.append((label, rep >= DRAW_TRAIN, pts))
    return out


# synthetic pointer events on the pad, one drawing: down, moves every few pixels, up
_DRAW_JS = """
const [pts, label, held, keys] = arguments;
const pad = document.getElementById('pad');
const b = pad.getBoundingClientRect();
const ev = (type, x, y) => pad.dispatchEvent(new PointerEvent(type, {bubbles: true, pointerId: 1,
  pointerType: 'mouse', clientX: b.left + x * b.width / pad.width, clientY: b.top + y * b.height / pad.height,
  buttons: 1}));
document.getElementById('pen-5').value = '30';
document.getElementById('label-5').value = String(label);
ev('pointerdown', pts[0][0], pts[0][1]);
for (let i = 1; i < pts.length; i++) {
  const [x0, y0] = pts[i - 1], [x1, y1] = pts[i];
  const n = Math.max(1, Math.ceil(Math.hypot(x1 - x0, y1 - y0) / 4));
  for (let k = 1; k <= n; k++) ev('pointermove', x0 + (x1 - x0) * k / n, y0 + (y1 - y0) * k / n);
}
ev('pointerup', pts[pts.length - 1][0], pts[pts.length - 1][1]);
if (keys) pad.focus();  // the learner adds it from the keyboard instead
else document.getElementById(held ? 'test-5' : 'add-5').click();
return window.lab.lab5.drawn.length;
"""


def _answers(wd: WebDriver) -> dict[int, Any]:
    """What a learner who read each lesson's pictures and numbers would answer."""
    r = wd.js("return window.lab.results")
    a1 = r["1"]["ask"]
    best = min(r["3"]["rows"], key=lambda w: w["plan_bytes"])["config"]
    return {1: a1["q"] * a1["scale"], 2: r["2"]["label"], 3: best, 4: round(r["4"]["saved_pct"], 1), 5: None}


def _check(wd: WebDriver, n: int, answer: Any) -> str:
    if answer is not None:
        wd.js("document.getElementById(arguments[0]).value = String(arguments[1])", f"ans-{n}", answer)
    wd.js(f"delete document.body.dataset.check{n}; document.getElementById('chk-{n}').click()")
    return str(wd.wait(f"return document.body.dataset.check{n}", 60))


def _shot(wd: WebDriver, css: str, path: Path) -> None:
    import base64

    el = wd.cmd("POST", "/element", {"using": "css selector", "value": css})
    eid = next(iter(el.values()))
    wd.js("arguments[0].scrollIntoView()", el)
    path.write_bytes(base64.b64decode(wd.cmd("GET", f"/element/{eid}/screenshot")))


def lessons_run(wd: WebDriver, shots: Path) -> dict[str, Any]:
    """Every lesson on the page: run its cell, answer its check (a wrong answer first, which must
    fail), lesson 5 with drawings made through pointer events; a screenshot of each lesson."""
    ran = 0
    for n in (1, 2, 3, 4):
        wd.js(f"document.getElementById('run-{n}').click()")
        ran += wd.wait(f"return document.body.dataset.lesson{n}", 900) == "ran"
    drawn = keyed = want_keys = 0
    for i, (label, held, pts) in enumerate(drawn_strokes()):
        # every tenth drawing: its label and Enter / T typed into the focused pad
        keys = i % 10 == i // 10 % 10
        drawn = int(wd.js(_DRAW_JS, pts, label, held, keys))
        if keys:
            want_keys += 1
            typed = [{"type": t, "value": k} for k in (str(label), "t" if held else "\ue007")
                     for t in ("keyDown", "keyUp")]
            wd.cmd("POST", "/actions", {"actions": [{"type": "key", "id": "kbd", "actions": typed}]})
            n = int(wd.js("return window.lab.lab5.drawn.length"))
            keyed += n == drawn + 1 and wd.js("return window.lab.lab5.drawn.at(-1)[0]") == label
            drawn = n
    wd.js("document.getElementById('run-5').click()")
    ran += wd.wait("return document.body.dataset.lesson5", 900) == "ran"
    answers = _answers(wd)
    wrong = {1: answers[1] + 1.0, 2: (answers[2] + 1) % 10, 3: "all" if answers[3] != "all" else "last:1",
             4: answers[4] + 10.0}
    refused = sum(_check(wd, n, v) == "failed" for n, v in wrong.items())
    passed = sum(_check(wd, n, answers[n]) == "passed" for n in (1, 2, 3, 4, 5))
    for n in (1, 2, 3, 4, 5):
        _shot(wd, f"#lesson{n}", shots / f"lesson{n}.png")
    r = wd.js("return window.lab.results")
    cells = {n: wd.js(f"return document.getElementById('cell-{n}').value") for n in (2, 3, 4, 5)}
    # offline once served: nothing the page loaded came from another address
    elsewhere = wd.js("return performance.getEntriesByType('resource').map(e => e.name)"
                      ".filter(u => !u.startsWith(location.origin)).length")
    return {"ran": ran, "passed": passed, "refused": refused, "wrong": len(wrong), "drawn": drawn,
            "keyed": keyed, "want_keys": want_keys, "elsewhere": elsewhere,
            "before": r["5"]["acc_before"], "after": r["5"]["acc_after"], "n_held": r["5"]["n_held"],
            "losses": [h for n in (2, 3, 4, 5) for h in r[str(n)]["losses"]], "cells": cells,
            "adds": wd.js("return window.lab.lab5.log")}


def host_lessons(site: Path, cells: dict[int, str], adds: list[str]) -> list[str]:
    """The page's lesson cells (and lesson 5's drawings, as the page added them) on the unix
    MicroPython: the losses of lessons 2 to 5, as exact hex."""
    lines = []
    for n in (2, 3, 4, 5):
        if n == 5:
            lines += ["import lesson5_own", *adds]
        lines.append(cells[n])
        lines.append("for h in r['losses']:\n    print('LOSS', h)")
    with tempfile.TemporaryDirectory() as tmp:
        for name in DATA_FILES + tuple(p.name for p in LESSONS.glob("*.py")):
            shutil.copy(site / "fs" / name, Path(tmp) / name)
        (Path(tmp) / "run.py").write_text("\n".join(lines) + "\n")
        env = dict(os.environ, MICROPYPATH=f"{paths.natmod_dir('x64')}:{paths.PYTHON_LIB}")
        p = subprocess.run([paths.micropython(), "run.py"], cwd=tmp, env=env, capture_output=True, text=True,
                           timeout=900, check=False)
    if p.returncode:
        raise RuntimeError(f"host lessons failed:\n{p.stdout[-2000:]}{p.stderr}")
    return [ln[5:] for ln in p.stdout.splitlines() if ln.startswith("LOSS ")]


def browser_run(url: str, steps: int, screenshot: Path) -> tuple[list[str], str, float, dict[str, Any]]:
    """Load the page, click through load / predict / train N / save, then every lesson;
    (step lines, output, seconds, lessons)."""
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
        wd.js("document.getElementById('b-train').click()")
        wd.wait("return document.body.dataset.trained", 1800)
        # the page's own clock over its training loop (steps, plot and frames; not WebDriver's polling)
        dt = float(wd.js("return document.body.dataset.trainms")) / 1000
        wd.js("document.getElementById('b-save').click()")
        wd.wait("return document.body.dataset.saved", 60)
        # the code cell runs on the same interpreter: the trained model is there
        wd.js("document.getElementById('cell').value = 'print(\\'cell:\\', L.n_steps, L.mt.NATIVE)'")
        wd.js("document.getElementById('b-run').click()")
        wd.wait("return document.getElementById('out').textContent.includes('cell: ')", 60)
        lines = wd.js("return [...document.querySelectorAll('#losses li')].map(e => e.textContent)")
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        wd.js("window.scrollTo(0, 0)")
        screenshot.write_bytes(base64.b64decode(wd.cmd("GET", "/screenshot")))
        lessons = lessons_run(wd, screenshot.parent)
        out = wd.js("return document.getElementById('out').textContent")
        return list(lines), str(out), dt, lessons
    finally:
        wd.close()


DOC = ROOT / "docs" / "lab.md"
BEGIN, END = "<!-- lab-test: begin (generated by make lab-test; do not edit) -->", "<!-- lab-test: end -->"


ROW_HOST = "unix MicroPython, native `_microtrain` (x64), the test's host run"
ROW_OWN = "headless chromium, the lab's own WebAssembly build, C kernels built in"
ROW_NPM = "headless chromium, the npm package (the fallback), pure-Python kernels"


def write_doc(steps: int, ms: float, host_ms: float, own: bool) -> None:
    """docs/lab.md's table of times: this run's rows (host, and the build that ran); the other
    build's row stays as its last run left it."""
    text = DOC.read_text()
    head, rest = text.split(BEGIN)
    old, tail = rest.split(END)
    rows = {ROW_HOST: "", ROW_OWN: "", ROW_NPM: ""}
    for ln in old.splitlines():
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if len(cells) == 3 and cells[0] in rows:
            rows[cells[0]] = f"| {cells[1]} | {cells[2]} |"
    rows[ROW_HOST] = f"| {host_ms:.2f} | {steps} |"
    rows[ROW_OWN if own else ROW_NPM] = f"| {ms:.2f} | {steps} |"
    table = "".join(f"| {k} {v}\n" for k, v in rows.items() if v)
    body = ("\nLast `make lab-test` runs (the page's own clock over its training loop, plot included; "
            "`microtrain lab --test N` without `build/wasm` gives the npm row):\n\n"
            f"| where | ms per step | steps |\n|---|---|---|\n{table}\n")
    DOC.write_text(head + BEGIN + body + END + tail)


def lab_test(steps: int, screenshot: Path) -> int:
    site = build_site()
    host, host_out = host_run(site, steps)
    host_ms = float([ln for ln in host_out.splitlines() if ln.startswith("HOSTMS ")][0].split()[1])
    httpd = serve(site, 0)
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/index.html"
        page, page_out, dt, les = browser_run(url, steps, screenshot)
    finally:
        httpd.shutdown()
    same = sum(1 for a, b in zip(page, host, strict=False) if a.split()[:2] == b.split()[:2])
    saved = [ln for ln in page_out.splitlines() if ln.startswith("saved ")]
    host_saved = [ln for ln in host_out.splitlines() if ln.startswith("saved ")]
    ms = 1000 * dt / max(1, len(page))
    cell = [ln for ln in page_out.splitlines() if ln.startswith("cell: ")]
    native = cell == [f"cell: {steps} True"]
    kernels = "C kernels built in (ports/webassembly)" if native else "pure-Python kernels"
    print(f"lab: page trained {len(page)} steps in {dt:.2f} s ({ms:.2f} ms per step, {kernels}, "
          f"WebAssembly build: {json.loads((site / 'manifest.json').read_text())['wasm']})")
    print(f"lab: checkpoint page: {saved[-1] if saved else 'none'} | "
          f"host: {host_saved[-1] if host_saved else 'none'}")
    print(f"lab: code cell printed {cell[-1] if cell else 'nothing'!r}")
    if len(page) != steps or same != steps or saved != host_saved:
        for a, b in zip(page, host, strict=False):
            if a.split()[:2] != b.split()[:2]:
                print(f"lab: differs: page {a} | host {b}")
                break
    for ln in page_out.splitlines():
        if ln.startswith("lesson "):
            print("lab:", ln)
    host_l = host_lessons(site, les["cells"], les["adds"])
    same_l = sum(1 for a, b in zip(les["losses"], host_l, strict=False) if a == b)
    n_l = len(les["losses"])
    print(f"lab: lessons 2-5 on the host: {same_l}/{n_l} losses identical (host has {len(host_l)}); "
          f"wrong answers refused {les['refused']}/{les['wrong']}; own drawings held out: {les['n_held']}, "
          f"added from the keyboard: {les['keyed']}/{les['want_keys']}; "
          f"resources from elsewhere: {les['elsewhere']}")
    before, after = round(100 * les["before"]), round(100 * les["after"])
    total, same_all = steps + n_l, same + same_l
    print(f"lab: lessons={les['ran']}/5 checks={les['passed']}/5 "
          f"drawn_samples={les['drawn']} own_acc_before={before} own_acc_after={after}")
    print(f"lab: browser=chromium steps={steps} losses_identical={same_all}/{total} native={int(native)} "
          f"ms_per_step={ms:.2f} screenshot={screenshot}")
    want_cell = [f"cell: {steps} {own_wasm() is not None}"]
    ok = (same == steps == len(page) and saved == host_saved and saved and cell == want_cell
          and les["ran"] == 5 and les["passed"] == 5 and les["refused"] == les["wrong"] and les["drawn"] >= 30
          and after - before >= 20 and same_l == n_l == len(host_l) and les["keyed"] == les["want_keys"] > 0
          and les["elsewhere"] == 0)
    if ok:  # (a failed run's times are not the lab's)
        write_doc(steps, ms, host_ms, own_wasm() is not None)
    return 0 if ok else 1


DESCRIPTION = (
    "Serve the browser lab (ports/webassembly/, docs/lab.md) on this machine: MicroPython in\n"
    "WebAssembly (the project's own build with the C kernels when `make wasm` made build/wasm,\n"
    "else the npm package with the pure-Python kernels) runs the microtrain package with a digits\n"
    "CNN and 300 real 8x8 digits in its file system: load, predict, train the last layer with a\n"
    "live loss / accuracy plot, save and download the checkpoint, an editable code cell on\n"
    "the same interpreter, and five lessons (int8 inside, one step by hand, what to train,\n"
    "sparse updates, your own drawings; docs/teaching.md). Open the printed address in a\n"
    "browser; Ctrl-C stops the server.\n"
    "--test N: headless chromium trains N steps on the page and runs every lesson, the same\n"
    "code runs on the unix MicroPython, and the losses must be identical bit for bit\n"
    "(make lab-test; it rewrites docs/lab.md's table of times).")
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
