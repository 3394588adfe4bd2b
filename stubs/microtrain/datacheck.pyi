# microtrain.datacheck: a data set's samples checked before training (loaded by Trainer.fit).
from typing import Any

from microtrain._types import Samples
from microtrain.trainer import Trainer

def check(tr: Trainer, samples: Samples, who: str = "check") -> None:
    """Every (x, target) of samples as tr.step() takes them: ValueError / TypeError naming the
    sample, the rule and what to do."""
def check_sample(tr: Trainer, x: Any, y: Any, i: int, who: str) -> None:
    """One sample (i its index; -1 with x None: step's target only)."""
