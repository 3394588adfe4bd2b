# Adam (the optimiser module's update primitives), loaded on first use (microtrain.Adam):
# a model trained with SGD never holds its class.
import array

from microtrain.optim import F, _f32, _num, _Optimizer


class Adam(_Optimizer):
    """Adam (Kingma & Ba) with bias correction; state only for trained layers."""

    n_state = 2

    def __init__(self, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, standardize=False,
                 rounding="auto", state="f32"):
        super().__init__(lr, weight_decay, standardize, rounding, state)
        self.beta1 = _num("beta1", beta1, 0.0, False, 1.0)
        self.beta2 = _num("beta2", beta2, 0.0, False, 1.0)
        self.eps = _num("eps", eps, 0.0, True)
        self._bt = array.array("f", (1.0, 1.0, 1.0, 1.0))  # beta1^t, beta2^t (float32 products); next

    def resume_bias_correction(self, bits):
        from struct import pack_into

        pack_into("<2I", self._bt, 0, bits[0], bits[1])

    def begin(self, t):
        # beta^t as a running float32 product (exact on every build); kept on success only
        bt = self._bt
        bt[2] = bt[0] * _f32(self.beta1)
        bt[3] = bt[1] * _f32(self.beta2)

    def direction(self, p, st, n):
        self.prepare(p, n)
        bt = self._bt
        f = F.update_bf16_adam if self.half else F.update_f32_adam
        f(p.g, st[p.i], st[p.i + 2], p.k, p.touched, self.beta1, self.beta2, bt[2], bt[3], self.eps)

    def step(self, layers, n=1, lr=None):
        super().step(layers, n, lr)
        bt = self._bt
        bt[0], bt[1] = bt[2], bt[3]

    def __repr__(self):
        return "Adam(lr=%g, betas=(%g, %g), eps=%g, weight_decay=%g, standardize=%s, rounding=%r%s)" % (
            self.lr, self.beta1, self.beta2, self.eps, self.weight_decay, self.standardize, self.rounding,
            ", state='bf16'" if self.half else "")
