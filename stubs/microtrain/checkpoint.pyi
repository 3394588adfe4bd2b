# microtrain.checkpoint: atomic .mtm checkpoint writing (imported by Model.save).
from microtrain.model import Model
from microtrain.trainer import Trainer

SCALE_MIN: float
SCALE_MAX: float

def check(model: Model, trainer: Trainer | None = None) -> None: ...
def save(model: Model, path: str, trainer: Trainer | None = None) -> None: ...
def os_error(e: OSError, what: str, path: str, need: int = 0) -> OSError: ...
