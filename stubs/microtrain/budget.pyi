# microtrain.budget: training by a RAM budget - the activations backward reads, the per-board
# order boundary (docs/adapt.md, "Adapting with less").
from typing import Any

from microtrain.adam import Adam
from microtrain.model import Model
from microtrain.optim import SGD
from microtrain.zo import ZO

def saved(model: Model, idx: list[int], plan: Any = None) -> tuple[int, int, int]:
    """(trained layers' inputs, 1-bit masks, what the plan keeps) in bytes."""
def boundary(model: Model, budget: int, layers: Any = "last:2", mode: str = "int8",
             optimizer: SGD | Adam | None = None, batch: int = 16) -> tuple[int, int]:
    """(forward-only layers, memplan's bytes) for the budget."""
def hybrid(model: Model, budget: int, layers: Any = "last:2", mode: str = "int8",
           optimizer: SGD | Adam | None = None, batch: int = 16, **kw: Any) -> ZO:
    """The ZO with boundary()'s split."""
