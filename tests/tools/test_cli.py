"""The `microtrain` command line, run as a subprocess through its real entry point.

- every subcommand's --help (description and example), and the top-level listing;
- `info` on converted models: layers printed, and every RAM number equal to an
  independent event-driven simulation written here from the mtm.py tensors;
- `run` in the real host micropython: arguments, exit code, heap size, native module;
- `deploy` / `flash --dry-run`: the exact command lines, and one-line argument errors;
- `plot` on a log computed here by training a softmax regression on real digits.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import struct
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from microtrain_tools import board, mtm
from microtrain_tools import convert as cv
from microtrain_tools.mtm import Act, Op
from support.harness import ROOT, binary_has_builtin_microtrain

ENTRY = Path(sys.executable).parent / "microtrain"
COMMANDS = ("convert", "to-torch", "info", "run", "deploy", "flash", "plot", "lab", "build")


def microtrain(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [str(ENTRY)] if ENTRY.is_file() else [sys.executable, "-m", "microtrain_tools.cli"]
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = str(ROOT / "tools")
    return subprocess.run([*cmd, *args], capture_output=True, text=True, env=e, timeout=timeout, check=False,
                          cwd=cwd)


def microtrain_all(*argvs: list[str] | tuple[str, ...]) -> list[subprocess.CompletedProcess[str]]:
    """Run several independent command lines concurrently (each is a short-lived process)."""
    with ThreadPoolExecutor(max_workers=4) as ex:
        return list(ex.map(lambda a: microtrain(*a), argvs))


def assert_one_line_error(r: subprocess.CompletedProcess[str], command: str, needle: str) -> None:
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"microtrain {command}: error:"), err
    assert needle in err, (needle, err)


def tool_path(name: str) -> str:
    p = Path(sys.executable).parent / name
    return str(p) if p.is_file() else (shutil.which(name) or name)


# --------------------------------------------------------------------------
# help


def test_help_lists_and_explains_every_subcommand() -> None:
    r = microtrain("--help")
    assert r.returncode == 0, r.stderr
    for c in COMMANDS:
        assert f"\n    {c}" in r.stdout, c
    for c, r in zip(COMMANDS, microtrain_all(*[(c, "--help") for c in COMMANDS]), strict=True):
        assert r.returncode == 0, (c, r.stderr)
        out = r.stdout
        assert out.startswith(f"usage: microtrain {c}"), out[:200]
        assert "example:\n  microtrain " + c in out, (c, out[-400:])
        body = out.split("\n\n", 2)[1]  # the description paragraph after the usage block
        assert len(body.split()) >= 8, (c, body)
    r = microtrain()
    assert_one_line_error_top = r.stderr.strip()
    assert r.returncode == 2 and len(assert_one_line_error_top.splitlines()) == 1
    assert "COMMAND" in assert_one_line_error_top


# --------------------------------------------------------------------------
# models for info / deploy (calibrated on real digits; training is not needed here)


class Cnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.ReLU6(),
            nn.Conv2d(8, 8, 1), nn.ReLU(),  # third 8x8x8 output: reuses the first one's buffer
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 1), nn.ReLU(),
            nn.AvgPool2d(2),
        )
        self.fc1 = nn.Linear(16 * 2 * 2, 20)
        self.fc2 = nn.Linear(20, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(torch.flatten(self.features(x), 1))))


class Res(nn.Module):
    """The residual block is inside the trained part for --train-last 3 (merge buffer)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv0 = nn.Conv1d(8, 12, 3, padding=1)
        self.conv1 = nn.Conv1d(12, 16, 3, padding=1)
        self.conv2 = nn.Conv1d(16, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm1d(16)
        self.gap = nn.AdaptiveAvgPool1d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.conv1(torch.relu(self.conv0(x))))
        c = torch.relu(a + self.bn2(self.conv2(a)))
        return self.fc(self.gap(c).flatten(1))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:  # type: ignore[no-untyped-def]
    from sklearn.datasets import load_digits

    x = torch.tensor(load_digits().images[:200] / 16.0, dtype=torch.float32)[:, None]
    d = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    cv.convert_to_file(Cnn().eval(), x, d / "cnn.mtm", progress=False)
    cv.convert_to_file(Res().eval(), x[:, 0], d / "res.mtm", progress=False)
    return {"cnn": d / "cnn.mtm", "res": d / "res.mtm"}


# --------------------------------------------------------------------------
# info


