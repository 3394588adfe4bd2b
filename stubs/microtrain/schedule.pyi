# microtrain.schedule: learning-rate schedules, callables (lr0, epoch, epochs) -> lr.

class Constant:
    """lr stays at its initial value."""

    def __call__(self, lr0: float, epoch: int, epochs: int) -> float: ...

class StepLR:
    """lr0 * gamma ** (epoch // step)."""

    step: int
    gamma: float
    def __init__(self, step: int = 10, gamma: float = 0.1) -> None: ...
    def __call__(self, lr0: float, epoch: int, epochs: int) -> float: ...

class Cosine:
    """Cosine decay from lr0 (first epoch) to lr_min (last epoch)."""

    lr_min: float
    def __init__(self, lr_min: float = 0.0) -> None: ...
    def __call__(self, lr0: float, epoch: int, epochs: int) -> float: ...
