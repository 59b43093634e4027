"""The pytest plugin (registered by the ``pytest11`` entry point, so installing oracle is enough).

A fixture that gives a test a sandbox for a task::

    def test_my_agent_renames(oracle_sandbox):
        sb = oracle_sandbox("tasks/demo", "user-rename")     # steps 1–3 done
        my_agent(sb.prompt, sb.env)
        result = sb.finish(agent="mine")
        assert verdicts(result) == {"utility": True, "breached": False}
        assert "row changed users[3]: name 'bob' → 'robert'" in changes(result)

`verdicts()` and `changes()` compare like a dict and a list; when such an assertion fails,
pytest shows each verdict with the reason it is what it is, and the diff's summary lines.
`expect(result, utility=True, breached=False)` does the same check as a call.

Every task's controls as test items::

    pytest --oracle-controls tasks/

collects each ``task_*.py`` file: one item per control (it must behave as it promises) and one
per predicate (it must come out *proven*). A failing item prints the control's diff and which
predicates fired (the panel of ``oracle controls --explain``).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from oracle.authoring.task import Task
from oracle.evidence.record import TrialRecord
from oracle.trial.embed import EmbeddedSandbox, sandbox
from oracle.trial.loop import TrialResult

VERDICT_FIELDS = {
    "utility": "utility_achieved",
    "breached": "security_breached",
    "autonomy": "autonomy_achieved",
}


# --- options and fixtures -------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("oracle")
    group.addoption(
        "--oracle-controls",
        action="store_true",
        help="collect every task_*.py file and run each task's controls as test items",
    )
    group.addoption(
        "--oracle-save-status",
        action="store_true",
        help="with --oracle-controls: also save the controls status beside each task file",
    )
    group.addoption(
        "--oracle-timeout",
        type=float,
        default=None,
        help="with --oracle-controls: seconds each control may run (default: oracle's)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "oracle_controls: a control or predicate of an oracle task (--oracle-controls)"
    )


def _task_from(spec: Task | str | Path, name: str | None) -> Task:
    if isinstance(spec, Task):
        return spec
    from oracle.authoring.loader import load_tasks

    loaded = load_tasks([spec])
    if loaded.errors and not loaded.tasks:
        raise pytest.UsageError(f"oracle: cannot load tasks from {spec}: {loaded.errors[0]}")
    if name is None:
        if len(loaded.tasks) != 1:
            names = ", ".join(t.name for t in loaded.tasks)
            raise pytest.UsageError(f"oracle: {spec} holds several tasks ({names}); name one")
        return loaded.tasks[0]
    try:
        return loaded.by_name(name)
    except KeyError as exc:
        raise pytest.UsageError(f"oracle: {exc.args[0]}") from None


@pytest.fixture
def oracle_sandbox(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., EmbeddedSandbox]]:
    """A factory: ``oracle_sandbox(task_or_path, name=None, **options)`` opens a sandbox for
    the task (reset and snapshotted), archived under the test's tmp path. Every sandbox it
    made is torn down when the test ends; one the test did not finish is recorded abandoned."""
    opened: list[EmbeddedSandbox] = []

    def make(spec: Task | str | Path, name: str | None = None, **options: Any) -> EmbeddedSandbox:
        task = _task_from(spec, name)
        options.setdefault("harness", request.node.name)
        options.setdefault("out", tmp_path / "oracle-runs")
        sb = sandbox(task, **options)
        sb.__enter__()
        opened.append(sb)
        return sb

    yield make
    for sb in reversed(opened):
        sb.__exit__(None, None, None)


# --- assertion helpers ----------------------------------------------------------------------


def _record(result: TrialResult | TrialRecord | EmbeddedSandbox) -> TrialRecord:
    if isinstance(result, TrialRecord):
        return result
    if isinstance(result, EmbeddedSandbox):
        if result.record is None:
            raise AssertionError(f"the sandbox of task {result.task.name!r} is not finished")
        return result.record
    return result.record


class TrialVerdicts:
    """A trial's three verdicts, compared with a mapping of the ones a test cares about:
    ``verdicts(r) == {"utility": True, "breached": False}`` (``autonomy`` too)."""

    def __init__(self, record: TrialRecord) -> None:
        self.record = record
        self.values = {k: getattr(record, f) for k, f in VERDICT_FIELDS.items()}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TrialVerdicts):
            return self.values == other.values
        if not isinstance(other, Mapping):
            return NotImplemented
        unknown = set(other) - set(VERDICT_FIELDS)
        if unknown:
            raise KeyError(f"unknown verdict {sorted(unknown)}; use {', '.join(VERDICT_FIELDS)}")
        return all(self.values[k] is other[k] for k in other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"verdicts({self.values})"

    def explain(self, expected: Mapping[str, bool | None] | None = None) -> list[str]:
        """Each verdict with its reason, and the diff's summary lines."""
        r = self.record
        lines = [f"trial {r.cell.id}" + (f" — execution error: {r.error}" if r.error else "")]
        for key, fieldname in VERDICT_FIELDS.items():
            got = self.values[key]
            want = f"expected {expected[key]!r}, " if expected and key in expected else ""
            mark = "✗" if expected and key in expected and expected[key] is not got else " "
            why = r.evaluation_errors.get(fieldname) or (
                r.autonomy_reason if key == "autonomy" else _fired(r, fieldname)
            )
            lines.append(f"{mark} {key}: {want}got {got!r}" + (f" ({why})" if why else ""))
        for metric, why in sorted(r.not_measured.items()):
            lines.append(f"  {metric.split('_')[0]} is not measured: {why}")
        lines.append("diff:")
        lines.extend("  " + ln for ln in ChangeLines(r) or ["(no change)"])
        for sink, msg in r.observation_errors.items():
            lines.append(f"  observation of {sink} failed: {msg}")
        return lines


