"""Independent references the project is checked against.

- ``oracle``: numpy implementation of every kernel, written from docs/numerics.md;
- ``train_ref``: numpy implementation of a training step, written from docs/training.md;
- ``mpfloat``: MicroPython's single-precision Python floats (train_ref's ``floats="float32"``);
- ``torch_ref``: PyTorch autograd references for the kernels' gradients.
"""
