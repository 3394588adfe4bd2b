"""Evaluations on real data (not installed), grouped by job: accuracy/ (parity, training
results), benchmarks/ (instruction counts, host time, heap, firmware size) and lib/ (data sets,
reference models, the device-run protocol they share).

They use the installed host tools (microtrain_tools) and the real MicroPython binaries;
nothing in tools/ imports them.
"""
