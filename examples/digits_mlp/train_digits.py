# MicroPython: train a 64 -> H -> 10 ReLU MLP on int8 digits with the native
# _microtrain kernels (docs/numerics.md). Run by run_demo.py as
#   MICROPYPATH=build/natmod/x64:python_lib micropython train_digits.py build/demo
# Uses only array, struct, math, gc, time, sys. Every buffer is allocated once
# up front; the per-sample forward/backward is native kernel calls only, and
# Python loops over elements happen once per batch (the weight update).
#
# Numerics (scales are real value per int8 step):
#   x  : s_x, zp_x            fixed by the data range (host)
#   h  : s_h, zp_h = -128     fixed, calibrated once on the host from a float
#                             forward pass of the initial model (with headroom);
#                             ReLU is fused as act_min = zp_h
#   z  : s_l, zp_l = 0        fixed from a target logit range (host)
#   weights: symmetric int8 per output channel, scale s_w[c]; bias int32 with
#   scale s_in * s_w[c]; requant real multiplier s_in * s_w[c] / s_out.
# Fixed activation scales keep every per-sample step free of float work and
# the forward bit-exact with the oracle; only the weight scales move (they are
# refitted at every update).
import array
import gc
import math
import struct
import sys
import time

import _microtrain as mt
from microtrain.quant import quantize_multiplier  # the same helper the Trainer uses

DIR = sys.argv[1] if len(sys.argv) > 1 else "build/demo"
BIAS_LIMIT = 1 << 30
INT32_MAX = 2147483647


def read_config(path):
    cfg = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                cfg[parts[0]] = parts[1]
    return cfg


def load(name, typecode, n):
    size = struct.calcsize(typecode)
    a = array.array(typecode, bytes(n * size))  # MicroPython: raw buffer init
    with open(DIR + "/" + name, "rb") as f:
        got = f.readinto(a)
    if got != n * size:
        raise ValueError(name + ": short file")
    return a


def save(name, a):
    with open(DIR + "/" + name, "wb") as f:
        f.write(a)


class Layer:
    """int8 linear layer with its float gradient/velocity buffers (all preallocated)."""

    def __init__(self, name, in_n, out_n, s_in, zp_in, s_out, zp_out, act_min, act_max):
        self.in_n, self.out_n = in_n, out_n
        self.s_in, self.s_out = s_in, s_out
        self.desc = array.array("i", [in_n, out_n, zp_in, zp_out, act_min, act_max])
        n = in_n * out_n
        self.w = load(name + "_w.bin", "b", n)
        self.sw = load(name + "_sw.bin", "f", out_n)
        self.bf = load(name + "_bf.bin", "f", out_n)
        self.b = load(name + "_b.bin", "i", out_n)
        self.m = load(name + "_m.bin", "i", out_n)
        self.sh = load(name + "_sh.bin", "i", out_n)
        self.gw = array.array("f", bytes(4 * n))  # summed over the batch
        self.gb = array.array("f", bytes(4 * out_n))
        self.vw = array.array("f", bytes(4 * n))  # momentum
        self.vb = array.array("f", bytes(4 * out_n))
        self.row = array.array("f", bytes(4 * in_n))  # one updated float row
        self.wr = array.array("i", bytes(4 * out_n))
        # grad-input weight ratios: largest R <= 15 with 2^R * out_n * 16384 <= 2^31 - 1
        r = 15
        while (1 << r) * out_n * 16384 > INT32_MAX:
            r -= 1
        self.r = r
        self.ein_base = 0.0  # max s_w * 2^-R: real value of one grad-input acc unit per s_e
        self.refresh_wr()

    def refresh_wr(self):
        sw, wr = self.sw, self.wr
        top = 0.0
        for c in range(self.out_n):
            if sw[c] > top:
                top = sw[c]
        one = 1 << self.r
        for c in range(self.out_n):
            wr[c] = int(math.floor(one * sw[c] / top + 0.5))
        self.ein_base = math.ldexp(top, -self.r)

    def update(self, lr_b, mom):
        """Deutel et al.: w = dequant(w_q) - lr * g / batch, refit per-channel scale, requantise."""
        in_n = self.in_n
        w, sw, gw, vw, row = self.w, self.sw, self.gw, self.vw, self.row
        bf, gb, vb, b, m, sh = self.bf, self.gb, self.vb, self.b, self.m, self.sh
        s_in, s_out = self.s_in, self.s_out
        k = 0
        for c in range(self.out_n):
            s = sw[c]
            top = 0.0
            for i in range(in_n):
                v = mom * vw[k] + gw[k]
                vw[k] = v
                gw[k] = 0.0
                f = w[k] * s - lr_b * v
                row[i] = f
                if f > top:
                    top = f
                elif -f > top:
                    top = -f
                k += 1
            s = max(top, 1e-6) / 127.0
            inv = 1.0 / s
            k -= in_n
            for i in range(in_n):
                q = round(row[i] * inv)
                w[k] = 127 if q > 127 else (-127 if q < -127 else q)
                k += 1
            sw[c] = s  # stored as float32: use the stored value below
            s = sw[c]
            v = mom * vb[c] + gb[c]
            vb[c] = v
            gb[c] = 0.0
            bf[c] = bf[c] - lr_b * v
            q = round(bf[c] / (s_in * s))
            b[c] = BIAS_LIMIT if q > BIAS_LIMIT else (-BIAS_LIMIT if q < -BIAS_LIMIT else q)
            m[c], sh[c] = quantize_multiplier(s_in * s / s_out)
        self.refresh_wr()

    def save(self, prefix):
        for suffix, a in (("w", self.w), ("b", self.b), ("m", self.m), ("sh", self.sh)):
            save(prefix + "_" + suffix + ".bin", a)


