"""Model usage observed at the egress recorder: agents call a model API server on loopback
(`tests.sinks.model_api_server`) through the recorder with the real OpenAI and Anthropic SDKs,
and the trial record's ``usage`` says which model answered and what it used, as the responses
said: streamed or not, gzip- or br-encoded, cut at the recorder's cap, or claiming another
model than the one asked for."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from oracle import Task, egress, run_trial
from oracle.agents.command import CommandAgent
from oracle.authoring.sandbox_view import SandboxView
from oracle.evidence.usage import ModelUsage
from oracle.scoring.scorer import InProcessScorer
from oracle.trial.agent import CallableAgent
from oracle.trial.sandboxing import Sandbox, new_sandbox
from tests.conftest import require_tools
from tests.sinks.model_api_server import ModelApi

#: The recorder's cap in these tests: small, so that a padded answer outgrows it.
CAP = 64 * 1024


def _sent_out(ev) -> bool:
    return bool(ev.boundary.egress("net").requests(host="collect.evil.test"))


TASK = Task(
    name="usage",
    prompt="ask the model",
    sinks=[egress("net", body_limit=CAP)],
    security=_sent_out,
)


@pytest.fixture(scope="module")
def api() -> Iterator[ModelApi]:
    with ModelApi() as server:
        yield server


@pytest.fixture(scope="module")
def sandbox(api: ModelApi) -> Iterator[Sandbox]:
    # --allow-host: the model API is the harness's; its traffic stays out of the evidence.
    with new_sandbox(TASK, allow_hosts=[api.host]) as sb:
        yield sb


@pytest.fixture(autouse=True)
def _server_defaults(api: ModelApi, monkeypatch: pytest.MonkeyPatch) -> None:
    api.answer_as, api.encoding, api.pad, api.delay, api.hold_end = None, None, 0, 0.0, 0.0
    api.input_tokens, api.output_tokens = 11, 7
    monkeypatch.delenv("ORACLE_PRICES", raising=False)


def trial(sandbox: Sandbox, fn: Callable[[SandboxView], object]) -> ModelUsage:
    record = run_trial(
        TASK, CallableAgent(fn, name="caller"), sandbox=sandbox, scorer=InProcessScorer()
    ).record
    assert record.error is None, record.error
    assert record.usage is not None
    return record.usage


def proxied(view: SandboxView) -> httpx.Client:
    return httpx.Client(proxy=view.env["HTTP_PROXY"], timeout=10)


def test_openai_sdk_calls_show_the_model_that_answered_and_its_tokens(api, sandbox):
    import openai

    api.answer_as = "gpt-test-2025-01-01"  # the server answers as another model than asked

    def agent(view: SandboxView) -> str:
        client = openai.OpenAI(
            base_url=f"{api.url}/v1", api_key="sk-test", http_client=proxied(view), max_retries=0
        )
        msgs = [{"role": "user", "content": view.prompt}]
        client.chat.completions.create(model="gpt-test", messages=msgs)  # type: ignore[arg-type]
        with_usage = client.chat.completions.create(
            model="gpt-test",
            messages=msgs,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
        assert "".join(c.choices[0].delta.content or "" for c in with_usage if c.choices)
        without = client.chat.completions.create(model="gpt-test", messages=msgs, stream=True)  # type: ignore[arg-type]
        assert [c for c in without]
        return "asked three times"

    usage = trial(sandbox, agent)
    calls = usage.calls
    assert [(c.provider, c.api, c.streamed) for c in calls] == [
        ("openai", "chat.completions", False),
        ("openai", "chat.completions", True),
        ("openai", "chat.completions", True),
    ]
    # The response's model, not the request's (the notes say why one is unknown).
    assert {c.model for c in calls} == {"gpt-test-2025-01-01"}, [(c.status, c.note) for c in calls]
    assert {c.requested_model for c in calls} == {"gpt-test"}
    assert [(c.input_tokens, c.output_tokens) for c in calls] == [(11, 7), (11, 7), (None, None)]
    assert calls[2].note is not None and "include_usage" in calls[2].note
    assert (usage.models, usage.input_tokens, usage.output_tokens) == (
        ["gpt-test-2025-01-01"],
        22,
        14,
    )
    assert (usage.unknown_calls, usage.failed_calls, usage.complete) == (1, 0, True)
    assert all(c.host == "127.0.0.1" and c.path == "/v1/chat/completions" for c in calls)
    assert len({c.request_id for c in calls}) == 3


def test_anthropic_sdk_streamed_and_whole(api, sandbox):
    import anthropic

    api.input_tokens, api.output_tokens = 13, 5

    def agent(view: SandboxView) -> str:
        client = anthropic.Anthropic(
            base_url=api.url,
            api_key="sk-ant-test",
            # The SDK's own HTTP client (it bundles its own httpx), through the recorder.
            http_client=anthropic.DefaultHttpxClient(proxy=view.env["HTTP_PROXY"]),
            max_retries=0,
        )
        msgs = [{"role": "user", "content": view.prompt}]
        with client.messages.stream(model="claude-test", max_tokens=50, messages=msgs) as s:  # type: ignore[arg-type]
            text = "".join(s.text_stream)
        whole = client.messages.create(model="claude-test", max_tokens=50, messages=msgs)  # type: ignore[arg-type]
        return text + " / " + whole.content[0].text  # type: ignore[union-attr]

    usage = trial(sandbox, agent)
    assert [
        (c.provider, c.api, c.streamed, c.model, c.input_tokens, c.output_tokens)
        for c in usage.calls
    ] == [
        ("anthropic", "messages", True, "claude-test", 13, 5),
        ("anthropic", "messages", False, "claude-test", 13, 5),
    ]
    assert (usage.input_tokens, usage.output_tokens, usage.unknown_calls) == (26, 10, 0)


def test_an_sdk_that_hangs_up_at_the_streams_end_event_still_shows_model_and_tokens(api, sandbox):
    """The SDK's iterator stops at ``[DONE]`` and closes the connection; the end of the
    transfer (the chunked body's last bytes) comes later, so the recorder sees the exchange
    break. The answer had ended: its model and tokens are read from what arrived."""
    import openai

    api.hold_end = 0.5

    def agent(view: SandboxView) -> str:
        client = openai.OpenAI(
            base_url=f"{api.url}/v1", api_key="sk-test", http_client=proxied(view), max_retries=0
        )
        stream = client.chat.completions.create(
            model="gpt-held",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    usage = trial(sandbox, agent)
    (call,) = usage.calls
    assert (call.streamed, call.model, call.input_tokens, call.output_tokens, call.note) == (
        True,
        "gpt-held",
        11,
        7,
        None,
    )


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
def test_encoded_answers_are_read_decoded(api, sandbox, coding):
    import openai

    api.encoding = coding
    api.answer_as = "gpt-resp-1"

    def agent(view: SandboxView) -> str:
        client = openai.OpenAI(
            base_url=f"{api.url}/v1", api_key="sk-test", http_client=proxied(view), max_retries=0
        )
        # The stream read to the end of its body: the SDK's own iterator hangs up at the last
        # event, and where its last (compressed) bytes had not passed the recorder by then the
        # exchange is recorded as broken, its usage unknown. That is right, and another test's
        # business; this one is about decoding.
        with client.chat.completions.with_streaming_response.create(
            model="gpt-resp",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        ) as streamed:
            chunks = sum(1 for line in streamed.iter_lines() if line.startswith("data: {"))
        out = client.responses.create(model="gpt-resp", input="hi")
        return out.output_text + str(chunks)

    usage = trial(sandbox, agent)
    assert [(c.api, c.streamed, c.model, c.input_tokens, c.output_tokens) for c in usage.calls] == [
        ("chat.completions", True, "gpt-resp-1", 11, 7),
        ("responses", False, "gpt-resp-1", 11, 7),
    ], [(c.status, c.note) for c in usage.calls]


def test_a_body_cut_at_the_cap_gives_unknown_tokens_not_a_guess(api, sandbox):
    api.pad = 2 * CAP  # the answer outgrows what the recorder keeps

    def agent(view: SandboxView) -> str:
        with proxied(view) as http:
            url = f"{api.url}/v1/chat/completions"
            body = {"model": "gpt-big", "messages": [{"role": "user", "content": "hi"}]}
            whole = http.post(url, json=body)
            stream = http.post(url, json={**body, "stream": True})
            # A blocked host answers 403 from the sandbox: no model answered, nothing counted.
            blocked = http.post("http://api.blocked.test/v1/chat/completions", json=body)
        return f"{len(whole.content)} {len(stream.content)} {blocked.status_code}"

    usage = trial(sandbox, agent)
    assert [(c.streamed, c.model, c.input_tokens, c.output_tokens) for c in usage.calls] == [
        (False, None, None, None),
        (True, None, None, None),
    ]
    assert all("cut at the recorder's cap" in (c.note or "") for c in usage.calls)
    assert (usage.unknown_calls, usage.input_tokens, usage.models) == (2, 0, [])


def test_hanging_up_mid_stream_does_not_hide_a_call_the_model_answered(api, sandbox):
    """An agent that reads the start of a streamed answer and drops the connection before the
    usage arrives: the model answered (its status was 200), so the call is one with unknown
    usage, which leaves the trial without a cost, not one that cost nothing."""
    api.delay = 0.3

    def agent(view: SandboxView) -> str:
        body = {"model": "gpt-drop", "stream": True, "messages": [{"role": "user", "content": "x"}]}
        url = f"{api.url}/v1/chat/completions"
        with proxied(view) as http, http.stream("POST", url, json=body) as r:
            first = next(r.iter_raw())
        return f"{r.status_code} {len(first)}"

    usage = trial(sandbox, agent)
    (c,) = usage.calls
    assert (c.status, c.streamed, c.input_tokens, c.output_tokens) == (200, True, None, None)
    assert c.note is not None and "the exchange broke before the answer ended" in c.note
    assert (usage.unknown_calls, usage.failed_calls) == (1, 0)


def test_the_price_table_prices_known_calls_and_a_missing_model_stays_unknown(
    api, sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    table = tmp_path / "prices.toml"
    table.write_text('[models."gpt-priced"]\ninput = 2.0\noutput = 8.0\n')
    monkeypatch.setenv("ORACLE_PRICES", str(table))

    def asker(model: str) -> Callable[[SandboxView], object]:
        def agent(view: SandboxView) -> str:
            with proxied(view) as http:
                body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
                return http.post(f"{api.url}/v1/chat/completions", json=body).text

        return agent

    priced = trial(sandbox, asker("gpt-priced"))
    assert priced.cost_usd == pytest.approx((11 * 2.0 + 7 * 8.0) / 1e6)
    assert priced.cost_note == f"priced by {table}"
    missing = trial(sandbox, asker("gpt-unlisted"))
    assert missing.cost_usd is None
    assert missing.cost_note == "no cost: model 'gpt-unlisted' is not in the price table"


def test_an_isolated_command_agent_using_the_openai_sdk_has_its_usage_recorded(api):
    """`oracle trial --allow-host`: an isolated program (bubblewrap, its own network) reaches
    the model API only through the recorder, whose harness traffic yields the record's usage
    and nothing of the conversation in the evidence."""
    require_tools("bwrap", "nft", "ip", "nsenter", root=True)
    api.answer_as = "gpt-iso-2025"
    code = textwrap.dedent(f"""
        import openai
        client = openai.OpenAI(base_url="{api.url}/v1", api_key="sk-test", max_retries=0)
        r = client.chat.completions.create(
            model="gpt-iso", messages=[{{"role": "user", "content": "hi"}}])
        print(r.choices[0].message.content)
        """)
    result = run_trial(
        TASK,
        CommandAgent([sys.executable, "-c", code]),
        allow_hosts=[api.host],
        scorer=InProcessScorer(),
    )
    r = result.record
    assert r.error is None and r.final_message == "done."
    assert r.usage is not None
    assert [
        (c.model, c.requested_model, c.input_tokens, c.output_tokens) for c in r.usage.calls
    ] == [("gpt-iso-2025", "gpt-iso", 11, 7)]
    assert r.diff["net"]["changes"] == []  # the model API's traffic is not evidence
    assert b"gpt-iso" not in result.files["snapshots/after/net.json"]
