"""The trial filters of a run page, read from its query string so that a link is shareable.

``?task=user-rename&agent=obedient&security=true&finding=scope`` lists the obedient agent's
trials of user-rename that breached and have a scope finding. Parameters:

- ``task``, ``agent`` (the harness), ``model``, ``profile``: exact names (repeat for several);
- ``utility``, ``security`` (breached), ``invocation`` (autonomy): ``true``, ``false`` or
  ``unknown``;
- ``finding``: a finding kind (``scope``, ``silent_success``…), ``any`` or ``none``.

A value that is none of these is a `FilterError` naming the parameter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import get_args

from oracle.evidence.record import Finding, TrialRecord

VERDICTS = {
    "utility": "utility_achieved",
    "security": "security_breached",
    "invocation": "autonomy_achieved",
}
NAMES = ("task", "agent", "model", "profile")
WORDS = {"true": True, "false": False, "unknown": None}
#: Every finding kind a record may hold, and the two words beside them.
FINDINGS = (*get_args(Finding.model_fields["kind"].annotation), "any", "none")


class FilterError(ValueError):
    """A query parameter with a value no filter takes."""


@dataclass
class Filters:
    """What a trial must be to be listed (empty: anything)."""

    names: dict[str, set[str]] = field(default_factory=dict)
    verdicts: dict[str, bool | None] = field(default_factory=dict)
    finding: str | None = None

    @property
    def active(self) -> bool:
        return bool(self.names or self.verdicts or self.finding)

    def matches(self, r: TrialRecord) -> bool:
        have = {
            "task": r.cell.task,
            "agent": r.cell.harness,
            "model": r.cell.model,
            "profile": r.cell.profile,
        }
        if any(have[k] not in wanted for k, wanted in self.names.items()):
            return False
        for param, value in self.verdicts.items():
            if getattr(r, VERDICTS[param]) is not value:
                return False
        if self.finding == "any":
            return bool(r.findings)
        if self.finding == "none":
            return not r.findings
        if self.finding is not None:
            return any(f.kind == self.finding for f in r.findings)
        return True


def parse(query: Mapping[str, Sequence[str]]) -> Filters:
    """The filters a query string names (parameter → its values); `FilterError` otherwise."""
    f = Filters()
    for key, values in query.items():
        values = [v for v in values if v != ""]  # an empty choice of a form: no filter
        if not values:
            continue
        if key in NAMES:
            f.names[key] = set(values)
        elif key in VERDICTS:
            if len(values) > 1 or values[0] not in WORDS:
                raise FilterError(
                    f"query parameter {key!r} takes true, false or unknown, not {values!r}"
                )
            f.verdicts[key] = WORDS[values[0]]
        elif key == "finding":
            if len(values) > 1:
                raise FilterError(f"query parameter 'finding' takes one value, not {values!r}")
            if values[0] not in FINDINGS:
                raise FilterError(
                    f"query parameter 'finding' takes one of {', '.join(FINDINGS)}, "
                    f"not {values[0]!r}"
                )
            f.finding = values[0]
        else:
            known = ", ".join([*NAMES, *VERDICTS, "finding"])
            raise FilterError(f"unknown query parameter {key!r} (known: {known})")
    return f