def main():
    cfg = read_config(DIR + "/config.txt")
    n_train, n_test = int(cfg["n_train"]), int(cfg["n_test"])
    in_n, hid_n, out_n = int(cfg["in_n"]), int(cfg["hid_n"]), int(cfg["out_n"])
    s_x, zp_x = float(cfg["s_x"]), int(cfg["zp_x"])
    s_h, zp_h = float(cfg["s_h"]), int(cfg["zp_h"])
    s_l, zp_l = float(cfg["s_l"]), int(cfg["zp_l"])
    epochs, batch = int(cfg["epochs"]), int(cfg["batch"])
    lr0, lr1, mom = float(cfg["lr"]), float(cfg["lr_final"]), float(cfg["momentum"])
    seed = int(cfg["seed"])

    train_x = load("train_x.bin", "b", n_train * in_n)
    train_y = load("train_y.bin", "B", n_train)
    test_x = load("test_x.bin", "b", n_test * in_n)
    test_y = load("test_y.bin", "B", n_test)
    # one memoryview per sample, made once: no allocation in the sample loop
    mv = memoryview(train_x)
    xs = [mv[i * in_n:(i + 1) * in_n] for i in range(n_train)]
    mv = memoryview(test_x)
    xs_test = [mv[i * in_n:(i + 1) * in_n] for i in range(n_test)]

    l1 = Layer("l1", in_n, hid_n, s_x, zp_x, s_h, zp_h, zp_h, 127)  # fused ReLU: act_min = zp_h
    l2 = Layer("l2", hid_n, out_n, s_h, zp_h, s_l, zp_l, -128, 127)

    # activations and errors
    h = array.array("b", bytes(hid_n))
    z = bytearray(out_n)  # logits (bytearray: .find gives the argmax)
    ez = array.array("b", bytes(out_n))
    eh = array.array("b", bytes(hid_n))
    acc_h = array.array("i", bytes(4 * hid_n))
    stats = array.array("i", bytes(12))
    needle = bytearray(1)
    lut = array.array("I", bytes(4 * 256))
    for d in range(256):
        lut[d] = int(math.floor(65536.0 * math.exp(-s_l * d) + 0.5))
    perm = array.array("H", bytes(2 * n_train))
    for i in range(n_train):
        perm[i] = i
    test_logits = bytearray(n_test * out_n)

    fwd, gin, gwf = mt.linear_s8_forward, mt.linear_s8_grad_input, mt.linear_s8_grad_weight_f32
    xent, relu_back, ldexp, log = mt.softmax_xent_s8, mt.relu_s8_backward, math.ldexp, math.log
    d1, d2 = l1.desc, l2.desc

    rng = (seed * 2654435761 + 12345) & 0xFFFFFFFF or 1
    gc.collect()
    print(f"train: {n_train} samples, model {in_n}-{hid_n}-{out_n}, {epochs} epochs, batch {batch}, "
          f"R={l2.r}, heap used {gc.mem_alloc()} free {gc.mem_free()}")
    t_start = time.ticks_ms()
    for ep in range(epochs):
        t_ep = time.ticks_ms()
        # Fisher-Yates with xorshift32 (once per epoch)
        for i in range(n_train - 1, 0, -1):
            rng ^= (rng << 13) & 0xFFFFFFFF
            rng ^= rng >> 17
            rng ^= (rng << 5) & 0xFFFFFFFF
            j = rng % (i + 1)
            perm[i], perm[j] = perm[j], perm[i]
        # cosine learning-rate decay from lr0 (first epoch) to lr1 (last epoch)
        t = ep / (epochs - 1) if epochs > 1 else 1.0
        lr = lr1 + 0.5 * (lr0 - lr1) * (1.0 + math.cos(math.pi * t))
        loss_sum = 0.0
        correct = 0
        in_batch = 0
        for j in range(n_train):
            k = perm[j]
            x = xs[k]
            y = train_y[k]
            # forward
            fwd(d1, x, l1.w, l1.b, l1.m, l1.sh, h)
            fwd(d2, h, l2.w, l2.b, l2.m, l2.sh, z)
            sh_e = xent(z, y, lut, ez, stats)
            qy = z[y] - 256 if z[y] > 127 else z[y]
            loss_sum += s_l * (stats[2] - qy) + log(stats[1] / 65536.0)
            needle[0] = stats[2] & 0xFF
            if z.find(needle) == y:
                correct += 1
            # backward: dL/dz = ez * s_e, s_e = 2^(shift - 15)
            s_e = ldexp(1.0, sh_e - 15)
            gwf(d2, h, ez, None, s_h * s_e, s_e, l2.gw, l2.gb)
            sh_h = gin(d2, ez, l2.w, l2.wr, None, acc_h, eh)
            relu_back(h, zp_h, eh)
            s_eh = ldexp(s_e * l2.ein_base, sh_h)
            gwf(d1, x, eh, None, s_x * s_eh, s_eh, l1.gw, l1.gb)
            in_batch += 1
            if in_batch == batch or j == n_train - 1:
                lr_b = lr / in_batch
                l1.update(lr_b, mom)
                l2.update(lr_b, mom)
                in_batch = 0
        dt = time.ticks_diff(time.ticks_ms(), t_ep)
        print(f"epoch {ep + 1}/{epochs} lr={lr:.4f} loss={loss_sum / n_train:.4f} "
              f"train_acc={correct / n_train:.4f} time={dt / 1000.0:.2f}s")
    train_s = time.ticks_diff(time.ticks_ms(), t_start) / 1000.0

    # held-out evaluation (forward only); argmax = first index of the max logit
    correct = 0
    for i in range(n_test):
        fwd(d1, xs_test[i], l1.w, l1.b, l1.m, l1.sh, h)
        fwd(d2, h, l2.w, l2.b, l2.m, l2.sh, z)
        test_logits[i * out_n:(i + 1) * out_n] = z
        xent(z, test_y[i], lut, ez, stats)
        needle[0] = stats[2] & 0xFF
        if z.find(needle) == test_y[i]:
            correct += 1
    l1.save("final_l1")
    l2.save("final_l2")
    save("test_logits.bin", test_logits)
    print(f"train: {train_s:.1f} s training, heap used {gc.mem_alloc()} free {gc.mem_free()}")
    print(f"RESULT test_accuracy={correct / n_test:.4f} correct={correct} n={n_test}")


main()
