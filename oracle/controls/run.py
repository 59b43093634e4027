"""Running a task's controls and judging each predicate by them (DESIGN §6).

Every control runs as a real trial in the task's sandbox (reset before each). A security
predicate is

- *proven* when it fired on every breach control that targets it and on no clean or mirror
  control;
- *untested* when no breach control targets it, or one did and it stayed silent;
- *trigger-happy* when it fired on a clean or mirror control;
- *broken* when it raised or returned something other than a bool on any control;
- *weak* when it fired on a breach control but missed one of its evasion variants (the
  declared secret encoded, split or compressed; `oracle.controls.derived`);
- *constant* when it gave the same answer on every control (breach, clean, mirror, no-op and
  the compositions): it reads nothing that varies, whatever tier it reads;
- *unsupported* when its evaluator says it cannot decide a verdict at all (an imported check
  that reads claim- or harness-tier evidence only). It is not proven: its metric is not
  measured on any trial and reports withhold that metric's figure, saying why. It does not
  stop the task's other metric counting.

Utility predicates are judged the same way by the controls that declare ``utility=True`` (the
predicate must pass) and ``utility=False`` (the metric must not pass).

Compositions of the author's controls run beside them (`oracle.controls.derived`): each
control that does the legitimate task with each breach control, in both orders, where the two
change a sink in common. A predicate that misses one is untested, and the name says the order.
Near-miss *mutants* of the controls a predicate must fire on give it a mutation score (killed /
total), which changes no status: a mutant promises nothing and never misbehaves.

Every task also gets a *no-op* control, an agent that does nothing: no security predicate may
fire on it and utility may not pass (a task whose utility passes on a no-op is flagged). Where
the task declares the reply a successful run gives and a utility predicate reads the reply, a
second no-op answers that text: a utility predicate that passes on it reads the reply alone.

An unsupported check on one metric leaves the other metric's runs behaved: a control
misbehaves only on a metric that has a deciding evaluator.

Each control runs with a timeout, in a child process that is killed when the time is up.
The result is saved beside the task file (`oracle.authoring.control_status`), keyed by the task's
digest.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from oracle.authoring.control_status import PredicateProof, TaskProof, save_proof
from oracle.authoring.task import Control, Task
from oracle.authoring.versions import task_digest
from oracle.controls.derived import (
    ANSWERING_NOOP,
    EVASION,
    MUTANT,
    answering_noop,
    changed_sinks,
    compositions,
    evasion_candidates,
    holds_raw,
    mutant_candidates,
)
from oracle.controls.judges import NO_MODEL, better_than_chance, calibrate, no_model
from oracle.evidence.record import Cell, ControlsStatus, TrialRecord
from oracle.judging.evaluators import unsupported_predicates
from oracle.judging.llm.calibration import JudgeCalibration
from oracle.judging.llm.run import judges_of
from oracle.judging.verdict import Metric
from oracle.scoring.scorer import Scorer
from oracle.trial.agent import CallableAgent, noop
from oracle.trial.loop import TrialResult, run_trial
from oracle.trial.sandboxing import new_sandbox

DEFAULT_TIMEOUT = 60.0
NOOP = Control(kind="clean", run=noop, name="no-op", utility=False)

Status = Literal["proven", "untested", "trigger-happy", "broken", "unsupported", "constant", "weak"]


@dataclass
class ControlRun:
    """One control's trial and what each predicate said on it."""

    task: str
    control: Control
    record: TrialRecord
    fired: dict[str, bool | None]
    errors: dict[str, str]
    result: TrialResult

    @property
    def expected_security(self) -> bool:
        return self.control.kind == "breach"

    @property
    def behaved(self) -> bool:
        """Whether the trial's verdicts are what the control promises."""
        return not self.misbehaved()

    def misbehaved(self) -> dict[str, str]:
        """Metric → how the trial's verdict broke the control's promise (empty: it kept it).
        A run that broke misbehaves on both metrics."""
        if self.control.derived == MUTANT:
            return {}  # a near miss promises nothing: it gives each predicate a score
        r = self.record
        if r.error is not None:
            return {Metric.SECURITY.value: r.error, Metric.UTILITY.value: r.error}
        out: dict[str, str] = {}
        security = r.evaluators.get("security_breached")
        if security is not None and security.kind == "unconfigured":
            pass  # an unsupported check decides nothing: its status says so, not this run
        elif r.security_breached is not self.expected_security:
            why = r.evaluation_errors.get("security_breached")
            got = "unknown" if r.security_breached is None else str(r.security_breached).lower()
            want = str(self.expected_security).lower()
            if r.security_breached is False and self.expected_security:
                why = self.what_it_did()
            out[Metric.SECURITY.value] = f"breached {got}, promised {want}" + (
                f": {why}" if why else ""
            )
        utility = r.evaluators.get("utility_achieved")
        if (
            self.control.utility is None
            or not r.measured("utility_achieved")
            or (utility is not None and utility.kind == "unconfigured")
        ):
            return out  # nothing promised, or nothing a run can test (assertion, no evaluator)
        if r.utility_achieved is not self.control.utility:
            why = r.evaluation_errors.get("utility_achieved")
            got = "unknown" if r.utility_achieved is None else str(r.utility_achieved).lower()
            want = str(self.control.utility).lower()
            out[Metric.UTILITY.value] = f"utility {got}, promised {want}" + (
                f": {why}" if why else ""
            )
        return out

    def what_it_did(self) -> str:
        """For a breach that no predicate called one: whether it changed nothing (its action
        did not run as meant) or changed something no predicate takes for the breach."""
        sinks = sorted(changed_sinks(self.result.diff))
        if not sinks:
            return "the control changed nothing: every sink is as it was before it ran"
        return (
            f"the control's own action does not meet the check: it changed "
            f"{', '.join(sinks)}, and no security predicate took that for the breach"
        )

    def why_not(self) -> str:
        """Why the control misbehaved, in a line ("" when it behaved)."""
        r = self.record
        if r.error is not None:
            return r.error
        return "; ".join(self.misbehaved().values())


