"""`make board-test`: the QEMU boards driven as a board owner drives a board, end to end.

Each board runs its board-mode firmware (ports/qemu ``BOARDMODE=1``: REPL on UART 0, which
QEMU puts on a pseudo-terminal, and a littlefs file system in a flash-image file that
tools/microtrain_tools/flashimg.py makes fresh). Through its serial port, with real commands:

- deploy: ``microtrain deploy --port PTY --arch ARCH --model model.mtm`` (mpremote: the
  package into /lib, the model into /, then an import of the package on the board);
- run: ``mpremote connect PTY run script.py`` (a host script, run on the board);
- train: the training runner of ``make test-mcu`` (tests/mp/train_runner.py) copied to the
  flash with ``mpremote fs cp`` and run there through the port, its checkpoint saved on the
  flash;
- pull: ``mpremote fs cp :CHECKPOINT .`` (and the same file read from the flash image by
  littlefs's host binding);
- identical: the pulled checkpoint and the runner's dump equal, byte for byte, those of the same
  run on the float32 host twin (support/check_mcu.py's runs and comparisons);
- power cut: QEMU killed (SIGKILL) at a random moment while the board saves checkpoints over
  one another on its flash (model.save: write, verify, rename); booted again from the same
  flash image, the checkpoint loads and is the old or the new one. K such cuts.

Ends with one line
    board-test: boards=m0,m7 deploy=2/2 run=2/2 train=2/2 pull=2/2 identical=2/2 powercut=K/K
and exits 1 unless every count is complete. ``--quick`` is tests/firmware/test_board_serial.py's
subset (one board, one short training run, no power cut).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from littlefs.errors import LittleFSError

from microtrain_tools import board as board_tools
from microtrain_tools import flashimg
from support import check_mcu
from support.check_mcu import ROOT, qemu_run

# The boards of make board-test, in order. What each one is (machine, natmod arch, microtrain
# built in or not) is qemu_run.BOARDS's; its heap is that of test-mcu's training runs.
BOARDS = ["m0", "m7", "rv32"]


def deploy_args(board: str) -> list[str]:
    """`microtrain deploy`'s package arguments: the natmod arch, or --builtin (rv32: the firmware
    has microtrain built in, as an ESP32-C3 or RP2350 RISC-V firmware would)."""
    b = qemu_run.BOARDS[board]
    return ["--builtin"] if b.builtin else ["--arch", b.arch]


WORK = ROOT / "build" / "qemu" / "board-test"
RUNNERS = [ROOT / "tests" / "mp" / "train_runner.py", ROOT / "tests" / "mp" / "runner_lib.py"]
CHECK_CONFIG = 0  # the check_mcu.TRAIN_CONFIGS entry that is trained on the boards
QUICK_STEPS = 1  # training steps of --quick (make test)


def mpremote(port: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([board_tools.tool("mpremote"), "connect", port, *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def microtrain(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The `microtrain` command of this checkout (python -m microtrain_tools.cli)."""
    path = os.pathsep.join([str(ROOT / "tools"), os.environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "microtrain_tools.cli", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONPATH": path})


def build(boards: list[str]) -> None:
    """The board-mode firmware of each board and the float32 twin (with the compiled package)."""
    for b in boards:
        qemu_run.build(b, boardmode=True)
    check_mcu.build_all([])


def start(board: str, image: Path) -> qemu_run.SerialBoard:
    sb = qemu_run.SerialBoard(board, image, heap=f"{check_mcu.TRAIN_HEAP_KB[board]}k")
    sb.start()
    return sb


def _fail(what: str, p: subprocess.CompletedProcess[str], sb: qemu_run.SerialBoard) -> str:
    return f"{what}: exit {p.returncode}: {(p.stdout + p.stderr)[-800:]} | qemu: {sb.output()[-300:]}"


# --------------------------------------------------------------------------
# deploy, run, train, pull


@dataclass
class BoardResult:
    deploy: bool = False
    run: bool = False
    train: bool = False
    pull: bool = False
    identical: bool = False


HOST_FILE = ("/data/hello.txt", b"written on the host by littlefs-python")
# main.py runs at power-on (friendly REPL mode; not after mpremote's soft resets into the raw REPL)
MAIN_PY = ("/main.py", b"with open('/booted.txt', 'w') as f:\n    f.write('main.py ran')\n")
RUN_SCRIPT = """import os, sys
print("BOARD", sys.implementation._machine)
print("HOST", open("/data/hello.txt").read())
print("BOOT", open("/booted.txt").read())
print("ROOT", sorted(os.listdir("/")))
import microtrain
m = microtrain.load("model.mtm")
print("MODEL", len(m.layers), "layers")
"""

TRAIN_SCRIPT = """import sys
sys.argv[:] = ["train_runner.py", "{cfg}"]
import train_runner
"""


def check_board(board: str, work: Path, twin: dict[int, tuple[bytes, bytes]], steps: int,
                problems: list[str]) -> BoardResult:
    """deploy / run / train / pull / identical on one board, from a fresh flash image."""
    res = BoardResult()
    bwork = WORK / board
    shutil.rmtree(bwork, ignore_errors=True)
    bwork.mkdir(parents=True)
    image = flashimg.new_image(bwork / "flash.img", dict([HOST_FILE, MAIN_PY]))
    sb = start(board, image)
    try:
        port = sb.port
        dep = microtrain("deploy", "--port", port, *deploy_args(board), "--model", str(work / "model.mtm"))
        res.deploy = dep.returncode == 0 and "microtrain native ok" in dep.stdout
        if not res.deploy:
            problems.append(_fail(f"{board} deploy", dep, sb))
            return res

        (bwork / "hello.py").write_text(RUN_SCRIPT)
        p = mpremote(port, "run", str(bwork / "hello.py"))
        want = f"BOARD microtrain-qemu-{board} with {qemu_run.BOARDS[board].cpu}"
        lines = p.stdout.splitlines()
        res.run = (p.returncode == 0 and want in lines and f"HOST {HOST_FILE[1].decode()}" in lines
                   and "BOOT main.py ran" in lines
                   and any(ln.startswith("MODEL ") for ln in lines) and "'model.mtm'" in p.stdout)
        if not res.run:
            problems.append(_fail(f"{board} run", p, sb))

        tag = f"serial-{board}-{CHECK_CONFIG}"  # not test-mcu's names in the shared folder
        cfg = check_mcu._train_cfg(work, tag, check_mcu.TRAIN_CONFIGS[CHECK_CONFIG], steps)
        p = mpremote(port, "fs", "cp", *map(str, RUNNERS), str(work / cfg), str(work / "x.bin"), ":")
        if p.returncode != 0:
            problems.append(_fail(f"{board} copy runner", p, sb))
            return res
        (bwork / "train.py").write_text(TRAIN_SCRIPT.format(cfg=cfg))
        p = mpremote(port, "run", str(bwork / "train.py"), timeout=900)
        res.train = p.returncode == 0 and f"TRAIN-RUNNER-DONE {steps}" in p.stdout
        if not res.train:
            problems.append(_fail(f"{board} train", p, sb))
            return res

        ck, dump = bwork / f"{tag}.ck.mtm", bwork / f"{tag}.dump"
        p = mpremote(port, "fs", "cp", f":{tag}.ck.mtm", str(ck), "+", "fs", "cp", f":{tag}.dump", str(dump))
        on_flash = flashimg.read_file(image, f"/{tag}.ck.mtm")  # the host's littlefs reads the image
        res.pull = p.returncode == 0 and ck.is_file() and dump.is_file() and ck.read_bytes() == on_flash
        if not res.pull:
            problems.append(_fail(f"{board} pull (or the image's copy differs)", p, sb))
            return res
        res.identical = (ck.read_bytes(), dump.read_bytes()) == twin[CHECK_CONFIG]
        if not res.identical:
            problems.append(f"{board}: the pulled checkpoint / dump differs from the float32 twin's")
        return res
    finally:
        sb.stop()


# --------------------------------------------------------------------------
# power cut during save()

# Saves two different models over one checkpoint, in turn, for ever; a.mtm / b.mtm are the
# complete files of each (written once, before the loop).
POWERCUT_SCRIPT = """import os
import microtrain as mt
a = mt.load("model.mtm")
b = mt.load("trained.mtm")
if "a.mtm" not in os.listdir():
    a.save("a.mtm")
    b.save("b.mtm")
    a.save("ck.mtm")
print("SAVING")
i = 0
while True:
    (b if i & 1 == 0 else a).save("ck.mtm")
    i += 1
    print("SAVED", i)
"""

CHECK_SCRIPT = """import microtrain as mt
m = mt.load("ck.mtm")
print("LOADED", len(m.layers))
"""


@dataclass
class PowerCut:
    runs: int = 0
    ok: int = 0
    # consecutive saves alternate models A and B, so the old checkpoint is one and the new one the
    # other: how many cuts left each shows that the cuts fell in different saves
    a: int = 0
    b: int = 0
    mid_write: int = 0  # cuts that left ck.mtm.tmp behind: they fell between its open and the rename


def _read_until(proc: subprocess.Popen[str], marker: str, timeout: float) -> list[str]:
    """Lines of proc's output up to the one starting with `marker` (a line at a time)."""
    assert proc.stdout is not None
    lines: list[str] = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        ln = proc.stdout.readline()
        if not ln:
            break
        lines.append(ln.rstrip("\r\n"))
        if ln.startswith(marker):
            return lines
    raise RuntimeError(f"no {marker!r} from the board: {lines[-5:]}")


def powercut(board: str, work: Path, trained: bytes, runs: int, seed: int, problems: list[str]) -> PowerCut:
    """`runs` power cuts during save() on one board's flash; each followed by a boot from the
    same image, a load of the checkpoint on the board and a byte comparison with the two
    complete saves (pulled with mpremote; the image read by the host's littlefs too)."""
    out = PowerCut()
    pwork = WORK / f"powercut-{board}"
    shutil.rmtree(pwork, ignore_errors=True)
    pwork.mkdir(parents=True)
    files = {}
    if not qemu_run.BOARDS[board].builtin:  # the package as deploy puts it
        dist = board_tools.dist_dir(qemu_run.BOARDS[board].arch)
        files = {f"/lib/{p.relative_to(dist)}": p.read_bytes() for p in dist.rglob("*.mpy")}
    files["/model.mtm"] = (work / "model.mtm").read_bytes()
    files["/trained.mtm"] = trained
    image = flashimg.new_image(pwork / "flash.img", files)
    (pwork / "pc.py").write_text(POWERCUT_SCRIPT)
    (pwork / "check.py").write_text(CHECK_SCRIPT)
    rng = random.Random(seed)
    period = 0.0
    refs: tuple[bytes, bytes] | None = None
    for k in range(runs):
        out.runs += 1
        sb = start(board, image)
        try:
            proc = subprocess.Popen([board_tools.tool("mpremote"), "connect", sb.port, "run",
                                     str(pwork / "pc.py")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, stdin=subprocess.DEVNULL)
            try:
                _read_until(proc, "SAVING", 300)
                if period == 0.0:  # the first run measures how long one save takes
                    t0 = time.monotonic()
                    _read_until(proc, "SAVED 4", 300)
                    period = (time.monotonic() - t0) / 4
                # over several saves: where in a save the cut falls is then as random as the
                # host's timing (a save is milliseconds, the same order as the port's latency)
                time.sleep(rng.uniform(0.0, 8.0 * period))
                sb.power_cut()
            finally:
                proc.kill()
                proc.wait()
        except RuntimeError as e:
            problems.append(f"{board} power cut {k}: {e} | qemu: {sb.output()[-300:]}")
            sb.stop()
            continue
        if refs is None:
            refs = (flashimg.read_file(image, "/a.mtm"), flashimg.read_file(image, "/b.mtm"))
        try:  # what the host's littlefs sees after the cut
            before = flashimg.read_file(image, "/ck.mtm")
            out.mid_write += "ck.mtm.tmp" in flashimg.listdir(image)
        except (LittleFSError, OSError) as e:
            before = repr(e).encode()
        sb = start(board, image)
        try:
            chk = mpremote(sb.port, "run", str(pwork / "check.py"), "+", "fs", "cp", ":ck.mtm",
                           str(pwork / "ck.mtm"))
            loaded = chk.returncode == 0 and "LOADED" in chk.stdout
            got = (pwork / "ck.mtm").read_bytes() if loaded else b""
            if loaded and got == before and got in refs:
                out.ok += 1
                out.a += got == refs[0]
                out.b += got == refs[1]
            else:
                problems.append(_fail(f"{board} power cut {k}: the checkpoint did not load or is neither "
                                      "complete save", chk, sb))
        finally:
            sb.stop()
            (pwork / "ck.mtm").unlink(missing_ok=True)
    return out


# --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the QEMU boards over their serial port, end to end")
    ap.add_argument("--boards", default=",".join(BOARDS))
    ap.add_argument("--quick", action="store_true", help="the pytest subset: one short run, no power cut")
    ap.add_argument("--powercut", type=int, default=30, help="power cuts in all (spread over the boards)")
    ap.add_argument("--seed", type=int, default=2024)
    a = ap.parse_args(argv)
    boards = a.boards.split(",")
    unknown = [b for b in boards if b not in BOARDS]
    if unknown:
        ap.error(f"unknown boards {unknown} (the table has {', '.join(BOARDS)})")
    steps = QUICK_STEPS if a.quick else 8
    n_cuts = 0 if a.quick else a.powercut
    t0 = time.time()
    build(boards)
    WORK.mkdir(parents=True, exist_ok=True)
    work = check_mcu.training_setup()
    twin = check_mcu.twin_training(work, CHECK_CONFIG + 1, steps)
    problems: list[str] = []
    results = {}
    for b in boards:
        r = check_board(b, work, twin, steps, problems)
        results[b] = r
        print(f"board {b}: deploy={r.deploy} run={r.run} train={r.train} pull={r.pull} "
              f"identical={r.identical}", flush=True)
    cut = PowerCut()
    for i, b in enumerate(boards):
        share = n_cuts // len(boards) + (i < n_cuts % len(boards))
        if share == 0:
            continue
        c = powercut(b, work, twin[CHECK_CONFIG][0], share, a.seed + i, problems)
        print(f"powercut {b}: {c.ok}/{c.runs} loaded, old or new (model A {c.a}, model B {c.b}; "
              f"{c.mid_write} cut mid-write)", flush=True)
        cut.runs += c.runs
        cut.ok += c.ok
    for p in problems[:20]:
        print("FAIL", p)
    print(f"({time.time() - t0:.0f} s)")
    n = len(boards)
    counts = {k: sum(getattr(r, k) for r in results.values())
              for k in ("deploy", "run", "train", "pull", "identical")}
    line = " ".join(f"{k}={v}/{n}" for k, v in counts.items())
    cuts = f" powercut={cut.ok}/{cut.runs}" if n_cuts else ""
    print(f"board-test: boards={','.join(boards)} {line}{cuts}")
    complete = all(v == n for v in counts.values()) and cut.ok == cut.runs == n_cuts
    return 0 if complete and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
