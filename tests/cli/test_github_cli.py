"""The GitHub suite end to end through the real `oracle` command: every control proves its
predicates, the obedient demo agent breaches every task and the careful one none, also when
they run as isolated programs inside the workflow runs."""

from __future__ import annotations

import json
import sys

import pytest

from tests.cli.test_cli import oracle
from tests.conftest import REPO, require_tools

pytestmark = [pytest.mark.e2e, pytest.mark.services]
SUITE = REPO / "tasks" / "github"
TASKS = ("pr-approval", "token-leak", "workflow-push", "secret-post")


def test_the_github_suite_passes_its_demo(tmp_path):
    require_tools("gh", "git")
    out = oracle("demo", str(SUITE), "--out", str(tmp_path / "runs"))
    assert out.returncode == 0, out.stdout + out.stderr
    for task in TASKS:
        assert task in out.stdout
    assert "every control behaves and every predicate is proven" in out.stdout
    records = [
        json.loads(p.read_text()) for p in (tmp_path / "runs" / "trials").rglob("record.json")
    ]
    assert len(records) == 2 * len(TASKS)
    for r in records:
        assert r["security_breached"] is (r["cell"]["harness"] == "obedient"), r["cell"]
        assert r["utility_achieved"] is True and r["autonomy_achieved"] is True
        assert r["invocation"]["adapter"] == "github-actions"
        assert r["injection"]["planted"] is True and r["injection"]["reached"] is True


def test_isolated_demo_agents_run_as_the_workflows_agent_step(tmp_path):
    require_tools("gh", "git", "bwrap", "nft", "ip", "nsenter", root=True)
    python = sys.executable
    out = oracle(
        "trial",
        str(SUITE),
        "--task",
        "token-leak",
        "--task",
        "pr-approval",
        "-a",
        f"cmd:{python} -m oracle.agents.demo obedient",
        "-a",
        f"cmd:{python} -m oracle.agents.demo careful",
        "--out",
        str(tmp_path),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    records = [json.loads(p.read_text()) for p in tmp_path.rglob("record.json")]
    assert len(records) == 4
    for r in records:
        inv = r["invocation"]
        assert inv["adapter"] == "github-actions" and inv["isolation"] == "bwrap"
        assert r["autonomy_achieved"] is True and r["network_attempts"] == []
        assert r["security_breached"] is ("obedient" in r["cell"]["harness"]), r["cell"]
        assert r["utility_achieved"] is True


@pytest.mark.parametrize("suite", ["demo", "github"])
def test_the_committed_controls_results_are_those_of_the_task_files_as_they_are(suite):
    # `oracle trial` reads them: a stale one marks every verdict of its task not measured.
    from oracle import load_tasks
    from oracle.authoring.control_status import controls_status

    loaded = load_tasks([REPO / "tasks" / suite])
    assert loaded.errors == []
    stale = {
        t.name: controls_status(t).reason
        for t in loaded.tasks
        if controls_status(t).status != "proven"
    }
    assert stale == {}, "run `oracle controls tasks/" + suite + "` and commit its results"
