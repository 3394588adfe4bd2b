"""The model and samples the training campaigns use: the digits CNN of support.digits_model
(converted from PyTorch) and its held-out digits as a .mtd file."""

from __future__ import annotations

from pathlib import Path

from microtrain_tools.mtd import write_mtd
from support.digits_model import digits_model
from support.reliability import BUILD


def files(n: int = 32) -> tuple[Path, Path]:
    """(model.mtm, data.mtd) with n samples, written once under build/reliability/."""
    d = BUILD / f"train_{n}"
    model, data = d / "model.mtm", d / "data.mtd"
    if not (model.exists() and data.exists()):
        d.mkdir(parents=True, exist_ok=True)
        dm = digits_model(n)
        model.write_bytes(dm.mtm)
        write_mtd(data, dm.x, dm.labels)
    return model, data
