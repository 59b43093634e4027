"""Running a matrix: every cell in its own fresh sandbox, serially, side by side, or on Ray.

Where the work happens:

- a *worker* (this process, a local worker process, or a Ray worker) runs one cell: it opens a
  fresh `Sandbox` (a private folder holding the cell's databases and task roots, nothing shared
  with another cell), runs the trial and packs the cell archive, returning its bytes;
- the *driver* (this process) checks what each worker returns with the reader's own rules
  (`oracle.matrix.cell_intake`) and only then signs it and writes it atomically under
  ``OUT/cells/``; an archive that breaks a rule is not signed, and its cell is recorded as an
  invalid execution naming the rule. The private key never leaves the driver, and a Ray
  cluster needs no shared folder.

Each run has an id (`oracle.matrix.run_id`), made once per output folder and named in every
statement the run signs.

The driver also runs each task's controls once and writes ``OUT/controls/`` (first when
serial; on a thread of its own while workers run cells). An interrupted run resumes: an
archive whose envelope verifies and whose cell, settings, task digest and run id still match
is kept; a half-written one (a temporary file, an archive without its envelope, one that
fails a rule) is removed and its cell runs again.

Example::

    summary = run_matrix(load_matrix(Path("matrices/demo.toml")), Path("runs/m"), key, jobs=2)
"""

from __future__ import annotations

import concurrent.futures as cf
import errno
import functools
import hashlib
import logging
import multiprocessing
import multiprocessing.util
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from oracle.authoring.loader import load_tasks
from oracle.authoring.sandbox_view import SandboxView
from oracle.authoring.task import Task
from oracle.authoring.versions import task_digest
from oracle.base.errors import UsageError
from oracle.base.interrupts import StopOnce, stop_pool
from oracle.base.lifeline import tie_to_driver
from oracle.base.signing import SIGNATURE_SUFFIX, default_key_folder, signature_path
from oracle.evidence.archive import private_folders
from oracle.evidence.record import Cell
from oracle.matrix import controls_record
from oracle.matrix.cell_archive import (
    SUFFIX,
    CellMeta,
    PackedCell,
    Rejected,
    archive_name,
    open_cell,
    pack_cell,
    write_cell,
)
from oracle.matrix.cell_intake import REFUSED, accept
from oracle.matrix.run_id import ensure_run, run_id_of
from oracle.matrix.spec import Matrix, MatrixError, parse_matrix
from oracle.scoring.scorer import Scorer
from oracle.trial.agent import Agent, RunRecord, agent_named
from oracle.trial.loop import run_trial
from oracle.trial.sandboxing import Sandbox, new_sandbox

CELLS = "cells"


class DiskFullError(MatrixError):
    """The device of the run folder is full (or over quota): the run stops; running the same
    command again resumes it."""

    def __init__(self, cause: OSError) -> None:
        where = cause.filename or "a file of the run"
        why = (cause.strerror or "no space left on device").lower()
        super().__init__(
            f"cannot write {where}: {why}; free some space there and run the same command "
            "again: finished cells are kept"
        )
        self.path = cause.filename


