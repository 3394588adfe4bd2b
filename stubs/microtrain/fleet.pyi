# microtrain.fleet: a board's part of a federated round (docs/fleet.md).
from collections.abc import Callable, Iterator
from typing import Any

from microtrain._types import Float32
from microtrain.model import Layer, Model
from microtrain.optim import SGD, Param

GLOBAL_MAGIC: bytes  # b"MTG1"
DELTA_MAGIC: bytes  # b"MTD1"
GLOBAL_HEAD: str  # struct format: magic, fingerprint, round, layers, 0
DELTA_HEAD: str  # magic, fingerprint, round, samples, train loss, train acc, layers, 0
LAYER_HEAD: str  # layer index, output channels, values per channel
DELTA_LAYER: str  # layer index, output channels, values per channel, channels sent, 0

def fingerprint(model: Model, idx: list[int]) -> int: ...

class Global:
    """The global file, checked against the model and read a layer at a time."""

    path: str
    layers: list[Layer]
    round: int
    def __init__(self, path: str, model: Model, idx: list[int], fp: int) -> None: ...
    def each(self, w_of: Callable[[Layer], Float32], b_of: Callable[[Layer], Float32]) -> Iterator[Layer]: ...

def apply(glob: Global) -> None: ...

class ProxSGD(SGD):
    """SGD with FedProx's proximal term mu * (w - w_global), on the board."""

    mu: float
    snap: dict[int, tuple[Any, Float32]]
    def __init__(self, mu: float, **kw: Any) -> None: ...
    def snapshot(self, layers: list[Layer]) -> None: ...
    def direction(self, p: Param, st: list[Float32] | None, n: int) -> None: ...

def write_delta(path: str, glob: Global, keep: float, fp: int, n: int, loss: float, acc: float) -> int: ...
def run_round(cfg: dict[str, Any]) -> dict[str, Any]: ...
def evaluate(cfg: dict[str, Any]) -> dict[str, Any]: ...
def export(cfg: dict[str, Any]) -> dict[str, Any]: ...
def main(path: str) -> None: ...
