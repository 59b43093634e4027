"""The package root: every public name is there, imported on first use, so that ``import
oracle`` (and ``oracle --help``) load none of the heavy libraries; a trial still runs from the
root's names alone."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap

import pytest

import oracle
from tests.conftest import REPO

#: Libraries that only running something needs: none may load for ``import oracle`` or for
#: the command line's module (its help and completion).
HEAVY = ("mitmproxy", "sqlalchemy", "pydantic", "deepdiff", "rich.progress", "psycopg", "redis")


def fresh(code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a new interpreter (nothing imported before it)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("module", ["oracle", "oracle.cli.app", "oracle.cli.matrix"])
def test_importing_loads_none_of_the_heavy_libraries(module):
    out = fresh(
        f"""
        import json, sys
        import {module}
        print(json.dumps(sorted(sys.modules)))
        """
    )
    assert out.returncode == 0, out.stderr
    loaded = set(json.loads(out.stdout))
    assert module in loaded
    assert [m for m in HEAVY if m in loaded] == []
    # Nor any sink, sandbox or agent: they are what pulls the libraries in.
    assert sorted(m for m in loaded if m.startswith(("oracle.sinks", "oracle.sandbox"))) == []


def test_the_probe_sees_a_heavy_import():
    # The test above would pass on a probe that sees nothing: asking for one name loads them.
    out = fresh(
        """
        import json, sys
        from oracle import Task
        print(json.dumps(sorted(sys.modules)))
        """
    )
    assert out.returncode == 0, out.stderr
    assert "pydantic" in json.loads(out.stdout)


def test_every_public_name_is_its_modules_own():
    for name in oracle.__all__:
        source = oracle._SOURCES[name]
        assert getattr(oracle, name) is getattr(importlib.import_module(source), name), name
    assert sorted(oracle.__all__) == sorted(oracle._SOURCES)


def test_dir_lists_every_public_name_before_it_is_imported():
    out = fresh(
        """
        import json, sys, oracle
        print(json.dumps([dir(oracle), "oracle.authoring.task" in sys.modules]))
        """
    )
    names, task_loaded = json.loads(out.stdout)
    assert set(oracle.__all__) <= set(names) and not task_loaded


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="module 'oracle' has no attribute 'Tusk'"):
        _ = oracle.Tusk  # type: ignore[attr-defined]
    with pytest.raises(ImportError, match="Tusk"):
        exec("from oracle import Tusk", {})


def test_a_trial_runs_from_the_roots_names_alone():
    # Nothing imports the sandbox: the root registers it as the default, loaded on first use.
    out = fresh(
        """
        import sys
        from oracle import CallableAgent, Task, run_trial, sqlite

        before = "oracle.sandbox.sandbox" in sys.modules

        def add(view):
            view.sql("db", "INSERT INTO t (v) VALUES ('x')")
            return "added"

        task = Task(
            name="tiny",
            prompt="add a row",
            sinks=[sqlite("db", sql="CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT);")],
            utility=lambda ev: len(ev.diff.sql("db").added("t")) == 1,
        )
        from oracle.scoring.scorer import InProcessScorer

        record = run_trial(task, CallableAgent(add), scorer=InProcessScorer()).record
        print(before, record.error, record.utility_achieved)
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "None", "True"]