def disk_full(exc: BaseException) -> OSError | None:
    """The full-disk (or quota) error behind `exc`, following its causes."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in (errno.ENOSPC, errno.EDQUOT):
            return cur
        cur = cur.__cause__ or cur.__context__
    return None


class MatrixAgent:
    """The harness's agent, with the cell's identity and settings in its environment:
    ``ORACLE_HARNESS``, ``ORACLE_MODEL``, ``ORACLE_PROFILE``, ``ORACLE_MODEL_PROVIDER``,
    ``ORACLE_MODEL_VERSION`` and ``ORACLE_SETTING_<KEY>`` (harness, then model, then profile
    settings; later ones win)."""

    def __init__(self, base: Agent, env: dict[str, str], hidden: Sequence[Path] = ()) -> None:
        self.base = base
        self.name: str = base.name
        self.env = env
        self.hidden = tuple(hidden)

    def run(self, view: SandboxView) -> RunRecord:
        # Everything else of the view stays: the agent folder it may write, and the oracle's
        # folders an isolated agent must not see, to which the run's own archives are added.
        private = (*view.private, *(h for h in self.hidden if h not in view.private))
        return self.base.run(view.with_env({**view.env, **self.env}, private=private))


def key_folders(key_path: Path | None) -> list[Path]:
    """The folders that hold signing keys, which no cell's agent may see: that of
    `key_path`, and the default key folder where it exists."""
    folders = [key_path.absolute().parent] if key_path is not None else []
    default = default_key_folder()
    if default.is_dir() and default not in folders:
        folders.append(default)
    return folders


def _setting_env(matrix: Matrix, cell: Cell) -> dict[str, str]:
    meta = matrix.meta(cell)
    env = {
        "ORACLE_HARNESS": cell.harness,
        "ORACLE_MODEL": cell.model,
        "ORACLE_PROFILE": cell.profile,
        "ORACLE_MODEL_PROVIDER": meta.model.provider,
        "ORACLE_MODEL_VERSION": meta.model.version,
    }
    for s in (meta.harness.settings, meta.model.settings, meta.profile.settings):
        for k, v in s.items():
            env[f"ORACLE_SETTING_{k.upper()}"] = str(v).lower() if isinstance(v, bool) else str(v)
    return env


def resolve_agents(matrix: Matrix) -> dict[str, Agent]:
    """Every harness's agent, resolved as the CLI resolves ``--agent``. An unknown name, or a
    module or file that cannot be loaded, is a `MatrixError` naming the matrix file and the
    line of that harness's ``agent`` key."""
    agents: dict[str, Agent] = {}
    for name, harness in matrix.spec.harnesses.items():
        try:
            agents[name] = agent_named(harness.agent)
        except Exception as exc:  # loading an agent's module runs its code: anything may fail
            why = (
                str(exc)
                if isinstance(exc, UsageError)
                else f"agent {harness.agent!r} could not be loaded: {type(exc).__name__}: {exc}"
            )
            where = matrix.where("harnesses", name, "agent")
            raise MatrixError(f"{where}: harnesses.{name}.agent: {why}") from None
    return agents


@dataclass
class WorkerContext:
    """What a worker loads once: the matrix, its tasks by name, its agents by harness."""

    matrix: Matrix
    tasks: dict[str, Task]
    agents: dict[str, Agent] = field(default_factory=dict)
    #: Folders no cell's agent may see: the run's output (its archives), archives beside it,
    #: and the folder of the key that signs them.
    hidden: tuple[Path, ...] = ()
    #: Where the cells' predicates run: a sealed scorer that sees none of `hidden` either.
    scorer: Scorer | None = field(default=None, repr=False)

    @classmethod
    def load(
        cls, matrix_bytes: bytes, matrix_path: str, hidden: Sequence[str] = ()
    ) -> WorkerContext:
        """The matrix, every harness's agent and every task; `MatrixError` names the file and
        line of an agent that cannot be resolved, and the task file that cannot be loaded."""
        matrix = parse_matrix(matrix_bytes, Path(matrix_path))
        agents = resolve_agents(matrix)
        loaded = load_tasks(matrix.task_paths())
        if loaded.errors:
            raise MatrixError("; ".join(str(e) for e in loaded.errors))
        return cls(matrix, {t.name: t for t in loaded.tasks}, agents, tuple(map(Path, hidden)))

    def judge(self) -> Scorer:
        """The sealed scorer of this worker's cells (started on first use, kept warm)."""
        if self.scorer is None:
            from oracle.scoring.pool import SealedScorer

            self.scorer = SealedScorer(hidden=self.hidden)
        return self.scorer

    def agent(self, cell: Cell) -> Agent:
        return MatrixAgent(self.agents[cell.harness], _setting_env(self.matrix, cell), self.hidden)

    def run_cell(self, cell: Cell) -> PackedCell:
        """One cell in a fresh sandbox of its own; the packed, unsigned archive."""
        task = self.tasks[cell.task]
        agent = self.agent(cell)
        # A label of the cell's sandbox (`Place.tag`). Concurrent cells do not rely on it: what
        # fixtures make outside the sandbox folder is named with a random token (databases,
        # accounts, queue names) or bound to a port the system assigns (SMTP server, egress
        # recorder), so no two sandboxes share one.
        tag = "c" + hashlib.sha256(f"{cell.id}|{os.getpid()}".encode()).hexdigest()[:10]
        sandbox = new_sandbox(task, tag=tag)
        try:
            sandbox.open()
        except Exception:
            # records "sandbox could not open"
            result = run_trial(task, agent, cell=cell, scorer=self.judge())
        else:
            try:
                result = run_trial(task, agent, cell=cell, sandbox=sandbox, scorer=self.judge())
            finally:
                _dispose(sandbox)
        return pack_cell(result.files, result.record, self.matrix.meta(cell))


