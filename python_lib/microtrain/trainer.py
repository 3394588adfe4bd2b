# The part between the "generated" markers is generated from tools/microtrain_tools/mtm_layout.py.
# The training loop, built only from public pieces (Model.forward,
# cross_entropy, Model.backward, an optimiser, a sparse policy).
import gc
import json

from micropython import const

from microtrain import kern, optim
from microtrain.fmt import trainer_record
from microtrain.loss import LOSSES, argmax
from microtrain.quant import zeros

# --- generated from tools/microtrain_tools/mtm_layout.py: begin
# (`python -m microtrain_tools.mtm_layout`): do not edit by hand.
# The .mtm constants this module reads, private: inlined, no globals entry.
_KIND_STATE = const(2)
_OP_GRU = const(16)
# --- generated: end

MODES = ("int8", "mixed", "float32")


try:
    from time import ticks_diff, ticks_ms, ticks_us
except ImportError:  # CircuitPython boards: no ticks_*, monotonic clocks instead
    try:
        from time import monotonic_ns as _ns
    except ImportError:  # builds without long ints: a float clock
        from time import monotonic

        def _ns():
            return int(monotonic() * 1e9)

    def ticks_us():
        return _ns() // 1000

    def ticks_ms():
        return _ns() // 1000000

    def ticks_diff(a, b):
        return a - b


def _heap():
    return gc.mem_alloc()


def _live():
    """Heap bytes in use after a collection: the training working set."""
    gc.collect()
    return gc.mem_alloc()


def _sample(samples, i):
    s = samples[i]
    if not isinstance(s, (tuple, list)) or len(s) != 2:
        raise TypeError("sample %d must be an (x, label) pair, got %s" % (i, type(s).__name__))
    return s


def _mem_free():
    f = getattr(gc, "mem_free", None)  # not on CPython
    if f is None:
        return 1 << 62
    gc.collect()
    return f()


def _memcheck(model, idx, mode, opt, sparse, fold, batch, failed=False, redo=False):
    # microtrain.memplan: MemoryError with the bytes needed per item, the free heap and what
    # would fit. Compiling it needs heap too: if that fails, the caller's MemoryError stands.
    try:
        from microtrain.memplan import run
    except MemoryError:
        if failed:
            return
        raise
    run(model, idx, mode, opt, sparse, fold, failed, batch, redo)

def _nosums(how):
    # memplan's name of the update mode: False (sums), True (into the momentum), "copy" (into the
    # momentum, with its copy), "now" (steps in backward)
    return "now" if how == "backward" else "copy" if how == "copy" else how == "momentum"


