"""Evaluations on real data (not installed): parity, training results, benchmarks.

The back ends of `make parity`, `make train-eval`, `make bench-mcu` and of the
scripts in examples/. They use the installed host tools (microtrain_tools) and
the real MicroPython binaries; nothing here is imported by tools/ or tests/.
"""
