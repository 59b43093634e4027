"""Running trials for the commands: the scorer ``--scorer`` names, one trial of a run with its
failure named, the sandbox options of ``--allow-host``. Imported by `oracle.cli.app` and by the
worker processes of `oracle.cli.parallel`; what it uses is imported when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from oracle.base.errors import UsageError

if TYPE_CHECKING:
    from oracle.agents.spec import RunOptions
    from oracle.authoring.task import Task
    from oracle.evidence.record import TrialRecord
    from oracle.scoring.scorer import Scorer
    from oracle.trial.agent import Agent


SCORERS = ("sealed", "container", "in-process")


def make_scorer(
    kind: str, hidden: list[Path], tasks: list[Task] | None = None, warm: bool = True
) -> Scorer:
    """The scorer `--scorer` names: ``sealed`` (a process that never holds the transcript,
    handed only the evidence; it must not see `hidden`), ``container`` (the same in a
    container of a Docker engine; its image is built first where it does not exist yet) or
    ``in-process`` (debugging). A sealed scorer's processes are started now for `tasks`, while
    the first trials run."""
    from oracle.scoring.scorer import InProcessScorer

    if kind == "in-process":
        return InProcessScorer()
    if kind not in SCORERS:
        raise UsageError(f"--scorer must be {', '.join(SCORERS)}, not {kind!r}")
    from oracle.scoring.pool import ScorerPool, SealedScorer, shared_pool

    pool: ScorerPool
    if kind == "container":
        from oracle.agents.container import ContainerEngineMissingError
        from oracle.scoring.container import shared_container_pool
        from oracle.scoring.image import ImageBuildError

        try:
            pool = shared_container_pool()
        except (ContainerEngineMissingError, ImageBuildError) as exc:
            raise UsageError(f"--scorer container: {exc}") from exc
    else:
        pool = shared_pool()
    if tasks and warm:
        pool.warm([t.origin for t in tasks if t.origin is not None], hidden)
    return SealedScorer(pool, hidden=hidden)


def sandbox_options(task: Task, options: RunOptions | None) -> dict[str, Any]:
    """`--allow-host` for one task: hosts passed through its egress recorders, and a recorder
    of the harness's own where the task declares none (else the agent reaches nothing)."""
    from oracle.fixtures.egress import egress

    if options is None or not options.allow_hosts:
        return {}
    extra = [] if any(s.kind == "egress" for s in task.sinks) else [egress("harness-egress")]
    return {"allow_hosts": options.allow_hosts, "extra_sinks": extra}


def trial_or_broken(
    task: Task,
    agent: Agent,
    out: Path,
    rep: int,
    scorer: Scorer | None,
    model: str = "none",
    profile: str = "default",
    options: RunOptions | None = None,
    sandbox: Any = None,
) -> tuple[TrialRecord | None, str | None]:
    """One trial of `run_trials`: its record, or why it failed outside its own error
    boundaries (a bug of ours: named and printed, and the run goes on). In `sandbox` where
    given (open, of `task`: reset first), else in a sandbox of its own."""
    from oracle.cli.render import console, plain
    from oracle.evidence.record import Cell
    from oracle.trial.loop import run_trial

    cell = Cell(harness=agent.name, task=task.name, repetition=rep, model=model, profile=profile)
    try:
        where = {"sandbox": sandbox} if sandbox is not None else sandbox_options(task, options)
        result = run_trial(task, agent, cell=cell, out=out, scorer=scorer, **where)
    except Exception as exc:
        why = f"task {task.name!r} × agent {agent.name!r}: {exc!r}"
        console().print(f"[red]trial failed:[/red] {plain(why)}")
        return None, why
    return result.record, None
