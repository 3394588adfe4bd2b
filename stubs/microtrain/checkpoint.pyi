# microtrain.checkpoint: atomic .mtm checkpoint writing (imported by Model.save).
from microtrain.model import Model
from microtrain.trainer import Trainer

def save(model: Model, path: str, trainer: Trainer | None = None) -> None: ...
