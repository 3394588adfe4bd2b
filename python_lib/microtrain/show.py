# Model.summary's table: its own module, imported for the call and forgotten after it, so the
# code of a printout is not held in the heap beside the model.
from microtrain import fmt


def summary(m, trained):
    """Print m's layers, shapes, parameters and RAM; trained: the file's TRAINED flag."""
    t = m.tensors
    print("model: %d layers, %d tensors, %d bytes%s" % (
        len(m.layers), len(t), m.size, " (trained %d steps)" % m.train_steps if trained else ""))
    print("%-3s %-16s %-18s %-16s %-16s %8s" % ("#", "name", "op", "input", "output", "params"))
    total = 0
    for ly in m.layers:
        op = fmt.OP_NAMES[ly.op] + (("+" + fmt.ACT_NAMES[ly.act]) if ly.act else "")
        shp = "+".join(str(t[i].shape) for i in ly.inputs)
        print("%-3d %-16s %-18s %-16s %-16s %8d%s" % (
            ly.index, ly.name[:16], op, shp, str(t[ly.output].shape), ly.n_params,
            "  trained" if ly.trained else ""))
        total += ly.n_params
    print("params: %d (%d bytes of weights in the model bytes, not copied)" % (
        total, sum(len(ly.w) + 4 * len(ly.b) for ly in m.layers if ly.w is not None)))
    print("RAM: activations %d bytes (inference)" % m.ram())
    print("input %s scale=%.6g zp=%d; output %s scale=%.6g zp=%d" % (
        m.input.shape, m.input.scale, m.input.zero_point,
        m.output.shape, m.output.scale, m.output.zero_point))
