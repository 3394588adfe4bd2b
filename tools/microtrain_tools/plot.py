"""``microtrain plot``: learning curves and a confusion matrix from a training log.

The log is the JSON-lines file written by the device Trainer, one object per line:

- ``{"kind": "config", ...}`` settings (first line; an optional ``"classes"`` list names
  the classes of the confusion matrix),
- ``{"kind": "step", "step", "epoch", "loss", "lr", "t_ms", "heap"}``,
- ``{"kind": "epoch", "epoch", "loss", "acc", "lr", "t_ms", "heap", "heap_live"}``,
- ``{"kind": "eval", "epoch", "loss", "acc", "n", "confusion": [[int, ...], ...]}``.

Other kinds are ignored. ``plot_curves`` draws three panels (loss per step with a
moving average, train/eval loss per epoch, train/eval accuracy per epoch);
``plot_confusion`` the confusion matrix of the last eval record (rows: true class,
columns: predicted; colour = row-normalised fraction, numbers = counts).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Log", "curves_figure", "plot_confusion", "plot_curves", "read_log"]

_REQUIRED = {"step": ("step", "loss"), "epoch": ("epoch", "loss"), "eval": ("epoch", "acc")}


@dataclass
class Log:
    config: dict[str, Any] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)


def read_log(path: str | Path) -> Log:
    """Parse a training log; ValueError naming the line for anything malformed."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such log file")
    log = Log()
    with p.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{n}: not a JSON object ({e.msg})") from None
            if not isinstance(rec, dict) or "kind" not in rec:
                raise ValueError(f"{p}:{n}: expected an object with a \"kind\"")
            kind = rec["kind"]
            for k in _REQUIRED.get(kind, ()):
                v = rec.get(k)
                number = isinstance(v, (int, float)) and not isinstance(v, bool)
                if not number or (k != "loss" and not math.isfinite(v)):  # a diverged loss may be inf/nan
                    raise ValueError(f"{p}:{n}: {kind} record needs a number \"{k}\"")
            if kind == "config":
                log.config.update(rec)
            elif kind == "step":
                log.steps.append(rec)
            elif kind == "epoch":
                log.epochs.append(rec)
            elif kind == "eval":
                # where the eval stands on the epoch axis: after the last epoch record before it,
                # else before training (its own epoch: the one about to run)
                rec["_trained"] = log.epochs[-1]["epoch"] + 1 if log.epochs else rec["epoch"]
                cm = rec.get("confusion")
                if cm is not None:
                    a = np.asarray(cm)
                    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.dtype.kind not in "iu" or a.min() < 0:
                        raise ValueError(f"{p}:{n}: \"confusion\" must be a square matrix of counts >= 0")
                log.evals.append(rec)
    if not (log.steps or log.epochs or log.evals):
        raise ValueError(f"{p}: no step, epoch or eval records")
    return log


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _moving_average(y: np.ndarray, k: int) -> np.ndarray:
    if k <= 1 or len(y) < k:
        return y
    c = np.cumsum(np.insert(y, 0, 0.0))
    return np.concatenate([c[1:k] / np.arange(1, k), (c[k:] - c[:-k]) / k])


def plot_curves(log: Log, out: str | Path, title: str | None = None) -> None:
    """Loss per step, loss per epoch and accuracy per epoch, as one PNG."""
    fig = curves_figure(log, title)
    fig.savefig(out, dpi=100)
    _pyplot().close(fig)


