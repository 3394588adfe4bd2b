# microtrain.memplan: the Trainer's memory check (docs/memory.md). Imported by Trainer on use.
from microtrain.model import Model
from microtrain.optim import _Optimizer

def need(model: Model, idx: list[int], mode: str, n_state: int,
         sparse: object | None, fold: bool | str = False, redo: bool = False,
         half: bool = False) -> list[tuple[str, int]]:
    """Heap bytes per item (gradients, optimiser state, master copies, layer copies, sparse
    buffers, backward buffers, loss) that a Trainer on layers idx allocates; fold: the
    gradients go into the momentum (SGD momentum: batch 1, or sums=False at a larger batch),
    no gradient sums; "now": each layer steps during backward (batch 1, plain SGD); redo:
    Trainer(recompute=True)."""

def check(model: Model, idx: list[int], mode: str, opt: _Optimizer, sparse: object | None,
          fold: bool | str = False, failed: bool = False, batch: int = 1, redo: bool = False) -> None:
    """MemoryError when need() exceeds the free heap (or failed), with the largest free block
    (the heap fragmented: the bytes free but not in one piece), naming what would fit in it
    (batch: the Trainer's, for the sums=False suggestion; redo: Trainer(recompute=True))."""

def run(model: Model, idx: list[int], mode: str, opt: _Optimizer, sparse: object | None,
        fold: bool | str = False, failed: bool = False, batch: int = 1, redo: bool = False) -> None:
    """check(), then forget the module (its code can be freed)."""

def forget() -> None:
    """Drop the module from sys.modules and from the package (its code can be freed)."""

def largest_free(free: int | None = None) -> int:
    """The largest block the heap can give now (bytes, a lower bound within 256 B), found by
    halving allocations between a size that fitted and one that failed; free: the free heap
    already measured (gc.mem_free()). 0 on CPython."""

def file_error(path: str, size: int) -> None:
    """MemoryError for a model file of size bytes that no free block holds: the size, the
    largest free block, the free heap and how to keep the model in flash; returns when a
    block that large is free now."""
