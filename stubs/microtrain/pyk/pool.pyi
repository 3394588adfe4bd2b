# microtrain.pyk.pool: the pure-Python kernels of usermod/microtrain/pool.c: same arguments,
# checks and bit-exact results as the native module's (docs/numerics.md).
from _microtrain import avgpool_s8_forward as avgpool_s8_forward
from _microtrain import avgpool_s8_grad_input as avgpool_s8_grad_input
from _microtrain import avgpool_s8_grad_input_act as avgpool_s8_grad_input_act
from _microtrain import global_avgpool_s8_forward as global_avgpool_s8_forward
from _microtrain import global_avgpool_s8_grad_input as global_avgpool_s8_grad_input
from _microtrain import maxpool_s8_forward as maxpool_s8_forward
from _microtrain import maxpool_s8_grad_input as maxpool_s8_grad_input
from _microtrain import maxpool_s8_grad_input_act as maxpool_s8_grad_input_act
from _microtrain import maxpool_s8_grad_input_act_l1 as maxpool_s8_grad_input_act_l1
