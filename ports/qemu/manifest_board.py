# ruff: noqa: F821  (module is defined by MicroPython's makemanifest.py)
# Frozen-code manifest of the BOARDMODE=1 firmware (Makefile): the port's small
# json module, which a board's firmware has built in (BUILTIN=1 freezes it too).
module("json.py", base_path="../common/lib")
