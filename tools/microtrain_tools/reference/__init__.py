"""Independent references the project is checked against.

- ``oracle``: numpy implementation of every kernel, written from docs/numerics.md;
- ``train_ref``: numpy implementation of a training step, written from docs/training.md;
- ``torch_ref``: PyTorch autograd references for the kernels' gradients.
"""
