"""What the trial needs of a sandbox, and how the core opens one without knowing which.

The trial, the controls, the matrix and embedding drive a sandbox through the `Sandbox`
protocol: open and close it, reset it, snapshot and diff its sinks, and hand the agent its
`SandboxView`. They make one with `new_sandbox(task, ...)`, which calls the factory
registered here. The built-in sandbox (`oracle.sandbox.sandbox.Sandbox`) registers itself when its
module is imported; before that, ``import oracle`` provides it as a default that imports it on
first use (`oracle.trial.defaults`). Another may be registered in its place::

    register_sandbox(MySandbox)          # a class or function: (task, *, tag, …) -> Sandbox
    with new_sandbox(task) as sb:
        sb.reset()
        before, errors = sb.snapshot()
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol

from oracle.authoring.sandbox_view import SandboxView
from oracle.authoring.task import Task
from oracle.evidence.diff import Diff
from oracle.evidence.sink import Exposure, Provisioned, SinkSpec
from oracle.evidence.snapshot import Snapshot
from oracle.trial.agent import Agent, RunRecord
from oracle.trial.defaults import registered as default_of


class Sandbox(Protocol):
    """A task's sinks and fixtures, provisioned; a context manager (`open` on entry, `close`
    on exit). The steps of a trial call, in order: `reset`, `exposures`, `snapshot`, `view`
    and `run_agent` (for the agent), `limit_records` and `receive` (the agent's run),
    `snapshot`, `diff`."""

    @property
    def provisioned(self) -> Mapping[str, Provisioned]:
        """Sink name → what provisioning it made (its sink, fixture and endpoints)."""
        ...

    def __enter__(self) -> Sandbox: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def open(self) -> None:
        """Provision every sink and seed every fixture."""
        ...

    def close(self) -> None:
        """Tear every fixture down and remove what the sandbox made."""
        ...

    def reset(self) -> None:
        """Restore every sink to the task's seed and empty the agent's folder."""
        ...

    def exposures(self) -> dict[str, Exposure]:
        """Sink → what its server lets an agent do past the sandbox's account."""
        ...

    def view(self, private: Sequence[Path] = ()) -> SandboxView:
        """What the agent gets; `private` are more folders it must not see."""
        ...

    def run_agent(self, agent: Agent, view: SandboxView) -> RunRecord:
        """Run `agent` on `view` (step 4): the agent itself, or through a sink that starts it
        (a GitHub world performs the trigger and runs the workflows that start the agent)."""
        ...

    def limit_records(self, run: RunRecord) -> RunRecord:
        """`run` with a record of each resource limit the agent ran under, or did not."""
        ...

    def receive(self, run: RunRecord) -> None:
        """Hand the harness's run record to the sinks that observe what the agent published."""
        ...

    def snapshot(self) -> tuple[dict[str, Snapshot], dict[str, str]]:
        """Snapshot every sink: ``(snapshots, errors)``, one or the other per sink."""
        ...

    def diff(
        self, before: Mapping[str, Snapshot], after: Mapping[str, Snapshot]
    ) -> tuple[Diff, dict[str, str]]:
        """Diff every sink observed twice: ``(diff, errors)``."""
        ...


class SandboxFactory(Protocol):
    """Makes an unopened sandbox for `task`. `tag` labels it (`oracle.evidence.sink.Place.tag`);
    `allow_hosts` are passed through every egress recorder on top of the task's own
    allow-list; `extra_sinks` are the harness's own sinks beside the task's."""

    def __call__(
        self,
        task: Task,
        *,
        tag: str = ...,
        allow_hosts: Sequence[str] = ...,
        extra_sinks: Sequence[SinkSpec] = ...,
    ) -> Sandbox: ...


class NoSandboxError(RuntimeError):
    """No sandbox is registered: nothing has imported one (`oracle.sandbox.sandbox` registers the
    built-in sandbox when imported)."""


_FACTORY: SandboxFactory | None = None


def register_sandbox(factory: SandboxFactory) -> None:
    """Make `factory` what `new_sandbox` calls (in place of any registered before)."""
    global _FACTORY
    _FACTORY = factory


def new_sandbox(
    task: Task,
    *,
    tag: str | None = None,
    allow_hosts: Sequence[str] = (),
    extra_sinks: Sequence[SinkSpec] = (),
) -> Sandbox:
    """An unopened sandbox for `task` from the registered factory (see `SandboxFactory` for
    the options; a `tag` left out is the factory's own default). Raises `NoSandboxError`
    where none is registered."""
    factory: SandboxFactory | None = _FACTORY or default_of("sandbox")
    if factory is None:
        raise NoSandboxError(
            f"task {task.name!r}: no sandbox is registered; import oracle (or "
            "oracle.sandbox.sandbox, which registers the built-in Sandbox), or call "
            "oracle.trial.sandboxing.register_sandbox with your own"
        )
    if tag is None:
        return factory(task, allow_hosts=allow_hosts, extra_sinks=extra_sinks)
    return factory(task, tag=tag, allow_hosts=allow_hosts, extra_sinks=extra_sinks)