def _simulate_ram(m: mtm.Model, n_train: int | None, opts: tuple[str, ...]) -> dict[str, int]:
    """Re-computation of the RAM model documented in docs/memory.md: the activations placed in one
    arena by their lifetimes; the rest is counted from the mtm.py tensors."""
    numel = [t.numel for t in m.tensors]
    weighted = [j for j, ly in enumerate(m.layers) if ly.op in (Op.CONV2D, Op.LINEAR)]

    def arena_plan(keep: set[int], over: bool = False) -> tuple[int, list[int]]:
        # one arena for every tensor but the model output (a buffer of its own); a tensor lives
        # from the layer making it (the input: before the first) to its last reader (kept ones
        # to the end); tensors go in the order they are made, or largest first, whichever arena
        # is smaller, each at the lowest offset (a multiple of 4) clear of every tensor placed
        # before it whose life overlaps its own. over: a conv of stride 1 with the same rows in and
        # out whose input dies at it unkept writes its output over that input (one life), and a
        # run of such convs takes slots of rows while it runs (one block of rows, pad_top rows at
        # least; two blocks where pad_top > 0). Returns the bytes of both buffers and the gaps
        # between the tensors alive at the end, in offset order.
        end = len(m.layers)
        last = {t: j for j, ly in enumerate(m.layers) for t in ly.inputs}
        lives = {m.input: [numel[m.input], -1, end if m.input in keep else last.get(m.input, -1)]}
        root: dict[int, int] = {}
        for j, ly in enumerate(m.layers):
            p, x = ly.params, ly.inputs[0]
            row = p[4] * p[5] if ly.op == Op.CONV2D else 0
            slots = row * max(p[10], 1) * (2 if p[10] else 1) if row else 0
            if over and ly.op == Op.CONV2D and len(p) == 17 and p[8] == 1 and p[0] == p[3] \
                    and p[1] * p[2] == row and last.get(x) == j and x not in keep \
                    and m.input not in (x, ly.output) and m.output not in (x, ly.output) and slots < numel[x]:
                root[ly.output] = root.get(x, x)
                run = lives.get(-1 - (j - 1)) if j and (-1 - (j - 1)) in lives else None
                key = run[3] if run else -1 - j
                if run:
                    run[0], run[2] = max(run[0], slots), j
                lives[-1 - j] = run or [slots, j, j, key]
                continue
            if ly.output != m.output:
                lives[ly.output] = [numel[ly.output], j, j]
        for t in {*last, *keep}:
            r = root.get(t, t)
            if r in lives and r >= 0:
                lives[r][2] = max(lives[r][2], end if t in keep else last.get(t, -1))
        items = {id(v): v for v in lives.values()}  # (a run's layers share one item)
        order = [(v[0], v[1], v[2]) for v in items.values()]

        def fit(order: list[tuple[int, int, int]]) -> tuple[int, list[tuple[int, int, int, int]]]:
            placed: list[tuple[int, int, int, int]] = []  # (offset, bytes, first, last)
            for n, a, b in order:
                off = 0
                for o in sorted(p for p in placed if p[2] <= b and a <= p[3]):
                    if off + n <= o[0]:
                        break
                    off = max(off, -(-(o[0] + o[1]) // 4) * 4)
                placed.append((off, n, a, b))
            return max((o + n for o, n, _, _ in placed), default=0), placed

        in_order = fit(sorted(order, key=lambda x: x[1]))
        by_size = fit(sorted(order, key=lambda x: (-x[0], x[1])))
        size, placed = by_size if by_size[0] < in_order[0] else in_order
        gaps, at = [], 0
        for o, n, _, b in sorted(placed):
            if b >= end:
                if o > at:
                    gaps.append(o - at)
                at = max(at, -(-(o + n) // 4) * 4)
        if size > at:
            gaps.append(size - at)
        if over:  # (only where that gives a smaller plan)
            whole = arena_plan(keep)
            if whole[0] <= size + numel[m.output]:
                return whole
        return size + numel[m.output], gaps

    out = {"inference": arena_plan(set())[0]}
    if n_train is None:
        return out
    mode = opts[opts.index("--mode") + 1] if "--mode" in opts else "int8"
    first = weighted[len(weighted) - n_train]
    tail = m.layers[first:]
    trained = [m.layers[j] for j in weighted[len(weighted) - n_train:]]
    keep = set()
    for ly in tail:
        keep |= {*ly.inputs, ly.output}
    made_in_tail = {ly.output for ly in tail}
    fan_out = Counter(t for ly in tail for t in ly.inputs)
    # an activation read only by a pool with disjoint windows, made by a conv / linear, takes
    # its error in place (the pool's *_grad_input_act): no error buffer, and it hosts nothing
    maker = {ly.output: ly for ly in tail}
    pooled = {ly.inputs[0] for ly in tail if ly.op in (Op.MAXPOOL, Op.AVGPOOL)
              and ly.params[7] >= ly.params[5] and ly.params[8] >= ly.params[6]
              and ly.inputs[0] in maker and fan_out[ly.inputs[0]] == 1 and ly.inputs[0] != m.output
              and maker[ly.inputs[0]].op in (Op.CONV2D, Op.LINEAR)}
    batch = int(opts[opts.index("--batch") + 1]) if "--batch" in opts else 1
    moments = 2 if "--adam" in opts else 1 if "--momentum" in opts else 0
    now = moments == 0 and batch == 1 and "--sparse" not in opts  # layers step during backward
    # an input read only by a conv / linear, made without an activation to mask with: its error
    # goes over it after the weight gradient read it (not when layers step during backward,
    # where the grad input comes first)
    # (a conv / linear maker's fused ReLU / ReLU6 mask is applied by the reader's grad input)
    over = set() if now else {ly.inputs[0] for ly in tail if ly.op in (Op.CONV2D, Op.LINEAR)
                              and ly.inputs[0] in maker and fan_out[ly.inputs[0]] == 1
                              and ly.inputs[0] != m.output
                              and (maker[ly.inputs[0]].act == Act.NONE
                                   or maker[ly.inputs[0]].op in (Op.CONV2D, Op.LINEAR))
                              and maker[ly.inputs[0]].op not in (Op.RELU, Op.RELU6)}
    inplace = pooled | over
    # the int32 grad-input scratch: conv / linear and pools whose windows overlap use it
    # (disjoint ones need none); replay backward from the last layer: it costs nothing when
    # an error buffer (one consumer) of 4 bytes per value is still unwritten and not an
    # input of the user whenever a user runs
    def uses_scratch(ly: mtm.Layer) -> bool:
        p = ly.params
        pool = ly.op in (Op.MAXPOOL, Op.AVGPOOL) and (p[7] < p[5] or p[8] < p[6])
        return ly.inputs[0] in made_in_tail and (ly.op in (Op.CONV2D, Op.LINEAR) or pool)

    scratch_values = [numel[ly.inputs[0]] for ly in tail if uses_scratch(ly)]
    need = 4 * max(scratch_values, default=0)
    written: set[int] = set()
    idle = {t for t in made_in_tail - inplace if fan_out[t] == 1 and numel[t] >= need}
    for ly in reversed(tail):
        if uses_scratch(ly):
            idle -= written | set(ly.inputs)
        written |= set(ly.inputs) & made_in_tail
    scratch = 0 if scratch_values and idle else need
    lent = bool(scratch_values and idle)  # the scratch in retyped bytes: the update's row too
    forward, idle_pieces = arena_plan(keep, True)
    # errors and scratch go into the gaps of the training plan's arena at the end of a forward,
    # in offset order: first fit decreasing, at offsets rounded up to 4
    bins = idle_pieces
    n_w = [m.tensors[ly.weight].numel for ly in trained]
    n_c = [m.tensors[ly.bias].numel for ly in trained]
    # batch 1, plain SGD: each layer steps during backward through a float32 window of whole
    # output channels, at most 2048 weights (one channel at least), placed with the errors
    per = [min(c, max(1, 2048 // (w // c))) for w, c in zip(n_w, n_c, strict=True)]
    window = 4 * max(cc * (w // c) for cc, w, c in zip(per, n_w, n_c, strict=True)) if now else 0
    # SGD momentum at batch 1 (sums left to the Trainer): the momentum of every trained layer but
    # the lowest is copied before backward folds into it (a failed step puts it back), placed
    # like the window
    copy = moments == 1 and batch == 1 and "--sparse" not in opts and "--no-sums" not in opts
    if copy:
        window = 4 * sum(w + c for w, c in zip(n_w[1:], n_c[1:], strict=True))
    items = [("scratch", scratch)] if scratch else []
    if window:
        items.append(("window", window))
    for ly in tail:
        if ly.output not in inplace:
            items += [("error", numel[ly.output])] * (3 if fan_out[ly.output] > 1 else 1)
    fill = [0] * len(bins)
    new = {"scratch": 0, "error": 0, "window": 0}
    hosted = 0
    for kind, n in sorted(items, key=lambda it: -it[1]):  # (a stable sort: ties in item order)
        b = next((k for k in range(len(bins)) if -(-fill[k] // 4) * 4 + n <= bins[k]), None)
        if b is None:
            new[kind] += n
        else:
            fill[b] = -(-fill[b] // 4) * 4 + n
            hosted += n
            lent = lent or kind == "scratch"
    # a scratch nothing holds goes into a pooled conv output that its conv makes again before
    # the pool's backward, when every scratch user comes after that pool (--recompute)
    users = [j for j, ly in enumerate(tail, first) if uses_scratch(ly)]
    readers = {ly.inputs[0]: j for j, ly in enumerate(tail, first)}
    if new["scratch"] and "--recompute" in opts and any(readers[t] < users[0] and numel[t] >= new["scratch"]
                                                        for t in pooled):
        hosted += new["scratch"]
        new["scratch"] = 0
        lent = True
    errors, scratch = new["error"], new["scratch"]
    n_params = [w + c for w, c in zip(n_w, n_c, strict=True)]
    state = 4 * sum(n_params)
    # SGD momentum at batch 1, or a larger batch with --no-sums (Trainer(sums=False): each gradient
    # / batch): the device adds each gradient into the momentum, no sums; plain SGD at batch 1:
    # the window (when not hosted), its bias and row (2 floats per window channel), the zero /
    # ones masks (2 B per channel of the widest layer, 256 at least), a mask per layer with more
    # than one window
    fold = moments == 1 and (batch == 1 or "--no-sums" in opts) and "--sparse" not in opts
    grads = (new["window"] if copy else 0) if fold else state
    if now:
        grads = new["window"] + 8 * max(per) + 2 * max(max(n_c), 256) + sum(
            c for cc, c in zip(per, n_c, strict=True) if cc < c)
    master = 4 * (sum(n_params) if mode == "float32" else n_params[-1] if mode == "mixed" else 0)
    # int8 w; int32 bias, mult, shift, ratio and float32 scale per channel; the optimiser's
    # update row (float32, the widest layer's channels, twice folded into the momentum; none
    # when the layers step during backward, or where backward's scratch is lent and long enough)
    copies = sum(w + c * (4 + 4 + 4 + 4 + 4) for w, c in zip(n_w, n_c, strict=True))
    copies -= 4 * n_c[0]  # (the first trained layer's grad input never runs: no ratios)
    row = 0 if now else max(n_c) * (2 if fold else 1)
    if not (lent and max(scratch_values, default=0) >= row):
        copies += 4 * row
    out.update(forward=forward, errors=errors, scratch=scratch,
               grads=grads, optimizer_state=moments * state, master=master, copies=copies,
               sparse_bytes=(4 + 1) * sum(n_c) if "--sparse" in opts else 0,
               loss=256 * 4 + 3 * 4 + numel[m.output])
    out["total"] = sum(v for k, v in out.items() if k != "inference")
    out["hosted"] = hosted  # in idle forward buffers: no RAM of their own, not in the total
    return out


INFO_CASES = [("cnn", 2, ()), ("cnn", 4, ("--momentum", "--mode", "float32")), ("cnn", 5, ()),
              ("cnn", 3, ("--momentum", "--batch", "4")),
              ("cnn", 3, ("--momentum", "--batch", "4", "--no-sums")),
              ("res", 3, ("--mode", "mixed", "--sparse")), ("res", 1, ("--adam",))]


@pytest.mark.parametrize("name,n_train,extra", INFO_CASES)
def test_info_layers_and_ram(models, name, n_train, extra) -> None:  # type: ignore[no-untyped-def]
    path = models[name]
    m = mtm.load(path)
    args = ("info", str(path), "--train-last", str(n_train), *extra)
    r, text = microtrain_all([*args, "--json"], args)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    sim = _simulate_ram(m, n_train, extra)
    assert rep["inference_activations"] == sim["inference"]
    for k, v in sim.items():
        if k != "inference":
            assert rep["train"][k] == v, (k, rep["train"][k], v)
    assert rep["file_bytes"] == path.stat().st_size
    assert [row["name"] for row in rep["layers"]] == [ly.name for ly in m.layers]
    assert [row["fused"] for row in rep["layers"]] == [ly.fused for ly in m.layers]
    assert rep["params"] == sum(t.numel for ly in m.layers for t in
                                (m.tensors[i] for i in (ly.weight, ly.bias) if i is not None))
    assert text.returncode == 0, text.stderr
    for ly in m.layers:
        assert f" {ly.name} " in text.stdout
    assert f"{sim['total']} B" in text.stdout and f"{sim['inference']} B of activations" in text.stdout
    # a plan from the first layers on leaves no gap in its arena that holds an error
    assert sim["hosted"] > 0 or (name, n_train) in (("cnn", 4), ("cnn", 5), ("res", 3))
    assert f"{sim['hosted']} B" in text.stdout
    if (name, n_train) == ("res", 3):  # the residual block is trained: its input feeds two trained layers
        assert sim["errors"] > sum(m.tensors[ly.output].numel for ly in m.layers[1:])


def test_info_refuses_no_sums_where_the_trainer_does(models) -> None:  # type: ignore[no-untyped-def]
    """--no-sums at --batch > 1 folds the batch into SGD momentum: without --momentum, with --adam or
    --sparse the Trainer refuses sums=False, and so does info."""
    base = ("info", str(models["cnn"]), "--train-last", "2", "--batch", "4", "--no-sums")
    runs = microtrain_all([*base], [*base, "--adam"], [*base, "--momentum", "--sparse"])
    for r in runs:
        assert_one_line_error(r, "info", "--no-sums at --batch 4")


DEVICE_RAM = """\
import sys
import microtrain as mt
m = mt.load(sys.argv[1])
print(m.ram(), *[m.ram(int(a)) for a in sys.argv[2:]])
"""


def test_info_activation_ram_equals_the_device_runtime(models, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The device package (in the real micropython) sizes its forward plans like `info` does."""
    script = tmp_path / "ram.py"
    script.write_text(DEVICE_RAM)
    for name, path in models.items():
        m = mtm.load(path)
        weighted = [j for j, ly in enumerate(m.layers) if ly.op in (Op.CONV2D, Op.LINEAR)]
        firsts = [weighted[-n] for n in range(1, len(weighted) + 1)]
        runs = microtrain_all(("run", str(script), str(path), *map(str, firsts)),
                              *[("info", str(path), "--json", "--train-last", str(n))
                                for n in range(1, len(weighted) + 1)])
        assert runs[0].returncode == 0, runs[0].stdout + runs[0].stderr
        device = [int(v) for v in runs[0].stdout.split()]
        reps = [json.loads(r.stdout) for r in runs[1:]]
        host = [reps[0]["inference_activations"]] + [rep["train"]["forward"] for rep in reps]
        print(name, "device", device, "host", host)
        assert device == host, (name, device, host)


def test_info_errors(models, tmp_path) -> None:  # type: ignore[no-untyped-def]
    n_weighted = sum(ly.op in (Op.CONV2D, Op.LINEAR) for ly in mtm.load(models["cnn"]).layers)
    bad = bytearray(models["cnn"].read_bytes())
    bad[100] ^= 0xFF
    (tmp_path / "bad.mtm").write_bytes(bad)
    cases = [
        (("info", str(models["cnn"]), "--train-last", str(n_weighted + 1)), "--train-last"),
        (("info", str(models["cnn"]), "--train-last", "0"), "--train-last"),
        (("info", str(tmp_path / "none.mtm")), "none.mtm"),
        (("info", str(tmp_path / "bad.mtm")), "CRC"),
        (("info", str(models["cnn"]), "--mode", "fp16"), "--mode"),
    ]
    for (_, needle), r in zip(cases, microtrain_all(*[a for a, _ in cases]), strict=True):
        assert_one_line_error(r, "info", needle)


# --------------------------------------------------------------------------
# run


SCRIPT = """\
import sys, gc
print("argv", sys.argv[1:])
print("heap", gc.mem_free() + gc.mem_alloc())
print("path", sys.path[1:3])
if sys.argv[1] == "alloc":
    b = bytearray(int(sys.argv[2]))
import _microtrain
print("native", _microtrain.HAS_FLOAT)
sys.exit(0 if sys.argv[1] == "alloc" else int(sys.argv[-1]))
"""


def test_convert_a_module_from_the_users_folder(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`convert mymodels:Net --state-dict` finds mymodels.py in the current folder (no PYTHONPATH)."""
    (tmp_path / "mymodels.py").write_text(
        "import torch.nn as nn\n\n\nclass Net(nn.Sequential):\n"
        "    def __init__(self):\n        super().__init__(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))\n")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    torch.save(net.state_dict(), tmp_path / "net.pt")
    np.savez(tmp_path / "calib.npz", x=np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32))
    r = microtrain("convert", "mymodels:Net", "--state-dict", "net.pt", "--calib", "calib.npz",
                   "-o", "net.mtm", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    m = mtm.load(tmp_path / "net.mtm")
    assert [ly.op for ly in m.layers] == [Op.LINEAR, Op.LINEAR]
    r = microtrain("convert", "nosuchmodule:Net", "--calib", "calib.npz", "-o", "x.mtm", cwd=tmp_path)
    assert_one_line_error(r, "convert", "cannot import 'nosuchmodule'")
    assert not (tmp_path / "x.mtm").exists()


def test_run_in_host_micropython(tmp_path) -> None:
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    r = microtrain("run", "--heapsize", "256k", str(script), "x", "--flag", "7")
    assert r.returncode == 7, r.stderr
    lines = dict(line.split(" ", 1) for line in r.stdout.strip().splitlines())
    assert lines["argv"] == "['x', '--flag', '7']"
    assert 0.95 * 256 * 1024 < int(lines["heap"]) <= 256 * 1024
    # the package as a board installs it: the natmod and microtrain/*.mpy in one folder
    pkg = board.board_package()
    assert lines["path"] == repr([str(pkg), ".frozen"])
    natmod = ROOT / "build" / "natmod" / "x64" / "_microtrain.mpy"
    assert (pkg / "_microtrain.mpy").read_bytes() == natmod.read_bytes()
    lib = ROOT / "python_lib" / "microtrain"
    mpys = sorted(p.relative_to(pkg / "microtrain").with_suffix(".py")
                  for p in (pkg / "microtrain").rglob("*.mpy"))
    assert mpys == sorted(p.relative_to(lib) for p in lib.rglob("*.py"))
    assert lines["native"] == "True"
    # --source: the natmod folder and the .py sources, with a note that the heap is not a board's
    r = microtrain("run", "--source", "--heapsize", "256k", str(script), "x", "0")
    assert r.returncode == 0, r.stderr
    assert f"path {[str(ROOT / 'build' / 'natmod' / 'x64'), str(ROOT / 'python_lib')]!r}" in r.stdout
    assert "--source compiles the package from .py inside the heap" in r.stderr
    # the heap size is real: 200 kB do not fit in 64 kB
    r = microtrain("run", "--heapsize", "64k", str(script), "alloc", "200000")
    assert r.returncode == 1 and "MemoryError" in r.stdout + r.stderr, (r.returncode, r.stderr)
    r = microtrain("run", str(script), "alloc", "200000")
    assert r.returncode == 0, r.stderr
    # --pure: no native module on the path (a _microtrain built into the binary stays importable)
    r = microtrain("run", "--pure", str(script), "0")
    if binary_has_builtin_microtrain():
        assert r.returncode == 0 and "native True" in r.stdout, (r.returncode, r.stdout, r.stderr)
    else:
        assert r.returncode == 1 and "ImportError" in r.stdout + r.stderr, r.stderr
    assert f"path {[str(board.board_package().parent / 'pure'), '.frozen']!r}" in r.stdout
    # MICROTRAIN_MICROPYTHON selects the binary
    env = dict(os.environ, MICROTRAIN_MICROPYTHON=str(tmp_path / "nope"))
    assert_one_line_error(microtrain("run", str(script), env=env), "run", "MICROTRAIN_MICROPYTHON")
    env["MICROTRAIN_MICROPYTHON"] = tool_path("micropython")
    assert microtrain("run", str(script), "3", env=env).returncode == 3
    assert_one_line_error(microtrain("run", str(tmp_path / "missing.py")), "run", "missing.py")
    assert_one_line_error(microtrain("run", "--heapsize", "lots", str(script)), "run", "--heapsize")


# --------------------------------------------------------------------------
# deploy


@pytest.fixture()
def dist(tmp_path) -> Path:  # type: ignore[no-untyped-def]
    """A dist folder with the layout of `make dist`: the real armv6m natmod and a compiled package."""
    d = tmp_path / "dist" / "armv6m_6.3"
    (d / "microtrain").mkdir(parents=True)
    natmod = ROOT / "build" / "natmod" / "armv6m" / "_microtrain.mpy"
    assert natmod.is_file(), "make natmod ARCH=armv6m first"
    shutil.copy(natmod, d / "_microtrain.mpy")
    src = tmp_path / "__init__.py"
    src.write_text("NATIVE = False\n")
    subprocess.run([tool_path("mpy-cross"), "-o", str(d / "microtrain" / "__init__.mpy"), str(src)],
                   check=True)
    (d / "package.json").write_text(json.dumps({"urls": [["_microtrain.mpy", "_microtrain.mpy"]],
                                                "version": "0.1.0"}))
    return d


def _lines(out: str) -> list[list[str]]:
    return [shlex.split(line) for line in out.strip().splitlines()]


def test_deploy_dry_run_commands(models, dist, tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "main.py"
    script.write_text("import microtrain\n")
    model = models["cnn"]
    r = microtrain("deploy", "--port", "/dev/ttyACM0", "--arch", "armv6m", "--dist", str(dist), "--model",
                   str(model), "--script", str(script), "--dry-run")
    assert r.returncode == 0, r.stderr
    mp = [tool_path("mpremote"), "connect", "/dev/ttyACM0"]
    got = _lines(r.stdout)
    # the natmod of the model's ops only (its layers: conv2d, maxpool, avgpool, linear), built first
    ops = "conv2d+linear+maxpool+avgpool"
    assert got[:6] == [
        ["make", "-C", str(ROOT), "--no-print-directory", "natmod", "ARCH=armv6m", f"OPS={ops}"],
        [*mp, "exec", 'import os;"lib" in os.listdir("/") or os.mkdir("/lib")'],
        [*mp, "fs", "cp", "-r", str(dist / "microtrain"), ":/lib/"],
        [*mp, "fs", "cp", str(ROOT / "build" / "natmod" / f"armv6m-{ops}" / "_microtrain.mpy"),
         ":/lib/_microtrain.mpy"],
        [*mp, "fs", "cp", str(model), ":/cnn.mtm"],
        [*mp, "fs", "cp", str(script), ":/main.py"],
    ]
    assert len(got) == 7 and got[6][:4] == [*mp, "exec"] and got[6][4].startswith("import microtrain;")
    # --ops all: the dist folder's natmod, every op
    r = microtrain("deploy", "--port", "/dev/ttyACM0", "--arch", "armv6m", "--dist", str(dist), "--model",
                   str(model), "--ops", "all", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert _lines(r.stdout)[2] == [*mp, "fs", "cp", str(dist / "_microtrain.mpy"), ":/lib/_microtrain.mpy"]
    # the generated board code is valid MicroPython: run the mkdir line twice in the host micropython
    board = tmp_path / "board"
    board.mkdir()
    r = microtrain("deploy", "--port", "p", "--arch", "armv6m", "--dist", str(dist), "--lib", f"{board}/lib",
                   "--dry-run")
    code = _lines(r.stdout)[0][-1]
    for _ in range(2):
        run = subprocess.run([tool_path("micropython"), "-c", code], capture_output=True, text=True,
                             timeout=60, check=False)
        assert run.returncode == 0 and (board / "lib").is_dir(), run.stdout + run.stderr
    # pyboard-style filesystem, no verification, package only
    r = microtrain("deploy", "--port", "/dev/ttyUSB1", "--arch", "armv6m", "--dist", str(dist), "--lib",
                   "/flash/lib", "--root", "/flash", "--script", str(script), "--no-verify", "--dry-run")
    assert r.returncode == 0, r.stderr
    mp = [tool_path("mpremote"), "connect", "/dev/ttyUSB1"]
    assert _lines(r.stdout) == [
        [*mp, "exec", 'import os;"lib" in os.listdir("/flash") or os.mkdir("/flash/lib")'],
        [*mp, "fs", "cp", "-r", str(dist / "microtrain"), ":/flash/lib/"],
        [*mp, "fs", "cp", str(dist / "_microtrain.mpy"), ":/flash/lib/_microtrain.mpy"],
        [*mp, "fs", "cp", str(script), ":/flash/main.py"],
    ]
    # a firmware with microtrain built in (--builtin): the model and the script only, then the check
    r = microtrain("deploy", "--port", "/dev/ttyACM0", "--builtin", "--model", str(model), "--script",
                   str(script), "--dry-run")
    assert r.returncode == 0, r.stderr
    got = [c[1:] for c in _lines(r.stdout)]  # without mpremote's path
    assert got[:2] == [["connect", "/dev/ttyACM0", "fs", "cp", str(model), ":/cnn.mtm"],
                       ["connect", "/dev/ttyACM0", "fs", "cp", str(script), ":/main.py"]]
    assert len(got) == 3 and got[2][2] == "exec" and got[2][3].startswith("import microtrain;")


def test_deploy_argument_errors(models, dist, tmp_path) -> None:  # type: ignore[no-untyped-def]
    base = ["deploy", "--arch", "armv6m", "--dist", str(dist), "--dry-run"]
    notmodel = tmp_path / "x.mtm"
    notmodel.write_bytes(b"\0" * 200)
    (tmp_path / "empty").mkdir()
    cases = [
        ([*base], "--port"),
        (["deploy", "--port", "/dev/ttyACM0", "--arch", "xtensawin", "--dry-run"], "--arch"),
        ([*base, "--port", "p", "--model", str(tmp_path / "gone.mtm")], "gone.mtm"),
        ([*base, "--port", "p", "--model", str(notmodel)], "not a valid .mtm file"),
        ([*base, "--port", "p", "--script", str(models["cnn"])], "expected a .py file"),
        (["deploy", "--port", "p", "--dist", str(tmp_path / "empty"), "--dry-run"], "not a microtrain dist"),
        ([*base, "--port", "p", "--lib", "lib"], "--lib"),
        ([*base, "--port", "p", "--ops", "conv2d,conv3d"], "unknown op 'conv3d'"),
    ]
    for (_, needle), r in zip(cases, microtrain_all(*[argv for argv, _ in cases]), strict=True):
        assert_one_line_error(r, "deploy", needle)
        assert r.stdout == ""


# --------------------------------------------------------------------------
# flash

# MicroPython's ESP32 deploy instructions: firmware at 0x1000 on esp32 / esp32s2, 0x0 on the others.
ESP_OFFSETS = {"esp32": "0x1000", "esp32s2": "0x1000", "esp32s3": "0x0", "esp32c3": "0x0", "esp32c6": "0x0"}


def test_flash_dry_run_commands(tmp_path) -> None:
    fw = tmp_path / "fw.bin"
    fw.write_bytes(b"\xe9" + bytes(255))
    esptool = tool_path("esptool")
    results = microtrain_all(*[("flash", "--chip", chip, "--port", "/dev/ttyUSB0", str(fw), "--dry-run")
                               for chip in ESP_OFFSETS])
    for (chip, off), r in zip(ESP_OFFSETS.items(), results, strict=True):
        assert r.returncode == 0, r.stderr
        assert _lines(r.stdout) == [[esptool, "--chip", chip, "--port", "/dev/ttyUSB0", "--baud", "460800",
                                     "write-flash", "-z", off, str(fw)]]
    r = microtrain("flash", "--chip", "esp32s2", "--port", "COM3", "--baud", "115200", "--erase", str(fw),
                   "--dry-run")
    assert _lines(r.stdout) == [
        [esptool, "--chip", "esp32s2", "--port", "COM3", "erase-flash"],
        [esptool, "--chip", "esp32s2", "--port", "COM3", "--baud", "115200", "write-flash", "-z", "0x1000",
         str(fw)],
    ]
    # the installed esptool accepts this command line (global options, then write-flash)
    chk = subprocess.run([esptool, "--chip", "esp32c6", "--port", "/dev/null", "--baud", "460800",
                          "write-flash", "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert chk.returncode == 0 and "-z" in chk.stdout, chk.stdout + chk.stderr
    uf2 = tmp_path / "RPI_PICO.uf2"
    uf2.write_bytes(b"UF2\n" + bytes(508))
    drive = tmp_path / "RPI-RP2"
    drive.mkdir()
    r = microtrain("flash", "--chip", "rp2", "--drive", str(drive), str(uf2), "--dry-run")
    assert _lines(r.stdout) == [["cp", str(uf2), f"{drive}/"], ["sync"]]
    r = microtrain("flash", "--chip", "rp2", "--drive", str(drive), str(uf2))  # really copies it
    assert r.returncode == 0 and (drive / uf2.name).read_bytes() == uf2.read_bytes(), r.stderr
    dfu = tmp_path / "PYBV11.dfu"
    dfu.write_bytes(b"DfuSe" + bytes(100))
    r = microtrain("flash", "--chip", "stm32", str(dfu), "--dry-run")
    assert _lines(r.stdout) == [[tool_path("dfu-util"), "--alt", "0", "-D", str(dfu)]]


def test_flash_argument_errors(tmp_path) -> None:
    fw = tmp_path / "fw.bin"
    fw.write_bytes(bytes(64))
    uf2 = tmp_path / "fw.uf2"
    uf2.write_bytes(bytes(64))
    cases = [
        (["--chip", "esp32", str(fw)], "--port"),
        (["--chip", "esp32", "--port", "p", str(tmp_path / "none.bin")], "none.bin"),
        (["--chip", "esp32s3", "--port", "p", str(uf2)], ".bin"),
        (["--chip", "rp2", str(uf2)], "--drive"),
        (["--chip", "rp2", "--drive", str(tmp_path / "nodrive"), str(uf2)], "nodrive"),
        (["--chip", "rp2", "--drive", str(tmp_path), "--erase", str(uf2)], "--erase"),
        (["--chip", "esp8266", "--port", "p", str(fw)], "--chip"),
        (["--chip", "esp32", "--port", "p", "--baud", "fast", str(fw)], "--baud"),
    ]
    results = microtrain_all(*[["flash", *argv, "--dry-run"] for argv, _ in cases])
    for (_, needle), r in zip(cases, results, strict=True):
        assert_one_line_error(r, "flash", needle)
        assert r.stdout == ""


# --------------------------------------------------------------------------
# plot


def _training_log(path: Path) -> dict[str, object]:
    """Train a softmax regression on real digits with numpy SGD; log as the device Trainer does."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float64)
    y = d.target
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    tr, te = idx[:1200], idx[1200:]
    w = np.zeros((64, 10))
    b = np.zeros(10)
    recs: list[dict[str, object]] = [{"kind": "config", "lr": 0.1, "batch": 16, "classes":
                                      [f"digit {i}" for i in range(10)]}]
    step = 0
    for epoch in range(3):
        losses = []
        for start in range(0, len(tr), 16):
            bi = tr[start:start + 16]
            z = x[bi] @ w + b
            p = np.exp(z - z.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            loss = float(-np.log(p[np.arange(len(bi)), y[bi]]).mean())
            g = p
            g[np.arange(len(bi)), y[bi]] -= 1
            w -= 0.1 * x[bi].T @ g / len(bi)
            b -= 0.1 * g.mean(0)
            step += 1
            losses.append(loss)
            recs.append({"kind": "step", "step": step, "epoch": epoch, "loss": loss, "lr": 0.1,
                         "t_ms": step * 3, "heap": 40000})
        acc_tr = float(((x[tr] @ w + b).argmax(1) == y[tr]).mean())
        recs.append({"kind": "epoch", "epoch": epoch, "loss": float(np.mean(losses)), "acc": acc_tr,
                     "lr": 0.1, "t_ms": step * 3, "heap": 40000, "heap_peak": 52000})
        pred = (x[te] @ w + b).argmax(1)
        cm = np.zeros((10, 10), dtype=int)
        np.add.at(cm, (y[te], pred), 1)
        z = x[te] @ w + b
        lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
        eval_loss = float((lse - z[np.arange(len(te)), y[te]]).mean())
        recs.append({"kind": "eval", "epoch": epoch, "loss": eval_loss, "acc": float((pred == y[te]).mean()),
                     "n": len(te), "confusion": cm.tolist()})
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return recs[-1]


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", path
    w, h = struct.unpack(">II", data[16:24])
    return w, h


def test_plot_curves_and_confusion(tmp_path) -> None:
    import matplotlib.image as mpimg

    log = tmp_path / "log.jsonl"
    last_eval = _training_log(log)
    assert isinstance(last_eval["acc"], float) and last_eval["acc"] > 0.85  # the regression learned
    curves, cm = tmp_path / "curves.png", tmp_path / "cm.png"
    r = microtrain("plot", str(log), "-o", str(curves), "--confusion", str(cm), "--title", "digits")
    assert r.returncode == 0, r.stderr
    for p in (curves, cm):
        w, h = _png_size(p)
        assert w >= 300 and h >= 300 and p.stat().st_size > 1000
        img = mpimg.imread(p)  # decodes: a real PNG, and something was drawn on it
        assert img.shape[:2] == (h, w) and float(img[..., :3].std()) > 0.02
    assert _png_size(curves)[0] > _png_size(curves)[1]  # three panels side by side
    # errors: a malformed line (named), a log without confusion matrices, a missing file
    bad = tmp_path / "bad.jsonl"
    bad.write_text(log.read_text().splitlines()[0] + "\n{oops\n")
    assert_one_line_error(microtrain("plot", str(bad), "-o", str(tmp_path / "b.png")), "plot", "bad.jsonl:2")
    no_cm = tmp_path / "nocm.jsonl"
    no_cm.write_text("\n".join(line for line in log.read_text().splitlines() if '"eval"' not in line))
    r = microtrain("plot", str(no_cm), "-o", str(tmp_path / "c.png"), "--confusion", str(tmp_path / "d.png"))
    assert_one_line_error(r, "plot", "confusion")
    assert not (tmp_path / "c.png").exists()
    r = microtrain("plot", str(tmp_path / "none.jsonl"), "-o", str(curves))
    assert_one_line_error(r, "plot", "none.jsonl")
    bad.write_text('{"kind": "step", "step": 1}\n')
    assert_one_line_error(microtrain("plot", str(bad), "-o", str(tmp_path / "e.png")), "plot", '"loss"')
    assert math.isfinite(float(last_eval["loss"]))  # type: ignore[arg-type]
