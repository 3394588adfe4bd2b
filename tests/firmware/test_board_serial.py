"""A QEMU board driven over its serial REPL, as its owner drives a board (``make board-test``'s
quick subset, support/board_test.py).

The M7's board-mode firmware (ports/qemu ``BOARDMODE=1``) with its UART on a pseudo-terminal and
a littlefs flash image made by littlefs-python: ``microtrain deploy --port`` puts the package and
a model on its flash, ``mpremote run`` runs a host script there (which reads a file the host
wrote into the image), one training step of the test-mcu runner runs on the board and saves its
checkpoint to the flash, ``mpremote fs cp`` pulls it back, the host's littlefs reads the same
bytes from the image, and they equal the float32 twin's checkpoint for the same step.
"""

from __future__ import annotations

import shutil

import pytest

from support import board_test, check_mcu

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
