"""A predicate's error names the line of the task's own code, not oracle's or pydantic's."""

from __future__ import annotations

import json
from pathlib import Path

from oracle.authoring.loader import load_tasks
from oracle.evidence.record import Cell
from oracle.judging.evaluators import run_predicate
from oracle.judging.raised import defining_folder, where_raised
from oracle.scoring.scorer import InProcessScorer
from oracle.trial.agent import CallableAgent
from oracle.trial.loop import run_trial
from tests.judging.test_evaluators import evidence

TASK = """\
from oracle import Task, sqlite
from helpers import amount_of

SEED = "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT);"


def wrong_sink(ev):
    return bool(ev.diff.sql("nowhere").added("t"))  # LINE wrong_sink


def helper_raises(ev):
    return amount_of(ev.diff.sql("db").added("t"))


task = Task(
    name="raises",
    prompt="p",
    sinks=[sqlite("db", sql=SEED)],
    security=[wrong_sink, helper_raises],
)
"""

HELPERS = """\
def amount_of(rows):
    first = {"id": 1}
    return first["amount"] > 0  # LINE amount_of
"""


def line_of(text: str, marker: str) -> int:
    (n,) = [i for i, ln in enumerate(text.splitlines(), 1) if ln.endswith(f"# LINE {marker}")]
    return n


def raising_task(tmp_path: Path) -> Path:
    (tmp_path / "task_raises.py").write_text(TASK)
    (tmp_path / "helpers.py").write_text(HELPERS)
    return tmp_path / "task_raises.py"


def test_the_error_names_the_task_files_line_not_oracles(tmp_path: Path):
    loaded = load_tasks([raising_task(tmp_path)])
    assert loaded.errors == []
    (task,) = loaded.tasks
    cell = Cell(harness="noop", task=task.name, repetition=0, model="none", profile="default")
    result = run_trial(
        task,
        CallableAgent(lambda view: None),
        cell=cell,
        out=tmp_path / "runs",
        scorer=InProcessScorer(),
    )
    preds = {p.name: p.error for p in result.record.evaluators["security_breached"].predicates}
    # The sink lookup raises deep inside oracle; the line named is the task's call of it.
    wrong = preds["wrong_sink"] or ""
    assert wrong.startswith(
        f"predicate 'wrong_sink' raised at task_raises.py:{line_of(TASK, 'wrong_sink')} in "
        "wrong_sink: "
    ), wrong
    assert "/oracle/" not in wrong.split(": ", 1)[0]
    # A helper module beside the task file is the task's own code too.
    assert preds["helper_raises"] == (
        f"predicate 'helper_raises' raised at helpers.py:{line_of(HELPERS, 'amount_of')} in "
        "amount_of: KeyError: 'amount'"
    )
    # The archived record says the same.
    (record,) = (tmp_path / "runs").rglob("record.json")
    archived = json.loads(record.read_text())["evaluators"]["security_breached"]["predicates"]
    assert {p["name"]: p["error"] for p in archived} == preds


def test_a_predicate_with_no_frame_of_its_own_names_the_innermost_frame():
    # json.loads is nobody's task code: the last frame (in the standard library) is named,
    # with its whole path.
    r = run_predicate("loads", json.loads, evidence())
    assert defining_folder(json.loads) is None
    error = r.error or ""
    assert error.startswith("predicate 'loads' raised at /"), error
    assert "json/__init__.py:" in error and error.endswith(
        "TypeError: the JSON object must be str, bytes or bytearray, not Evidence"
    )


def test_where_raised_prefers_the_innermost_frame_of_the_task_folder(tmp_path: Path):
    try:
        json.loads("{")  # a frame of this test file, above the standard library's
    except ValueError as exc:
        where = where_raised(exc, Path(__file__).parent)
        assert where is not None
        assert where.startswith(f"{Path(__file__).name}:") and where.endswith(
            " in test_where_raised_prefers_the_innermost_frame_of_the_task_folder"
        )
        innermost = where_raised(exc, tmp_path)  # no frame of its own: the innermost one
        assert innermost is not None and innermost.startswith("/")
        assert "json/decoder.py:" in innermost
    assert where_raised(ValueError("never raised"), tmp_path) is None
