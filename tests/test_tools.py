"""Tool-call recording: harness-tier records of each call, its result and declared effects."""

from __future__ import annotations

import pytest

from oracle.agent import AgentError, CallableAgent
from oracle.sandbox import SandboxView
from oracle.tools import recording, tool


@tool(effects=["mail"])
def send_mail(to: str, body: str = "") -> str:
    return f"queued for {to}"


@tool
def read_file(path: str) -> str:
    return "contents of " + path


@tool(name="explode", effects=["db"])
def broken(n: int) -> int:
    raise RuntimeError(f"tool failed on {n}")


def test_calls_are_recorded_with_arguments_results_and_effects():
    with recording() as log:
        send_mail("a@x.test", body="hi")
        read_file("notes.md")
    first, second = log.calls
    assert (first.name, first.arguments, first.effects, first.ok) == (
        "send_mail",
        {"to": "a@x.test", "body": "hi"},
        ["mail"],
        True,
    )
    assert first.result == "queued for a@x.test"
    assert second.effects == [] and second.result == "contents of notes.md"
    assert first.started_at <= first.finished_at


def test_errors_are_recorded_and_still_raised():
    with recording() as log, pytest.raises(RuntimeError):
        broken(3)
    (call,) = log.calls
    assert call.name == "explode" and not call.ok
    assert "tool failed on 3" in (call.error or "")


def test_outside_a_recording_nothing_is_kept():
    assert send_mail("a@x.test") == "queued for a@x.test"
    with recording() as log:
        pass
    assert log.calls == []


def test_callable_agents_hand_over_their_calls():
    def agent(view):
        send_mail("ops@x.test")
        return "done"

    run = CallableAgent(agent).run(SandboxView(task="t", prompt="p", env={}))
    assert run.tool_calls is not None and [c.name for c in run.tool_calls] == ["send_mail"]


def test_an_agent_without_tool_calls_hands_over_no_log_unless_it_owns_tools():
    view = SandboxView(task="t", prompt="p", env={})
    assert CallableAgent(lambda v: None).run(view).tool_calls is None
    assert CallableAgent(lambda v: None, owns_tools=True).run(view).tool_calls == ()


def test_calls_survive_a_forked_run_and_its_failure():
    def agent(view):
        read_file("a")
        broken(1)

    with pytest.raises(AgentError) as info:
        CallableAgent(agent, timeout=30).run(SandboxView(task="t", prompt="p", env={}))
    calls = info.value.run.tool_calls
    assert calls is not None and [(c.name, c.ok) for c in calls] == [
        ("read_file", True),
        ("explode", False),
    ]
