"""Memory errors on a small, fragmented heap, in the real micropython (``-X heapsize``) with the
package as a board installs it (``board.board_package``: the natmod and ``microtrain/*.mpy``).

- A Trainer whose buffers fit the free bytes but no free block: the MemoryError says the heap is
  fragmented, with the free bytes and the largest free block (checked by allocating: a block of
  that size fits, one a little larger does not), and names a smaller set of layers that then
  trains on the same fragmented heap.
- A model file larger than the largest free block: the MemoryError gives the file's size, the
  largest free block and the free bytes, and says how to keep the model in flash; following it
  (a ROMFS image, mounted with ``vfs.VfsRom``, the file loaded in place from it) loads the model
  on the same heap, and its outputs are the oracle's.
- ``microtrain run --heapsize``: after importing the package its largest free block is most of
  the free heap; with ``--source`` (the .py sources compiled inside the heap) it is not.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from microtrain_tools import board, mtm, paths
from microtrain_tools import convert as cv

# the heap in pieces of `hole` bytes: filled with blocks of that size, the gaps left with smaller
# ones (the list preallocated: its growth would need a block too), then every other block freed,
# so each free piece lies between two live blocks
FRAGMENT = """
import gc
def fragment(hole):
    gc.collect()
    chunks, fill = [None] * 256, [None] * 4096
    k = j = 0
    for n in (hole, 4096, 256, 16):
        try:
            while k < 256 and j < 4096:
                b = bytearray(n)
                if n == hole:
                    chunks[k] = b
                    k += 1
                else:
                    fill[j] = b
                    j += 1
        except MemoryError:
            pass
        b = None
    for i in range(0, k, 2):
        chunks[i] = None
    gc.collect()
    return chunks, fill

def fits(n):
    try:
        b = bytearray(n)
    except MemoryError:
        return 0
    b = None
    gc.collect()
    return 1
"""

TRAINER = FRAGMENT + """
import microtrain as mt
m = mt.load(%(model)r)
keep = fragment(%(hole)d)
try:
    mt.Trainer(m, train="last:2", mode="mixed", optimizer=mt.SGD(lr=0.01, momentum=0.9))
    print("NO-ERROR")
except MemoryError as e:
    msg = str(e)
    print("MSG", msg)
    kb = float(msg.split("its largest free block is ")[1].split(" KB")[0])
    print("BIG-FITS", fits(int((kb - 0.05) * 1024) - 64), "BIGGER-FITS", fits(int((kb + 0.05) * 1024) + 512))
    names = eval(msg.split("would fit (in ")[1].split("train=")[1].split(" (")[0])
    t = mt.Trainer(m, train=names, mode="mixed", optimizer=mt.SGD(lr=0.01, momentum=0.9))
    t.step(bytearray(m.input.numel), 3)
    print("FIT", len(names), len(t.layers))
"""

LOAD = FRAGMENT + """
import os
import microtrain as mt
flash = open(%(image)r, "rb").read()  # the ROMFS partition's bytes: flash on a board
keep = fragment(%(hole)d)
try:
    mt.load(%(model)r)
    print("NO-ERROR")
except MemoryError as e:
    msg = str(e)
    print("MSG", msg)
    big = int(msg.split("the largest free block is ")[1].split(" ")[0])
    print("BIG-FITS", fits(big - 64), "BIGGER-FITS", fits(big + 512))
try:
    import vfs
    vfs.mount(vfs.VfsRom(flash), "/rom")
    m = mt.load(memoryview(open("/rom/model.mtm", "rb")))
    print("VIA romfs")
except (ImportError, AttributeError):  # a port without ROMFS: the same bytes, in place
    m = mt.load(memoryview(flash)[%(offset)d:%(offset)d + %(size)d])
    print("VIA bytes")
print("OUT", " ".join(str(v) for v in m.forward(bytes(%(x)r))))
"""

PROBE = """
import gc
import microtrain as mt
from microtrain import trainer, optim, loss
gc.collect()
free = gc.mem_free()
lo, hi = 0, free
while hi - lo > 256:
    mid = (lo + hi) // 2
    try:
        b = bytearray(mid)
        b = None
        lo = mid
    except MemoryError:
        hi = mid
