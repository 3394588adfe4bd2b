"""microtrain: on-device training of small int8 neural networks for MicroPython.

    import microtrain as mt
    model = mt.load("model.mtm")
    trainer = mt.Trainer(model, train="last:2", mode="mixed", optimizer=mt.SGD(lr=0.05, momentum=0.9))
    for x, label in samples:
        trainer.step(x, label)
    model.save("adapted.mtm")
"""
from microtrain.data import FileDataset, Subset
from microtrain.kern import NATIVE
from microtrain.loss import argmax, bce, cross_entropy, mse
from microtrain.model import Layer, Model, Tensor, load
from microtrain.optim import SGD
from microtrain.trainer import Trainer

__version__ = "0.1.0"


# Adam, the sparse policies, the schedules and the adaptation methods (docs/adapt.md) load on
# first use, before a Trainer exists: no heap until then. (Trainer and SGD are imported here:
# compiled from source later, next to a model's buffers, they would leave a small heap in pieces.)
# name, its module, ...: a tuple of constants stays in the bytecode (in flash when frozen), a
# dict would be built in RAM
_LAZY = ("Adam", "adam", "DynamicSparse", "sparse", "StaticSparse", "sparse", "Constant", "schedule",
         "Cosine", "schedule", "StepLR", "schedule")


def __getattr__(name):
    lazy = None
    for i in range(0, len(_LAZY), 2):
        if _LAZY[i] == name:
            lazy = "microtrain." + _LAZY[i + 1]
    if lazy is not None:
        import sys

        __import__(lazy)
        v = getattr(sys.modules[lazy], name)
        globals()[name] = v  # found directly from now on
    elif name == "PrototypeHead":
        from microtrain.proto import PrototypeHead as v
    elif name == "Replay":
        from microtrain.replay import Replay as v
    elif name == "ZO":
        from microtrain.zo import ZO as v
    elif name == "LoRA":
        from microtrain.lora import LoRA as v
    elif name in _SUBMODULES:
        # MicroPython's `from microtrain import sub` asks this function before it
        # imports the submodule: import it here, as the import would (dir() too)
        import sys

        __import__("microtrain." + name)
        v = sys.modules["microtrain." + name]
    else:
        raise AttributeError(name)
    return v


_SUBMODULES = ("adam", "backward", "cache", "checkpoint", "data", "fleet", "fmt", "kern", "lora", "loss",
               "memplan", "model", "optim", "plan", "proto", "pyk", "quant", "replay", "schedule", "sparse",
               "stepwise", "trainer", "zo")
__all__ = ("NATIVE", "load", "Model", "Layer", "Tensor", "Trainer", "SGD", "Adam", "Constant", "Cosine",
           "StepLR", "DynamicSparse", "StaticSparse", "cross_entropy", "mse", "bce", "argmax", "FileDataset",
           "Subset", "PrototypeHead", "Replay", "ZO", "LoRA")  # the last four: __getattr__ above
