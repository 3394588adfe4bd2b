"""``python -m microtrain_tools.flashimg``: the QEMU boards' littlefs flash images on the host.

The commands an owner types (new with files, ls, get) round-trip files through an image;
the image has the boards' geometry and is a littlefs file system to littlefs-python itself.
(That the boards' firmware reads these images and writes images this module reads is
tests/firmware/test_board_serial.py's.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from littlefs import LittleFS, UserContext

from microtrain_tools import flashimg
from support.harness import ROOT


def flashimg_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tools")}  # this checkout's tools
    return subprocess.run([sys.executable, "-m", "microtrain_tools.flashimg", *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env=env, check=False)


def test_new_ls_get_round_trip(tmp_path: Path) -> None:
    model = tmp_path / "model.mtm"
    model.write_bytes(bytes(range(256)) * 40)  # over two blocks: littlefs's block list, not inline
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    image = tmp_path / "flash.img"
    r = flashimg_cli("new", str(image), str(model), f"{script}:/lib/x/train.py")
    assert r.returncode == 0, r.stderr
    assert image.stat().st_size == flashimg.BLOCK_SIZE * flashimg.BLOCK_COUNT
    assert flashimg_cli("ls", str(image)).stdout.split() == ["lib", "model.mtm"]
    assert flashimg_cli("ls", str(image), "/lib/x").stdout.split() == ["train.py"]
    out = tmp_path / "back.mtm"
    r = flashimg_cli("get", str(image), "/model.mtm", str(out))
    assert r.returncode == 0 and out.read_bytes() == model.read_bytes(), r.stderr
    # the binding itself, mounted with the geometry read from its superblock (block_count=0)
    fs = LittleFS(context=UserContext(buffer=bytearray(image.read_bytes())), block_size=flashimg.BLOCK_SIZE,
                  block_count=0)
    assert fs.block_count == flashimg.BLOCK_COUNT
    with fs.open("/lib/x/train.py", "r") as f:
        assert f.read() == "print('hi')\n"


def test_bad_images_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "short.img"
    bad.write_bytes(b"\xff" * (flashimg.BLOCK_SIZE + 1))
    r = flashimg_cli("ls", str(bad))
    assert r.returncode == 1 and r.stderr.startswith("flashimg: ") and "not a whole number" in r.stderr
    r = flashimg_cli("get", str(flashimg.new_image(tmp_path / "empty.img")), "/nope", str(tmp_path / "x"))
    assert r.returncode == 1 and r.stderr.startswith("flashimg: ") and not (tmp_path / "x").exists()