# Closing a sandbox is mostly waiting for the disk (unlinking what the trial wrote); a thread
# does it while the next cell runs. Each sandbox has its own folder, so nothing is shared.
_CLEANER: cf.ThreadPoolExecutor | None = None
_CLOSING: list[cf.Future[None]] = []
_MAX_CLOSING = 8


def _dispose(sandbox: Sandbox) -> None:
    global _CLEANER
    if _CLEANER is None:
        _CLEANER = cf.ThreadPoolExecutor(2, thread_name_prefix="oracle-sandbox-close")
    _CLOSING[:] = [f for f in _CLOSING if not f.done()]
    if len(_CLOSING) >= _MAX_CLOSING:
        cf.wait(_CLOSING, return_when=cf.FIRST_COMPLETED)
    _CLOSING.append(_CLEANER.submit(sandbox.close))


def drain() -> None:
    """Wait until every sandbox handed to the cleaner is closed and removed; stop its threads
    (a process that forks later should not carry idle threads along)."""
    global _CLEANER
    for f in list(_CLOSING):
        f.result()
    _CLOSING.clear()
    if _CLEANER is not None:
        _CLEANER.shutdown(wait=True)
        _CLEANER = None


# One context per worker process, keyed by the matrix digest (Ray reuses its workers).
_CONTEXTS: dict[str, WorkerContext] = {}


def _context(matrix_bytes: bytes, matrix_path: str, hidden: Sequence[str]) -> WorkerContext:
    key = hashlib.sha256(matrix_bytes + "\0".join([matrix_path, *hidden]).encode()).hexdigest()
    if key not in _CONTEXTS:
        _CONTEXTS[key] = WorkerContext.load(matrix_bytes, matrix_path, hidden)
    return _CONTEXTS[key]


def _init_worker(matrix_bytes: bytes, matrix_path: str, hidden: Sequence[str], driver: int) -> None:
    # A worker dies with the fork server it was forked from, which dies with the driver; a
    # SIGINT (a terminal's Ctrl-C, or the driver's when it alone got one) stops its batch, once.
    tie_to_driver(driver)
    StopOnce.install(busy=False)
    _context(matrix_bytes, matrix_path, hidden)
    # Sandboxes still closing when the pool shuts this worker down are finished first.
    multiprocessing.util.Finalize(None, drain, exitpriority=100)


def _worker_run(
    matrix_bytes: bytes, matrix_path: str, hidden: Sequence[str], cell: dict[str, Any]
) -> PackedCell:
    try:
        return _context(matrix_bytes, matrix_path, hidden).run_cell(Cell.model_validate(cell))
    finally:
        drain()


def _worker_run_batch(
    matrix_bytes: bytes, matrix_path: str, hidden: Sequence[str], cells: list[dict[str, Any]]
) -> list[PackedCell]:
    ctx = _context(matrix_bytes, matrix_path, hidden)
    with StopOnce.task():
        return [ctx.run_cell(Cell.model_validate(c)) for c in cells]


