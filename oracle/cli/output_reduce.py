"""The document of ``oracle reduce --json`` (`oracle.cli.output` has the rest)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from oracle.cli.output import Output
from oracle.reports.model import Report


class RejectionOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    where: str
    rule: str
    detail: str


class ReduceOutput(Output):
    """``oracle reduce --json``: the report, once every archive verified."""

    command: Literal["reduce"] = "reduce"
    report: Report | None = Field(None, description="null: no report was made")
    written: dict[str, str] = Field(default_factory=dict, description="file name → its path")
    rejections: list[RejectionOut] = Field(default_factory=list)
