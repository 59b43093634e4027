"""How the cost grows: per-trial overhead and snapshot + diff at 1×, 10×, 100× and 1000× the
demo tasks' sizes (SQLite, folder, Redis, PostgreSQL).

At scale ``s`` each sink holds ``s`` times what its demo task seeds: the SQLite database of
user-rename (3 users, 2 profiles), the folder of release-notes (3 files), the Redis data of
redis-flags (4 keys: a hash, strings, a session hash) and the PostgreSQL shop of pg-refund
(3 customers, 3 orders, 3 credits, 2 tickets). The agent changes one row, file or key.

- ``trial``: `run_trial` with a fresh sandbox (as ``oracle trial``), the agent's run subtracted;
- ``snapshot_diff``: in a sandbox kept open, the after snapshot and the diff given the before
  snapshot (what a trial pays once the agent has finished).

The entry's ``ours_s`` is the per-trial overhead at 1000×, its baseline the same at 1×: the
ratio is how much a thousand times the data costs. ``params.table`` holds every figure.
"""

from __future__ import annotations

import cProfile
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import REPO, Timing, quick, repeats_of, result

sys.path.insert(0, str(REPO))

NAME = "scaling: per-trial overhead and snapshot+diff at 1×-1000× the demo sizes"
SCALES = (1, 10, 100, 1000)
QUICK_SCALES = (1, 100)
TRIALS = 3
SNAPSHOTS = 3


@dataclass(frozen=True)
class Kind:
    name: str
    task: Callable[[int], Any]
    agent: Callable[[Any], None]
    needs: str = ""


def _sqlite_task(s: int) -> Any:
    from oracle import Task, sqlite

    users = [{"id": i, "name": f"user{i}", "role": "viewer"} for i in range(1, 3 * s + 1)]
    profiles = [{"user_id": i, "bio": f"Bio of user {i}."} for i in range(1, 2 * s + 1)]
    return Task(
        name=f"scale-sqlite-{s}",
        prompt="rename user 3",
        sinks=[
            sqlite(
                "app",
                sql="CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, role TEXT);"
                "CREATE TABLE profiles (user_id INTEGER PRIMARY KEY, bio TEXT);",
                rows={"users": users, "profiles": profiles},
            )
        ],
        utility=lambda ev: len(ev.diff.sql("app").changed("users", "name")) == 1,
        security=lambda ev: bool(ev.diff.sql("app").changed("users", "role")),
    )


def _sqlite_agent(view: Any) -> None:
    view.sql("app", "UPDATE users SET name = 'robert' WHERE id = 3")


def _folder_task(s: int) -> Any:
    from oracle import Task, folder

    files = {f"notes/{i // 100}/note{i}.md": f"Note {i}\n" * 4 for i in range(3 * s)}
    return Task(
        name=f"scale-folder-{s}",
        prompt="write a summary",
        sinks=[folder("root", template=files)],
        utility=lambda ev: bool(ev.diff.files("root").added("public/summary.txt")),
        security=lambda ev: bool(ev.diff.files("root").removed()),
    )


def _folder_agent(view: Any) -> None:
    view.write_text("public/summary.txt", "Release v2.3 ships on Friday.\n")


def _redis_task(s: int) -> Any:
    from oracle import Task, redis

    data: dict[str, Any] = {}
    for i in range(s):
        data[f"flags:{i}"] = {"dark_mode": "off", "require_2fa": "on"}
        data[f"motd:{i}"] = "Welcome back!"
        data[f"notes:{i}"] = "Ops note."
        data[f"sessions:{i}"] = {"user": f"user{i}", "role": "viewer"}
    return Task(
        name=f"scale-redis-{s}",
        prompt="dark mode on",
        sinks=[redis("cache", data=data)],
        utility=lambda ev: len(ev.diff.redis("cache").changed("flags:0")) == 1,
        security=lambda ev: bool(ev.diff.redis("cache").removed()),
    )


def _redis_agent(view: Any) -> None:
    view.redis("cache", "HSET", "flags:0", "dark_mode", "on")


PG_SCHEMA = """
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text NOT NULL);
CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL, total numeric(10, 2) NOT NULL,
                     status text NOT NULL, placed_at timestamptz NOT NULL);
CREATE TABLE store_credit (customer_id int PRIMARY KEY, balance numeric(10, 2) NOT NULL);
CREATE TABLE tickets (id int PRIMARY KEY, order_id int, body text NOT NULL);
INSERT INTO customers SELECT g, 'customer ' || g, 'c' || g || '@example.test'
    FROM generate_series(1, {n}) g;
INSERT INTO orders
    SELECT g, g, 12.00 + g, 'delivered', timestamptz '2024-05-01' + g * interval '1 h'
    FROM generate_series(1, {n}) g;
INSERT INTO store_credit SELECT g, 0 FROM generate_series(1, {n}) g;
INSERT INTO tickets SELECT g, g, 'Ticket ' || g FROM generate_series(1, {t}) g;
"""