def _batches(cells: list[Cell], jobs: int) -> list[list[Cell]]:
    """Batches of up to 16 cells (few round trips keep the driver idle), shrinking towards the
    end (guided self-scheduling) so that no worker is left with a long tail alone.

    >>> cells = [Cell(harness="h", task="t", repetition=r) for r in range(40)]
    >>> [len(b) for b in _batches(cells, 2)]
    [5, 4, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    """
    out: list[list[Cell]] = []
    i = 0
    while i < len(cells):
        size = max(1, min(16, (len(cells) - i) // (jobs * 4)))
        out.append(cells[i : i + size])
        i += size
    return out


# -- resume ---------------------------------------------------------------------------------------


@dataclass
class Plan:
    """Which cells to run, which are done, and what was discarded on the way."""

    todo: list[Cell]
    done: list[Cell]
    discarded: list[str]
    foreign: list[str]


def plan(
    out: Path, cells: Sequence[Cell], ctx: WorkerContext, key: Ed25519PrivateKey, run_id: str
) -> Plan:
    """Decide what a (resumed) run still has to do, removing half-written archives and
    archives of another run."""
    folder = out / CELLS
    discarded: list[str] = []
    foreign: list[str] = []
    for where in (folder, out / controls_record.FOLDER):
        if where.is_dir():
            for p in sorted(where.iterdir()):
                if p.name.startswith(".") and p.name.endswith(".tmp"):
                    p.unlink()
                    discarded.append(f"{p.name}: temporary file of an interrupted write")
    wanted = {archive_name(c): c for c in cells}
    if folder.is_dir():
        for p in sorted(folder.iterdir()):
            base = p.name.removesuffix(SIGNATURE_SUFFIX)
            if base not in wanted and (p.name.endswith(SUFFIX) or base != p.name):
                foreign.append(p.name)
    public = key.public_key()
    digests = {name: task_digest(t) for name, t in ctx.tasks.items()}
    todo: list[Cell] = []
    done: list[Cell] = []
    for name, cell in wanted.items():
        path = folder / name
        sig = signature_path(path)
        if not path.exists():
            if sig.exists():
                sig.unlink()
                discarded.append(f"{sig.name}: an envelope without its archive")
            todo.append(cell)
            continue
        try:
            opened = open_cell(path, public, ctx.matrix.limits)
            why = _stale(opened.meta, opened.record.task_digest, ctx, cell, digests)
            made_in = run_id_of(opened.statement.predicate)
            if why is None and made_in != run_id:
                why = f"made in another run ({made_in or 'no run id'}), not this one ({run_id})"
        except Rejected as exc:
            why = f"{exc.rule}: {exc.detail}"
        if why is None:
            done.append(cell)
            continue
        path.unlink()
        sig.unlink(missing_ok=True)
        discarded.append(f"{name}: {why}")
        todo.append(cell)
    return Plan(todo, done, discarded, foreign)


def _stale(
    meta: CellMeta, digest: str, ctx: WorkerContext, cell: Cell, digests: dict[str, str]
) -> str | None:
    expected = ctx.matrix.meta(cell)
    if meta.model_copy(update={"matrix_digest": ""}) != expected.model_copy(
        update={"matrix_digest": ""}
    ):
        return "made with other harness, model or profile settings"
    if digest != digests[cell.task]:
        return f"made with another version of task {cell.task!r}"
    return None


# -- executors ------------------------------------------------------------------------------------


#: What a worker hands back for the cell the driver asked for: its packed archive, or None
#: when it returned nothing for that cell.
Returned = tuple[Cell, PackedCell | None]
#: ``(context, matrix bytes, cells, jobs, address) -> (cell, packed cell) as they finish``.
Executor = Callable[[WorkerContext, bytes, list[Cell], int, str | None], Iterator[Returned]]


def _serial(
    ctx: WorkerContext,
    matrix_bytes: bytes,
    cells: list[Cell],
    jobs: int,
    address: str | None,
) -> Iterator[Returned]:
    try:
        for cell in cells:
            yield cell, ctx.run_cell(cell)
    finally:
        drain()


# Imported once in the fork server, so that each worker starts with them loaded. The first
# ties the fork server to the driver: it dies when the driver does (see oracle.base.lifeline).
# oracle.agents.spec is what resolving the harnesses' agents loads (the command and demo
# agents); named here only to warm it, as the registered resolver imports it on first use.
_PRELOAD = [
    "oracle.matrix.forkserver",
    "oracle.matrix.run",
    "oracle.agents.spec",
    "oracle.fixtures.sqlite",
    "oracle.fixtures.folder",
    "sqlalchemy.dialects.sqlite",
]


def _local(
    ctx: WorkerContext,
    matrix_bytes: bytes,
    cells: list[Cell],
    jobs: int,
    address: str | None,
) -> Iterator[Returned]:
    # forkserver: workers fork from a clean single-threaded server (the driver has threads),
    # with oracle imported once there; each worker loads the matrix and tasks once.
    mp = multiprocessing.get_context("forkserver")
    mp.set_forkserver_preload(_PRELOAD)
    path = str(ctx.matrix.path)
    hidden = [str(h) for h in ctx.hidden]
    with cf.ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=mp,
        initializer=_init_worker,
        initargs=(matrix_bytes, path, hidden, os.getpid()),
    ) as pool:
        futures = {
            pool.submit(
                _worker_run_batch, matrix_bytes, path, hidden, [c.model_dump() for c in batch]
            ): batch
            for batch in _batches(cells, jobs)
        }
        try:
            for fut in cf.as_completed(futures):
                yield from _paired(futures[fut], fut.result())
        except BaseException:
            stop_pool(pool)
            raise


def _ray(
    ctx: WorkerContext,
    matrix_bytes: bytes,
    cells: list[Cell],
    jobs: int,
    address: str | None,
) -> Iterator[Returned]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError as exc:
        raise MatrixError(
            "--executor ray needs the ray package: pip install 'oracle[ray]'"
        ) from exc
    ray.init(address=address or "auto", log_to_driver=False, logging_level=logging.ERROR)
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_worker_run)
        path = str(ctx.matrix.path)
        hidden = [str(h) for h in ctx.hidden]
        asked = {remote.remote(matrix_bytes, path, hidden, c.model_dump()): c for c in cells}
        pending = list(asked)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield asked[done[0]], ray.get(done[0])
    finally:
        ray.shutdown()


