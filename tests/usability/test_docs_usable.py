"""The docs a newcomer follows, checked: every Markdown table renders (each row has the
header's number of cells: an unescaped | in a cell splits it), every `--help` fits one
screen (40 lines; the details live in the docs), getting-started's RAM check is run with
the configuration of the script it prepares (so its figure is the one that script needs),
`make demo` trains no epoch at learning rate 0, and `microtrain plot` puts the train and eval
values of an epoch at the same place (a real training log of the host MicroPython)."""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from evals.accuracy import train_eval as te
from microtrain_tools import cli, plot
from microtrain_tools.reference.train_ref_config import schedule_lr
from support.harness import ROOT, ensure_natmod, run_micropython
from support.reliability.train_files import files

SCREEN = 40
_SEP = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def _cells(row: str) -> int:
    s = row.strip()
    s = s[1:] if s.startswith("|") else s
    s = s[:-1] if s.endswith("|") and not s.endswith("\\|") else s
    return len(re.split(r"(?<!\\)\|", s))


def table_problems(text: str, name: str) -> list[str]:
    """Rows whose cell count differs from their table's header (GitHub's rendering)."""
    lines = text.splitlines()
    out, fenced, i = [], False, 0
    while i < len(lines):
        if lines[i].startswith("```"):
            fenced = not fenced
        head = lines[i].lstrip().startswith("|") and i + 1 < len(lines) and _SEP.match(lines[i + 1])
        if not fenced and head:
            n = _cells(lines[i])
            j = i + 1
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                if _cells(lines[j]) != n:
                    out.append(f"{name}:{j + 1}: {_cells(lines[j])} cells, the header has {n}")
                j += 1
            i = j
            continue
        i += 1
    return out


def test_every_table_row_has_the_headers_cells() -> None:
    tracked = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    pages = sorted({*tracked, *(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))})
    assert "docs/api.md" in pages and len(pages) > 40
    problems = [p for name in pages if (ROOT / name).is_file()
                for p in table_problems((ROOT / name).read_text(), name)]
    assert not problems, "\n".join(problems)
    # the rule itself: an unescaped | in a cell breaks the row, an escaped one does not
    assert table_problems("| a | b |\n|---|---|\n| `x|y` | z |\n", "t") == ["t:3: 3 cells, the header has 2"]
    assert table_problems("| a | b |\n|---|---|\n| `x\\|y` | z |\n", "t") == []


def _commands() -> list[str]:
    sub = next(a for a in cli.build_parser(["convert"])._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


@pytest.mark.parametrize("command", [None, *_commands()])
def test_help_fits_one_screen(command: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"] if command is None else [command, "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    n = len(text.rstrip("\n").splitlines())
    assert 5 <= n <= SCREEN, f"microtrain {command or ''} --help: {n} lines (at most {SCREEN}; details: docs)"


def test_getting_started_ram_check_is_the_scripts_configuration() -> None:
    text = (ROOT / "docs" / "getting-started.md").read_text()
    info = re.search(r"^microtrain info digits\.mtm (.*)$", text, re.M)
    script = re.search(r"<!-- file: train_digits\.py -->\n```python\n(.*?)```", text, re.S)
    assert info and script
    flags = info.group(1).split()
    call = re.search(r"mt\.Trainer\((.*?)\)\n", script.group(1), re.S)
    assert call
    kw = dict(re.findall(r"(\w+)=([^,()]+(?:\([^)]*\))?)", call.group(1)))
    want = ["--train-last", kw["train"].strip("\"'").split(":")[1], "--mode", kw["mode"].strip("\"'"),
            "--batch", kw["batch"]]
    have = {flags[i]: flags[i + 1] for i in range(len(flags) - 1) if flags[i].startswith("--")}
    for k, v in zip(want[::2], want[1::2], strict=True):
        assert have.get(k) == v, f"getting-started's microtrain info: {k} {have.get(k)}, the script: {v}"
    assert ("momentum=" in kw["optimizer"]) == ("--momentum" in flags)


def test_the_demo_trains_every_epoch_at_a_positive_rate() -> None:
    spec = importlib.util.spec_from_file_location("demo_run", ROOT / "examples" / "transfer_fmnist_mnist" /
                                                  "run.py")
    assert spec and spec.loader
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    lrs = [schedule_lr(run.DEMO_SCHEDULE, te.TRANSFER.lr, e, run.DEMO_EPOCHS) for e in range(run.DEMO_EPOCHS)]
    assert min(lrs) > 0, f"make demo's learning rate per epoch: {lrs}"
    # the rule bites: the protocol's own cosine over the demo's epochs ends at 0
    assert schedule_lr(te.TRANSFER.schedule, te.TRANSFER.lr, run.DEMO_EPOCHS - 1, run.DEMO_EPOCHS) == 0


LOGGED = """
import sys
import microtrain as mt
m = mt.load(sys.argv[1])
d = mt.FileDataset(sys.argv[2])
tr = mt.Trainer(m, train="last:2", optimizer=mt.SGD(lr=0.01, momentum=0.9), log=sys.argv[3], log_every=4)
tr.evaluate(d)
tr.fit(d, epochs=3)
tr.evaluate(d)
"""


def test_plot_puts_an_epochs_train_and_eval_values_in_one_place(tmp_path: Path) -> None:
    ensure_natmod()
    model, data = files(24)
    log = tmp_path / "log.jsonl"
    p = run_micropython(LOGGED, [str(model), str(data), str(log)])
    assert p.returncode == 0, p.stdout + p.stderr
    fig = plot.curves_figure(plot.read_log(log))
    _, loss_ax, acc_ax = fig.axes
    for ax in (loss_ax, acc_ax):
        train, ev = (list(line.get_xdata()) for line in ax.get_lines())
        assert train == [1, 2, 3], train  # each train epoch at its end
        assert ev == [0, 3], ev  # before training, and after the last epoch: where that epoch's value is
        assert ax.get_xlabel() == "epochs trained"
    assert loss_ax.get_xlim() == acc_ax.get_xlim()
    # the last eval is at the x of the last train epoch
    assert list(acc_ax.get_lines()[1].get_xdata())[-1] == list(acc_ax.get_lines()[0].get_xdata())[-1]
