"""Nothing is replaced silently: an `--out` that holds a trial refuses it, a trial whose
folder is taken is archived beside it and says so, and every embedded run archives apart."""

from __future__ import annotations

import hashlib
import os
import subprocess
import warnings
from pathlib import Path

import pytest

from oracle import load_tasks, run_trial
from oracle.evidence.archive import ArchiveExistsWarning, verify_archive
from oracle.evidence.record import Cell, TrialRecord
from oracle.scoring.scorer import InProcessScorer
from oracle.trial.embed import sandbox
from tests.conftest import DEMO, REPO, agent
from tests.forked_cli import ORACLE

RENAME = load_tasks([DEMO]).by_name("user-rename")


def digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_an_out_folder_that_holds_the_trial_refuses_it_and_keeps_the_archive(tmp_path: Path):
    out = tmp_path / "runs"
    args = [ORACLE, "trial", str(DEMO), "-t", "user-rename", "-a", "careful", "--out", str(out)]
    env = {**os.environ, "COLUMNS": "300"}

    def trial() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            args, cwd=REPO, capture_output=True, text=True, env=env, timeout=300, check=False
        )

    first = trial()
    assert first.returncode == 0, first.stdout + first.stderr
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    before = digests(folder)

    again = trial()
    assert again.returncode == 2, again.stdout + again.stderr
    assert f"{out} already holds 1 of these trials ({folder.name})" in again.stdout
    assert "nothing was run" in again.stdout
    assert [p for p in out.iterdir() if p.is_dir()] == [folder]
    assert digests(folder) == before  # the first trial's archive, byte for byte


def test_a_trial_whose_folder_is_taken_is_archived_beside_it_and_says_so(tmp_path: Path):
    cell = Cell(harness="h", task=RENAME.name)
    scorer = InProcessScorer()
    first = run_trial(RENAME, agent(lambda v: None, "noop"), cell=cell, out=tmp_path, scorer=scorer)
    assert first.archive == tmp_path / cell.folder
    kept = digests(first.archive)
    with pytest.warns(ArchiveExistsWarning, match="already holds a trial archive"):
        second = run_trial(
            RENAME, agent(lambda v: None, "noop"), cell=cell, out=tmp_path, scorer=scorer
        )
    assert second.archive == tmp_path / f"{cell.folder}.2"
    assert digests(first.archive) == kept
    assert verify_archive(second.archive) == []
    assert TrialRecord.model_validate_json((second.archive / "record.json").read_bytes()) == (
        second.record
    )


def test_embedded_runs_of_one_task_and_harness_archive_apart(tmp_path: Path):
    def rename(view):  # the demo task's own fix, as a harness's agent would make it
        view.sql("app", "UPDATE users SET name = 'robert' WHERE id = 3")

    archives = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", ArchiveExistsWarning)  # no fallback needed: own runs
        for _ in range(2):
            with sandbox(RENAME, harness="h", out=tmp_path, scorer=InProcessScorer()) as sb:
                rename(sb.view)
                result = sb.finish(agent="a", reply="done")
            archives.append(result.archive)
        with sandbox(
            RENAME, harness="h", out=tmp_path, run="my-eval-level-hard", scorer=InProcessScorer()
        ) as sb:
            result = sb.finish(agent="a", reply="nothing")
        archives.append(result.archive)
    assert len(set(archives)) == 3
    assert all(a is not None and a.name == Cell(harness="h", task=RENAME.name).folder
               for a in archives)  # fmt: skip
    assert archives[2] == tmp_path / "my-eval-level-hard" / archives[2].name
    assert all(a is not None and verify_archive(a) == [] for a in archives)