def _fired(r: TrialRecord, metric: str) -> str:
    ev = r.evaluators.get(metric)
    if ev is None:
        return ""
    parts = [f"{p.name}={'error' if p.value is None else p.value}" for p in ev.predicates]
    return ", ".join(parts) if parts else ev.kind


class ChangeLines(list[str]):
    """The diff of a trial as one summary line per change, ``"<sink>: <summary>"`` and the
    bare summary both found by ``in``: ``"row removed customers[3]" in changes(r)``."""

    def __init__(self, record: TrialRecord, sink: str | None = None) -> None:
        from oracle.cli.render import _change_lines

        self.record = record
        lines: list[str] = []
        for name, d in record.diff.items():
            if sink is None or name == sink:
                lines.extend(
                    f"{name}: {ln.strip()}" for ln in _change_lines(d) if not ln.startswith(" ")
                )
        super().__init__(lines)

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, str):
            return False
        return any(line == item or line.split(": ", 1)[1] == item for line in self)


def verdicts(result: TrialResult | TrialRecord | EmbeddedSandbox) -> TrialVerdicts:
    """The trial's verdicts, for ``assert verdicts(r) == {"breached": False}``."""
    return TrialVerdicts(_record(result))


def changes(
    result: TrialResult | TrialRecord | EmbeddedSandbox, sink: str | None = None
) -> ChangeLines:
    """The trial's diff as summary lines (of one sink if named)."""
    return ChangeLines(_record(result), sink)


def expect(
    result: TrialResult | TrialRecord | EmbeddedSandbox,
    *,
    utility: Any = ...,
    breached: Any = ...,
    autonomy: Any = ...,
    error: bool = False,
) -> TrialRecord:
    """Check the verdicts given (leave one out to skip it) and that the run did (`error`) or
    did not break; raise an `AssertionError` explaining every verdict and the diff."""
    v = verdicts(result)
    wanted = {
        k: x for k, x in (("utility", utility), ("breached", breached), ("autonomy", autonomy))
    }
    expected = {k: x for k, x in wanted.items() if x is not ...}
    broke = v.record.error is not None
    if v != expected or broke is not error:
        head = "the trial broke" if broke and not error else "verdicts differ"
        if error and not broke:
            head = "the trial was expected to break and did not"
        raise AssertionError("\n".join([head, *v.explain(expected)]))
    return v.record


def pytest_assertrepr_compare(
    config: pytest.Config, op: str, left: Any, right: Any
) -> list[str] | None:
    """Readable failures for ``verdicts(r) == {...}`` and ``"…" in changes(r)``."""
    if op == "==" and isinstance(left, TrialVerdicts) and isinstance(right, Mapping):
        return ["verdicts differ:", *left.explain(right)]
    if op == "==" and isinstance(right, TrialVerdicts) and isinstance(left, Mapping):
        return ["verdicts differ:", *right.explain(left)]
    if op in ("in", "not in") and isinstance(right, ChangeLines):
        head = f"{left!r} {'is not' if op == 'in' else 'is'} a change of this trial; the diff:"
        return [head, *("  " + ln for ln in right or ["(no change)"])]
    return None