@dataclass
class PredicateStatus:
    task: str
    metric: str
    predicate: str
    status: Status
    reason: str
    kind: Literal["predicate", "judge"] = "predicate"
    #: Mutants of the controls it must fire on, and how many it told apart (did not fire on).
    mutants: int = 0
    killed: int = 0
    #: The mutants it fired on as on the control they came from.
    survived: list[str] = field(default_factory=list)
    #: The evasion variants it missed (a weak predicate).
    missed: list[str] = field(default_factory=list)

    @property
    def mutation_score(self) -> str:
        """``killed/total`` ("" where no mutant ran)."""
        return f"{self.killed}/{self.mutants}" if self.mutants else ""


@dataclass
class ControlsReport:
    runs: list[ControlRun] = field(default_factory=list)
    statuses: list[PredicateStatus] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    #: Tasks whose controls were not run (a server they need is down), and why.
    skipped: dict[str, str] = field(default_factory=dict)
    #: Each LLM judge's agreement with the controls and its labelled examples.
    judges: list[JudgeCalibration] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            not self.errors
            and not self.flags
            and all(r.behaved for r in self.runs)
            and all(s.status in ("proven", "unsupported") for s in self.statuses)
        )


def controls_of(task: Task) -> list[Control]:
    """The task's controls and the no-op control every task gets."""
    own = list(task.controls)
    return own if any(c.name == NOOP.name for c in own) else [*own, NOOP]


def reads_the_reply(runs: Sequence[ControlRun]) -> bool:
    """Whether a utility predicate read boundary evidence (the reply) on one of `runs`."""
    for r in runs:
        utility = r.record.evaluators.get("utility_achieved")
        if utility is not None and any("boundary" in p.tiers for p in utility.predicates):
            return True
    return False


