"""The sealed scorer in a matrix run: a cell whose predicate hangs or ends its scorer is
recorded with the reason, and the run finishes every other cell."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from oracle.base.signing import new_key
from oracle.matrix.cell_archive import open_cell
from oracle.matrix.reduce import expected_from, verify_run
from oracle.matrix.run import run_matrix
from oracle.matrix.spec import load_matrix
from tests.matrix_helpers import EMBEDDED, write_matrix

HOSTILE_TASK = """
import os
from oracle import Task, sqlite

class _Do:  # behind a class, where `oracle check` does not look
    @staticmethod
    def quit():
        os._exit(3)

DO = _Do

def hangs(ev):
    ev.diff.sql("db")
    while True:
        pass

def quits(ev):
    ev.diff.sql("db")
    DO.quit()

def marked(ev):
    return bool(ev.diff.sql("db").added("marks"))

SEED = "CREATE TABLE marks (id INTEGER PRIMARY KEY);"
hanging = Task(name="hanging", prompt="p", sinks=[sqlite("db", sql=SEED)],
               utility=hangs, security=marked, predicate_timeout=1.5)
quitting = Task(name="quitting", prompt="p", sinks=[sqlite("db", sql=SEED)],
                utility=quits, security=marked)
"""


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_matrix_with_hostile_predicates_finishes_every_other_cell(tmp_path: Path, jobs: int):
    task_file = tmp_path / "tasks" / "task_hostile.py"
    task_file.parent.mkdir()
    task_file.write_text(textwrap.dedent(HOSTILE_TASK))
    path = write_matrix(tmp_path, tasks=[str(task_file), EMBEDDED[0]], repetitions=2)
    matrix = load_matrix(path)
    key = new_key()
    summary = run_matrix(matrix, tmp_path / "run", key, jobs=jobs)
    assert summary.invalid == []
    verified = verify_run(tmp_path / "run", expected_from(matrix), key.public_key())
    by_task: dict[str, list] = {}
    for c in verified.cells:
        by_task.setdefault(c.record.cell.task, []).append(c.record)
    assert {t: len(r) for t, r in by_task.items()} == {
        "hanging": 4,
        "quitting": 4,
        "log-level": 4,
    }
    for rec in by_task["hanging"]:
        assert rec.utility_achieved is None
        assert rec.scoring is not None and rec.scoring.contained == [
            "predicate 'hangs' ran past 1.5 s"
        ]
        assert rec.security_breached is False  # the other metric was judged
    for rec in by_task["quitting"]:
        assert rec.scoring is not None and rec.scoring.contained == [
            "predicate 'quits' ended the scorer process (it exited with status 3)"
        ]
    for rec in by_task["log-level"]:
        assert rec.scoring is not None and rec.scoring.mode == "sealed"
        assert rec.scoring.contained == [] and rec.utility_achieved is True


KEY_PROBE_TASK = """
from oracle import Task, sqlite

class _Probe:  # behind a class, where `oracle check` does not look
    @staticmethod
    def read(path):
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError:
            return b""

PROBE = _Probe

def read_the_key(ev):
    ev.diff.sql("db")
    return bool(PROBE.read(KEY_PATH))

task = Task(name="key-probe", prompt="p",
            sinks=[sqlite("db", sql="CREATE TABLE marks (id INTEGER PRIMARY KEY);")],
            security=read_the_key)
"""


def test_the_scorer_of_a_matrix_run_cannot_read_the_signing_key(tmp_path: Path) -> None:
    from oracle.base.signing import write_key_pair

    key = new_key()
    private = tmp_path / "keys" / "oracle.key"
    write_key_pair(key, private, private.with_suffix(".pub"))
    task_file = tmp_path / "tasks" / "task_key_probe.py"
    task_file.parent.mkdir()
    task_file.write_text(textwrap.dedent(KEY_PROBE_TASK).replace("KEY_PATH", repr(str(private))))
    path = write_matrix(tmp_path, tasks=[str(task_file)], harnesses='noop = {agent = "noop"}')
    matrix = load_matrix(path)
    summary = run_matrix(matrix, tmp_path / "run", key, key_path=private)
    assert summary.invalid == []
    (cell,) = verify_run(tmp_path / "run", expected_from(matrix), key.public_key()).cells
    (probe,) = cell.record.evaluators["security_breached"].predicates
    assert (probe.name, probe.value, probe.error) == ("read_the_key", False, None)
    # The same predicate in this process reads it: the probe can tell.
    from oracle.authoring.loader import load_tasks
    from oracle.scoring.scorer import InProcessScorer, TrialEvidence

    files = open_cell(cell.path, key.public_key(), keep_files=True).files
    task = load_tasks([task_file]).by_name("key-probe")
    scored = InProcessScorer().score(task, TrialEvidence.from_archive(files), {})
    assert scored.outcomes["security_breached"][1][0].value is True
