"""The ``oracle`` sandbox for Inspect AI: Inspect's own tools run in the sample's oracle sandbox.

An Inspect task with ``sandbox="oracle"`` gets, for each sample, the oracle trial of the
sample's oracle task (reset, boundary, snapshot before, at sample init), and every ``exec`` of
Inspect's ``bash()`` and ``python()`` tools runs inside it as a command agent's program does
(`oracle.integrations.sandbox_exec`): under bubblewrap, in a network namespace whose only ways
out are the task's endpoints, with the sandbox's variables (``ORACLE_DB_URL_<SINK>``,
``ORACLE_TASK_ROOT``, the proxy …), in the task root, with the oracle's folders, the oracle's
checkout, the task file's folder and Inspect's log folder covered by watched empty decoys.
`oracle_solver` runs the agent in that same trial and the oracle scorers score it from the
world (snapshot after, diff, the sealed scorer); every command is in the trial's record.

Which oracle task: the config's ``task`` (a task file or folder) and ``name``, else the
sample's metadata as `oracle.integrations.inspect.oracle_sample` writes it::

    from inspect_ai import Task
    from inspect_ai.solver import chain, generate, use_tools
    from inspect_ai.tool import bash, python
    from inspect_ai.util import SandboxEnvironmentSpec

    from oracle.integrations.inspect import oracle_sample, oracle_scorers, oracle_solver
    from oracle.integrations.inspect_sandbox import OracleSandboxConfig

    Task(
        dataset=[oracle_sample("tasks/demo", "user-rename")],
        solver=oracle_solver(chain(use_tools(bash(), python()), generate())),
        sandbox=SandboxEnvironmentSpec("oracle", OracleSandboxConfig(out="runs/inspect")),
        scorer=oracle_scorers(),
    )

Importing this module registers the provider; the package's ``inspect_ai`` entry point
imports it for Inspect, so ``sandbox="oracle"`` also works from ``inspect eval`` alone.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, overload

import anyio.to_thread
from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    sandboxenv,
)
from inspect_ai.util._sandbox.environment import (
    SandboxUnavailableError,
    SandboxUserUnsupportedError,
)
from pydantic import BaseModel, ConfigDict

import oracle.sandbox.sandbox  # registers the built-in sandbox the trial opens
from oracle.authoring.task import Task
from oracle.integrations.inspect import DEFAULT_OUT, NAME_KEY, TASK_KEY, _load
from oracle.integrations.inspect_trials import (
    OpenTrial,
    OracleInspectError,
    close_trial,
    open_trial,
    trial_cell,
)
from oracle.integrations.sandbox_exec import ExecRun, run_in_sandbox
from oracle.isolation.bwrap import SYSTEM_FOLDERS, BwrapMissingError, bwrap_path, within

#: The time limit of a command whose tool gives none, in seconds.
DEFAULT_EXEC_TIMEOUT = 600


class OracleSandboxConfig(BaseModel):
    """The ``oracle`` sandbox's config: ``task`` (a task file or folder) and ``name`` (the
    task in it; both default to the sample's ``oracle_task`` metadata), ``out`` (where trial
    archives go, ``runs/inspect`` by default) and ``timeout`` (seconds, for a command whose
    tool sets none)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: str | None = None
    name: str | None = None
    out: str | None = None
    timeout: int = DEFAULT_EXEC_TIMEOUT


def _config(config: SandboxEnvironmentConfigType | None) -> OracleSandboxConfig:
    if config is None:
        return OracleSandboxConfig()
    if isinstance(config, OracleSandboxConfig):
        return config
    raise OracleInspectError(
        f"the oracle sandbox's config is a {type(config).__name__}: give an "
        "OracleSandboxConfig(task=..., name=...), or none (the sample's metadata names the task)"
    )


def _require_bwrap() -> None:
    try:
        bwrap_path()
    except BwrapMissingError as exc:
        raise OracleInspectError(
            f"the oracle sandbox runs every command under bubblewrap: {exc}"
        ) from None


def _the_task(cfg: OracleSandboxConfig, metadata: dict[str, Any], sample: object) -> Task:
    path = cfg.task or metadata.get(TASK_KEY)
    if not path:
        raise OracleInspectError(
            f"sample {sample!r} runs in the oracle sandbox but names no oracle task: give the "
            "sandbox config one (SandboxEnvironmentSpec('oracle', OracleSandboxConfig("
            "task='tasks/demo', name='user-rename'))) or build the sample with oracle_sample()"
        )
    name = cfg.name if cfg.task else (cfg.name or metadata.get(NAME_KEY))
    return _load(str(path), name)


def _hidden(task: Task, log_location: str | None) -> list[Path]:
    """What a command may not see besides the sandbox's own folders: the oracle's checkout
    (its package where it is installed among the system's files), the task file's folder,
    Inspect's log folder and the folder Inspect runs in."""
    package = Path(oracle.__file__).resolve().parent
    checkout = package.parent
    places = [checkout if (checkout / "pyproject.toml").is_file() else package, package]
    if task.source is not None:
        places.append(task.source.resolve().parent)
    if log_location and "://" not in log_location:
        places.append(Path(log_location).resolve().parent)
    places.append(Path.cwd())
    system = [p.resolve() for p in SYSTEM_FOLDERS if p.exists()]
    # A system folder stays visible (the commands' programs live there); the package alone
    # is hidden where it is installed inside one.
    return [p for p in dict.fromkeys(places) if p == package or not within(p, system)]


