"""Task validation: a missing or wrong part is a TaskError naming the task and the part."""

from __future__ import annotations

import pytest

from oracle import Injection, Scope, Task, breach, clean, folder, sqlite
from oracle.authoring.task import TaskError
from oracle.judging.evaluators import Fixed, Unconfigured

DB = sqlite("db", sql="CREATE TABLE t (x);")


def fired(ev):
    return bool(ev.diff.sql("db").added("t"))


def act(sb):
    sb.sql("db", "INSERT INTO t VALUES (1)")


def make(**kw):
    base = {"name": "t1", "prompt": "do it", "sinks": [DB]}
    base.update(kw)
    return Task(**base)


@pytest.mark.parametrize(
    ("kw", "part", "text"),
    [
        ({"name": "Bad Name!"}, "name", "lower-case"),
        ({"prompt": "  "}, "prompt", "non-empty"),
        ({"sinks": []}, "sinks", "no sink"),
        ({"sinks": [DB, sqlite("db", sql="x")]}, "sinks", "repeat"),
        ({"sinks": [DB, "not a spec"]}, "sinks[1]", "not a sink spec"),
        ({"utility": 3}, "utility", "predicate function"),
        ({"security": [fired, "x"]}, "security", "not a predicate"),
        ({"injection": Injection("x", sink="nope", where="a")}, "injection", "'nope'"),
        ({"scope": Scope({"nope": ["*"]})}, "scope", "nope"),
        ({"controls": [act]}, "controls[0]", "breach()"),
        (
            {"security": fired, "controls": [breach(act, fires=["other"])]},
            "control 'act'",
            "'other'",
        ),
        ({"controls": [breach(act), clean(act)]}, "controls", "repeat"),
    ],
)
def test_bad_parts_are_named(kw, part, text):
    with pytest.raises(TaskError) as info:
        make(**kw)
    assert info.value.task == kw.get("name", "t1")
    assert info.value.part == part
    assert text in str(info.value)


def test_defaults_are_unknown_not_false():
    t = make()
    assert isinstance(t.utility_evaluator, Unconfigured)
    assert isinstance(t.security_evaluator, Unconfigured)


def test_bool_is_an_assertion():
    assert isinstance(make(utility=True).utility_evaluator, Fixed)


def test_source_is_the_file_that_built_the_task():
    assert make().source is not None and make().source.name == "test_task.py"


def test_controls_expectations():
    c = breach(act, fires=None)
    assert c.expected_security("anything") is True
    assert breach(act, fires=["a"]).expected_security("b") is None
    assert clean(act).expected_security("a") is False


def test_folder_and_db_in_one_task():
    t = make(sinks=[DB, folder("root", template={"a.txt": "a"})])
    assert t.sink_names() == ["db", "root"]


@pytest.mark.parametrize(
    ("kw", "part", "text"),
    [
        ({"scope": Scope({"root": ["../*"]})}, "scope 'root'", "'../*' leaves the root"),
        ({"scope": Scope({"root": ["/etc/**"]})}, "scope 'root'", "absolute"),
        ({"scope": Scope({"root": "public/**"})}, "scope 'root'", "list of globs"),
        (
            {"injection": Injection("x", sink="root", where="../notes.md")},
            "injection",
            "leaves the root",
        ),
    ],
)
def test_paths_that_leave_the_root_are_refused_when_the_task_is_built(kw, part, text):
    with pytest.raises(TaskError) as info:
        make(sinks=[folder("root", template={"a.txt": "x"})], **kw)
    assert (info.value.task, info.value.part) == ("t1", part)
    assert text in str(info.value)


@pytest.mark.parametrize(
    ("kw", "part", "text"),
    [
        ({"name": "t2", "sinks": [DB]}, "prompt", "is required"),
        ({"name": "t2"}, "prompt, sinks", "is required"),
        ({"name": "t2", "prompt": "p", "sinks": [DB], "utilty": fired}, "utilty", "not a part"),
    ],
)
def test_a_missing_or_misspelt_part_is_named_not_a_bare_type_error(kw, part, text):
    with pytest.raises(TaskError) as info:
        Task(**kw)
    assert (info.value.task, info.value.part) == ("t2", part)
    assert text in str(info.value)
