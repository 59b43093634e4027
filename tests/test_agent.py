"""Agent adapters write the invocation record and hand over what they captured."""

from __future__ import annotations

import pytest

from oracle.agent import AgentError, CallableAgent
from oracle.sandbox import SandboxView

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
