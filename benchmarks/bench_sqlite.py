"""SQLite: snapshot + diff of a 100,000 × 20 table with 1% of its rows changed.

Two database files hold the two states: ``before.sqlite``, and ``after.sqlite``, a copy of it
in which 1,000 rows had one REAL column changed. Every contender compares these same two files.

- ours: the after snapshot plus the diff, given a before snapshot taken earlier by the same
  sink: one sink observes ``live.sqlite``, which holds the before state when the before snapshot
  is taken and the after state (put in place as a fixture's reset does) for the after snapshot,
  so the after snapshot reads only the pages that changed (``oracle.sinks.sqlite_pages``);
  ``ours_full``: fresh sinks, before snapshot + after snapshot + diff, every row read;
- deepdiff_full_dump: both tables read with sqlite3 into ``{id: {column: value}}``, then
  ``DeepDiff(before, after)``;
- raw_sqlite3_read (the floor): one ``SELECT * FROM t``, fetchall, on the after file;
  raw_sqlite3_read_both: the same on both files, the floor for ``ours_full``.
"""

from __future__ import annotations

import cProfile
import os
import random
import shutil
import sqlite3
import string
from pathlib import Path
from typing import Any

from common import (
    Result,
    Stopwatch,
    Timing,
    measure,
    measure_call,
    profile_call,
    repeats_of,
    result,
    scratch,
    sized,
)
from deepdiff import DeepDiff

from oracle.evidence.snapshot import Snapshot
from oracle.sinks.sql import SqlDiff, SqlSink

NAME = "sqlite snapshot+diff 100k x 20, 1% changed"
GOAL = "≤ 0.5× raw_sqlite3_read"

ROWS = 100_000
TEXT_COLUMNS = 10
REAL_COLUMNS = 9
CHANGED = 1_000
CHANGED_COLUMN = "c02"  # a REAL column
SEED = 20240601

REPEATS_OURS = 5
REPEATS_OURS_FULL = 3  # over a second each
REPEATS_RAW = 5
REPEATS_DEEPDIFF = 1  # tens of seconds
QUICK_ROWS = 10_000


def _columns() -> list[tuple[str, str]]:
    """c01..c19, alternating TEXT and REAL (10 TEXT, 9 REAL)."""
    out = []
    for i in range(1, TEXT_COLUMNS + REAL_COLUMNS + 1):
        out.append((f"c{i:02d}", "TEXT" if i % 2 else "REAL"))
    return out


def _words(rng: random.Random, n: int) -> list[str]:
    words: set[str] = set()
    while len(words) < n:
        w = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 10)))
        if "null" not in w:
            words.add(w)
    return sorted(words)


def make_databases(
    work: Path, n_rows: int = ROWS, n_changed: int = CHANGED
) -> tuple[Path, Path, list[int]]:
    """Write before.sqlite and after.sqlite; return their paths and the changed ids."""
    rng = random.Random(SEED)
    words = _words(rng, 5_000)
    cols = _columns()
    before, after = work / "before.sqlite", work / "after.sqlite"
    con = sqlite3.connect(before)
    try:
        ddl = ", ".join(f"{n} {t}" for n, t in cols)
        con.execute(f"CREATE TABLE t (id INTEGER PRIMARY KEY, {ddl})")
        text = [t == "TEXT" for _, t in cols]
        rows = (
            (
                i,
                *(
                    f"{rng.choice(words)} {rng.choice(words)} {rng.randrange(1_000_000)}"
                    if is_text
                    else round(rng.uniform(-1e6, 1e6), 4)
                    for is_text in text
                ),
            )
            for i in range(1, n_rows + 1)
        )
        marks = ", ".join("?" * (len(cols) + 1))
        with con:
            con.executemany(f"INSERT INTO t VALUES ({marks})", rows)
    finally:
        con.close()
    shutil.copyfile(before, after)
    changed = sorted(rng.sample(range(1, n_rows + 1), n_changed))
    con = sqlite3.connect(after)
    try:
        with con:
            con.executemany(
                f"UPDATE t SET {CHANGED_COLUMN} = {CHANGED_COLUMN} + 0.5 WHERE id = ?",
                [(i,) for i in changed],
            )
    finally:
        con.close()
    return before, after, changed


def _put(source: Path, target: Path) -> None:
    """`target` replaced by a copy of `source`, the way a fixture's reset puts a seed in place."""
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def _url(path: Path) -> str:
    return f"sqlite:///file:{path}?mode=ro&uri=true"


def _connect_ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def raw_read(path: Path) -> list[Any]:
    """The floor: every row of the table, read once with the raw driver."""
    con = _connect_ro(path)
    try:
        return con.execute("SELECT * FROM t").fetchall()
    finally:
        con.close()


def _dump(path: Path) -> dict[int, dict[str, Any]]:
    con = _connect_ro(path)
    try:
        cur = con.execute("SELECT * FROM t")
        names = [d[0] for d in cur.description]
        return {row[0]: dict(zip(names, row, strict=True)) for row in cur}
    finally:
        con.close()


def deepdiff_full_dump(before: Path, after: Path) -> DeepDiff:
    return DeepDiff(_dump(before), _dump(after))


def _check_ours(d: SqlDiff, changed: list[int]) -> None:
    rows, n = d.changed("t"), len(changed)
    assert len(rows) == n, f"ours reports {len(rows)} changed rows, expected {n}"
    assert sorted(r.key[0] for r in rows) == changed, "ours reports other rows than were changed"
    assert all(set(r.fields) == {CHANGED_COLUMN} for r in rows), "ours reports other columns"
    assert not d.added("t") and not d.removed("t"), "ours reports added or removed rows"
    assert len(d.changes) == n, f"ours reports {len(d.changes)} changes in all"


