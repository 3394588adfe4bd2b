"""The documentation runs, and the type stubs match the device package.

docs/getting-started.md: the blocks marked ``<!-- run: host -->`` (CPython, the venv's
python), ``<!-- run: sh -->`` (bash, with .venv/bin first on PATH) and
``<!-- run: device -->`` (the host micropython, MICROPYPATH=build/natmod/x64:python_lib) run
in document order in an empty folder; ``<!-- file: NAME -->`` writes the block to NAME. They
train the PyTorch model, convert it with ``microtrain convert``, write the .mtd files and
train on the "device" with ``microtrain run``.

docs/repl.md: every ```python block runs, in order, as one MicroPython session in a copy of
that folder.

In both pages ``<!-- check: NAME -->`` before a block means: the values the block prints
are compared with an independent host computation (the numpy kernel oracle
``convert.run_mtm``, the numpy training reference ``train_ref.RefTrainer``, float softmax
cross-entropy), see the ``_check_*`` functions. ``<!-- output -->`` before a ```text block
means: it is the previous block's real output, compared with every float literal masked
(integers, reprs, field names and layout must not drift; the docs' model is trained seeded
on one thread).

stubs/: every .pyi parses; ``stubs/microtrain`` lists exactly the names ``dir(microtrain)``
shows in micropython (and each submodule the names it defines), each stubbed class the
public members of a real instance, each signature the one in python_lib; ``_microtrain.pyi``
lists exactly ``dir(_microtrain)``, with the argument names of docs/numerics.md's binding
table and of the pure-Python kernels.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from microtrain_tools import convert, mtm
from microtrain_tools.reference import adapt_ref as ar
from microtrain_tools.reference import train_ref as tr
from support.harness import (
    MICROPYTHON,
    NATMOD_X64,
    PYTHON_LIB,
    ROOT,
    binary_has_builtin_microtrain,
    ensure_natmod,
    run_micropython,
)

DOCS = ROOT / "docs"
STUBS = ROOT / "stubs"
PKG_SRC = PYTHON_LIB / "microtrain"
VENV_BIN = Path(sys.executable).parent  # microtrain, python (MICROPYTHON may be another binary)
SEP = "@@docs-block@@"

# --------------------------------------------------------------------------
# markdown blocks

_MARK = re.compile(r"<!--\s*(?:(run|file|check):\s*(\S+)|(output))\s*-->")
_FENCE = re.compile(r"^```(\w*)\s*$")
# a float literal (what the float formatting of a port may print differently); integers stay
_FLOAT = re.compile(r"-?\d+(?:\.\d+(?:e[-+]?\d+)?|e[-+]?\d+)")
_NUM = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")  # any number, for parsing printed values


@dataclass
class Block:
    doc: str
    line: int
    lang: str
    code: str
    run: str | None = None  # "host", "sh" or "device"
    file: str | None = None
    check: str | None = None
    output: str | None = None  # the <!-- output --> text block that follows

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def parse_blocks(path: Path) -> list[Block]:
    """Fenced blocks with the markers on the lines right before them."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    marks: dict[str, str] = {}
    i = 0
    while i < len(lines):
        text = lines[i].strip()
        mk = _MARK.fullmatch(text)
        fence = _FENCE.match(lines[i])
        if mk:
            if mk.group(3):
                marks["output"] = ""
            else:
                marks[mk.group(1)] = mk.group(2)
        elif fence:
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            code = "\n".join(lines[i + 1:j]) + "\n"
            if "output" in marks:
                assert blocks, f"{path.name}:{i + 1}: an output block needs a block before it"
                blocks[-1].output = code
            else:
                blocks.append(Block(path.name, i + 1, fence.group(1), code, marks.get("run"),
                                    marks.get("file"), marks.get("check")))
            marks = {}
            i = j
        elif text:
            marks = {}  # markers belong to the fence right after them
        i += 1
    return blocks


def masked(text: str) -> list[list[str]]:
    """Lines split into words with every float literal replaced by '#'; integers compared as they are.

    The docs' model is trained seeded on one PyTorch thread, so sizes, shapes, counts and int8
    values are reproducible; the floats are checked by the ``check:`` functions instead."""
    return [_FLOAT.sub("#", ln).split() for ln in text.strip().splitlines()]


def output_mismatch(block: Block, out: str) -> str:
    """'' when the doc's output block shows what the block printed (float literals masked)."""
    if block.output is None or masked(block.output) == masked(out):
        return ""
    return (f"{block.where}: the output shown in the doc is not what the block prints "
            f"(float literals masked)\n--- doc ---\n{block.output}--- real ---\n{out}")


def run_session(blocks: list[Block], cwd: Path) -> list[str]:
    """Run the blocks as one MicroPython session; return each block's printed output."""
    parts = [f'print("{SEP}")\n{b.code}' for b in blocks]
    script = cwd / "_docs_session.py"
    script.write_text("\n".join(parts) + f'print("{SEP}")\n')
    proc = run_micropython(script, cwd=cwd, timeout=300)
    chunks = proc.stdout.split(SEP + "\n")[1:]
    if proc.returncode != 0 or len(chunks) != len(blocks) + 1:
        k = max(0, len(chunks) - 1)
        where = blocks[min(k, len(blocks) - 1)].where
        raise AssertionError(f"{where}: block failed (exit {proc.returncode})\n{proc.stdout[-2000:]}"
                             f"\n{proc.stderr[-3000:]}")
    return chunks[:-1]