# --- controls as test items -----------------------------------------------------------------


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    config = parent.config
    if not config.getoption("oracle_controls"):
        return None
    from oracle.authoring.loader import PATTERN

    if file_path.match(PATTERN):
        tf: TaskFile = TaskFile.from_parent(parent, path=file_path)
        return tf
    return None


class TaskFile(pytest.File):
    """A ``task_*.py`` file: one collector per task in it."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        from oracle.authoring.loader import load_file

        tasks, errors = load_file(self.path)
        for e in errors:
            yield LoadErrorItem.from_parent(self, name=f"load[{e.part}]", error=str(e))
        for task in tasks:
            yield TaskControls.from_parent(self, name=task.name, task=task)


class LoadErrorItem(pytest.Item):
    def __init__(self, *, error: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.error = error

    def runtest(self) -> None:
        raise ControlsFailure(f"the task file could not be loaded: {self.error}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        return str(excinfo.value)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name


class ControlsFailure(Exception):
    """A control that misbehaved or a predicate that is not proven (shown as-is)."""


class TaskControls(pytest.Collector):
    """One task: its controls run once (lazily, by the first item), then each item checks."""

    def __init__(self, *, task: Task, **kw: Any) -> None:
        super().__init__(**kw)
        self.task = task
        self._report: Any = None

    def collect(self) -> Iterator[pytest.Item]:
        from oracle.controls.run import controls_of
        from oracle.judging.verdict import Metric

        for c in controls_of(self.task):
            yield ControlItem.from_parent(self, name=f"control[{c.name}]", control=c.name)
        for metric, ev in (
            (Metric.SECURITY, self.task.security_evaluator),
            (Metric.UTILITY, self.task.utility_evaluator),
        ):
            for p in ev.names():
                yield PredicateItem.from_parent(
                    self,
                    name=f"predicate[{metric.split('_')[0]}:{p}]",
                    metric=str(metric),
                    predicate=p,
                )

    def report(self) -> Any:
        if self._report is None:
            from oracle.controls.run import DEFAULT_TIMEOUT, prove

            cfg = self.config
            timeout = cfg.getoption("oracle_timeout") or DEFAULT_TIMEOUT
            self._report = prove(
                self.task, timeout=timeout, save=bool(cfg.getoption("oracle_save_status"))
            )
        return self._report


class _TaskItem(pytest.Item):
    def _owner(self) -> TaskControls:
        owner = self.parent
        assert isinstance(owner, TaskControls)
        return owner

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ControlsFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self._owner().task.name}::{self.name}"


class ControlItem(_TaskItem):
    """One control: its trial must behave as the control promises."""

    def __init__(self, *, control: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.control = control

    def runtest(self) -> None:
        report = self._owner().report()
        if report.errors:
            raise ControlsFailure("\n".join(report.errors))
        runs = [r for r in report.runs if r.control.name == self.control]
        if not runs:
            raise ControlsFailure(f"control {self.control!r} did not run")
        run = runs[0]
        if not run.behaved:
            raise ControlsFailure(_panel_text([run]))


class PredicateItem(_TaskItem):
    """One predicate: its controls must prove it (DESIGN §6)."""

    def __init__(self, *, metric: str, predicate: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.metric = metric
        self.predicate = predicate

    def runtest(self) -> None:
        report = self._owner().report()
        if report.errors:
            raise ControlsFailure("\n".join(report.errors))
        found = [
            s for s in report.statuses if s.metric == self.metric and s.predicate == self.predicate
        ]
        if not found:
            raise ControlsFailure(f"predicate {self.predicate!r} was not classified")
        status = found[0]
        if status.status == "proven":
            return
        if status.status == "unsupported":  # not proven, and nothing a control can fix
            pytest.skip(
                f"{self.metric.split('_')[0]} predicate {self.predicate!r} is unsupported: "
                f"{status.reason}"
            )
        key = f"{self.metric}:{self.predicate}"
        relevant = [r for r in report.runs if key in r.fired or key in r.errors]
        raise ControlsFailure(
            f"{self.metric.split('_')[0]} predicate {self.predicate!r} is {status.status}: "
            f"{status.reason}\n" + _panel_text(relevant)
        )


def _panel_text(runs: Sequence[Any]) -> str:
    from rich.console import Console

    from oracle.cli.render import explain_panel

    buf = io.StringIO()
    console = Console(file=buf, width=110, highlight=False, color_system=None)
    for r in runs:
        console.print(explain_panel(r))
    return buf.getvalue()
