"""Commands run one by one in a trial's sandbox (real bubblewrap, a real network namespace),
and their records folded into the trial's run record."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

import oracle.sandbox.sandbox  # noqa: F401  (registers the sandbox `embed` opens)
from oracle.authoring.loader import load_tasks
from oracle.evidence.invocation import Invocation, Step, autonomy
from oracle.integrations.sandbox_exec import NOT_STARTED, merge_execs, run_in_sandbox
from oracle.trial.agent import RunRecord
from oracle.trial.embed import sandbox
from tests.conftest import require_tools

DEMO = Path(__file__).resolve().parents[2] / "tasks" / "demo"


@pytest.fixture(scope="module")
def box():
    require_tools("bwrap", "nft", "ip", "nsenter", "sqlite3", root=True)
    task = load_tasks([str(DEMO)]).by_name("user-rename")
    with sandbox(task) as sb:
        assert sb.ready, sb.error
        yield sb


def test_stdin_and_folder_reach_the_command(box):
    done = run_in_sandbox(box.view, ["sh", "-c", "pwd; cat"], stdin=b"from stdin", cwd="db")
    assert done.exit_code == 0
    assert done.stdout.decode().splitlines() == [f"{box.view.agent_dir}/db", "from stdin"]


def test_a_missing_program_is_an_ordinary_failure(box):
    done = run_in_sandbox(box.view, ["no-such-program-here"])
    assert done.exit_code == NOT_STARTED and b"not found" in done.stderr


def test_a_folder_named_hidden_is_an_empty_watched_decoy(box):
    # A folder the sandbox would show (under /opt, a system folder it binds read-only), not
    # the checkout's: a clone under /tmp is not in the sandbox at all (its /tmp is private).
    if not os.access("/opt", os.W_OK):
        pytest.skip("needs a writable /opt for a folder the sandbox would otherwise show")
    secret = Path(tempfile.mkdtemp(prefix="oracle-hidden-", dir="/opt"))
    try:
        (secret / "note.txt").write_text("not for the agent")
        hidden = [secret, Path(tempfile.gettempdir())]  # the second holds the agent folder
        done = run_in_sandbox(box.view, ["ls", "-A", str(secret)], hidden=hidden)
        assert done.exit_code == 0 and done.stdout == b""
        assert done.run.invocation.hidden_opened == [str(secret)]
        assert tempfile.gettempdir() not in done.run.invocation.hidden  # left out, not hidden
    finally:
        shutil.rmtree(secret)


def test_merged_commands_are_steps_in_start_order_and_never_the_agent_step(box):
    first = run_in_sandbox(box.view, ["true"])
    second = run_in_sandbox(box.view, ["sh", "-c", "exit 3"])
    harness = RunRecord(
        Invocation(
            adapter="inspect",
            agent="solver",
            started=True,
            steps=[Step(name="solver", outcome="succeeded")],
        )
    )
    run = merge_execs(harness, [second, first], agent="solver")
    steps = [(s.name, s.outcome, s.agent, s.error) for s in run.invocation.steps]
    assert steps == [
        ("solver", "succeeded", True, None),
        ("exec 1", "succeeded", False, None),
        ("exec 2", "failed", False, "exit status 3"),
    ]
    assert autonomy(run.invocation) == (True, "an agent step succeeded")
    assert set(run.logs) == {
        "sandbox-exec-1.stdout",
        "sandbox-exec-1.stderr",
        "sandbox-exec-2.stdout",
        "sandbox-exec-2.stderr",
        "sandbox-execs.json",
    }
    alone = merge_execs(None, [first], agent="solver")
    assert autonomy(alone.invocation) == (None, "the invocation record holds no agent step")
