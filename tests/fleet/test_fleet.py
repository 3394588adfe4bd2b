"""A fleet on Flower's deployment engine, for real: a SuperLink and three SuperNodes on
loopback (TLS, SuperNode authentication), three local boards (the host micropython), two
FedAvg rounds. The global model after each round must be FedAvg's rule applied to what the
boards returned: their delta files, decoded here with numpy from the layout of docs/fleet.md
(not with the host's codec), added to the global values they were sent, weighted by their
sample counts. And nothing may be left running."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from evals.accuracy.adapt import ncm_watch
from evals.lib import datasets as ds
from evals.lib import experiments as ex
from microtrain_tools import fleet
from microtrain_tools.fleet_engine import alive
from microtrain_tools.mtd import write_mtd

SUBJECTS = ((3, 40), (4, 60), (5, 80))  # (subject, windows): unequal counts, so the weights matter
ROUNDS = 2


def parse_global(data: bytes) -> tuple[int, dict[str, np.ndarray]]:
    """docs/fleet.md: "<4sIIHH" then per layer "<HHI" (index, channels, k), weights, biases."""
    magic, _, rnd, n, _ = struct.unpack_from("<4sIIHH", data, 0)
    assert magic == b"MTG1"
    pos, out = 16, {}
    for _ in range(n):
        i, c, k = struct.unpack_from("<HHI", data, pos)
        pos += 8
        out[f"L{i}.w"] = np.frombuffer(data, "<f4", c * k, pos).reshape(c, k).astype(np.float64)
        pos += 4 * c * k
        out[f"L{i}.b"] = np.frombuffer(data, "<f4", c, pos).astype(np.float64)
        pos += 4 * c
    assert pos == len(data)
    return rnd, out


def parse_delta(data: bytes) -> tuple[int, dict[str, np.ndarray]]:
    """docs/fleet.md: "<4sIIIffHH" then per layer "<HHIHH" (index, channels, k, sent), the
    channel bit mask, the sent channels' float32 scales, float32 bias deltas, int8 rows."""
    magic, _, _, n, _, _, nl, _ = struct.unpack_from("<4sIIIffHH", data, 0)
    assert magic == b"MTD1"
    pos, out = 28, {}
    for _ in range(nl):
        i, c, k, m, _ = struct.unpack_from("<HHIHH", data, pos)
        pos += 12
        mask = data[pos:pos + (c + 7) // 8]
        pos += (c + 7) // 8
        chans = [ch for ch in range(c) if mask[ch // 8] >> (ch % 8) & 1]
        assert len(chans) == m
        sc = np.frombuffer(data, "<f4", m, pos).astype(np.float64)
        db = np.frombuffer(data, "<f4", m, pos + 4 * m).astype(np.float64)
        q = np.frombuffer(data, np.int8, m * k, pos + 8 * m).reshape(m, k).astype(np.float64)
        pos += 8 * m + m * k
        w, b = np.zeros((c, k)), np.zeros(c)
        # the float32 product, as the ClientApp forms it
        w[chans] = (q.astype(np.float32) * sc.astype(np.float32)[:, None]).astype(np.float64)
        b[chans] = db
        out[f"L{i}.w"], out[f"L{i}.b"] = w, b
    assert pos == len(data)
    return n, out


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory: pytest.TempPathFactory) -> fleet.FleetRun:
    work = tmp_path_factory.mktemp("fleet")
    ref = ncm_watch.base_model()
    w = ds.watch_windows()
    q = ex.quantize(ref.mtm, w.x)
    boards = []
    for s, n in SUBJECTS:
        idx = np.flatnonzero(w.subject == s)[:n]
        write_mtd(work / f"s{s}.mtd", q[idx], w.y[idx])
        boards.append(fleet.BoardSpec(f"s{s}", work / f"s{s}.mtd"))
    _, held = ds.watch_split(w)
    write_mtd(work / "test.mtd", q[held[:200]], w.y[held[:200]])
    s = fleet.Settings(rounds=ROUNDS, keep=0.5, strategy="fedavg")
    return fleet.run_fleet(work / "run", ref.mtm, work / "test.mtd", boards, s, tls=True)


def test_fedavg_equals_the_rule_on_the_boards_replies(fleet_run: fleet.FleetRun) -> None:
    r = fleet_run
    assert r.status == "finished:completed"
    assert [len(rd["replies"]) for rd in r.rounds] == [3] * ROUNDS
    logs = r.work / "log"
    final = dict(np.load(r.work / "final.npz"))
    for rnd in range(1, ROUNDS + 1):
        sent = [parse_global((logs / f"s{s}" / f"global_r{rnd}.bin").read_bytes()) for s, _ in SUBJECTS]
        assert all(g[0] == rnd for g in sent)
        glob = sent[0][1]
        for _, g in sent[1:]:  # every board got the same global values
            assert all(np.array_equal(g[k], glob[k]) for k in glob)
        replies = [parse_delta((logs / f"s{s}" / f"delta_r{rnd}.bin").read_bytes()) for s, _ in SUBJECTS]
        assert [n for n, _ in replies] == [n for _, n in SUBJECTS]
        total = sum(n for n, _ in replies)
        want = {k: sum(n * (glob[k] + d[k]) for n, d in replies) / total for k in glob}
        plain = {k: sum(glob[k] + d[k] for _, d in replies) / len(replies) for k in glob}
        if rnd < ROUNDS:
            got = parse_global((logs / "s3" / f"global_r{rnd + 1}.bin").read_bytes())[1]
        else:
            got = {k: v.astype(np.float64) for k, v in final.items()}
        assert set(got) == set(want)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=f"round {rnd} {k}")
        # the weights matter here: the unweighted mean is measurably another model
        assert max(np.abs(plain[k] - want[k]).max() for k in want) > 1e-4
        assert any(np.abs(d[k]).max() > 0 for _, d in replies for k in d)  # the boards did learn


def test_uplink_is_compact_and_accuracy_is_measured(fleet_run: fleet.FleetRun) -> None:
    r = fleet_run
    ups = [x["uplink-bytes"] for rd in r.rounds for x in rd["replies"]]
    assert all(4 * u <= r.fp32_bytes for u in ups)
    assert sorted(r.acc) == list(range(ROUNDS + 1))
    assert all(0.0 <= a <= 1.0 for a in r.acc.values())


def test_nothing_left_running(fleet_run: fleet.FleetRun) -> None:
    assert fleet_run.left == []
    mine = str(fleet_run.work)
    stray = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and alive(int(d.name)):
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if mine in cmd:
                stray.append(cmd)
    assert stray == []
