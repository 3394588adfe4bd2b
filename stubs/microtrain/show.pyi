# microtrain.show: Model.summary's printout, imported for the call and forgotten after it.
from microtrain.model import Model

def summary(m: Model, trained: int) -> None: ...