def _run(cmd: list[str], block: Block, cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False,
                          stdin=subprocess.DEVNULL)  # a REPL line ends at end of input
    if proc.returncode != 0:
        raise AssertionError(f"{block.where}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n"
                             f"{proc.stderr[-3000:]}")
    return proc.stdout


# --------------------------------------------------------------------------
# independent references


def read_mtd(path: Path) -> tuple[NDArray[np.int8], NDArray[np.int64]]:
    """A .mtd file as (x (n, numel) int8, labels), from the layout of docs/api.md."""
    b = path.read_bytes()
    assert b[:4] == b"MTDS"
    n, numel, zero = struct.unpack_from("<III", b, 4)
    assert zero == 0 and len(b) == 16 + n * (1 + numel)
    rec = np.frombuffer(b, dtype=np.uint8, offset=16).reshape(n, 1 + numel)
    return rec[:, 1:].view(np.int8), rec[:, 0].astype(np.int64)


def floats(text: str) -> list[float]:
    return [float(v) for v in _NUM.findall(text)]


def parse_array(line: str) -> list[float]:
    """The values of a printed list / array('x', [...])."""
    m = re.search(r"\[([^\]]*)\]", line)
    assert m, f"no list in {line!r}"
    return [float(v) for v in m.group(1).split(",") if v.strip()]


@dataclass
class Ctx:
    """The folder a doc ran in, its data, and the (cached) references."""

    work: Path
    model: bytes = b""
    xte: NDArray[np.int8] = field(default_factory=lambda: np.zeros((0, 0), np.int8))
    yte: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    xtr: NDArray[np.int8] = field(default_factory=lambda: np.zeros((0, 0), np.int8))
    ytr: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    outputs: dict[str, str] = field(default_factory=dict)

    def load(self) -> None:
        self.model = (self.work / "digits.mtm").read_bytes()
        self.xte, self.yte = read_mtd(self.work / "digits_test.mtd")
        self.xtr, self.ytr = read_mtd(self.work / "digits_train.mtd")

    def acc(self, model: bytes) -> float:
        """Test accuracy from the oracle (argmax: first maximum, as on the device)."""
        out = convert.run_mtm(model, self.xte)
        return float((out.argmax(axis=1) == self.yte).mean())

    def ref(self, train: str, epochs: int, sparse: tr.Policy | None = None,
            start: bytes | None = None) -> tr.RefTrainer:
        """The numpy reference of the doc's Trainer: SGD(0.005, momentum 0.9), batch 8, mixed."""
        r = tr.RefTrainer(mtm.read(start if start is not None else self.model), train=train, mode="mixed",
                          optimizer=tr.SGD(lr=0.005, momentum=0.9), sparse=sparse, batch=8)
        # a resumed Trainer continues the checkpoint's shuffle sequence (trainer record)
        r.fit(list(self.xtr), list(self.ytr), epochs=epochs, seed=None if start is not None else 1)
        return r


_REF_CACHE: dict[tuple[bytes, bytes, int], bytes] = {}


def ref_last2(ctx: Ctx, epochs: int) -> bytes:
    """Reference checkpoint of the docs' Trainer run (main.py in getting-started.md and the
    Trainer of repl.md: same model, data and settings, so computed once)."""
    key = (ctx.model, ctx.xtr.tobytes(), epochs)
    if key not in _REF_CACHE:
        _REF_CACHE[key] = mtm.write(ctx.ref("last:2", epochs).checkpoint())
    return _REF_CACHE[key]


def softmax(z: NDArray[np.float64]) -> NDArray[np.float64]:
    e = np.exp(z - z.max())
    return e / e.sum()


def real_logits(model: bytes, q: NDArray[np.int8]) -> NDArray[np.float64]:
    m = mtm.read(model)
    t = m.tensors[m.output]
    return t.scale * (q.astype(np.float64) - t.zero_point)


# --------------------------------------------------------------------------
# checks of printed values (getting-started.md)


def _check_first_import(ctx: Ctx, out: str) -> None:
    lines = out.splitlines()
    assert lines[0] == "True", "microtrain.NATIVE must be True with the x64 natmod on the path"
    m = mtm.read(ctx.model)
    rows = [ln.split() for ln in lines if ln[:1].isdigit()]
    assert [(r[1], int(r[-1])) for r in rows] == [
        (ly.name, sum(m.tensors[t].numel for t in (ly.weight, ly.bias) if t is not None)) for ly in m.layers]


def _mpy_arch(path: Path) -> int:
    head = path.read_bytes()[:4]
    assert head[:2] == b"M\x06", f"{path}: not a version 6 .mpy"
    return head[2] >> 2


