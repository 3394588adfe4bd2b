"""The training tests' models, built once per session (tests/support/training_cases.py)."""

from __future__ import annotations

import pytest

from support.training_cases import Setup, build_setups


@pytest.fixture(scope="session")
def setups(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Setup]:
    return build_setups(tmp_path_factory.mktemp("training"))