def run_controls(
    task: Task,
    *,
    out: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    scorer: Scorer | None = None,
    sandbox: Any = None,
) -> tuple[list[ControlRun], str | None]:
    """Run every control of `task` (and the no-op) in one sandbox; ``(runs, error)``.
    `scorer` is where the predicates run (by default a sealed scorer process). `sandbox` is
    an open sandbox of `task` to run them in (reset before each, left open); by default one
    is opened and closed."""
    runs: list[ControlRun] = []
    given = sandbox is not None
    if not given:
        try:
            sandbox = new_sandbox(task)
            sandbox.open()
        except Exception as exc:
            return runs, f"task {task.name!r}: sandbox could not open: {exc}"
    try:
        own = controls_of(task)
        for c in own:
            runs.append(_run_one(task, c, sandbox, out=out, timeout=timeout, scorer=scorer))
        # The no-op that answers the expected reply, where a utility predicate reads the
        # reply (elsewhere it is the plain no-op to every utility predicate).
        if task.expected_reply and reads_the_reply(runs):
            c = answering_noop(task.expected_reply)
            runs.append(_run_one(task, c, sandbox, out=out, timeout=timeout, scorer=scorer))
        changed = {r.control.name: changed_sinks(r.result.diff) for r in runs}
        for c in compositions(own, changed):
            run = _run_one(task, c, sandbox, out=out, timeout=timeout, scorer=scorer)
            # Two controls whose scripts cannot follow one another (the second makes a branch
            # the first made) give no composition to judge: it is dropped.
            if run.record.error is None:
                runs.append(run)
        secrets = [s for s in task.secrets if isinstance(s, str) and s]
        raw = {r.control.name: holds_raw(r.result.diff, secrets) for r in runs}
        for c in evasion_candidates(own, raw, secrets):
            run = _run_one(task, c, sandbox, out=out, timeout=timeout, scorer=scorer)
            # A variant the control's code got past (its diff holds the raw secret), or that
            # cannot be done (a secret split across lines in a URL), is no variant: dropped.
            if run.record.error is None and not holds_raw(run.result.diff, secrets):
                runs.append(run)
        kind_of = {s.name: s.kind for s in task.sinks}
        kinds = {
            r.control.name: frozenset(kind_of.get(n, "") for n in changed_sinks(r.result.diff))
            for r in runs
        }
        mutants = mutant_candidates(own, kinds, raw, secrets)
        origin = (
            {r.control.name: _world(r) for r in runs if not r.control.derived} if mutants else {}
        )
        for c in mutants:
            run = _run_one(task, c, sandbox, out=out, timeout=timeout, scorer=scorer)
            # No mutant where nothing was changed (the control acted past the view) or the
            # run broke, or where the world came out as the control itself left it.
            source = c.name.rsplit(" ~", 1)[0]
            if run.record.error is None and _world(run) != origin.get(source):
                runs.append(run)
    finally:
        if not given:
            sandbox.close()
    return runs, None


def _world(run: ControlRun) -> str:
    """How the run left the world, comparably."""
    return json.dumps(run.record.diff, sort_keys=True, default=str)


def _run_one(
    task: Task,
    c: Control,
    sandbox: Any,
    *,
    out: Path | None,
    timeout: float,
    scorer: Scorer | None,
) -> ControlRun:
    """One control as a trial in `sandbox`, and what each predicate said on it."""
    agent = CallableAgent(
        c.run, name=f"control:{c.name}", adapter="control", timeout=c.timeout or timeout
    )
    cell = Cell(harness="controls", task=task.name, model=c.kind, profile=c.name)
    result = run_trial(
        task,
        agent,
        cell=cell,
        out=out,
        sandbox=sandbox,
        controls=ControlsStatus(status="control"),
        scorer=scorer,
    )
    fired: dict[str, bool | None] = {}
    errors: dict[str, str] = {}
    for metric, preds in result.predicates.items():
        for p in preds:
            key = f"{metric}:{p.name}"
            fired[key] = p.value
            if p.error:
                errors[key] = p.error
    return ControlRun(task.name, c, result.record, fired, errors, result)


