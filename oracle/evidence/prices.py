"""The price table: what a model's tokens cost, so that observed usage has a cost.

A small file, TOML or JSON (by its suffix), given by ``ORACLE_PRICES`` (trials: the record's
``usage.cost_usd``) or ``--prices`` (``oracle reduce``: the report's figures). Prices are US
dollars per million tokens, keyed by the model *as responses name it* (``gpt-4o-mini-2024-07-18``,
not the alias a request used: snapshots of one alias are priced differently)::

    [models."gpt-4o-mini-2024-07-18"]
    input = 0.15
    output = 0.60
    cached_input = 0.075        # optional: input tokens read from the prompt cache

    [models."claude-sonnet-4-5-20250929"]
    input = 3.0
    output = 15.0
    cached_input = 0.30
    cache_write = 3.75          # optional: input tokens written to the prompt cache

A cost is only ever what the table and the responses give: a call whose model or token counts
are unknown, a model the table does not list, or cached tokens the table has no price for
leave the cost ``None`` with the reason, never 0.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from oracle.evidence.usage import ModelCall, ModelUsage

ENV = "ORACLE_PRICES"


class PriceError(ValueError):
    """A price table that cannot be used; the message names the file and the field."""


class Price(BaseModel):
    """One model's prices, USD per million tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0)
    cache_write: float | None = Field(None, ge=0)


class PriceTable(BaseModel):
    """Model (as responses name it) → `Price`; `source` is the file it was read from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    models: dict[str, Price]
    source: str = Field("", exclude=True)

    @classmethod
    def load(cls, path: Path) -> PriceTable:
        """Read a table; raises `PriceError` naming the file and what is wrong."""
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise PriceError(f"price table {path}: cannot be read: {exc.strerror or exc}") from None
        try:
            data = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw.decode())
        except (ValueError, UnicodeDecodeError) as exc:
            kind = "JSON" if path.suffix == ".json" else "TOML"
            raise PriceError(f"price table {path}: not {kind}: {exc}") from None
        try:
            table = cls.model_validate(data)
        except ValidationError as exc:
            where = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
                for e in exc.errors()
            )
            raise PriceError(f"price table {path}: {where}") from None
        return table.model_copy(update={"source": str(path)})

    @classmethod
    def from_env(cls) -> PriceTable | None:
        """The table ``ORACLE_PRICES`` names, or None when it is unset or empty."""
        name = os.environ.get(ENV, "").strip()
        return cls.load(Path(name)) if name else None

    def call_cost(self, call: ModelCall) -> tuple[float | None, str]:
        """What `call` cost, or None and why."""
        if not call.answered:
            return 0.0, ""  # no model answered it: providers bill no tokens for a refusal
        if not call.known:
            what = "model" if call.model is None else "token counts"
            return None, f"call #{call.request_id} ({call.host}): its {what} are not known"
        assert call.model is not None and call.input_tokens is not None
        assert call.output_tokens is not None
        price = self.models.get(call.model)
        if price is None:
            return None, f"model {call.model!r} is not in the price table"
        cached = call.cached_input_tokens or 0
        written = call.cache_write_tokens or 0
        if cached and price.cached_input is None:
            return None, f"model {call.model!r}: the table has no cached_input price"
        if written and price.cache_write is None:
            return None, f"model {call.model!r}: the table has no cache_write price"
        plain = call.input_tokens - cached - written
        if plain < 0:
            return None, f"call #{call.request_id}: more cached input tokens than input tokens"
        usd = (
            plain * price.input
            + cached * (price.cached_input or 0.0)
            + written * (price.cache_write or 0.0)
            + call.output_tokens * price.output
        )
        return usd / 1e6, ""

    def cost(self, calls: list[ModelCall]) -> tuple[float | None, str]:
        """The cost of `calls` and a note: the table used, or why there is no cost."""
        total = 0.0
        why: list[str] = []
        for c in calls:
            usd, reason = self.call_cost(c)
            if usd is None:
                why.append(reason)
            else:
                total += usd
        if why:
            more = f" (and {len(why) - 3} more)" if len(why) > 3 else ""
            return None, "no cost: " + "; ".join(dict.fromkeys(why[:3])) + more
        return round(total, 9), f"priced by {self.source or 'the price table'}"


def priced(usage: ModelUsage | None, table: PriceTable | None) -> ModelUsage | None:
    """`usage` with its cost by `table` (None: no table, and the note says so)."""
    if usage is None:
        return None
    if table is None:
        return usage.model_copy(update={"cost_usd": None, "cost_note": f"no price table ({ENV})"})
    if not usage.complete:
        why = f"no cost: the usage is incomplete ({usage.note})"
        return usage.model_copy(update={"cost_usd": None, "cost_note": why})
    usd, note = table.cost(usage.calls)
    return usage.model_copy(update={"cost_usd": usd, "cost_note": note})


def priced_by_env(usage: ModelUsage | None) -> ModelUsage | None:
    """`usage` priced by the table ``ORACLE_PRICES`` names; a table that cannot be read leaves
    the cost unknown with the reason (a trial is never broken by its price table)."""
    if usage is None:
        return None  # no recorder: the table is not read (most trials have none)
    try:
        table = PriceTable.from_env()
    except PriceError as exc:
        return usage.model_copy(update={"cost_usd": None, "cost_note": f"no cost: {exc}"})
    return priced(usage, table)
