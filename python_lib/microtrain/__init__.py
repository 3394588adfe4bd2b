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
from microtrain.optim import SGD, Adam, Constant, Cosine, StepLR
from microtrain.sparse import DynamicSparse, StaticSparse
from microtrain.trainer import Trainer

__version__ = "0.1.0"
__all__ = ["NATIVE", "load", "Model", "Layer", "Tensor", "Trainer", "SGD", "Adam", "Constant", "Cosine",
           "StepLR", "DynamicSparse", "StaticSparse", "cross_entropy", "mse", "bce", "argmax", "FileDataset",
           "Subset"]