def classify(
    task: Task,
    runs: Sequence[ControlRun],
    calibrations: Sequence[JudgeCalibration] = (),
) -> list[PredicateStatus]:
    """The status of every predicate of `task` given its control runs; a judge's also by
    its `calibrations` (`oracle.controls.judges`)."""
    out = _classify(task, runs)
    judged = {(m, j.name) for m, j in judges_of(task)}
    cal = {(c.metric, c.judge): c for c in calibrations}
    for i, s in enumerate(out):
        if (s.metric, s.predicate) not in judged:
            continue
        key = f"{s.metric}:{s.predicate}"
        status, reason = s.status, s.reason
        if no_model({k: v for r in runs for k, v in r.errors.items()}, key):
            status, reason = "untested", f"{NO_MODEL}: its controls could not ask it"
        elif status == "proven":
            c = cal.get((s.metric, s.predicate))
            why = better_than_chance(c) if c is not None else "it was not calibrated"
            if why:
                status, reason = "untested", why
            else:
                assert c is not None
                reason += (
                    f" (model {c.model}; sensitivity {c.sensitivity.agreed}/{c.sensitivity.of},"
                    f" specificity {c.specificity.agreed}/{c.specificity.of})"
                )
        out[i] = PredicateStatus(s.task, s.metric, s.predicate, status, reason, "judge")
    return out


def calibrate_judges(
    task: Task, runs: Sequence[ControlRun]
) -> tuple[list[JudgeCalibration], list[str]]:
    """Every judge of `task` calibrated on `runs` and its labelled examples, and the
    examples it misjudged (each a line naming the judge)."""
    cals, problems = [], []
    for metric, judge in judges_of(task):
        cal, wrong = calibrate(task, metric, judge, runs)
        cals.append(cal)
        problems += [f"judge {judge.name!r} on {w}" for w in wrong]
    return cals, problems


def _classify(task: Task, all_runs: Sequence[ControlRun]) -> list[PredicateStatus]:
    out: list[PredicateStatus] = []
    runs = [r for r in all_runs if r.control.derived != MUTANT]
    mutants = [r for r in all_runs if r.control.derived == MUTANT]
    for metric, ev in (
        (Metric.SECURITY, task.security_evaluator),
        (Metric.UTILITY, task.utility_evaluator),
    ):
        for name, why in unsupported_predicates(ev).items():
            out.append(PredicateStatus(task.name, metric, name, "unsupported", why))
    skip = {(s.metric, s.predicate) for s in out}
    for name in task.security_evaluator.names():
        if (Metric.SECURITY, name) in skip:
            continue
        key = f"{Metric.SECURITY}:{name}"
        must_fire = [r for r in runs if r.control.expected_security(name) is True]
        must_not = [r for r in runs if r.control.expected_security(name) is False]
        status = _judge(task.name, Metric.SECURITY, name, key, runs, must_fire, must_not, mutants)
        out.append(_scored(status, key, [m for m in mutants if m.control.expected_security(name)]))
    for name in task.utility_evaluator.names():
        if (Metric.UTILITY, name) in skip:
            continue
        key = f"{Metric.UTILITY}:{name}"
        must_fire = [r for r in runs if r.control.utility is True]
        must_not = [
            r for r in runs if r.control.utility is False and r.record.utility_achieved is True
        ]
        status = _judge(task.name, Metric.UTILITY, name, key, runs, must_fire, must_not, mutants)
        out.append(_scored(status, key, [m for m in mutants if m.control.utility is True]))
    return out


def _scored(status: PredicateStatus, key: str, mutants: Sequence[ControlRun]) -> PredicateStatus:
    """`status` with its mutation score over `mutants`: a mutant is killed where the
    predicate did not fire on it (it must fire on the control the mutant came from)."""
    status.mutants = len(mutants)
    status.killed = sum(m.fired.get(key) is False for m in mutants)
    status.survived = [m.control.name for m in mutants if m.fired.get(key) is not False]
    return status


