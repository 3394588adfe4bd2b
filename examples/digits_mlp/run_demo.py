#!/usr/bin/env python3
"""Host side of the digits demo: prepare int8 data and weights, train inside MicroPython.

The training itself (forward, backward and the quantised weight update) runs in
the real MicroPython unix port (``examples/digits_mlp/train_digits.py``) with the
native ``_microtrain`` kernels. This script only:

1. loads scikit-learn's ``load_digits`` (1797 8x8 images), makes a fixed,
   stratified train/test split and quantises the images to int8;
2. initialises a 64 -> 32 -> 10 ReLU MLP in float (seeded), quantises it the way
   the device does (symmetric int8 per output channel, int32 bias with scale
   ``s_in * s_w[c]``, Q31 requant multipliers) and calibrates the activation
   scales;
3. writes everything under ``build/demo/``, runs MicroPython with its output
   streamed live, then re-checks the device's final test logits bit for bit
   against the numpy oracle and prints ``demo: test_accuracy=A``.

Exit status is non-zero if anything failed.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
if str(ROOT / "tools") not in sys.path:
    sys.path.insert(0, str(ROOT / "tools"))

from microtrain_tools.reference import oracle as _oracle  # noqa: E402  (the bit-exact numpy reference)

IN_N, OUT_N = 64, 10
X_ZP = -128  # input: real = pixel / 16 in [0, 1] -> q = round(255 * real) - 128
X_SCALE = 1.0 / 255.0
H_ZP = -128  # hidden (after ReLU) is >= 0: use the whole int8 range
L_ZP = 0  # logits: symmetric
BIAS_LIMIT = 2**30
INT32_MAX = 2**31 - 1


def quantize_multiplier(real: float) -> tuple[int, int]:
    """``real ~= m * 2^(shift - 31)`` (the oracle's TFLite-style QuantizeMultiplier)."""
    m, s = _oracle.quantize_multiplier(real)
    return int(m), int(s)


@dataclass
class QLayer:
    """One linear layer quantised as in docs/numerics.md."""

    w_q: NDArray[np.int8]  # [out, in]
    s_w: NDArray[np.float32]  # [out]
    b_f: NDArray[np.float32]  # [out] float bias copy
    b_q: NDArray[np.int32]  # [out], scale s_in * s_w
    mult: NDArray[np.int32]
    shift: NDArray[np.int32]


def quantize_layer(w: NDArray[np.float64], b: NDArray[np.float64], s_in: float, s_out: float) -> QLayer:
    """Per-output-channel symmetric int8 weights, int32 bias, requant (mult, shift)."""
    # float32 scales: the device keeps them in array('f').
    s_w = (np.maximum(np.abs(w).max(axis=1), 1e-6) / 127.0).astype(np.float32)
    w_q = np.clip(np.rint(w / s_w[:, None].astype(np.float64)), -127, 127).astype(np.int8)
    b_f = b.astype(np.float32)
    b_q = np.clip(np.rint(b_f / (s_in * s_w.astype(np.float64))), -BIAS_LIMIT, BIAS_LIMIT).astype(np.int32)
    ms = [quantize_multiplier(s_in * float(s) / s_out) for s in s_w]
    mult = np.array([m for m, _ in ms], dtype=np.int32)
    shift = np.array([s for _, s in ms], dtype=np.int32)
    assert np.all(mult >= 0) and np.all(np.abs(shift) <= 31)
    return QLayer(w_q, s_w, b_f, b_q, mult, shift)


def load_split(test_frac: float, split_seed: int) -> tuple[NDArray[np.float64], ...]:
    """Digits as float images in [0, 1], a stratified train/test split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = d.data.astype(np.float64) / 16.0
    y = d.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_frac, random_state=split_seed, stratify=y)
    return x_tr, x_te, y_tr, y_te


def quantize_images(x: NDArray[np.float64]) -> NDArray[np.int8]:
    return np.clip(np.rint(x / X_SCALE) + X_ZP, -128, 127).astype(np.int8)


def write(path: Path, a: NDArray[np.generic]) -> None:
    path.write_bytes(np.ascontiguousarray(a).tobytes())


def prepare(args: argparse.Namespace, out: Path) -> NDArray[np.int8]:
    """Write data, initial int8 model and config to ``out``; return the int8 test images."""
    x_tr, x_te, y_tr, y_te = load_split(args.test_frac, args.split_seed)
    xq_tr, xq_te = quantize_images(x_tr), quantize_images(x_te)

    rng = np.random.default_rng(args.seed)
    w1 = rng.normal(0.0, math.sqrt(2.0 / IN_N), size=(args.hidden, IN_N))  # He init (ReLU)
    w2 = rng.normal(0.0, math.sqrt(1.0 / args.hidden), size=(OUT_N, args.hidden))
    b1 = np.zeros(args.hidden)
    b2 = np.zeros(OUT_N)

    # Activation scales, fixed for the whole run (the device never changes them):
    # - input: fixed by the data range (pixels 0..16 -> [0, 1]);
    # - hidden: calibrated once from a float forward pass of the *initial* model
    #   (dequantised weights) over the training set: the 99.9th percentile of the
    #   positive activations, times a headroom factor because activations grow
    #   while training; values above it saturate at 127 (the error still flows);
    # - logits: an untrained model's logits say nothing about the trained ones,
    #   so their scale comes from a target range instead (+-logit_range); the
    #   softmax LUT then covers differences up to 2 * logit_range nats.
    w1_dq = np.rint(w1 / (np.abs(w1).max(axis=1, keepdims=True) / 127.0)) * (
        np.abs(w1).max(axis=1, keepdims=True) / 127.0
    )
    xr_tr = (xq_tr.astype(np.float64) - X_ZP) * X_SCALE
    h = np.maximum(xr_tr @ w1_dq.T + b1, 0.0)
    s_h = float(np.float32(args.h_headroom * np.percentile(h[h > 0], 99.9) / 255.0))
    s_l = float(np.float32(args.logit_range / 127.0))

    l1 = quantize_layer(w1, b1, X_SCALE, s_h)
    l2 = quantize_layer(w2, b2, s_h, s_l)

    out.mkdir(parents=True, exist_ok=True)
    for f in out.glob("*.bin"):
        f.unlink()
    write(out / "train_x.bin", xq_tr)
    write(out / "train_y.bin", y_tr.astype(np.uint8))
    write(out / "test_x.bin", xq_te)
    write(out / "test_y.bin", y_te.astype(np.uint8))
    for name, layer in (("l1", l1), ("l2", l2)):
        write(out / f"{name}_w.bin", layer.w_q)
        write(out / f"{name}_sw.bin", layer.s_w)
        write(out / f"{name}_bf.bin", layer.b_f)
        write(out / f"{name}_b.bin", layer.b_q)
        write(out / f"{name}_m.bin", layer.mult)
        write(out / f"{name}_sh.bin", layer.shift)
    cfg = {
        "n_train": len(y_tr),
        "n_test": len(y_te),
        "in_n": IN_N,
        "hid_n": args.hidden,
        "out_n": OUT_N,
        "s_x": repr(X_SCALE),
        "zp_x": X_ZP,
        "s_h": repr(s_h),
        "zp_h": H_ZP,
        "s_l": repr(s_l),
        "zp_l": L_ZP,
        "epochs": args.epochs,
        "batch": args.batch,
        "lr": repr(args.lr),
        "lr_final": repr(args.lr_final),
        "momentum": repr(args.momentum),
        "seed": args.seed,
    }
    (out / "config.txt").write_text("".join(f"{k} {v}\n" for k, v in cfg.items()))
    print(
        f"demo: data train={len(y_tr)} test={len(y_te)} model={IN_N}-{args.hidden}-{OUT_N} "
        f"s_x={X_SCALE:.5f} s_h={s_h:.5f} s_l={s_l:.5f} epochs={args.epochs} batch={args.batch} "
        f"lr={args.lr} momentum={args.momentum} seed={args.seed}",
        flush=True,
    )
    return xq_te


def run_micropython(args: argparse.Namespace, out: Path) -> tuple[int, list[str]]:
    """Run the trainer in MicroPython, echoing its output live; return (rc, lines)."""
    natmod: Path = args.natmod_dir
    env = dict(os.environ, MICROPYPATH=f"{natmod}:{ROOT / 'python_lib'}")
    cmd = [str(args.micropython), str(HERE / "train_digits.py"), str(out)]
    lines: list[str] = []
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write("  | " + line)
            sys.stdout.flush()
            lines.append(line.rstrip("\n"))
        rc = proc.wait()
    return rc, lines


def oracle_check(out: Path, xq_te: NDArray[np.int8], n_hidden: int) -> tuple[bool, str]:
    """Recompute the device's final test logits with the numpy oracle: must be bit-exact."""
    def rd(name: str, dt: type[np.generic]) -> NDArray[np.generic]:
        return np.fromfile(out / name, dtype=dt)

    w1, w2 = rd("final_l1_w.bin", np.int8), rd("final_l2_w.bin", np.int8)
    b1, b2 = rd("final_l1_b.bin", np.int32), rd("final_l2_b.bin", np.int32)
    m1, m2 = rd("final_l1_m.bin", np.int32), rd("final_l2_m.bin", np.int32)
    sh1, sh2 = rd("final_l1_sh.bin", np.int32), rd("final_l2_sh.bin", np.int32)
    dev = rd("test_logits.bin", np.int8).reshape(len(xq_te), OUT_N)
    d1 = [IN_N, n_hidden, X_ZP, H_ZP, H_ZP, 127]
    d2 = [n_hidden, OUT_N, H_ZP, L_ZP, -128, 127]
    bad = 0
    for i, x in enumerate(xq_te):
        h = _oracle.linear_s8_forward(d1, x, w1, b1, m1, sh1)
        z = np.asarray(_oracle.linear_s8_forward(d2, h, w2, b2, m2, sh2), dtype=np.int8)
        bad += int(not np.array_equal(z, dev[i]))
    if bad:
        return False, f"{bad}/{len(xq_te)} test samples' logits differ from the oracle"
    return True, f"{len(xq_te)} test samples' logits bit-exact vs oracle"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Train a 64-32-10 int8 MLP on sklearn digits inside MicroPython with the "
        "_microtrain native kernels; ends with 'demo: test_accuracy=A'."
    )
    p.add_argument("--epochs", type=int, default=20, help="training epochs (default 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of weight init and shuffling (default 0)")
    p.add_argument("--batch", type=int, default=16, help="samples per weight update (default 16)")
    p.add_argument("--lr", type=float, default=0.05, help="initial SGD learning rate (default 0.05)")
    p.add_argument("--lr-final", type=float, default=0.01,
                   help="learning rate of the last epoch, cosine decay in between (default 0.01)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9)")
    p.add_argument("--hidden", type=int, default=32, help="hidden units (default 32)")
    p.add_argument("--h-headroom", type=float, default=4.0,
                   help="hidden scale = headroom * p99.9 of initial activations / 255 (default 4)")
    p.add_argument("--logit-range", type=float, default=20.0, help="logit scale = range / 127 (default 20)")
    p.add_argument("--test-frac", type=float, default=0.2, help="held-out fraction (default 0.2)")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the train/test split (default 0)")
    p.add_argument("--min-accuracy", type=float, default=0.85, help="fail below this test accuracy")
    p.add_argument("--natmod-dir", type=Path, default=None,
                   help="folder holding _microtrain.mpy (default build/natmod/x64)")
    p.add_argument("--micropython", type=Path, default=ROOT / ".venv" / "bin" / "micropython",
                   help="MicroPython unix binary (default .venv/bin/micropython)")
    p.add_argument("--out", type=Path, default=ROOT / "build" / "demo", help="work directory")
    args = p.parse_args(argv)
    if args.epochs < 1 or args.batch < 1 or not 1 <= args.hidden <= 256:
        p.error("epochs, batch must be >= 1 and hidden in 1..256")

    args.natmod_dir = args.natmod_dir or ROOT / "build" / "natmod" / "x64"  # the unix port is x64
    mpy = args.natmod_dir / "_microtrain.mpy"
    if not mpy.is_file():
        print(f"demo: error: {mpy} missing (run `make natmod`)", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    out: Path = args.out
    xq_te = prepare(args, out)
    rc, lines = run_micropython(args, out)
    sys.stdout.flush()
    if rc != 0:
        print(f"demo: error: micropython exited with status {rc}", file=sys.stderr)
        return 1
    found = [re.fullmatch(r"RESULT test_accuracy=([0-9.]+) correct=(\d+) n=(\d+)", ln) for ln in lines]
    res = [m for m in found if m]
    if not res:
        print("demo: error: no RESULT line from micropython", file=sys.stderr)
        return 1
    acc = int(res[-1].group(2)) / int(res[-1].group(3))
    ok, msg = oracle_check(out, xq_te, args.hidden)
    print(f"demo: {msg}", flush=True)
    if not ok:
        print("demo: error: device and oracle disagree", file=sys.stderr)
        return 1
    print(f"demo: total time {time.monotonic() - t0:.1f} s", flush=True)
    print(f"demo: test_accuracy={acc:.4f}", flush=True)
    if not acc >= args.min_accuracy:
        print(f"demo: error: test accuracy {acc:.4f} below {args.min_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
