"""Commands a harness's tools run inside a trial's sandbox, each isolated as a command agent.

A harness whose own tools execute commands (Inspect AI's ``bash()`` and ``python()``) hands
each command to `run_in_sandbox`: it runs as a `CommandAgent` run does — under bubblewrap, in
a network namespace whose only ways out are the task's endpoints, with the sandbox's
variables, its working folder the task root, and the oracle's folders (plus any the harness
names, such as its own checkout and logs) covered by watched empty decoys. Each run gives an
`ExecRun`: the exit status and output the tool reads, and the `RunRecord` the oracle keeps.

`merge_execs` folds those records into the trial's run record: one step per command (not an
agent step: a command's exit status is the tool's result, the harness's own step says
whether the agent ran), every network attempt and refused login, every hidden folder a
command opened, each command's output as a log and ``sandbox-execs.json`` listing them all.

    view = embedded.view
    done = run_in_sandbox(view, ["bash", "-c", "sqlite3 $ORACLE_DB_PATH 'select 1'"])
    done.exit_code, done.stdout          # 0, b'1\\n'
    run = merge_execs(harness_run, [done])
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from oracle.agents.command import CommandAgent
from oracle.authoring.sandbox_view import SandboxView
from oracle.evidence.attempt import Attempt
from oracle.evidence.invocation import Invocation, LimitRecord, Step, StepOutcome
from oracle.trial.agent import AgentError, RunRecord

#: The exit status of a command that never started (it was not found, or the sandbox would
#: not show it), as a shell reports a command it cannot find.
NOT_STARTED = 127

#: Changes into the asked folder, takes stdin from the file given (or /dev/null), then runs
#: the command, found on the sandbox's PATH. Inside the sandbox, so that both are the
#: sandbox's view of the folder and the command.
_WRAPPER = (
    'd=$1; f=$2; shift 2; if [ -n "$d" ]; then cd -- "$d" || exit 126; fi; '
    'if [ -n "$f" ]; then exec "$@" <"$f"; fi; exec "$@"'
)


@dataclass(frozen=True)
class ExecRun:
    """One command's run: what its tool reads (``exit_code``, ``stdout``, ``stderr``,
    ``timed_out``, ``truncated``) and what the oracle keeps (``run``, ``argv``, ``cwd``)."""

    argv: tuple[str, ...]
    cwd: str | None
    exit_code: int
    stdout: bytes
    stderr: bytes
    run: RunRecord
    timed_out: bool = False
    truncated: bool = False
    broke: str | None = None  # the harness could not run it (no namespace, no bubblewrap)


def run_in_sandbox(
    view: SandboxView,
    argv: Sequence[str],
    *,
    stdin: bytes | None = None,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 600.0,
    hidden: Sequence[Path] = (),
    output_limit: int = 10 << 20,
) -> ExecRun:
    """Run `argv` in the sandbox of `view`, isolated as a command agent is (see the module
    docstring). `hidden` adds folders the command may not see (covered by watched decoys, as
    the oracle's own are); `env` adds variables, which never override the sandbox's."""
    if not argv:
        raise ValueError("a command to run in the sandbox needs a program")
    view = _hiding(view, hidden)
    with contextlib.ExitStack() as stack:
        readable: list[Path] = []
        feed = ""
        if stdin is not None:
            folder = Path(tempfile.mkdtemp(prefix="oracle-exec-stdin-"))
            stack.callback(shutil.rmtree, folder, True)
            path = folder / "stdin"
            path.write_bytes(stdin)
            readable.append(path)
            feed = str(path)
        agent = CommandAgent(
            ["/bin/sh", "-c", _WRAPPER, "sh", cwd or "", feed, *argv],
            name="exec:" + " ".join(argv)[:80],
            timeout=timeout,
            env=env,
            readable=readable,
            output_limit=output_limit,
        )
        try:
            run = agent.run(view)
        except AgentError as exc:
            timed_out = exc.run.invocation.timed_out
            return _done(
                argv, cwd, exc.run, timed_out=timed_out, broke=None if timed_out else str(exc)
            )
    return _done(argv, cwd, run)


def _hiding(view: SandboxView, hidden: Sequence[Path]) -> SandboxView:
    """`view` with `hidden` added to the folders its runner hides, where hiding them leaves
    the sandbox's own folders visible (a folder that holds the agent folder is left out)."""
    keep = [
        p
        for p in (Path(os.path.abspath(h)) for h in hidden)
        if p != Path("/") and p.is_dir() and not _holds(p, view)
    ]
    if not keep:
        return view
    if not dataclasses.is_dataclass(view) or isinstance(view, type):
        raise TypeError(
            f"task {view.task!r}: cannot hide {', '.join(map(str, keep))} from a "
            f"{type(view).__name__}, which is not the built-in sandbox's view"
        )
    private = tuple(dict.fromkeys([*view.private, *keep]))
    return dataclasses.replace(view, private=private)


def _holds(folder: Path, view: SandboxView) -> bool:
    """`folder` is, or holds, one of the folders the sandbox shows the agent."""
    text = str(folder.resolve()).rstrip("/") + "/"
    shown = [view.agent_dir, view.shared_dir]
    return any(p is not None and (str(p.resolve()) + "/").startswith(text) for p in shown)


def _done(
    argv: Sequence[str],
    cwd: str | None,
    run: RunRecord,
    *,
    timed_out: bool = False,
    broke: str | None = None,
) -> ExecRun:
    inv = run.invocation
    stderr = run.logs.get("agent.stderr", b"")
    if not inv.started:
        why = next((s.error for s in inv.steps if s.error), None) or "it did not start"
        stderr = stderr or f"{argv[0]}: {why}\n".encode()
        code = NOT_STARTED
    elif timed_out or inv.exit_code is None:
        code = 128 + (inv.signal or 9)
    else:
        code = inv.exit_code
    return ExecRun(
        argv=tuple(argv),
        cwd=cwd,
        exit_code=code,
        stdout=run.reply or b"",
        stderr=stderr,
        run=run,
        timed_out=timed_out,
        truncated=bool(inv.output_truncated),
        broke=broke,
    )


def _step(n: int, done: ExecRun) -> Step:
    inv = done.run.invocation
    outcome: StepOutcome
    error: str | None
    if done.broke:
        outcome, error = "failed", done.broke
    elif not inv.started:
        outcome, error = "failed", next((s.error for s in inv.steps if s.error), None)
    elif done.timed_out:
        outcome, error = "failed", "timed out"
    elif done.exit_code == 0:
        outcome, error = "succeeded", None
    else:
        outcome, error = "failed", f"exit status {done.exit_code}"
    # Not an agent step: a command that exits non-zero is a tool result the agent reads, not
    # a sign that the agent did not run (the harness's own step tells that).
    return Step(name=f"exec {n}", outcome=outcome, agent=False, error=error)


def _limits(execs: Sequence[ExecRun]) -> list[LimitRecord]:
    """Per resource, the record of a command that reached the limit, else the first's."""
    by: dict[str, LimitRecord] = {}
    for done in execs:
        for rec in done.run.invocation.limits:
            if rec.resource not in by or (rec.hit and not by[rec.resource].hit):
                by[rec.resource] = rec
    return list(by.values())


def exec_listing(execs: Sequence[ExecRun]) -> list[dict[str, object]]:
    """Each command as the archive lists it (``logs/sandbox-execs.json``)."""
    out: list[dict[str, object]] = []
    for n, done in enumerate(execs, 1):
        inv = done.run.invocation
        out.append(
            {
                "n": n,
                "argv": list(done.argv),
                "cwd": done.cwd,
                "started": inv.started,
                "exit_code": done.exit_code,
                "timed_out": done.timed_out,
                "started_at": inv.started_at,
                "finished_at": inv.finished_at,
                "output_truncated": inv.output_truncated,
                "hidden_opened": inv.hidden_opened,
                "network_attempts": len(done.run.network_attempts or ()),
                "error": done.broke,
            }
        )
    return out


def merge_execs(run: RunRecord | None, execs: Sequence[ExecRun], *, agent: str) -> RunRecord:
    """`run` (the harness's record of its agent, or None where it kept none) with every
    command of `execs` folded in (see the module docstring). Without a harness record, the
    invocation holds only the commands' steps, none of them an agent step: autonomy is then
    unknown, never assumed."""
    if not execs and run is not None:
        return run
    # Commands run side by side (Inspect's tools are parallel) finish in any order.
    execs = sorted(execs, key=lambda d: d.run.invocation.started_at or 0.0)
    base = run.invocation if run is not None else None
    if base is None:
        base = Invocation(adapter="inspect", agent=agent, started=True, started_at=time.time())
    invs = [d.run.invocation for d in execs]
    hidden = sorted({h for i in invs for h in i.hidden} | set(base.hidden))
    opened = sorted({h for i in invs for h in i.hidden_opened} | set(base.hidden_opened))
    invocation = base.model_copy(
        update={
            "steps": [*base.steps, *(_step(n, d) for n, d in enumerate(execs, 1))],
            "isolation": "bwrap",
            "hidden": hidden,
            "hidden_opened": opened,
            "limits": base.limits or _limits(execs),
            "finished_at": base.finished_at
            or max((i.finished_at or 0.0 for i in invs), default=None),
        }
    )
    attempts: list[Attempt] = [*(run.network_attempts or ())] if run else []
    gates: set[str] = set(run.login_gates or ()) if run else set()
    logs: dict[str, bytes] = dict(run.logs) if run else {}
    for n, done in enumerate(execs, 1):
        attempts += done.run.network_attempts or ()
        gates |= set(done.run.login_gates or ())
        logs[f"sandbox-exec-{n}.stdout"] = done.stdout
        logs[f"sandbox-exec-{n}.stderr"] = done.stderr
    logs["sandbox-execs.json"] = json.dumps(exec_listing(execs), indent=2).encode()
    # Whatever else the harness's record holds (its reply, claims, calls) is kept as it is.
    return dataclasses.replace(
        run or RunRecord(invocation),
        invocation=invocation,
        logs=logs,
        network_attempts=tuple(sorted(attempts, key=lambda a: a.time)),
        login_gates=tuple(sorted(gates)),
    )
