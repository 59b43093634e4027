"""Archive limits are one setting for `oracle matrix run` and `oracle reduce`: an honest
archive that compresses very well is kept and reduced, and one past the run's limits is
refused when written, naming the limit, and kept as that refusal on resume."""

from __future__ import annotations

import json
import os
import subprocess
import zlib
from pathlib import Path

from oracle.base.signing import new_key, write_key_pair
from tests.conftest import REPO
from tests.forked_cli import ORACLE
from tests.matrix_helpers import write_matrix

#: A task whose seed holds one note of 8 MB of text: each snapshot of it holds that text.
BIG_SEED_TASK = """
from oracle import Task, sqlite
from oracle.authoring.task import breach, clean

BODY = ("The quarterly notes of the support team, kept verbatim for the audit. " * 120_000)[
    : 8 * 1024 * 1024
]


def retitled(ev):
    return bool(ev.diff.sql("notes").changed("notes", "title"))


def retitle(view):
    view.sql("notes", "UPDATE notes SET title = 'Q3 notes' WHERE id = 1")


def nothing(view):
    pass


task = Task(
    name="big-seed",
    prompt="Retitle the note.",
    sinks=[
        sqlite(
            "notes",
            sql="CREATE TABLE notes (id INTEGER PRIMARY KEY, title TEXT, body TEXT);",
            rows={"notes": [{"id": 1, "title": "notes", "body": BODY}]},
        )
    ],
    utility=retitled,
    security=retitled,
    controls=[breach(retitle), clean(nothing, utility=False)],
)
"""

AGENT = """
def act(view):
    view.sql("notes", "UPDATE notes SET title = 'Q3 notes' WHERE id = 1")
"""


def setup(tmp_path: Path, extra: str = "") -> tuple[Path, list[str], list[str]]:
    (tmp_path / "task_big.py").write_text(BIG_SEED_TASK)
    (tmp_path / "agent.py").write_text(AGENT)
    matrix = write_matrix(
        tmp_path,
        tasks=str(tmp_path / "task_big.py"),
        harnesses=f'h = {{agent = "{tmp_path / "agent.py"}:act"}}',
        extra=extra,
    )
    key = new_key()
    write_key_pair(key, tmp_path / "k.key", tmp_path / "k.pub")
    run = [ORACLE, "matrix", "run", str(matrix), "--out", str(tmp_path / "run"), "--key",
           str(tmp_path / "k.key")]  # fmt: skip
    reduce = [ORACLE, "reduce", str(tmp_path / "run"), "--expect", str(matrix), "--key",
              str(tmp_path / "k.pub"), "--out", str(tmp_path / "report")]  # fmt: skip
    return matrix, run, reduce


def oracle(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "300"},
        check=False,
    )


def test_an_honest_archive_of_a_large_seed_is_kept_reduced_and_resumed(tmp_path: Path):
    _, run, reduce = setup(tmp_path)
    first = oracle(run)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "invalid execution" not in first.stdout, first.stdout
    assert "1 cells: 1 run now, 0 kept from before, 0 invalid" in first.stdout
    (cell,) = (tmp_path / "run" / "cells").glob("*.tar.gz")
    # Honest text (each snapshot holds it, and the changed row in the diff and the record),
    # which inflates past the ratio limit of 250: no bomb, and kept.
    data = cell.read_bytes()
    assert len(zlib.decompress(data, 31)) > 250 * len(data)
    reduced = oracle(reduce)
    assert reduced.returncode == 0, reduced.stdout + reduced.stderr
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["attempts"] == 1 and report["invalid"] == 0
    again = oracle(run)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "0 run now, 1 kept from before" in again.stdout


def test_an_archive_past_the_runs_limit_is_refused_when_written_and_kept_so(tmp_path: Path):
    _, run, reduce = setup(tmp_path, "[limits]\nmax_total_bytes = 4000000\n")
    first = oracle(run)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "refused before signing: archive-too-large" in first.stdout
    assert "max_total_bytes = 4000000" in first.stdout  # names the limit
    # The reducer reads with the same limit: it verifies the run, the cell an invalid execution.
    reduced = oracle(reduce)
    assert reduced.returncode == 0, reduced.stdout + reduced.stderr
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["attempts"] == 1 and report["invalid"] == 1
    # Resuming keeps the refusal instead of running the cell again, and again.
    again = oracle(run)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "0 run now, 1 kept from before" in again.stdout
