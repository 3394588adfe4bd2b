"""The fleet's data splits (docs/fleet.md, "Data"): real skew, one board per person or per
label mix.

- :func:`har_boards`: the smartwatch windows of the pretraining subjects, one subject per
  board (the two subjects with the most windows each on two boards, one recording of every
  activity per board, so that ten boards hold eight people); the held-out subjects' windows
  only for evaluation.
- :func:`dirichlet_boards`: the MNIST transfer set split across boards by a Dirichlet(alpha)
  label skew (per class, the shares of the boards drawn from Dirichlet(alpha)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from evals.lib import datasets as ds

IDX = NDArray[np.intp]

# subjects whose recordings go to two boards (the two with the most windows)
SPLIT_SUBJECTS = (1, 2)


@dataclass
class BoardData:
    name: str  # "s3" (subject 3) or "s1a" / "s1b" (subject 1's two boards), "d4" (Dirichlet board 4)
    idx: IDX  # indices into the dataset


def har_boards(w: ds.WatchWindows, n_boards: int = 10) -> tuple[list[BoardData], IDX]:
    """(boards, held-out indices): the pretraining subjects' windows, one subject per board;
    with more boards than subjects, SPLIT_SUBJECTS are split by recording (each board one
    recording of each activity)."""
    pre, held = ds.watch_split(w)
    subjects = list(ds.PRETRAIN_SUBJECTS)
    extra = n_boards - len(subjects)
    if not 0 <= extra <= len(SPLIT_SUBJECTS):
        raise ValueError(f"har_boards: {len(subjects)} to {len(subjects) + len(SPLIT_SUBJECTS)} boards")
    boards: list[BoardData] = []
    for s in subjects:
        idx = pre[w.subject[pre] == s]
        if s in SPLIT_SUBJECTS[:extra]:
            # the subject's recordings of each activity, in file order: alternate boards
            halves: list[list[int]] = [[], []]
            for c in np.unique(w.y[idx]):
                recs = np.unique(w.recording[idx[w.y[idx] == c]])
                for j, r in enumerate(recs):
                    halves[j % 2] += list(idx[w.recording[idx] == r])
            boards += [BoardData(f"s{s}a", np.sort(np.asarray(halves[0], np.intp))),
                       BoardData(f"s{s}b", np.sort(np.asarray(halves[1], np.intp)))]
        else:
            boards.append(BoardData(f"s{s}", idx))
    return boards, held


def dirichlet_boards(y: NDArray[np.int64], n_boards: int, alpha: float = 0.3,
                     seed: int = 0) -> list[BoardData]:
    """Indices of y split across n_boards with a Dirichlet(alpha) label skew: for each class,
    the boards' shares of its samples are one Dirichlet draw (every board gets at least one
    sample: a draw that leaves one empty is drawn again)."""
    rng = np.random.default_rng(seed)
    for _ in range(100):
        parts: list[list[int]] = [[] for _ in range(n_boards)]
        for c in np.unique(y):
            idx = rng.permutation(np.flatnonzero(y == c))
            p = rng.dirichlet(np.full(n_boards, alpha))
            cuts = (np.cumsum(p)[:-1] * len(idx)).astype(int)
            for b, part in enumerate(np.split(idx, cuts)):
                parts[b] += list(part)
        if all(parts):
            return [BoardData(f"d{b}", np.sort(np.asarray(p, np.intp))) for b, p in enumerate(parts)]
    raise ValueError("dirichlet_boards: no draw gave every board a sample")
