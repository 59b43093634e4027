"""Warm scorer processes, shared by the trials of a run, and the sealed scorer that uses them.

A `ScorerPool` keeps one zygote per layout (which folders its scorers must not see, which they
need bound back) and one scorer per task file, so a task's second trial costs a message, not
a new interpreter. `shared_pool()` is the pool every trial uses unless it is handed another;
it is closed when the interpreter exits.

Example::

    with ScorerPool() as pool:
        scorer = SealedScorer(pool, hidden=[Path("runs")])
        scored = scorer.score(task, TrialEvidence.from_archive(files), refusals(task))
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Literal

from oracle.evidence.record import ScoringRecord
from oracle.scoring import preload
from oracle.scoring.judge import assemble, plan
from oracle.scoring.scorer import InProcessScorer, Outcomes, Scored, TrialEvidence, unreadable
from oracle.scoring.sealed import (
    ScorerError,
    TaskScorer,
    Zygote,
    base_binds,
    bubblewrap_usable,
    loaded_digest,
)

if TYPE_CHECKING:
    from oracle.authoring.task import Task


#: How many zygotes (each an interpreter with oracle imported) and scorers a pool keeps
#: warm; the least recently used idle ones are ended beyond that.
MAX_ZYGOTES = 3
MAX_SCORERS = 12


class ScorerPool:
    """Zygotes and warm scorers; a context manager that ends them all on exit.

    `bubblewrap`: contain the scorers with bubblewrap (None: where it is installed and
    works). Without it a scorer is still a separate process handed only the evidence, but it
    can see the host's files and network; each record's scoring note says so. At most
    `MAX_ZYGOTES` zygotes and `MAX_SCORERS` scorers stay warm: a long process that runs trials
    under many layouts (a test suite, one archive folder per test) does not pile them up."""

    #: What the records of its trials name as their scoring mode.
    mode: Literal["sealed", "container"] = "sealed"

    def __init__(self, *, bubblewrap: bool | None = None) -> None:
        why = "switched off" if bubblewrap is False else bubblewrap_usable()
        self.bubblewrap = why is None
        self.note = "" if why is None else f"the scorer process is not contained: {why}"
        self._zygotes: list[tuple[tuple[Path, ...], Zygote]] = []
        self._scorers: dict[tuple[int, Path], TaskScorer] = {}
        self._lock = threading.Lock()
        self._closed = False
        #: The task files handed to `warm`: a new zygote imports what they use.
        self._warmed: dict[Path, None] = {}

    def __enter__(self) -> ScorerPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _start(
        self, readable: Sequence[Path], hidden: tuple[Path, ...], preloaded: Sequence[str]
    ) -> Zygote:
        zygote = Zygote(readable, hidden, bubblewrap=self.bubblewrap, preloaded=preloaded)
        try:
            zygote.start()
        except ScorerError as exc:
            if not self.bubblewrap:
                raise
            # bubblewrap is installed but cannot run here (no user namespaces): still a
            # separate process, and every record says it was not contained.
            self.bubblewrap = False
            self.note = f"the scorer process is not contained: bubblewrap failed ({exc})"
            zygote = Zygote(readable, hidden, bubblewrap=False, preloaded=preloaded)
            zygote.start()
        return zygote

    def _zygote(self, task_file: Path, hidden: tuple[Path, ...]) -> Zygote:
        readable: list[Path] | None = None
        layout: tuple[str, ...] | None = None
        for key, z in list(self._zygotes):
            if not z.alive:
                self._forget(z)
                continue
            if not z.sees(task_file):
                continue
            if key != hidden:
                # Started for other hidden folders: it serves where it runs its scorers in the
                # very sandbox a new zygote would get (each test's archive folder inside the
                # temporary folder, say, which is hidden as a whole).
                if not self.bubblewrap:
                    continue
                if readable is None:
                    readable = self._readable(task_file, hidden)
                    layout = Zygote(readable, hidden, bubblewrap=True).layout()
                if layout is None or z.layout() != layout:
                    continue
            self._zygotes.remove((key, z))
            self._zygotes.append((key, z))  # the most recently used last
            return z
        # None of them sees the task's folder: a new zygote, with it bound back if need be.
        self._evict_zygotes(MAX_ZYGOTES - 1)
        # It imports what this task file and those warmed with it use (oracle.scoring.preload).
        preloaded = preload.modules([task_file, *self._warmed])
        if readable is None:
            readable = self._readable(task_file, hidden)
        zygote = self._start(readable, hidden, preloaded)
        self._zygotes.append((hidden, zygote))
        return zygote

    def _readable(self, task_file: Path, hidden: tuple[Path, ...]) -> list[Path]:
        """What a new zygote for `task_file` binds back read-only: its folder, or where that
        folder is itself one the scorer must not see (a task file written straight into the
        temporary folder), the file alone."""
        readable = base_binds()
        for extra in (task_file.parent, task_file):
            if Zygote(readable, hidden, bubblewrap=self.bubblewrap).sees(task_file):
                break
            readable = [*base_binds(), extra]
        return readable

    def _forget(self, zygote: Zygote) -> None:
        self._zygotes = [(k, z) for k, z in self._zygotes if z is not zygote]
        for key in [k for k, s in self._scorers.items() if s.zygote is zygote]:
            del self._scorers[key]
        zygote.close()

    def _idle(self, scorers: list[TaskScorer]) -> list[TaskScorer] | None:
        """`scorers` locked, if none of them is judging a trial; else None (nothing held)."""
        held: list[TaskScorer] = []
        for s in scorers:
            if not s.lock.acquire(blocking=False):
                for h in held:
                    h.lock.release()
                return None
            held.append(s)
        return held

    def _evict_zygotes(self, keep: int) -> None:
        """End the least recently used idle zygotes (and their scorers) beyond `keep`."""
        for _, z in list(self._zygotes):
            if len(self._zygotes) <= keep:
                return
            mine = [s for s in self._scorers.values() if s.zygote is z]
            held = self._idle(mine)
            if held is None:
                continue
            try:
                for s in held:
                    s.close()
            finally:
                for s in held:
                    s.lock.release()
            self._forget(z)

    def _evict_scorers(self, keep: int) -> None:
        """End the least recently used idle scorers beyond `keep` (their zygotes stay)."""
        for key, s in list(self._scorers.items()):
            if len(self._scorers) <= keep:
                return
            if s.lock.acquire(blocking=False):
                try:
                    s.close()
                finally:
                    s.lock.release()
                del self._scorers[key]

    def task_scorer(self, task_file: Path, hidden: Iterable[Path] = ()) -> TaskScorer:
        """The warm scorer of `task_file` for trials whose `hidden` folders it must not see.
        Raises `ScorerError` where no scorer process can be started."""
        key = tuple(sorted({Path(h).absolute() for h in hidden}))
        task_file = task_file.absolute()
        with self._lock:
            if self._closed:  # a warming thread still going as the run ends starts nothing
                raise ScorerError("the scorer pool was closed: the run is over")
            zygote = self._zygote(task_file, key)
            scorer = self._scorers.pop((id(zygote), task_file), None)
            if scorer is None:
                self._evict_scorers(MAX_SCORERS - 1)
                scorer = TaskScorer(zygote, task_file)
            self._scorers[(id(zygote), task_file)] = scorer  # the most recently used last
        return scorer

    def warm(self, task_files: Iterable[Path], hidden: Iterable[Path] = ()) -> threading.Thread:
        """Start the scorers of `task_files` in the background, so that the first trial of
        each does not wait for them. Failures are left for the trial to meet and record."""
        files = list(dict.fromkeys(Path(f).absolute() for f in task_files))
        hidden = list(hidden)
        with self._lock:
            self._warmed.update(dict.fromkeys(files))

        def run() -> None:
            for f in files:
                try:
                    self.task_scorer(f, hidden).warm()
                except ScorerError:
                    return

        thread = threading.Thread(target=run, daemon=True, name="oracle-scorer-warm")
        thread.start()
        return thread

    def close(self) -> None:
        with self._lock:
            self._closed = True
            scorers, self._scorers = list(self._scorers.values()), {}
            zygotes, self._zygotes = [z for _, z in self._zygotes], []
        for s in scorers:
            with s.lock:
                s.close()
        for z in zygotes:
            z.close()


_SHARED: ScorerPool | None = None
_SHARED_LOCK = threading.Lock()


def shared_pool() -> ScorerPool:
    """The pool trials use unless handed another; started on first use, ended at exit."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = ScorerPool()
            atexit.register(_SHARED.close)
        return _SHARED


