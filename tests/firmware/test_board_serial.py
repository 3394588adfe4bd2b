"""A QEMU board driven over its serial REPL, as its owner drives a board (``make board-test``'s
quick subset, support/board_test.py).

The M7's board-mode firmware (ports/qemu ``BOARDMODE=1``) with its UART on a pseudo-terminal and
a littlefs flash image made by littlefs-python: ``microtrain deploy --port`` puts the package and
a model on its flash, ``mpremote run`` runs a host script there (which reads a file the host
wrote into the image), one training step of the test-mcu runner runs on the board and saves its
checkpoint to the flash, ``mpremote fs cp`` pulls it back, the host's littlefs reads the same
bytes from the image, and they equal the float32 twin's checkpoint for the same step. And: the
port's own ``open`` / ``os`` on littlefs, exercised on the board, leave the tree the host's
littlefs reads; mpremote's Ctrl-C stops a main.py that never ends; the REPL protocol mpremote
relies on (raw REPL, raw paste, Ctrl-D soft reset), byte by byte.
"""

from __future__ import annotations

import errno
import shutil
import time
from pathlib import Path

import pytest
import serial  # pyserial: mpremote's own dependency

from microtrain_tools import flashimg
from support import board_test, check_mcu
from support.check_mcu import qemu_run

BOARD = "m7"


@pytest.fixture(scope="module", autouse=True)
def _toolchain() -> None:
    """make setup installs them: a missing one is a broken setup, not a reason to skip."""
    for tool in ("qemu-system-arm", "arm-none-eabi-gcc"):
        assert shutil.which(tool), f"{tool} missing: run `make setup` (tools/setup.sh installs it)"


def test_deploy_run_train_pull_over_the_serial_port() -> None:
    board_test.build([BOARD])
    work = check_mcu.training_setup()
    twin = check_mcu.twin_training(work, board_test.CHECK_CONFIG + 1, board_test.QUICK_STEPS)
    problems: list[str] = []
    r = board_test.check_board(BOARD, work, twin, board_test.QUICK_STEPS, problems)
    assert problems == []
    assert (r.deploy, r.run, r.train, r.pull, r.identical) == (True, True, True, True, True)


TEXT = "one\ntwo\nthree\n"  # what GLUE_SCRIPT writes to d/t.txt, in two steps

# The port's own open / os glue on littlefs (ports/common/mtlfs.c), exercised on the board; the
# host's littlefs (another build of the same library) then reads the tree it left.
GLUE_SCRIPT = """import os
os.mkdir("d")
os.chdir("d")
print("CWD", os.getcwd())
with open("t.txt", "w") as f:
    f.write("one\\ntwo\\n")
with open("t.txt", "a") as f:
    f.write("three\\n")
with open("t.txt") as f:
    print("LINES", [ln for ln in f])
with open("b.bin", "wb") as f:
    f.write(bytes(range(200)))
with open("b.bin", "r+b") as f:
    f.seek(100)
    f.write(b"XY")
    f.seek(-2, 2)
    print("TAIL", f.read(), f.tell())
    f.flush()
os.mkdir("sub")
os.chdir("sub")
os.chdir("..")
print("CWD", os.getcwd(), len(open("./sub/../../d/t.txt").read()))
os.rmdir("sub")
os.chdir("..")
print("CWD", os.getcwd())
print("STAT", os.stat("d")[0] == 0x4000, os.stat("d/b.bin")[0] == 0x8000, os.stat("d/b.bin")[6])
print("LIST", sorted(os.listdir("d")), sorted(e[0:2] for e in os.ilistdir("/d")))
free0 = os.statvfs("/")[3]
with open("d/big.bin", "wb") as f:
    f.write(bytearray(5 * 4096))
print("STATVFS", free0 - os.statvfs("/")[3] >= 5)
with open("d/new.txt", "w") as f:
    f.write("new")
os.rename("d/new.txt", "d/t.txt")
os.remove("d/big.bin")
for bad in (lambda: os.rmdir("d"), lambda: os.remove("d"), lambda: open("nope.txt"),
            lambda: os.chdir("d/t.txt")):
    try:
        bad()
        print("NO ERROR")
    except OSError as e:
        print("ERRNO", e.errno)
os.mkdir("e")
os.rmdir("e")
os.sync()
print("DONE")
"""


