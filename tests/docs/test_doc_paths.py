"""Every repository path named in the docs, READMEs and code exists (tests/support/doc_paths.py,
also run by `make lint`), and the rule itself tells a stale path from a good one."""

from __future__ import annotations

import pytest

from support import doc_paths as dp


@pytest.fixture(scope="module")
def tree() -> dp.Tree:
    return dp.Tree()


def test_every_named_path_exists() -> None:
    misses = dp.check()
    new = [str(m) for m in misses if (m.file, m.path) not in dp.KNOWN]
    assert not new, "stale paths (fix them, or write another tree's path from its root):\n" + "\n".join(new)


def test_known_set_only_shrinks() -> None:
    """Each KNOWN entry still misses: a fixed one leaves the set."""
    found = {(m.file, m.path) for m in dp.check()}
    assert dp.KNOWN <= found, sorted(dp.KNOWN - found)


def _paths(tree: dp.Tree, text: str, name: str = "docs/x.md") -> list[str]:
    return [m.path for m in dp.check_text(tree, name, text)]


def test_stale_paths_are_found(tree: dp.Tree) -> None:
    assert _paths(tree, "see `tools/microtrain_tools/oracle.py`") == ["tools/microtrain_tools/oracle.py"]
    assert _paths(tree, "(tests/test_firmware.py checks it)") == ["tests/test_firmware.py"]
    assert _paths(tree, "evals/mp/bench_*.c") == ["evals/mp/bench_*.c"]
    braces = "evals/models/fmnist_transfer.{pt,onnx}"  # every alternative must exist
    assert _paths(tree, braces) == [braces]
    assert _paths(tree, "python -m evals.parity") == ["evals.parity"]


def test_good_paths_pass(tree: dp.Tree) -> None:
    text = ("`tools/microtrain_tools/reference/oracle.py`, tests/firmware/test_firmware.py, docs/, "
            "evals/mp/bench_*.py, evals/models/fmnist_transfer.{pt,json}, usermod/microtrain/<file>.c, "
            "python -m evals.accuracy.parity, python -m microtrain_tools.cli")
    assert _paths(tree, text) == []


def test_other_trees_and_build_outputs_pass(tree: dp.Tree) -> None:
    text = ("micropython/tools/manifestfile.py, $MPY/ports/rp2/build-RPI_PICO/firmware.uf2, "
            "$(MPY_DIR)/tools/mpy_ld.py, qemu/docs/devel/tcg-plugins.rst, make -C ./ports/raspberrypi, "
            "mv usermod/microtrain/_microtrain.mpy")
    assert _paths(tree, text) == []


def test_markdown_links_resolve_from_their_file(tree: dp.Tree) -> None:
    ok = "[a](../evals/README.md) [b](numerics.md#kernels) [c](https://example.org/x) [d](#top)"
    assert _paths(tree, ok, "docs/x.md") == []
    bad = "[a](evals/README.md) [b](../docs/nope.md)"
    assert _paths(tree, bad, "docs/x.md") == ["evals/README.md", "../docs/nope.md"]
    # the same link is good from the root
    assert _paths(tree, "[a](evals/README.md)", "README.md") == []
