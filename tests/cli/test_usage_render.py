"""`oracle show` prints a record's model usage: the summary line, each call with the model that
answered beside the one asked for, and why a cost or a count is unknown."""

from __future__ import annotations

from rich.console import Console

from oracle.cli.render import record_panel
from oracle.evidence.record import Cell, TrialRecord
from oracle.evidence.usage import ModelCall, ModelUsage


def test_the_record_panel_shows_models_tokens_and_unknowns():
    calls = [
        ModelCall(
            provider="openai",
            api="chat.completions",
            sink="net",
            request_id=3,
            host="api.test",
            path="/v1/chat/completions",
            status=200,
            model="gpt-x-2025-01-31",
            requested_model="gpt-x",
            input_tokens=12,
            output_tokens=4,
            streamed=True,
        ),
        ModelCall(
            provider="anthropic",
            api="messages",
            sink="net",
            request_id=4,
            host="api.test",
            path="/v1/messages",
            status=200,
            model=None,
            input_tokens=None,
            output_tokens=None,
            streamed=False,
            note="the response body was not kept whole: cut at the recorder's cap",
        ),
    ]
    record = TrialRecord(
        cell=Cell(harness="a", task="t"),
        utility_achieved=None,
        security_breached=None,
        autonomy_achieved=None,
        usage=ModelUsage.of(calls),
        started_at=0.0,
        finished_at=1.0,
    )
    console = Console(width=200, record=True, color_system=None)
    console.print(record_panel(record))
    text = console.export_text()
    assert "2 calls · gpt-x-2025-01-31 · 12 in / 4 out · 1 with unknown usage" in text
    assert (
        "#3 openai chat.completions api.test streamed → gpt-x-2025-01-31 (asked gpt-x) "
        "12 in / 4 out" in text
    )
    assert (
        "#4 anthropic messages api.test → model unknown tokens unknown — the response body" in text
    )
    assert "no price table (ORACLE_PRICES)" in text
