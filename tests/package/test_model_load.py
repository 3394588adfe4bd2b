"""microtrain.load() in the real micropython: zero-copy use of the file, outputs equal the oracle,
and damaged files (thousands of seeded mutations) only ever raise ValueError."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from microtrain_tools import mtm
from microtrain_tools.mtm_layout import HEADER_SIZE, TENSOR_ENTRY
from support.digits_model import digits_model
from support.kernel_harness import run_micropython

N_MUTATIONS = 2000


def _mutations(good: bytes, n: int, seed: int = 7) -> list[bytes]:
    """Byte flips, field overwrites with edge values, truncations and extensions, some with the
    CRC recomputed (so the semantic checks behind it are reached)."""
    import zlib

    rng = np.random.default_rng(seed)
    edge = [0, 1, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 64, 8]
    out = []
    for i in range(n):
        b = bytearray(good)
        kind = i % 4
        if kind == 0:
            for _ in range(int(rng.integers(1, 4))):
                b[int(rng.integers(0, len(b)))] ^= 1 << int(rng.integers(0, 8))
        elif kind == 1:
            off = int(rng.integers(0, len(b) - 4)) & ~3
            struct.pack_into("<I", b, off, edge[int(rng.integers(0, len(edge)))])
        elif kind == 2:
            cut = int(rng.integers(0, len(b)))
            b = b[:cut] if rng.random() < 0.7 else b + bytes(int(rng.integers(1, 64)))
        else:  # a header or table field, with a valid CRC
            off = int(rng.integers(0, min(len(b) - 8, HEADER_SIZE + TENSOR_ENTRY * 40))) & ~3
            struct.pack_into("<I", b, off, edge[int(rng.integers(0, len(edge)))])
        if kind in (1, 3) and len(b) >= 8 and rng.random() < 0.8:
            struct.pack_into("<I", b, len(b) - 4, zlib.crc32(bytes(b[:-4])) & 0xFFFFFFFF)
        out.append(bytes(b))
    return out


LOADER = """
import sys, gc
import microtrain as mt
path = sys.argv[1]
n = int(sys.argv[2])
numel = int(sys.argv[3])
ok = bad = 0
x = bytearray(numel)
with open(path, "rb") as f:
    for i in range(n):
        ln = int.from_bytes(f.read(4), "little")
        data = f.read(ln)
        try:
            m = mt.load(data)
        except ValueError as e:
            bad += 1
            continue
        # an accepted file must also run
        if m.input.numel == numel:
            m.forward(x)
        ok += 1
        m = None
        if i % 200 == 0:
            gc.collect()
print("LOADED", ok, "REJECTED", bad)
"""


def test_mutated_files_raise_value_error_and_never_crash(tmp_path: Path) -> None:
    dm = digits_model()
    muts = _mutations(dm.mtm, N_MUTATIONS)
    blob = tmp_path / "mutations.bin"
    with open(blob, "wb") as f:
        for m in muts:
            f.write(len(m).to_bytes(4, "little") + m)
    script = tmp_path / "loader.py"
    script.write_text(LOADER)
    p = run_micropython(script, [str(blob), str(len(muts)), str(dm.x.shape[1])], timeout=600)
    assert p.returncode == 0, (p.stdout + p.stderr)[-2000:]
    ok, bad = (int(v) for v in p.stdout.split()[1::2])
    assert ok + bad == N_MUTATIONS
    # the host reader decides independently which files are valid
    from microtrain_tools import mtm

    host_ok = 0
    for m in muts:
        try:
            mtm.read(m)
            host_ok += 1
        except ValueError:
            pass
    assert ok == host_ok
    assert bad > N_MUTATIONS // 2  # the mutations do damage: most files are rejected


ZERO_COPY = """
import sys, gc, uctypes
import microtrain as mt
path = sys.argv[1]
gc.collect()
before = gc.mem_alloc()
m = mt.load(path)
gc.collect()
used = gc.mem_alloc() - before
base = uctypes.addressof(m._words)
size = len(m._words) * 4
# every frozen weight, bias, multiplier and descriptor lies inside the one file buffer
inside = 0
total = 0
for ly in m.layers:
    for a in (ly.w, ly.b, ly.mult, ly.shift, ly.params):
        if a is None:
            continue
        total += 1
        addr = uctypes.addressof(a)
        if base <= addr < base + size:
            inside += 1
