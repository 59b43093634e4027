"""Reading model API exchanges (`oracle.evidence.model_api`), summing usage
(`oracle.evidence.usage`) and pricing it (`oracle.evidence.prices`): each shape, streamed or
not, and every way a value stays unknown rather than guessed. The SDKs' own traffic through
the recorder is in tests/sinks/test_egress_usage.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from oracle.evidence.model_api import Exchange, recognise
from oracle.evidence.prices import PriceError, PriceTable, priced, priced_by_env
from oracle.evidence.usage import ModelCall, ModelUsage, observe_usage


def exchange(
    path: str,
    response: bytes | None,
    *,
    request: bytes | None = b'{"model": "asked"}',
    status: int | None = 200,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
    why: str | None = None,
) -> Exchange:
    return Exchange(
        request_id=7,
        sink="net",
        method="POST",
        host="api.test",
        path=path,
        request_body=request,
        status=status,
        content_type=content_type,
        response_body=response,
        why_not_whole=why,
        request_headers=headers or {},
    )


def sse(*events: tuple[str | None, object]) -> bytes:
    out = b""
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        body = data if isinstance(data, str) else json.dumps(data)
        out += f"{head}data: {body}\r\n\r\n".encode()
    return out


def read(ex: Exchange) -> tuple[object, ...]:
    c = recognise(ex)
    assert c is not None
    return (c.provider, c.api, c.model, c.input_tokens, c.output_tokens, c.streamed)


@pytest.mark.parametrize(
    ("path", "request_body", "headers", "expected"),
    [
        ("/v1/chat/completions?api-version=1", b"{}", {}, ("openai", "chat.completions")),
        ("/openai/deployments/d/chat/completions", b"{}", {}, ("openai", "chat.completions")),
        ("/v1/responses", b'{"model": "m"}', {}, ("openai", "responses")),
        ("/v1/completions", b'{"model": "m"}', {}, ("openai", "completions")),
        ("/v1/messages", b"{}", {}, ("anthropic", "messages")),
        ("/api/messages", b"{}", {"anthropic-version": "2023-06-01"}, ("anthropic", "messages")),
        # Generic paths need a request that names a model: a survey's /responses is no call.
        ("/survey/responses", b'{"answers": [1]}', {}, None),
        ("/chat/messages", b'{"text": "hi"}', {}, None),
        ("/v1/responses", b"not json", {}, None),
    ],
)
def test_which_requests_are_model_calls(path, request_body, headers, expected):
    c = recognise(exchange(path, b"{}", request=request_body, headers=headers))
    assert (None if c is None else (c.provider, c.api)) == expected


def test_a_get_is_no_model_call():
    ex = exchange("/v1/chat/completions", b"{}")
    assert recognise(Exchange(**{**ex.__dict__, "method": "GET"})) is None


def test_the_responses_api_streamed_takes_the_completed_event():
    created = {"type": "response.created", "response": {"model": "gpt-r", "usage": None}}
    done = {
        "type": "response.completed",
        "response": {"model": "gpt-r-2025", "usage": {"input_tokens": 9, "output_tokens": 4}},
    }
    body = sse(("response.created", created), (None, {"type": "response.output_text.delta"}))
    body += sse(("response.completed", done))
    ex = exchange("/v1/responses", body, content_type="text/event-stream")
    assert read(ex) == ("openai", "responses", "gpt-r-2025", 9, 4, True)


def test_anthropic_cache_reads_and_writes_count_as_input():
    body = {
        "model": "claude-x",
        "usage": {
            "input_tokens": 10,
            "cache_read_input_tokens": 200,
            "cache_creation_input_tokens": 30,
            "output_tokens": 5,
        },
    }
    c = recognise(exchange("/v1/messages", json.dumps(body).encode()))
    assert c is not None
    assert (c.input_tokens, c.cached_input_tokens, c.cache_write_tokens) == (240, 200, 30)


def _chat_stream(*, done: bool) -> bytes:
    """A chat completion streamed with its usage and ``[DONE]``; without them when not
    `done` (the usage chunk is the last one before ``[DONE]``: it ends the answer too)."""
    chunk = {"model": "gpt-x", "choices": [{"delta": {"content": "hi"}}]}
    if not done:
        return sse(("", chunk))
    usage = {"model": "gpt-x", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}}
    return sse(("", chunk), ("", usage)) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("done", [True, False])
def test_a_broken_stream_is_read_only_when_it_reached_its_end_event(done):
    """The client hung up (an SDK stops at ``[DONE]``) before the last bytes of the transfer
    passed the recorder: what arrived is read where the stream's own end event is in it."""
    ex = exchange(
        "/v1/chat/completions",
        None,
        content_type="text/event-stream",
        why="the exchange broke before the answer ended: Client disconnected.",
    )
    c = recognise(replace(ex, partial_response_body=_chat_stream(done=done)))
    assert c is not None
    if done:
        assert (c.model, c.input_tokens, c.output_tokens, c.note) == ("gpt-x", 4, 2, None)
    else:
        assert (c.model, c.input_tokens, c.output_tokens) == (None, None, None)
        assert c.note == (
            "the response body was not kept whole: the exchange broke before the answer "
            "ended: Client disconnected."
        )


