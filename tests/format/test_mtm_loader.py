"""The C ``.mtm`` validator and accessors (usermod/microtrain/mtm_loader.c, mtm_access.c)
against the Python reader.

Valid files come from ``convert.py`` (small PyTorch models) and from hand-made
checkpoints; ``_microtrain.mtm_validate`` must accept them and the accessors
must agree with ``mtm.read``. Then a seeded corpus of mutations (byte flips,
truncations, extensions, field edits with the CRC recomputed so the deeper
checks are reached) runs through ``mtm_validate`` in ONE MicroPython process
and through a host build of the validator under ASan/UBSan; every verdict
(accept / reject) must equal ``mtm.read``'s.
"""

from __future__ import annotations

import os
import struct
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from microtrain_tools import mtm
from microtrain_tools.mtm_layout import HEADER_OFF, HEADER_SIZE, LAYER_ENTRY, PARAMS_OFF, TENSOR_ENTRY
from support.harness import MICROPYTHON, NATMOD_X64, ROOT, ensure_natmod
from support.kernel_harness import c_sources
from support.mtm_files import fix_crc, host_verdict, mutation_corpus, torch_model_files, write_corpus

RUNNER = ROOT / "tests" / "mp" / "mtm_runner.py"
DRIVER = ROOT / "tests" / "c" / "mtm_fuzz_driver.c"
KERNEL_DIR = ROOT / "usermod" / "microtrain"
BUILD = ROOT / "build" / "test" / "mtm_loader"




@pytest.fixture(scope="module", autouse=True)
def _natmod() -> None:
    ensure_natmod()


# --------------------------------------------------------------------------
# valid models


@pytest.fixture(scope="module")
def valid_files() -> list[bytes]:
    return torch_model_files()


# --------------------------------------------------------------------------
# mutations


def _run_micropython(corpus: Path) -> list[str]:
    env = dict(os.environ, MICROPYPATH=str(NATMOD_X64))
    p = subprocess.run([str(MICROPYTHON), "-X", "heapsize=64M", str(RUNNER), str(corpus)],
                       capture_output=True, text=True, timeout=600, env=env, check=False)
    assert p.returncode == 0, f"micropython died (rc {p.returncode}): {p.stderr[-2000:]}"
    lines = p.stdout.splitlines()
    assert lines and lines[-1].startswith("MTM-RUNNER-DONE"), f"no final marker: {p.stdout[-500:]}"
    return lines[:-1]


def _build_driver(extra: tuple[str, ...] = ()) -> Path:
    BUILD.mkdir(parents=True, exist_ok=True)
    exe = BUILD / ("mtm_fuzz_driver" + ("_soft" if extra else ""))
    srcs = [DRIVER, *(KERNEL_DIR / s for s in c_sources("MICROTRAIN_MTM_SRC")), KERNEL_DIR / "checks.c",
            KERNEL_DIR / "quant.c"]
    cmd = ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-fsanitize=address,undefined",
           "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", *extra, f"-I{KERNEL_DIR}",
           *map(str, srcs), "-o", str(exe)]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr
    return exe


def _run_driver(exe: Path, corpus: Path) -> str:
    out = corpus.with_suffix(f".{exe.name}.verdicts")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:exitcode=99",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=98")
    p = subprocess.run([str(exe), str(corpus), str(out)], capture_output=True, text=True, timeout=600,
                       env=env, check=False)
    assert p.returncode == 0 and "runtime error" not in p.stderr and "Sanitizer" not in p.stderr, \
        f"host driver failed (rc {p.returncode}): {p.stderr[-3000:]}"
    return out.read_text().strip()


# --------------------------------------------------------------------------
# tests


MP_ACCESSOR_SCRIPT = """
import sys
from array import array
import _microtrain as mt
buf = open(sys.argv[1], 'rb').read()
mt.mtm_validate(buf)
info = array('i', [0] * 15); mt.mtm_info(buf, info); print('I', *info)
t = array('i', [0] * 14); l = array('i', [0] * 23)
for i in range(info[4]):
    mt.mtm_tensor(buf, i, t); print('T', *t)
for i in range(info[5]):
    mt.mtm_layer(buf, i, l); print('L', *l)
"""


