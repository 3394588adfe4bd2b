"""ports/webassembly: the lab's own WebAssembly build (C kernels built in), run under Node as the
page runs it, trains the lab's model with losses identical to the unix MicroPython's bit for bit,
and keeps live objects while a full heap grows (its GC runs only between calls from JavaScript).
The build itself takes a minute or more, so it is `make wasm`'s (make lab-test builds it): without
it these tests are skipped."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from microtrain_tools import lab, paths

RUNNER = paths.ROOT / "ports" / "webassembly" / "run_node.mjs"
STEPS = 12

pytestmark = pytest.mark.skipif(lab.own_wasm() is None or shutil.which("node") is None,
                                reason="no build/wasm (make wasm) or no node")


def _node(site: str, heap: int, script: str) -> str:
    p = subprocess.run(["node", str(RUNNER), str(lab.OWN_WASM), site, str(heap)], input=script,
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def test_lab_steps_identical_to_host(tmp_path: Path) -> None:
    site = lab.build_site(tmp_path / "site")
    host, host_out = lab.host_run(site, STEPS)
    out = _node(str(site), 8 << 20, "import sys\nsys.path.insert(0, '/lib')\n" + lab._script(STEPS))
    page = [ln[5:] for ln in out.splitlines() if ln.startswith("STEP ")]
    assert "native kernels: True" in out
    assert len(host) == STEPS
    assert [ln.split()[:2] for ln in page] == [ln.split()[:2] for ln in host]
    saved = [ln for ln in out.splitlines() if ln.startswith("saved ")]
    assert saved and saved == [ln for ln in host_out.splitlines() if ln.startswith("saved ")]


def test_full_heap_grows_and_keeps_live_objects() -> None:
    # 3 MB kept alive in a 256 KB heap within one call: the heap must grow, nothing live may be freed
    script = ("keep = []\nfor i in range(3000):\n    b = bytearray(1000)\n    b[0] = i & 255\n"
              "    b[999] = (i * 7) & 255\n    keep.append(b)\n    junk = [i] * 50\n"
              "print('GC', len(keep), sum(b[0] + b[999] for b in keep))\n")
    out = _node("-", 256 << 10, script)
    want = sum((i & 255) + ((i * 7) & 255) for i in range(3000))
    assert out.split() == ["GC", "3000", str(want)]