class Trainer:
    """Train `model` on (x, label) samples.

    train:     "last:N", "all", a layer name or a list of names / indices.
    mode:      "int8" (fully quantised update), "mixed" (float32 master copy
               of the last trained layer), "float32" (master copies of all).
    optimizer: SGD / Adam (default SGD(lr=0.01, momentum=0.9)).
    sparse:    None, DynamicSparse(...) or StaticSparse(...).
    batch:     samples per update; gradients are summed into one float32
               buffer per trained layer, so RAM does not grow with it. At 1 with
               SGD momentum there are no sums: each gradient goes into the
               momentum; with plain SGD each layer steps during backward, a few
               output channels at a time (the same bits; docs/memory.md). Larger
               batches with SGD momentum: no sums with sums=False.
    schedule:  "constant", "step", "cosine", or callable(lr0, epoch, epochs).
    log:       path of a JSON-lines training log (or None).
    log_every: a "step" log record every that many samples (0: none).
    seed:      seed of the per-epoch shuffle in fit (xorshift32); None: continue
               the shuffle sequence a checkpoint saved (else seed 1).
    health:    None (default, class labels): count the samples whose logits reach the int8
               clamp (max / min of the output, no allocation): fit warns "saturated" after
               an epoch where more than 5 % did (docs/training.md). True: count the trained
               layers' saturated outputs (two native calls per trained layer and sample):
               per-epoch "health" in fit's results and the log, with warnings when training
               saturates or diverges (~5.7 KB of live heap for last:2, 14 KB of minimum heap:
               docs/training.md). False: neither.
    sums:      None (default): float32 gradient sums, except at batch 1 with SGD (no
               weight decay or standardize) and no sparse policy: with momentum, on a
               build whose float kernels have an FPU, each gradient goes into the
               momentum (no sums; the same bits; docs/memory.md); without momentum each
               layer steps during backward through an 8 KB gradient window (no sums;
               the same bits). False: those modes wherever batch 1 and SGD allow them
               (saves 4 B per trained parameter; momentum: costs a second float pass per
               parameter per update in software float and slows a sparse backward; plain
               SGD with a sparse policy: the stochastic-rounding draws follow the update
               order, last layer first, so the bits differ from the sums'). At batch n > 1
               with SGD momentum and no sparse policy, False folds the batch into the
               momentum: v = momentum * v at the batch's first sample, each gradient
               added into v times 1 / n, the step applies v (v = m v + sum / n, float32
               rounded otherwise than the sums; a short last batch weighs 1 / n per
               sample too; a gradient-scale failure steps nothing, the layers above the
               failing one keep the sample's share). Refused there with a sparse
               policy or without momentum. True: always the sums.
    recompute: where no idle buffer holds backward's int32 grad-input scratch, put it in
               a conv / linear output read only by a pool (disjoint windows) and run that
               layer's forward again before the pool's backward (docs/memory.md): the
               transfer CNN `all` saves its 12.3 KB scratch for +11 % instructions per
               training step (M7); the same bits. Without Health, the plan is then placed
               through backward where that is smaller (that output not kept after the
               forward; docs/memory.md). Where the gradient goes into the momentum (no
               gradient sums, no sparse policy), the first trained conv whose only reader
               is a one-window average pool is made a few channels at a time, and again
               in backward (over.py): its output never exists whole. Off by default.
    adapt_ranges: double a trained layer's output range between updates when more
               than 1/64 of its outputs saturated (docs/training.md, "Health and range
               adaptation"): from-scratch and large-lr training keep learning instead
               of clamping. Implies health.

    Every argument is checked before the model is touched: a failed
    construction raises one ValueError / TypeError and leaves the model (and
    any trainer already using it) as it was.
    loss:      "xent" (softmax cross-entropy, targets are class indices), "mse"
               (mean squared error), "bce" (binary cross-entropy with logits),
               or callable(model, target, out) -> (loss, err, err_scale)
               (docs/api.md, "Losses"). Samples are (x, target) pairs.
    replay:    None or a microtrain.replay.Replay: after each sample, it may keep
               the sample's inputs of the first trained layer and mixes in
               replayed samples (docs/adapt.md, "Replay").
    """

    # set by fit only: defaults on the class (an instance attribute costs a slot of its dict)
    health = None  # the last epoch's health record (fit)
    heap_live = 0  # largest live heap at an epoch end (bytes)

    _start = 0  # first layer step() runs: `first` while fit's feature cache supplies its inputs

    def __init__(self, model, train="last:1", mode="int8", optimizer=None, sparse=None, batch=1,
                 schedule=None, log=None, log_every=100, seed=None, loss="xent", replay=None, health=None,
                 adapt_ranges=False, sums=None, recompute=False):
        self._check_args(mode, batch, optimizer, sparse, log_every, seed, log, loss, replay, health,
                         adapt_ranges, recompute)
        sched = optim.schedule(schedule)
        idx = model.select(train)  # raises on a bad spec before anything changes
        self.model = model
        self.mode = mode
        self.opt = optimizer if optimizer is not None else optim.SGD(lr=0.01, momentum=0.9)
        self.sparse = sparse
        self.batch = batch
        self.schedule = sched
        how = self._update_mode(sums, idx)
        model.drop_plans(idx[0])  # the inference plan's buffers: the training plan replaces them
        self._check_memory(idx, how, recompute)
        self._set_up(idx, how, health or adapt_ranges, adapt_ranges, recompute)
        self.opt.set_rate(self.opt.lr)  # each trainer starts at the optimiser's rate
        self._start_log(seed, log, log_every)
        if health is None and not adapt_ranges and self.classes:  # the logits' clamp, counted in step
            act = 0  # (logits with a fused activation: its floor is no clamp, not counted)
            for ly in model.layers:
                if ly.output == model.output.index:
                    act = ly.act
            if not act:
                self._mon = 0  # (an int: the count itself, no attribute of its own)

    # -- the steps of __init__ ------------------------------------------------------------

    def _check_args(self, mode, batch, optimizer, sparse, log_every, seed, log, loss, replay, health,
                    adapt_ranges, recompute):
        # every argument, before the model is touched
        if mode not in MODES:
            raise ValueError("Trainer: mode must be one of %s, got %r" % (MODES, mode))
        if type(batch) is not int or batch < 1:
            raise ValueError("Trainer: batch must be an int >= 1, got %r" % (batch,))
        if optimizer is not None and not isinstance(optimizer, optim._Optimizer):
            raise TypeError("Trainer: optimizer must be an optimiser object such as SGD(lr=0.01) or "
                            "Adam(), got %r" % (optimizer,))
        if sparse is not None and not hasattr(sparse, "observe"):
            raise TypeError("Trainer: sparse must be None, DynamicSparse(...) or StaticSparse(...), got %r"
                            % (sparse,))
        if type(log_every) is not int or log_every < 0:
            raise ValueError("Trainer: log_every must be an int >= 0, got %r" % (log_every,))
        if seed is not None and type(seed) is not int:
            raise ValueError("Trainer: seed must be an int or None, got %r" % (seed,))
        if log is not None and not isinstance(log, str):
            raise TypeError("Trainer: log must be a path (str) or None, got %r" % (log,))
        if callable(loss):
            self.loss_fn = loss
        elif loss in LOSSES:
            self.loss_fn = LOSSES[loss]
        else:
            raise ValueError("Trainer: loss must be 'xent', 'mse', 'bce' or a callable, got %r" % (loss,))
        if replay is not None and (loss != "xent" or not hasattr(replay, "after_step")):
            raise ValueError("Trainer: replay must be None or a Replay(...), with the 'xent' loss")
        self.replay = replay
        self.classes = loss == "xent"  # accuracy and confusion only for class labels
        if type(adapt_ranges) is not bool or type(recompute) is not bool or not (health is None or
                                                                                 type(health) is bool):
            raise ValueError("Trainer: adapt_ranges and recompute must be True or False, health None, "
                             "True or False")

    def _update_mode(self, sums, idx):
        # which update mode (backward.py, stepwise.py) the settings give: "sums", "momentum" (each
        # gradient into the SGD momentum) or "backward" (plain SGD at batch 1: each layer steps during
        # backward); a trained GRU or LSTM keeps the gradient sums (its update: backward.Sums)
        o, batch, sparse = self.opt, self.batch, self.sparse
        for i in idx:
            if self.model.layers[i].op >= _OP_GRU:  # (GRU, LSTM)
                if sums is False or sparse is not None or self.mode == "float32" or o.standardize or \
                        o.weight_decay:
                    raise ValueError("Trainer: a GRU or LSTM layer trains with the gradient sums, without a "
                                     "sparse policy, weight decay, standardize or mode float32")
                return "sums"
        # (a bfloat16 state keeps the gradient sums unless sums=False: then each gradient goes
        # through a float32 window of a few output channels into it, IntoMomentum)
        sgd = type(o) is optim.SGD and not o.weight_decay and not o.standardize
        sgd1 = batch == 1 and sgd and not (o.half and o.n_state)
        if sums is not None and type(sums) is not bool:
            raise ValueError("Trainer: sums must be None, True or False, got %r" % (sums,))
        if sums is False and not sgd:
            raise ValueError("Trainer: sums=False needs SGD (no weight_decay, no standardize)")
        if sums is False and batch > 1 and not (o.momentum and sparse is None):
            # the batch is folded into the momentum: v = m v at the batch's first sample on every
            # channel; a sparse policy's channels first reached later would need tracking per channel
            raise ValueError("Trainer: sums=False at batch > 1 needs SGD momentum and no sparse policy")
        # into the momentum by default where the float kernels have an FPU (the update's second
        # pass is cheap there) and without a sparse policy (its backward is the fast path: the
        # momentum scaling would slow it); the same bits as the sums at batch 1
        auto = sums is None and sparse is None and kern.FAST_FLOAT
        if sgd1 and o.momentum and auto:
            return "copy"  # with a copy of the momentum: a failed step puts it back
        if (batch == 1 and sgd and o.momentum and sums is False) or (batch > 1 and sums is False):
            return "momentum"
        # steps during backward by default without a sparse policy: then the bits are the sums'
        # path's; with one (sums=False) the stochastic rounding draws follow the update order
        if sgd1 and not o.momentum and (sums is False or (sums is None and sparse is None)):
            return "backward"
        return "sums"

    def _check_memory(self, idx, how, recompute):
        # before allocating: when even the float32 sums, optimiser state and master copies exceed
        # the free heap, a MemoryError saying what fits (the full count only then: no import)
        model, mode = self.model, self.mode
        need = 0
        for i in idx:
            ly = model.layers[i]
            per = 2 * ((how == "sums") + (mode == "float32"))  # float32 arrays, the state's 2 or 4 B
            per += self.opt.n_state * (1 if self.opt.half else 2)
            need += 2 * (len(ly.w) + len(ly.b)) * per
        if need > _mem_free():
            _memcheck(model, idx, mode, self.opt, self.sparse, _nosums(how), self.batch, False, recompute)

    def _set_up(self, idx, how, monitor, adapt_ranges, recompute):
        # the trained layers, their master copies, checkpoint state and update mode; all or
        # nothing: a failure (out of memory, a bad checkpoint state) leaves the model as it was
        model, opt = self.model, self.opt
        prev = [ly.index for ly in model.layers if ly.trained]
        prev_update = model.update
        # the master copies to restore on a failure: only layers that have one (a list for every
        # layer would be held, with its tuples, through every allocation below)
        prev_master = [(ly, ly.master_w, ly.master_b) for ly in model.layers
                       if ly.master_w is not None or ly.master_b is not None]
        try:
            win = 0
            if how == "backward":  # the gradient window goes with backward's buffers (idle forward memory)
                from microtrain.stepwise import StepInBackward, floats

                win = 4 * floats([model.layers[i] for i in idx])
            elif how == "momentum" and opt.half:  # so does a bfloat16 state's float32 window (as -bytes)
                from microtrain.halfwin import half_floats as floats  # (no local more)

                win = -4 * floats([model.layers[i] for i in idx])
            elif how == "copy":  # so does the momentum's copy (all or nothing): every trained layer's
                for ly in idx[1:]:  # weights and biases but the lowest's, as -bytes (set_trained);
                    ly = model.layers[ly]  # (no local more: this frame is on the heap while planning)
                    win -= 4 * (len(ly.w) + len(ly.b))
            # (2: the conv output made again may be placed through backward: nothing but Health
            # reads it after the forward)
            # (4: the gradient may be taken by windows of channels, over.py split: recompute's)
            self.layers = model.set_trained(idx, how == "sums", win, (
                2 if recompute and not monitor else recompute) | (
                4 if recompute and how in ("momentum", "copy") and self.sparse is None and not monitor
                else 0))
            self.first = self.layers[0].index
            for ly in self.layers:
                if ly.master_w is not None or ly.master_b is not None:  # (else the class's None stands:
                    ly.master_w = ly.master_b = None  # an instance attribute costs map slots)
            if self.mode == "float32":
                for ly in self.layers:
                    optim.make_master(ly)
            elif self.mode == "mixed":
                optim.make_master(self.layers[-1])
            self._resume_state()
            for ly in self.layers:
                opt.state(ly)  # optimiser state now, while large free blocks remain
            if how == "momentum" or how == "copy":
                from microtrain.backward import IntoMomentum

                model.update = IntoMomentum(opt.momentum, self.batch, self.layers, opt,
                                            model.backward_plan.window, how == "copy")
            elif how == "backward":
                model.update = StepInBackward(opt, self.layers, self.sparse, raw=model.backward_plan.window)
            self._mon = None
            if monitor:
                from microtrain.health import Health

                self._mon = Health(model, self.layers, adapt_ranges)
                self._bufs = model.plan(self.first)[0]
        except BaseException as e:
            upd = model.update
            if upd is not None and upd is not prev_update:
                upd.release()  # (the momentum this trainer lent its layers)
            for ly in model.layers:
                if ly.master_w is not None or ly.master_b is not None:
                    ly.master_w = ly.master_b = None
                if ly.trained and ly.index not in prev:
                    ly.trained = False
                    ly.gw = ly.gb = ly.grad = None
            for ly, mw, mb in prev_master:
                ly.master_w, ly.master_b = mw, mb
            stepwise = prev_update is not None and prev_update.late
            if prev:
                model.set_trained(prev, not stepwise)
                if stepwise:  # (the earlier trainer's layers step during backward again)
                    model.update = prev_update
            else:
                model.backward_plan = None
                model.trained_layers = []
                model.update = None
            if isinstance(e, MemoryError):  # as needed
                _memcheck(model, idx, self.mode, opt, self.sparse, _nosums(how), self.batch, True, recompute)
            raise

    def _start_log(self, seed, log, log_every):
        # the counters, the shuffle's generator and the log's config record
        self.pending = 0
        self.steps = 0
        self.log_path = log
        self.log_every = log_every
        # a checkpoint's record: the epochs done (the next fit's shuffle and rate) and, with seed
        # None, the seed state (an older record's state, without the epoch count, is taken as one)
        rec = trainer_record(self.model.buf, True)
        self.epoch = rec[3] or 0 if rec is not None else 0
        self.shuffle_state = (rec[0] if seed is None and rec is not None else
                              ((1 if seed is None else seed) * 2654435761 + 12345) & 0xFFFFFFFF or 1)
        self.bwd_us = 0  # time in backward, for sparse-speed reports
        self.correct = 0
        self.seen = 0
        self.loss_sum = 0.0
        if log:
            with open(log, "w") as f:
                f.write(json.dumps({"kind": "config", "train": [ly.name for ly in self.layers],
                                    "mode": self.mode, "optimizer": repr(self.opt),
                                    "sparse": repr(self.sparse), "batch": self.batch}) + "\n")

    @property
    def lr(self):
        """The learning rate of the next update: the optimiser's `rate` (fit sets it from the
        schedule each epoch)."""
        return self.opt.rate

    @lr.setter
    def lr(self, v):
        self.opt.set_rate(v, "Trainer.lr")

    def _check_label(self, label):
        # step's target: a class index, or an mse / bce target (microtrain.datacheck)
        if not self.classes:
            if self.loss_fn is LOSSES.get("mse") or self.loss_fn is LOSSES.get("bce"):
                from microtrain.datacheck import check_sample

                check_sample(self, None, label, -1, "step")
            return
        n = self.model.output.numel
        if type(label) is not int or not 0 <= label < n:
            raise ValueError("label must be an int class index in 0..%d, got %r" % (n - 1, label))

    def _resume_state(self):
        """Take master copies / optimiser state from a checkpoint's STATE tensors."""
        t = self.model.tensors
        for ly in self.layers:
            st = ly.state_t
            if st[0] >= 0 and t[st[0]].kind == _KIND_STATE and ly.master_w is not None:
                ly.master_w = t[st[0]].data
                ly.master_b = t[st[1]].data
            if st[2] >= 0:
                v = (t[st[4]].data, t[st[5]].data) if st[4] >= 0 and st[5] >= 0 else ()  # Adam (1.3)
                self.opt.load_state(ly, t[st[2]].data, t[st[3]].data, *v)
        rec = trainer_record(self.model.buf, True)
        if rec is not None and rec[1] is not None:  # Adam's bias correction continues
            self.opt.resume_bias_correction(rec[1])
        # stochastic rounding: continue the xorshift16 sequence where the saved run
        # stopped (one draw per weight without a master copy, per update; period 65535)
        draws = 0
        for ly in self.layers:
            if self.opt.rounding == "stochastic" or (self.opt.rounding == "auto" and ly.master_w is None):
                draws += len(ly.w)
        self.opt.rng = optim.xorshift16_skip(self.opt.rng, self.model.train_steps * draws)

    def _log(self, rec):
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(rec) + "\n")

    def step(self, x, label):
        """One sample: forward, loss, backward; an update every `batch` samples.
        `label` is the loss's target (a class index for "xent"). Returns the loss (float)."""
        # few locals: the frame is heap-allocated per call on a board (a share of the peak heap)
        m = self.model
        if not self.classes or type(label) is not int or not 0 <= label < m.output.numel:
            self._check_label(label)  # (raises for a class index out of range; checks other targets)
        out = m.forward(x, self.first, self._start)
        f = self._mon  # None, the epoch's count of samples with saturated logits (int), or a Health
        if type(f) is int:
            f = 1 if max(out) == 127 or min(out) == -128 else 0  # bit 0: the logits at the clamp
        elif f is not None:
            f.count(self._bufs)
            f = 0
        else:
            f = 0
        loss, err, s = self.loss_fn(m, label, out)
        if self.classes and argmax(out) == label:
            f |= 2  # bit 1: a hit
        policy = self.sparse
        if policy is not None:
            policy.observe(loss)
        f |= self.pending << 2  # the samples pending before this one
        t0 = ticks_us()
        try:
            m.backward(err, s, policy)
            self.bwd_us += ticks_diff(ticks_us(), t0)
            self.pending += 1
            if self.pending >= self.batch:
                self.flush()
        except BaseException:  # (also KeyboardInterrupt, MemoryError): the update mode restores what
            # it holds (the sums of a batch's first sample are zero again), the sparse policy its
            # state; bit 0: no sample was pending, bit 1: the update raised (backward was through)
            s = (self.pending != f >> 2) << 1 | (f < 4)  # (a shallow call below: a smaller frame)
            self.pending = f >> 2
            m.update.failed(self.opt, self.layers, s)
            if hasattr(policy, "undo"):
                policy.undo()
            raise
        self.steps += 1
        if f & 2:
            self.correct += 1
        if f & 1:
            self._mon += 1
        self.seen += 1
        self.loss_sum += loss
        if self.replay is not None:
            self.replay.after_step(self, label)
        if self.log_path and self.log_every and self.steps % self.log_every == 0:
            rec = {"kind": "step", "step": self.steps, "epoch": self.epoch, "loss": loss,
                   "lr": self.lr, "t_ms": ticks_ms(), "heap": _heap()}
            if self._mon is not None and type(self._mon) is not int:
                rec["sat_logits"], rec["sat_act"] = self._mon.running()
            self._log(rec)
        return loss

    def flush(self):
        """Apply the gradients of the samples since the last update."""
        if self.pending:
            self.opt.step(self.layers, self.pending)  # at opt.rate; counts model.train_steps
            self.pending = 0
            mon = self._mon
            if mon is not None and type(mon) is not int:
                mon.update()  # range adaptation between updates

    def _shuffle(self, order, ep):
        # epoch ep's order: a function of the seed and the epoch only (identity, then Fisher-Yates),
        # so fit(a) then fit(n - a), with or without a checkpoint between, is fit(n)
        r = (self.shuffle_state ^ ((ep * 0x9E3779B9) & 0xFFFFFFFF)) or 1
        for i in range(len(order)):
            order[i] = i
        for i in range(len(order) - 1, 0, -1):
            r ^= (r << 13) & 0xFFFFFFFF
            r ^= r >> 17
            r ^= (r << 5) & 0xFFFFFFFF
            j = r % (i + 1)
            order[i], order[j] = order[j], order[i]

    def fit(self, samples, epochs=1, shuffle=True, eval_samples=None, verbose=True, cache="auto", total=None):
        """Train for `epochs` passes over `samples` (a sequence of (x, label)), the epochs after
        the `epoch` ones already done: fit(a) then fit(n - a) is fit(n). Every sample is
        checked before the first update (a FileDataset is read once for it).
        cache: the frozen layers' outputs computed once per sample ("auto", "ram",
        a file path, or None; see microtrain.cache.make).
        total: the schedule's length in epochs (default: the epochs done after this call;
        give it to each part of a split run with a schedule that depends on it, "cosine").
        Returns a list of per-epoch dicts (loss, acc, eval acc)."""
        if type(epochs) is not int or epochs < 0:
            raise ValueError("fit: epochs must be an int >= 0, got %r" % (epochs,))
        if total is not None and (type(total) is not int or total < self.epoch + epochs):
            raise ValueError("fit: total must be None or an int >= the epochs done after this call (%d), "
                             "got %r" % (self.epoch + epochs, total))
        from microtrain.datacheck import check  # (loaded by fit: step-only training never holds it)

        check(self, samples, "fit")
        if eval_samples is not None:
            check(self, eval_samples, "fit: eval_samples")
        fc = None
        if cache and not self.classes:  # the cache stores class labels, not regression targets
            if cache != "auto":
                raise ValueError("fit: the feature cache needs class labels (loss 'xent'); use cache=None")
            cache = None
        if cache:
            from microtrain import cache as fcache

            fc = fcache.make(self.model, self.first, samples, epochs, cache, verbose)
        if fc is None:
            return self._fit(samples, epochs, shuffle, eval_samples, verbose, None, total)
        self._start = self.first  # step() runs only the layers from `first` on
        try:
            return self._fit(samples, epochs, shuffle, eval_samples, verbose, fc, total)
        finally:
            self._start = 0
            fc.close()

    def _fit(self, samples, epochs, shuffle, eval_samples, verbose, fc, total):
        n = len(samples)
        order = zeros("H" if n < 65536 else "I", n)  # grown in place: the heap may be nearly full
        for i in range(n):
            order[i] = i
        history = []
        m_out = self.model.output.numel
        e0 = self.epoch
        horizon = e0 + epochs if total is None else total
        for ep in range(e0, e0 + epochs):
            self.epoch = ep
            self.lr = self.schedule(self.opt.lr, ep, horizon)
            if shuffle:
                self._shuffle(order, ep)
            self.correct = self.seen = 0
            lite = type(self._mon) is int  # (health None: the logits' saturation count)
            if lite:
                self._mon = 0
            self.loss_sum = 0.0
            t0 = ticks_ms()
            for i in range(n):
                if fc is None:
                    x, y = _sample(samples, order[i])
                    self.step(x, y)
                else:
                    self.step(None, fc.load(order[i]))  # the boundary values are in place
                if verbose and (i + 1) % 500 == 0:
                    print("  epoch %d: %d/%d loss=%.4f%s" % (
                        ep + 1, i + 1, n, self.loss_sum / self.seen,
                        (" acc=%.4f" % (self.correct / self.seen)) if self.classes else ""))
            self.flush()
            dt = ticks_diff(ticks_ms(), t0)
            acc = self.correct / max(1, self.seen) if self.classes else None
            rec = {"kind": "epoch", "epoch": ep, "loss": self.loss_sum / max(1, self.seen),
                   "acc": acc, "lr": self.lr, "t_ms": dt,
                   "heap": _heap(), "heap_live": _live()}
            if rec["heap_live"] > self.heap_live:
                self.heap_live = rec["heap_live"]
            if lite and self.seen:  # (inline: a module-level name costs RAM)
                f = self._mon / self.seen  # of the samples, with logits at the int8 clamp
                h = self.health = rec["health"] = {"sat_samples": f, "warnings": [] if f <= 0.05 else [
                    "saturated: %.0f%% of the samples had logits at the int8 clamp, where training stops "
                    "learning; use Trainer(adapt_ranges=True), which re-derives the ranges as it trains "
                    "(health=True counts every trained layer)" % (100 * f)]}
                if verbose:
                    for w in h["warnings"]:
                        print("microtrain: warning: epoch %d: %s" % (ep + 1, w))
            elif not lite and self._mon is not None:
                h = self.health = rec["health"] = self._mon.epoch(rec["loss"], m_out if self.classes else 0,
                                                                   acc)
                if verbose:  # else the record (and the log) carry them
                    for w in h["warnings"]:
                        print("microtrain: warning: epoch %d: %s" % (ep + 1, w))
            self._log(rec)
            if eval_samples is not None:
                ev = self.evaluate(eval_samples)
                rec["eval_acc"] = ev["acc"]
            if verbose:
                print("epoch %d/%d lr=%.5f loss=%.4f%s%s time=%.1fs" % (
                    ep + 1, horizon, self.lr, rec["loss"], (" acc=%.4f" % rec["acc"]) if self.classes else "",
                    (" eval_acc=%.4f" % rec["eval_acc"]) if rec.get("eval_acc") is not None else "",
                    dt / 1000.0))
            history.append(rec)
            self.epoch = ep + 1  # done: a checkpoint now resumes with the next one
        return history

    def evaluate(self, samples, confusion=True):
        """Accuracy and mean loss on samples (forward only; same buffers as training).
        Returns {"acc", "loss", "n", "confusion"}; also logged. Accuracy and
        confusion are None unless the loss is "xent"."""
        m = self.model
        n_cls = m.output.numel
        if not self.classes:
            confusion = False
        conf = [[0] * n_cls for _ in range(n_cls)] if confusion else None
        correct = 0
        loss_sum = 0.0
        n = len(samples)
        for i in range(n):
            x, y = _sample(samples, i)
            if self.classes:
                self._check_label(y)
            out = m.forward(x, self.first)
            loss, _, _ = self.loss_fn(m, y, out)
            loss_sum += loss
            if self.classes:
                p = argmax(out)
                if p == y:
                    correct += 1
                if conf is not None:
                    conf[y][p] += 1
        rec = {"kind": "eval", "epoch": self.epoch, "loss": loss_sum / max(1, n),
               "acc": correct / max(1, n) if self.classes else None, "n": n, "confusion": conf}
        self._log(rec)
        return rec

    def save(self, path, state=True):
        """Checkpoint: the model with its trained layers (and, with state=True,
        master copies and momentum) written atomically."""
        self.flush()
        self.model.save(path, self if state else None)
