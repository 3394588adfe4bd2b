# microtrain.adam: Adam, loaded on first use (microtrain.Adam).
from microtrain.optim import _Optimizer

class Adam(_Optimizer):
    beta1: float
    beta2: float
    eps: float
    def __init__(self, lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.0, standardize: bool = False, rounding: str = "auto",
                 state: str = "f32") -> None: ...
