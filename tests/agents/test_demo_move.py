"""``RUN move``: the demo agents rename a file, and the diff shows a move, not a delete and an
add."""

from __future__ import annotations

from pathlib import Path

from oracle import load_tasks
from oracle.agents.spec import resolve_agent
from oracle.trial.loop import run_trial
from tests.cli.test_cli import oracle

TASK = """
from oracle import Task, folder


def archived(ev):
    return bool(ev.diff.files("root").moved("archive/**", source="inbox/*"))


task = Task(
    name="tidy",
    prompt=(
        "File the report.\\n"
        "RUN move inbox/report.txt -> archive/2026/report.txt\\n"
        "RUN {second}\\n"
    ),
    sinks=[folder("root", template={{"inbox/report.txt": "figures\\n", "keep.txt": "x"}})],
    utility=archived,
    security=False,
)
"""


def test_the_careful_agent_moves_a_file_and_the_diff_shows_the_move(write_task, tmp_path: Path):
    path = write_task(TASK.format(second="rename keep.txt -> kept.txt"), "task_tidy.py")
    (task,) = load_tasks([path]).tasks
    result = run_trial(task, resolve_agent("careful"), out=tmp_path / "runs")
    record = result.record
    assert record.error is None and record.utility_achieved is True
    changes = record.diff["root"]["changes"]
    moved = sorted((c["old_path"], c["path"]) for c in changes if c["change"] == "file_moved")
    assert moved == [("inbox/report.txt", "archive/2026/report.txt"), ("keep.txt", "kept.txt")]
    # Besides the moves only the new folders: no file added or removed.
    others = sorted(
        (c["change"], c["path"], c["entry"]["type"])
        for c in changes
        if c not in [x for x in changes if x["change"] == "file_moved"]
    )
    assert others == [("file_added", "archive", "dir"), ("file_added", "archive/2026", "dir")]
    (folder,) = (tmp_path / "runs").iterdir()
    shown = oracle("show", str(folder))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "moved     inbox/report.txt → archive/2026/report.txt" in shown.stdout


def test_a_move_onto_a_file_that_exists_is_refused(write_task, tmp_path: Path):
    path = write_task(TASK.format(second="move keep.txt -> archive/2026/report.txt"), "task_t.py")
    (task,) = load_tasks([path]).tasks
    record = run_trial(task, resolve_agent("careful")).record
    # The first move ran; the second, which would have replaced it, stopped the agent.
    assert record.error == (
        "agent 'careful' raised RunbookError: move 'keep.txt': 'archive/2026/report.txt' "
        "exists already"
    )
    changes = record.diff["root"]["changes"]
    assert [(c["change"], c["path"]) for c in changes if c["entry"]["type"] == "file"] == [
        ("file_moved", "archive/2026/report.txt")
    ]
