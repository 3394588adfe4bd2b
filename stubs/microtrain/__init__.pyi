"""Type stubs of the ``microtrain`` device package (python_lib/microtrain).

On-device training of small int8 neural networks for MicroPython. The full
reference is docs/api.md; these stubs are for editors and type checkers on the
host and are not copied to boards. Submodules are stubbed too (``microtrain.model``
etc.), but everything a program needs is re-exported here.
"""

from microtrain.adam import Adam as Adam
from microtrain.data import FileDataset as FileDataset
from microtrain.data import Subset as Subset
from microtrain.kern import NATIVE as NATIVE
from microtrain.lora import LoRA as LoRA
from microtrain.loss import argmax as argmax
from microtrain.loss import bce as bce
from microtrain.loss import cross_entropy as cross_entropy
from microtrain.loss import mse as mse
from microtrain.model import Layer as Layer
from microtrain.model import Model as Model
from microtrain.model import Tensor as Tensor
from microtrain.model import load as load
from microtrain.optim import SGD as SGD
from microtrain.proto import PrototypeHead as PrototypeHead
from microtrain.replay import Replay as Replay
from microtrain.schedule import Constant as Constant
from microtrain.schedule import Cosine as Cosine
from microtrain.schedule import StepLR as StepLR
from microtrain.sparse import DynamicSparse as DynamicSparse
from microtrain.sparse import StaticSparse as StaticSparse
from microtrain.trainer import Trainer as Trainer
from microtrain.zo import ZO as ZO

__version__: str
__all__: tuple[str, ...]