print("HEAP", free, lo)
"""


def _mlp(tmp: Path) -> tuple[Path, bytes]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 192), nn.ReLU(), nn.Linear(192, 64), nn.ReLU(),
                        nn.Linear(64, 10)).eval()
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    data = mtm.write(cv.convert(net, x, progress=False))
    path = tmp / "model.mtm"
    path.write_bytes(data)
    return path, data


def _run(code: str, heap: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, MICROPYPATH=str(board.board_package()))
    return subprocess.run([paths.micropython(), "-X", f"heapsize={heap}", "-c", code], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300, check=False)


def _kb(msg: str, pattern: str) -> float:
    m = re.search(pattern, msg)
    assert m, (pattern, msg)
    return float(m.group(1))


def test_fragmented_heap_trainer_error(tmp_path: Path) -> None:
    path, _ = _mlp(tmp_path)
    p = _run(TRAINER % {"model": str(path), "hole": 30000}, "640k", tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "NO-ERROR" not in p.stdout
    msg = p.stdout.split("MSG ", 1)[1].splitlines()[0]
    need = _kb(msg, r"needs about ([0-9.]+) KB")
    free = _kb(msg, r"the heap is fragmented: ([0-9.]+) KB is free in total")
    big = _kb(msg, r"its largest free block is ([0-9.]+) KB")
    # consistent: the bytes are free, no block holds them all, the block is part of the free bytes
    assert big <= free and big < need <= free, msg
    # the block is real: that size fits, a little more does not
    assert "BIG-FITS 1 BIGGER-FITS 0" in p.stdout, p.stdout
    # what would fit is judged in that block, and it trains on the same heap
    assert f"would fit (in {big:.1f} KB): train=" in msg and "a heap in fewer pieces" in msg
    n_fit, n_made = (int(v) for v in p.stdout.split("FIT ", 1)[1].split()[:2])
    assert 1 <= n_fit < 2 and n_made == n_fit


def test_model_file_larger_than_the_largest_block(tmp_path: Path) -> None:
    from mpremote.romfs import make_romfs

    path, data = _mlp(tmp_path)
    src = tmp_path / "rom"
    src.mkdir()
    (src / "model.mtm").write_bytes(data)
    image = make_romfs(str(src), mpy_cross=False)
    (tmp_path / "flash.romfs").write_bytes(image)
    offset = image.index(data)
    x = np.random.default_rng(1).integers(-128, 128, 256, dtype=np.int8)
    p = _run(LOAD % {"model": str(path), "image": str(tmp_path / "flash.romfs"), "hole": 30000,
                     "offset": offset, "size": len(data), "x": x.tobytes()}, "400k", tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "NO-ERROR" not in p.stdout
    msg = p.stdout.split("MSG ", 1)[1].splitlines()[0]
    m = re.search(r"load: (\S+) is (\d+) bytes, read into one heap block, but the largest free block is "
                  r"(\d+) bytes \((\d+) free in total: the heap is fragmented\)", msg)
    assert m, msg
    assert m.group(1) == str(path) and int(m.group(2)) == len(data) == path.stat().st_size
    big, free = int(m.group(3)), int(m.group(4))
    assert big < len(data) <= free, msg
    assert "BIG-FITS 1 BIGGER-FITS 0" in p.stdout, p.stdout
    for hint in ("ROMFS", "frozen into the firmware", "memory-mapped flash", "docs/memory.md"):
        assert hint in msg, (hint, msg)
    assert (paths.ROOT / "docs" / "memory.md").read_text().count("## Weights in place") == 1
    # the advice followed on the same fragmented heap: loaded in place, the oracle's outputs
    assert "VIA romfs" in p.stdout or "VIA bytes" in p.stdout
    got = [int(v) for v in p.stdout.split("OUT ", 1)[1].split()]
    assert got == cv.run_mtm(data, x).tolist()


def test_run_heapsize_runs_the_precompiled_package(tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)

    def heap(*opts: str) -> tuple[int, int]:
        env = dict(os.environ, PYTHONPATH=str(paths.ROOT / "tools"))
        r = subprocess.run([sys.executable, "-m", "microtrain_tools.cli", "run", "--heapsize", "256k", *opts,
                            str(script)], capture_output=True, text=True, env=env, timeout=300, check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        free, big = (int(v) for v in r.stdout.split("HEAP ")[1].split()[:2])
        assert big <= free
        return free, big

    free, big = heap()
    free_src, big_src = heap("--source")
    # as a board: the package's code allocated, the rest of the heap in one piece; compiled from
    # .py inside the heap: in pieces
    assert big >= 0.75 * free, (free, big)
    assert big_src < 0.5 * free_src and big_src < big, (free_src, big_src, big)
