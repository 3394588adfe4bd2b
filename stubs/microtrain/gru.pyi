# microtrain.gru: a GRU or LSTM layer's training (loaded by plan.backward_plan for a model with one):
# its backward through time, backward.BACKWARD[16] and [17], and its update, called by
# backward.Sums.apply.
from typing import Any

from microtrain.backward import BackwardPlan
from microtrain.model import Layer, Model

def gru(m: Model, bw: BackwardPlan, cur: dict[int, Any], scale: dict[int, float], ly: Layer, j: int,
        e: Any, s: float, policy: Any) -> None: ...
def apply(ly: Layer, mw: Any, mb: Any, t: Any, lr: float, s_x: float, r: int, row: Any) -> int: ...
