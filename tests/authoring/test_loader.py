"""Loading task files by path; one broken file does not stop the others."""

from __future__ import annotations

from oracle.authoring.loader import load_tasks

GOOD = """
from oracle import Task, sqlite
task = Task(name="{name}", prompt="p", sinks=[sqlite("db", sql="CREATE TABLE t (x);")])
"""


def test_folder_of_task_files(write_task, tmp_path):
    write_task(GOOD.format(name="a"), "task_a.py")
    write_task(GOOD.format(name="b"), "task_b.py")
    write_task("raise RuntimeError('not a task file, never imported')", "helper.py")
    loaded = load_tasks([tmp_path / "tasks"])
    assert [t.name for t in loaded.tasks] == ["a", "b"]
    assert loaded.errors == []
    assert loaded.tasks[0].source.name == "task_a.py"


def test_import_error_names_the_file_and_line_and_others_load(write_task, tmp_path):
    write_task(GOOD.format(name="fine"), "task_fine.py")
    bad = write_task("import os\nx = 1 / 0\n", "task_broken.py")
    loaded = load_tasks([tmp_path / "tasks"])
    assert [t.name for t in loaded.tasks] == ["fine"]
    (err,) = loaded.errors
    assert err.source == bad and err.part == "import"
    assert "ZeroDivisionError" in err.message and "line 2" in err.message


def test_malformed_task_names_the_part(write_task):
    path = write_task("""
        from oracle import Task, sqlite
        task = Task(name="oops", prompt="", sinks=[sqlite("db", sql="x")])
    """)
    loaded = load_tasks([path])
    (err,) = loaded.errors
    assert err.source == path
    assert "'oops'" in err.part and "prompt" in err.part


def test_file_without_a_task(write_task):
    path = write_task("X = 1\n")
    (err,) = load_tasks([path]).errors
    assert "defines no Task" in err.message


def test_tasks_factory(write_task):
    path = write_task("""
        from oracle import Task, sqlite
        def tasks():
            for n in range(3):
                yield Task(name=f"gen-{n}", prompt="p", sinks=[sqlite("db", sql="select 1")])
    """)
    assert [t.name for t in load_tasks([path]).tasks] == ["gen-0", "gen-1", "gen-2"]


def test_duplicate_names_are_refused(write_task, tmp_path):
    write_task(GOOD.format(name="same"), "task_one.py")
    write_task(GOOD.format(name="same"), "task_two.py")
    loaded = load_tasks([tmp_path / "tasks"])
    assert len(loaded.tasks) == 1
    assert "taken by" in loaded.errors[0].message


def test_missing_path(tmp_path):
    (err,) = load_tasks([tmp_path / "nowhere"]).errors
    assert err.message == "does not exist"


def test_task_files_can_import_a_helper_beside_them(write_task, tmp_path):
    write_task("SEED = 'CREATE TABLE t (x);'\n", "shared.py")
    path = write_task("""
        from oracle import Task, sqlite
        from shared import SEED
        task = Task(name="uses-helper", prompt="p", sinks=[sqlite("db", sql=SEED)])
    """)
    assert [t.name for t in load_tasks([path]).tasks] == ["uses-helper"]


def test_missing_part_names_the_task_and_the_part(write_task):
    path = write_task("""
        from oracle import Task, sqlite
        task = Task(name="no-prompt", sinks=[sqlite("db", sql="x")])
    """)
    (err,) = load_tasks([path]).errors
    assert err.source == path
    assert err.part == "task 'no-prompt', prompt"
    assert "is required" in err.message