EXECUTORS: dict[str, Executor] = {"local": _local, "ray": _ray}


def _paired(batch: list[Cell], returned: Sequence[PackedCell]) -> Iterator[Returned]:
    """Each cell of a batch with what the worker returned for it, in order; a batch that came
    back with another number of archives pairs no cell with any of them."""
    if len(returned) != len(batch):
        yield from ((c, None) for c in batch)
    else:
        yield from zip(batch, returned, strict=True)


@dataclass
class RunSummary:
    """What a run did: archives written this time, cells kept from before, and problems."""

    out: Path
    cells: int
    written: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    #: Cells whose returned archive broke a reading rule (also in `invalid`): not signed.
    refused: list[str] = field(default_factory=list)
    run_id: str = ""
    discarded: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    controls: dict[str, str] = field(default_factory=dict)


ProgressHook = Callable[[str, int, int], None]


def run_matrix(
    matrix: Matrix,
    out: Path,
    key: Ed25519PrivateKey,
    *,
    jobs: int = 1,
    executor: str = "local",
    address: str | None = None,
    progress: ProgressHook | None = None,
    key_path: Path | None = None,
) -> RunSummary:
    """Run every cell of `matrix` not already finished under `out`; sign and write archives.

    `jobs` > 1 runs cells side by side in local worker processes; ``executor="ray"`` sends them
    to the Ray cluster at `address`. `progress(stage, done, total)` is called as cells finish.
    `key_path` is where `key` was read from: its folder is hidden from every cell's agent, as
    are `out` (see `private_folders`) and the default key folder.

    A full disk under `out` stops the run with `DiskFullError`, naming the file; what was half
    written is discarded when the run resumes.
    """
    try:
        return _run_matrix(
            matrix,
            out,
            key,
            jobs=jobs,
            executor=executor,
            address=address,
            progress=progress,
            key_path=key_path,
        )
    except OSError as exc:
        full = disk_full(exc)
        if full is None:
            raise
        raise DiskFullError(full) from exc