def _check_deepdiff(dd: DeepDiff, changed: list[int]) -> None:
    values = dd.get("values_changed", {})
    assert set(dd.keys()) == {"values_changed"}, f"deepdiff reports {sorted(dd.keys())}"
    expected = {f"root[{i}]['{CHANGED_COLUMN}']" for i in changed}
    assert set(values) == expected, "deepdiff reports other changes than were made"


def run(profiler: cProfile.Profile | None = None) -> Result:
    n_rows = sized(ROWS, QUICK_ROWS)
    n_changed = n_rows * CHANGED // ROWS
    reps_raw, reps_ours = repeats_of(REPEATS_RAW), repeats_of(REPEATS_OURS)
    reps_full, reps_deep = repeats_of(REPEATS_OURS_FULL), repeats_of(REPEATS_DEEPDIFF)
    with scratch("sqlite") as work:
        before_path, after_path, changed = make_databases(work, n_rows, n_changed)
        before_url, after_url = _url(before_path), _url(after_path)
        file_bytes = before_path.stat().st_size

        live = work / "live.sqlite"
        live_url = _url(live)

        # Warm up: page cache, imports, SQLAlchemy's first-use costs.
        raw_read(before_path)
        raw_read(after_path)
        _put(before_path, live)
        sink = SqlSink("db", live_url)
        before = sink.snapshot()
        _put(after_path, live)
        _check_ours(sink.diff(before, sink.snapshot()), changed)
        if sink.fallback is not None:
            raise AssertionError(f"ours read every row: {sink.fallback}")

        last: dict[str, Any] = {}

        def ours_once(sw: Stopwatch) -> None:
            sink.base = before.state  # every repetition compares with the before snapshot
            with sw.running():
                after = sink.snapshot()
                d = sink.diff(before, after)
            last["ours"] = d
            last["read"] = sink.last_read
            last["fallback"] = sink.fallback

        # Each sample of ours next to one of its floor: the machine's load moves between them.
        raw, ours = Timing(), Timing()
        for n in range(max(reps_raw, reps_ours)):
            if n < reps_raw:
                raw.samples += measure_call(lambda: raw_read(after_path), 1).samples
            if n < reps_ours:
                ours.samples += measure(ours_once, 1).samples
        _check_ours(last.pop("ours"), changed)
        ours_read = last.pop("read")
        if last.pop("fallback") is not None:
            raise AssertionError("ours read every row")

        def ours_full_once(sw: Stopwatch) -> None:
            sb, sa = SqlSink("db", before_url), SqlSink("db", after_url)
            snaps: list[Snapshot] = []
            with sw.running():
                snaps.append(sb.snapshot())
                snaps.append(sa.snapshot())
                d = sa.diff(snaps[0], snaps[1])
            sb.close()
            sa.close()
            last["full"] = d

        raw_both, ours_full = Timing(), Timing()
        for n in range(max(reps_raw, reps_full)):
            if n < reps_raw:
                raw_both.samples += measure_call(
                    lambda: (raw_read(before_path), raw_read(after_path)), 1
                ).samples
            if n < reps_full:
                ours_full.samples += measure(ours_full_once, 1).samples
        _check_ours(last.pop("full"), changed)

        def deepdiff_once(sw: Stopwatch) -> None:
            with sw.running():
                dd = deepdiff_full_dump(before_path, after_path)
            last["deepdiff"] = dd

        deep = measure(deepdiff_once, reps_deep)
        _check_deepdiff(last.pop("deepdiff"), changed)

        def ours_profiled() -> None:
            sink.base = before.state
            sink.diff(before, sink.snapshot())

        profile_call(ours_profiled, profiler)
        sink.close()

    checks = {
        "≤ 0.5× raw_sqlite3_read": ours.median <= 0.5 * raw.median,
        "≥30× faster than deepdiff_full_dump": ours.median * 30 <= deep.median,
        # The whole trial's cost (both snapshots) against the floor of reading both states.
        "both snapshots: ≥30× faster than deepdiff_full_dump": ours_full.median * 30 <= deep.median,
        "both snapshots: within 3× of raw_sqlite3_read_both": ours_full.median
        <= 3 * raw_both.median,
    }
    return result(
        NAME,
        goal=GOAL,
        ours=ours,
        baselines={
            "deepdiff_full_dump": deep,
            "raw_sqlite3_read": raw,
            "raw_sqlite3_read_both": raw_both,
        },
        checks=checks,
        extra={"ours_full": ours_full},
        params={
            "rows": n_rows,
            "columns": 1 + TEXT_COLUMNS + REAL_COLUMNS,
            "text_columns": TEXT_COLUMNS,
            "real_columns": REAL_COLUMNS,
            "changed_rows": n_changed,
            "changed_column": CHANGED_COLUMN,
            "file_bytes": file_bytes,
            "ours_read": ours_read,
        },
        notes=(
            "ours = after snapshot + diff given an earlier before snapshot (one SqlSink on "
            "live.sqlite, read-only URI, whose before snapshot is its base: it reads the rows "
            "of changed pages only; ours_read counts them); ours_full = fresh SqlSinks: before "
            "snapshot + after snapshot + "
            "diff; deepdiff_full_dump reads both files into {id: {col: value}} and diffs; "
            "raw_sqlite3_read = SELECT * FROM t, fetchall, on the after file; "
            "raw_sqlite3_read_both = the same on both files (the floor for ours_full). "
            "Warm page cache."
        ),
    )