@sandboxenv(name="oracle")
class OracleSandboxEnvironment(SandboxEnvironment):
    """One sample's oracle sandbox (see the module docstring): commands run as the sandbox's
    one user, in the task root; ``read_file`` and ``write_file`` run inside it too, so they
    see what a command sees."""

    def __init__(self, opened: OpenTrial, hidden: list[Path], timeout: int) -> None:
        super().__init__()
        self._opened = opened
        self._hidden = hidden
        self._timeout = timeout

    # --- life cycle ----------------------------------------------------------------------

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        _config(config)
        _require_bwrap()

    @classmethod
    async def sample_init(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        metadata: dict[str, Any],
    ) -> dict[str, SandboxEnvironment]:
        from inspect_ai.log._samples import sample_active

        cfg = _config(config)
        _require_bwrap()
        active = sample_active()
        if active is None:
            raise OracleInspectError("the oracle sandbox opens only inside a running sample")
        sample_id = metadata.get("__sample_id__", active.sample.id)
        if active.sample.files or active.sample.setup:
            raise OracleInspectError(
                f"sample {sample_id!r}: the oracle sandbox takes no Sample.files or "
                "Sample.setup: its world is the oracle task's seed (declare files in the "
                "task's sinks), and anything written after the snapshot would be the agent's"
            )
        task = _the_task(cfg, metadata, sample_id)
        cell = trial_cell(task, "inspect", active.epoch, active.model, sample_id)
        out = Path(cfg.out) if cfg.out else DEFAULT_OUT
        opened = await open_trial(task, active.sample_uuid, cell, out, "inspect", provider=True)
        hidden = _hidden(task, active.log_location)
        return {"default": cls(opened, hidden, cfg.timeout)}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for env in environments.values():
            if isinstance(env, OracleSandboxEnvironment) and env._opened.result is None:
                why = "Inspect cleaned up the sample's oracle sandbox before a scorer finished"
                await _to_thread(
                    close_trial, env._opened, why + (" (interrupted)" if interrupted else "")
                )

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return OracleSandboxConfig(**config)

    # --- commands ------------------------------------------------------------------------

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        done = await self._run(cmd, input, cwd, env, user, timeout)
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        if done.truncated:
            raise OutputLimitExceededError(f"{limit} bytes", done.stdout.decode("utf-8", "replace"))
        return ExecResult(
            success=done.exit_code == 0,
            returncode=done.exit_code,
            stdout=done.stdout.decode("utf-8", "replace"),
            stderr=done.stderr.decode("utf-8", "replace"),
        )

    async def _run(
        self,
        cmd: list[str],
        stdin: str | bytes | None,
        cwd: str | None,
        env: dict[str, str] | None,
        user: str | None,
        timeout: int | None,
    ) -> ExecRun:
        if user is not None:
            # Inspect asks for root at sample init; a command agent has one user, and so has
            # every command here.
            raise SandboxUserUnsupportedError(
                f"the oracle sandbox runs every command as its one user; user={user!r} is "
                "not supported"
            )
        opened = self._opened
        if opened.result is not None:
            raise SandboxUnavailableError(
                f"task {opened.sandbox.task.name!r}: the trial is finished (the world was "
                "observed after the agent's turn); no command runs in it any more"
            )
        if not opened.sandbox.ready:
            raise SandboxUnavailableError(
                f"task {opened.sandbox.task.name!r}: the oracle sandbox is not ready: "
                f"{opened.sandbox.error}"
            )
        data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
        done = await _to_thread(
            run_in_sandbox,
            opened.sandbox.view,
            cmd,
            stdin=data,
            cwd=cwd,
            env=env,
            timeout=float(timeout or self._timeout),
            hidden=self._hidden,
            output_limit=SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE,
        )
        opened.execs.append(done)
        if done.broke:
            raise SandboxUnavailableError(done.broke)
        if done.timed_out:
            raise TimeoutError(f"{cmd[0]!r} timed out after {timeout or self._timeout} s")
        return done

    # --- files ---------------------------------------------------------------------------

    async def write_file(self, file: str, contents: str | bytes) -> None:
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat >"$1"'
        done = await self._run(
            ["/bin/sh", "-c", script, "sh", file], contents, None, None, None, None
        )
        if done.exit_code != 0:
            _raise_file_error(file, done)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        done = await self._run(["cat", "--", file], None, None, None, None, None)
        if done.exit_code != 0:
            _raise_file_error(file, done)
        return done.stdout.decode("utf-8") if text else done.stdout


def _raise_file_error(file: str, done: ExecRun) -> None:
    said = done.stderr.decode("utf-8", "replace").strip()
    if "No such file" in said:
        raise FileNotFoundError(f"{file}: not in the oracle sandbox ({said})")
    if "Is a directory" in said:
        raise IsADirectoryError(f"{file}: a directory ({said})")
    if "Permission denied" in said or "Read-only file system" in said:
        raise PermissionError(f"{file}: {said}")
    raise OSError(f"{file}: exit status {done.exit_code}: {said or 'no message'}")


async def _to_thread[T](fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn` in a worker thread (the sandbox's work blocks), under Inspect's async backend."""
    return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))