def test_an_anthropic_stream_broken_after_message_stop_is_read():
    start = {
        "type": "message_start",
        "message": {"model": "claude-x", "usage": {"input_tokens": 3}},
    }
    delta = {"type": "message_delta", "usage": {"output_tokens": 9}}
    arrived = sse(("message_start", start), ("message_delta", delta))
    stopped = arrived + sse(("message_stop", {"type": "message_stop"}))
    for partial, known in ((stopped, True), (arrived, False)):
        ex = exchange("/v1/messages", None, content_type="text/event-stream", why="broke")
        c = recognise(replace(ex, partial_response_body=partial))
        assert c is not None
        expected = ("claude-x", 3, 9) if known else (None, None, None)
        assert (c.model, c.input_tokens, c.output_tokens) == expected


def test_a_broken_answer_that_is_no_stream_stays_unknown():
    whole = b'{"model": "m", "usage": {"prompt_tokens": 1, "completion_tokens": 1}}'
    ex = replace(exchange("/v1/chat/completions", None, why="broke"), partial_response_body=whole)
    c = recognise(ex)
    assert c is not None
    assert (c.model, c.input_tokens, c.note) == (
        None,
        None,
        "the response body was not kept whole: broke",
    )


def test_an_anthropic_stream_that_ended_early_has_unknown_tokens():
    start = {
        "type": "message_start",
        "message": {"model": "claude-x", "usage": {"input_tokens": 3}},
    }
    ex = exchange("/v1/messages", sse(("message_start", start)), content_type="text/event-stream")
    c = recognise(ex)
    assert c is not None
    assert (c.model, c.input_tokens, c.output_tokens) == ("claude-x", None, None)
    assert c.note == "the stream carried no usage (it ended early)"


@pytest.mark.parametrize(
    ("kw", "note"),
    [
        ({"response": b"<html>busy</html>"}, "the response body is not a JSON object"),
        ({"response": b'{"model": "m"}'}, "the response carries no usage"),
        (
            {"response": None, "why": "cut at the recorder's cap (10 of 99 bytes kept)"},
            "the response body was not kept whole: cut at the recorder's cap (10 of 99 bytes kept)",
        ),
        ({"response": b'{"error": {}}', "status": 429}, "the call failed (status 429)"),
    ],
)
def test_what_a_response_does_not_say_stays_unknown(kw, note):
    c = recognise(exchange("/v1/chat/completions", **kw))
    assert c is not None
    assert (c.input_tokens, c.output_tokens) == (None, None)
    assert c.note is not None and c.note.startswith(note)


def test_negative_or_non_integer_counts_are_not_taken():
    body = b'{"model": "m", "usage": {"prompt_tokens": -3, "completion_tokens": 2.5}}'
    c = recognise(exchange("/v1/chat/completions", body))
    assert c is not None and (c.input_tokens, c.output_tokens) == (None, None)


def model_call(model: str | None, tokens: tuple[int, int] | None, status: int = 200, **kw):
    return ModelCall(
        provider="openai",
        api="chat.completions",
        sink="net",
        request_id=kw.pop("request_id", 1),
        host="api.test",
        path="/v1/chat/completions",
        status=status,
        model=model,
        input_tokens=tokens[0] if tokens else None,
        output_tokens=tokens[1] if tokens else None,
        streamed=False,
        **kw,
    )


def test_usage_sums_known_values_and_counts_the_rest():
    u = ModelUsage.of(
        [
            model_call("b", (10, 2)),
            model_call("a", (5, 1), request_id=2),
            model_call("a", None, request_id=3),
            model_call(None, None, status=500, request_id=4),
        ]
    )
    assert (u.models, u.input_tokens, u.output_tokens) == (["a", "b"], 15, 3)
    assert (u.unknown_calls, u.failed_calls, u.complete) == (1, 1, True)
    assert u.summary() == "4 calls · a, b · 15 in / 3 out · 1 with unknown usage · 1 failed"


