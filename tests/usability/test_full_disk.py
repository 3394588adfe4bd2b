"""A full disk and missing or damaged files, as a user meets them.

On the device (the unix MicroPython): a checkpoint saved on a really full file system (a tmpfs
of 32 KB, mounted in a private mount namespace by `unshare`, so nothing outside the test sees
it) raises OSError 28 with a message naming the path and the room an atomic save needs (room
for a second copy: its byte count, which the test checks against the size the same save
writes where there is room); the old checkpoint stays byte for byte and no .tmp is left.
A missing file (load, FileDataset, a save into a missing folder) names its path.

On the host: a truncated or corrupt .mtm given to `to-torch`, `info` and (through the
script) `run`, and a truncated .pt given to `to-torch --state-dict` and `convert`, are named
as such in one line; nothing is written.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from microtrain_tools import cli
from support.harness import MICROPYTHON, ensure_natmod
from support.kernel_harness import micropython_env
from support.reliability.train_files import files

DEVICE = r"""
import os, sys
import microtrain as mt
from microtrain import optim
d, model, roomy = sys.argv[1], sys.argv[2], sys.argv[3]
m = mt.load(model)
tr = mt.Trainer(m, train="last:1", mode="float32", optimizer=optim.SGD(lr=0.01, momentum=0.9))
x = bytes(m.input.numel)
tr.step(x, 1)
tr.save(d + "/ck.mtm")
first = open(d + "/ck.mtm", "rb").read()
n = 0
try:  # fill the file system: whole blocks, then what is left
    for size in (4096, 512, 1):
        while True:
            with open(d + "/junk%d" % n, "wb") as f:
                n += 1
                f.write(bytes(size))
except OSError as e:
    print("FILLED", e.errno)
tr.step(x, 2)
try:
    tr.save(d + "/ck.mtm")
    print("SAVED-ON-FULL")
except OSError as e:
    print("ERRNO", e.errno)
    print("MSG", e.args[1])
print("INTACT", open(d + "/ck.mtm", "rb").read() == first)
print("TMP", [f for f in os.listdir(d) if f.endswith(".tmp")])
tr.save(roomy + "/ck.mtm")
print("SIZE", os.stat(roomy + "/ck.mtm")[6])
for what, call in (("load", lambda: mt.load(d + "/nope.mtm")),
                   ("dataset", lambda: mt.FileDataset(d + "/nope.mtd")),
                   ("save", lambda: tr.save(roomy + "/no-such-folder/ck.mtm"))):
    try:
        call()
        print(what, "NO-ERROR")
    except OSError as e:
        print("MISSING", what, e.errno, e.args[1])
"""


def test_full_file_system_and_missing_files_on_the_device(tmp_path: Path) -> None:
    ensure_natmod()
    assert shutil.which("unshare"), "util-linux's unshare is part of Debian's base system"
    model, _ = files(24)
    mnt = tmp_path / "mnt"
    roomy = tmp_path / "roomy"
    mnt.mkdir()
    roomy.mkdir()
    script = tmp_path / "full.py"
    script.write_text(DEVICE)
    cmd = ["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=32k tmpfs "$0" && exec "$@"', str(mnt),
           str(MICROPYTHON), str(script), str(mnt), str(model), str(roomy)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=micropython_env(), check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout.splitlines()
    lines = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in out if not ln.startswith("MISSING")}
    assert lines["FILLED"] == "28" and lines["ERRNO"] == "28", p.stdout
    size = int(lines["SIZE"])
    msg = lines["MSG"]
    assert msg.startswith(f"save: {mnt}/ck.mtm: the file system is full (ENOSPC)"), msg
    assert f"room for a second copy ({size} bytes, plus the file system's own blocks)" in msg, msg
    assert "the previous file is kept" in msg
    assert lines["INTACT"] == "True" and lines["TMP"] == "[]", p.stdout
    missing = {ln.split()[1]: ln.split(" ", 3)[2:] for ln in out if ln.startswith("MISSING")}
    assert missing["load"] == ["2", f"load: {mnt}/nope.mtm: no such file or folder"]
    assert missing["dataset"] == ["2", f"FileDataset: {mnt}/nope.mtd: no such file or folder"]
    assert missing["save"] == ["2", f"save: {roomy}/no-such-folder/ck.mtm: no such file or folder"]


def _one_error(capsys: pytest.CaptureFixture[str], command: str, *args: str) -> str:
    rc = cli.main([command, *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"microtrain {command}: error: "), err
    return err


def test_damaged_files_on_the_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ensure_natmod()
    model, _ = files(24)
    good = model.read_bytes()
    trunc = tmp_path / "trunc.mtm"
    trunc.write_bytes(good[:2000])
    corrupt = tmp_path / "corrupt.mtm"
    corrupt.write_bytes(good[:100] + bytes([good[100] ^ 0xFF]) + good[101:])
    out = tmp_path / "out.pt"
    module = "support.digits_model:SmallCnn"

    err = _one_error(capsys, "to-torch", str(trunc), "--module", module, "-o", str(out))
    assert f"{trunc}: not a valid .mtm file: total_len {len(good)} != file length 2000 (truncated" in err
    err = _one_error(capsys, "to-torch", str(corrupt), "--module", module, "-o", str(out))
    assert f"{corrupt}: not a valid .mtm file: CRC32 mismatch" in err
    err = _one_error(capsys, "info", str(trunc))
    assert f"{trunc}: not a valid .mtm file" in err and "truncated" in err

    # a state dict cut short in a copy: torch's own words speak of zip archives
    assert cli.main(["to-torch", str(model), "--module", module, "-o", str(out), "-q"]) == 0
    sd = out.read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(sd[:len(sd) // 2])
    out.unlink()
    err = _one_error(capsys, "to-torch", str(model), "--module", module, "--state-dict", str(cut), "-o",
                     str(out))
    assert f"--state-dict {cut}: not a complete file written by torch.save() ({len(sd) // 2} bytes: " \
           "truncated, corrupt or another format)" in err
    assert not out.exists()
    err = _one_error(capsys, "convert", str(cut), "--calib", str(cut), "-o", str(tmp_path / "m.mtm"))
    assert f"model {cut}: not a complete file written by torch.save()" in err
    assert not (tmp_path / "m.mtm").exists()

    # run: the device's load names the file and what is wrong with it
    script = tmp_path / "s.py"
    script.write_text(f"import microtrain as mt\nmt.load({str(trunc)!r})\n")
    p = subprocess.run([str(Path(cli.sys.executable).parent / "microtrain"), "run", str(script)],
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 1
    assert (p.stdout + p.stderr).strip().splitlines()[-1] == (
        f"ValueError: load: {trunc}: not a valid .mtm file: mtm_validate: total_len != file length "
        "(truncated or padded file)"), p.stdout + p.stderr
