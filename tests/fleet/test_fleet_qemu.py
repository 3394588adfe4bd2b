"""The board's part of a round on the project's QEMU M7 firmware with microtrain built in, in
board mode (256 KB heap),
driven over its serial REPL as `make fleet-eval` drives its QEMU boards
(tools/microtrain_tools/fleet_board.py ``serial:PORT``): rounds after the first, FedProx's
copy too, must fit the heap with a trainer live (a save, the training and the delta one after
the other in one interpreter), and leave the global model saved on the flash, loadable by the
host's validator, its trained layers the global values requantised.

The model, the samples and the round's script go onto the flash image from the host
(littlefs-python), to keep the test short; `make fleet-eval` deploys over the port."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from evals.accuracy.adapt import ncm_watch
from evals.lib import datasets as ds
from evals.lib import experiments as ex
from microtrain_tools import flashimg, fleet_board, fleet_codec, mtm
from microtrain_tools.mtd import write_mtd
from support.check_mcu import qemu_run

BOARD, HEAP = "m7fw", "256k"  # as fleet_eval's QEMU boards
CFG = {"model": "model.mtm", "data": "data.mtd", "train": "last:2", "mode": "mixed", "lr": 0.05,
       "momentum": 0.0, "batch": 8, "epochs": 1, "keep": 0.5}
SUBJECT = 3


@pytest.fixture(scope="module", autouse=True)
def _toolchain() -> None:
    """make setup installs them: a missing one is a broken setup, not a reason to skip."""
    for tool in ("qemu-system-arm", "arm-none-eabi-gcc"):
        assert shutil.which(tool), f"{tool} missing: run `make setup` (tools/setup.sh installs it)"


def image(work: Path, model: bytes, data: bytes) -> Path:
    """A flash image with the model, the board's samples and the round's main script (the
    package is in the firmware)."""
    files = {"/model.mtm": model, "/data.mtd": data, "/fleet_main.py": fleet_board.MAIN.encode()}
    return flashimg.new_image(work / "board.img", files)


def test_rounds_fit_the_qemu_m7_heap(tmp_path: Path) -> None:
    qemu_run.build(BOARD, boardmode=True)
    ref = ncm_watch.base_model()
    w = ds.watch_windows()
    idx = np.flatnonzero(w.subject == SUBJECT)
    write_mtd(tmp_path / "data.mtd", ex.quantize(ref.mtm, w.x[idx]), w.y[idx])
    img = image(tmp_path, ref.mtm.read_bytes(), (tmp_path / "data.mtd").read_bytes())
    sb = qemu_run.SerialBoard(BOARD, img, heap=HEAP)
    b = fleet_board.SerialBoard(sb.start())
    try:
        res, g0 = b.run({**CFG, "command": "export", "global": "g0.bin"}, {}, "g0.bin")
        fp, _, glob = fleet_codec.read_global(g0)
        assert fp == res["fingerprint"]
        for rnd, mu in ((1, 0.0), (2, 0.01)):  # FedProx keeps a copy: the least room
            res, up = b.round({**CFG, "seed": 1000 + rnd, "mu": mu}, fleet_codec.global_bytes(fp, rnd, glob))
            delta = fleet_codec.read_delta(up)
            assert (delta.round, delta.samples, delta.nbytes) == (rnd, len(idx), res["delta_bytes"])
            last = glob
            dense = delta.dense()
            glob = {k: (v + dense[k]).astype(np.float32) for k, v in glob.items()}
    finally:
        sb.stop()
    m = mtm.read(flashimg.read_file(img, "/fleet.mtm"))  # the last round's global model, from the flash
    for i in fleet_codec.layer_indices(last):
        ly = m.layers[i]
        sc = m.tensors[m.tensors[ly.weight].qscales].data.astype(np.float64)
        real = m.tensors[ly.weight].data.astype(np.float64).reshape(len(sc), -1) * sc[:, None]
        assert np.all(np.abs(real - last[f"L{i}.w"]) <= 0.5 * sc[:, None] * (1 + 1e-5))
