# Learning-rate schedules: callables (lr0, epoch, epochs) -> lr, for Trainer(schedule=...).
# Apart from the optimisers (microtrain.optim) so that training with the default constant
# rate loads none of these classes (docs/memory.md).
import math


class Constant:
    """lr stays at its initial value."""

    def __call__(self, lr0, epoch, epochs):
        return lr0


class StepLR:
    """lr0 * gamma ** (epoch // step)."""

    def __init__(self, step=10, gamma=0.1):
        self.step, self.gamma = step, gamma

    def __call__(self, lr0, epoch, epochs):
        return lr0 * self.gamma ** (epoch // self.step)


class Cosine:
    """Cosine decay from lr0 (first epoch) to lr_min (last epoch)."""

    def __init__(self, lr_min=0.0):
        self.lr_min = lr_min

    def __call__(self, lr0, epoch, epochs):
        t = epoch / (epochs - 1) if epochs > 1 else 0.0
        return self.lr_min + 0.5 * (lr0 - self.lr_min) * (1.0 + math.cos(math.pi * t))