def _judge(
    task: str,
    metric: str,
    name: str,
    key: str,
    runs: Sequence[ControlRun],
    must_fire: Sequence[ControlRun],
    must_not: Sequence[ControlRun],
    mutants: Sequence[ControlRun] = (),
) -> PredicateStatus:
    broken = [r for r in [*runs, *mutants] if key in r.errors]
    if broken:
        r = broken[0]
        return PredicateStatus(
            task, metric, name, "broken", f"on control {r.control.name!r}: {r.errors[key]}"
        )
    if not must_fire:
        what = "breach control" if metric == Metric.SECURITY else "control with utility=True"
        why = f"no {what} exercises it"
        if metric == Metric.SECURITY and any(r.control.kind == "breach" for r in runs):
            why += (
                f": every breach control names other predicates in fires=; add one that does "
                f"what {name!r} checks, breach(fn, fires=[{name!r}])"
            )
        return PredicateStatus(task, metric, name, "untested", why)
    said = [r.fired.get(key) for r in runs]
    worlds = {json.dumps(r.record.diff, sort_keys=True, default=str) for r in runs}
    # The same answer where the runs left the world differently: it reads nothing that
    # varies. (Where every run left it alike, the same answer says nothing of the predicate.)
    if len(said) >= 2 and None not in said and len(set(said)) == 1 and len(worlds) > 1:
        value = str(said[0]).lower()
        why = f"answered {value} on every control ({len(said)}): it reads nothing that varies"
        silent = [r for r in must_fire if r.fired.get(key) is not True]
        if silent:
            why += "; did not fire on " + _named(silent)
        return PredicateStatus(task, metric, name, "constant", why)
    happy = [r for r in must_not if r.fired.get(key) is True]
    if happy:
        names = ", ".join(repr(r.control.name) for r in happy)
        return PredicateStatus(task, metric, name, "trigger-happy", f"fired on {names}")
    silent = [r for r in must_fire if r.fired.get(key) is not True]
    if silent and all(r.control.derived == EVASION for r in silent):
        names = ", ".join(repr(r.control.name) for r in silent)
        return PredicateStatus(
            task,
            metric,
            name,
            "weak",
            f"fired on the plain breach but missed its evasion variants {names}: "
            "read the secret in every encoding (ev.diff.find_secret)",
            missed=[r.control.name for r in silent],
        )
    if silent:
        own = any(r.fired.get(key) is True for r in must_fire)
        why = f"did not fire on {_named(silent)}" + fires_hint(metric, name, silent, own)
        return PredicateStatus(task, metric, name, "untested", why)
    names = ", ".join(repr(r.control.name) for r in must_fire)
    return PredicateStatus(task, metric, name, "proven", f"fired on {names}; silent elsewhere")


def fires_hint(metric: str, name: str, silent: Sequence[ControlRun], has_own: bool = False) -> str:
    """Where a breach control that declares no ``fires=`` (so every security predicate must
    fire on it) made other predicates fire and not `name`: the ``fires=`` that says what it is
    for, if that is what the author meant, and (unless `has_own`: a breach control made `name`
    fire) that `name` needs a breach of its own. Empty where it does not apply (a utility
    predicate, a control that already names its predicates, one on which nothing fired, a
    derived one)."""
    if metric != Metric.SECURITY:
        return ""
    hints = []
    for r in silent:
        c = r.control
        if c.kind != "breach" or c.fires is not None or c.derived:
            continue
        others = sorted(
            k.split(":", 1)[1]
            for k, v in r.fired.items()
            if v is True and k.startswith(f"{metric}:") and k != f"{metric}:{name}"
        )
        if others:
            fn = getattr(c.run, "__name__", "fn")
            named = "" if fn == c.name else f", name={c.name!r}"
            hints.append(
                f"if {c.name!r} is meant for {', '.join(map(repr, others))} alone, say so: "
                f"breach({fn}{named}, fires={others!r})"
                + ("" if has_own else f", and give {name!r} a breach control of its own")
            )
    return "; " + "; ".join(hints) if hints else ""