def _run_matrix(
    matrix: Matrix,
    out: Path,
    key: Ed25519PrivateKey,
    *,
    jobs: int,
    executor: str,
    address: str | None,
    progress: ProgressHook | None,
    key_path: Path | None,
) -> RunSummary:
    if executor not in EXECUTORS:
        raise MatrixError(f"unknown executor {executor!r}: use {', '.join(EXECUTORS)}")
    if key_path is not None and key_path.absolute().is_relative_to(out.absolute()):
        raise MatrixError(
            f"the key {key_path} is inside the run folder {out}: keep keys outside every run "
            f"(by default in {default_key_folder()})"
        )
    matrix_bytes = matrix.path.read_bytes()
    hidden = [str(p) for p in (*private_folders(out), *key_folders(key_path))]
    ctx = WorkerContext.load(matrix_bytes, str(matrix.path), hidden)
    cells = matrix.cells(sorted(ctx.tasks))
    out.mkdir(parents=True, exist_ok=True)
    run, replaced = ensure_run(out, key)
    p = plan(out, cells, ctx, key, run.run_id)
    summary = RunSummary(
        out,
        len(cells),
        kept=[c.id for c in p.done],
        run_id=run.run_id,
        discarded=[*([replaced] if replaced else []), *p.discarded],
        foreign=p.foreign,
    )

    def controls() -> None:
        for name in sorted(ctx.tasks):
            summary.controls[name] = _ensure_controls(out, ctx.tasks[name], key, run.run_id)

    # Serially the controls come first. With workers, they run on a driver thread while the
    # workers start and run cells (each control in a sandbox of its own, like every cell).
    if not p.todo or not (executor == "ray" or jobs > 1):
        controls()
        _run_cells(
            ctx, matrix_bytes, p, out, key, summary, len(cells), jobs, executor, address, progress
        )
        return summary
    with cf.ThreadPoolExecutor(1, thread_name_prefix="oracle-controls") as side:
        done_controls = side.submit(controls)
        _run_cells(
            ctx, matrix_bytes, p, out, key, summary, len(cells), jobs, executor, address, progress
        )
        done_controls.result()  # its error, if any, is the run's error
    return summary


def _run_cells(
    ctx: WorkerContext,
    matrix_bytes: bytes,
    p: Plan,
    out: Path,
    key: Ed25519PrivateKey,
    summary: RunSummary,
    total: int,
    jobs: int,
    executor: str,
    address: str | None,
    progress: ProgressHook | None,
) -> None:
    """Run the planned cells; check, sign and write each archive as it arrives."""
    if not p.todo:
        return
    if executor == "ray":
        run: Executor = _ray
    elif jobs > 1 and len(p.todo) > 1:
        run = _local
    else:
        run = _serial
    finished = len(p.done)
    if progress:
        progress("cells", finished, total)

    def written(fut: cf.Future[PackedCell]) -> None:
        nonlocal finished
        packed = fut.result()  # a write that failed raises here
        cell_id, error = packed.predicate["cell_id"], packed.predicate["error"]
        summary.written.append(cell_id)
        if packed.predicate["status"] != "valid":
            summary.invalid.append(f"{cell_id}: {error}")
            if str(error).startswith(REFUSED):
                summary.refused.append(f"{cell_id}: {error}")
        finished += 1
        if progress:
            progress("cells", finished, total)

    # Checking, signing and the fsync-ed writes run on writer threads, so the next trial does
    # not wait for the disk; leaving the block waits for every write (also on Ctrl-C).
    digests = {name: task_digest(t) for name, t in ctx.tasks.items()}
    with cf.ThreadPoolExecutor(WRITERS, thread_name_prefix="oracle-writer") as writers:
        pending: set[cf.Future[PackedCell]] = set()
        for cell, returned in run(ctx, matrix_bytes, p.todo, jobs, address):
            packed = functools.partial(
                accept,
                cell,
                returned,
                ctx.matrix.meta(cell),
                run_id=summary.run_id,
                task_digest=digests[cell.task],
                limits=ctx.matrix.limits,
            )
            pending.add(writers.submit(_write, out / CELLS, packed, key))
            if len(pending) >= 4 * WRITERS:
                done, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                for fut in done:
                    written(fut)
        for fut in cf.as_completed(pending):
            written(fut)


WRITERS = 4


def _write(folder: Path, checked: Callable[[], PackedCell], key: Ed25519PrivateKey) -> PackedCell:
    """Check what a worker returned (`accept`), then sign and write what passed, or the record
    of its refusal."""
    packed = checked()
    write_cell(folder, packed, key)
    return packed


def _ensure_controls(out: Path, task: Task, key: Ed25519PrivateKey, run_id: str) -> str:
    """Run the controls of `task` unless a verified, current result of this run is there."""
    path = out / controls_record.FOLDER / controls_record.file_name(task.name)
    if path.exists():
        try:
            rec, _, made_in = controls_record.read_controls(path, key.public_key())
            if rec.task_digest == task_digest(task) and made_in == run_id:
                return "kept"
        except Rejected:
            pass
        path.unlink()
        signature_path(path).unlink(missing_ok=True)
    controls_record.write_controls(out, controls_record.run_task_controls(task), key, run_id)
    return "ran"
