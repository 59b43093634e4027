"""Model usage per trial: the model calls the egress recorder saw, which models answered them
and the tokens they used, as the responses said (observed at the boundary, never claimed).

Every model call of an isolated agent passes through the recorder; `oracle.evidence.model_api`
reads each exchange, and a sink that can offer what its recorder saw has a ``model_calls()``
method (duck-typed, as ``reach_probe`` is). `observe_usage` asks every sink of a sandbox and
sums what is known; the trial record keeps the result as ``usage``::

    usage = observe_usage(sandbox.provisioned)   # None: no sink could observe model traffic
    usage.models, usage.input_tokens, usage.output_tokens, usage.unknown_calls

Sums add known values only; ``unknown_calls`` counts the answered calls whose tokens are not
known, so a total is never read as complete when it is not. Cost is set by
`oracle.evidence.prices` where a price table is configured; it is never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ModelCall(BaseModel):
    """One model API call the recorder saw, read from its response.

    A value the response did not give is ``None`` and `note` says why (the body was cut at
    the recorder's cap, the stream carried no usage, the call failed)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: Literal["openai", "anthropic"] = Field(description="the API's shape")
    api: Literal["chat.completions", "completions", "responses", "messages"]
    sink: str = Field(description="the egress sink whose recorder saw it")
    request_id: int = Field(description="the egress request's id in that recorder's log")
    host: str
    path: str = Field(description="the request path, without its query")
    status: int | None = Field(description="the HTTP status answered (null: no answer)")
    model: str | None = Field(description="the model that answered, as the response names it")
    requested_model: str | None = Field(None, description="the model the request asked for")
    input_tokens: int | None = Field(
        description="input tokens, cache reads and writes included (null: not known)"
    )
    output_tokens: int | None = Field(description="output tokens (null: not known)")
    cached_input_tokens: int | None = Field(
        None, description="of the input tokens, those read from the provider's prompt cache"
    )
    cache_write_tokens: int | None = Field(
        None, description="of the input tokens, those written to the prompt cache (Anthropic)"
    )
    streamed: bool = Field(description="answered as server-sent events")
    note: str | None = Field(None, description="why a value is unknown")

    @property
    def answered(self) -> bool:
        """A model answered: a 2xx status. A refused or failed call is listed, not counted."""
        return self.status is not None and 200 <= self.status < 300

    @property
    def known(self) -> bool:
        """Its model and both token counts are known."""
        return (
            self.model is not None
            and self.input_tokens is not None
            and self.output_tokens is not None
        )


class ModelUsage(BaseModel):
    """What one trial's model calls used, as the recorder saw them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    calls: list[ModelCall] = Field(default_factory=list)
    models: list[str] = Field(
        default_factory=list, description="the models that answered, sorted, once each"
    )
    input_tokens: int = Field(0, description="the sum of the known input token counts")
    output_tokens: int = Field(0, description="the sum of the known output token counts")
    unknown_calls: int = Field(
        0, description="answered calls whose model or token counts are not known"
    )
    failed_calls: int = Field(
        0, description="calls no model answered (an error status, or no answer at all)"
    )
    complete: bool = Field(
        True,
        description="every recorder could be read (false: `note` says which could not, and "
        "calls may be missing)",
    )
    note: str | None = None
    cost_usd: float | None = Field(
        None, description="what the calls cost by the price table (null: see cost_note)"
    )
    cost_note: str | None = Field(None, description="the price table used, or why there is no cost")

    @classmethod
    def of(cls, calls: Sequence[ModelCall], *, note: str | None = None) -> ModelUsage:
        """The usage of `calls`, in request order; `note` marks it incomplete, saying why."""
        answered = [c for c in calls if c.answered]
        return cls(
            calls=list(calls),
            models=sorted({c.model for c in answered if c.model is not None}),
            input_tokens=sum(c.input_tokens or 0 for c in answered),
            output_tokens=sum(c.output_tokens or 0 for c in answered),
            unknown_calls=sum(not c.known for c in answered),
            failed_calls=len(calls) - len(answered),
            complete=note is None,
            note=note,
            cost_note="no price table (ORACLE_PRICES)",
        )

    def summary(self) -> str:
        """One line: ``2 calls · gpt-4o-mini · 120 in / 48 out · $0.0001``."""
        models = ", ".join(self.models) or "no model"
        parts = [f"{len(self.calls)} call{'s' if len(self.calls) != 1 else ''}", models]
        parts.append(f"{self.input_tokens} in / {self.output_tokens} out")
        if self.unknown_calls:
            parts.append(f"{self.unknown_calls} with unknown usage")
        if self.failed_calls:
            parts.append(f"{self.failed_calls} failed")
        if self.cost_usd is not None:
            parts.append(f"${self.cost_usd:.4f}")
        if not self.complete:
            parts.append(f"incomplete: {self.note}")
        return " · ".join(parts)


def observe_usage(sinks: Mapping[str, object]) -> ModelUsage | None:
    """The model usage every sink with ``model_calls()`` saw (sink name → its `Provisioned`,
    or the sink itself); None when no sink can observe model traffic. A sink that fails to
    answer makes the usage incomplete, naming it, rather than silently smaller."""
    calls: list[ModelCall] = []
    failed: list[str] = []
    observed = False
    for name, entry in sorted(sinks.items()):
        sink = getattr(entry, "sink", entry)
        ask = getattr(sink, "model_calls", None)
        if not callable(ask):
            continue
        observed = True
        try:
            found = ask()
        except Exception as exc:  # a recorder that died: what it saw is unknown, not nothing
            failed.append(f"sink {name!r}: {type(exc).__name__}: {exc}")
            continue
        calls.extend(c for c in found if isinstance(c, ModelCall))
    if not observed:
        return None
    return ModelUsage.of(calls, note="; ".join(failed) if failed else None)
