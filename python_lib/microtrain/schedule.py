# Learning-rate schedules: callables (lr0, epoch, epochs) -> lr, for Trainer(schedule=...).
# Apart from the optimisers (microtrain.optim) so that training with the default constant
# rate loads none of these classes (docs/memory.md).
import math


def _rate(what, v, rule, hi):
    # checked when the schedule is made: at the first epoch's end it would stop a fit half done;
    # hi given: 0 < v <= hi, else 0 <= v
    if type(v) is not float and type(v) is not int:
        raise TypeError("%s must be a number %s, got %r" % (what, rule, v))
    if v - v != 0 or not (0.0 < v <= hi if hi is not None else v >= 0.0):
        raise ValueError("%s must be a finite number %s, got %r" % (what, rule, v))


class Constant:
    """lr stays at its initial value."""

    def __call__(self, lr0, epoch, epochs):
        return lr0


class StepLR:
    """lr0 * gamma ** (epoch // step)."""

    def __init__(self, step=10, gamma=0.1):
        if type(step) is not int or step < 1:
            raise ValueError("StepLR: step must be an int >= 1 (epochs between two decays), got %r" % (step,))
        _rate("StepLR: gamma", gamma, "in (0, 1] (the factor of each decay)", 1.0)
        self.step, self.gamma = step, gamma

    def __call__(self, lr0, epoch, epochs):
        return lr0 * self.gamma ** (epoch // self.step)


class Cosine:
    """Cosine decay from lr0 (first epoch) to lr_min (last epoch)."""

    def __init__(self, lr_min=0.0):
        _rate("Cosine: lr_min", lr_min, ">= 0 (the last epoch's rate)", None)
        self.lr_min = lr_min

    def __call__(self, lr0, epoch, epochs):
        t = epoch / (epochs - 1) if epochs > 1 else 0.0
        return self.lr_min + 0.5 * (lr0 - self.lr_min) * (1.0 + math.cos(math.pi * t))
