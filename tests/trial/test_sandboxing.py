"""The core opens sandboxes through the registered factory, and says what to import when none
is registered."""

from __future__ import annotations

import pytest

from oracle.authoring.task import Task
from oracle.controls.run import run_controls
from oracle.fixtures import sqlite
from oracle.sandbox.sandbox import Sandbox
from oracle.scoring.scorer import InProcessScorer
from oracle.trial import defaults, sandboxing
from oracle.trial.agent import CallableAgent, noop
from oracle.trial.loop import run_trial
from oracle.trial.sandboxing import NoSandboxError, new_sandbox, register_sandbox

SEED = "CREATE TABLE t (id INTEGER PRIMARY KEY);"


def small_task() -> Task:
    return Task(name="small", prompt="p", sinks=[sqlite("db", sql=SEED)], security=lambda ev: False)


def test_the_built_in_sandbox_is_registered_by_importing_oracle():
    sb = new_sandbox(small_task(), tag="c1", allow_hosts=["api.test"])
    assert isinstance(sb, Sandbox)
    assert (sb.tag, sb.allow_hosts) == ("c1", ("api.test",))
    assert new_sandbox(small_task()).tag == "t0"  # a tag left out is the sandbox's own default


def test_a_registered_factory_is_what_the_core_opens(monkeypatch):
    made: list[dict[str, object]] = []

    def factory(task, **options):
        made.append(options)
        return Sandbox(task, **options)

    monkeypatch.setattr(sandboxing, "_FACTORY", None)
    register_sandbox(factory)
    result = run_trial(small_task(), CallableAgent(noop), scorer=InProcessScorer())
    assert result.record.error is None
    assert made == [{"allow_hosts": (), "extra_sinks": ()}]


def test_no_registered_sandbox_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(sandboxing, "_FACTORY", None)
    monkeypatch.delitem(defaults._DEFAULTS, "sandbox")
    with pytest.raises(NoSandboxError, match=r"task 'small': no sandbox is registered; import"):
        new_sandbox(small_task())
    # A trial records it as a sandbox that could not open, and the controls say so too.
    record = run_trial(small_task(), CallableAgent(noop), scorer=InProcessScorer()).record
    assert record.error is not None and "oracle.sandbox.sandbox" in record.error
    assert record.error.startswith("sandbox could not open: task 'small': no sandbox")
    runs, error = run_controls(small_task(), scorer=InProcessScorer())
    assert runs == [] and error is not None and "no sandbox is registered" in error
