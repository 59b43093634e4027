"""Model usage in a report: per harness × model × profile, the models the egress recorders saw
answer, the tokens the responses reported and, with a price table, what they cost.

Built from each trial record's ``usage`` (`oracle.evidence.usage`). Sums add known values;
calls whose usage is unknown and cells whose usage was not observed are counted beside them,
never guessed. A cell whose matrix declares a model but whose recorder saw no model answer is
*unverified*: the reducer does not refuse it (its agent may call no model, or call it where no
recorder sees), and the report names it. Cost is computed here, from the calls, by the table
given to the reducer (``--prices`` or ``ORACLE_PRICES``), whatever the records say.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from oracle.evidence.prices import ENV, PriceTable
from oracle.evidence.record import TrialRecord
from oracle.evidence.usage import ModelCall
from oracle.matrix.reduce import declared_model


class UsageFigure(BaseModel):
    """The model usage of one group of cells."""

    model_config = ConfigDict(extra="forbid")

    cells: int = Field(description="cells in the group")
    observed: int = Field(description="cells whose usage a recorder observed whole")
    calls: int = Field(description="model calls seen, answered or not")
    models: list[str] = Field(description="the models that answered, sorted, once each")
    input_tokens: int = Field(description="the sum of the known input token counts")
    output_tokens: int = Field(description="the sum of the known output token counts")
    unknown_calls: int = Field(description="answered calls whose model or tokens are unknown")
    failed_calls: int = Field(description="calls no model answered")
    unverified: list[str] = Field(
        default_factory=list,
        description="cells whose matrix declares a model but whose recorder saw none answer "
        "(or saw nothing whole): the model that ran them is not verified",
    )
    cost_usd: float | None = Field(description="by the price table; null: see cost_note")
    cost_note: str = Field(description="the price table used, or why there is no cost")
    text: str = Field(description="one line for people")


def _declared(cell: object, record: TrialRecord) -> str | None:
    """The model the matrix declares for a cell (its ``cell.json``), else the cell's model
    name where it is not ``none``."""
    meta = getattr(cell, "meta", None)
    model = getattr(meta, "model", None)
    if model is not None:
        return declared_model(model)
    return None if record.cell.model == "none" else record.cell.model


def usage_figure(cells: Sequence[Any], prices: PriceTable | None) -> UsageFigure | None:
    """The usage of `cells` (each with a ``record``, and a ``meta`` where a matrix declared
    it); None when no call was seen and no cell declares a model."""
    calls: list[ModelCall] = []
    unverified: list[str] = []
    observed = 0
    declared_any = False
    records: list[TrialRecord] = [c.record for c in cells]
    for c, r in zip(cells, records, strict=True):
        declared = _declared(c, r)
        declared_any = declared_any or declared is not None
        u = r.usage
        whole = u is not None and u.complete
        if whole:
            observed += 1
        if u is not None:
            calls.extend(u.calls)
        if declared is not None and (not whole or u is None or not u.models):
            unverified.append(r.cell.id)
    if not calls and not declared_any:
        return None  # no model declared and none seen: nothing to say
    answered = [c for c in calls if c.answered]
    if prices is None:
        cost, note = None, f"no price table (--prices or {ENV})"
    elif observed < len(records):
        cost, note = None, f"no cost: {len(records) - observed} cell(s) without observed usage"
    else:
        cost, note = prices.cost(calls)
    models = sorted({c.model for c in answered if c.model is not None})
    fig = UsageFigure(
        cells=len(records),
        observed=observed,
        calls=len(calls),
        models=models,
        input_tokens=sum(c.input_tokens or 0 for c in answered),
        output_tokens=sum(c.output_tokens or 0 for c in answered),
        unknown_calls=sum(not c.known for c in answered),
        failed_calls=len(calls) - len(answered),
        unverified=sorted(unverified),
        cost_usd=cost,
        cost_note=note,
        text="",
    )
    return fig.model_copy(update={"text": usage_text(fig)})


def usage_text(f: UsageFigure) -> str:
    """``4 calls · gpt-4o-mini · 1200 in / 300 out · $0.0004 · 1 unknown · 2/3 cells observed``."""
    parts = [f"{f.calls} call{'s' if f.calls != 1 else ''}", ", ".join(f.models) or "no model"]
    parts.append(f"{f.input_tokens} in / {f.output_tokens} out")
    parts.append(f"${f.cost_usd:.4f}" if f.cost_usd is not None else "cost —")
    if f.unknown_calls:
        parts.append(f"{f.unknown_calls} with unknown usage")
    if f.failed_calls:
        parts.append(f"{f.failed_calls} failed")
    if f.observed < f.cells:
        parts.append(f"{f.observed}/{f.cells} cells observed")
    if f.unverified:
        parts.append(f"{len(f.unverified)} cell(s) with the model not verified")
    return " · ".join(parts)
