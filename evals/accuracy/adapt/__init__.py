"""The parts of `make adapt-eval` (evals/accuracy/adapt_eval.py): one module per adaptation method
(docs/adapt.md), each running the device side in the real micropython and the same method
on the host (numpy reference and / or PyTorch float32)."""
