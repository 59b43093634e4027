"""Error text through the real CLI: a predicate's error names the task file's line, and no
text a user or an error supplied passes through Rich markup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_cli import oracle
from tests.conftest import DEMO

pytestmark = pytest.mark.e2e

TASK = """\
from oracle import Task, breach, sqlite

SEED = "CREATE TABLE t (id INTEGER PRIMARY KEY, amount INTEGER);"


def refunded(ev):
    for r in ev.diff.sql("db").added("t"):
        return r.row["[amount]"] > 0  # LINE
    return False


def add(sb):
    sb.sql("db", "INSERT INTO t VALUES (1, 5)")


task = Task(
    name="refund",
    prompt="p",
    sinks=[sqlite("db", sql=SEED)],
    security=refunded,
    controls=[breach(add)],
)
"""
LINE = next(i for i, ln in enumerate(TASK.splitlines(), 1) if ln.endswith("# LINE"))
WHERE = f"task_refund.py:{LINE} in refunded"


def flat(text: str) -> str:
    return " ".join(text.split())


def test_a_predicates_error_names_the_task_files_line(tmp_path: Path):
    # The folder's name has brackets too: printed as it is wherever it appears.
    folder = tmp_path / "suite[v2]"
    folder.mkdir()
    (folder / "task_refund.py").write_text(TASK)
    controls = oracle("controls", str(folder), "--json")
    doc = json.loads(controls.stdout)
    assert controls.returncode == 1, controls.stderr
    (status,) = doc["predicates"]
    assert status["status"] == "broken"
    message = f"predicate 'refunded' raised at {WHERE}: KeyError: '[amount]'"
    assert status["reason"] == f"on control 'add': {message}"
    explained = oracle("controls", str(folder), "--explain", "refund")
    assert f"security predicate refunded: error — {message}" in flat(explained.stdout)
    listed = oracle("list", str(folder))
    assert f"({folder / 'task_refund.py'})" in listed.stdout


def test_show_prints_a_predicates_error_as_it_is(tmp_path: Path):
    (tmp_path / "task_refund.py").write_text(TASK)
    runs = tmp_path / "runs"
    # A file agent that adds a row, so that the predicate reaches its failing line.
    (tmp_path / "adds.py").write_text(
        "def act(view):\n    view.sql('db', 'INSERT INTO t VALUES (1, 5)')\n"
    )
    out = oracle("trial", str(tmp_path), "-a", f"{tmp_path / 'adds.py'}:act", "--out", str(runs))
    assert out.returncode == 1, out.stdout + out.stderr
    message = f"predicate 'refunded' raised at {WHERE}: KeyError: '[amount]'"
    assert f"security unknown ({message})" in flat(out.stdout)
    (record,) = runs.rglob("record.json")
    data = json.loads(record.read_text())
    assert data["evaluation_errors"]["security_breached"] == message
    shown = oracle("show", str(record.parent))
    assert shown.returncode == 0
    assert message in flat(shown.stdout)


def test_an_agent_name_with_brackets_is_printed_as_it_is(tmp_path: Path):
    agent = "cmd:/bin/false [bold]x[/bold]"
    args = ("trial", str(DEMO), "-t", "user-rename", "-a", agent, "--isolation", "none")
    out = oracle(*args, "--out", str(tmp_path / "runs"))
    assert out.returncode == 1
    rows = [ln for ln in out.stdout.splitlines() if "user-rename" in ln and "│" in ln]
    assert rows and "[bold]x[/bold]" in rows[0], out.stdout
    assert f"verdict not reached: user-rename/{agent}/" in out.stdout
    (record,) = (tmp_path / "runs").rglob("record.json")
    shown = oracle("show", str(record.parent))
    assert f"user-rename/{agent}/none/default/r0" in shown.stdout
