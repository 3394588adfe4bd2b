"""Flash images of a board's littlefs file system, on the host (littlefs-python's binding).

The project's QEMU boards in board mode (ports/qemu, ``BOARDMODE=1``) keep their file system
in a flash-image file: littlefs on 4 KB blocks, the same littlefs version as the firmware's
(its C sources come from the littlefs-python sdist). This module makes a fresh image, with
files in it, and reads one back (a checkpoint written on the board, a directory listing)::

    python -m microtrain_tools.flashimg new flash.img [FILE[:NAME]]...
    python -m microtrain_tools.flashimg ls flash.img [FOLDER]
    python -m microtrain_tools.flashimg get flash.img NAME OUT

The geometry is the board's: the firmware is started with ``-B BLOCK_SIZE`` and takes the
block count from the image's size (ports/qemu/qemu_run.py passes both from here).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from littlefs import LittleFS, UserContext
from littlefs.errors import LittleFSError

__all__ = ["BLOCK_COUNT", "BLOCK_SIZE", "listdir", "mount", "new_image", "read_file"]

BLOCK_SIZE = 4096  # a NOR flash sector
BLOCK_COUNT = 256  # 1 MB of flash for files


def new_image(path: Path | str, files: Mapping[str, bytes] | None = None, block_size: int = BLOCK_SIZE,
              block_count: int = BLOCK_COUNT) -> Path:
    """A freshly formatted image (erased bytes 0xFF) holding `files` ({"/lib/x.py": data});
    folders are made as needed."""
    fs = LittleFS(block_size=block_size, block_count=block_count)
    for name, data in (files or {}).items():
        parent = name.rsplit("/", 1)[0]
        if parent:
            fs.makedirs(parent, exist_ok=True)
        with fs.open(name, "wb") as f:
            f.write(data)
    p = Path(path)
    p.write_bytes(bytes(fs.context.buffer))
    return p


def mount(path: Path | str, block_size: int = BLOCK_SIZE) -> LittleFS:
    """The image's file system, mounted from a copy of its bytes (the file is not changed)."""
    data = bytearray(Path(path).read_bytes())
    if not data or len(data) % block_size:
        raise ValueError(f"{path}: {len(data)} bytes is not a whole number of {block_size}-byte blocks")
    return LittleFS(context=UserContext(buffer=data), block_size=block_size,
                    block_count=len(data) // block_size)


def read_file(path: Path | str, name: str) -> bytes:
    """The bytes of file `name` in the image (FileNotFoundError if it has none)."""
    fs = mount(path)  # held while the file is open: the binding frees its state with the object
    try:
        f = fs.open(name, "rb")
    except (FileNotFoundError, LittleFSError):
        raise FileNotFoundError(f"{path}: no file {name}") from None
    with f:
        return bytes(f.read())


def listdir(path: Path | str, folder: str = "/") -> list[str]:
    return sorted(mount(path).listdir(folder))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m microtrain_tools.flashimg",
                                 description="littlefs flash images of the QEMU boards (board mode)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    n = sub.add_parser("new", help="a fresh image, with host files in it (FILE or FILE:NAME)")
    n.add_argument("image")
    n.add_argument("files", nargs="*")
    ls = sub.add_parser("ls", help="list a folder of the image")
    ls.add_argument("image")
    ls.add_argument("folder", nargs="?", default="/")
    g = sub.add_parser("get", help="copy a file out of the image")
    g.add_argument("image")
    g.add_argument("name")
    g.add_argument("out")
    a = ap.parse_args(argv)
    try:
        _run(a)
    except (ValueError, OSError, LittleFSError) as e:
        print(f"flashimg: {e}", file=sys.stderr)
        return 1
    return 0


def _run(a: argparse.Namespace) -> None:
    if a.cmd == "new":
        files = {}
        for spec in a.files:
            src, _, name = spec.partition(":")
            files[name or "/" + Path(src).name] = Path(src).read_bytes()
        new_image(a.image, files)
        print(f"{a.image}: {BLOCK_COUNT} blocks of {BLOCK_SIZE} bytes, {len(files)} files")
    elif a.cmd == "ls":
        for name in listdir(a.image, a.folder):
            print(name)
    else:
        Path(a.out).write_bytes(read_file(a.image, a.name))


if __name__ == "__main__":
    sys.exit(main())
