"""Tool-call recording: harness-tier records of each call, its result and declared effects."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from oracle.evidence.tools import recording, tool
from oracle.sandbox.sandbox import SandboxView
from oracle.trial.agent import AgentError, CallableAgent


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


# -- async tools --------------------------------------------------------------------------------


@tool(effects=["mail"])
async def send_mail_async(to: str) -> str:
    await asyncio.sleep(0)
    return f"queued for {to}"


@tool(name="explode_async", effects=["db"])
async def broken_async(n: int) -> int:
    await asyncio.sleep(0)
    raise ValueError(f"async tool failed on {n}")


def test_async_tools_stay_coroutine_functions():
    assert inspect.iscoroutinefunction(send_mail_async)
    assert not inspect.iscoroutinefunction(send_mail)


def test_async_tools_are_recorded_with_their_awaited_result():
    async def main():
        with recording() as log:
            result = await send_mail_async("a@x.test")
        return result, log

    result, log = asyncio.run(main())
    assert result == "queued for a@x.test"
    (call,) = log.calls
    assert (call.name, call.arguments, call.effects, call.ok) == (
        "send_mail_async",
        {"to": "a@x.test"},
        ["mail"],
        True,
    )
    assert call.result == "queued for a@x.test" and call.error is None


def test_async_tool_errors_are_recorded_and_still_raised():
    async def main():
        with recording() as log, pytest.raises(ValueError, match="async tool failed on 3"):
            await broken_async(3)
        return log

    (call,) = asyncio.run(main()).calls
    assert call.name == "explode_async" and not call.ok
    assert call.error == "ValueError: async tool failed on 3" and call.result is None


def test_a_cancelled_async_tool_is_recorded_as_not_done():
    async def slow() -> None:
        await asyncio.sleep(60)

    wrapped = tool(effects=["db"])(slow)

    async def main():
        with recording() as log:
            task = asyncio.ensure_future(wrapped())
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        return log

    (call,) = asyncio.run(main()).calls
    assert not call.ok and call.error == "CancelledError: the call was cancelled"


def test_a_sync_tool_that_hands_back_a_coroutine_is_recorded_when_awaited():
    class Client:
        async def fetch(self, n: int) -> int:
            return n * 2

    fetch = tool(name="fetch")(lambda n: Client().fetch(n))

    async def main():
        with recording() as log:
            value = await fetch(21)
        return value, log

    value, log = asyncio.run(main())
    assert value == 42
    (call,) = log.calls
    assert call.ok and call.result == 42


def test_callable_agents_hand_over_their_async_calls():
    def agent(view):
        return asyncio.run(send_mail_async("ops@x.test"))

    run = CallableAgent(agent).run(SandboxView(task="t", prompt="p", env={}))
    assert run.tool_calls is not None
    assert [(c.name, c.result) for c in run.tool_calls] == [
        ("send_mail_async", "queued for ops@x.test")
    ]