class SealedScorer:
    """Predicates in a sealed process (the default scorer). `hidden` lists folders the
    scorer must not see besides every temporary folder (archive folders, signing keys).

    A task built in code rather than loaded from a task file cannot be loaded by a scorer
    process; it is scored in this process, and the record says so."""

    def __init__(self, pool: ScorerPool | None = None, *, hidden: Sequence[Path] = ()) -> None:
        self.pool = pool if pool is not None else shared_pool()
        self.hidden = tuple(hidden)

    def score(self, task: Task, evidence: TrialEvidence, refused: Mapping[str, str]) -> Scored:
        origin = getattr(task, "origin", None)
        if origin is None:
            why = (
                f"task {task.name!r} was built in code, not loaded from a task file: "
                "scored in this process (load it with oracle.load_tasks to seal its scoring)"
            )
            return InProcessScorer(why).score(task, evidence, refused)
        plans = plan(task)
        for attempt in (1, 2):
            try:
                scorer = self.pool.task_scorer(Path(origin), self.hidden)
            except ScorerError as exc:
                why = f"no scorer process: {exc}"
                record = ScoringRecord(mode=self.pool.mode, isolation="none", note=why)
                return Scored(unreadable(task, why, refused), record)
            with scorer.lock:
                # A zygote the pool ended between the lookup and the lock: look up again.
                if scorer.zygote.alive or attempt == 2:
                    done = scorer.judge(task, evidence.bundle, plans, refused, loaded_digest(task))
                    break
        outcomes: Outcomes = {mp.metric: assemble(mp, done, refused) for mp in plans}
        record = ScoringRecord(
            mode=self.pool.mode,
            isolation=scorer.zygote.isolation,
            image=scorer.zygote.image,
            note=self.pool.note,
            contained=[r.contained for r in done if r.contained],
        )
        return Scored(outcomes, record)
