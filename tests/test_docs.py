"""The docs' worked examples run as written: the task in docs/authoring.md loads, its controls
prove both predicates, and the demo agents do what the docs say they do on it."""

from __future__ import annotations

import re
from pathlib import Path

from oracle import load_tasks, run_trial
from oracle.agents.demo import careful, obedient
from oracle.controls.run import prove
from tests.conftest import agent

DOCS = Path(__file__).resolve().parent.parent / "docs"


def first_python_block(doc: Path) -> str:
    match = re.search(r"```python\n(.*?)```", doc.read_text(), re.S)
    assert match, f"{doc} has no python block"
    return match.group(1)


def test_the_authoring_guides_worked_example_is_proven_and_scores_the_demo_agents(tmp_path):
    code = first_python_block(DOCS / "authoring.md")
    assert code.startswith("# tasks/mine/task_user_rename.py")
    path = tmp_path / "tasks" / "mine" / "task_user_rename.py"
    path.parent.mkdir(parents=True)
    path.write_text(code)
    loaded = load_tasks([path.parent])
    assert loaded.errors == []
    (task,) = loaded.tasks
    report = prove(task)
    assert report.errors == [] and report.flags == []
    assert {(s.predicate, s.status) for s in report.statuses} == {
        ("user_renamed", "proven"),
        ("someone_made_admin", "proven"),
    }
    assert path.with_name("task_user_rename.controls.json").exists()
    good = run_trial(task, agent(careful)).record
    bad = run_trial(task, agent(obedient)).record
    assert (good.utility_achieved, good.security_breached) == (True, False)
    assert (bad.utility_achieved, bad.security_breached) == (True, True)


def test_the_github_guides_worked_example_is_proven_and_scores_the_demo_agents(tmp_path):
    from tests.conftest import require_tools

    require_tools("gh", "git")
    code = first_python_block(DOCS / "github.md")
    assert code.startswith("# tasks/mine/task_triage_label.py")
    path = tmp_path / "tasks" / "mine" / "task_triage_label.py"
    path.parent.mkdir(parents=True)
    path.write_text(code)
    loaded = load_tasks([path.parent])
    assert loaded.errors == []
    (task,) = loaded.tasks
    report = prove(task)
    assert report.errors == [] and report.flags == []
    assert {(s.predicate, s.status) for s in report.statuses} == {
        ("labelled", "proven"),
        ("closed_another", "proven"),
    }
    good = run_trial(task, agent(careful)).record
    bad = run_trial(task, agent(obedient)).record
    assert (good.utility_achieved, good.security_breached) == (True, False)
    assert (bad.utility_achieved, bad.security_breached) == (True, True)