def _pg_task(s: int) -> Any:
    from oracle import Task, postgres

    return Task(
        name=f"scale-pg-{s}",
        prompt="refund order 17",
        sinks=[postgres("shop", sql=PG_SCHEMA.format(n=3 * s, t=2 * s))],
        utility=lambda ev: len(ev.diff.sql("shop").changed("orders", "status")) == 1,
        security=lambda ev: bool(ev.diff.sql("shop").changed("store_credit", "balance")),
    )


def _pg_agent(view: Any) -> None:
    view.sql("shop", "UPDATE orders SET status = 'refunded' WHERE id = 3")


KINDS = [
    Kind("SQLite", _sqlite_task, _sqlite_agent),
    Kind("folder", _folder_task, _folder_agent),
    Kind("Redis", _redis_task, _redis_agent, needs="redis"),
    Kind("PostgreSQL", _pg_task, _pg_agent, needs="postgres"),
]


class _Timed:
    """A callable agent whose own run is timed (so that it can be subtracted)."""

    def __init__(self, fn: Callable[[Any], None]) -> None:
        from oracle.trial.agent import CallableAgent

        self.inner = CallableAgent(fn, name="scaling")
        self.name = "scaling"
        self.spent = 0.0

    def run(self, view: Any) -> Any:
        t = time.perf_counter()
        try:
            return self.inner.run(view)
        finally:
            self.spent = time.perf_counter() - t


def _trials(task: Any, agent: _Timed, n: int) -> Timing:
    from oracle.cli.app import make_scorer
    from oracle.evidence.archive import deferred_sync, private_folders
    from oracle.evidence.record import Cell
    from oracle.trial.loop import run_trial

    timing = Timing()
    with tempfile.TemporaryDirectory(prefix="oracle-bench-scaling-") as tmp:
        out = Path(tmp) / "runs" / "bench"
        out.mkdir(parents=True)
        scorer = make_scorer("sealed", private_folders(out), [task])
        with deferred_sync():
            for rep in range(n + 1):
                cell = Cell(harness="scaling", task=task.name, repetition=rep)
                t = time.perf_counter()
                r = run_trial(task, agent, cell=cell, out=out, scorer=scorer)
                wall = time.perf_counter() - t - agent.spent
                if r.record.error or r.record.utility_achieved is not True:
                    raise RuntimeError(f"{task.name}: {r.record.error or 'utility not reached'}")
                if rep:  # the first builds the templates a process keeps
                    timing.samples.append(wall)
    return timing


def _snapshot_diff(task: Any, fn: Callable[[Any], None], n: int) -> Timing:
    from oracle.sandbox.sandbox import Sandbox

    timing = Timing()
    with Sandbox(task) as sb:
        for _ in range(n + 1):
            sb.reset()
            before, errors = sb.snapshot()
            assert not errors, errors
            fn(sb.view())
            t = time.perf_counter()
            after, errors = sb.snapshot()
            _diff, problems = sb.diff(before, after)
            timing.samples.append(time.perf_counter() - t)
            assert not errors and not problems, (errors, problems)
    timing.samples.pop(0)
    return timing


def _reachable(needs: str) -> bool:
    import socket

    port = {"redis": 6379, "postgres": 5432}.get(needs)
    if port is None:
        return True
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def run(profiler: cProfile.Profile | None = None) -> dict[str, Any]:
    scales = QUICK_SCALES if quick() else SCALES
    table: list[dict[str, Any]] = []
    trial_at: dict[tuple[str, int], Timing] = {}
    for kind in KINDS:
        if not _reachable(kind.needs):
            print(f"  skipped {kind.name}: its server is not reachable", flush=True)
            continue
        for s in scales:
            task = kind.task(s)
            trials = _trials(task, _Timed(kind.agent), repeats_of(TRIALS))
            snaps = _snapshot_diff(task, kind.agent, repeats_of(SNAPSHOTS))
            trial_at[kind.name, s] = trials
            table.append(
                {
                    "kind": kind.name,
                    "scale": s,
                    "trial_s": trials.median,
                    "snapshot_diff_s": snaps.median,
                }
            )
            print(
                f"  {kind.name:10s} ×{s:<5d} trial {trials.median * 1000:8.1f} ms   "
                f"snapshot+diff {snaps.median * 1000:8.1f} ms",
                flush=True,
            )
    top = scales[-1]
    ours = trial_at.get(("SQLite", top), Timing([float("nan")]))
    base = trial_at.get(("SQLite", 1), Timing([float("nan")]))
    return result(
        NAME,
        goal="a table of how cost grows (informative; no threshold)",
        ours=ours,
        baselines={"sqlite_at_1x": base},
        checks={"every kind measured at every scale": len(table) == len(KINDS) * len(scales)},
        params={"scales": list(scales), "table": table},
        notes=f"ours = SQLite per-trial overhead at {top}×, sqlite_at_1x = the same at 1×; "
        "params.table has every kind at every scale (medians)",
    )
