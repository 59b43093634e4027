"""The sealed scorer: predicates run in a process that never held the transcript.

`Zygote` starts ``python -I -m oracle.scoring.worker`` as a fresh interpreter — under
bubblewrap where it can: no network, the host's files read-only, ``/tmp``, ``/run`` and the
oracle's own folders (archives, signing keys) hidden, every capability dropped, its own PID
namespace. It imports oracle once and forks a `TaskScorer` process per task file, which loads
the task module itself and judges one trial after another from the evidence bundle alone
(`oracle.scoring.bundle`): never the final message, the claims, the logs or the run record.

Each step has its time limit. A predicate that runs past it, exits, crashes its interpreter or
raises `SystemExit`/`KeyboardInterrupt` makes its metric unknown with the reason; the scorer
process is forked anew for the next step, and the run goes on.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from oracle.isolation.bwrap import (
    BwrapMissingError,
    BwrapPolicy,
    bwrap_argv,
    bwrap_path,
    make_hidden_folders,
    unseen,
)
from oracle.scoring import preload
from oracle.scoring.bundle import EvidenceBundle
from oracle.scoring.judge import MetricPlan, StepResult, steps_to_run
from oracle.scoring.protocol import (
    ChannelClosed,
    ChannelError,
    ChannelTimeout,
    receive,
    send,
    send_with_fd,
)

if TYPE_CHECKING:
    from oracle.authoring.task import Task

#: The oracle package's folder (this file is oracle/scoring/sealed.py).
PACKAGE = Path(__file__).resolve().parent.parent

#: Seconds a zygote may take to start (a fresh interpreter importing oracle).
START_LIMIT = 120.0
#: Seconds a scorer may take to load its task file (a generated suite can be slow).
LOAD_LIMIT = 600.0
#: Seconds a scorer may take to read one trial's evidence.
EVIDENCE_LIMIT = 300.0

# Processes are started from one long-lived thread: bubblewrap ends its sandbox when the
# thread that started it ends, and trials may run on short-lived threads.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oracle-scorer-spawn")


class ScorerError(RuntimeError):
    """A scorer process could not be started or answered out of turn."""


def scorer_env(preloaded: Sequence[str] | None = None) -> dict[str, str]:
    """What the scorer's environment keeps: where programs are, the locale, the oracle's own
    settings (task files may read server URLs from them). No credentials of the harness, and
    no pydantic plugins: those are whatever installed distributions declare, not the task's
    code, and finding them reads every distribution's metadata at each zygote's start.
    `preloaded`: the modules its zygote imports (`oracle.scoring.preload`; None: every module
    of the layers loaded here)."""
    keep = {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HOME"}
    env = {k: v for k, v in os.environ.items() if k in keep or k.startswith("ORACLE_")}
    env["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    names = preload.modules() if preloaded is None else preloaded
    env[preload.ENV] = ",".join(names)
    return env


def import_path() -> list[str]:
    """Where this process finds modules (absolute): the scorer imports from the same places."""
    out = []
    for entry in sys.path:
        p = os.path.abspath(entry or os.getcwd())
        if os.path.exists(p) and p not in out:
            out.append(p)
    return out


def base_binds() -> list[Path]:
    """What a scorer needs to see wherever it lives (under ``/tmp`` too): the interpreter,
    its environment, every import path, and the oracle package itself."""
    paths = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        os.path.dirname(os.path.abspath(sys.executable)),
        str(PACKAGE.parent),
        *import_path(),
    }
    return sorted(Path(p) for p in paths if os.path.exists(p))


def bubblewrap_usable() -> str | None:
    """Why bubblewrap cannot contain a scorer here, or None where it can."""
    try:
        bwrap_path()
    except BwrapMissingError as exc:
        return str(exc)
    return None


class Zygote:
    """A fresh interpreter that imports oracle once and forks scorers on request."""

    def __init__(
        self,
        readable: Sequence[Path],
        hidden: Sequence[Path],
        *,
        bubblewrap: bool,
        preloaded: Sequence[str] | None = None,
    ) -> None:
        self.readable = tuple(readable)
        self.hidden = tuple(hidden)
        self.bubblewrap = bubblewrap
        #: The modules it imports before its first fork (None: every one of the layers
        #: loaded here; `oracle.scoring.preload`).
        self.preloaded = None if preloaded is None else tuple(preloaded)
        #: The container image the scorers run in, by digest (None: on this host).
        self.image: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._lock = threading.Lock()
        self._stderr: collections.deque[bytes] = collections.deque(maxlen=50)

    @property
    def isolation(self) -> str:
        return "bubblewrap" if self.bubblewrap else "process"

    @functools.cached_property
    def policy(self) -> BwrapPolicy:
        """What the zygote and its scorers see under bubblewrap."""
        import tempfile

        from oracle.base.signing import default_key_folder

        # Every temporary folder (sandboxes, captures) and the default key folder too.
        hidden = (*self.hidden, Path(tempfile.gettempdir()))
        keys = default_key_folder()
        if keys.is_dir():
            hidden = (*hidden, keys)
        return BwrapPolicy(
            readable=self.readable, hidden=hidden, workdir=Path("/"), extra=("--unshare-net",)
        )

    def sees(self, path: Path) -> bool:
        """Whether a scorer of this zygote can read `path`."""
        return not self.bubblewrap or unseen(self.policy, path) is None

    def layout(self) -> tuple[str, ...] | None:
        """The sandbox its scorers run in, as bubblewrap is told to build it. Zygotes of one
        layout show their scorers the very same files, whatever hidden folders each was
        started for: a hidden folder inside the temporary folder (hidden as a whole) with
        nothing bound back in between gets no mount of its own. None where the scorers are
        not contained."""
        if not self.bubblewrap:
            return None
        return tuple(bwrap_argv(self.policy, ["-"]))

    def start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        command = [
            sys.executable,
            "-I",
            "-B",
            "-m",
            "oracle.scoring.worker",
            str(theirs.fileno()),
        ]
        argv = command
        if self.bubblewrap:
            make_hidden_folders(self.policy)
            argv = bwrap_argv(self.policy, command)
        try:
            self._proc = _SPAWNER.submit(
                subprocess.Popen,
                argv,
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=scorer_env(self.preloaded),
                cwd="/",
                start_new_session=True,
            ).result()
        except OSError as exc:
            ours.close()
            raise ScorerError(f"the scorer could not be started: {exc}") from exc
        finally:
            theirs.close()
        self._control = ours
        threading.Thread(target=self._drain, daemon=True, name="oracle-scorer-stderr").start()
        try:
            header, _ = receive(ours, time.monotonic() + START_LIMIT)
        except ChannelError as exc:
            self.close()
            raise ScorerError(f"the scorer did not start: {exc}{self._tail()}") from exc
        if header.get("op") != "ready":
            self.close()
            raise ScorerError(f"the scorer answered {header!r} instead of starting")

    def _drain(self) -> None:
        proc = self._proc
        if proc is None or proc.stderr is None:
            return
        for line in proc.stderr:
            self._stderr.append(line[:500])

    def _tail(self) -> str:
        lines = b"".join(self._stderr).decode("utf-8", "replace").strip()
        return f" (it wrote: {lines[-1500:]})" if lines else ""

    def _ask(self, header: dict[str, object], fd: int | None = None) -> dict[str, object]:
        if self._control is None:
            raise ScorerError("the scorer's zygote is not running")
        with self._lock:
            try:
                if fd is None:
                    send(self._control, header)
                else:
                    send_with_fd(self._control, header, fd)
                answer, _ = receive(self._control, time.monotonic() + START_LIMIT)
            except ChannelError as exc:
                why = f"the scorer's zygote stopped answering: {exc}{self._tail()}"
                raise ScorerError(why) from exc
        return answer

    def fork(self, task_file: Path) -> tuple[int, socket.socket]:
        """A new scorer for `task_file`: ``(pid, channel)``."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            answer = self._ask(
                {"op": "fork", "file": str(task_file), "path": import_path()}, theirs.fileno()
            )
        except ScorerError:
            ours.close()
            raise
        finally:
            theirs.close()
        pid = answer.get("pid")
        if type(pid) is not int:
            ours.close()
            raise ScorerError(f"the scorer's zygote answered {answer!r} to a fork")
        return pid, ours

    def end(self, pid: int) -> str:
        """End scorer `pid` and what it started; how it ended."""
        try:
            return str(self._ask({"op": "kill", "pid": pid}).get("status", "?"))
        except ScorerError as exc:
            return f"could not be asked about ({exc})"

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def close(self) -> None:
        control, self._control = self._control, None
        if control is not None:
            with contextlib.suppress(ChannelError):
                send(control, {"op": "exit"})
            control.close()
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class TaskScorer:
    """One warm scorer process for one task file, forked again when a predicate ends it."""

    def __init__(self, zygote: Zygote, task_file: Path) -> None:
        self.zygote = zygote
        self.task_file = task_file
        self._pid: int | None = None
        self._chan: socket.socket | None = None
        self._digests: dict[str, str] = {}
        self.lock = threading.Lock()

    def _spawn(self) -> str | None:
        """Fork the scorer and wait until its task file is loaded; why not, where it fails."""
        try:
            self._pid, self._chan = self.zygote.fork(self.task_file)
        except ScorerError as exc:
            return str(exc)
        try:
            ready, _ = receive(self._chan, time.monotonic() + LOAD_LIMIT)
        except ChannelTimeout:
            self._end()
            return f"the scorer did not load {self.task_file} within {LOAD_LIMIT:g} s"
        except ChannelError as exc:
            how = self._end()
            return f"the scorer ended while loading {self.task_file} (it {how}; {exc})"
        if ready.get("op") != "ready":
            self._end()
            return f"the scorer answered {ready!r} instead of loading {self.task_file}"
        errors = ready.get("errors") or []
        if errors and not ready.get("tasks"):
            self._end()
            return f"the scorer could not load {self.task_file}: " + "; ".join(map(str, errors))
        return None

    def _end(self) -> str:
        pid, self._pid = self._pid, None
        chan, self._chan = self._chan, None
        if chan is not None:
            chan.close()
        return self.zygote.end(pid) if pid is not None else "was not running"

    def _load(self, task: Task, bundle: EvidenceBundle, digest: str) -> str | None:
        """Hand the scorer one trial's evidence; why not, where it cannot take it."""
        if self._chan is None:
            why = self._spawn()
            if why is not None:
                return why
        assert self._chan is not None
        names, blobs = bundle.blobs()
        try:
            send(
                self._chan,
                {"op": "evidence", "task": task.name, "digest": digest, "names": names},
                blobs,
            )
            answer, _ = receive(self._chan, time.monotonic() + EVIDENCE_LIMIT)
        except ChannelTimeout:
            self._end()
            return f"the scorer did not read the evidence within {EVIDENCE_LIMIT:g} s"
        except ChannelError as exc:
            how = self._end()
            return f"the scorer ended while reading the evidence (it {how}; {exc})"
        if answer.get("ok") is True:
            return None
        if answer.get("error") == "digest":
            return (
                f"task {task.name!r} changed on disk after it was loaded: the scorer loaded "
                f"{answer.get('digest')}, the trial ran {digest}"
            )
        return str(answer.get("error") or f"the scorer answered {answer!r}")

    def judge(
        self,
        task: Task,
        bundle: EvidenceBundle,
        plans: Sequence[MetricPlan],
        refused: Mapping[str, str],
        digest: str,
    ) -> list[StepResult]:
        """Every step of `plans` on `bundle`, each within its time limit."""
        done: list[StepResult] = []
        steps = steps_to_run(plans, refused)
        loaded = False
        for i, step in enumerate(steps):
            if not loaded:
                why = self._load(task, bundle, digest)
                if why is not None:
                    done += [StepResult.failed(s, why, contained=False) for s in steps[i:]]
                    return done
                loaded = True
            assert self._chan is not None
            request = {
                "op": "run",
                "metric": step.metric,
                "index": step.index,
                "name": step.name,
                "timeout": step.timeout,
            }
            try:
                send(self._chan, request)
                answer, _ = receive(self._chan, time.monotonic() + step.timeout)
            except ChannelTimeout:
                self._end()
                loaded = False
                why = f"predicate {step.name!r} ran past {step.timeout:g} s"
                done.append(StepResult.failed(step, why, contained=True))
                continue
            except (ChannelClosed, ChannelError) as exc:
                how = self._end()
                loaded = False
                why = f"predicate {step.name!r} ended the scorer process (it {how})"
                if not isinstance(exc, ChannelClosed):
                    why += f": {exc}"
                done.append(StepResult.failed(step, why, contained=True))
                continue
            done.append(StepResult.from_json(step, answer))
        return done

    def warm(self) -> None:
        """Fork the scorer and load its task file now, if it is not running."""
        with self.lock:
            if self._chan is None:
                self._spawn()

    def close(self) -> None:
        self._end()


def loaded_digest(task: Task) -> str:
    """The digest of `task` as this process loaded it (computed once per task object)."""
    from oracle.authoring.versions import task_digest

    cached: str | None = getattr(task, "_oracle_digest", None)
    if cached is None:
        cached = task_digest(task)
        object.__setattr__(task, "_oracle_digest", cached)
    return cached
