"""pytest setup: make ``microtrain_tools`` (tools/), ``support`` (tests/) and ``evals`` importable.

The MicroPython binary under test is ``$MICROTRAIN_MICROPYTHON`` when set (see
``microtrain_tools.paths``), else the venv's unix port.
"""

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
for _p in (_ROOT, _ROOT / "tests", _ROOT / "tools"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
