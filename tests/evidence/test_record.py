"""The record's JSON schema is exported into the repository and kept in step with the model."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from oracle.evidence.record import Cell, TrialRecord, record_schema
from tests.conftest import REPO

SCHEMA_FILE = REPO / "schemas" / "record.schema.json"


def test_exported_schema_matches_the_model():
    on_disk = json.loads(SCHEMA_FILE.read_text())
    assert on_disk == json.loads(json.dumps(record_schema())), (
        "schemas/record.schema.json is out of date: run `make schema` and commit it"
    )


def test_schema_names_the_verdict_fields():
    props = record_schema()["properties"]
    for name in (
        "utility_achieved",
        "security_breached",
        "autonomy_achieved",
        "evaluation_errors",
        "error",
        "cell",
        "diff",
        "snapshots",
        "versions",
    ):
        assert name in props
    for metric in ("utility_achieved", "security_breached", "autonomy_achieved"):
        types = {t.get("type") for t in props[metric]["anyOf"]}
        assert types == {"boolean", "null"}


def test_verdicts_are_bool_or_null_only():
    base = dict(
        cell=Cell(harness="h", task="t"),
        started_at=0,
        finished_at=1,
        utility_achieved=None,
        security_breached=None,
        autonomy_achieved=None,
    )
    with pytest.raises(ValidationError):
        TrialRecord(**{**base, "unexpected_field": 1})
    with pytest.raises(ValidationError):
        TrialRecord(**{**base, "schema_version": 2})
    r = TrialRecord(**base)
    assert json.loads(r.model_dump_json())["security_breached"] is None


def test_cell_identity():
    c = Cell(
        harness="cmd:./agent run", task="orders-cleanup", repetition=2, model="m/x", profile="p"
    )
    assert c.id == "orders-cleanup/cmd:./agent run/m/x/p/r2"
    assert "/" not in c.folder and " " not in c.folder
    long = Cell(harness="cmd:" + "x" * 500, task="t")
    other = Cell(harness="cmd:" + "x" * 499 + "y", task="t")
    assert len(long.folder) < 250 and long.folder != other.folder


@pytest.mark.parametrize(
    ("one", "other"),
    [
        # A control and another's encoded variant: the same once made safe.
        ({"profile": "post_key_base64"}, {"profile": "post_key ~base64"}),
        ({"profile": "a, then b"}, {"profile": "a_then_b"}),
        ({"model": "openai/gpt-4o"}, {"model": "openai_gpt-4o"}),
        # Parts that run into their neighbours.
        ({"task": "t__x", "harness": "h"}, {"task": "t", "harness": "x__h"}),
        ({"task": "t_", "harness": "h"}, {"task": "t", "harness": "_h"}),
    ],
)
def test_two_cells_never_share_a_folder(one, other):
    a, b = (
        Cell(**{"harness": "h", "task": "t", **one}),
        Cell(**{"harness": "h", "task": "t", **other}),
    )
    assert a.id != b.id and a.folder != b.folder
    assert all(c not in a.folder + b.folder for c in "/ ,~")


def test_a_plain_cell_keeps_its_readable_folder():
    c = Cell(harness="careful", task="user-rename", model="breach", profile="no-op")
    assert c.folder == "user-rename__careful__breach__no-op__r0"


@pytest.mark.parametrize("value", [0, 1, "false", "true", "no", "off", 1.0])
@pytest.mark.parametrize("field", ["utility_achieved", "security_breached", "autonomy_achieved"])
def test_a_verdict_that_is_not_a_json_bool_is_refused(field, value):
    base = dict(
        cell=Cell(harness="h", task="t"),
        started_at=0,
        finished_at=1,
        utility_achieved=None,
        security_breached=None,
        autonomy_achieved=None,
    )
    with pytest.raises(ValidationError):
        TrialRecord(**{**base, field: value})
    raw = TrialRecord(**base).model_dump(mode="json")
    with pytest.raises(ValidationError):
        TrialRecord.model_validate_json(json.dumps({**raw, field: value}))