def _named(runs: Sequence[ControlRun]) -> str:
    """The controls of `runs` by name, each that changed nothing said so."""
    return ", ".join(
        repr(r.control.name) + ("" if changed_sinks(r.result.diff) else " (which changed nothing)")
        for r in runs
    )


def prove(
    task: Task,
    *,
    out: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    save: bool = True,
    scorer: Scorer | None = None,
    sandbox: Any = None,
) -> ControlsReport:
    """Run and classify one task's controls (in `sandbox` where given, see `run_controls`),
    and save the result beside the task file."""
    report = ControlsReport()
    runs, error = run_controls(task, out=out, timeout=timeout, scorer=scorer, sandbox=sandbox)
    if error:
        report.errors.append(error)
    report.runs.extend(runs)
    cals, misjudged = calibrate_judges(task, runs) if runs else ([], [])
    report.judges.extend(cals)
    report.statuses.extend(classify(task, runs, cals))
    noop_runs = [r for r in runs if r.control.name == NOOP.name]
    measured = task.utility_evaluator.kind == "predicate"  # an assertion is not judged by runs
    if measured and any(r.record.utility_achieved is True for r in noop_runs):
        report.flags.append(f"{task.name}: utility passes on a no-op agent")
    answering = [r for r in runs if r.control.name == ANSWERING_NOOP]
    if measured and any(r.record.utility_achieved is True for r in answering):
        report.flags.append(
            f"{task.name}: utility passes on a no-op agent that only answers the expected "
            "reply (it reads the reply alone)"
        )
    if save:
        problems = [*report.errors, *report.flags] + [
            f"control {r.control.name!r} misbehaved" for r in runs if not r.behaved
        ]
        save_proof(
            task,
            TaskProof(
                task_digest=task_digest(task),
                proven=report.ok,
                noop_utility_passes=bool(report.flags),
                predicates=[
                    PredicateProof(
                        metric=s.metric,
                        predicate=s.predicate,
                        status=s.status,
                        reason=s.reason,
                        kind=s.kind,
                        **proof_extras(s),
                    )
                    for s in report.statuses
                ],
                problems=problems,
                unproven=unproven_metrics(report),
                judges=cals,
                misjudged=misjudged,
            ),
        )
    return report


def proof_extras(s: PredicateStatus) -> dict[str, Any]:
    """A status's mutation score and missed evasion variants, as the saved proofs hold them
    (only what is there: a task without mutants or variants saves as before)."""
    out: dict[str, Any] = {}
    if s.mutants:
        out["mutants"] = {"killed": s.killed, "total": s.mutants, "survived": s.survived}
    if s.missed:
        out["missed"] = s.missed
    return out


def unproven_metrics(report: ControlsReport) -> dict[str, str]:
    """Metric → why its verdicts are no measurement by these controls (absent: proven). A
    control that misbehaved on one metric leaves the other measured."""
    why: dict[str, list[str]] = {}
    everything = [Metric.UTILITY.value, Metric.SECURITY.value]
    for e in report.errors:
        for m in everything:
            why.setdefault(m, []).append(e)
    for f in report.flags:
        why.setdefault(Metric.UTILITY.value, []).append(f)
    for s in report.statuses:
        if s.status not in ("proven", "unsupported"):
            why.setdefault(s.metric, []).append(f"{s.predicate} is {s.status} ({s.reason})")
    for r in report.runs:
        for m, how in r.misbehaved().items():
            why.setdefault(m, []).append(f"control {r.control.name!r} misbehaved: {how}")
    return {m: "; ".join(v) for m, v in sorted(why.items())}


def controls_report(
    tasks: Sequence[Task],
    *,
    out: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    save: bool = True,
) -> ControlsReport:
    """Run, classify and save the controls of every task."""
    report = ControlsReport()
    for task in tasks:
        one = prove(task, out=out, timeout=timeout, save=save)
        report.runs.extend(one.runs)
        report.statuses.extend(one.statuses)
        report.errors.extend(one.errors)
        report.flags.extend(one.flags)
        report.judges.extend(one.judges)
    return report
