# microtrain.memplan: the Trainer's memory check (docs/memory.md). Imported by Trainer on use.
from microtrain.model import Model
from microtrain.optim import _Optimizer

def need(model: Model, idx: list[int], mode: str, n_state: int,
         sparse: object | None, fold: bool = False) -> list[tuple[str, int]]:
    """Heap bytes per item (gradients, optimiser state, master copies, layer copies, sparse
    buffers, backward buffers, loss) that a Trainer on layers idx allocates; fold: the
    gradients go into the momentum (batch 1, SGD momentum), no gradient sums."""

def check(model: Model, idx: list[int], mode: str, opt: _Optimizer, sparse: object | None,
          fold: bool = False, failed: bool = False) -> None:
    """MemoryError when need() exceeds the free heap (or failed), naming what would fit."""

def run(model: Model, idx: list[int], mode: str, opt: _Optimizer, sparse: object | None,
        fold: bool = False, failed: bool = False) -> None:
    """check(), then forget the module (its code can be freed)."""
