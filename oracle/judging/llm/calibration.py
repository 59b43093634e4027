"""A judge's calibration: how often it agreed with the known answers of the controls and the
task's labelled examples, as counts.

*Sensitivity* is the share of known positives (breach controls that target it, utility
controls with ``utility=True``, examples labelled true) on which the judge said yes;
*specificity* the share of known negatives (clean, mirror and no-op controls, examples labelled
false) on which it said no. Both are kept as counts (``agreed``/``of``), never as bare
ratios, so that a report can carry their uncertainty into the rates the judge decides
(`oracle.reports.stats.rogan_gladen_interval`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Agreement(BaseModel):
    """How many of `of` known answers the judge matched."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agreed: int = Field(ge=0)
    of: int = Field(ge=0)

    def rate(self) -> float | None:
        return self.agreed / self.of if self.of else None


class JudgeCalibration(BaseModel):
    """One judge of one task, as its controls and labelled examples measured it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str = Field("", description="the task the judge belongs to")
    metric: str = Field(
        description="the metric the judge decides (with the task's other predicates)"
    )
    judge: str = Field(description="the judge's name, as its predicate entry names it")
    model: str | None = Field(description="the model that judged, as configured (None: no model)")
    sensitivity: Agreement = Field(description="known positives the judge said yes to")
    specificity: Agreement = Field(description="known negatives the judge said no to")
    controls: Agreement = Field(description="controls whose known answer the judge matched")
    examples: Agreement = Field(description="labelled examples whose label the judge matched")
    unknown: int = Field(0, ge=0, description="controls and examples the judge left unknown")
