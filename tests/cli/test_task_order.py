"""The order tasks are handed to the workers (`oracle.cli.parallel`): the longest first, by
the seconds each took the last time it ran side by side, else by a guess from its controls."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from oracle.cli import parallel
from tests.cli.test_cli import ORACLE
from tests.conftest import DEMO


def _task(name: str, controls: int, kind: str = "sql") -> SimpleNamespace:
    return SimpleNamespace(
        name=name,
        origin=Path(f"/t/task_{name}.py"),
        sinks=[SimpleNamespace(kind=kind)],
        controls=[object()] * controls,
    )


def test_without_times_a_workflow_task_and_more_controls_go_first():
    tasks = [_task("small", 2), _task("wide", 9), _task("world", 3, kind="github")]
    # A guess: a workflow task's 4 runs at 1.5 s against 10 plain ones at 0.3 s.
    assert [t.name for t in parallel._longest_first(tasks, {}, "demo")] == [
        "world",
        "wide",
        "small",
    ]


def test_the_seconds_of_the_last_run_decide_over_the_guess():
    tasks = [_task("small", 2), _task("world", 6, kind="github")]
    took = {parallel._time_key(tasks[0], "demo"): 30.0}
    assert [t.name for t in parallel._longest_first(tasks, took, "demo")] == ["small", "world"]
    # Seconds of another kind of run (controls alone) say nothing of this one.
    other = {parallel._time_key(tasks[0], "controls"): 30.0}
    assert [t.name for t in parallel._longest_first(tasks, other, "demo")] == ["world", "small"]


def test_times_are_kept_merged_and_a_bad_file_is_only_no_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert parallel._load_times() == {}
    parallel._save_times({"a": 1.5})
    parallel._save_times({"b": 2.0, "a": 3.0})
    assert parallel._load_times() == {"a": 3.0, "b": 2.0}
    path = tmp_path / "oracle" / parallel.TIMES_FILE
    path.write_text('{"a": "slow", "b": true, "c": 4}')
    assert parallel._load_times() == {"c": 4.0}
    path.write_text("{not json")
    assert parallel._load_times() == {}
    parallel._save_times({"d": 1.0})  # a broken file is replaced, not a reason to fail
    assert parallel._load_times() == {"d": 1.0}
    assert [p.name for p in path.parent.iterdir()] == [parallel.TIMES_FILE]
    # A cache folder that cannot be written: no hint kept, and no error.
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    parallel._save_times({"e": 1.0})
    assert parallel._load_times() == {} and blocked.read_text() == "x"


def test_the_times_of_task_files_that_are_gone_are_dropped(tmp_path, monkeypatch):
    """Every test run and every fresh checkout adds keys (they name the task file's path):
    those whose file was deleted go at the next save, the others stay."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    here = tmp_path / "task_here.py"
    here.write_text("")
    gone = tmp_path / "task_gone.py"
    gone.write_text("")
    parallel._save_times({f"{here}::a::demo": 1.0, f"{gone}::b::demo": 2.0, "code::c::demo": 3.0})
    assert len(parallel._load_times()) == 3
    gone.unlink()
    parallel._save_times({f"{here}::a::controls": 4.0})
    assert parallel._load_times() == {
        f"{here}::a::demo": 1.0,
        f"{here}::a::controls": 4.0,
        "code::c::demo": 3.0,  # not a file's: kept
    }


@pytest.mark.e2e
def test_a_run_side_by_side_keeps_each_task_s_seconds(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    picks = ["-t", "log-level", "-t", "user-rename"]
    done = subprocess.run(
        [ORACLE, "controls", str(DEMO), *picks, "--jobs", "2", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    kept = json.loads((tmp_path / "cache" / "oracle" / parallel.TIMES_FILE).read_text())
    names = {k.split("::")[1]: (k.split("::")[2], v) for k, v in kept.items()}
    assert set(names) == {"log-level", "user-rename"}
    assert all(mode == "controls" and 0 < seconds < 300 for mode, seconds in names.values())