def test_agents_resolve_by_name_after_import_oracle_alone():
    out = fresh(
        """
        import oracle
        from oracle.trial.agent import agent_named
        print(agent_named("cmd:./agent.sh").name)
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "cmd:./agent.sh"


def test_defaults_written_out_for_the_command_line_are_the_librarys():
    # The CLI modules spell these out so that their options need no import.
    import oracle.cli.app as app
    import oracle.cli.matrix as matrix
    from oracle.base.signing import KEY_NAME
    from oracle.controls.run import DEFAULT_TIMEOUT

    assert app.CONTROL_TIMEOUT == DEFAULT_TIMEOUT
    assert matrix.KEY_NAME == KEY_NAME


def test_the_cli_modules_old_names_are_still_found():
    import oracle.cli.app as app
    from oracle.agents import spec

    assert app.resolve_agent is spec.resolve_agent
    assert app.RunOptions is spec.RunOptions
    assert app.BUILTIN_AGENTS is spec.BUILTIN_AGENTS
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        _ = app.nothing  # type: ignore[attr-defined]


def test_the_kind_registry_holds_every_built_in_kind_after_import_oracle_alone():
    # A lazy root imports no sink; the first lookup of the registry loads them, so an archive
    # read or a boundary query never sees a kind missing for what was not imported before.
    out = fresh(
        """
        import json, sys
        import oracle
        from oracle.evidence.kinds import boundary_kinds, declared, state_kinds
        print(json.dumps([
            "oracle.sinks.mail" in sys.modules,
            [k.name for k in declared()],
            sorted(boundary_kinds()),
            state_kinds(),
        ]))
        """
    )
    assert out.returncode == 0, out.stderr
    before, kinds, boundary, states = json.loads(out.stdout)
    assert before is False  # nothing loaded them until the registry was read
    assert kinds == ["amqp", "egress", "files", "github", "inbox", "mail", "redis", "reply", "sql"]
    assert {"egress", "mail", "reply"} <= set(boundary)
    assert set(kinds) <= set(states)


def test_reading_an_archived_change_loads_the_built_in_change_types():
    out = fresh(
        """
        import json, sys
        import oracle
        from oracle.evidence.change import change_from_json
        before = "oracle.sinks.mail" in sys.modules
        unknown = change_from_json({"change": "no-such-change"})
        print(json.dumps([before, unknown is None, "oracle.sinks.mail" in sys.modules]))
        """
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [False, True, True]


def test_an_archived_change_of_a_known_kind_loads_that_kind_alone():
    """`oracle show` and the viewer pass the sink's kind: a SQL change loads the SQL sink's
    types, not the mail, GitHub or egress modules (and their SMTP server, 0.1 s)."""
    out = fresh(
        """
        import json, sys
        import oracle
        from oracle.evidence.change import change_from_json
        raw = {"change": "row_removed", "table": "orders", "key": [11], "row": {"id": 11}}
        change = change_from_json(raw, "sql")
        others = ["oracle.sinks.mail", "oracle.sinks.github.attribution", "oracle.proxies.smtp"]
        print(json.dumps([change.summary(), [m for m in others if m in sys.modules]]))
        """
    )
    assert out.returncode == 0, out.stderr
    summary, loaded = json.loads(out.stdout)
    assert "orders" in summary and "11" in summary
    assert loaded == []


def test_a_commands_document_loads_that_commands_models_alone():
    """``oracle trial`` builds its ``--json`` document without the controls' and the reports'
    models, which only ``controls`` and ``reduce`` need; asking for those loads them."""
    out = fresh(
        """
        import json, sys
        from oracle.cli.output import MODELS, model
        heavy = ["oracle.cli.output_controls", "oracle.cli.output_reduce", "oracle.reports.model"]
        trial = model("trial")().model_dump()["command"]
        before = [m for m in heavy if m in sys.modules]
        names = {c: model(c).__name__ for c in MODELS}
        print(json.dumps([trial, before, [m for m in heavy if m in sys.modules], names]))
        """
    )
    assert out.returncode == 0, out.stderr
    trial, before, after, names = json.loads(out.stdout)
    assert trial == "trial" and before == []
    assert after == [
        "oracle.cli.output_controls",
        "oracle.cli.output_reduce",
        "oracle.reports.model",
    ]
    assert names["controls"] == "ControlsOutput" and names["reduce"] == "ReduceOutput"


def test_what_oracle_trial_imports_to_start_leaves_the_controls_and_the_matrix_out():
    """The tables, the loading of task files and the agents' names (what every ``oracle
    trial`` imports) need only the types of the controls' report and a regular expression of
    the matrix: neither loads the controls' runner nor the matrix's models."""
    out = fresh(
        """
        import json, sys
        import oracle.cli.app, oracle.cli.render, oracle.cli.loading, oracle.agents.alias
        from oracle.agents.alias import aliased
        heavy = ["oracle.controls.run", "oracle.matrix.spec", "oracle.reports.model"]
        before = [m for m in heavy if m in sys.modules]
        try:
            aliased([], ["bad name"])
        except Exception as exc:
            refused = str(exc)
        print(json.dumps([before, "oracle.matrix.spec" in sys.modules, refused]))
        """
    )
    assert out.returncode == 0, out.stderr
    before, spec_loaded, refused = json.loads(out.stdout)
    assert before == []
    assert spec_loaded and "--name" in refused


def test_loading_a_task_that_awaits_nothing_loads_no_event_loop():
    """Every scorer zygote imports what its task file reaches: asyncio (about 40 ms of each
    start) only where something awaits. A task's tools import it when a coroutine tool runs."""
    out = fresh(
        """
        import json, sys
        from pathlib import Path
        from oracle.authoring.loader import load_file
        from oracle.scoring import preload
        task = Path("tasks/demo/task_orders_cleanup.py")
        load_file(task)
        names = preload.modules([task])
        print(json.dumps(["asyncio" in sys.modules, "oracle.evidence.tools" in names]))
        """
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [False, True]


def test_a_json_diff_leaves_numpy_unloaded_and_importable():
    """deepdiff imports numpy wherever it is installed (the Inspect extra brings it): 0.35 s
    of each process's first JSON diff. The structural diff of JSON values needs none of it;
    numpy still imports afterwards, and a process that holds numpy already keeps using it."""
    pytest.importorskip("numpy")
    out = fresh(
        """
        import json, sys
        from oracle.evidence.diff import deep_detail
        detail = deep_detail({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}], "c": None})
        unloaded = "numpy" not in sys.modules
        import numpy
        again = deep_detail({"x": 1}, {"x": 2})
        print(json.dumps([detail, unloaded, numpy.__name__, again]))
        """
    )
    assert out.returncode == 0, out.stderr
    detail, unloaded, numpy_name, again = json.loads(out.stdout)
    assert detail == {
        "dictionary_item_added": {"root['c']": None},
        "values_changed": {"root['a'][1]['b']": {"new_value": 3, "old_value": 2}},
    }
    assert unloaded is True and numpy_name == "numpy"
    assert again == {"values_changed": {"root['x']": {"new_value": 2, "old_value": 1}}}
