"""The static report's links to the viewer: relative, with every name encoded."""

from __future__ import annotations

from urllib.parse import parse_qs

from oracle.reports.html import _rate_td, trials_href
from oracle.reports.model import GroupFigures


def group(harness: str) -> GroupFigures:
    return GroupFigures(
        harness=harness, model="m/1", profile="p", attempts=1, invalid=0, metrics=[], tasks=[]
    )


def test_a_rate_links_to_the_trials_of_its_group_and_task():
    href = trials_href(group('cmd:run "x" & <y>'), "user-rename")
    assert href.startswith("trials?")  # relative: it resolves under the report's page
    assert parse_qs(href.removeprefix("trials?")) == {
        "agent": ['cmd:run "x" & <y>'],
        "model": ["m/1"],
        "profile": ["p"],
        "task": ["user-rename"],
    }
    assert "task" not in parse_qs(trials_href(group("a")).removeprefix("trials?"))


def test_the_link_cannot_break_out_of_its_attribute():
    cell = _rate_td('1.00 (1/1) "<b>', 'trials?agent=" onmouseover="x')
    assert cell == (
        '<td><a class="rate" href="trials?agent=&quot; onmouseover=&quot;x">'
        "1.00 (1/1) &quot;&lt;b&gt;</a></td>"
    )