class _Dead:
    def model_calls(self) -> list[ModelCall]:
        raise RuntimeError("the recorder is gone")


class _Alive:
    def model_calls(self) -> list[ModelCall]:
        return [model_call("a", (1, 1))]


def test_a_sink_that_cannot_answer_makes_the_usage_incomplete_not_smaller():
    u = observe_usage({"a": _Alive(), "b": _Dead(), "c": object()})
    assert u is not None
    assert (len(u.calls), u.complete) == (1, False)
    assert u.note == "sink 'b': RuntimeError: the recorder is gone"
    assert observe_usage({"c": object()}) is None  # nothing could observe model traffic
    assert priced(u, PriceTable(models={})) is not None
    assert priced(u, PriceTable(models={})).cost_usd is None  # type: ignore[union-attr]


def table(tmp_path: Path, text: str, suffix: str = ".toml") -> PriceTable:
    path = tmp_path / f"prices{suffix}"
    path.write_text(text)
    return PriceTable.load(path)


def test_cached_input_is_priced_apart_or_not_at_all(tmp_path: Path):
    t = table(tmp_path, "[models.m]\ninput = 1.0\noutput = 2.0\ncached_input = 0.1\n")
    cached = model_call("m", (1000, 100), cached_input_tokens=800)
    assert t.cost([cached]) == (
        pytest.approx((200 * 1.0 + 800 * 0.1 + 100 * 2.0) / 1e6),
        f"priced by {t.source}",
    )
    plain = table(tmp_path, '{"models": {"m": {"input": 1, "output": 2}}}', ".json")
    assert plain.cost([cached]) == (None, "no cost: model 'm': the table has no cached_input price")


def test_a_failed_call_costs_nothing_and_an_unknown_one_leaves_no_cost(tmp_path: Path):
    t = table(tmp_path, "[models.m]\ninput = 1\noutput = 1\n")
    assert t.cost([model_call("m", (1, 1)), model_call(None, None, status=429)])[0] == 2e-6
    usd, note = t.cost([model_call("m", None, request_id=9)])
    assert (usd, note) == (None, "no cost: call #9 (api.test): its token counts are not known")


@pytest.mark.parametrize(
    ("text", "suffix", "error"),
    [
        ("[models.m]\ninput = 1\n", ".toml", "models.m.output: Field required"),
        ("[models.m]\ninput = -1\noutput = 1\n", ".toml", "models.m.input: Input should be"),
        ("[models.m]\ninput = 1\noutput = 1\nextra = 2\n", ".toml", "models.m.extra"),
        ("models = [", ".toml", "not TOML"),
        ("{", ".json", "not JSON"),
    ],
)
def test_a_bad_price_table_is_refused_naming_the_file_and_field(tmp_path, text, suffix, error):
    with pytest.raises(PriceError) as info:
        table(tmp_path, text, suffix)
    assert str(info.value).startswith(f"price table {tmp_path / ('prices' + suffix)}: ")
    assert error in str(info.value)


def test_the_env_table_prices_a_trial_and_a_broken_one_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    usage = ModelUsage.of([model_call("m", (1, 1))])
    monkeypatch.delenv("ORACLE_PRICES", raising=False)
    assert priced_by_env(usage).cost_note == "no price table (ORACLE_PRICES)"  # type: ignore[union-attr]
    monkeypatch.setenv("ORACLE_PRICES", str(tmp_path / "missing.toml"))
    broken = priced_by_env(usage)
    assert broken is not None and broken.cost_usd is None
    assert broken.cost_note is not None and "missing.toml: cannot be read" in broken.cost_note


def test_the_price_tables_in_the_docs_load_as_written(tmp_path: Path):
    import re

    doc = (Path(__file__).resolve().parents[2] / "docs" / "usage.md").read_text()
    toml_block = re.search(r"```toml\n(.*?)```", doc, re.S)
    json_block = re.search(r"```json\n(.*?)```", doc, re.S)
    assert toml_block and json_block
    t = table(tmp_path, toml_block.group(1))
    assert t.models["claude-sonnet-4-5-20250929"].cache_write == 3.75
    j = table(tmp_path, json_block.group(1), ".json")
    assert j.models["gpt-4o-mini-2024-07-18"].output == 0.6