print("SIZE", size, "USED", used, "INSIDE", inside, "TOTAL", total, "OBJECTS", len(m.tensors) + len(m.layers))
out = m.forward(open(sys.argv[2], "rb").read())
print("OUT", " ".join(str(v) for v in out))
"""


def test_load_path_is_zero_copy_and_matches_the_oracle(tmp_path: Path) -> None:
    dm = digits_model()
    mfile = tmp_path / "m.mtm"
    mfile.write_bytes(dm.mtm)
    xfile = tmp_path / "x.bin"
    xfile.write_bytes(dm.x[0].tobytes())
    script = tmp_path / "zc.py"
    script.write_text(ZERO_COPY)
    p = run_micropython(script, [str(mfile), str(xfile)])
    assert p.returncode == 0, (p.stdout + p.stderr)[-2000:]
    lines = p.stdout.splitlines()
    f = lines[0].split()
    size, used, inside, total, objects = int(f[1]), int(f[3]), int(f[5]), int(f[7]), int(f[9])
    assert size == len(dm.mtm)
    # every parameter array and descriptor is a view into the file buffer (addresses checked)
    assert total > 0 and inside == total
    # heap: the file once, plus one small Python object per tensor and layer (under 700 bytes each)
    assert size <= used < size + 700 * objects, (used, size, objects)
    out = [int(v) for v in lines[1].split()[1:]]
    assert out == dm.expected[0].tolist()


# load() from a path, from bytes and from memoryviews (how a model in flash or ROMFS is
# used without a copy): the same outputs, the same tensor values. The checkpoint holds
# float32 STATE tensors (mixed-mode master copies, momentum) as well as the int32 ones.
SOURCES = """
import sys, uctypes
import microtrain as mt
path, ck, xpath = sys.argv[1], sys.argv[2], sys.argv[3]
x = open(xpath, "rb").read()
m = mt.load(path)
n = m.input.numel
t = mt.Trainer(m, train="last:2", mode="mixed", optimizer=mt.SGD(lr=0.05, momentum=0.9))
for i in range(4):
    t.step(x[i * n:(i + 1) * n], i)
t.save(ck)

def dump(m):
    outs = [bytes(m.forward(x[i * n:(i + 1) * n])).hex() for i in range(len(x) // n)]
    vals = []
    for i in range(len(m.tensors)):
        t = m.tensor(i)  # a layer's constants: read again from the model bytes
        if t.data is not None:
            vals.append("%d:%s" % (t.index, ",".join(repr(v) for v in t.data)))
    return " ".join(outs), " ".join(vals)

for f in (path, ck):
    data = open(f, "rb").read()
    base = uctypes.addressof(data)
    for name, src in (("path", f), ("bytes", data), ("memoryview", memoryview(data)),
                      ("bytearray-memoryview", memoryview(bytearray(data)))):
        mm = mt.load(src)
        outs, vals = dump(mm)
        print("OUT", f == ck, name, outs)
        print("VAL", f == ck, name, vals)
        if name == "memoryview":
            # int8 weights are views of the caller's buffer, not copies
            ws = [ly.w for ly in mm.layers if ly.w is not None]
            inside = [base <= uctypes.addressof(w) < base + len(data) for w in ws]
            print("ZEROCOPY", f == ck, name, len(inside), all(inside))
"""


def test_load_memoryview_equals_bytes_and_path(tmp_path: Path) -> None:
    dm = digits_model()
    mfile, ck, xfile = tmp_path / "m.mtm", tmp_path / "ck.mtm", tmp_path / "x.bin"
    mfile.write_bytes(dm.mtm)
    xfile.write_bytes(dm.x.tobytes())
    script = tmp_path / "sources.py"
    script.write_text(SOURCES)
    p = run_micropython(script, [str(mfile), str(ck), str(xfile)], timeout=300)
    assert p.returncode == 0, (p.stdout + p.stderr)[-2000:]
    got: dict[tuple[str, str, str], str] = {}
    for line in p.stdout.splitlines():
        kind, is_ck, rest = line.split(" ", 2)
        name, _, val = rest.partition(" ")
        got[(kind, is_ck, name)] = val
    names = ("path", "bytes", "memoryview", "bytearray-memoryview")
    for is_ck in ("False", "True"):
        for kind in ("OUT", "VAL"):
            ref = got[(kind, is_ck, "path")]
            assert ref, (kind, is_ck)
            for name in names[1:]:
                what = "checkpoint" if is_ck == "True" else "model"
                assert got[(kind, is_ck, name)] == ref, f"{kind} of the {what}: load({name}) != load(path)"
        n_weighted = sum(ly.op in (mtm.Op.CONV2D, mtm.Op.LINEAR) for ly in mtm.read(dm.mtm).layers)
        assert got[("ZEROCOPY", is_ck, "memoryview")].split() == [str(n_weighted), "True"]
    # the model's outputs are the oracle's
    want = " ".join(bytes(r.astype(np.int8).tobytes()).hex() for r in dm.expected)
    assert got[("OUT", "False", "path")] == want
    # the checkpoint carries float32 STATE tensors and trained weights: the check compared them
    ckm = mtm.read(ck.read_bytes())
    assert sum(t.kind == mtm.Kind.STATE for t in ckm.tensors) == 6
    assert got[("OUT", "True", "path")] != want