def curves_figure(log: Log, title: str | None = None) -> Any:
    """The matplotlib figure of ``plot_curves`` (three axes: loss per step, loss per epoch,
    accuracy per epoch; the two epoch panels on one axis of epochs trained)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    if log.steps:
        s = np.array([r["step"] for r in log.steps], dtype=float)
        y = np.array([r["loss"] for r in log.steps], dtype=float)
        ax.plot(s, y, color="tab:blue", alpha=0.3, lw=0.8, label="loss")
        k = max(1, len(y) // 25)
        if k > 1:
            ax.plot(s, _moving_average(y, k), color="tab:blue", lw=1.8, label=f"moving average ({k})")
        ax.legend()
        for a, b in zip(log.steps[:-1], log.steps[1:], strict=True):  # epoch ends, between two records
            if b.get("epoch") != a.get("epoch"):
                ax.axvline(0.5 * (a["step"] + b["step"]), color="gray", ls=":", lw=1)
    else:
        ax.text(0.5, 0.5, "no step records", ha="center", va="center", transform=ax.transAxes)
    ax.set(xlabel="step (dotted: epoch ends)", ylabel="loss", title="training loss per step")
    # one x axis for both epoch panels: epochs trained when the value was measured (a train epoch
    # record at its end, an eval where it stands in the log: 0 = before training)
    ax = axes[1]
    if log.epochs:
        ax.plot([r["epoch"] + 1 for r in log.epochs], [r["loss"] for r in log.epochs], "o-", label="train")
    ev = [r for r in log.evals if isinstance(r.get("loss"), (int, float))]
    if ev:
        ax.plot([r["_trained"] for r in ev], [r["loss"] for r in ev], "s-", label="eval")
    if log.epochs or ev:
        ax.legend()
    ax.set(xlabel="epochs trained", ylabel="loss", title="loss per epoch")
    ax = axes[2]
    tr = [r for r in log.epochs if isinstance(r.get("acc"), (int, float))]
    if tr:
        ax.plot([r["epoch"] + 1 for r in tr], [r["acc"] for r in tr], "o-", label="train")
    if log.evals:
        ax.plot([r["_trained"] for r in log.evals], [r["acc"] for r in log.evals], "s-", label="eval")
    if tr or log.evals:
        ax.legend()
    ax.set(xlabel="epochs trained", ylabel="accuracy", title="accuracy per epoch")
    lo = min([0] + [r["_trained"] for r in log.evals] + [r["epoch"] for r in log.epochs])
    hi = max([1] + [r["_trained"] for r in log.evals] + [r["epoch"] + 1 for r in log.epochs])
    for a in axes[1:]:
        a.set_xlim(lo - 0.2, hi + 0.2)
    from matplotlib.ticker import MaxNLocator

    for a in axes:
        a.grid(alpha=0.3)
    for a in axes[1:]:
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_confusion(log: Log, out: str | Path) -> None:
    """Confusion matrix of the last eval record that has one, as a PNG."""
    recs = [r for r in log.evals if r.get("confusion") is not None]
    if not recs:
        raise ValueError("the log has no eval record with a confusion matrix")
    rec = recs[-1]
    cm = np.asarray(rec["confusion"], dtype=np.int64)
    k = cm.shape[0]
    names = log.config.get("classes")
    labels = [str(c) for c in names] if isinstance(names, list) and len(names) == k else [str(i) for i in
                                                                                           range(k)]
    rows = cm.sum(axis=1, keepdims=True)
    frac = np.divide(cm, rows, out=np.zeros(cm.shape, dtype=float), where=rows > 0)
    plt = _pyplot()
    side = max(4.0, 0.5 * k + 2.0)
    fig, ax = plt.subplots(figsize=(side + 1.0, side))
    im = ax.imshow(frac, cmap="Blues", vmin=0.0, vmax=1.0)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="fraction of the true class")
    if k <= 30:
        for i in range(k):
            for j in range(k):
                ax.text(j, i, str(cm[i, j]), ha="center", va="center", fontsize=8,
                        color="white" if frac[i, j] > 0.5 else "black")
    ax.set_xticks(range(k), labels, rotation=45 if max(len(s) for s in labels) > 2 else 0, ha="right"
                  if max(len(s) for s in labels) > 2 else "center")
    ax.set_yticks(range(k), labels)
    ax.set(xlabel="predicted", ylabel="true")
    acc = float(np.trace(cm) / cm.sum()) if cm.sum() else 0.0
    ax.set_title(f"epoch {rec.get('epoch')}: accuracy {acc:.3f} on {int(cm.sum())} samples")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