def _check_arch(ctx: Ctx, out: str) -> None:
    # a binary with _microtrain built in (e.g. the host twin, no native emitter) needs no natmod:
    # its arch number need not be x64's; the table below is still checked
    if not binary_has_builtin_microtrain():
        assert int(out.strip()) == _mpy_arch(NATMOD_X64 / "_microtrain.mpy")
    # the doc's table: every arch built here has the number its natmod header carries
    rows = dict(re.findall(r"^\| (\d+) \| (\w+) \|", (DOCS / "getting-started.md").read_text(), re.M))
    table = {arch: int(n) for n, arch in rows.items()}
    checked = 0
    for arch, n in table.items():
        mpy = ROOT / "build" / "natmod" / arch / "_microtrain.mpy"
        if mpy.exists():
            assert _mpy_arch(mpy) == n, f"getting-started.md table: {arch} is {_mpy_arch(mpy)}, not {n}"
            checked += 1
    assert checked >= 1 and "x64" in table


def _check_train(ctx: Ctx, out: str) -> None:
    before = float(re.search(r"accuracy before: ([\d.]+)", out).group(1))  # type: ignore[union-attr]
    after = float(re.search(r"accuracy after: +([\d.]+)", out).group(1))  # type: ignore[union-attr]
    trained = (ctx.work / "digits_trained.mtm").read_bytes()
    assert trained == ref_last2(ctx, 2), "device checkpoint differs from the training reference"
    assert before == pytest.approx(ctx.acc(ctx.model), abs=5e-5)
    assert after == pytest.approx(ctx.acc(trained), abs=5e-5)
    for png in ("curves.png", "confusion.png"):
        assert (ctx.work / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------
# checks of printed values (repl.md)


def _check_fc2(ctx: Ctx, out: str) -> None:
    m = mtm.read(ctx.model)
    j = [ly.name for ly in m.layers].index("fc2")
    ly = m.layers[j]
    assert ly.weight is not None and ly.bias is not None
    w = m.data(ly.weight).reshape(-1)
    lines = out.splitlines()
    assert lines[0].split() == ["fc2", str(int(ly.op)), "linear", str(j), str(ly.params[1]),
                                str(w.size + m.data(ly.bias).size), "False"]
    assert parse_array(lines[3]) == [float(v) for v in w[:8]]
    assert parse_array(lines[4]) == [float(v) for v in ly.params]
    qs = m.tensors[ly.weight].qscales
    expect = [float(m.data(qs)[0]), m.tensors[ly.inputs[0]].scale, m.tensors[ly.output].scale]
    assert floats(lines[5]) == pytest.approx(expect, rel=1e-12)


def _check_forward(ctx: Ctx, out: str) -> None:
    lines = out.splitlines()
    q = convert.run_mtm(ctx.model, ctx.xte[0])
    assert parse_array(lines[1]) == [float(v) for v in q]
    assert lines[2].split() == ["predicted", str(int(q.argmax())), "label", str(int(ctx.yte[0]))]
    assert parse_array(lines[3]) == pytest.approx(real_logits(ctx.model, q), abs=0.0051)


def _check_accuracy(ctx: Ctx, out: str) -> None:
    assert floats(out)[-1] == pytest.approx(ctx.acc(ctx.model), abs=1e-12)


def _check_quantize(ctx: Ctx, out: str) -> None:
    img = np.zeros((1, 1, 8, 8), dtype=np.float32)  # the doc's "1": rows 1..6, columns 3 and 4
    img[0, 0, 1:7, 3:5] = 1.0
    q = convert.quantize_input(ctx.model, img)[0]
    lines = out.splitlines()
    assert parse_array(lines[0]) == [float(v) for v in q]
    assert lines[1] == f"predicted {int(convert.run_mtm(ctx.model, q).argmax())}"


def _check_loss(ctx: Ctx, out: str) -> None:
    lines = out.splitlines()
    label, loss, scale = floats(lines[1])
    assert label == ctx.ytr[0]
    z = real_logits(ctx.model, convert.run_mtm(ctx.model, ctx.xtr[0]))
    p = softmax(z)
    assert loss == pytest.approx(float(np.log(np.exp(z - z.max()).sum()) + z.max() - z[int(label)]), abs=1e-4)
    err = np.array(parse_array(lines[2]))
    onehot = np.eye(len(p))[int(label)]
    assert np.abs(scale * err - (p - onehot)).max() <= scale / 2 + 1e-4  # int8 error of dL/dlogits
    ctx.outputs["err"] = lines[2]
    ctx.outputs["loss_line"] = lines[1]
    ctx.outputs["err_scale"] = repr(scale)


def _check_gradients(ctx: Ctx, out: str) -> None:
    lines = out.splitlines()
    gb = np.array(parse_array(lines[0]))
    err = np.array(parse_array(ctx.outputs["err"]))
    assert gb.tolist() == (float(ctx.outputs["err_scale"]) * err).tolist()  # dL/db = s_e * e
    # dL/dW = e x (real input of fc2), from the reference forward
    m = mtm.read(ctx.model)
    ly = m.layer("fc2")
    acts = tr.RefTrainer(m, train="last:1").forward(ctx.xtr[0])
    t_in = m.tensors[ly.inputs[0]]
    x_real = t_in.scale * (acts[ly.inputs[0]].astype(np.float64) - t_in.zero_point)
    gw = np.outer(gb, x_real)
    n, lo, hi = floats(lines[1])
    assert n == gw.size
    assert (lo, hi) == pytest.approx((gw.min(), gw.max()), rel=1e-6)


def _check_one_step(ctx: Ctx, out: str) -> None:
    lines = out.splitlines()
    assert parse_array(lines[0]) == [0.0] * 10
    saved = mtm.read((ctx.work / "digits_1step.mtm").read_bytes())
    ref = tr.RefTrainer(mtm.read(ctx.model), train="last:1", mode="int8", optimizer=tr.SGD(lr=0.05))
    ref.step(ctx.xtr[0], int(ctx.ytr[0]))
    ref.flush()
    want = ref.checkpoint(state=False)
    assert [t.data.tobytes() if t.data is not None else None for t in saved.tensors] == \
        [t.data.tobytes() if t.data is not None else None for t in want.tensors], \
        "the hand-made step differs from the training reference"
    loss, loss2 = floats(lines[1])
    z = real_logits(ctx.model, convert.run_mtm(mtm.write(want), ctx.xtr[0]))
    assert loss2 == pytest.approx(float(np.log(np.exp(z - z.max()).sum()) + z.max() - z[int(ctx.ytr[0])]),
                                  abs=1e-4)
    assert loss == pytest.approx(float(floats(ctx.outputs["loss_line"])[1]), abs=1e-15)


def _check_trainer(ctx: Ctx, out: str) -> None:
    before = floats(re.search(r"^before .*$", out, re.M).group(0))[0]  # type: ignore[union-attr]
    after = floats(re.search(r"^after .*$", out, re.M).group(0))[0]  # type: ignore[union-attr]
    assert before == pytest.approx(ctx.acc(ctx.model), abs=1e-12)
    assert after == pytest.approx(ctx.acc(ref_last2(ctx, 2)), abs=1e-12)


class _CountingDynamic(tr.DynamicSparse):
    """The reference policy, counting kept / seen channels like the device's."""

    kept = 0
    seen = 0

    def mask(self, name: str, e: NDArray[np.int8], c: int,
             is_output: bool = False) -> NDArray[np.uint8] | None:
        mk = super().mask(name, e, c, is_output)
        self.seen += c
        self.kept += c if mk is None else int(mk.sum())
        return mk


def _check_dynamic(ctx: Ctx, out: str) -> None:
    pol = _CountingDynamic(0.25)
    ref = ctx.ref("all", 1, sparse=pol)
    want = mtm.write(ref.checkpoint())
    assert (ctx.work / "digits_sparse.mtm").read_bytes() == want, "sparse run differs from the reference"
    lines = out.splitlines()
    assert floats(lines[0].split("kept")[1])[0] == pytest.approx(pol.kept / pol.seen, abs=5e-4)
    assert floats(lines[1])[0] == pytest.approx(ctx.acc(want), abs=1e-12)


def _check_static(ctx: Ctx, out: str) -> None:
    m = mtm.read(ctx.model)
    ratio = {"conv": 0.5, "fc1": 0.25}
    kept = seen = 0
    for ly in m.layers:
        if ly.weight is None:
            continue
        c = m.tensors[ly.weight].shape[0]
        seen += c
        kept += c if ly.output == m.output else math.ceil(ratio.get(ly.name, 1.0) * c)
    assert floats(out) == [20 * kept, 20 * seen]


def _check_checkpoint(ctx: Ctx, out: str) -> None:
    ck = (ctx.work / "digits_ck.mtm").read_bytes()
    assert ck == ref_last2(ctx, 2)
    m = mtm.read(ck)
    lines = out.splitlines()
    assert floats(lines[0]) == [m.train_steps, int(m.trained) | 2 * int(m.has_state),
                                *[int(ly.trained) for ly in m.layers]]
    last = m.tensors[-1]
    assert lines[1] == f"<Tensor {len(m.tensors) - 1} state float32 {tuple(last.shape)} {4 * last.numel}B>"


def _check_resume(ctx: Ctx, out: str) -> None:
    ck = (ctx.work / "digits_ck.mtm").read_bytes()
    want = mtm.write(ctx.ref("last:2", 1, start=ck).checkpoint())
    ck2 = (ctx.work / "digits_ck2.mtm").read_bytes()
    assert ck2 == want, "resumed run differs from the reference resumed from the same checkpoint"
    lines = out.splitlines()
    assert floats(lines[0])[0] == pytest.approx(ctx.acc(ck), abs=1e-12)
    assert floats(lines[1])[0] == pytest.approx(ctx.acc(ck2), abs=1e-12)


def _check_proto(ctx: Ctx, out: str) -> None:
    """The 5-shot head of repl.md by adapt_ref.ProtoRef on the oracle's fc1 embeddings."""
    m = mtm.read(ctx.model)
    fc1 = next(ly for ly in m.layers if ly.name == "fc1")
    oracle = tr.RefTrainer(m, "last:1")
    ref = ar.ProtoRef(m.tensors[fc1.output].zero_point, "cosine", "int8")
    for c in range(10):
        idx = np.flatnonzero(ctx.ytr == c)[:5]
        ref.add_class(str(c), np.stack([oracle.forward(ctx.xtr[i])[fc1.output] for i in idx]))
    emb = [oracle.forward(x)[fc1.output] for x in ctx.xte]
    acc = float(np.mean([ref.predict(e) == str(y) for e, y in zip(emb, ctx.yte, strict=True)]))
    lines = out.splitlines()
    assert floats(lines[1])[-1] == pytest.approx(acc, abs=1e-12)
    assert parse_array(lines[2]) == [round(v, 1) for v in ref.scores(emb[0])]


def _check_zo(ctx: Ctx, out: str) -> None:
    """repl.md's SPSA run by adapt_ref.ZORef: the losses and the accuracy after."""
    m = mtm.read(ctx.model)
    last = max(j for j, ly in enumerate(m.layers) if ly.weight is not None)
    ref = ar.ZORef(m, [last], None, lr=50.0, eps=2, seed=1)
    losses = []
    for _ in range(2):
        tot, k = 0.0, 0
        for s in range(0, len(ctx.ytr), 16):
            lp, lm = ref.step(list(ctx.xtr[s:s + 16]), [int(v) for v in ctx.ytr[s:s + 16]])
            tot += lp + lm
            k += 1
        losses.append(tot / (2 * k))
    acc = float(np.mean([int(np.argmax(ref.t.forward(x)[m.output])) == y for x, y in zip(ctx.xte, ctx.yte,
                                                                                          strict=True)]))
    lines = out.splitlines()
    assert floats(lines[1])[0] == pytest.approx(ctx.acc(ctx.model), abs=1e-12)
    assert floats(lines[2]) == pytest.approx(losses, abs=1e-12)
    assert floats(lines[3])[0] == pytest.approx(acc, abs=1e-12)


def _check_zo_outputs(ctx: Ctx, out: str) -> None:
    """repl.md's activity perturbation run by adapt_ref.ZOOutRef: the losses and the accuracy after."""
    m = mtm.read(ctx.model)
    weighted = [j for j, ly in enumerate(m.layers) if ly.weight is not None]
    ref = ar.ZOOutRef(m, weighted[-2:], eps=4, seed=1, opt=tr.SGD(lr=0.01, momentum=0.9))
    tot, k = 0.0, 0
    for s in range(0, len(ctx.ytr), 16):
        lp, lm = ref.step(list(ctx.xtr[s:s + 16]), [int(v) for v in ctx.ytr[s:s + 16]])
        tot += lp + lm
        k += 1
    acc = float(np.mean([int(np.argmax(ref.t.forward(x)[m.output])) == y for x, y in zip(ctx.xte, ctx.yte,
                                                                                          strict=True)]))
    lines = out.splitlines()
    assert floats(lines[1]) == pytest.approx([tot / (2 * k)], abs=1e-12)
    assert floats(lines[2])[0] == pytest.approx(acc, abs=1e-12)


CHECKS: dict[str, Callable[[Ctx, str], None]] = {
    "first-import": _check_first_import, "arch": _check_arch, "train": _check_train, "fc2": _check_fc2,
    "forward": _check_forward, "accuracy": _check_accuracy, "quantize": _check_quantize, "loss": _check_loss,
    "gradients": _check_gradients, "one-step": _check_one_step, "trainer": _check_trainer,
    "dynamic": _check_dynamic, "static": _check_static, "checkpoint": _check_checkpoint,
    "resume": _check_resume, "proto": _check_proto, "zo": _check_zo,
    "zo-outputs": _check_zo_outputs,
}


def run_checks(ctx: Ctx, blocks: list[Block], outs: list[str]) -> list[str]:
    done = []
    assert len(outs) == len(blocks)
    stale = [m for b, out in zip(blocks, outs, strict=True) if (m := output_mismatch(b, out))]
    assert not stale, "\n\n".join(stale)  # every stale block at once
    for b, out in zip(blocks, outs, strict=True):
        if b.check:
            assert b.check in CHECKS, f"{b.where}: unknown check {b.check!r}"
            try:
                CHECKS[b.check](ctx, out)
            except AssertionError as e:
                raise AssertionError(f"{b.where} (check {b.check}): {e}\n--- printed ---\n{out}") from e
            done.append(b.check)
    return done


# --------------------------------------------------------------------------
# getting-started.md


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> tuple[Ctx, list[Block], list[str]]:
    """Run getting-started.md's runnable blocks in an empty folder."""
    ensure_natmod()
    work = tmp_path_factory.mktemp("getting-started")
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["MPLBACKEND"] = "Agg"
    blocks = [b for b in parse_blocks(DOCS / "getting-started.md") if b.run or b.file]
    outs = []
    for b in blocks:
        if b.file:
            (work / b.file).write_text(b.code)
            out = ""
        elif b.run == "host":
            out = _run([str(VENV_BIN / "python"), "-c", b.code], b, work, env)
        elif b.run == "sh":
            out = _run(["bash", "-e", "-c", b.code], b, work, env)
        elif b.run == "device":
            out = _run([str(MICROPYTHON), "-c", b.code], b, work,
                       {**env, "MICROPYPATH": f"{NATMOD_X64}:{PYTHON_LIB}"})
        else:
            raise AssertionError(f"{b.where}: unknown run kind {b.run!r}")
        outs.append(out)
    ctx = Ctx(work)
    ctx.load()
    return ctx, blocks, outs


def test_getting_started_runs(started: tuple[Ctx, list[Block], list[str]]) -> None:
    ctx, blocks, outs = started
    kinds = {b.run for b in blocks}
    assert {"host", "sh", "device"} <= kinds and any(b.file for b in blocks)
    done = run_checks(ctx, blocks, outs)
    assert sorted(done) == ["arch", "first-import", "train"]


# --------------------------------------------------------------------------
# repl.md


def test_repl_walkthrough_runs(started: tuple[Ctx, list[Block], list[str]], tmp_path: Path) -> None:
    src = started[0]
    for name in ("digits.mtm", "digits_train.mtd", "digits_test.mtd"):
        shutil.copy(src.work / name, tmp_path / name)
    blocks = [b for b in parse_blocks(DOCS / "repl.md") if b.lang == "python"]
    assert len(blocks) >= 15
    outs = run_session(blocks, tmp_path)
    ctx = Ctx(tmp_path)
    ctx.load()
    done = run_checks(ctx, blocks, outs)
    assert set(done) == {"fc2", "forward", "accuracy", "quantize", "loss", "gradients", "one-step", "trainer",
                         "dynamic", "static", "checkpoint", "resume", "proto", "zo", "zo-outputs"}
    assert sum(b.output is not None for b in blocks) >= 12


# --------------------------------------------------------------------------
# stubs


def stub_names(tree: ast.Module) -> set[str]:
    """Public names a stub module binds (imports of modules excluded: they are not API)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname for a in node.names if a.asname == a.name}  # explicit re-exports
    return {n for n in names if not n.startswith("_")}


def imported_names(tree: ast.Module) -> set[str]:
    """Names a source module binds by `from X import Y` anywhere (re-exports, not its own API)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            out |= {a.asname or a.name for a in node.names}
    return out


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


INIT_STUB = STUBS / "microtrain" / "__init__.pyi"


def stub_modules() -> dict[str, Path]:
    """The stubbed submodules of microtrain (not __init__, not private helpers like _types)."""
    return {p.stem: p for p in sorted((STUBS / "microtrain").glob("*.pyi")) if not p.stem.startswith("_")}


def mp_json(code: str, pure: bool = False, cwd: Path | None = None) -> Any:
    """Run code in micropython (native or pure-Python kernels); parse the last line as JSON."""
    env = dict(os.environ)
    env["MICROPYPATH"] = str(PYTHON_LIB) if pure else f"{NATMOD_X64}:{PYTHON_LIB}"
    env.pop("MICROTRAIN_PURE", None)
    if pure:
        env["MICROTRAIN_PURE"] = "1"  # also when the binary has _microtrain built in
    proc = subprocess.run([str(MICROPYTHON), "-c", code], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_stubs_parse() -> None:
    files = sorted(STUBS.rglob("*.pyi"))
    assert STUBS / "_microtrain.pyi" in files and STUBS / "microtrain" / "__init__.pyi" in files
    for p in files:
        compile(p.read_text(), str(p), "exec", flags=ast.PyCF_ONLY_AST)


_DIR = """
import json, microtrain
first = [n for n in dir(microtrain) if not n.startswith('_')]
for s in %s:
    __import__('microtrain.' + s)
print(json.dumps([microtrain.NATIVE, first, [n for n in dir(microtrain) if not n.startswith('_')]]))
"""


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure-python"])
def test_stub_package_lists_exactly_dir_microtrain(pure: bool) -> None:
    ensure_natmod()
    subs = stub_modules()
    init = stub_names(_parse(INIT_STUB))
    # pyk: a package, stubbed as a folder; dir() lists every submodule (microtrain's
    # __getattr__ imports them, as `from microtrain import pyk` needs)
    want = init | set(subs) | {"pyk"}
    native, first, full = mp_json(_DIR % json.dumps(sorted(subs)), pure=pure)
    assert native is (not pure)
    assert set(full) == want, \
        f"stubs - dir: {sorted(want - set(full))}; dir - stubs: {sorted(set(full) - want)}"
    # before any lazy import, dir() shows the stubbed names less some submodules and some of
    # the names the package loads on first use (_LAZY: the training pieces)
    lazy = next(set(ast.literal_eval(n.value)[0::2]) for n in _parse(PKG_SRC / "__init__.py").body
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "_LAZY")
    assert set(first) <= want and (want - set(first)) <= set(subs) | lazy
    # __all__ of the package = the stubbed names that are not submodules
    src_all = next(ast.literal_eval(n.value) for n in _parse(PKG_SRC / "__init__.py").body
                   if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__all__")
    assert set(src_all) == init - {"__all__", "__version__"}


_SUBDIR = """
import json
out = {}
for s in %s:
    mod = __import__('microtrain.' + s, None, None, ['x'])
    out[s] = [[n, type(getattr(mod, n)).__name__] for n in dir(mod) if not n.startswith('_')]
print(json.dumps(out))
"""


def test_submodule_stubs_list_the_names_each_module_defines() -> None:
    ensure_natmod()
    subs = stub_modules()
    got = mp_json(_SUBDIR % json.dumps(sorted(subs)))
    for name, path in subs.items():
        tree = _parse(path)
        want = stub_names(tree)
        skip = imported_names(_parse(PKG_SRC / f"{name}.py"))
        defined = {n: t for n, t in got[name] if t != "module" and n not in skip}
        assert set(defined) == want, (f"{path.name}: stubs - module: {sorted(want - set(defined))}; "
                                      f"module - stubs: {sorted(set(defined) - want)}")
        classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")}
        assert classes == {n for n, t in defined.items() if t == "type"}, f"{path.name}: classes differ"


def _class_members(tree: ast.Module, name: str) -> set[str]:
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    out: set[str] = set()
    node = classes[name]
    for item in node.body:
        if isinstance(item, ast.FunctionDef):
            out.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            out.add(item.target.id)
    imported = {a.asname or a.name: n.module for n in tree.body if isinstance(n, ast.ImportFrom)
                and (n.module or "").startswith("microtrain.") for a in n.names}
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            out |= _class_members(tree, base.id)
        elif isinstance(base, ast.Name) and base.id in imported:  # a base from another stub module
            mod = str(imported[base.id]).split(".", 1)[1]
            out |= _class_members(_parse(stub_modules()[mod]), base.id)
    return {n for n in out if not n.startswith("_")}


_INSTANCES = """
import json
import microtrain as mt
from microtrain.cache import FeatureCache
m = mt.load('digits.mtm')
t = mt.Trainer(m, train='last:2', sparse=mt.DynamicSparse(), health=True)
mt.FileDataset.write('x.mtd', [(bytes(m.input.numel), 1)])
objs = {'model.Model': m, 'model.Layer': m.layers[0], 'model.Tensor': m.input, 'trainer.Trainer': t,
        'optim.SGD': t.opt, 'adam.Adam': mt.Adam(), 'schedule.Constant': mt.Constant(),
        'schedule.StepLR': mt.StepLR(), 'schedule.Cosine': mt.Cosine(), 'sparse.DynamicSparse': t.sparse,
        'sparse.StaticSparse': mt.StaticSparse(), 'data.FileDataset': mt.FileDataset('x.mtd'),
        'data.Subset': mt.Subset([], 0, 0),
        'cache.FeatureCache': FeatureCache(m, t.first, [(bytes(m.input.numel), 1)]),
        'proto.PrototypeHead': mt.PrototypeHead(m, 'fc1'), 'replay.Replay': mt.Replay(),
        'zo.ZO': mt.ZO(mt.load('digits.mtm'), train='last:1'),
        'lora.LoRA': mt.LoRA(mt.load('digits.mtm'), rank=2, layers='last:1'),
        'zo.QScheduler': __import__('microtrain.zo').zo.QScheduler(),
        'tta.TTA': __import__('microtrain.tta').tta.TTA(mt.load('digits.mtm')),
        'health.Health': t._mon}
from microtrain.optim import Param
objs['optim.Param'] = Param(t.layers[0], False)
m2 = mt.load('digits.mtm')
t2 = mt.Trainer(m2, train='last:2', optimizer=mt.SGD(lr=0.01))  # batch 1, plain SGD: m2.update
objs['stepwise.StepInBackward'] = m2.update
t3 = mt.Trainer(mt.load('digits.mtm'), train='last:1', optimizer=mt.SGD(lr=0.01, momentum=0.9), sums=False)
objs['backward.IntoMomentum'] = t3.model.update
t6 = mt.Trainer(mt.load('digits.mtm'), train='last:1', optimizer=mt.SGD(lr=0.01, momentum=0.9, state='bf16'),
                sums=False)
objs['halfwin.HalfWindow'] = t6.model.update.win
m4 = mt.load('digits.mtm')
m4.set_trained('last:1')
objs['backward.Sums'] = m4.update
objs['backward.BackwardPlan'] = m4.backward_plan
from microtrain import fleet
fleet.export({'model': 'digits.mtm', 'train': 'last:2', 'global': 'g.bin'})
m5 = mt.load('digits.mtm')
i5 = m5.select('last:2')
objs['fleet.Global'] = fleet.Global('g.bin', m5, i5, fleet.fingerprint(m5, i5))
objs['fleet.ProxSGD'] = fleet.ProxSGD(0.01, lr=0.01)
print(json.dumps({k: [n for n in dir(o) if not n.startswith('_')] for k, o in objs.items()}))
"""


def test_stub_classes_list_the_members_of_real_instances(started: tuple[Ctx, list[Block], list[str]],
                                                         tmp_path: Path) -> None:
    shutil.copy(started[0].work / "digits.mtm", tmp_path / "digits.mtm")
    got = mp_json(_INSTANCES, cwd=tmp_path)
    classes = set()
    for mod, path in stub_modules().items():
        tree = _parse(path)
        classes |= {f"{mod}.{n.name}" for n in tree.body if isinstance(n, ast.ClassDef)
                    and not n.name.startswith("_")}
    assert set(got) == classes, "every stubbed class needs an instance in _INSTANCES"
    for key, members in got.items():
        mod, cls = key.split(".")
        want = _class_members(_parse(stub_modules()[mod]), cls)
        assert want == set(members), f"{key}: stub - real: {sorted(want - set(members))}; " \
                                     f"real - stub: {sorted(set(members) - want)}"


def _sig(fn: ast.FunctionDef) -> tuple[Any, ...]:
    a = fn.args
    params = [p.arg for p in a.posonlyargs + a.args]
    defaults = [ast.unparse(d) for d in a.defaults]
    kw = [(p.arg, None if d is None else ast.unparse(d))
          for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    decos = sorted(ast.unparse(d) for d in fn.decorator_list)
    return params, defaults, kw, a.vararg is not None, a.kwarg is not None, decos


def _defs(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """'name' and 'Class.name' -> def (methods of base classes in the same module included)."""
    out = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def add(cls: str, node: ast.ClassDef) -> None:
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                add(cls, classes[base.id])
        for item in node.body:
            if isinstance(item, ast.FunctionDef):
                out[f"{cls}.{item.name}"] = item

    for name, node in classes.items():
        add(name, node)
    return out


def test_stub_signatures_match_python_lib() -> None:
    n = 0
    for mod, path in stub_modules().items():
        src = _defs(_parse(PKG_SRC / f"{mod}.py"))
        for key, fn in _defs(_parse(path)).items():
            assert key in src, f"{path.name}: {key} is not in python_lib/microtrain/{mod}.py"
            assert _sig(fn) == _sig(src[key]), \
                f"{path.name}: {key}: stub {_sig(fn)} != source {_sig(src[key])}"
            params = fn.args.posonlyargs + fn.args.args
            typed = all(p.annotation is not None for p in params if p.arg != "self")
            assert typed and fn.returns is not None, f"{path.name}: {key} is not fully typed"
            n += 1
    assert n >= 60


def _binding_table() -> dict[str, list[str]]:
    """docs/numerics.md "Python binding": function -> argument names."""
    text = (DOCS / "numerics.md").read_text().split("## Python binding", 1)[1]
    out = {}
    for name, args in re.findall(r"^\| `(\w+)`(?: \(FPU\))? \| ([^|]*) \|", text, re.M):
        parts, depth, cur = [], 0, ""
        for ch in args:
            depth += ch == "("
            depth -= ch == ")"
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        out[name] = [re.match(r"\s*(\w+)", p).group(1) for p in parts]  # type: ignore[union-attr]
    return out


def test_native_stub_lists_exactly_dir_microtrain_module() -> None:
    ensure_natmod()
    tree = _parse(STUBS / "_microtrain.pyi")
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    real = mp_json("import json, _microtrain\n"
                   "print(json.dumps([n for n in dir(_microtrain) if not n.startswith('_')]))")
    assert stub_names(tree) == set(real)
    py: dict[str, ast.FunctionDef] = {}
    for src in sorted((PKG_SRC / "pyk").glob("*.py")):
        py |= _defs(_parse(src))
    table = _binding_table()
    assert len(table) >= 25 and set(table) <= set(funcs)
    for name, fn in funcs.items():
        params = [p.arg for p in fn.args.posonlyargs]
        assert not fn.args.args and params, f"{name}: arguments must be positional-only"
        assert all(p.annotation is not None for p in fn.args.posonlyargs) and fn.returns is not None, name
        assert params == _sig(py[name])[0], f"{name}: names differ from the pure-Python kernel"
        if name in table:
            assert params == table[name], f"{name}: names differ from numerics.md's binding table"
        returns = ast.unparse(fn.returns)
        # mtm_view returns the memoryview it retyped (the loader's zero-copy int32 / float32 views)
        assert returns in ("int", "None") or (name, returns) == ("mtm_view", "memoryview"), name
    # the pure-Python kernels' stubs (one per module of microtrain.pyk) re-export exactly these
    # names (plus crc32), each where microtrain.pyk.WHERE says it lives
    where = next(ast.literal_eval(n.value) for n in _parse(PKG_SRC / "pyk" / "__init__.py").body
                 if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "WHERE")
    pk = {}
    for stub in sorted((STUBS / "microtrain" / "pyk").glob("*.pyi")):
        if stub.stem != "__init__":
            pk |= {n: stub.stem for n in stub_names(_parse(stub))}
    assert set(pk) == set(real) - {"HAS_FLOAT"} | {"crc32"}
    assert pk == where
    assert "HAS_FLOAT" in stub_names(_parse(STUBS / "microtrain" / "pyk" / "__init__.pyi"))


# --------------------------------------------------------------------------
# api.md


def test_api_reference_names_every_public_name() -> None:
    api = (DOCS / "api.md").read_text()
    init = stub_names(_parse(INIT_STUB)) - {"__all__", "__version__"}
    headings = "\n".join(ln for ln in api.splitlines() if ln.startswith("#"))
    missing = [n for n in sorted(init) if not re.search(rf"\b{n}\b", headings)]
    assert not missing, f"api.md has no section for {missing}"
    for path in stub_modules().values():
        tree = _parse(path)
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name in init:
                for member in sorted(_class_members(tree, node.name)):
                    assert f"{member}" in api, f"api.md does not mention {node.name}.{member}"