def test_open_and_os_on_the_flash(tmp_path: Path) -> None:
    board_test.build([BOARD])
    image = flashimg.new_image(tmp_path / "flash.img")
    (tmp_path / "glue.py").write_text(GLUE_SCRIPT)
    with qemu_run.SerialBoard(BOARD, image) as sb:
        p = board_test.mpremote(sb.port, "run", str(tmp_path / "glue.py"), timeout=120)
    lines = p.stdout.splitlines()
    assert p.returncode == 0 and lines[-1] == "DONE", p.stdout + p.stderr + sb.output()
    assert lines[:-1] == [
        "CWD /d",
        "LINES ['one\\n', 'two\\n', 'three\\n']",
        f"TAIL {bytes([198, 199])!r} 200",
        f"CWD /d {len(TEXT)}",
        "CWD /",
        "STAT True True 200",
        "LIST ['b.bin', 't.txt'] [('b.bin', 32768), ('t.txt', 32768)]",
        "STATVFS True",
        *(f"ERRNO {e}" for e in (errno.ENOTEMPTY, errno.EISDIR, errno.ENOENT, errno.ENOTDIR)),
    ]
    fs = flashimg.mount(image)
    assert sorted(fs.listdir("/")) == ["d"]
    assert sorted(fs.listdir("/d")) == ["b.bin", "t.txt"]
    with fs.open("/d/t.txt", "r") as f:
        assert f.read() == "new"  # renamed over the old file
    want = bytearray(range(200))
    want[100:102] = b"XY"
    with fs.open("/d/b.bin", "rb") as f:
        assert f.read() == want


def test_ctrl_c_stops_a_running_main_py(tmp_path: Path) -> None:
    """main.py runs at power-on and never ends; mpremote's Ctrl-C stops it, as on a board, and
    the board answers (the loop's counter shows main.py had been running)."""
    board_test.build([BOARD])
    image = flashimg.new_image(tmp_path / "flash.img", {"/main.py": b"n = 0\nwhile True:\n    n += 1\n"})
    with qemu_run.SerialBoard(BOARD, image) as sb:
        p = board_test.mpremote(sb.port, "resume", "exec", "print('ALIVE', n > 1000)", timeout=60)
    assert p.returncode == 0 and p.stdout.splitlines() == ["ALIVE True"], p.stdout + p.stderr + sb.output()


def _read_until(port: serial.Serial, end: bytes, timeout: float = 20) -> bytes:
    data = b""
    t0 = time.monotonic()
    while not data.endswith(end):
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"no {end!r} from the board; got {data!r}")
        data += port.read(1)
    return data


def _read_n(port: serial.Serial, n: int, timeout: float = 20) -> bytes:
    data = b""
    t0 = time.monotonic()
    while len(data) < n and time.monotonic() - t0 < timeout:
        data += port.read(n - len(data))
    return data


def test_repl_protocol_on_the_uart(tmp_path: Path) -> None:
    """What mpremote relies on, byte by byte on the serial port: the friendly REPL's banner and
    "\\r\\n" line ends, Ctrl-A to the raw REPL, raw-paste mode (Ctrl-E A Ctrl-A: "R\\x01" and a
    flow-control window), Ctrl-D in the raw REPL: a soft reset that keeps the flash and clears
    the interpreter."""
    board_test.build([BOARD])
    image = flashimg.new_image(tmp_path / "flash.img")
    with qemu_run.SerialBoard(BOARD, image) as sb, serial.Serial(sb.port, timeout=0.2) as port:
        port.write(b"\r")
        _read_until(port, b">>> ")
        port.write(b"x = 6 * 7\rprint(x)\r")
        assert _read_until(port, b"42\r\n>>> ").endswith(b">>> print(x)\r\n42\r\n>>> ")
        port.write(b"\x01")
        _read_until(port, b"raw REPL; CTRL-B to exit\r\n>")
        port.write(b"\x05A\x01")
        assert _read_n(port, 2) == b"R\x01"  # raw paste understood
        window = int.from_bytes(_read_n(port, 2), "little")
        assert _read_n(port, 1) == b"\x01" and window > 0
        code = b"open('kept.txt', 'w').write('on flash')\nprint(x + 1)\n"
        assert len(code) <= window
        port.write(code + b"\x04")
        out = _read_until(port, b"\x04>", timeout=30)
        assert out == b"\x0443\r\n\x04\x04>", out  # end of input acknowledged, stdout, no error
        port.write(b"\x04")  # Ctrl-D at the raw prompt: soft reset
        out = _read_until(port, b"raw REPL; CTRL-B to exit\r\n>")
        assert out.startswith(b"OK\r\nMPY: soft reboot\r\n"), out
        port.write(b"print(open('kept.txt').read(), 'x' in globals())\x04")
        out = _read_until(port, b"\x04>", timeout=30)
        assert out == b"OKon flash False\r\n\x04\x04>", out
