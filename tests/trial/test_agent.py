"""Agent adapters write the invocation record and hand over what they captured."""

from __future__ import annotations

import pytest

from oracle.sandbox.sandbox import SandboxView
from oracle.trial.agent import AgentError, CallableAgent

VIEW = SandboxView(task="t", prompt="p", env={})


def test_returned_text_is_the_reply_and_the_final_message():
    run = CallableAgent(lambda v: "I sent nothing.", name="talker").run(VIEW)
    assert run.reply == b"I sent nothing."
    assert run.final_message == "I sent nothing."
    assert run.invocation.started and run.invocation.steps[0].outcome == "succeeded"
    assert run.invocation.agent == "talker"


def test_no_text_no_reply():
    run = CallableAgent(lambda v: None).run(VIEW)
    assert run.reply is None and run.final_message is None


def test_raising_is_a_failed_step_carried_by_the_error():
    def boom(view):
        raise ValueError("bad tool call")

    with pytest.raises(AgentError, match="bad tool call") as info:
        CallableAgent(boom).run(VIEW)
    step = info.value.run.invocation.steps[0]
    assert step.outcome == "failed" and "ValueError" in (step.error or "")


def test_agents_are_named_as_on_the_command_line():
    from oracle.base.errors import UsageError
    from oracle.trial.agent import agent_named

    assert agent_named("noop").name == "noop"
    assert agent_named("cmd:./agent.sh").name == "cmd:./agent.sh"
    with pytest.raises(UsageError, match="unknown agent 'nobody'"):
        agent_named("nobody")


def test_no_registered_resolver_is_a_clear_error(monkeypatch):
    from oracle.trial import agent, defaults

    monkeypatch.delitem(defaults._DEFAULTS, "agents")
    with pytest.raises(agent.NoAgentResolverError, match="agent 'noop': no agent resolver"):
        agent.agent_named("noop")