def _i32(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v


def _expected_accessors(b: bytes) -> list[str]:
    m = mtm.read(b)
    h = struct.unpack_from("<4sHHIIIIIIIIIIIIII", b, 0)
    info = [h[1], h[2], h[4], h[5], h[6], h[8], h[7], *h[9:17]]
    assert (info[4], info[5], info[12], info[13]) == (len(m.tensors), len(m.layers), m.input, m.output)
    lines = ["I " + " ".join(str(_i32(v)) for v in info)]
    for i, t in enumerate(m.tensors):
        e = struct.unpack_from("<BBBBI4IIIIiII", b, HEADER_SIZE + TENSOR_ENTRY * i)
        scale_bits = struct.unpack("<I", struct.pack("<f", t.scale))[0]
        assert (e[0], e[1], e[2], e[3]) == (t.dtype, len(t.shape), t.kind, t.quant)
        assert tuple(e[5:5 + len(t.shape)]) == tuple(t.shape)
        assert (e[11], e[12]) == (scale_bits, t.zero_point)
        assert e[13] == (mtm.NONE if t.qscales is None else t.qscales)
        if t.data is not None:  # zero-copy: the slice is the tensor's bytes
            assert b[e[9]:e[9] + e[10]] == t.data.tobytes()
        lines.append("T " + " ".join(str(_i32(v)) for v in e[:14]))
    s_off = struct.unpack_from("<I", b, HEADER_OFF["strings_off"])[0]
    lt = HEADER_SIZE + TENSOR_ENTRY * len(m.tensors)
    for j, ly in enumerate(m.layers):
        e = list(struct.unpack_from("<BBBBIIIIIIIIIIIIIIII", b, lt + LAYER_ENTRY * j))
        e[5] += s_off
        e[7] += s_off
        assert b[e[5]:e[5] + e[6]].decode() == ly.name and b[e[7]:e[7] + e[8]].decode() == ly.fused
        p_off = lt + LAYER_ENTRY * j + PARAMS_OFF
        assert list(struct.unpack_from(f"<{len(ly.params)}i", b, p_off)) == list(ly.params)
        assert (e[0], e[9], e[11]) == (ly.op, ly.inputs[0], ly.output)
        v = [mtm.NONE if k is None else k for k in ly.state[4:]]  # state[4], state[5] (format 1.3)
        lines.append("L " + " ".join(str(_i32(v)) for v in [*e, p_off, *v]))
    return lines


def test_valid_files_accepted_and_accessors_agree(valid_files: list[bytes], tmp_path: Path) -> None:
    script = tmp_path / "acc.py"
    script.write_text(MP_ACCESSOR_SCRIPT)
    env = dict(os.environ, MICROPYPATH=str(NATMOD_X64))
    for k, b in enumerate(valid_files):
        f = tmp_path / f"m{k}.mtm"
        f.write_bytes(b)
        p = subprocess.run([str(MICROPYTHON), str(script), str(f)], capture_output=True, text=True,
                           timeout=60, env=env, check=False)
        assert p.returncode == 0, p.stderr
        assert p.stdout.split("\n")[:-1] == _expected_accessors(b)


def test_validate_messages_name_the_place(valid_files: list[bytes], tmp_path: Path) -> None:
    b = bytearray(valid_files[0])
    n_t = struct.unpack_from("<I", b, HEADER_OFF["n_tensors"])[0]
    cases = []
    t = bytearray(b)
    t[HEADER_SIZE + TENSOR_ENTRY * 2] = 9  # tensor 2 dtype
    cases.append((bytes(fix_crc(t)), "unknown tensor dtype (tensor 2)"))
    t = bytearray(b)
    lt = HEADER_SIZE + TENSOR_ENTRY * n_t
    t[lt + LAYER_ENTRY * 1] = 99  # layer 1 op
    name = mtm.read(bytes(b)).layers[1].name
    cases.append((bytes(fix_crc(t)), f"unknown op (layer 1 '{name}')"))
    t = bytearray(b)
    t[100] ^= 1
    cases.append((bytes(t), "CRC32 mismatch"))
    cases.append((bytes(b[:60]), "file too short"))
    src = "import sys, _microtrain as mt\nfor p in sys.argv[1:]:\n" \
          "    try:\n        mt.mtm_validate(open(p,'rb').read()); print('ok')\n" \
          "    except ValueError as e:\n        print(e)\n"
    paths = []
    for k, (data, _) in enumerate(cases):
        paths.append(tmp_path / f"c{k}.mtm")
        paths[-1].write_bytes(data)
    env = dict(os.environ, MICROPYPATH=str(NATMOD_X64))
    p = subprocess.run([str(MICROPYTHON), "-c", src, *map(str, paths)], capture_output=True, text=True,
                       timeout=60, env=env, check=False)
    got = p.stdout.splitlines()
    assert len(got) == len(cases), p.stderr
    for line, (_, want) in zip(got, cases, strict=True):
        assert line.startswith("mtm_validate: ") and want in line, line


def test_mutation_corpus(valid_files: list[bytes]) -> None:
    BUILD.mkdir(parents=True, exist_ok=True)
    kinds, files = mutation_corpus(valid_files)
    files = list(valid_files) + files
    kinds = ["valid"] * len(valid_files) + kinds
    corpus = BUILD / "corpus.bin"
    write_corpus(corpus, files)
    py = [host_verdict(f) for f in files]
    mp_lines = _run_micropython(corpus)
    assert len(mp_lines) == len(files)
    crashes = [(k, ln) for k, ln in enumerate(mp_lines) if ln.startswith("E")]
    assert not crashes, f"non-ValueError outcomes in micropython: {crashes[:5]}"
    mp_ok = [ln == "1" for ln in mp_lines]
    host = _run_driver(_build_driver(), corpus)
    soft = _run_driver(_build_driver(("-DMT_FORCE_SOFT_MATH",)), corpus)
    assert host == soft == "".join("1" if v else "0" for v in mp_ok)

    bad = []
    for k, ((p_ok, p_msg), c_ok) in enumerate(zip(py, mp_ok, strict=True)):
        if p_ok != c_ok:
            bad.append(f"#{k} ({kinds[k]}): python {'accepts' if p_ok else 'rejects: ' + p_msg} / "
                       f"C {'accepts' if c_ok else 'rejects: ' + mp_lines[k][2:]}")
    stats = Counter((kinds[k], py[k][0]) for k in range(len(files)))
    print(f"\n{len(files)} files, {sum(mp_ok)} accepted by C, {sum(p for p, _ in py)} by mtm.py, "
          f"by kind/verdict: {dict(stats)}")
    assert all(mp_ok[:len(valid_files)])
    assert not bad, f"{len(bad)} verdict disagreements:\n" + "\n".join(bad[:20])
    assert len(files) - len(valid_files) >= 3000
    assert sum(mp_ok) - len(valid_files) > 0 and sum(not v for v in mp_ok) > 2000


def _stride_file(valid_files: list[bytes]) -> bytes:
    """Res1d's first conv (a Conv1d, so out_h = 1) with stride_h = 70000."""
    b = bytearray(valid_files[0])
    n_t = struct.unpack_from("<I", b, HEADER_OFF["n_tensors"])[0]
    lt = HEADER_SIZE + TENSOR_ENTRY * n_t
    assert b[lt] == mtm.Op.CONV2D
    struct.pack_into("<i", b, lt + PARAMS_OFF + 4 * 8, 70000)
    return bytes(fix_crc(b))


def test_kernel_limit_rejected_by_c_loader(valid_files: list[bytes], tmp_path: Path) -> None:
    f = tmp_path / "stride.mtm"
    f.write_bytes(_stride_file(valid_files))
    env = dict(os.environ, MICROPYPATH=str(NATMOD_X64))
    src = "import sys, _microtrain as mt\ntry:\n    mt.mtm_validate(open(sys.argv[1],'rb').read())\n" \
          "    print('ok')\nexcept ValueError as e:\n    print(e)\n"
    p = subprocess.run([str(MICROPYTHON), "-c", src, str(f)], capture_output=True, text=True, timeout=60,
                       env=env, check=False)
    assert "stride_h, stride_w must be in 1..65535" in p.stdout


def test_python_reader_rejects_kernel_limits(valid_files: list[bytes]) -> None:
    with pytest.raises(ValueError):
        mtm.read(_stride_file(valid_files))


def test_format_1_3_state_slots(valid_files: list[bytes], tmp_path: Path) -> None:
    """Adam's second moments (state[4], state[5]: the u16 pair at layer-entry offset 68, format
    1.3): the C validator, the pure-Python one and mtm.py accept the valid checkpoint and refuse
    the same broken ones, C and pure-Python with the same message; mtm.py round-trips the file."""
    from support.harness import PYTHON_LIB

    good = valid_files[-1]
    m = mtm.read(good)
    assert good[6] == 3 and m.adam_bt is not None and m.trainer_rng is not None
    assert mtm.write(m) == good
    j = [k for k, ly in enumerate(m.layers) if ly.state[4] is not None][0]
    e = HEADER_SIZE + TENSOR_ENTRY * len(m.tensors) + LAYER_ENTRY * j

    def edit(off: int, fmt: str, *v: int) -> bytes:
        b = bytearray(good)
        struct.pack_into(fmt, b, off, *v)
        return bytes(fix_crc(b))

    cases = {
        "valid": good,
        "minor 2": edit(6, "<H", 2),  # the word at 68 is reserved before 1.3
        "state[4] absent": edit(e + 68, "<H", 0xFFFF),  # its tensor is then referenced by nobody
        "state[2] absent": edit(e + 60, "<I", mtm.NONE),
        "state[5] out of range": edit(e + 70, "<H", len(m.tensors)),
        "state[4] is the bias's": edit(e + 68, "<H", m.layers[j].state[5]),  # wrong shape, referenced twice
    }
    paths = []
    for k, data in enumerate(cases.values()):
        paths.append(tmp_path / f"s{k}.mtm")
        paths[-1].write_bytes(data)
    src = ("import sys\ntry:\n    import _microtrain as mt\nexcept ImportError:\n"
           "    from microtrain.pyk import mtm_loader as mt\nfor p in sys.argv[1:]:\n"
           "    try:\n        mt.mtm_validate(open(p,'rb').read()); print('ok')\n"
           "    except ValueError as e:\n        print(e)\n")
    out = []
    for path in (str(NATMOD_X64), str(PYTHON_LIB)):  # the C validator, then the pure-Python one
        p = subprocess.run([str(MICROPYTHON), "-c", src, *map(str, paths)], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, MICROPYPATH=path), check=False)
        out.append(p.stdout.splitlines())
        assert len(out[-1]) == len(cases), p.stderr
    assert out[0] == out[1]
    for (name, data), line in zip(cases.items(), out[0], strict=True):
        host_ok = host_verdict(data)[0]
        assert (line == "ok") == (name == "valid") == host_ok, (name, line, host_verdict(data))
    assert "reserved" in out[0][1] and "set without state[2]" in out[0][3]
